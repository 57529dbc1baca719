"""``fit_probe: in_run`` (issue 15): the probe inside one run. The pure stages directly; the
loop with the FakeHost (a fake clock: the rates below are exact) and a real SQLite store;
the job-file key with its errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dsguard.core.throughput import (
    KEEP_MARGIN,
    InRunProbe,
    ProbeMove,
    probe_memory_failure,
    probe_rate,
)
from dsguard.job.knobs import Knobs
from dsguard.run.store import KnownGoodStore, summarize
from dsguard.testing import Beat, Script
from tests.test_fit_loop import GIB, OOM, _facts, _named, _run

START = Knobs(16, 1, zero_stage=2)


def _k(micro: int, accum: int) -> Knobs:
    return START.replace(micro_batch_size=micro, gradient_accumulation_steps=accum)


def _fits(_k: Knobs) -> bool:
    return True


# -- the pure stages --------------------------------------------------------------------------


def test_a_measured_config_moves_to_its_neighbour_and_the_faster_is_kept() -> None:
    def four_or_eight(k: Knobs) -> bool:
        return k.micro_batch_size in (4, 8)

    p = InRunProbe(_k(4, 4), steps=4)
    p, move = probe_rate(p, _k(4, 4), 2.0, known={}, known_failed=set(),
                         predicted_fit=four_or_eight)  # fmt: skip
    assert move == ProbeMove(_k(8, 2), "probe")  # the larger first, global batch kept
    assert (p.stage, p.b, p.a_samples_per_s) == ("measure_b", _k(8, 2), 2.0)
    faster = 2.0 * (1 + KEEP_MARGIN) + 0.01
    kept, move = probe_rate(p, _k(8, 2), faster, known={}, known_failed=set(),
                            predicted_fit=four_or_eight)  # fmt: skip
    assert move is None and kept.kept == _k(8, 2) and kept.stage == "done"
    # Faster by less than the margin is noise: back to the config that ran first.
    back, move = probe_rate(p, _k(8, 2), 2.05, known={}, known_failed=set(),
                            predicted_fit=four_or_eight)  # fmt: skip
    assert move == ProbeMove(_k(4, 4), "slower") and back.kept == _k(4, 4)
    assert back.b_samples_per_s == 2.05 and back.stage == "done"


def test_the_walk_passes_a_slower_neighbour_to_the_fastest() -> None:
    """P5's small model (scenario C: micro 8 fits, 16 does not): 8x2 4.4, 4x4 4.2, 2x8 5.4,
    1x16 5.8 samples/s. One run measures each once and ends at 1x16, the sweep's best."""
    rates = {_k(8, 2): 4.42, _k(4, 4): 4.24, _k(2, 8): 5.44, _k(1, 16): 5.76}

    def up_to_8(k: Knobs) -> bool:
        return k.micro_batch_size <= 8

    p, at, moves = InRunProbe(_k(8, 2)), _k(8, 2), []
    while True:
        p, move = probe_rate(p, at, rates[at], known={}, known_failed=set(),
                             predicted_fit=up_to_8)  # fmt: skip
        if move is None:
            break
        moves.append((move.to.micro_batch_size, move.why))
        at = move.to
    assert moves == [(4, "probe"), (2, "probe"), (1, "probe")]
    assert p.kept == at == _k(1, 16) and p.stage == "done"


def test_the_store_and_the_estimate_limit_what_is_probed() -> None:
    p = InRunProbe(_k(4, 4))
    # The larger is known to fail (store) and the smaller is known slower than this run's
    # rate: walked past to the next smaller one.
    _, move = probe_rate(p, _k(4, 4), 2.0, known={_k(2, 8): 1.5}, known_failed={_k(8, 2)},
                         predicted_fit=_fits)  # fmt: skip
    assert move == ProbeMove(_k(1, 16), "probe")
    # A neighbour the store says is faster is measured again here, under the same load.
    _, move = probe_rate(p, _k(4, 4), 2.0, known={_k(8, 2): 9.0}, known_failed=set(),
                         predicted_fit=_fits)  # fmt: skip
    assert move == ProbeMove(_k(8, 2), "probe")
    # Nothing predicted to fit, or nothing left: no move, the probe is over.
    done, move = probe_rate(p, _k(4, 4), 2.0, known={}, known_failed=set(),
                            predicted_fit=lambda k: k == _k(4, 4))  # fmt: skip
    assert move is None and done.stage == "done"


