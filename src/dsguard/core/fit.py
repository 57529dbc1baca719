"""First fit: the fastest config the ladder can reach that the estimator says fits (pure).

Without a plan, dsguard finds a fitting config by failing, and each failed attempt of a large
job costs a model load and a DeepSpeed start. Here every config the job's ladders can reach
by moves that keep training exact (micro-batch halvings with accumulation doubled, gradient
checkpointing, ZeRO-3, offload, smaller DeepSpeed buffers; not ``max_length`` or LoRA, which
change what is learned) is estimated (:mod:`dsguard.core.estimate`) against the memory
available with a safety margin, and the one with the lowest relative step time wins.

The step-time model is coarse and documented where it is defined: its only job is to order
configs that all fit, so a slower-but-fitting config is never preferred to a faster one by
accident of ladder order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dsguard.core.estimate import Estimate, ModelShape, Regime, estimate
from dsguard.core.rungs import RUNGS, RungContext
from dsguard.job.knobs import Knobs, Offload

#: Rungs that keep the training exact (same samples, same optimisation, same weights).
EXACT_RUNGS: frozenset[str] = frozenset(
    {
        "micro_batch", "gradient_checkpointing", "zero3", "offload_optimizer",
        "offload_params", "ds_buckets", "dataloader_workers", "pin_memory",
    }
)  # fmt: skip
#: Exact rungs whose effect the estimator models (DataLoader workers and pinned batches are
#: host memory it does not), on an accelerator; on CPU, offload moves nothing anywhere.
FIT_RUNGS: dict[str, frozenset[str]] = {
    "gpu": EXACT_RUNGS - {"dataloader_workers", "pin_memory"},
    "cpu": EXACT_RUNGS - {"dataloader_workers", "pin_memory", "offload_optimizer",
                          "offload_params"},
}  # fmt: skip
#: Rungs that change what the model learns (truncated examples, adapters instead of weights).
LEARNING_RUNGS: frozenset[str] = frozenset({"max_length", "lora"})

#: Default safety margin: a config fits when its predicted peak is at most 90 % of what is
#: available (allocator fragmentation and framework temporaries are not modelled).
DEFAULT_MARGIN = 0.10

#: Relative step-time factors. Gradient checkpointing recomputes the forward pass: ~33 % more
#: compute (Chen et al. 2016, arXiv:1604.06174; HF's performance guide says ~20 %). ZeRO-3
#: gathers parameters every forward and backward (~1.5x the communication of ZeRO-2,
#: Rajbhandari et al. 2020). Optimizer offload runs Adam on the CPU and moves gradients over
#: PCIe (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840); parameter offload also moves the
#: weights every step. A smaller micro-batch uses a GPU less well (per halving); on CPU it is
#: neutral (P5 measured micro 1-2 faster than 8 on the CPU demo).
GC_FACTOR = 1.33
ZERO3_FACTOR = 1.15
OFFLOAD_FACTOR: dict[Offload, float] = {
    Offload.NONE: 1.0,
    Offload.OPTIMIZER: 1.6,
    Offload.ALL: 2.5,
}
GPU_HALVING_FACTOR = 1.06
BUCKET_HALVING_FACTOR = 1.02

#: Upper bound on the configs explored (the real space is a few hundred).
MAX_CANDIDATES = 2000


def relative_step_time(start: Knobs, k: Knobs, device: str) -> float:
    """Predicted time of one optimizer step of ``k`` relative to ``start`` (1.0 = same)."""
    t = 1.0
    if k.gradient_checkpointing and not start.gradient_checkpointing:
        t *= GC_FACTOR
    if (k.zero_stage or 0) >= 3 > (start.zero_stage or 0):
        t *= ZERO3_FACTOR
    t *= OFFLOAD_FACTOR[k.offload] / OFFLOAD_FACTOR[start.offload]
    if device == "gpu" and k.micro_batch_size < start.micro_batch_size:
        t *= GPU_HALVING_FACTOR ** math.log2(start.micro_batch_size / k.micro_batch_size)
    if k.ds_bucket_divisor > start.ds_bucket_divisor:
        t *= BUCKET_HALVING_FACTOR ** math.log2(k.ds_bucket_divisor / start.ds_bucket_divisor)
    return t


@dataclass(frozen=True, slots=True)
class Candidate:
    knobs: Knobs
    #: The rungs applied to the start config to reach it, in order.
    path: tuple[str, ...]
    estimate: Estimate
    step_time: float
    fits: bool


@dataclass(frozen=True, slots=True)
class FitPlan:
    """The plan for a job: every candidate, and the chosen one (None: keep the start)."""

    start: Knobs
    device: str
    available_bytes: int | None
    margin: float
    candidates: tuple[Candidate, ...] = ()
    chosen: Candidate | None = None
    #: Why nothing is changed, when nothing is (unknown shape, start fits, nothing fits).
    note: str = ""
    shape: ModelShape | None = None
    #: "estimate" or "store": where the chosen config came from.
    source: str = "estimate"

    @property
    def start_candidate(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def reachable(
    start: Knobs,
    rungs: Sequence[str],
    ctx: RungContext,
    *,
    allow_new_phase: bool = True,
    limit: int = MAX_CANDIDATES,
) -> list[tuple[tuple[str, ...], Knobs]]:
    """Every config the exact rungs among ``rungs`` reach from ``start`` (breadth first, so
    each is listed with a shortest path), ``start`` first. ``allow_new_phase``: False when a
    checkpoint will be resumed, so a move that could not resume it exactly is not planned."""
    exact = [r for r in dict.fromkeys(rungs) if r in EXACT_RUNGS]
    seen = {start}
    out: list[tuple[tuple[str, ...], Knobs]] = [((), start)]
    i = 0
    while i < len(out) and len(out) < limit:
        path, knobs = out[i]
        i += 1
        for name in exact:
            move = RUNGS[name](knobs, ctx)
            if move is None or move.knobs in seen or (move.new_phase and not allow_new_phase):
                continue
            seen.add(move.knobs)
            out.append(((*path, name), move.knobs))
    return out


def fits(est: Estimate, available: int | None, margin: float, host_available: int | None) -> bool:
    """Predicted peak (with the margin) within what is available; unknown memory: no."""
    if available is None:
        return False
    ok = est.peak_bytes <= available * (1.0 - margin)
    if ok and est.gpu is not None and host_available is not None:
        ok = est.host_peak_bytes <= host_available * (1.0 - margin)
    return ok


@dataclass(frozen=True, slots=True)
class FitInputs:
    """Plain facts the plan needs (gathered by ``run.fit`` or given by a test)."""

    shape: ModelShape
    regime: Regime
    available_bytes: int | None
    host_available_bytes: int | None = None
    margin: float = DEFAULT_MARGIN
    scale: float = 1.0
    rungs: tuple[str, ...] = field(default=())
    #: Nothing will be resumed: any move is free at the start (see :func:`reachable`).
    fresh: bool = True
    #: The regime signature for the known-good store ("" = do not use the store).
    signature: str = ""
    #: The training environment's fingerprint (every distribution's ``name==version``; ""
    #: unknown): store records from another environment are hints, not known-good.
    env_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class KnownOutcome:
    """What an earlier run of the same regime measured for one config (the store)."""

    fits: bool
    samples_per_s: float | None = None
    peak_bytes: int | None = None
    #: The environment fingerprint it was measured in (None: unknown, an older store).
    env: str | None = None


def plan_fit(
    start: Knobs,
    ctx: RungContext,
    inputs: FitInputs,
    known: Mapping[Knobs, KnownOutcome] | None = None,
    hints: Mapping[Knobs, KnownOutcome] | None = None,
) -> FitPlan:
    """Estimate every reachable config; choose the fastest predicted to fit.

    The start config is kept when it is predicted to fit (nothing to gain), and also when
    nothing is (the ladder will learn from a real failure; the plan says so). ``known``
    outcomes of earlier runs overrule the estimate: a config known to have failed is never
    chosen, and the fastest config known to fit (measured samples/s) wins over any estimate.
    ``hints``: outcomes measured in another training environment (:func:`_from_other_env`),
    used only when ``known`` has no fitting config.
    """
    r = inputs.regime
    cands: list[Candidate] = []
    rungs = [name for name in inputs.rungs if name in FIT_RUNGS[r.device]]
    for path, knobs in reachable(start, rungs, ctx, allow_new_phase=inputs.fresh):
        est = estimate(inputs.shape, knobs, r, scale=inputs.scale)
        ok = fits(est, inputs.available_bytes, inputs.margin, inputs.host_available_bytes)
        if known is not None and knobs in known:
            ok = known[knobs].fits
        cands.append(Candidate(knobs, path, est, relative_step_time(start, knobs, r.device), ok))
    base = FitPlan(
        start, r.device, inputs.available_bytes, inputs.margin, tuple(cands), None,
        shape=inputs.shape,
    )  # fmt: skip
    from_store = _from_store(base, known or {}, ctx, inputs)
    if from_store is not None:
        return from_store
    from_hint = _from_other_env(base, hints or {}, known or {}, ctx, inputs)
    if from_hint is not None:
        return from_hint
    if inputs.available_bytes is None:
        return _with(base, note="the memory available is unknown: the start config is kept")
    if cands[0].fits:
        return _with(base, note="the start config is predicted to fit")
    fitting = [c for c in cands if c.fits]
    if not fitting:
        return _with(
            base, note="no config the exact rungs reach is predicted to fit: the start "
            "config is kept and the ladder heals from the real failure",
        )  # fmt: skip
    best = min(fitting, key=lambda c: (c.step_time, len(c.path)))
    return _with(base, chosen=best, note=f"reached by {', '.join(best.path)}")


def _from_store(
    plan: FitPlan, known: Mapping[Knobs, KnownOutcome], ctx: RungContext, inputs: FitInputs
) -> FitPlan | None:
    """The fastest config an earlier run measured to fit (None: the store knows none), one
    rung safer when it fitted at the edge (:func:`_safer_than_edge`)."""
    good = [c for c in plan.candidates if c.knobs in known and known[c.knobs].fits]
    if not good:
        return None
    best = max(good, key=lambda c: (known[c.knobs].samples_per_s or 0.0, -c.step_time))
    sps = known[best.knobs].samples_per_s
    speed = "" if sps is None else f", {sps:.3g} samples/s measured"
    safer = _safer_than_edge(plan, best, known, ctx, inputs)
    if safer is not None:
        cand, rung = safer
        return _with(plan, chosen=cand, source="store", note=(
            f"one {rung} step safer ({best.knobs.diff(cand.knobs)}) than a config known to "
            f"fit at the edge{speed} (one {rung} step larger ran out of memory, and that step "
            "is smaller than the margin)"
        ))  # fmt: skip
    if not best.path:
        return _with(plan, source="store", note=f"the start config is known to fit{speed}")
    return _with(plan, chosen=best, source="store", note=f"known to fit{speed}")


def _from_other_env(
    plan: FitPlan, hints: Mapping[Knobs, KnownOutcome], known: Mapping[Knobs, KnownOutcome],
    ctx: RungContext, inputs: FitInputs,
) -> FitPlan | None:  # fmt: skip
    """The fastest config measured to fit in *another* training environment, one exact rung
    safer (None: no such record).

    Another environment is evidence, not proof: a package installed since (``datasets``,
    which the HF Trainer imports with ``pyarrow`` and ``pandas``) moved every config's need
    by 1.27 GiB of address space on the P5 benchmark, and known-good configs stopped fitting.
    Dropping such records would throw away the nearest measurement there is; trusting them
    fails the first attempt whenever the environment grew. So the plan starts one step below
    that config: of the exact rungs the estimate models, the cheapest (relative step time)
    predicted to save memory, not a config known to fail here. When no rung can go lower,
    the hinted config itself. Its outcome is then recorded under this environment, so the
    next run trusts (or avoids) it as usual."""
    good = [c for c in plan.candidates if c.knobs in hints and hints[c.knobs].fits
            and (c.knobs not in known or known[c.knobs].fits)]  # fmt: skip
    if not good:
        return None
    best = max(good, key=lambda c: (hints[c.knobs].samples_per_s or 0.0, -c.step_time))
    env = hints[best.knobs].env or "unknown (a record from before fingerprints)"
    where = f"measured to fit in another environment (fingerprint {env}"
    where += f", this one {inputs.env_fingerprint or 'unknown'})"
    by_knobs = {c.knobs: c for c in plan.candidates}
    steps: list[tuple[Candidate, str]] = []
    for name in dict.fromkeys(inputs.rungs):
        move = RUNGS[name](best.knobs, ctx) if name in FIT_RUNGS[plan.device] else None
        nxt = None if move is None else by_knobs.get(move.knobs)
        if nxt is None or (nxt.knobs in known and not known[nxt.knobs].fits):
            continue
        if nxt.estimate.peak_bytes < best.estimate.peak_bytes:
            steps.append((nxt, name))
    if not steps:
        if not best.path:
            return _with(plan, source="store_other_env", note=f"the start config, {where}; "
                         "no exact rung goes lower")  # fmt: skip
        return _with(plan, chosen=best, source="store_other_env",
                     note=f"{where}; no exact rung goes lower")  # fmt: skip
    cand, rung = min(steps, key=lambda x: (x[0].step_time, x[0].estimate.peak_bytes))
    return _with(plan, chosen=cand, source="store_other_env", note=(
        f"one {rung} step safer ({best.knobs.diff(cand.knobs)}) than a config {where}"
    ))  # fmt: skip


def _safer_than_edge(
    plan: FitPlan, good: Candidate, known: Mapping[Knobs, KnownOutcome], ctx: RungContext,
    inputs: FitInputs,
) -> tuple[Candidate, str] | None:  # fmt: skip
    """The config one rung past ``good`` when ``good`` fitted at the edge, else None.

    ``good`` is at the edge when a config that one rung turns into ``good`` ran out of memory
    and the estimate puts that rung's saving under the margin: ``good`` then fitted with less
    headroom than the margin, and a limit on address space (``RLIMIT_AS``) makes that a coin
    toss (the heap's and threads' reservations vary run to run). Live P5 S1 and T1: the fresh
    run healed to the first bucket size that fitted once, and the next run of that exact
    config ran out of memory; one bucket step further fitted every time. The margin is what
    the estimate-driven plan demands; without it the store would trust a config that never
    had one."""
    if inputs.available_bytes is None:
        return None
    room = inputs.margin * inputs.available_bytes
    by_knobs = {c.knobs: c for c in plan.candidates}
    for name in inputs.rungs:
        if name not in RUNGS:
            continue
        for failed in plan.candidates:
            if failed.knobs not in known or known[failed.knobs].fits:
                continue
            move = RUNGS[name](failed.knobs, ctx)
            saving = failed.estimate.peak_bytes - good.estimate.peak_bytes
            if move is None or move.knobs != good.knobs or saving >= room:
                continue
            step = RUNGS[name](good.knobs, ctx)
            nxt = None if step is None else by_knobs.get(step.knobs)
            if nxt is not None and (nxt.knobs not in known or known[nxt.knobs].fits):
                return nxt, name
    return None


def _with(plan: FitPlan, **changes: object) -> FitPlan:
    import dataclasses

    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]
