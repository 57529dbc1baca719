"""The per-job lock, contested by real second processes and released by real SIGKILLs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dsguard.errors import LockHeldError
from dsguard.run.lock import JobLockHeld, acquire, job_lock_path, read_holder, read_job_holder
from dsguard.run.logdir import LOCK_FILENAME

#: A second dsguard: takes the lock, optionally starts a grandchild that inherits everything it
#: can, says "locked <grandchild pid>", then waits to be killed.
_HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from dsguard.run.lock import acquire
    lock = acquire(Path(sys.argv[1]), "llama7b-sft")
    gc = 0
    if sys.argv[2] == "spawn":
        # close_fds=False: only close-on-exec keeps the lock fd out of this child.
        gc = subprocess.Popen(["sleep", "60"], close_fds=False).pid
    print("locked", gc, flush=True)
    time.sleep(60)
    """
)


def _start_holder(log_dir: Path, mode: str = "plain") -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(log_dir), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[0] == "locked", line
    return proc, int(line[1])


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(5)


def test_second_process_is_refused_with_pid_and_job_named(
    tmp_path: Path, cleanup: list[int]
) -> None:
    proc, _ = _start_holder(tmp_path)
    cleanup.append(proc.pid)
    with pytest.raises(LockHeldError) as info:
        acquire(tmp_path, "llama7b-sft")
    msg = str(info.value)
    assert f"pid {proc.pid}" in msg and "'llama7b-sft'" in msg and LOCK_FILENAME in msg
    assert isinstance(info.value, JobLockHeld)
    holder = info.value.holder
    assert holder is not None and holder.pid == proc.pid and holder.job == "llama7b-sft"
    # create_time identifies the holder even if its pid is reused later.
    assert holder.create_time == pytest.approx(psutil.Process(proc.pid).create_time(), abs=1)
    proc.kill()
    proc.wait()


def test_sigkilled_holder_leaves_no_stale_lock(tmp_path: Path, cleanup: list[int]) -> None:
    """The kernel releases the flock when dsguard dies, even by SIGKILL: the restart proceeds."""
    proc, _ = _start_holder(tmp_path)
    cleanup.append(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with acquire(tmp_path, "llama7b-sft") as lock:
        assert lock.held
        assert read_holder(tmp_path / LOCK_FILENAME) is not None
        rec = json.loads((tmp_path / LOCK_FILENAME).read_text())
        assert rec["pid"] == os.getpid() and rec["job"] == "llama7b-sft"


def test_orphaned_child_of_a_dead_holder_does_not_keep_the_lock(
    tmp_path: Path, cleanup: list[int]
) -> None:
    """A rank outliving a SIGKILLed dsguard must not block the restarted dsguard (CLOEXEC)."""
    proc, grandchild = _start_holder(tmp_path, "spawn")
    cleanup.extend([proc.pid, grandchild])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert psutil.pid_exists(grandchild)  # the orphan is still running...
    with acquire(tmp_path, "llama7b-sft") as lock:  # ...and the lock is free anyway
        assert lock.held


def test_release_then_reacquire_and_same_process_contention(tmp_path: Path) -> None:
    lock = acquire(tmp_path / "new" / "dir", "j")
    assert lock.held
    # A second open file description conflicts even within one process.
    with pytest.raises(JobLockHeld, match=f"pid {os.getpid()}"):
        acquire(tmp_path / "new" / "dir", "j")
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    again = acquire(tmp_path / "new" / "dir", "j")
    again.release()
    assert (tmp_path / "new" / "dir" / LOCK_FILENAME).exists()  # never deleted


def test_unreadable_record_still_refuses(tmp_path: Path) -> None:
    """The lock is the flock, not the content: garbage in the file changes only the message."""
    lock = acquire(tmp_path, "j")
    try:
        (tmp_path / LOCK_FILENAME).write_text("not json")
        with pytest.raises(JobLockHeld, match="pid is not recorded") as info:
            acquire(tmp_path, "j")
        assert info.value.holder is None
    finally:
        lock.release()


def test_lock_survives_the_log_dir_being_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guarantee lives on a stable per-job path: with the log dir (and its lock file)
    deleted, a second acquire is still refused, the holder is still found, and the holder
    puts the log dir back."""
    monkeypatch.setenv("DSGUARD_LOCK_DIR", str(tmp_path / "locks"))
    log_dir = tmp_path / "runs"
    lock = acquire(log_dir, "j")
    try:
        shutil.rmtree(log_dir)
        with pytest.raises(JobLockHeld, match=f"pid {os.getpid()}"):
            acquire(log_dir, "j")
        holder, _ = read_job_holder(log_dir)
        assert holder is not None and holder.pid == os.getpid()
        assert lock.ensure_log_dir() and (log_dir / LOCK_FILENAME).exists()
        assert not lock.ensure_log_dir()
    finally:
        lock.release()
    assert not job_lock_path(log_dir).exists()  # unlinked on release, while still held
    with acquire(log_dir, "j") as again:
        assert again.held
