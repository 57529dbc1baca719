"""One dsguard per job: an exclusive ``flock`` on a per-job lock file, held for life.

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

Where the lock lives. Not (only) in the log dir: a user who deletes the log dir while dsguard
runs (to "start clean") also deletes the lock file's name; the next ``dsguard run`` creates
a fresh inode, locks it, and launches a second trainer onto the same GPUs and checkpoints.
The lock that guarantees one supervisor per job is therefore taken on a stable path keyed by
a hash of the log dir's resolved path (the log dir is what two supervisors must not share:
its event log, state and attempt logs), in a directory nobody clears with a job's files:

* ``$DSGUARD_LOCK_DIR`` when set (tests; a site that wants it elsewhere);
* as root: ``/run/dsguard/locks`` (``/run`` is a tmpfs for exactly such runtime state; it
  is emptied at boot, when no supervisor can be alive anyway);
* otherwise ``$XDG_RUNTIME_DIR/dsguard/locks`` (the per-user ``/run/user/UID``), else
  ``~/.local/state/dsguard/locks`` (a service user without a login session).

That file is created 0600 and unlinked on release; a newcomer that opened the name just
before it was unlinked would lock an orphaned inode, so after locking it checks that the
path still names the inode it locked, and starts over otherwise. ``log_dir/dsguard.lock`` is
still locked too (it is where older dsguards look, and where ``dsguard status`` and the
error message find the holder's record) and is never deleted; when the log dir vanishes it
is recreated by :meth:`JobLock.ensure_log_dir`.

The files' content (pid, process start time, job, host) is information for the error
message and ``dsguard status``; the lock is the ``flock``, never the content. On NFS,
Linux emulates ``flock`` with byte-range locks, which works only if lockd is running; keep
log dirs on a local disk when that matters.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
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
from dsguard.run.logdir import LOCK_FILENAME, ensure_log_dir

#: Overrides where per-job locks live (see the module doc).
LOCK_DIR_ENV = "DSGUARD_LOCK_DIR"


def lock_dir() -> Path:
    """The directory of per-job locks for this user (see the module doc for the order)."""
    override = os.environ.get(LOCK_DIR_ENV)
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/run/dsguard/locks")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "dsguard" / "locks"
    return Path.home() / ".local" / "state" / "dsguard" / "locks"


def job_lock_path(log_dir: Path) -> Path:
    """The stable per-job lock file of ``log_dir`` (keyed by its resolved path)."""
    key = hashlib.sha256(str(log_dir.resolve()).encode()).hexdigest()[:24]
    return lock_dir() / f"{key}.lock"


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


def read_job_holder(log_dir: Path) -> tuple[LockHolder | None, Path]:
    """The holder recorded for ``log_dir``'s job, and the file it was read from.

    The log dir's record when that file exists (even unreadable: then None), else the stable
    lock's (the log dir was deleted under a running dsguard)."""
    in_log_dir = log_dir / LOCK_FILENAME
    if in_log_dir.exists():
        return read_holder(in_log_dir), in_log_dir
    stable = job_lock_path(log_dir)
    return read_holder(stable), stable


def _own_create_time() -> float | None:
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


@dataclass
class JobLock:
    """A held job lock; released by :meth:`release` or, whatever happens, by process death."""

    #: ``log_dir/dsguard.lock``.
    path: Path
    job: str
    fd: int | None
    #: The per-job lock that outlives the log dir (None: not taken, e.g. released).
    stable_path: Path | None = None
    stable_fd: int | None = None

    @property
    def held(self) -> bool:
        return self.stable_fd is not None or self.fd is not None

    def ensure_log_dir(self) -> bool:
        """Recreate the log dir and its lock file if they were deleted; True if it was.

        The job stays locked throughout (the stable lock): this only puts back what
        ``dsguard status`` and older dsguards look for."""
        if not self.held:
            return False
        try:
            st: os.stat_result | None = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError:
            return False
        if st is not None and (self.fd is None or _same_file(st, os.fstat(self.fd))):
            return False
        old, self.fd = self.fd, None
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)
        with contextlib.suppress(OSError):
            ensure_log_dir(self.path.parent)
            fd = safefs.open_file(self.path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return True
            _write_record(fd, self.job)
            self.fd = fd
        return True

    def release(self) -> None:
        """Unlock and close; the stable lock file is unlinked first, while still held (a
        newcomer holding its old inode sees the name gone and starts over). Idempotent."""
        if self.stable_fd is not None and self.stable_path is not None:
            sfd, self.stable_fd = self.stable_fd, None
            with contextlib.suppress(OSError):
                if _same_file(os.stat(self.stable_path, follow_symlinks=False), os.fstat(sfd)):
                    os.unlink(self.stable_path)
            _unlock(sfd)
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        _unlock(fd)

    def __enter__(self) -> JobLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lock_stable(path: Path) -> int | None:
    """Lock the per-job file at ``path``: its fd, or None when another process holds it.

    Raises:
        OSError: the lock dir or file cannot be created/opened.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    while True:
        # O_NOFOLLOW: a symlink planted at the name must not make root lock (or truncate)
        # a file elsewhere.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            return None
        try:
            if _same_file(os.stat(path, follow_symlinks=False), os.fstat(fd)):
                return fd
        except FileNotFoundError:
            pass
        _unlock(fd)  # the holder unlinked it as we locked: the name is someone else's now


def _write_record(fd: int, job: str) -> None:
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


def _held(log_dir: Path, job: str, where: Path) -> JobLockHeld:
    holder, _ = read_job_holder(log_dir)
    path = log_dir / LOCK_FILENAME
    return JobLockHeld(
        f"job {job!r} is already supervised by {_describe(holder)} "
        f"(lock {path}, {where}); stop it first, or use another log_dir",
        path=path,
        job=job,
        holder=holder,
    )


def _describe(holder: LockHolder | None) -> str:
    if holder is None or holder.pid is None:
        return "another process (its pid is not recorded yet)"
    where = f" on {holder.host}" if holder.host and holder.host != socket.gethostname() else ""
    since = f", running since {holder.started_at}" if holder.started_at else ""
    return f"dsguard pid {holder.pid}{where}{since}"


def acquire(log_dir: Path, job: str) -> JobLock:
    """Take the job's lock without waiting, and record who holds it.

    First the stable per-job lock (the guarantee), then ``log_dir/dsguard.lock`` (what older
    dsguards hold, and the record ``dsguard status`` reads).

    Raises:
        JobLockHeld (a ``LockHeldError``): another process holds it; the message names its
            pid and the job.
        OSError: the log dir or lock file cannot be created/opened (permissions, read-only fs).
    """
    stable = job_lock_path(log_dir)
    sfd = _lock_stable(stable)
    if sfd is None:
        raise _held(log_dir, job, stable)
    try:
        ensure_log_dir(log_dir, subdirs=False)  # 0700, no symlink, ours (or root's)
        path = log_dir / LOCK_FILENAME
        fd = safefs.open_file(path, os.O_RDWR | os.O_CREAT)  # no symlink; 0600; O_CLOEXEC
    except BaseException:
        _unlock(sfd)
        raise
    lock = JobLock(path=path, job=job, fd=None, stable_path=stable, stable_fd=sfd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        lock.release()
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise _held(log_dir, job, path) from None
    lock.fd = fd
    _write_record(sfd, job)
    _write_record(fd, job)
    return lock
