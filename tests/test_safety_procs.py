"""Issue 13, processes / lock / signals / numbering: real processes, real signals, real dirs.

Each test here failed on the commit this branch started from:

* a restarted dsguard SIGTERMed and SIGKILLed a stranger that had got the recorded session id;
* deleting the log dir dropped the lock, and a second ``dsguard run`` started a second trainer;
* SIGHUP (a closed terminal) killed dsguard mid-run, leaving state.json ``running``;
* a re-run of a finished job appended its output to the first run's ``attempt-1.log``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsguard.job.file import load_job
from dsguard.protocol import ATTEMPT_ENV, RUN_ID_ENV
from dsguard.run.launch import Command
from dsguard.run.proc import AttemptRef, attempt_processes, end_attempt, is_ours, spawn
from dsguard.run.state import write_json_atomic
from tests.conftest import RunResult, dsguard_cmd, write_job
from tests.test_unattended import _trace, _wait_for

pytestmark = pytest.mark.e2e


def _events(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "runs" / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def lock_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a `dsguard run` whose per-job lock lives in this test's tmp dir."""
    return dict(os.environ, PYTHONUNBUFFERED="1", DSGUARD_LOCK_DIR=str(tmp_path / "locks"))


@pytest.fixture
def reaped() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started; whatever is left is killed and reaped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


# -- defect 1: only ever signal a process proven to be ours ----------------------------------


def _recorded_crash(workdir: Path, *, sid: int, started_epoch_s: float) -> None:
    """state.json of a dsguard SIGKILLed during attempt 1 of run ``old-run``."""
    job = load_job(workdir / "job.yaml")
    job.log_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        job.log_dir / "state.json",
        {
            "state": "running", "run_id": "old-run", "pid": 999_999,
            "job_knobs": job.knobs.as_dict(),
            "ledger": {"knobs": job.knobs.as_dict(), "ckpt_dir": None, "positions": {},
                       "history": [], "attempt": 1},
            "current_attempt": {"run_id": "old-run", "attempt": 1, "sid": sid,
                                "started_epoch_s": started_epoch_s},
        },
    )  # fmt: skip


def test_restart_never_signals_a_stranger_holding_the_recorded_session(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], reaped: list[subprocess.Popen[bytes]]
) -> None:
    """Session id reuse (or a reboot): an unrelated process, started after the recorded
    attempt, leads the session state.json names. It carries no marker and does not descend
    from the recorded launcher, so the restarted dsguard must leave it alone."""
    write_job(tmp_path, ["--scenario", "ok"])
    started = time.time() - 5.0
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    reaped.append(stranger)
    _recorded_crash(tmp_path, sid=stranger.pid, started_epoch_s=started)
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    (rec,) = res.named("run_recovered")
    assert rec["leftover_pids"] == [] and rec["killed_pids"] == []
    assert stranger.poll() is None, "dsguard signalled a process that was not its own"


def test_a_session_leader_started_a_tick_after_the_launcher_is_not_the_launcher(
    reaped: list[subprocess.Popen[bytes]],
) -> None:
    """The launcher is known by pid AND start time: a marker-less process holding the recorded
    session id, started even one clock tick (10 ms) after the recorded launcher, is not it
    (the chaos run caught a 50 ms window letting one started 44 ms later through)."""
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    reaped.append(stranger)
    proc = psutil.Process(stranger.pid)
    start = proc.create_time()
    for earlier_s in (0.01, 0.04):
        ref = AttemptRef("old-run", 1, stranger.pid, start - 5.0, start - earlier_s)
        assert not is_ours(proc, ref), earlier_s
    assert is_ours(proc, AttemptRef("old-run", 1, stranger.pid, start - 5.0, start))


def test_restart_still_ends_a_leftover_that_carries_the_marker(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], reaped: list[subprocess.Popen[bytes]]
) -> None:
    """The other side: a real leftover of the recorded attempt (marker in its environment,
    even in a session of its own) is ended before the run continues."""
    write_job(tmp_path, ["--scenario", "ok"])
    started = time.time() - 5.0
    env = dict(os.environ, **{RUN_ID_ENV: "old-run", ATTEMPT_ENV: "1"})
    leftover = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    reaped.append(leftover)
    _recorded_crash(tmp_path, sid=leftover.pid + 100_000, started_epoch_s=started)
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    (rec,) = res.named("run_recovered")
    assert rec["leftover_pids"] == [leftover.pid] and rec["survivor_pids"] == []
    assert leftover.wait(timeout=10) in (-signal.SIGTERM, -signal.SIGKILL)


