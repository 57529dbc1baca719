"""The ladder, rung by rung, and decide(): pure, table-driven, milliseconds."""

from __future__ import annotations

import pytest

from dsguard.core import rungs
from dsguard.core.classify import FailureKind
from dsguard.core.ladder import (
    AttemptRecord,
    GiveUp,
    PolicyConfig,
    Relaunch,
    decide,
    next_delay,
    plan,
)
from dsguard.core.rungs import RungContext
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload
from dsguard.job.model import Ladder, Limits

CTX = RungContext(
    min_micro_batch_size=1,
    min_max_length=512,
    flags=DEFAULT_FLAGS,
    has_deepspeed=True,
    can_start_phase=True,
)


def cfg(
    ladder: Ladder | None = None,
    limits: Limits | None = None,
    ctx: RungContext = CTX,
    world: int = 1,
) -> PolicyConfig:
    return PolicyConfig(ladder or Ladder(), limits or Limits(), ctx, world)


@pytest.mark.parametrize(
    ("micro", "accum", "floor", "expected"),
    [
        (8, 1, 1, (4, 2)),
        (4, 2, 1, (2, 4)),
        (2, 4, 1, (1, 8)),
        (1, 8, 1, None),  # at the floor of 1
        (4, 1, 4, None),  # floor 4 forbids 2
        (6, 1, 1, (3, 2)),
        (5, 1, 1, (1, 5)),  # 2 does not divide 5: the largest divisor below the half
        (6, 2, 1, (3, 4)),
        (10, 3, 1, (5, 6)),
        (7, 3, 2, (3, 7)),  # 21 = 3 x 7
        (3, 1, 2, None),  # only divisor <= 1 is 1 < floor 2
    ],
)
def test_micro_batch_keeps_per_rank_step_batch(
    micro: int, accum: int, floor: int, expected: tuple[int, int] | None
) -> None:
    """Halve (or the largest exact divisor below half); micro x accum never changes."""
    ctx = RungContext(floor, 512, DEFAULT_FLAGS, True, True)
    move = rungs.micro_batch(Knobs(micro_batch_size=micro, gradient_accumulation_steps=accum), ctx)
    if expected is None:
        assert move is None
    else:
        assert move is not None
        got = (move.knobs.micro_batch_size, move.knobs.gradient_accumulation_steps)
        assert got == expected
        assert got[0] * got[1] == micro * accum


@pytest.mark.parametrize(
    ("rung", "knobs", "expect_change", "new_phase"),
    [
        ("gradient_checkpointing", Knobs(8), {"gradient_checkpointing": [False, True]}, False),
        ("gradient_checkpointing", Knobs(8, gradient_checkpointing=True), None, False),
        ("max_length", Knobs(8, max_length=2048), {"max_length": [2048, 1024]}, False),
        ("max_length", Knobs(8, max_length=700), {"max_length": [700, 512]}, False),
        ("max_length", Knobs(8, max_length=512), None, False),
        ("max_length", Knobs(8), None, False),
        ("zero3", Knobs(8, zero_stage=2), {"zero_stage": [2, 3]}, True),
        ("zero3", Knobs(8, zero_stage=3), None, False),
        ("zero3", Knobs(8), None, False),  # no DeepSpeed
        ("offload_optimizer", Knobs(8, zero_stage=2), {"offload": ["none", "optimizer"]}, False),
        (
            "offload_optimizer",
            Knobs(8, zero_stage=0),
            {"zero_stage": [0, 2], "offload": ["none", "optimizer"]},
            True,
        ),
        ("offload_optimizer", Knobs(8, zero_stage=3, offload=Offload.OPTIMIZER), None, False),
        (
            "offload_params",
            Knobs(8, zero_stage=3, offload=Offload.OPTIMIZER),
            {"offload": ["optimizer", "all"]},
            False,
        ),
        (
            "offload_params",
            Knobs(8, zero_stage=2),
            {"zero_stage": [2, 3], "offload": ["none", "all"]},
            True,
        ),
        ("offload_params", Knobs(8, zero_stage=3, offload=Offload.ALL), None, False),
        ("lora", Knobs(8), {"lora": [False, True]}, True),
        ("lora", Knobs(8, lora=True), None, False),
        (
            "dataloader_workers",
            Knobs(8, dataloader_workers=4),
            {"dataloader_workers": [4, 2]},
            False,
        ),
        (
            "dataloader_workers",
            Knobs(8, dataloader_workers=1),
            {"dataloader_workers": [1, 0]},
            False,
        ),
        ("dataloader_workers", Knobs(8, dataloader_workers=0), None, False),
        ("pin_memory", Knobs(8), {"pin_memory": [True, False]}, False),
        ("pin_memory", Knobs(8, pin_memory=False), None, False),
    ],
)
def test_rung_effects(
    rung: str, knobs: Knobs, expect_change: dict[str, list[object]] | None, new_phase: bool
) -> None:
    """Each rung changes exactly its knob(s), flags new phases, and stops at its floor."""
    move = rungs.RUNGS[rung](knobs, CTX if knobs.zero_stage is not None else _no_ds())
    if expect_change is None:
        assert move is None
        return
    assert move is not None
    assert knobs.diff(move.knobs) == expect_change
    assert move.new_phase is new_phase
    assert move.knobs.global_batch(4) == knobs.global_batch(4)


