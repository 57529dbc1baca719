"""core.fit (first fit) and core.evidence (the next move by the failure's evidence)."""

from __future__ import annotations

import dataclasses

import pytest

from dsguard.core.classify import FailureKind
from dsguard.core.estimate import DsBuffers, ModelShape, Regime, estimate
from dsguard.core.evidence import MoveEvidence, OomFigures, buffer_bound, choose_move, parse_oom
from dsguard.core.fit import FitInputs, KnownOutcome, plan_fit, reachable, relative_step_time
from dsguard.core.ladder import PolicyConfig, Relaunch, decide
from dsguard.core.rungs import RungContext
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload
from dsguard.job.model import HOST_OOM_RUNGS, OOM_RUNGS, Ladder, Limits

SHAPE = ModelShape(
    hidden_size=2048, num_layers=22, num_heads=32, intermediate_size=5632, vocab_size=32000,
    num_kv_heads=4, max_position=2048,
)  # fmt: skip
GPU = Regime("gpu", world_size=1, dtype_bytes=2, buffers=DsBuffers(50_000_000, 50_000_000))
CTX = RungContext(
    min_micro_batch_size=1, min_max_length=256, flags=dict(DEFAULT_FLAGS), has_deepspeed=True,
    can_start_phase=True, exact_zero_transfer=True,
)  # fmt: skip
START = Knobs(16, 1, max_length=2048, zero_stage=2)
GIB = 2**30


def _inputs(available: int, **kw: object) -> FitInputs:
    return FitInputs(
        shape=SHAPE, regime=GPU, available_bytes=available,
        rungs=(*OOM_RUNGS, *HOST_OOM_RUNGS), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# -- first fit ------------------------------------------------------------------------------


def test_reachable_configs_keep_the_global_batch_and_never_change_learning() -> None:
    found = reachable(START, OOM_RUNGS, CTX)
    assert found[0] == ((), START)
    assert len(found) > 20
    for path, k in found:
        assert k.global_batch(1) == 16
        assert "max_length" not in path and "lora" not in path
        assert k.max_length == 2048 and not k.lora


def test_start_that_fits_is_kept() -> None:
    plan = plan_fit(START, CTX, _inputs(10_000 * GIB))
    assert plan.chosen is None and "start config is predicted to fit" in plan.note
    assert plan.candidates[0].fits


def test_first_fit_is_the_fastest_fitting_config() -> None:
    """80 GiB: micro 16 at 2048 tokens does not fit; the chosen config fits with the margin
    and no other fitting config is predicted faster."""
    plan = plan_fit(START, CTX, _inputs(80 * GIB))
    assert not plan.candidates[0].fits
    chosen = plan.chosen
    assert chosen is not None and chosen.fits
    assert chosen.estimate.peak_bytes <= 80 * GIB * 0.9
    assert all(c.step_time >= chosen.step_time for c in plan.candidates if c.fits)
    assert chosen.knobs.global_batch(1) == 16


def test_nothing_fits_keeps_the_start_and_says_so() -> None:
    plan = plan_fit(START, CTX, _inputs(1 * GIB))
    assert plan.chosen is None and "no config" in plan.note


def test_a_tighter_budget_never_plans_a_faster_config() -> None:
    times = []
    for gib in (200, 80, 40, 24, 16):
        chosen = plan_fit(START, CTX, _inputs(gib * GIB)).chosen
        times.append(1.0 if chosen is None else chosen.step_time)
    assert times == sorted(times)


def test_a_resumed_checkpoint_rules_out_stage_changes() -> None:
    ctx = RungContext(1, 256, dict(DEFAULT_FLAGS), has_deepspeed=True, can_start_phase=True)
    fresh = reachable(START, OOM_RUNGS, ctx, allow_new_phase=True)
    resumed = reachable(START, OOM_RUNGS, ctx, allow_new_phase=False)
    assert any(k.zero_stage == 3 for _, k in fresh)
    assert all(k.zero_stage == 2 for _, k in resumed)


def test_step_time_model_orders_the_moves() -> None:
    gc = START.replace(gradient_checkpointing=True)
    off = START.replace(offload=Offload.OPTIMIZER)
    assert 1.0 < relative_step_time(START, gc, "gpu") < relative_step_time(START, off, "gpu")
    half = START.replace(micro_batch_size=8, gradient_accumulation_steps=2)
    assert relative_step_time(START, half, "cpu") == 1.0 < relative_step_time(START, half, "gpu")


# -- OOM figures ------------------------------------------------------------------------------


OLD_CUDA = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
    "15.78 GiB total capacity; 14.50 GiB already allocated; 10.19 MiB free; 14.71 GiB "
    "reserved in total by PyTorch)"
)
NEW_CUDA = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this "
    "process has 77.90 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by "
    "PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated."
)
CPU = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
    "allocate memory: you tried to allocate 200000000 bytes. Error code 12 (Cannot allocate "
    "memory)"
)


