"""Training throughput from heartbeat step timestamps, and the one-probe choice (pure).

Why not "samples done / seconds since launch": an attempt's first minutes are start-up
(interpreter, torch, the model load, DeepSpeed's engine, the first step's lazy allocations),
which has nothing to do with how fast a config trains and dominates a short measurement: two
configs of the same model would be ranked by start-up noise. The heartbeats carry the
trainer's own wall-clock stamp of each optimizer step (``protocol.Heartbeat.time_s``), so
the rate is measured between two step heartbeats: from the first step the attempt reported
(its start-up and its first step's lazy initialisation behind it) to the newest one. P5
measured throughput the same way, steps 2-4 only (``bench/RESULTS.md``).

The probe (``fit_probe: true``): the first-fit estimate orders configs by a coarse step-time
model, and on a CPU the largest micro-batch that fits is not the fastest (P5: micro 1-2 ran
~30 % more samples/s than micro 4-8 for the small model). Each run with the probe on tries
one unmeasured config next to the fastest config the store knows (the next-larger
micro-batch when the estimate says it fits, else the next-smaller; see
:func:`choose_probe`), measures it, and the store keeps both rates, so the next run starts at
the faster one. It never plans a config known or predicted not to fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dsguard.job.knobs import Knobs

#: Step intervals needed before a rate is trusted: one interval is one step's time, which a
#: checkpoint save or an evaluation inside it can double.
MIN_INTERVALS = 2


@dataclass(frozen=True, slots=True)
class StepMark:
    """One step heartbeat: the optimizer step reached and the trainer's wall clock then."""

    time_s: float
    step: int


@dataclass(frozen=True, slots=True)
class StepRate:
    """Optimizer steps per second between two step heartbeats (start-up excluded)."""

    steps_per_s: float
    from_step: int
    to_step: int
    span_s: float

    def samples_per_s(self, global_batch: int) -> float:
        return self.steps_per_s * global_batch


def add_mark(marks: Sequence[StepMark], mark: StepMark) -> tuple[StepMark, ...]:
    """``marks`` with ``mark`` appended when it is a new, later step (a re-read of the same
    heartbeat, or a step number that went back after a resume, is not a new interval)."""
    if mark.step < 1:
        return tuple(marks)  # train_begin: step 0 is the end of start-up, not a step
    if marks and (mark.step <= marks[-1].step or mark.time_s <= marks[-1].time_s):
        return tuple(marks)
    return (*marks, mark)


def step_rate(marks: Sequence[StepMark], *, min_intervals: int = MIN_INTERVALS) -> StepRate | None:
    """The rate from the first step mark to the newest; None before ``min_intervals`` steps
    have passed after the first mark (too short to say anything)."""
    if len(marks) < 2:
        return None
    first, last = marks[0], marks[-1]
    steps, span = last.step - first.step, last.time_s - first.time_s
    if steps < min_intervals or span <= 0:
        return None
    return StepRate(steps / span, first.step, last.step, span)


@dataclass(frozen=True, slots=True)
class ProbeChoice:
    """The config one run tries so the store learns its speed (see the module docstring)."""

    knobs: Knobs
    #: The fastest config the store measured, and its rate (what the probe must beat).
    baseline: Knobs
    baseline_samples_per_s: float
    direction: str  # "larger" or "smaller" micro-batch


def neighbours(k: Knobs, min_micro: int = 1) -> list[tuple[str, Knobs]]:
    """Same global batch, micro-batch doubled or halved (accumulation the other way, so
    the optimisation is unchanged: the ``micro_batch`` rung's exact split)."""
    micro, accum = k.micro_batch_size, k.gradient_accumulation_steps
    out: list[tuple[str, Knobs]] = []
    if accum % 2 == 0:
        out.append(
            (
                "larger",
                k.replace(micro_batch_size=micro * 2, gradient_accumulation_steps=accum // 2),
            )
        )
    if micro % 2 == 0 and micro // 2 >= min_micro:
        out.append(
            (
                "smaller",
                k.replace(micro_batch_size=micro // 2, gradient_accumulation_steps=accum * 2),
            )
        )
    return out


def choose_probe(
    measured: Mapping[Knobs, float],
    failed: set[Knobs] | frozenset[Knobs],
    predicted_fit: Callable[[Knobs], bool],
    *,
    min_micro: int = 1,
) -> ProbeChoice | None:
    """The config to try this run, or None when nothing is left to learn.

    ``measured``: configs known to fit with their best samples/s; ``failed``: configs known to
    run out of memory; ``predicted_fit``: the estimate's verdict (a config it does not
    predict to fit is never probed). From the fastest measured config, walk the micro-batch
    chain (global batch kept) in each direction past configs already measured to the first
    unmeasured one: the larger direction first (fewer, bigger steps usually win on an
    accelerator), the smaller one when the larger is exhausted, known to fail or predicted
    not to fit. Walking past a measured, slower neighbour matters: P5's small model ran
    8x2 4.4, 4x4 4.2, 2x8 5.4, 1x16 5.8 samples/s, so stopping at the first slower
    neighbour would keep 8x2 at 0.77 of the best. The chain has at most
    log2(global batch) + 1 configs, so the probing ends after that many runs.
    """
    if not measured:
        return None
    best = max(measured, key=lambda k: measured[k])
    for direction in ("larger", "smaller"):
        k: Knobs | None = best
        while k is not None and (k == best or k in measured):
            k = dict(neighbours(k, min_micro)).get(direction)
        if k is None or k in failed or not predicted_fit(k):
            continue
        return ProbeChoice(k, best, measured[best], direction)
    return None