def test_out_of_memory_at_the_neighbour_goes_back_and_is_remembered() -> None:
    p = InRunProbe(_k(4, 4), stage="measure_b", b=_k(8, 2), a_samples_per_s=2.0)
    back, move = probe_memory_failure(p, _k(8, 2))
    assert move == ProbeMove(_k(4, 4), "out_of_memory")
    assert back.kept == _k(4, 4) and _k(8, 2) in back.failed
    # At the run's own config the ladder heals it; the probe only remembers it.
    first = InRunProbe(_k(8, 2))
    after, move = probe_memory_failure(first, _k(8, 2))
    assert move is None and after.stage == "measure_a" and after.failed == {_k(8, 2)}
    # ...and, measured at the config the ladder moved to, never probes it again.
    _, move = probe_rate(after, _k(4, 4), 2.0, known={}, known_failed=set(), predicted_fit=_fits)
    assert move == ProbeMove(_k(2, 8), "probe")


def test_a_ladder_move_away_from_the_neighbour_ends_the_probe() -> None:
    """Another failure at the neighbour made the ladder move the run elsewhere: the
    comparison no longer holds, and the run goes on where the ladder put it."""
    p = InRunProbe(_k(4, 4), stage="measure_b", b=_k(8, 2), a_samples_per_s=2.0)
    done, move = probe_rate(p, _k(4, 4).replace(gradient_checkpointing=True), 9.0, known={},
                            known_failed=set(), predicted_fit=_fits)  # fmt: skip
    assert move is None and done.stage == "done"


def test_without_an_estimate_only_a_smaller_micro_batch_is_tried() -> None:
    """No model shape (no estimator): a larger micro-batch could need any amount of memory;
    a smaller one needs less than the config that ran."""
    from dsguard.run.fit import FitState

    ok = FitState(None, "no local model config found").probe_fits(_k(4, 4))
    assert ok(_k(2, 8)) and ok(_k(4, 4)) and not ok(_k(8, 2))
    _, move = probe_rate(InRunProbe(_k(4, 4)), _k(4, 4), 2.0, known={}, known_failed=set(),
                         predicted_fit=ok)  # fmt: skip
    assert move == ProbeMove(_k(2, 8), "probe")


# -- the loop ---------------------------------------------------------------------------------


def _attempt(
    first: int, at: tuple[float, ...], *, ckpt: tuple[tuple[float, int], ...] = (),
    exits: bool = False, lines: tuple[tuple[float, str], ...] = (),
) -> Script:  # fmt: skip
    """Steps ``first``, ``first + 1``, ... at the given seconds after the spawn; exits 0
    a second after the last when ``exits``, else waits for dsguard's signal."""
    beats = tuple(Beat(at_s=t, step=first + i, gpu_mem_bytes=GIB) for i, t in enumerate(at))
    return Script(heartbeats=beats, checkpoints=ckpt, lines=lines,
                  exit_at_s=at[-1] + 1.0 if exits else None)  # fmt: skip


def _probe_run(tmp_path: Path, scripts: list[Script], sig: str, **job: Any):  # type: ignore[no-untyped-def]
    facts = dataclasses.replace(_facts(10_000 * GIB), signature=sig)
    return _run(tmp_path, scripts, facts, fit_probe="in_run", **job)


def _rates(sig: str) -> dict[int, Any]:
    return {
        e["knobs"]["micro_batch_size"]: (e["outcome"], e["samples_per_s"])
        for e in summarize(KnownGoodStore().lookup(sig)).values()
    }