def test_parse_oom_reads_every_format() -> None:
    old = parse_oom(["noise", OLD_CUDA])
    assert old == OomFigures(
        tried_bytes=20 * 2**20, total_bytes=int(15.78 * GIB), free_bytes=int(10.19 * 2**20),
        allocated_bytes=int(14.50 * GIB), reserved_bytes=int(14.71 * GIB),
    )  # fmt: skip
    new = parse_oom([NEW_CUDA])
    assert new is not None
    assert (new.tried_bytes, new.total_bytes, new.free_bytes) == (
        2 * GIB, int(79.15 * GIB), int(1.23 * GIB),
    )  # fmt: skip
    assert new.allocated_bytes == int(75.10 * GIB)
    assert parse_oom([CPU]) == OomFigures(tried_bytes=200_000_000)
    assert parse_oom(["Killed"]) is None


# -- the next move ------------------------------------------------------------------------------


def _predict(r: Regime = GPU):  # type: ignore[no-untyped-def]
    return lambda k: estimate(SHAPE, k, r).peak_bytes


def test_a_bucket_sized_allocation_at_two_micro_batches_takes_ds_buckets_first() -> None:
    fig = OomFigures(tried_bytes=200_000_000)
    once = MoveEvidence(figures=fig, bucket_bytes=(200_000_000,))
    first = choose_move(OOM_RUNGS, START, CTX, once)
    assert first is not None and OOM_RUNGS[first.index] == "micro_batch"  # once proves little
    twice = MoveEvidence(figures=fig, bucket_bytes=(200_000_000,), earlier=((32, 200_000_000),))
    choice = choose_move(OOM_RUNGS, START, CTX, twice)
    assert choice is not None and choice.move.knobs.ds_bucket_divisor == 2
    assert "DeepSpeed buffer" in choice.why and "32, 16" in choice.why


def test_the_same_allocation_at_three_micro_batches_is_not_the_batch() -> None:
    k = Knobs(4, 2, max_length=2048, zero_stage=2)
    once = MoveEvidence(figures=OomFigures(tried_bytes=123_456_789), earlier=((8, 123_456_789),))
    assert buffer_bound(k, once) is None  # one repeat may be a coincidence
    ev = MoveEvidence(
        figures=OomFigures(tried_bytes=123_456_789),
        earlier=((16, 123_456_789), (8, 123_456_789)),
    )
    assert "16, 8, 4" in (buffer_bound(k, ev) or "")
    choice = choose_move(("micro_batch", "gradient_checkpointing", "zero3"), k, CTX, ev)
    assert choice is not None and choice.move.knobs.gradient_checkpointing
    # A size that shrank with the batch is activations: the micro-batch moves again.
    shrank = MoveEvidence(figures=OomFigures(tried_bytes=60_000_000), earlier=((8, 123_456_789),))
    again = choose_move(("micro_batch", "gradient_checkpointing"), k, CTX, shrank)
    assert again is not None and again.move.knobs.micro_batch_size == 2


def test_a_size_that_survived_smaller_buckets_does_not_take_ds_buckets_again() -> None:
    """The same allocation failed at micro 4, 2 and 1 after the buckets were already halved,
    and it is not a bucket's size: smaller buffers cannot free it, so ds_buckets is not taken
    again (it was, 6 times in a row, in a live warm-store run at micro 1)."""
    k = Knobs(1, 8, max_length=1024, zero_stage=2, ds_bucket_divisor=2)
    ev = MoveEvidence(
        figures=OomFigures(tried_bytes=123_456_789),
        earlier=((4, 123_456_789), (2, 123_456_789)),
        bucket_bytes=(100_000_000,),
    )
    assert buffer_bound(k, ev) is None
    choice = choose_move(("micro_batch", "gradient_checkpointing", "ds_buckets"), k, CTX, ev)
    assert choice is not None and choice.move.knobs.gradient_checkpointing
    assert choice.move.knobs.ds_bucket_divisor == 2
    # The buffer's own size failing again is still the buffer: halving it again can help.
    bucket = MoveEvidence(
        figures=OomFigures(tried_bytes=100_000_000),
        earlier=((2, 100_000_000),),
        bucket_bytes=(100_000_000,),
    )
    assert "DeepSpeed buffer" in (buffer_bound(k, bucket) or "")


