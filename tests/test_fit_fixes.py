"""Issue 15 follow-ups: the store's environment fingerprint, calibration from the attempt's
process tree without heartbeats, a memory floor no move changes, bucket halvings against a
non-bucket allocation, and probe switches in the metrics (FakeHost; facts as plain values)."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dsguard.cli.main import main
from dsguard.core.estimate import ModelShape, Regime, estimate
from dsguard.core.evidence import MoveEvidence, OomFigures, buckets_futile, choose_move
from dsguard.core.fit import FitInputs
from dsguard.core.floor import MemoryFailure, judge_floor
from dsguard.core.summary import build, summary_line
from dsguard.host.cgroup import MemoryCgroup, group_peak_bytes, memory_cgroups
from dsguard.host.memory import tree_peaks
from dsguard.job.file import load_job
from dsguard.job.knobs import Knobs
from dsguard.job.model import HOST_OOM_RUNGS
from dsguard.report.metrics import Metrics
from dsguard.run.fit import FitState, fit_inputs, training_environment
from dsguard.run.loop import Supervisor
from dsguard.run.sdnotify import Notifier
from dsguard.run.store import KnownGoodStore
from dsguard.testing import Beat, FakeHost, Script
from tests.conftest import write_job
from tests.test_fit_evidence import CTX
from tests.test_fit_loop import (
    CPU_OOM,
    GIB,
    OOM,
    _facts,
    _named,
    _ok,
    _plan_job,
    _run,
    run_fit_job,
)  # fmt: skip
from tests.test_fit_probe_in_run import A_FIRST, _attempt, _k

# -- 1. the store sees the training environment -----------------------------------------------


def test_the_fingerprint_changes_when_a_package_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real interpreter, asked the way a run asks it; a distribution added to its path
    (as ``pip install datasets`` would) changes the fingerprint, not the three versions."""
    before = training_environment(sys.executable)
    assert len(before.fingerprint) == 16 and before.distributions > 0
    assert set(before.versions) == {"torch", "deepspeed", "transformers"}
    info = tmp_path / "fakepkg_dsguard_test-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg-dsguard-test\n"
                                   "Version: 1.0\n")  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    after = training_environment(sys.executable)
    assert after.versions == before.versions
    assert after.distributions == before.distributions + 1
    assert after.fingerprint != before.fingerprint
    # Another dsguard (an upgrade of the supervisor) is not the training's environment.
    other = tmp_path / "other"
    (other / "dsguard-99.0.dist-info").mkdir(parents=True)
    (other / "dsguard-99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dsguard\nVersion: 99.0\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{other}")
    assert training_environment(sys.executable).fingerprint == after.fingerprint
    assert training_environment("/nonexistent/python").fingerprint == ""


def _heal_once(tmp_path: Path, facts: object) -> dict[str, object]:
    """Run 1: nothing is predicted to fit, the ladder heals one OOM; the healed knobs."""
    oom = Script(lines=((1.0, "step 0"), (3.0, OOM)), exit_at_s=None)
    fits = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5,
                  heartbeats=(Beat(at_s=2.0, step=2, gpu_mem_bytes=GIB),))  # fmt: skip
    code, events, _ = _run(tmp_path, [oom, fits], facts)  # type: ignore[arg-type]
    assert code == 0
    healed: dict[str, object] = _named(events, "attempt_started")[1]["knobs"]
    return healed


def test_a_record_from_another_environment_is_a_hint_one_step_safer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The P5LIVE case: the venv changed between runs (the regime signature the same). The
    record from the old environment is not trusted as known-good: the plan starts one exact
    step safer than it, says so in ``plan_applied``; that run's outcome is recorded under the
    new environment, and the next run of it trusts it (``source: store``)."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    old = dataclasses.replace(_facts(1 * GIB), signature="regime", env_fingerprint="aaaa")
    healed = _heal_once(tmp_path / "one", old)

    new = dataclasses.replace(old, env_fingerprint="bbbb")
    code, events, _ = _run(tmp_path / "two", [_ok()], new)
    assert code == 0
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store_other_env"
    assert "another training environment" in applied["reason"]
    assert "fingerprint aaaa, this one bbbb" in applied["reason"]
    assert applied["knobs"] != healed and "step safer" in applied["reason"]
    started = _named(events, "attempt_started")
    assert [s["knobs"] for s in started] == [applied["knobs"]]
    safer = applied["knobs"]

    code, events, _ = _run(tmp_path / "three", [_ok()], new)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == safer
    # The old environment still trusts its own record.
    code, events, _ = _run(tmp_path / "four", [_ok()], old)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == healed


