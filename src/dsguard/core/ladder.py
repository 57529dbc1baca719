"""Decide what to do after a failed attempt (pure: no I/O, no clock, no randomness).

``decide`` maps (failure kind, current knobs, ladder positions, attempt history) to either a
:class:`Relaunch` or a :class:`GiveUp`. The run loop applies the decision; everything here is
tested table-driven in milliseconds.

Three families of failure:

* memory (``cuda_oom``, ``host_oom``): walk that kind's ladder. A rung is repeated until it has
  nothing left to give, then the next rung is tried. Relaunch at once: waiting does not make a
  deterministic OOM fit.
* transient (NCCL, a lone SIGKILL, a hang, a bad checkpoint, CUDA faults, unknown): retry the
  same config a bounded number of times *without progress* (no newer checkpoint), with
  exponential backoff that resets after a healthy uptime.
* deterministic (build/config errors, loss-scale collapse, disk full, user code): give up at
  once with the reason; retrying would burn the night on the same error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsguard.core.classify import FailureKind
from dsguard.core.envfacts import EnvFacts
from dsguard.core.evidence import MoveEvidence, buckets_futile, choose_move
from dsguard.core.records import as_builtins, from_builtins
from dsguard.core.remedies import GiveUp as RemedyGiveUp
from dsguard.core.remedies import Remedy, next_remedy
from dsguard.core.rungs import RUNGS, Move, RungContext, blocked, inert_reason
from dsguard.errors import InvariantViolation
from dsguard.job.argv import flag_value
from dsguard.job.delivery import RUNG_KNOBS, routes, tokens_per_step
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job, Ladder, Limits

#: Which ladder each memory failure walks (keys of :class:`dsguard.job.model.Ladder`).
LADDER_FOR: dict[FailureKind, str] = {
    FailureKind.CUDA_OOM: "oom",
    FailureKind.HOST_OOM: "host_oom",
}

#: Same-config retries allowed in a row without a newer checkpoint.
RETRY_BUDGET: dict[FailureKind, int] = {
    FailureKind.NCCL_ERROR: 2,
    FailureKind.CUDA_FATAL: 1,
    FailureKind.KILLED_EXTERNALLY: 1,
    FailureKind.HANG: 3,
    FailureKind.CHECKPOINT_ERROR: 2,
    FailureKind.UNKNOWN: 1,
}

#: Deterministic failures: why no config change dsguard owns can fix them (today).
GIVE_UP_ADVICE: dict[FailureKind, str] = {
    FailureKind.DS_BUILD_ERROR: (
        "an op or compiled extension failed to build or load; fix the build environment "
        "(CUDA_HOME, compiler) or pre-build it"
    ),
    FailureKind.DS_CONFIG_ERROR: "the DeepSpeed config is rejected; fix the config and restart",
    FailureKind.LOSS_DIVERGENCE: (
        "the fp16 loss scale collapsed; switch to bf16 (GPU compute capability >= 8.0) or lower "
        "the learning rate"
    ),
    FailureKind.DISK_FULL: (
        "the disk is full; free space where checkpoints go (dsguard never deletes checkpoints)"
    ),
    FailureKind.USER_CODE_ERROR: "the training script raised an error no config change can fix",
}


#: Environment failures healed by remedies (policies/remedies.py), not by knob rungs.
REMEDY_KINDS = frozenset({FailureKind.DS_BUILD_ERROR, FailureKind.LOSS_DIVERGENCE})


def is_recoverable(kind: FailureKind) -> bool:
    """Whether dsguard has any healing path for this kind of failure."""
    return kind in LADDER_FOR or kind in RETRY_BUDGET or kind in REMEDY_KINDS


@dataclass(frozen=True, slots=True)
class RemedyContext:
    """What the remedy ladder needs about the failed attempt (gathered by the loop)."""

    evidence_lines: tuple[str, ...]
    applied: frozenset[str]
    env_facts: EnvFacts
    ds_config: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """What the policy needs to remember of a finished attempt (persisted in state.json)."""

    attempt: int
    kind: FailureKind | None  # None = the attempt succeeded
    uptime_s: float
    #: A newer complete checkpoint appeared during the attempt (training moved forward).
    progressed: bool

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AttemptRecord:
        return from_builtins(d, cls)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    ladder: Ladder
    limits: Limits
    ctx: RungContext
    world_size: int

    @classmethod
    def from_job(cls, job: Job) -> PolicyConfig:
        ckpt = job.checkpoints
        can_redirect = (
            ckpt is not None
            and ckpt.output_flag is not None
            and flag_value(job.args, ckpt.output_flag) is not None
        )
        return cls(
            ladder=job.ladder,
            limits=job.limits,
            world_size=job.world_size,
            ctx=RungContext(
                min_micro_batch_size=job.limits.min_micro_batch_size,
                min_max_length=job.limits.min_max_length,
                flags=job.flags,
                has_deepspeed=job.deepspeed is not None,
                can_start_phase=can_redirect,
                delivered=frozenset(k for k, r in routes(job).items() if r is not None),
                fixed=frozenset(job.limits.fixed),
                packing=job.data.packing,
            ),
        )


@dataclass(frozen=True, slots=True)
class Relaunch:
    knobs: Knobs
    #: The rung applied, or None for a same-config retry.
    rung: str | None
    changes: dict[str, list[Any]]
    new_phase: bool
    caveats: tuple[str, ...]
    delay_s: float
    positions: dict[str, int]
    reason: str
    #: The failure was in loading the checkpoint the attempt resumed from: set it aside.
    quarantine_resumed_checkpoint: bool = False
    #: An environment remedy (build error, loss-scale collapse) for every later attempt.
    remedy: Remedy | None = None
    #: Rungs passed over because they could change nothing for this job: (rung, why).
    skipped: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str


Decision = Relaunch | GiveUp


def next_delay(history: Sequence[AttemptRecord], limits: Limits) -> float:
    """Backoff before a same-config retry.

    The streak counts the newest attempts that did not stay up ``healthy_uptime_s``; a job
    that crashes once a day therefore never ends up waiting the maximum backoff forever.
    """
    streak = 0
    for rec in reversed(history):
        if rec.uptime_s >= limits.healthy_uptime_s:
            break
        streak += 1
    if streak == 0:
        return 0.0
    return float(min(limits.backoff_max_s, limits.backoff_first_s * 2 ** (streak - 1)))


def _failures_since_progress(history: Sequence[AttemptRecord], kind: FailureKind) -> int:
    """Failures of ``kind`` in a row, newest first, back to the last attempt that progressed.

    An attempt that wrote a newer checkpoint and then failed still counts (its failure came
    after the progress); anything older does not.
    """
    n = 0
    for rec in reversed(history):
        if rec.kind is not kind:
            break
        n += 1
        if rec.progressed:
            break
    return n


def walk(
    rungs: Sequence[str], start: int, knobs: Knobs, ctx: RungContext
) -> tuple[int, Move] | None:
    """First rung at or after ``start`` that still has something to give. A move that would
    change a fixed knob or one with no route to the script is left out (never logged as a
    change that did not happen)."""
    for i in range(start, len(rungs)):
        move = RUNGS[rungs[i]](knobs, ctx)
        if move is not None and not blocked(knobs, move.knobs, ctx):
            return i, move
    return None


def left_out(rungs: Sequence[str], ctx: RungContext) -> list[str]:
    """Why each rung of ``rungs`` can never be taken in this job (for the give-up message):
    a knob it changes is fixed, or has no route to the script."""
    out: list[str] = []
    for rung in rungs:
        fixed = [k for k in RUNG_KNOBS.get(rung, ()) if k in ctx.fixed]
        lost = [
            k
            for k in RUNG_KNOBS.get(rung, ())
            if ctx.delivered is not None and k not in ctx.delivered and k not in fixed
        ]
        why = [f"{k} fixed by limits.fixed" for k in fixed]
        why += [f"{k} has no route to the script" for k in lost]
        if why:
            out.append(f"{rung} ({', '.join(why)})")
    return out


def skipped_rungs(
    rungs: Sequence[str], start: int, stop: int, knobs: Knobs, ctx: RungContext
) -> tuple[tuple[str, str], ...]:
    """(rung, why) for the rungs between ``start`` and ``stop`` that could change nothing for
    this job, so no attempt was spent on them: every one ``walk`` passed over, and the inert
    ones an evidence-chosen move jumped past (a useful rung it jumped past is not "skipped":
    ``evidence_considered`` says why another move came first)."""
    return tuple(
        (rungs[i], inert_reason(rungs[i], knobs, ctx))
        for i in range(start, stop)
        if RUNGS[rungs[i]](knobs, ctx) is None
    )


def _next_move(
    ladder_name: str,
    rungs: tuple[str, ...],
    knobs: Knobs,
    *,
    positions: Mapping[str, int],
    cfg: PolicyConfig,
    evidence: MoveEvidence | None,
) -> tuple[tuple[int, Move] | None, str]:
    """The ladder's next move and why: by the evidence on a default ladder, else in order
    from the current position (the user's explicit order wins)."""
    if evidence is not None and ladder_name not in cfg.ladder.explicit:
        choice = choose_move(rungs, knobs, cfg.ctx, evidence)
        if choice is None:
            futile = buckets_futile(knobs, evidence)
            return None, "" if futile is None else f"; ds_buckets not taken again: {futile}"
        return (choice.index, choice.move), f" ({choice.why})"
    return walk(rungs, positions.get(ladder_name, 0), knobs, cfg.ctx), ""


def _check_invariant(old: Knobs, new: Knobs, world_size: int) -> None:
    if old.global_batch(world_size) != new.global_batch(world_size):
        raise InvariantViolation(
            f"global batch changed {old.global_batch(world_size)} -> "
            f"{new.global_batch(world_size)} ({old.diff(new)})"
        )


def _ladder_step(
    kind: FailureKind,
    ladder_name: str,
    knobs: Knobs,
    *,
    positions: Mapping[str, int],
    cfg: PolicyConfig,
    evidence: MoveEvidence | None,
) -> Decision:
    """A memory failure: the ladder's next move, or a give-up naming what was possible and
    what was left out (a knob with no route, or fixed)."""
    rungs: tuple[str, ...] = getattr(cfg.ladder, ladder_name)
    found, why = _next_move(
        ladder_name, rungs, knobs, positions=positions, cfg=cfg, evidence=evidence
    )
    if found is None:
        skipped = left_out(rungs, cfg.ctx)
        possible = [r for r in rungs if not any(s.startswith(r + " (") for s in skipped)]
        note = f"; left out: {'; '.join(skipped)}" if skipped else ""
        return GiveUp(
            f"{kind}: the {ladder_name} ladder is exhausted "
            f"(possible rungs: {', '.join(possible) or 'none'}) at {knobs.as_dict()}{note}{why}"
        )
    index, move = found
    _check_invariant(knobs, move.knobs, cfg.world_size)
    new_positions = dict(positions)
    new_positions[ladder_name] = index
    return Relaunch(
        knobs=move.knobs,
        rung=rungs[index],
        changes=knobs.diff(move.knobs),
        new_phase=move.new_phase,
        caveats=move.caveats,
        delay_s=0.0,
        positions=new_positions,
        reason=f"{kind}: applying rung {rungs[index]}{why}",
        skipped=skipped_rungs(rungs, positions.get(ladder_name, 0), index, knobs, cfg.ctx),
    )


def decide(
    kind: FailureKind,
    *,
    knobs: Knobs,
    positions: Mapping[str, int],
    history: Sequence[AttemptRecord],
    cfg: PolicyConfig,
    remedy_ctx: RemedyContext | None = None,
    evidence: MoveEvidence | None = None,
    retry_helps: bool = True,
    hint: str | None = None,
) -> Decision:
    """What to do after an attempt failed with ``kind``.

    Args:
        kind: the classified root cause of the attempt that just ended.
        knobs: the knobs that attempt ran with.
        positions: ladder name -> index of the rung currently being applied.
        history: every finished attempt of this run, the one that just failed last.
        cfg: the job's ladders, limits and rung context.
        remedy_ctx: facts for build-error / loss-scale remedies; without it those kinds give
            up with advice.
        evidence: the OOM figures and estimator of the failed attempt: a default (not
            job-file) ladder then picks its move by them (``core.evidence``), not by order.
        retry_helps: the verdict's word on an *unchanged* relaunch
            (:attr:`dsguard.core.classify.Failure.retry_helps`); ``hint``, what it says to
            change. A kind's same-config retry is spent only where it can help.
    """
    attempts_done = len(history)
    if attempts_done >= cfg.limits.max_attempts:
        return GiveUp(f"max_attempts ({cfg.limits.max_attempts}) reached; last failure: {kind}")

    ladder_name = LADDER_FOR.get(kind)
    if ladder_name is not None:
        return _ladder_step(
            kind, ladder_name, knobs, positions=positions, cfg=cfg, evidence=evidence
        )

    if kind in REMEDY_KINDS and remedy_ctx is not None:
        found_remedy = next_remedy(
            kind, remedy_ctx.evidence_lines, remedy_ctx.applied, remedy_ctx.env_facts,
            ds_config=remedy_ctx.ds_config,
        )  # fmt: skip
        if isinstance(found_remedy, RemedyGiveUp):
            return GiveUp(f"{kind}: {found_remedy.reason}")
        if found_remedy.new_phase and not cfg.ctx.can_start_phase:
            return GiveUp(
                f"{kind}: remedy {found_remedy.name} needs a new phase, and dsguard cannot give "
                "it its own output dir (no --output_dir in args)"
            )
        return Relaunch(
            knobs=knobs,
            rung=None,
            changes={},
            new_phase=found_remedy.new_phase,
            caveats=found_remedy.caveats,
            delay_s=0.0,
            positions=dict(positions),
            reason=f"{kind}: remedy {found_remedy.name}: {found_remedy.reason}",
            remedy=found_remedy,
        )

    budget = RETRY_BUDGET.get(kind)
    # A checkpoint error's retry is not unchanged: the checkpoint it resumed is quarantined.
    quarantine = kind is FailureKind.CHECKPOINT_ERROR
    if budget is not None and not retry_helps and not quarantine:
        # The verdict says an unchanged relaunch meets the same fault (a build without the
        # GPU's architecture, a driver too old, a device-side assert at the same batch, no GPU
        # visible): the retry would spend an attempt and a model load to show it again.
        why = f"; {hint}" if hint else ""
        return GiveUp(f"{kind}: an unchanged retry meets the same fault{why}")
    if budget is not None:
        used = _failures_since_progress(history, kind)
        if used > budget:
            return GiveUp(
                f"{kind} {used} times in a row without a new checkpoint (retry budget {budget})"
            )
        return Relaunch(
            knobs=knobs,
            rung=None,
            changes={},
            new_phase=False,
            caveats=(),
            delay_s=next_delay(history, cfg.limits),
            positions=dict(positions),
            reason=f"{kind}: retry {used} of {budget} at the same config",
            quarantine_resumed_checkpoint=quarantine,
        )

    return GiveUp(f"{kind}: {GIVE_UP_ADVICE.get(kind, 'not recoverable')}")


@dataclass(frozen=True, slots=True)
class PlanStep:
    rung: str | None
    knobs: Knobs
    global_batch: int
    new_phase: bool
    caveats: tuple[str, ...] = field(default=())
    #: micro x accumulation x world x max_length; None when max_length is unknown.
    tokens_per_step: int | None = None


def plan(kind: FailureKind, knobs: Knobs, cfg: PolicyConfig) -> list[PlanStep]:
    """The rungs dsguard would walk if every attempt failed with ``kind`` (``dsguard plan``).

    Uses ``decide`` itself, so the plan cannot drift from what the run loop does; max_attempts
    is ignored here (the plan shows the whole ladder).
    """
    steps = [
        PlanStep(
            None, knobs, knobs.global_batch(cfg.world_size), False,
            tokens_per_step=tokens_per_step(knobs, cfg.world_size),
        )
    ]  # fmt: skip
    positions: dict[str, int] = {}
    unbounded = PolicyConfig(
        ladder=cfg.ladder,
        limits=_replace_limits(cfg.limits, max_attempts=1 << 30),
        ctx=cfg.ctx,
        world_size=cfg.world_size,
    )
    for _ in range(256):  # every rung is finite; the bound only guards against a bug
        decision = decide(kind, knobs=knobs, positions=positions, history=(), cfg=unbounded)
        if not isinstance(decision, Relaunch) or decision.rung is None:
            break
        knobs, positions = decision.knobs, decision.positions
        steps.append(
            PlanStep(
                decision.rung,
                knobs,
                knobs.global_batch(cfg.world_size),
                decision.new_phase,
                decision.caveats,
                tokens_per_step(knobs, cfg.world_size),
            )
        )
    return steps


def _replace_limits(limits: Limits, **changes: Any) -> Limits:
    import dataclasses

    return dataclasses.replace(limits, **changes)