# A: 16x1, steps 1-5 two seconds apart (0.5 steps/s = 8 samples/s), checkpoint-4 saved.
A_FIRST = _attempt(1, (20.0, 22.0, 24.0, 26.0, 28.0), ckpt=((27.0, 4),))


def test_a_faster_neighbour_is_kept_for_the_rest_of_the_run(tmp_path: Path) -> None:
    """16x1 (8 samples/s) -> 8x2 (16 samples/s), kept; the next one, 4x4, is known to run
    out of memory (the store), so the walk ends at 8x2."""
    KnownGoodStore().record("regime-in-1", _k(4, 4).as_dict(), "oom", None, None)
    b = _attempt(5, (15.0, 16.0, 17.0, 18.0, 19.0, 20.0), exits=True)  # 1 step/s: 16/s
    code, events, _ = _probe_run(tmp_path, [A_FIRST, b], "regime-in-1")
    assert code == 0
    started = _named(events, "attempt_started")
    assert [s["knobs"]["micro_batch_size"] for s in started] == [16, 8]
    assert started[1]["resume_from"].endswith("checkpoint-4")
    assert {s["global_batch"] for s in started} == {16}
    (switched,) = _named(events, "fit_probe_switched")
    assert switched["reason"] == "probe" and switched["to_knobs"] == _k(8, 2).as_dict()
    assert switched["samples_per_s"] == pytest.approx(8.0)
    assert (switched["last_step"], switched["resume_step"], switched["steps_redone"]) == (5, 4, 1)
    (decided,) = _named(events, "fit_probe_decided")
    assert decided["kept_knobs"] == _k(8, 2).as_dict() and decided["speedup"] == 2.0
    (cost,) = _named(events, "fit_probe_cost")
    assert cost["switches"] == 1 and cost["steps_redone"] == 1 and cost["finished"]
    # From the decision (A's step 5 seen at t=28) to B's first step: the end of A, the
    # GPU-release check and B's 15 s start-up; the redone step took A 2 s.
    assert 15.0 < cost["restart_s"] < 17.0 and cost["redone_s"] == 2.0
    assert _named(events, "state_changed")[-2]["to_state"] == "running"
    (done,) = _named(events, "run_succeeded")
    assert done["knobs"] == _k(8, 2).as_dict() and done["global_batch"] == 16
    assert _rates("regime-in-1") == {16: ("fit", pytest.approx(8.0)),
                                     8: ("fit", pytest.approx(16.0)), 4: ("oom", None)}  # fmt: skip


def test_a_neighbour_that_is_not_faster_goes_back(tmp_path: Path) -> None:
    KnownGoodStore().record("regime-in-2", _k(4, 4).as_dict(), "oom", None, None)
    b = _attempt(5, (15.0, 17.0, 19.0, 21.0, 23.0), ckpt=((22.0, 8),))  # 0.5 steps/s
    again = _attempt(9, (12.0, 14.0), exits=True)
    code, events, _ = _probe_run(tmp_path, [A_FIRST, b, again], "regime-in-2")
    assert code == 0
    started = _named(events, "attempt_started")
    assert [s["knobs"]["micro_batch_size"] for s in started] == [16, 8, 16]
    assert started[2]["resume_from"].endswith("checkpoint-8")
    assert [s["reason"] for s in _named(events, "fit_probe_switched")] == ["probe", "slower"]
    (decided,) = _named(events, "fit_probe_decided")
    assert decided["kept_knobs"] == START.as_dict() and decided["speedup"] == 1.0
    (cost,) = _named(events, "fit_probe_cost")
    assert (
        cost["switches"] == 2
        and cost["steps_redone"] == 2
        and cost["kept_knobs"] == (START.as_dict())
    )
    assert not _named(events, "failure_detected")
    (done,) = _named(events, "run_succeeded")
    assert done["knobs"] == START.as_dict() and done["attempts"] == 3


