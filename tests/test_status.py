"""``dsguard status`` from a log dir built by hand, with real processes for pid liveness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsguard.cli.status import (
    EXIT_NO_STATE,
    EXIT_NOT_RUNNING,
    EXIT_RUNNING,
    collect,
    pid_alive,
    render,
    render_table,
    status_exit_code,
)
from dsguard.host.gpu import GpuDevice, GpuProcess, GpuSnapshot, Unknown
from dsguard.protocol import HEARTBEAT_SUBDIR, Heartbeat, heartbeat_path
from dsguard.run.lock import acquire
from dsguard.run.logdir import LOCK_FILENAME
from dsguard.run.state import write_json_atomic

NOW = 1_800_000_000.0
GiB = 1 << 30


def row(table: str, key: str) -> str:
    """The value column of the table row named ``key``."""
    for line in table.splitlines():
        if line.startswith(key + "  "):
            return line[len(key) :].strip()
    raise AssertionError(f"no row {key!r} in:\n{table}")


def no_gpu() -> Unknown:
    return Unknown("no NVML library: no NVIDIA driver on this host", permanent=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid is free (and very unlikely to be reused within the test)
    return proc.pid


def beat(attempt: int, rank: int, step: int, age_s: float, **kw: Any) -> Heartbeat:
    return Heartbeat(
        attempt=attempt, rank=rank, pid=1000 + rank, time_s=NOW - age_s, event="step",
        global_step=step, max_steps=5000, **kw,
    )  # fmt: skip


def write_beats(log_dir: Path, *beats: Heartbeat) -> None:
    d = log_dir / HEARTBEAT_SUBDIR
    d.mkdir(parents=True, exist_ok=True)
    for hb in beats:
        write_json_atomic(heartbeat_path(d, hb.attempt, hb.rank), hb.as_dict())


def make_checkpoints(root: Path, steps_ages: dict[int, float]) -> None:
    for step, age in steps_ages.items():
        ck = root / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        (ck / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        os.utime(ck / "trainer_state.json", (NOW - age, NOW - age))


def running_state(log_dir: Path, child: subprocess.Popen[bytes], **extra: Any) -> None:
    me = psutil.Process()
    state = {
        "run_id": "20261122T020000Z-abc123", "job": "llama7b-sft", "state": "running",
        "reason": "attempt 3 started", "pid": os.getpid(), "pid_create_time": me.create_time(),
        "pid_child": child.pid,
        "current_attempt": {"run_id": "R", "attempt": 3, "sid": child.pid,
                            "started_epoch_s": psutil.Process(child.pid).create_time() - 1},
        "attempt": 3, "phase": 1, "global_batch": 32,
        "knobs": {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "max_length": 2048,
                  "zero_stage": 2, "offload": "none", "gradient_checkpointing": True},
        "ledger": {"positions": {"oom": 1},
                   "history": [{"attempt": 1, "kind": "cuda_oom", "uptime_s": 40.0,
                                "progressed": False},
                               {"attempt": 2, "kind": "hang", "uptime_s": 900.0,
                                "progressed": True}]},
        "attempt_log": str(log_dir / "attempt-3.log"),
        **extra,
    }  # fmt: skip
    write_json_atomic(log_dir / "state.json", state)


def test_running_job(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    log_dir, ckpt = tmp_path / "runs", tmp_path / "outputs"
    running_state(log_dir, sleeper, checkpoint_dir=str(ckpt))
    write_beats(
        log_dir,
        beat(3, 0, 1200, 12.0, loss=1.2345, max_memory_reserved_bytes=70 * GiB,
             host_rss_bytes=20 * GiB),
        beat(3, 1, 1199, 15.0, loss=1.3, max_memory_reserved_bytes=71 * GiB),
        beat(2, 0, 9999, 3000.0),  # an earlier attempt's: not this attempt's progress
    )  # fmt: skip
    make_checkpoints(ckpt, {1000: 600.0, 1100: 300.0, 900: 900.0})
    (ckpt / ".dsguard-quarantine" / "checkpoint-1150").mkdir(parents=True)
    (ckpt / "checkpoint-1200.partial").mkdir()

    d = collect(log_dir, now=lambda: NOW, gpu=no_gpu)
    assert d["state"] == "running" and d["running"] and not d["stale"]
    assert d["supervisor"] == {
        "pid": os.getpid(), "alive": True, "identity_checked": True, "source": "state.json",
        "started_at": None,
    }  # fmt: skip
    assert d["attempt_process"] == {"pid": sleeper.pid, "alive": True}
    assert d["attempt"] == 3 and d["positions"] == {"oom": 1}
    assert d["last_failure"]["kind"] == "hang"
    hb = d["heartbeat"]
    assert hb["last_step"] == 1200 and hb["loss"] == 1.2345 and hb["age_s"] == 12.0
    assert [r["rank"] for r in hb["ranks"]] == [0, 1]
    assert hb["ranks"][1]["max_memory_reserved_bytes"] == 71 * GiB
    assert d["checkpoint"] == {
        "dir": str(ckpt), "path": str(ckpt / "checkpoint-1100"), "step": 1100, "age_s": 300.0,
    }  # fmt: skip
    assert d["gpu"] == {"available": False, "permanent": True, "reason": no_gpu().reason}
    assert d["problems"] == []
    assert status_exit_code(d) == EXIT_RUNNING
    json.dumps(d)  # JSON-ready as is

    table = render_table(d)
    assert row(table, "state") == "running - attempt 3 started"
    assert row(table, "dsguard") == f"pid {os.getpid()} alive"
    assert row(table, "progress") == "step 1200/5000, loss 1.234; heartbeat 12 s ago (2 rank(s))"
    assert row(table, "checkpoint") == "checkpoint-1100, written 5 min ago"
    assert row(table, "config") == (
        "micro 2 x accum 4, max_length 2048, ZeRO-2, gradient_checkpointing; global batch 32"
    )
    assert row(table, "last failure") == "hang (attempt 2)"
    assert row(table, "gpu").startswith("unknown: no NVML library")
    assert row(table, "  rank 1").startswith("step 1199, step 15 s ago, GPU reserved 71.0 GiB")


def test_killed_supervisor_is_stale_not_running(tmp_path: Path) -> None:
    """state.json says running, but dsguard was SIGKILLed: say so, exit 3."""
    log_dir = tmp_path / "runs"
    gone = dead_pid()
    write_json_atomic(
        log_dir / "state.json",
        {"job": "j", "state": "running", "pid": gone, "pid_create_time": NOW, "attempt": 1,
         "pid_child": gone},
    )  # fmt: skip
    d = collect(log_dir, now=lambda: NOW, gpu=None)
    assert d["stale"] and not d["running"] and d["supervisor"]["alive"] is False
    assert d["attempt_process"] == {"pid": gone, "alive": False}
    assert any("is not running" in p for p in d["problems"])
    assert status_exit_code(d) == EXIT_NOT_RUNNING
    assert "STALE" in render_table(d) and "NOT RUNNING" in render_table(d)
    assert d["gpu"] is None and d["checkpoint"] is None and d["heartbeat"] is None


def test_reused_pid_is_not_mistaken_for_dsguard(tmp_path: Path) -> None:
    """The recorded pid is alive, but it started at another time: another program."""
    log_dir = tmp_path / "runs"
    me = psutil.Process()
    write_json_atomic(
        log_dir / "state.json",
        {"state": "backoff", "pid": me.pid, "pid_create_time": me.create_time() - 3600},
    )
    d = collect(log_dir, gpu=None)
    assert d["supervisor"]["alive"] is False and d["stale"]
    assert pid_alive(me.pid, create_time=me.create_time())
    assert pid_alive(me.pid, not_before=time.time() + 3600) is False
    assert pid_alive("12") is None and pid_alive(True) is None and pid_alive(-1) is None


def test_no_recorded_pid_is_unknown_not_stale(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "state.json", {"state": "starting"})
    d = collect(tmp_path, gpu=None)
    assert not d["stale"] and not d["running"] and d["supervisor"]["alive"] is None
    assert "no dsguard pid recorded" in d["problems"][0]
    assert status_exit_code(d) == EXIT_NOT_RUNNING


def test_finished_run_is_not_stale(tmp_path: Path) -> None:
    log_dir = tmp_path / "runs"
    write_json_atomic(
        log_dir / "state.json",
        {"state": "succeeded", "reason": "the training command exited 0", "pid": dead_pid()},
    )
    d = collect(log_dir, gpu=None)
    assert not d["stale"] and not d["running"] and d["problems"] == []
    assert d["supervisor"]["identity_checked"] is False
    assert status_exit_code(d) == EXIT_NOT_RUNNING


def test_no_state_file(tmp_path: Path) -> None:
    d = collect(tmp_path / "nothing-here", gpu=None)
    assert not d["has_state"] and status_exit_code(d) == EXIT_NO_STATE
    assert "no state file" in d["problems"][0]
    assert "problem" in render_table(d)


def test_corrupt_state_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"state": "runn')
    d = collect(tmp_path, gpu=None)
    assert not d["has_state"] and "unreadable" in d["problems"][0]


def test_lock_file_names_the_supervisor_when_state_does_not(tmp_path: Path) -> None:
    """A dsguard that holds the lock but has not written its pid to state.json yet."""
    write_json_atomic(tmp_path / "state.json", {"state": "starting"})
    with acquire(tmp_path, "j"):
        d = collect(tmp_path, gpu=None)
        # status read the lock file without taking the lock: acquire still sees it held
        assert (tmp_path / LOCK_FILENAME).exists()
    assert d["supervisor"]["pid"] == os.getpid() and d["supervisor"]["alive"] is True
    assert d["supervisor"]["source"] == LOCK_FILENAME and d["supervisor"]["started_at"]
    assert d["running"] and status_exit_code(d) == EXIT_RUNNING


def test_missing_checkpoint_dir_and_no_checkpoints(tmp_path: Path) -> None:
    write_json_atomic(
        tmp_path / "state.json",
        {"state": "running", "checkpoint_dir": str(tmp_path / "absent")},
    )
    d = collect(tmp_path, gpu=None)
    assert d["checkpoint"]["path"] is None and "error" in d["checkpoint"]
    (tmp_path / "outputs").mkdir()
    write_json_atomic(
        tmp_path / "state.json", {"state": "running", "ledger": {"ckpt_dir": str(tmp_path)}}
    )
    d = collect(tmp_path, gpu=None)
    assert d["checkpoint"] == {"dir": str(tmp_path), "path": None, "step": None, "age_s": None}
    assert "none yet" in render_table(d)


def test_gpu_devices_in_the_table(tmp_path: Path) -> None:
    snap = GpuSnapshot(
        devices=(
            GpuDevice(0, "H100", "GPU-1", 80 * GiB, 70 * GiB, 10 * GiB, 99,
                      (GpuProcess(4242, 69 * GiB),)),
            GpuDevice(1, "H100", "GPU-2", 80 * GiB, None, None, None, None, ("memory: x",)),
        ),
        driver_version="550",
    )  # fmt: skip
    d = collect(tmp_path, gpu=lambda: snap, now=lambda: NOW)
    assert d["gpu"]["devices"][0]["processes"] == [{"pid": 4242, "used_bytes": 69 * GiB}]
    table = render_table(d)
    assert row(table, "gpu 0") == "70.0/80.0 GiB, 99% busy; pid 4242 69.0 GiB"
    assert row(table, "gpu 1") == "?/80.0 GiB, ?% busy; processes unknown"


def test_real_gpu_probe_on_this_host(tmp_path: Path) -> None:
    """The default probe really runs: here (no driver) it is 'unknown', never zero devices."""
    d = collect(tmp_path)
    assert d["gpu"] is not None
    if not d["gpu"]["available"]:
        assert d["gpu"]["reason"]
    assert json.loads(render(d, as_json=True))["log_dir"] == str(tmp_path)
    assert render(d, as_json=False) == render_table(d)


@pytest.mark.parametrize(
    "text",
    [
        '{"state": 5}',
        '{"state": "running", "attempt": "x"}',
        "not json at all",
        "[1, 2]",
        '{"state": "running", "current_attempt": {"started_epoch_s": "x"}}',
    ],
)
def test_mistyped_state_file_is_no_usable_state(tmp_path: Path, text: str) -> None:
    """Issue 13.8: a mistyped state.json is one problem line and exit 4 ("no state"), not a
    traceback: the table and the JSON both render."""
    (tmp_path / "state.json").write_text(text)
    d = collect(tmp_path, now=lambda: NOW, gpu=None)
    assert status_exit_code(d) == EXIT_NO_STATE
    assert [p for p in d["problems"] if "state.json" in p and "\n" not in p]
    assert "problem" in render_table(d) and json.loads(render(d, as_json=True))


def test_mistyped_ledger_and_a_nul_in_the_checkpoint_dir_do_not_crash(tmp_path: Path) -> None:
    """A hand-edited state.json with a NUL byte in its checkpoint dir raised ValueError from
    the directory listing (exit 70); the ledger's unchecked values were shown as "#x"."""
    state = {"state": "gave_up", "checkpoint_dir": "/tmp/a\u0000b",
             "ledger": {"attempt": "x", "phase": [1], "knobs": "micro 4"}}  # fmt: skip
    (tmp_path / "state.json").write_text(json.dumps(state))
    d = collect(tmp_path, now=lambda: NOW, gpu=None)
    assert status_exit_code(d) == EXIT_NOT_RUNNING
    assert "not a usable path" in d["checkpoint"]["error"]
    assert (d["attempt"], d["phase"], d["knobs"]) == (None, None, None)
    assert "#x" not in render_table(d)
