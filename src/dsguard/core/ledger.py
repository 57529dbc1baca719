"""What the run carries from one attempt to the next, and its pure updates.

The ledger is saved in ``state.json`` at every transition, so a dsguard that was SIGKILLed
(or lost power) and is started again continues at the recorded rung instead of walking the
ladder again from the top (which would OOM again on a config already known not to fit).

Every update here is pure (a new :class:`Ledger` from the old one and a decision): the run
loop gathers the facts, these functions decide what the ledger becomes, and the table-driven
tests pin them without a process or a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsguard.core.ladder import AttemptRecord, Relaunch
from dsguard.core.records import as_builtins, from_builtins
from dsguard.core.remedies import Remedy
from dsguard.job.knobs import Knobs


@dataclass(frozen=True)
class Ledger:
    """What the loop carries from one attempt to the next (persisted in state.json)."""

    knobs: Knobs
    ckpt_dir: Path | None = None
    positions: Mapping[str, int] = field(default_factory=dict)
    history: tuple[AttemptRecord, ...] = ()
    phase: int = 1
    #: The output dir of the current phase when it is not the job's own (phase > 1).
    phase_output: Path | None = None
    #: Weights a new phase starts from, passed to every attempt of the phase: a LoRA phase's
    #: own checkpoints hold only adapters, so the base must be these weights on resume too.
    phase_init_from: Path | None = None
    #: What the training code announced in its heartbeats (the last attempt that did).
    caps: frozenset[str] = frozenset()
    #: Attempts numbered so far (attempt numbers name log and heartbeat files: never reused).
    attempt: int = 0
    #: Environment remedies applied so far (build errors, loss-scale collapse), in order.
    remedies: tuple[Remedy, ...] = ()
    #: Attempt numbers up to this one were taken by earlier runs in the same log dir (a
    #: finished job run again, a discarded state.json): this ladder's attempts number after
    #: them, so a new run never appends to an older run's ``attempt-N.log``.
    numbered_after: int = 0
    #: Optimizer-step ranges whose batches every later attempt skips (divergence rollbacks),
    #: and how many rollbacks the run made.
    skip_batches: tuple[tuple[int, int], ...] = ()
    rollbacks: int = 0

    @property
    def attempts_made(self) -> int:
        """Attempts numbered by this ladder (recovered runs included), not by earlier runs."""
        return self.attempt - self.numbered_after

    def as_dict(self) -> dict[str, Any]:
        # The one field msgspec cannot order: a set comes out in iteration order, and
        # state.json keeps the capabilities sorted.
        return {**as_builtins(self), "caps": sorted(self.caps)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ledger:
        return from_builtins(d, cls)


def next_attempt(ledger: Ledger) -> Ledger:
    """Number the next attempt (numbers are never reused, even across a dsguard restart)."""
    return dataclasses.replace(ledger, attempt=ledger.attempt + 1)


def number_after(ledger: Ledger, highest_used: int) -> Ledger:
    """Make the next attempt number exceed ``highest_used``, the highest one found in the log
    dir: names there (attempt logs, rendered configs, heartbeats, stop requests) are never
    reused by a later run. A recovered ladder keeps counting its own attempts; the numbers
    skipped (an attempt whose log exists but whose start state.json never recorded) count as
    used by it, a fresh ladder's skipped numbers as earlier runs'."""
    if highest_used <= ledger.attempt:
        return ledger
    fresh = ledger.attempt == ledger.numbered_after
    skipped = highest_used if fresh else ledger.numbered_after
    return dataclasses.replace(ledger, attempt=highest_used, numbered_after=skipped)


def record_caps(ledger: Ledger, caps: frozenset[str] | None) -> Ledger:
    """The capabilities the last attempt announced. None (no heartbeat at all) keeps the
    previous ones: an attempt that died before its first heartbeat says nothing about them."""
    return ledger if caps is None else dataclasses.replace(ledger, caps=caps)


def record_attempt(ledger: Ledger, record: AttemptRecord) -> Ledger:
    """Append a finished attempt to the history the retry budgets and backoff count."""
    return dataclasses.replace(ledger, history=(*ledger.history, record))


def apply_relaunch(
    ledger: Ledger, decision: Relaunch, *, ckpt_root: Path | None, init_from: Path | None
) -> Ledger:
    """The ledger the next attempt runs with after ``decision``.

    A new phase (a rung such as LoRA whose checkpoints cannot be resumed exactly under the
    old config) gets its own output dir under the job's checkpoint root, so resuming never
    mixes the phases' checkpoints; ``init_from`` is the weights it starts from (None: the
    initial model, when the training code cannot load others).
    """
    remedies = ledger.remedies if decision.remedy is None else (*ledger.remedies, decision.remedy)
    out = dataclasses.replace(
        ledger, knobs=decision.knobs, positions=dict(decision.positions), remedies=remedies
    )
    if decision.new_phase and ckpt_root is not None and ledger.ckpt_dir is not None:
        phase = ledger.phase + 1
        phase_dir = ckpt_root / f"dsguard-phase-{phase}"
        out = dataclasses.replace(
            out, phase=phase, ckpt_dir=phase_dir, phase_output=phase_dir,
            phase_init_from=init_from,
        )  # fmt: skip
    return out


def apply_rollback(ledger: Ledger, skip: tuple[int, int] | None) -> Ledger:
    """After a divergence rollback: one more rollback, and the batches to skip from now on."""
    ranges = ledger.skip_batches if skip is None else (*ledger.skip_batches, skip)
    return dataclasses.replace(ledger, skip_batches=ranges, rollbacks=ledger.rollbacks + 1)