def _no_ds() -> RungContext:
    return RungContext(1, 512, DEFAULT_FLAGS, False, True)


def test_rungs_with_null_flags_are_inert() -> None:
    """A knob the script cannot receive (flag null) is never changed."""
    flags = {**DEFAULT_FLAGS, "gradient_checkpointing": None, "lora": None, "max_length": None}
    ctx = RungContext(1, 512, flags, True, True)
    k = Knobs(8, max_length=2048)
    assert rungs.gradient_checkpointing(k, ctx) is None
    assert rungs.lora(k, ctx) is None
    assert rungs.max_length(k, ctx) is None


def test_new_phase_rungs_refused_without_output_redirect() -> None:
    """Without a way to give the new phase its own output dir, zero3/lora are skipped."""
    ctx = RungContext(1, 512, DEFAULT_FLAGS, True, can_start_phase=False)
    k = Knobs(8, zero_stage=2)
    assert rungs.zero3(k, ctx) is None
    assert rungs.lora(k, ctx) is None
    assert rungs.offload_optimizer(k, ctx) is not None  # same stage: exact resume


def test_decide_repeats_rung_until_floor_then_moves_on() -> None:
    """micro 4 -> 2 -> 1, then gradient checkpointing, then max_length; global batch fixed."""
    c = cfg()
    knobs = Knobs(4, 2, max_length=1024, zero_stage=2)
    positions: dict[str, int] = {}
    seen = []
    for _ in range(4):
        d = decide(FailureKind.CUDA_OOM, knobs=knobs, positions=positions, history=(), cfg=c)
        assert isinstance(d, Relaunch)
        seen.append(d.rung)
        assert d.knobs.global_batch(1) == 8
        knobs, positions = d.knobs, d.positions
    assert seen == ["micro_batch", "micro_batch", "gradient_checkpointing", "max_length"]
    assert knobs.micro_batch_size == 1 and knobs.gradient_accumulation_steps == 8


def test_full_oom_plan_walks_every_rung_in_order() -> None:
    """plan() = repeated decide(): each default rung appears, then the ladder ends."""
    steps = plan(FailureKind.CUDA_OOM, Knobs(2, 1, max_length=1024, zero_stage=2), cfg())
    assert [s.rung for s in steps] == [
        None, "micro_batch", "gradient_checkpointing", "max_length",
        "zero3", "offload_optimizer", "offload_params", *["ds_buckets"] * 6, "lora",
    ]  # fmt: skip
    assert {s.global_batch for s in steps} == {2}
    assert [s.new_phase for s in steps] == [
        False, False, False, False, True, False, False, *[False] * 6, True,
    ]  # fmt: skip


def test_exhausted_ladder_gives_up_with_reason() -> None:
    """Nothing left to give: GiveUp naming the ladder."""
    k = Knobs(
        1, 8, zero_stage=3, offload=Offload.ALL, lora=True, gradient_checkpointing=True,
        ds_bucket_divisor=64,
    )  # fmt: skip
    d = decide(FailureKind.CUDA_OOM, knobs=k, positions={}, history=(), cfg=cfg())
    assert isinstance(d, GiveUp) and "oom ladder is exhausted" in d.reason


