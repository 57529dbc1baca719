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
from dataclasses import dataclass, replace

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
    base: Knobs | None = None,
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

    ``base``: walk from this measured config instead of the fastest (the in-run probe keeps
    a config that is faster only by noise: :data:`KEEP_MARGIN`).
    """
    if not measured:
        return None
    best = max(measured, key=lambda k: measured[k])
    if base is not None and base in measured:
        best = base
    for direction in ("larger", "smaller"):
        k: Knobs | None = best
        while k is not None and (k == best or k in measured):
            k = dict(neighbours(k, min_micro)).get(direction)
        if k is None or k in failed or not predicted_fit(k):
            continue
        return ProbeChoice(k, best, measured[best], direction)
    return None


# -- issue 15: the probe inside one run (``fit_probe: in_run``) -------------------------------

#: A probed config replaces the one it is measured against only when it is more than this
#: much faster. Two rates of the same config differ by a few percent between measurements on
#: a shared machine (the step heartbeats of one attempt, a few steps each: P5's 3 runs per
#: config spread by up to ~3 % at the median, ``bench/RESULTS.md``); keeping a config that is
#: faster by noise alone would pay a restart for nothing.
KEEP_MARGIN = 0.03


@dataclass(frozen=True, slots=True)
class InRunProbe:
    """Where the probe inside one run stands (pure state; the loop keeps it per run).

    ``measure_a``: the run's config (the first fit's choice, or the job's own) trains until
    its rate is trusted; ``measure_b``: a neighbour (``b``) does the same; ``done``: the
    fastest config measured (``kept``) trains to the end, or there was nothing to probe.
    ``a`` is the config to beat: the fastest measured so far, by more than the margin."""

    a: Knobs
    #: Step intervals each config is timed over (``fit_probe_steps``).
    steps: int = MIN_INTERVALS
    stage: str = "measure_a"
    b: Knobs | None = None
    direction: str = ""
    a_samples_per_s: float | None = None
    b_samples_per_s: float | None = None
    kept: Knobs | None = None
    #: Every config measured in this run, with its rate.
    measured: tuple[tuple[Knobs, float], ...] = ()
    #: Configs that ran out of memory in this run (the store may be off or unusable).
    failed: frozenset[Knobs] = frozenset()


@dataclass(frozen=True, slots=True)
class ProbeMove:
    """End the running attempt and relaunch at ``to`` (resuming, global batch kept)."""

    to: Knobs
    #: "probe" (to a neighbour not measured yet), "slower" (back to the fastest measured:
    #: nothing is left to try), "out_of_memory" (back: the neighbour did not fit after all).
    why: str


def probe_rate(
    p: InRunProbe,
    knobs: Knobs,
    samples_per_s: float,
    *,
    known: Mapping[Knobs, float],
    known_failed: set[Knobs] | frozenset[Knobs],
    predicted_fit: Callable[[Knobs], bool],
    min_micro: int = 1,
) -> tuple[InRunProbe, ProbeMove | None]:
    """The probe's next state once the attempt at ``knobs`` has a trusted rate.

    A probed config replaces the one to beat only when faster by more than
    :data:`KEEP_MARGIN`. Then the next config to try is :func:`choose_probe`'s, walking from
    the one to beat past every config measured in this run (the larger micro-batch first,
    global batch kept): a hill climb that does not stop at a slower neighbour, since P5's
    small model ran 8x2 4.4, 4x4 4.2, 2x8 5.4, 1x16 5.8 samples/s. What the store measured
    in other runs (``known``) is used only to walk past a config known to be slower than
    the one to beat; one the store says is faster is measured again here, under this run's
    load (rates of two runs differ by more than configs do on a shared machine:
    ``bench/RESULTS.md`` P5SCALE live). A config that failed (``known_failed`` or this
    run's ``failed``) or is predicted not to fit is never tried. With nothing left to try,
    the run moves back to the fastest config measured, if it is not there already. Each
    config is measured once, so the switches are at most log2(global batch) + 1.
    """
    if p.stage == "done":
        return p, None
    if p.stage == "measure_b" and knobs != p.b:
        # The ladder moved the run elsewhere (another failure at the neighbour): the
        # comparison no longer holds, the run goes on where the ladder put it.
        return replace(p, stage="done"), None
    measured = {**dict(p.measured), knobs: samples_per_s}
    best, rate = knobs, samples_per_s
    if p.stage == "measure_b" and p.a_samples_per_s is not None:
        if samples_per_s <= p.a_samples_per_s * (1 + KEEP_MARGIN):
            best, rate = p.a, p.a_samples_per_s
        p = replace(p, b_samples_per_s=samples_per_s)
    p = replace(p, a=best, a_samples_per_s=rate, kept=best, measured=tuple(measured.items()))
    slower = {k: r for k, r in known.items() if k not in measured and r < rate}
    choice = choose_probe(
        {**slower, **measured}, {*known_failed, *p.failed}, predicted_fit,
        min_micro=min_micro, base=best,
    )  # fmt: skip
    if choice is not None:
        nxt = replace(p, b=choice.knobs, direction=choice.direction, stage="measure_b")
        return nxt, ProbeMove(choice.knobs, "probe")
    done = replace(p, stage="done")
    return done, (None if knobs == best else ProbeMove(best, "slower"))


def probe_memory_failure(p: InRunProbe, knobs: Knobs) -> tuple[InRunProbe, ProbeMove | None]:
    """An attempt at ``knobs`` ran out of memory. At the probed neighbour: back to the
    fastest config measured (it fits, its rate is known); the probe ends there. This is not
    a ladder move and spends no failure budget: the failure is dsguard's own exploration.
    Anywhere else the ladder heals it as usual; the config is remembered so the probe never
    tries it."""
    failed = replace(p, failed=p.failed | {knobs})
    if p.stage == "measure_b" and knobs == p.b:
        return replace(failed, kept=p.a, stage="done"), ProbeMove(p.a, "out_of_memory")
    return failed, None
