"""One dsguard per job: an exclusive ``flock`` on ``log_dir/dsguard.lock`` held for life.

Two supervisors of one job would launch two trainings onto the same GPUs, write the same
checkpoint dir and interleave one event log: the second one must refuse to start.

Why ``flock`` and not a pid file: the kernel drops the lock when the last descriptor of the
open file description closes, which includes dsguard being SIGKILLed, OOM-killed or aborted
by the systemd watchdog. A pid file would outlive such a death and block the restart
(``Restart=on-failure``) that should resume the job; with ``flock`` there is no stale lock
to clean up and nothing to guess.

Two details keep that promise:

* the descriptor is close-on-exec (``os.open``'s default, PEP 446) and dsguard spawns with
  ``close_fds=True``: a training rank that inherited it would hold the lock after dsguard
  died, and the restarted dsguard would refuse to start while orphans ran;
* the file is never deleted: unlinking a lock file races with a newcomer that opened the old
  inode and locks a file nobody else can find.

The file's content (pid, process start time, job, host) is information for the error
message and ``dsguard status``; the lock is the ``flock``, never the content. On NFS,
Linux emulates ``flock`` with byte-range locks, which works only if lockd is running; keep
log dirs on a local disk when that matters.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from dsguard.errors import LockHeldError
from dsguard.run import safefs
from dsguard.run.logdir import LOCK_FILENAME


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds (or last held) a job's lock, as recorded in the lock file."""

    pid: int | None
    #: psutil create_time of the holder (seconds since the epoch): with ``pid`` it identifies
    #: the process even if the pid is later reused.
    create_time: float | None
    started_at: str | None
    job: str | None
    host: str | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LockHolder:
        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        pid = num("pid")
        return cls(
            pid=None if pid is None else int(pid),
            create_time=num("create_time"),
            started_at=d.get("started_at") if isinstance(d.get("started_at"), str) else None,
            job=d.get("job") if isinstance(d.get("job"), str) else None,
            host=d.get("host") if isinstance(d.get("host"), str) else None,
        )


class JobLockHeld(LockHeldError):
    """The job's lock is held by another live process (named in the message when known)."""

    def __init__(self, message: str, *, path: Path, job: str, holder: LockHolder | None) -> None:
        super().__init__(message)
        self.path = path
        self.job = job
        self.holder = holder


def read_holder(path: Path) -> LockHolder | None:
    """The recorded holder of a lock file, or None if absent/unreadable/being written.

    Reading never takes the lock: a ``dsguard status`` that briefly held it would make a
    dsguard starting at that moment refuse to run.
    """
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return None
    return LockHolder.from_dict(data) if isinstance(data, dict) else None


def _own_create_time() -> float | None:
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


@dataclass
class JobLock:
    """A held job lock; released by :meth:`release` or, whatever happens, by process death."""

    path: Path
    job: str
    fd: int | None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        """Unlock and close (the file stays: see the module docstring). Idempotent."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(fd)

    def __enter__(self) -> JobLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _describe(holder: LockHolder | None) -> str:
    if holder is None or holder.pid is None:
        return "another process (its pid is not recorded yet)"
    where = f" on {holder.host}" if holder.host and holder.host != socket.gethostname() else ""
    since = f", running since {holder.started_at}" if holder.started_at else ""
    return f"dsguard pid {holder.pid}{where}{since}"


def acquire(log_dir: Path, job: str) -> JobLock:
    """Take the job's lock without waiting, and record who holds it.

    Raises:
        JobLockHeld (a ``LockHeldError``): another process holds it; the message names its
            pid and the job.
        OSError: the log dir or lock file cannot be created/opened (permissions, read-only fs).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / LOCK_FILENAME
    # O_CLOEXEC is os.open's default; spelled out because a leaked fd is a stale lock.
    fd = safefs.open_file(path, os.O_RDWR | os.O_CREAT)  # no symlink; 0600; O_CLOEXEC
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        holder = read_holder(path)
        raise JobLockHeld(
            f"job {job!r} is already supervised by {_describe(holder)} "
            f"(lock {path}); stop it first, or use another log_dir",
            path=path,
            job=job,
            holder=holder,
        ) from None
    record = {
        "pid": os.getpid(),
        "create_time": _own_create_time(),
        "started_at": datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="seconds"),
        "job": job,
        "host": socket.gethostname(),
    }
    data = (json.dumps(record) + "\n").encode()
    # The lock is held either way; a failed record (disk full) only loses the information.
    with contextlib.suppress(OSError):
        # Truncate, then one small write: readers see a whole record or none (then "unknown").
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    return JobLock(path=path, job=job, fd=fd)