def test_a_child_without_the_marker_is_ours_only_through_the_recorded_launcher(
    tmp_path: Path,
) -> None:
    """A process that scrubbed its environment (``env -i``) is found through its lineage: same
    session, started after the attempt, its parent chain reaches the recorded launcher with
    the launcher's own start time. It is ended with the attempt."""
    cmd = Command(
        argv=["sh", "-c", "env -i sleep 60 & echo up; wait"], cwd=tmp_path,
        env=dict(os.environ, **{RUN_ID_ENV: "r1", ATTEMPT_ENV: "1"}),
    )  # fmt: skip
    child = spawn(cmd, run_id="r1", attempt=1)
    try:
        assert child.popen.stdout is not None
        assert child.popen.stdout.readline().strip() == b"up"
        launcher = psutil.Process(child.pid)

        def exec_done() -> bool:
            # The child is a fork of sh, then env, then sleep: only sleep has no marker.
            kids = launcher.children()
            return len(kids) == 1 and kids[0].name() == "sleep"

        _wait_for(exec_done)
        (scrubbed,) = launcher.children()
        assert RUN_ID_ENV not in scrubbed.environ()
        assert {p.pid for p in attempt_processes(child.ref)} == {child.pid, scrubbed.pid}
        report = end_attempt(child.ref, 5.0, reap=child.popen.poll)
        assert set(report.terminated_pids) == {child.pid, scrubbed.pid}
        assert report.survivor_pids == ()
    finally:
        if child.popen.poll() is None:
            child.popen.kill()
        child.popen.wait(timeout=10)
        assert child.popen.stdout is not None
        child.popen.stdout.close()


# -- defect 6: the lock does not live in the log dir's inode ---------------------------------


def test_deleting_the_log_dir_does_not_let_a_second_supervisor_start(
    tmp_path: Path, lock_env: dict[str, str], reaped: list[subprocess.Popen[bytes]]
) -> None:
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "100000", "--step_s", "0.05"])
    first = subprocess.Popen(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path, env=lock_env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    reaped.append(first)
    _wait_for(lambda: any(r["event"] == "step" for r in _trace(tmp_path)))
    shutil.rmtree(tmp_path / "runs")
    second = subprocess.run(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path, env=lock_env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert second.returncode == 2, second.stderr
    assert f"pid {first.pid}" in second.stderr
    assert len([r for r in _trace(tmp_path) if r["event"] == "start"]) == 1
    # The first one recreates the log dir, says so, and keeps supervising.
    _wait_for(lambda: any(e["event"] == "log_dir_recreated" for e in _events(tmp_path)))
    assert first.poll() is None
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 128 + signal.SIGTERM
    names = [e["event"] for e in _events(tmp_path)]
    assert names[-2:] == ["run_stopped", "state_changed"]
    assert json.loads((tmp_path / "runs" / "state.json").read_text())["state"] == "stopped"


# -- defect 9: a closed terminal does not end the night's training ---------------------------


def test_sighup_keeps_supervising_and_drops_the_console(
    tmp_path: Path, lock_env: dict[str, str], reaped: list[subprocess.Popen[bytes]]
) -> None:
    """An SSH disconnect: SIGHUP, then the terminal is gone (a closed pipe here: every later
    write would raise EPIPE). dsguard keeps supervising, the attempt finishes, the run
    succeeds, and ``console_lost`` says why the console went quiet."""
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "40", "--step_s", "0.05"])
    proc = subprocess.Popen(
        dsguard_cmd("run", "job.yaml"), cwd=tmp_path, env=lock_env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    reaped.append(proc)
    _wait_for(lambda: any(r["event"] == "step" for r in _trace(tmp_path)))
    proc.send_signal(signal.SIGHUP)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=90) == 0
    events = _events(tmp_path)
    names = [e["event"] for e in events]
    assert "console_lost" in names and names[-2:] == ["run_succeeded", "state_changed"]
    assert json.loads((tmp_path / "runs" / "state.json").read_text())["state"] == "succeeded"


# -- defect 11: logs of different runs never mix ---------------------------------------------


def test_rerun_of_a_finished_job_never_reuses_an_attempt_log(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    write_job(tmp_path, ["--scenario", "ok"])
    first = run_dsguard("run", "job.yaml", "--quiet")
    assert first.code == 0, first.proc.stderr
    log1 = (tmp_path / "runs" / "attempt-1.log").read_bytes()
    assert log1
    second = run_dsguard("run", "job.yaml", "--quiet")
    assert second.code == 0, second.proc.stderr
    assert (tmp_path / "runs" / "attempt-1.log").read_bytes() == log1
    runs = [e for e in second.events if e["event"] == "run_started"]
    assert [e["first_attempt"] for e in runs] == [1, 2]
    second_run = runs[1]["run_id"]
    started = [e for e in second.events if e["event"] == "attempt_started"]
    assert [e["attempt"] for e in started if e["run_id"] == second_run] == [2]
    assert (tmp_path / "runs" / "attempt-2.log").read_bytes()
