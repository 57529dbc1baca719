"""A loss or grad norm that turned NaN/inf while training: stop, then roll back or give up.

A diverged run does not crash: it trains on for hours on NaN weights and may even exit 0
(``Trainer`` logs ``'loss': nan`` and goes on). dsguard stops it as soon as a heartbeat or an
output line says so, and never reports it as succeeded. What then is the job's choice
(``divergence:`` in the job file, :class:`dsguard.job.model.DivergencePolicy`):

* ``give_up``: the run ends, naming the step where the divergence began;
* ``rollback``: what large-model teams do with loss spikes (PaLM, Chowdhery et al. 2022,
  section 5.1: restart about 100 steps before the spike and skip 200-500 batches; OPT's
  logbook: roll back to an earlier checkpoint): resume from the newest checkpoint saved
  *before* the divergence began (later ones hold diverged weights and are set aside, never
  deleted), and skip the data of ``skip_batches`` optimizer steps around the onset.

Pure: the loop sets aside the checkpoints at or after the onset and resumes from the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsguard.job.model import DivergencePolicy

__all__ = [
    "Divergence",
    "Rollback",
    "StopRun",
    "decide_divergence",
    "nonfinite",
    "skip_window",
]


def nonfinite(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the divergence showed: the first optimizer step known to be non-finite (None:
    unknown), what turned ("loss", "grad_norm", or an output line), and from where."""

    step: int | None
    what: str
    source: str  # "heartbeat" or "output"


@dataclass(frozen=True, slots=True)
class Rollback:
    """Resume from the newest checkpoint whose step is below ``before_step`` (the loop sets the
    later ones aside), then skip batches (:func:`skip_window`)."""

    before_step: int
    reason: str


@dataclass(frozen=True, slots=True)
class StopRun:
    reason: str


def skip_window(onset: int, resume_step: int | None, n: int) -> tuple[int, int] | None:
    """``n`` optimizer steps around the onset, none at or before the resumed step, always
    covering the onset; None when ``n`` is 0 (resume only)."""
    if n <= 0:
        return None
    first = max((resume_step or 0) + 1, onset - n // 2)
    return first, max(first + n - 1, onset)


def decide_divergence(
    div: Divergence, policy: DivergencePolicy, rollbacks_done: int
) -> Rollback | StopRun:
    """Roll back (the job asked for it, the onset step is known, rollbacks are left) or stop."""
    where = f"step {div.step}" if div.step is not None else "an unknown step"
    began = f"{div.what} turned NaN/inf at {where} (seen in the {div.source})"
    if policy.action != "rollback":
        return StopRun(f"training diverged: {began}; divergence.action is give_up")
    if div.step is None:
        return StopRun(
            f"training diverged: {began}; no checkpoint can be shown to predate it, so no "
            "rollback (the trainer reports no step: add dsguard's HF callback)"
        )
    if rollbacks_done >= policy.max_rollbacks:
        return StopRun(
            f"training diverged again: {began}, after {rollbacks_done} rollback(s) "
            f"(divergence.max_rollbacks {policy.max_rollbacks})"
        )
    return Rollback(before_step=div.step, reason=f"{began}: rolling back")