def test_evidence_never_takes_a_move_that_cannot_reach_the_script() -> None:
    """The bucket-bound failure asks for ds_buckets, but the buckets have no route (or are
    fixed): the chooser passes over the rung as ``walk`` does, instead of logging a move
    that never happens. Likewise gradient checkpointing with no flag."""
    fig = OomFigures(tried_bytes=200_000_000)
    twice = MoveEvidence(figures=fig, bucket_bytes=(200_000_000,), earlier=((32, 200_000_000),))
    every = frozenset(DEFAULT_FLAGS) | {"zero_stage", "offload", "ds_bucket_divisor", "max_length"}
    for ctx in (
        dataclasses.replace(CTX, delivered=every - {"ds_bucket_divisor"}),
        dataclasses.replace(CTX, delivered=every, fixed=frozenset({"ds_bucket_divisor"})),
    ):
        choice = choose_move(OOM_RUNGS, START, ctx, twice)
        assert choice is not None and OOM_RUNGS[choice.index] != "ds_buckets"
        assert choice.move.knobs.ds_bucket_divisor == 1
    no_gc = dataclasses.replace(CTX, delivered=every - {"gradient_checkpointing"})
    k = START
    for _ in range(20):
        choice = choose_move(OOM_RUNGS, k, no_gc, MoveEvidence(predict=_predict()))
        if choice is None:
            break
        assert not choice.move.knobs.gradient_checkpointing
        k = choice.move.knobs


def test_exact_moves_come_before_max_length_and_lora() -> None:
    """The default ladder lists max_length before zero3; the evidence path takes zero3 (exact)
    once the micro-batch and checkpointing are spent, and LoRA/max_length only at the end."""
    k = Knobs(1, 16, max_length=2048, zero_stage=2, gradient_checkpointing=True)
    seen = []
    for _ in range(20):
        choice = choose_move(OOM_RUNGS, k, CTX, MoveEvidence())
        if choice is None:
            break
        k = choice.move.knobs
        seen.append(OOM_RUNGS[choice.index])
    assert seen.index("zero3") < seen.index("max_length")
    assert seen.index("offload_params") < seen.index("max_length")
    assert seen[-1] == "lora" or seen[-1] == "max_length"


def test_the_cheapest_move_that_saves_enough_wins() -> None:
    """8 GiB short: halving 200 MB buckets cannot save that; checkpointing or a smaller
    micro-batch can. A 20 MiB shortfall: the cheapest saving move at all."""
    big = MoveEvidence(figures=OomFigures(tried_bytes=8 * GIB, free_bytes=0), predict=_predict())
    choice = choose_move(OOM_RUNGS, START, CTX, big)
    assert choice is not None
    assert OOM_RUNGS[choice.index] in ("micro_batch", "gradient_checkpointing")
    small = MoveEvidence(figures=OomFigures(tried_bytes=20 * 2**20, free_bytes=0),
                         predict=_predict())  # fmt: skip
    cheap = choose_move(OOM_RUNGS, START, CTX, small)
    assert cheap is not None and OOM_RUNGS[cheap.index] == "ds_buckets"


def test_moves_predicted_to_save_nothing_are_skipped() -> None:
    """Everything exact is spent but the buckets, which are already below the model's
    largest gathered layer under ZeRO-3: halving them saves nothing, so the move that does
    help (max_length, which changes what is learned) is taken instead of a useless attempt."""
    k = Knobs(1, 16, max_length=2048, zero_stage=3, gradient_checkpointing=True,
              offload=Offload.ALL)  # fmt: skip
    r = Regime("gpu", dtype_bytes=2, buffers=DsBuffers(0, 0, 10, 10))
    ev = MoveEvidence(figures=OomFigures(tried_bytes=1), predict=_predict(r))
    choice = choose_move(OOM_RUNGS, k, CTX, ev)
    assert choice is not None and OOM_RUNGS[choice.index] == "max_length"
    assert any(s.startswith("ds_buckets: predicted to save nothing") for s in choice.skipped)


def _cfg(ladder: Ladder) -> PolicyConfig:
    return PolicyConfig(ladder=ladder, limits=Limits(), ctx=CTX, world_size=1)


def test_an_explicit_ladder_is_walked_as_written_whatever_the_evidence() -> None:
    ev = MoveEvidence(
        figures=OomFigures(tried_bytes=200_000_000), bucket_bytes=(200_000_000,),
        earlier=((32, 200_000_000),),
    )  # fmt: skip
    explicit = Ladder(oom=("micro_batch", "ds_buckets"), explicit=frozenset({"oom"}))
    d = decide(FailureKind.CUDA_OOM, knobs=START, positions={}, history=(), cfg=_cfg(explicit),
               evidence=ev)  # fmt: skip
    assert isinstance(d, Relaunch) and d.rung == "micro_batch"
    default = Ladder(oom=("micro_batch", "ds_buckets"))
    d = decide(FailureKind.CUDA_OOM, knobs=START, positions={}, history=(), cfg=_cfg(default),
               evidence=ev)  # fmt: skip
    assert isinstance(d, Relaunch) and d.rung == "ds_buckets"
    assert "DeepSpeed buffer" in d.reason