def test_no_neighbour_to_probe_means_no_switch(tmp_path: Path) -> None:
    """16x1 has no larger neighbour (accumulation 1) and the store knows 8x2 ran out of
    memory: nothing is tried, the run trains on at 16x1."""
    KnownGoodStore().record("regime-in-3", _k(8, 2).as_dict(), "oom", None, None)
    a = _attempt(1, (20.0, 22.0, 24.0, 26.0, 28.0, 30.0), exits=True)
    code, events, _ = _probe_run(tmp_path, [a], "regime-in-3")
    assert code == 0 and len(_named(events, "attempt_started")) == 1
    assert not [e for e in events if e["event"].startswith("fit_probe")]


def test_a_run_too_short_to_measure_never_switches(tmp_path: Path) -> None:
    a = _attempt(1, (20.0, 22.0, 24.0), exits=True)  # 2 intervals; the probe needs 4
    code, events, _ = _probe_run(tmp_path, [a], "regime-in-4")
    assert code == 0 and len(_named(events, "attempt_started")) == 1
    assert not [e for e in events if e["event"].startswith("fit_probe")]
    (tp,) = _named(events, "throughput_measured")  # measured all the same, for the store
    assert tp["samples_per_s"] == pytest.approx(8.0)


def test_out_of_memory_at_the_neighbour_goes_back_without_spending_the_budget(
    tmp_path: Path,
) -> None:
    """``max_attempts: 1``: any counted failure would end the run. The neighbour's OOM is
    said (``failure_detected``), remembered in the store, and the run goes back to 16x1."""
    b = Script(lines=((10.0, OOM),), exit_at_s=None)
    again = _attempt(5, (12.0, 14.0), exits=True)
    code, events, _ = _probe_run(tmp_path, [A_FIRST, b, again], "regime-in-5",
                                 limits={"max_attempts": 1})  # fmt: skip
    assert code == 0
    started = _named(events, "attempt_started")
    assert [s["knobs"]["micro_batch_size"] for s in started] == [16, 8, 16]
    assert started[2]["resume_from"].endswith("checkpoint-4")
    (failure,) = _named(events, "failure_detected")
    assert failure["kind"] == "cuda_oom"
    switched = _named(events, "fit_probe_switched")
    assert [s["reason"] for s in switched] == ["probe", "out_of_memory"]
    assert switched[1]["samples_per_s"] is None and switched[1]["steps_redone"] == 0
    assert not _named(events, "fit_probe_decided")  # the neighbour never had a rate
    (cost,) = _named(events, "fit_probe_cost")
    assert cost["switches"] == 2 and cost["kept_knobs"] == START.as_dict()
    assert not _named(events, "policy_applied")  # not a ladder move
    (done,) = _named(events, "run_succeeded")
    assert done["attempts"] == 3 and done["knobs"] == START.as_dict()
    rates = _rates("regime-in-5")
    assert rates[8] == ("oom", None) and rates[16][0] == "fit"


def test_the_walk_goes_on_past_a_kept_neighbour_and_back_to_the_fastest(tmp_path: Path) -> None:
    """16x1 8/s -> 8x2 16/s (kept) -> 4x4 12.8/s (slower) -> back to 8x2, which trains on
    (2x8, the next one past 4x4, is known to run out of memory)."""
    KnownGoodStore().record("regime-in-7", _k(2, 8).as_dict(), "oom", None, None)
    b = _attempt(5, (15.0, 16.0, 17.0, 18.0, 19.0), ckpt=((18.5, 8),))
    c = _attempt(10, (15.0, 16.0, 16.0 + 4 / 3, 16.0 + 8 / 3, 20.0), ckpt=((19.0, 13),))
    again = _attempt(15, (12.0, 13.0, 14.0), exits=True)
    code, events, _ = _probe_run(tmp_path, [A_FIRST, b, c, again], "regime-in-7")
    assert code == 0
    started = _named(events, "attempt_started")
    assert [s["knobs"]["micro_batch_size"] for s in started] == [16, 8, 4, 8]
    assert [s["resume_from"].rsplit("-", 1)[1] for s in started[1:]] == ["4", "8", "13"]
    switched = _named(events, "fit_probe_switched")
    assert [(s["reason"], s["to_knobs"]["micro_batch_size"]) for s in switched] == [
        ("probe", 8), ("probe", 4), ("slower", 8)
    ]  # fmt: skip
    decided = _named(events, "fit_probe_decided")
    assert [d["kept_knobs"]["micro_batch_size"] for d in decided] == [8, 8]
    assert [d["baseline_knobs"]["micro_batch_size"] for d in decided] == [16, 8]
    assert decided[1]["speedup"] == pytest.approx(0.8)  # 4 steps in 5 s: 12.8 samples/s
    (cost,) = _named(events, "fit_probe_cost")
    assert cost["switches"] == 3 and cost["kept_knobs"] == _k(8, 2).as_dict()
    (done,) = _named(events, "run_succeeded")
    assert done["knobs"] == _k(8, 2).as_dict() and done["attempts"] == 4