def test_an_old_store_without_the_column_is_migrated_and_read_as_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE attempts (signature TEXT NOT NULL, knobs TEXT NOT NULL, outcome TEXT "
        "NOT NULL, peak_bytes INTEGER, samples_per_s REAL, recorded_s REAL NOT NULL);"
        "INSERT INTO attempts VALUES ('sig', '{\"micro_batch_size\": 4}', 'fit', 7, 1.5, 1.0);"
    )
    con.commit()
    con.close()
    store = KnownGoodStore(path)
    (rec,) = store.lookup("sig")
    assert rec.env is None and rec.peak_bytes == 7
    store.record("sig", {"micro_batch_size": 2}, "fit", 5, 2.0, env="bbbb")
    assert [r.env for r in store.lookup("sig")] == [None, "bbbb"]
    facts = dataclasses.replace(_facts(40 * GIB), signature="sig", env_fingerprint="bbbb")
    state = FitState(facts, store=store)
    assert [k.micro_batch_size for k in state.known()] == [2]
    assert [k.micro_batch_size for k in state.hints()] == [4]
    # Where the environment cannot be asked, every record counts as this one's.
    blind = FitState(dataclasses.replace(facts, env_fingerprint=""), store=store)
    assert sorted(k.micro_batch_size for k in blind.known()) == [2, 4] and not blind.hints()