def test_host_oom_uses_its_own_ladder() -> None:
    """host_oom: workers 4 -> 2 -> 1 -> 0, pin off, then micro-batch."""
    c = cfg()
    k = Knobs(8, dataloader_workers=4)
    pos: dict[str, int] = {}
    rungs_seen = []
    for _ in range(6):
        d = decide(FailureKind.HOST_OOM, knobs=k, positions=pos, history=(), cfg=c)
        assert isinstance(d, Relaunch)
        rungs_seen.append(d.rung)
        k, pos = d.knobs, d.positions
    assert rungs_seen == ["dataloader_workers"] * 3 + ["pin_memory", "micro_batch", "micro_batch"]
    assert "oom" not in pos


@pytest.mark.parametrize(
    "kind",
    [
        FailureKind.USER_CODE_ERROR,
        FailureKind.DS_CONFIG_ERROR,
        FailureKind.DS_BUILD_ERROR,
        FailureKind.DISK_FULL,
        FailureKind.LOSS_DIVERGENCE,
    ],
)
def test_non_recoverable_kinds_give_up_at_once(kind: FailureKind) -> None:
    """Deterministic failures: no retry."""
    d = decide(kind, knobs=Knobs(8), positions={}, history=[_rec(1, kind)], cfg=cfg())
    assert isinstance(d, GiveUp) and str(kind) in d.reason


def _rec(n: int, kind: FailureKind | None, up: float = 1.0, prog: bool = False) -> AttemptRecord:
    return AttemptRecord(n, kind, up, prog)


@pytest.mark.parametrize(
    ("kind", "budget"),
    [
        (FailureKind.KILLED_EXTERNALLY, 1),
        (FailureKind.NCCL_ERROR, 2),
        (FailureKind.HANG, 3),
        (FailureKind.UNKNOWN, 1),
    ],
)
def test_transient_kinds_retry_within_budget(kind: FailureKind, budget: int) -> None:
    """Same config retried `budget` times in a row without progress, then give up."""
    history: list[AttemptRecord] = []
    for n in range(1, budget + 2):
        history.append(_rec(n, kind))
        d = decide(kind, knobs=Knobs(8), positions={}, history=history, cfg=cfg())
        if n <= budget:
            assert isinstance(d, Relaunch) and d.rung is None and d.changes == {}
        else:
            assert isinstance(d, GiveUp) and "without a new checkpoint" in d.reason


def test_a_retry_the_verdict_says_cannot_help_is_not_spent() -> None:
    """cuda_fatal's same-config retry only where the verdict says an unchanged relaunch can
    help (an illegal address may be the hardware's once; a build without the GPU's
    architecture is not); a checkpoint error's retry quarantines the checkpoint first, so it
    is not unchanged and stays."""
    h = [_rec(1, FailureKind.CUDA_FATAL)]
    d = decide(FailureKind.CUDA_FATAL, knobs=Knobs(8), positions={}, history=h, cfg=cfg())
    assert isinstance(d, Relaunch)
    d = decide(FailureKind.CUDA_FATAL, knobs=Knobs(8), positions={}, history=h, cfg=cfg(),
               retry_helps=False, hint="rebuild for sm_90")  # fmt: skip
    assert isinstance(d, GiveUp) and d.reason.endswith("the same fault; rebuild for sm_90")
    h = [_rec(1, FailureKind.CHECKPOINT_ERROR)]
    d = decide(FailureKind.CHECKPOINT_ERROR, knobs=Knobs(8), positions={}, history=h, cfg=cfg(),
               retry_helps=False)  # fmt: skip
    assert isinstance(d, Relaunch) and d.quarantine_resumed_checkpoint


def test_progress_resets_the_retry_budget() -> None:
    """A new checkpoint between NCCL errors means the job is moving: keep retrying."""
    h = [_rec(1, FailureKind.NCCL_ERROR), _rec(2, FailureKind.NCCL_ERROR),
         _rec(3, FailureKind.NCCL_ERROR, prog=True), _rec(4, FailureKind.NCCL_ERROR)]  # fmt: skip
    d = decide(FailureKind.NCCL_ERROR, knobs=Knobs(8), positions={}, history=h, cfg=cfg())
    assert isinstance(d, Relaunch)
    # Without the progress at attempt 3 the same history exhausts the budget of 2.
    h[2] = _rec(3, FailureKind.NCCL_ERROR)
    d = decide(FailureKind.NCCL_ERROR, knobs=Knobs(8), positions={}, history=h, cfg=cfg())
    assert isinstance(d, GiveUp)