def test_the_probe_saves_before_it_switches_when_the_trainer_can(tmp_path: Path) -> None:
    """A trainer that announced save_and_stop is asked to save the step it reached: the
    neighbour resumes there and no step is trained twice."""
    KnownGoodStore().record("regime-in-6", _k(4, 4).as_dict(), "oom", None, None)
    caps = ("heartbeat", "save_and_stop")
    beats = tuple(Beat(at_s=20.0 + 2 * i, step=1 + i, capabilities=caps) for i in range(5))
    a = Script(heartbeats=beats, exit_at_s=None, save_on_stop_s=3.0, checkpoints=((30.5, 5),))
    b = _attempt(6, (15.0, 16.0, 17.0, 18.0, 19.0, 20.0), exits=True)
    code, events, _ = _probe_run(tmp_path, [a, b], "regime-in-6")
    assert code == 0
    (req,) = _named(events, "stop_requested")
    (switched,) = _named(events, "fit_probe_switched")
    assert (switched["last_step"], switched["resume_step"], switched["steps_redone"]) == (5, 5, 0)
    assert _named(events, "attempt_started")[1]["resume_from"].endswith("checkpoint-5")
    (cost,) = _named(events, "fit_probe_cost")
    assert cost["steps_redone"] == 0 and cost["redone_s"] == 0.0
    assert req["timeout_s"] > 0


# -- the job file -----------------------------------------------------------------------------


def test_fit_probe_in_run_is_a_validated_job_key(tmp_path: Path) -> None:
    from dsguard.cli.main import main
    from dsguard.errors import JobFileError
    from dsguard.job.file import load_job
    from dsguard.job.model import IN_RUN_PROBE_STEPS
    from tests.conftest import write_job

    def load(sub: str, **keys: Any):  # type: ignore[no-untyped-def]
        (tmp_path / sub).mkdir()
        return load_job(write_job(tmp_path / sub, [], **keys))

    job = load("a", fit_probe="in_run")
    assert (job.fit_probe, job.in_run_probe_steps) == (False, IN_RUN_PROBE_STEPS)
    assert load("b", fit_probe="in_run", fit_probe_steps=8).in_run_probe_steps == 8
    for sub, value in (("c", True), ("d", "next_run")):
        job = load(sub, fit_probe=value)  # true keeps meaning what it meant
        assert (job.fit_probe, job.in_run_probe_steps) == (True, None)
    for sub, keys, field, words in (
        ("e", {"fit_probe": "in-run"}, "fit_probe", "did you mean 'in_run'"),
        ("f", {"fit_probe": "in_run", "fit_probe_steps": 1}, "fit_probe_steps", ">= 2"),
        ("g", {"fit_probe": True, "fit_probe_steps": 8}, "fit_probe_steps",
         "only used with fit_probe: in_run"),
    ):  # fmt: skip
        with pytest.raises(JobFileError) as info:
            load(sub, **keys)
        (problem,) = [p for p in info.value.problems if p.field == field]
        assert problem.line is not None and problem.line > 0
        assert words in problem.message or words.replace(">= ", "greater than or equal to ") in (
            problem.message
        ), problem.message
    assert main(["validate", str(tmp_path / "e" / "job.yaml")]) == 2