@pytest.mark.parametrize("kind", [FailureKind.CUDA_OOM, FailureKind.HOST_OOM])
def test_evidence_never_changes_the_global_batch(kind: FailureKind) -> None:
    k = Knobs(16, 1, max_length=2048, zero_stage=2, dataloader_workers=2)
    pos: dict[str, int] = {}
    ev = MoveEvidence(figures=OomFigures(tried_bytes=GIB), predict=_predict())
    for _ in range(30):
        d = decide(kind, knobs=k, positions=pos, history=(), cfg=_cfg(Ladder()), evidence=ev)
        if not isinstance(d, Relaunch):
            break
        assert d.knobs.global_batch(1) == 16
        k, pos = d.knobs, d.positions


# -- issue 15: a known-good config that fitted at the edge (live P5 S1) --------------------


def _s1() -> tuple[Knobs, RungContext, FitInputs]:
    """P5's S1: the reference trainer's small preset, fp32 ZeRO-2 on CPU, 2 x 5e7-element
    buckets, L=512, start 16x1, RLIMIT_AS 1.54 GiB."""
    shape = ModelShape(256, 4, 8, 688, 264, 8, source="small")
    regime = Regime("cpu", dtype_bytes=4, efficient_attention=False,
                    buffers=DsBuffers(50_000_000, 50_000_000))  # fmt: skip
    ctx = RungContext(1, 256, dict(DEFAULT_FLAGS), has_deepspeed=True, can_start_phase=True,
                      exact_zero_transfer=True)  # fmt: skip
    start = Knobs(16, 1, max_length=512, zero_stage=2, dataloader_workers=0, pin_memory=False)
    return start, ctx, FitInputs(shape, regime, 1_652_555_776,
                                 rungs=(*OOM_RUNGS, *HOST_OOM_RUNGS))  # fmt: skip


def _b(k: Knobs, micro: int, div: int) -> Knobs:
    return k.replace(micro_batch_size=micro, gradient_accumulation_steps=16 // micro,
                     ds_bucket_divisor=div)  # fmt: skip


def test_a_config_that_fitted_at_the_edge_is_started_one_step_safer() -> None:
    """Live P5 S1: the fresh run healed 1x16 by halving the buckets until one fitted (/8,
    after /4 failed on an 8 MiB allocation); the next run of 1x16 /8 ran out of memory, /16
    fitted 4 runs of 4. The halving between /4 and /8 saves ~50 MB, under the 10 % margin
    (165 MB): /8 fitted with less headroom than the plan demands of any estimate."""
    start, ctx, inputs = _s1()
    known = {_b(start, 1, d): KnownOutcome(False) for d in (1, 2, 4)}
    known[_b(start, 1, 8)] = KnownOutcome(True, 3.4)
    plan = plan_fit(start, ctx, inputs, known)
    assert plan.source == "store" and plan.chosen is not None
    assert plan.chosen.knobs == _b(start, 1, 16)
    assert "one ds_buckets step safer" in plan.note
    # /16 measured since: it is not at the edge (/8, one step larger, fitted): kept
    known[_b(start, 1, 16)] = KnownOutcome(True, 6.2)
    plan = plan_fit(start, ctx, inputs, known)
    assert plan.chosen is not None and plan.chosen.knobs == _b(start, 1, 16)
    assert "safer" not in plan.note


def test_a_known_good_config_with_no_failed_neighbour_or_a_large_step_is_trusted() -> None:
    """No failure one step larger, or a failure one step larger by more than the margin:
    the store's config is started as it is."""
    start, ctx, inputs = _s1()
    plan = plan_fit(start, ctx, inputs, {_b(start, 1, 8): KnownOutcome(True, 3.4)})
    assert plan.chosen is not None and plan.chosen.knobs == _b(start, 1, 8)
    # 4x4 -> 2x8 saves more than 10 % of the budget by the estimate: 2x8 is not at the edge
    known = {_b(start, 4, 1): KnownOutcome(False), _b(start, 2, 1): KnownOutcome(True, 5.0)}
    plan = plan_fit(start, ctx, inputs, known)
    assert plan.chosen is not None and plan.chosen.knobs == _b(start, 2, 1)