def test_failure_right_after_progress_counts_once() -> None:
    """killed_externally after a new checkpoint: one retry; the retry failing again gives up."""
    h = [_rec(1, FailureKind.KILLED_EXTERNALLY, prog=True)]
    d = decide(FailureKind.KILLED_EXTERNALLY, knobs=Knobs(8), positions={}, history=h, cfg=cfg())
    assert isinstance(d, Relaunch)
    h.append(_rec(2, FailureKind.KILLED_EXTERNALLY))
    d = decide(FailureKind.KILLED_EXTERNALLY, knobs=Knobs(8), positions={}, history=h, cfg=cfg())
    assert isinstance(d, GiveUp)


def test_checkpoint_error_asks_for_quarantine() -> None:
    """A resume that failed to load its checkpoint: set that checkpoint aside and retry."""
    d = decide(
        FailureKind.CHECKPOINT_ERROR, knobs=Knobs(8), positions={},
        history=[_rec(1, FailureKind.CHECKPOINT_ERROR)], cfg=cfg(),
    )  # fmt: skip
    assert isinstance(d, Relaunch) and d.quarantine_resumed_checkpoint


def test_max_attempts_bounds_everything() -> None:
    """Even a ladder with rungs left stops at max_attempts."""
    h = [_rec(n, FailureKind.CUDA_OOM) for n in range(1, 4)]
    d = decide(
        FailureKind.CUDA_OOM, knobs=Knobs(64), positions={}, history=h,
        cfg=cfg(limits=Limits(max_attempts=3)),
    )  # fmt: skip
    assert isinstance(d, GiveUp) and "max_attempts (3)" in d.reason


@pytest.mark.parametrize(
    ("uptimes", "expected"),
    [
        ([], 0.0),
        ([1.0], 5.0),
        ([1.0, 1.0], 10.0),
        ([1.0] * 5, 80.0),
        ([1.0] * 12, 300.0),  # capped
        ([1.0, 1.0, 4000.0], 0.0),  # newest attempt was healthy: streak reset
        ([4000.0, 1.0, 1.0], 10.0),
    ],
)
def test_backoff_doubles_caps_and_resets(uptimes: list[float], expected: float) -> None:
    """next_delay: first * 2^(streak-1), capped, streak broken by a healthy uptime."""
    h = [_rec(i, FailureKind.NCCL_ERROR, up) for i, up in enumerate(uptimes)]
    assert next_delay(h, Limits(backoff_first_s=5, backoff_max_s=300, healthy_uptime_s=1800)) == (
        expected
    )


def test_ladder_moves_do_not_wait() -> None:
    """A deterministic OOM gains nothing from waiting: ladder moves relaunch at once."""
    h = [_rec(n, FailureKind.CUDA_OOM) for n in range(1, 4)]
    d = decide(FailureKind.CUDA_OOM, knobs=Knobs(64), positions={}, history=h, cfg=cfg())
    assert isinstance(d, Relaunch) and d.delay_s == 0.0


def test_world_size_enters_global_batch() -> None:
    """global batch = micro x accum x world, kept across a micro-batch move at world 4."""
    d = decide(FailureKind.CUDA_OOM, knobs=Knobs(6, 2), positions={}, history=(), cfg=cfg(world=4))
    assert isinstance(d, Relaunch)
    assert Knobs(6, 2).global_batch(4) == d.knobs.global_batch(4) == 48


def test_zero_stage_change_is_exact_with_transplant_capability() -> None:
    """With the zero_transplant capability, ZeRO-2 -> 3 resumes exactly: no new phase."""
    ctx = RungContext(1, 512, DEFAULT_FLAGS, True, can_start_phase=False, exact_zero_transfer=True)
    move = rungs.zero3(Knobs(8, zero_stage=2), ctx)
    assert move is not None and move.knobs.zero_stage == 3 and move.new_phase is False
    # ZeRO-0 has no partitioned optimizer state to transplant: still a new phase (refused here).
    assert rungs.offload_optimizer(Knobs(8, zero_stage=0), ctx) is None
    params = rungs.offload_params(Knobs(8, zero_stage=2), ctx)
    assert params is not None and params.new_phase is False
    assert params.knobs.offload is Offload.ALL and params.knobs.zero_stage == 3