def test_plan_fit_shows_a_record_from_another_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    path = _plan_job(tmp_path, "4GiB")
    facts = fit_inputs(load_job(path))
    assert not isinstance(facts, str) and len(facts.env_fingerprint) == 16
    knobs = {**load_job(path).knobs.as_dict(), "micro_batch_size": 4,
             "gradient_accumulation_steps": 4}  # fmt: skip
    KnownGoodStore().record(facts.signature, knobs, "fit", GIB, 2.0, env="0123456789abcdef")
    assert main(["plan", "--fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "first fit (store_other_env)" in out
    assert "1 config(s) recorded in another environment (0123456789abcdef)" in out
    assert main(["plan", "--fit", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["source"] == "store_other_env" and got["store"]["known"] == []
    assert got["store"]["other_env"][0]["env"] == "0123456789abcdef"
    assert got["store"]["env_fingerprint"] == facts.env_fingerprint
    assert got["chosen"]["knobs"] != knobs


# -- 2. calibration from the attempt's process tree, without heartbeats ------------------------

CPU_REGIME = Regime("cpu", dtype_bytes=4, efficient_attention=False)
SMALL = ModelShape(
    hidden_size=256, num_layers=4, num_heads=8, intermediate_size=688, vocab_size=1000,
    num_kv_heads=8, max_position=1024, source="test",
)  # fmt: skip


def _run_cpu(
    tmp_path: Path, scripts: list[Script], facts: FitInputs, **job: Any
) -> tuple[int, list[dict[str, Any]], FakeHost]:
    """A CPU job (host limit) through the real loop on a FakeHost; (exit, events, host)."""
    train = job.pop("train", {"micro_batch_size": 8, "gradient_accumulation_steps": 1,
                              "max_length": 512})  # fmt: skip
    job.setdefault("fit", False)
    code, events, host, _ = run_fit_job(tmp_path, scripts, facts, train, **job)
    return code, events, host


def _cpu_facts(**kw: Any) -> FitInputs:
    return FitInputs(SMALL, CPU_REGIME, 4 * GIB, rungs=HOST_OOM_RUNGS, **kw)


#: run_clm's own output: no heartbeats, no step lines dsguard knows.
SILENT_OK = Script(lines=((1.0, "***** Running training *****"),), exit_at_s=5.0,
                   vm_peak_bytes=int(2.75 * GIB), vm_hwm_bytes=int(0.6 * GIB),
                   cgroup_peak_bytes=int(0.7 * GIB))  # fmt: skip


def test_a_script_without_heartbeats_calibrates_on_its_measured_vm_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run_clm case: RLIMIT_AS, an unmodified script (no heartbeats). dsguard reads its
    tree's VmPeak from outside, calibrates the estimate on it and records it in the store."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    facts = _cpu_facts(signature="silent", env_fingerprint="e1")
    code, events, _ = _run_cpu(
        tmp_path / "a", [SILENT_OK], facts,
        resources={"host_memory_limit": "3GiB", "host_memory_via": "rlimit_as"},
    )  # fmt: skip
    assert code == 0
    (cal,) = _named(events, "estimate_calibrated")
    assert cal["measure"] == "vm_peak" and cal["source"] == "process_tree"
    assert cal["measured_bytes"] == int(2.75 * GIB)
    predicted = estimate(SMALL, Knobs(8, 1, max_length=512, zero_stage=2), CPU_REGIME).host.total
    assert cal["predicted_bytes"] == predicted
    assert cal["scale"] == pytest.approx(2.75 * GIB / predicted, rel=1e-3)
    (rec,) = KnownGoodStore().lookup("silent")
    assert rec.outcome == "fit" and rec.peak_bytes == int(2.75 * GIB) and rec.env == "e1"


def test_under_a_cgroup_the_attempts_cgroup_peak_is_the_measure(tmp_path: Path) -> None:
    code, events, host = _run_cpu(
        tmp_path, [SILENT_OK], _cpu_facts(), resources={"host_memory_limit": "3GiB"},
    )  # fmt: skip
    assert code == 0 and host.memory_limits[0].how == "cgroup_v1"
    (cal,) = _named(events, "estimate_calibrated")
    assert cal["measure"] == "cgroup_peak" and cal["source"] == "cgroup"
    assert cal["measured_bytes"] == int(0.7 * GIB)


def test_a_silent_oom_scales_up_only_and_other_failures_do_not_calibrate(
    tmp_path: Path,
) -> None:
    """A memory failure's peak is a lower bound of the need: above the prediction it scales
    the estimate up; a crash that is not about memory says nothing of the need."""
    limit = {"host_memory_limit": "6GiB", "host_memory_via": "rlimit_as"}
    predicted = estimate(SMALL, Knobs(8, 1, max_length=512, zero_stage=2), CPU_REGIME).host.total
    assert 2.9 * GIB < predicted < 4.5 * GIB
    below = Script(lines=((1.0, "x"), (3.0, CPU_OOM)), exit_code=1, exit_at_s=3.5,
                   vm_peak_bytes=int(2.9 * GIB))  # fmt: skip
    above = dataclasses.replace(below, vm_peak_bytes=int(4.5 * GIB))
    code, events, _ = _run_cpu(tmp_path / "a", [below, above, SILENT_OK], _cpu_facts(),
                               resources=limit)  # fmt: skip
    assert code == 0
    first, second = _named(events, "estimate_calibrated")
    assert first["attempt"] == 2 and first["measured_bytes"] == int(4.5 * GIB)
    assert first["scale"] > 1.0
    assert second["attempt"] == 3 and second["measured_bytes"] == int(2.75 * GIB)
    crash = Script(lines=((1.0, "x"), (3.0, "ValueError: bad input")), exit_code=1,
                   exit_at_s=3.5, vm_peak_bytes=int(2.9 * GIB))  # fmt: skip
    _, events, _ = _run_cpu(tmp_path / "b", [crash], _cpu_facts(), resources=limit)
    assert not _named(events, "estimate_calibrated")


def test_tree_peaks_read_a_real_childs_vm_peak_and_hwm() -> None:
    """A real child that touched 200 MB: its VmHWM and VmPeak are in its parent's tree."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; b = bytearray(200 * 2**20); "
         "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        got = tree_peaks(os.getpid())
        assert got is not None
        peak, hwm = got
        assert hwm >= 200 * 2**20 and peak >= 200 * 2**20
        alone = tree_peaks(child.pid)
        assert alone is not None and alone[1] >= 200 * 2**20
    finally:
        child.kill()
        child.wait()
    assert tree_peaks(2**22 + 12345) is None


def test_the_attempt_cgroups_peak_is_read_from_its_own_files(tmp_path: Path) -> None:
    v1 = MemoryCgroup(1, tmp_path / "v1")
    v1.dir.mkdir()
    (v1.dir / "memory.max_usage_in_bytes").write_text("734003200\n")
    assert group_peak_bytes(v1) == 734003200
    v2 = MemoryCgroup(2, tmp_path / "v2")
    v2.dir.mkdir()
    assert group_peak_bytes(v2) is None  # a kernel before 5.19 has no memory.peak
    (v2.dir / "memory.peak").write_text("123\n")
    assert group_peak_bytes(v2) == 123
    for cg in memory_cgroups():  # this machine's own, where there is one
        if cg.version == 1 and (cg.dir / "memory.max_usage_in_bytes").exists():
            assert (group_peak_bytes(cg) or 0) > 0


# -- 3. a memory floor no move changes ----------------------------------------------------------

MIB = 2**20


def _killed_at_start(rss: int) -> Script:
    """OOM-killed by the cgroup during start-up (no step), its tree resident at ``rss``."""
    return Script(lines=((1.0, "loading the model"),), exit_at_s=6.0, exit_code=-9,
                  rss_bytes=rss, oom_kills=1)  # fmt: skip


def test_a_limit_below_the_start_up_floor_gives_up_after_two_useless_levers(
    tmp_path: Path,
) -> None:
    """P5 run_clm at 560 MiB: launcher plus rank resident ~0.63 GiB before any step, every
    attempt OOM-killed at start-up whatever the knobs; the run used to give up only at
    max_attempts (8 attempts). Now: once moves of two different knobs the estimate said would
    reduce the need (the micro-batch, then the buckets) changed nothing, it gives up naming
    the limit and the floor. Micro-batch halvings alone are not enough (see
    ``test_judge_floor_needs_two_predicted_moves_an_unchanged_measure_at_the_limit``)."""
    floor = int(0.63 * GIB)
    code, events, _ = _run_cpu(
        tmp_path, [_killed_at_start(floor)] * 8, _cpu_facts(),
        resources={"host_memory_limit": "560MiB"}, limits={"max_attempts": 8},
    )  # fmt: skip
    assert code != 0
    started = _named(events, "attempt_started")
    # pin_memory (not modelled), micro 8 -> 4 -> 2 -> 1 (one knob), then the buckets
    assert len(started) == 6
    rungs = [e["rung"] for e in _named(events, "policy_applied")]
    assert rungs == ["pin_memory", "micro_batch", "micro_batch", "micro_batch", "ds_buckets"]
    (found,) = _named(events, "memory_floor_detected")
    assert found["limit_bytes"] == 560 * MIB and found["floor_bytes"] == floor
    assert found["measure"] == "resident_at_death" and len(found["attempts"]) == 3
    (gave_up,) = _named(events, "run_gave_up")
    assert "0.55 GiB" in gave_up["reason"] and "0.63 GiB" in gave_up["reason"]
    assert "raise the limit" in gave_up["reason"]


def test_an_activation_oom_below_the_floor_is_still_healed(tmp_path: Path) -> None:
    """The same kills, but the samples before each kill show the start-up plateau well below
    the limit (the activations of one quick forward filled it): the knobs help, no floor."""
    plateau = int(0.3 * GIB)
    fits = Script(lines=((1.0, "step 1"),), exit_at_s=6.0, rss_bytes=plateau)
    code, events, _ = _run_cpu(
        tmp_path, [_killed_at_start(plateau)] * 4 + [fits], _cpu_facts(),
        resources={"host_memory_limit": "560MiB"}, limits={"max_attempts": 8},
    )  # fmt: skip
    assert code == 0 and not _named(events, "memory_floor_detected")
    assert len(_named(events, "attempt_started")) == 5


def test_a_heartbeat_before_step_1_at_the_limit_gives_up_at_once(tmp_path: Path) -> None:
    at_start = Script(
        lines=((1.0, "loading"),), exit_at_s=6.0, exit_code=-9, oom_kills=1,
        heartbeats=(Beat(at_s=2.0, step=0, rss_bytes=600 * MIB),),
    )  # fmt: skip
    code, events, _ = _run_cpu(
        tmp_path, [at_start] * 3, _cpu_facts(), resources={"host_memory_limit": "560MiB"},
    )  # fmt: skip
    assert code != 0 and len(_named(events, "attempt_started")) == 1
    (found,) = _named(events, "memory_floor_detected")
    assert found["measure"] == "heartbeat_before_step_1" and found["floor_bytes"] == 600 * MIB


def _mf(n: int, micro: int, measured: int, **kw: Any) -> MemoryFailure:
    knobs = kw.pop("knobs", Knobs(micro, 8 // micro, max_length=512, zero_stage=2))
    predicted = kw.pop("predicted_bytes", 1000 * micro)
    return MemoryFailure(n, knobs, predicted, measured, "resident_at_death", **kw)


def test_judge_floor_needs_two_predicted_moves_an_unchanged_measure_at_the_limit() -> None:
    limit = 1000
    # Halving the micro-batch twice is one lever: a slow first forward that fills a cgroup
    # dies at the limit at micro 8, 4 and 2 too, and micro 1 may fit. No floor yet.
    micro_only = [_mf(1, 8, 990), _mf(2, 4, 995), _mf(3, 2, 990)]
    assert judge_floor(micro_only, limit) is None
    buckets = _mf(4, 2, 992, knobs=Knobs(2, 4, max_length=512, zero_stage=2, ds_bucket_divisor=2),
                  predicted_bytes=1500)  # fmt: skip
    same = [*micro_only, buckets]
    got = judge_floor(same, limit)
    assert got is not None and got.attempts == (2, 3, 4) and got.floor_bytes == 990
    assert judge_floor(same[2:], limit) is None  # one move only
    assert judge_floor([_mf(1, 8, 990), _mf(2, 4, 900), _mf(3, 2, 880)], limit) is None
    assert judge_floor([_mf(1, 8, 700), _mf(2, 4, 700), _mf(3, 2, 700)], limit) is None
    stepped = [*same[:3], dataclasses.replace(buckets, stepped=True)]
    assert judge_floor(stepped, limit) is None
    sized = [*same[:3], dataclasses.replace(buckets, tried_bytes=200_000_000)]
    assert judge_floor(sized, limit) is None  # a failing allocation: the evidence rules' case
    no_estimate = [dataclasses.replace(f, predicted_bytes=None) for f in same]
    assert judge_floor(no_estimate, limit) is None
    assert judge_floor(same, None) is None


# -- 4. bucket halvings against an allocation that is no bucket ---------------------------------

A, B = 33_554_432, 30_607_488  # live P5 L1's two alternating sizes


def test_bucket_halvings_stop_when_a_non_bucket_allocation_alternates() -> None:
    k = Knobs(1, 8, max_length=1024, zero_stage=2, ds_bucket_divisor=4)
    ev = MoveEvidence(
        figures=OomFigures(tried_bytes=A), earlier=((1, A), (1, B)),
        bucket_bytes=(50_000_000,), halvings=((1, 1, A), (1, 2, B)),
    )  # fmt: skip
    futile = buckets_futile(k, ev)
    assert futile is not None and "/1" in futile and "did not change it" in futile
    assert choose_move(("ds_buckets",), k, CTX, ev) is None
    other = choose_move(("ds_buckets", "gradient_checkpointing"), k, CTX, ev)
    assert other is not None and other.move.knobs.gradient_checkpointing
    assert any(s.startswith("ds_buckets:") for s in other.skipped)
    # One halving that changed the size (A then B) is not yet futile; nor is a bucket's size.
    two = dataclasses.replace(k, ds_bucket_divisor=2)
    first = MoveEvidence(figures=OomFigures(tried_bytes=B), halvings=((1, 1, A),))
    assert buckets_futile(two, first) is None
    assert choose_move(("ds_buckets",), two, CTX, first) is not None
    bucket = dataclasses.replace(ev, figures=OomFigures(tried_bytes=50_000_000),
                                 halvings=((1, 1, 50_000_000), (1, 2, 50_000_000)))  # fmt: skip
    assert buckets_futile(k, bucket) is None
    # The same size at another micro-batch says nothing of the halvings at this one.
    elsewhere = dataclasses.replace(ev, halvings=((2, 1, A), (1, 2, B)))
    assert buckets_futile(k, elsewhere) is None


def test_the_loop_gives_up_after_the_halvings_changed_nothing(tmp_path: Path) -> None:
    """Live P5 L1 through the loop: micro 1 (nothing to halve), the failing allocation
    alternates A, B, A, none a bucket's size. Before: the buckets were halved to /64 over 6
    attempts; now the third attempt's failure ends it, saying why."""

    def failing(size: int) -> Script:
        line = (
            f"RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
            f"can't allocate memory: you tried to allocate {size} bytes. Error code 12"
        )
        return Script(lines=((1.0, "step 0"), (2.0, line)), exit_code=1, exit_at_s=2.5)

    code, events, _ = _run_cpu(
        tmp_path, [failing(A), failing(B), failing(A), failing(B), failing(A), failing(B), _ok()],
        _cpu_facts(), limits={"max_attempts": 8},
        train={"micro_batch_size": 1, "gradient_accumulation_steps": 8, "max_length": 1024,
               "pin_memory": False},
        resources={"host_memory_limit": "6GiB", "host_memory_via": "rlimit_as"},
    )  # fmt: skip
    assert code != 0
    rungs = [e["rung"] for e in _named(events, "policy_applied")]
    assert rungs == ["ds_buckets", "ds_buckets"]
    (gave_up,) = _named(events, "run_gave_up")
    assert "did not change it" in gave_up["reason"] and f"({A} bytes)" in gave_up["reason"]


# -- 5. a probe switch is a planned switch, not a failure ---------------------------------------


def test_probe_switches_are_planned_in_the_metrics_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fit_probe: in_run`` ends two attempts to time another config (SIGTERM: exit -15,
    after the save request) and goes back to the faster one. The metrics used to count both
    as failed and the report as lost training; now they are planned switches with the
    probe's own cost (``fit_probe_cost``)."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    KnownGoodStore().record("regime-m5", _k(4, 4).as_dict(), "oom", None, None)
    b = _attempt(5, (15.0, 17.0, 19.0, 21.0, 23.0), ckpt=((22.0, 8),))
    again = _attempt(9, (12.0, 14.0), exits=True)
    write_job(tmp_path, [], train={"micro_batch_size": 16, "gradient_accumulation_steps": 1},
              fit_probe="in_run")  # fmt: skip
    job = load_job(tmp_path / "job.yaml")
    job.log_dir.mkdir(parents=True, exist_ok=True)
    assert job.checkpoints is not None
    host = FakeHost([A_FIRST, b, again], ckpt_dir=job.checkpoints.dir)
    metrics = Metrics("j", job.log_dir)
    facts = dataclasses.replace(_facts(10_000 * GIB), signature="regime-m5")
    sup = Supervisor(job, host=host, base_env={}, notifier=Notifier({}), listeners=(metrics,),
                     fit_facts=lambda _j: facts,
                     now=lambda: datetime.fromtimestamp(host.wall(), UTC))  # fmt: skip
    try:
        assert sup.run() == 0
    finally:
        metrics.close()
    events = [json.loads(x) for x in (job.log_dir / "events.jsonl").read_text().splitlines()]
    ends = [(e["ended_by"], e["exit_code"]) for e in _named(events, "attempt_finished")]
    assert ends == [("probe", -15), ("probe", -15), ("exit", 0)]
    assert +metrics.outcomes == {"fit_probe_switch": 2, "exit_0": 1}
    (cost,) = _named(events, "fit_probe_cost")
    assert metrics.values["dsguard_fit_probe_lost_seconds"] == cost["lost_s"] > 0
    assert 'kind="fit_probe_switch"} 2' in metrics.text()

    view = build(events)
    assert [a.probe_switch for a in view.attempts] == [True, True, False]
    assert view.lost_s == 0.0 and view.lost_exact
    assert view.probe_switches == 2 and view.probe_lost_s == cost["lost_s"]
    line = summary_line(view)
    assert "2 planned fit_probe switches (" in line and "spent on them" in line
    assert "training lost" not in line
