"""A memory floor no move changes: give up early instead of walking the whole ladder (pure).

Every rung of the memory ladders shrinks memory that training allocates from its first step
on: activations (micro-batch, checkpointing, ``max_length``), DeepSpeed's buckets (allocated
at the first backward), DataLoader workers. None of them shrinks what the process needs
before that step: the interpreter, the imported libraries, the model load. When that floor is
above the limit, every move is useless. Measured: transformers' run_clm under a 560 MiB
memory cgroup (launcher plus rank resident ~0.63 GiB before any step) was OOM-killed 8 times,
micro-batch halved 3 times and the buckets 4 times, and gave up only at ``max_attempts``
(``bench/RESULTS.md``, "P5 run_clm").

:func:`judge_floor` says the floor is above the limit when either

* a heartbeat before the first step (step 0) reported at least the limit; or
* the memory measured at failure did not decrease across two moves of *different knobs*
  that the estimate predicted would reduce the need, no attempt reached a step, and that
  memory was at the limit (within :data:`NEAR_LIMIT`): the attempts died at the same memory,
  before training, whatever the knobs.

Why different knobs: memory at failure is at the limit for *any* kill by a memory cgroup
(the kernel kills at the limit) once the climb to it is slower than the 2 s samples, so an
activation OOM in a slow first forward at micro 8, 4 and 2 looks the same as a floor; micro 1
or checkpointing may still fit. Giving up there would lose the night's training on a job
the ladder could heal. When halving the micro-batch *and* another lever (checkpointing, the
buckets) both changed nothing, the activations are not what fills the limit.

A failure that names its failing allocation (``tried to allocate N bytes``) is left to the
evidence rules (``core.evidence``): a fixed-size allocation there is a bucket or a buffer
that other moves change, not necessarily a floor. A measure that stayed put below the limit
is not a floor either (an activation OOM within one quick forward: the samples before the
kill show the plateau before step 1, which is below the limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from dsguard.job.knobs import Knobs

#: The memory at failure counts as "at the limit" from this fraction of it on.
NEAR_LIMIT = 0.90
#: A measure within this fraction of the earlier one "did not decrease" (sampling noise).
NOT_DECREASED = 0.02
#: Moves of different knobs, each predicted to reduce the need, that must have changed
#: nothing before giving up.
MOVES = 2


@dataclass(frozen=True, slots=True)
class MemoryFailure:
    """One memory failure of this run, as the floor judgement sees it."""

    attempt: int
    knobs: Knobs
    #: The estimate's need for ``knobs`` (calibrated, judged all at once); None: no estimate.
    predicted_bytes: int | None
    #: The memory measured at failure (the tree's resident memory before the kill, or its
    #: largest VmPeak under RLIMIT_AS) and what it is; None: not measured.
    measured_bytes: int | None
    measure: str
    #: The attempt reported a finished optimizer step (a heartbeat at step >= 1).
    stepped: bool = False
    #: Memory a heartbeat reported before the first step (step 0); None: none did.
    floor_bytes: int | None = None
    #: The failing allocation, when the OOM message said.
    tried_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Floor:
    """The verdict: the limit, the floor measured, and the message for the user."""

    limit_bytes: int
    floor_bytes: int
    measure: str
    attempts: tuple[int, ...]
    reason: str


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _config(k: Knobs) -> str:
    div = k.ds_bucket_divisor
    return f"micro {k.micro_batch_size}" + ("" if div == 1 else f" buckets/{div}")


def _advice(limit: int, floor: int) -> str:
    return (
        f"no knob dsguard can move changes the memory needed before the first step "
        f"(imports, model load); raise the limit above {_gib(int(floor / NEAR_LIMIT))} "
        f"(resources.host_memory_limit, or the machine's or container's memory limit of "
        f"{_gib(limit)}), or train a smaller model"
    )


def judge_floor(failures: Sequence[MemoryFailure], limit_bytes: int | None) -> Floor | None:
    """The floor above the limit, or None (see the module doc). ``failures``: this run's
    consecutive memory failures, oldest first (a success or another failure between them
    starts the list again)."""
    if not failures or not limit_bytes:
        return None
    last = failures[-1]
    if last.floor_bytes is not None and last.floor_bytes >= limit_bytes:
        return Floor(
            limit_bytes, last.floor_bytes, "heartbeat_before_step_1", (last.attempt,),
            f"before its first step the training already used {_gib(last.floor_bytes)}, at "
            f"or above the limit of {_gib(limit_bytes)}: {_advice(limit_bytes, last.floor_bytes)}",
        )  # fmt: skip
    window = _window(failures)
    if window is None:
        return None
    values = [f.measured_bytes or 0 for f in window]
    first = values[0]
    if any(v < first * (1 - NOT_DECREASED) for v in values[1:]):
        return None
    floor = min(values)
    if floor < NEAR_LIMIT * limit_bytes:
        return None
    if any(f.floor_bytes is not None and f.floor_bytes < NEAR_LIMIT * limit_bytes for f in window):
        return None  # a heartbeat measured the floor below the limit: the knobs can help
    p0, p1 = window[0].predicted_bytes or 0, window[-1].predicted_bytes or 0
    measured = ", ".join(
        f"{_gib(v)} at {_config(f.knobs)}" for f, v in zip(window, values, strict=True)
    )
    return Floor(
        limit_bytes, floor, window[-1].measure, tuple(f.attempt for f in window),
        f"the memory at failure ({window[-1].measure}) did not decrease across moves of "
        f"{MOVES} knobs the estimate predicted would save {_gib(max(0, p0 - p1))} "
        f"({measured}); each attempt died at the limit of {_gib(limit_bytes)} without "
        f"reporting a step: the process's floor (~{_gib(floor)}) is above the limit; "
        f"{_advice(limit_bytes, floor)}",
    )  # fmt: skip


def _moved_knobs(before: Knobs, after: Knobs) -> frozenset[str]:
    """The knobs a move changed; accumulation goes with the micro-batch it compensates."""
    changed = {
        f.name
        for f in dataclasses.fields(Knobs)
        if getattr(before, f.name) != getattr(after, f.name)
    }
    changed.discard("gradient_accumulation_steps")
    return frozenset(changed)


def _window(failures: Sequence[MemoryFailure]) -> list[MemoryFailure] | None:
    """The newest failures spanning :data:`MOVES` moves of different knobs the estimate
    predicted would reduce the need (a move it does not model, like ``pin_memory``, is
    passed over), or None when they do not qualify: a step reached, an allocation size
    given, nothing measured or no estimate, or measures of different kinds."""
    window = [failures[-1]]
    moved: set[frozenset[str]] = set()  # the knobs each reducing move changed
    for f in reversed(failures[:-1]):
        later = window[0]
        if f.predicted_bytes is None or later.predicted_bytes is None:
            return None
        window.insert(0, f)
        if later.predicted_bytes < f.predicted_bytes:
            moved.add(_moved_knobs(f.knobs, later.knobs))
            if len(moved) == MOVES:
                break
    if len(moved) < MOVES:
        return None
    for f in window:
        if f.stepped or f.tried_bytes is not None or not f.measured_bytes:
            return None
        if f.measure != window[-1].measure:
            return None
    return window
