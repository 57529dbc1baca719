"""Throughput from step heartbeats, the store's fastest-known choice and ``fit_probe``
(the pure parts directly; the loop with the FakeHost and a real SQLite store)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsguard.core.fit import KnownOutcome, plan_fit
from dsguard.core.rungs import RungContext
from dsguard.core.throughput import StepMark, add_mark, choose_probe, neighbours, step_rate
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs
from dsguard.run.store import KnownGoodStore
from dsguard.testing import Beat, Script
from tests.test_fit_loop import GIB, _facts, _named, _run

START = Knobs(16, 1, zero_stage=2)


def _k(micro: int, accum: int) -> Knobs:
    return START.replace(micro_batch_size=micro, gradient_accumulation_steps=accum)


# -- the rate ---------------------------------------------------------------------------------


def test_the_rate_runs_between_step_heartbeats_not_from_launch() -> None:
    """Launch at t=0, 60 s of start-up, then steps 1, 2, 3 every 2 s: 0.5 steps/s. Since
    launch it would read 3/64 = 0.05, a tenth of the truth."""
    marks: tuple[StepMark, ...] = ()
    for t, step in ((60.0, 0), (62.0, 1), (62.0, 1), (64.0, 2), (66.0, 3)):
        marks = add_mark(marks, StepMark(t, step))
    assert [m.step for m in marks] == [1, 2, 3]  # step 0 and the re-read are not intervals
    rate = step_rate(marks)
    assert rate is not None
    assert rate.steps_per_s == pytest.approx(0.5)
    assert (rate.from_step, rate.to_step, rate.span_s) == (1, 3, 4.0)
    assert rate.samples_per_s(16) == pytest.approx(8.0)


def test_too_few_steps_or_a_step_going_back_give_no_rate() -> None:
    one_interval = (StepMark(10.0, 1), StepMark(11.0, 2))
    assert step_rate(one_interval) is None
    assert step_rate(one_interval, min_intervals=1) is not None
    back = add_mark(one_interval, StepMark(12.0, 1))  # a resume restarted the count
    assert back == one_interval


# -- the store's fastest-known choice ---------------------------------------------------------


def test_the_fastest_known_config_wins_over_the_largest_known() -> None:
    """On a CPU micro 1 ran faster than micro 8 (P5): the store knows both fit; the plan
    starts at the faster, smaller one."""
    ctx = RungContext(
        min_micro_batch_size=1, min_max_length=64, flags=DEFAULT_FLAGS, has_deepspeed=True,
        can_start_phase=True,
    )  # fmt: skip
    # (no failure of 16x1 here: 8x2 would then have fitted at the edge, one micro_batch
    # step below a failure, and be started one step safer: test_fit_evidence)
    known = {
        _k(8, 2): KnownOutcome(True, 4.4),
        _k(1, 16): KnownOutcome(True, 5.8),
    }
    plan = plan_fit(START, ctx, _facts(10_000 * GIB), known)
    assert plan.source == "store" and plan.chosen is not None
    assert plan.chosen.knobs == _k(1, 16)
    slower = {**known, _k(1, 16): KnownOutcome(True, 3.0)}
    plan = plan_fit(START, ctx, _facts(10_000 * GIB), slower)
    assert plan.chosen is not None and plan.chosen.knobs == _k(8, 2)


# -- the probe choice -------------------------------------------------------------------------


def test_the_probe_tries_the_larger_neighbour_then_the_smaller() -> None:
    base = _k(4, 4)
    assert dict(neighbours(base)) == {"larger": _k(8, 2), "smaller": _k(2, 8)}
    assert neighbours(_k(2, 1), min_micro=2) == []  # accum odd, micro at the floor

    def everything_fits(_k: Knobs) -> bool:
        return True

    got = choose_probe({base: 2.0}, set(), everything_fits)
    assert got is not None and (got.knobs, got.direction) == (_k(8, 2), "larger")
    assert (got.baseline, got.baseline_samples_per_s) == (base, 2.0)
    got = choose_probe({base: 2.0}, {_k(8, 2)}, everything_fits)  # larger known to fail
    assert got is not None and got.knobs == _k(2, 8)
    got = choose_probe({base: 2.0}, set(), lambda k: k.micro_batch_size <= 4)
    assert got is not None and got.knobs == _k(2, 8)  # larger predicted not to fit
    assert choose_probe({}, set(), everything_fits) is None  # nothing measured yet


def test_the_probe_walks_past_a_slower_neighbour_and_stops_when_all_are_measured() -> None:
    """P5's small model, global batch 16: 8x2 4.4, 4x4 4.2 samples/s. Stopping at the slower
    4x4 would never find 2x8 (5.4) and 1x16 (5.8)."""

    def up_to_8(k: Knobs) -> bool:
        return k.micro_batch_size <= 8

    seen = {_k(8, 2): 4.4, _k(4, 4): 4.2}
    got = choose_probe(seen, set(), up_to_8)
    assert got is not None and (got.knobs, got.direction) == (_k(2, 8), "smaller")
    assert got.baseline == _k(8, 2)
    seen |= {_k(2, 8): 5.4}
    got = choose_probe(seen, set(), up_to_8)
    assert got is not None and got.knobs == _k(1, 16) and got.baseline == _k(2, 8)
    seen |= {_k(1, 16): 5.8}
    assert choose_probe(seen, set(), up_to_8) is None  # 16x1 predicted not to fit: done
    assert choose_probe(seen, set(), lambda k: True) is not None  # 16x1 would be next
    assert choose_probe(seen, {_k(16, 1)}, lambda k: True) is None  # known to fail


# -- the loop (FakeHost, real store) ----------------------------------------------------------


def _steps(*at_s: float) -> Script:
    """An attempt that reports steps 1, 2, ... at the given seconds after its spawn."""
    beats = tuple(Beat(at_s=t, step=i + 1, gpu_mem_bytes=GIB) for i, t in enumerate(at_s))
    return Script(heartbeats=beats, exit_at_s=at_s[-1] + 1.0)


def test_the_loop_measures_throughput_from_heartbeats(tmp_path: Path) -> None:
    facts = dataclasses.replace(_facts(10_000 * GIB), signature="regime-t")
    code, events, _ = _run(tmp_path, [_steps(20.0, 25.0, 30.0)], facts)
    assert code == 0
    (tp,) = _named(events, "throughput_measured")
    # 2 steps in 10 s after a 20 s start-up: 0.2 steps/s, x16 samples; not 3*16/31.
    assert tp["steps_per_s"] == pytest.approx(0.2)
    assert tp["samples_per_s"] == pytest.approx(3.2)
    assert (tp["from_step"], tp["to_step"]) == (1, 3)
    (known,) = KnownGoodStore().lookup("regime-t")
    assert known.outcome == "fit" and known.samples_per_s == pytest.approx(3.2)


def test_a_probe_slower_than_the_baseline_is_not_kept(tmp_path: Path) -> None:
    """The store knows 4x4 at 2.0 samples/s. Run 1 (``fit_probe: true``) starts at the
    unmeasured larger neighbour 8x2 and measures 1.6: ``fit_probe_decided`` keeps 4x4.
    Run 2 (no probe) starts at 4x4, the fastest known, although 8x2 is known to fit too."""
    facts = dataclasses.replace(_facts(10_000 * GIB), signature="regime-p")
    KnownGoodStore().record("regime-p", _k(4, 4).as_dict(), "fit", GIB, 2.0)
    code, events, _ = _run(tmp_path / "one", [_steps(20.0, 30.0, 40.0)], facts, fit_probe=True)
    assert code == 0
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "probe" and applied["path"] == ["fit_probe"]
    (planned,) = _named(events, "fit_probe_planned")
    assert planned["knobs"] == _k(8, 2).as_dict() == applied["knobs"]
    assert planned["direction"] == "larger" and planned["baseline_samples_per_s"] == 2.0
    assert _named(events, "attempt_started")[0]["knobs"] == _k(8, 2).as_dict()
    (decided,) = _named(events, "fit_probe_decided")
    assert decided["probe_samples_per_s"] == pytest.approx(1.6)
    assert decided["kept_knobs"] == _k(4, 4).as_dict() and decided["speedup"] == 0.8
    code, events, _ = _run(tmp_path / "two", [_steps(20.0, 25.0, 30.0)], facts)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == _k(4, 4).as_dict()
    assert not _named(events, "fit_probe_planned")


def test_a_faster_probe_is_where_the_next_run_starts(tmp_path: Path) -> None:
    facts = dataclasses.replace(_facts(10_000 * GIB), signature="regime-f")
    KnownGoodStore().record("regime-f", _k(4, 4).as_dict(), "fit", GIB, 2.0)
    _, events, _ = _run(tmp_path / "one", [_steps(20.0, 22.0, 24.0)], facts, fit_probe=True)
    (decided,) = _named(events, "fit_probe_decided")
    assert decided["kept_knobs"] == _k(8, 2).as_dict() and decided["speedup"] == 4.0
    _, events, _ = _run(tmp_path / "two", [_steps(20.0, 25.0, 30.0)], facts)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == _k(8, 2).as_dict()


def test_fit_probe_is_a_validated_job_key(tmp_path: Path) -> None:
    from dsguard.errors import JobFileError
    from dsguard.job.file import load_job
    from tests.conftest import write_job

    for sub in "abc":
        (tmp_path / sub).mkdir()
    assert load_job(write_job(tmp_path / "a", [], fit_probe=True)).fit_probe is True
    assert load_job(write_job(tmp_path / "b", [])).fit_probe is False
    with pytest.raises(JobFileError) as info:
        load_job(write_job(tmp_path / "c", [], fit_probe="often"))
    (problem,) = [p for p in info.value.problems if p.field == "fit_probe"]
    assert problem.line is not None and problem.line > 0


def test_a_probe_that_runs_out_of_memory_is_healed_and_never_probed_again(
    tmp_path: Path,
) -> None:
    """The estimate said 8x2 fits, the real attempt ran out of memory: the ladder heals it
    in the same run, the store records 8x2 as failed, and the next probe goes the other way."""
    from tests.test_fit_loop import OOM

    facts = dataclasses.replace(_facts(10_000 * GIB), signature="regime-o")
    KnownGoodStore().record("regime-o", _k(4, 4).as_dict(), "fit", GIB, 2.0)
    oom = Script(lines=((1.0, OOM),), exit_at_s=None)
    code, events, _ = _run(tmp_path / "one", [oom, _steps(20.0, 25.0, 30.0)], facts,
                           fit_probe=True)  # fmt: skip
    assert code == 0
    started = _named(events, "attempt_started")
    assert started[0]["knobs"] == _k(8, 2).as_dict() and len(started) == 2
    assert not _named(events, "fit_probe_decided")  # the probe never measured a speed
    outcomes = {
        (r.knobs["micro_batch_size"], r.outcome) for r in KnownGoodStore().lookup("regime-o")
    }
    assert (8, "oom") in outcomes
    _, events, _ = _run(tmp_path / "two", [_steps(20.0, 25.0, 30.0)], facts, fit_probe=True)
    (planned,) = _named(events, "fit_probe_planned")
    assert planned["direction"] == "smaller" and planned["knobs"] == _k(2, 8).as_dict()
