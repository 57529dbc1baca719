"""Start an attempt's process tree and end it completely, touching nothing dsguard did not start.

dsguard often runs as root, so a wrong pid is not refused by the kernel: whatever it signals
dies. A process is therefore only ever signalled once it is *proven* to be the attempt's, and
proven again at the moment of the signal:

* its **marker**: ``DSGUARD_RUN_ID``/``DSGUARD_ATTEMPT`` in its environment, inherited by every
  descendant (torchrun workers in sessions of their own, anything that called ``setsid``).
  The run id is random, so a stranger cannot carry it by accident. A process carrying
  *another* run's or attempt's marker is never ours, whatever its session;
* its **lineage**, for a process without the marker (it scrubbed its environment, ``env -i``)
  or whose environment cannot be read: same session as the launcher, started no earlier
  than the attempt, AND its parent chain reaches the recorded launcher pid whose start time
  is the recorded one. A session id alone proves nothing: after dsguard is SIGKILLed the
  session leader's pid can be reused (or the machine rebooted) and a stranger that called
  ``setsid`` then owns that session id.

Between the check and the signal the pid could be reused. Where the kernel has pidfds
(Linux >= 5.3) the process is pinned with ``pidfd_open`` first, checked, and signalled
through the pidfd, so the signal reaches the checked process or nobody. Elsewhere the check
runs right before ``psutil``'s ``send_signal``, which itself refuses a pid whose start time
changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

from dsguard.core.records import as_builtins, from_builtins
from dsguard.protocol import ATTEMPT_ENV, RUN_ID_ENV
from dsguard.run.launch import Command

#: Bigger than the default 64 KiB so a burst of output (a traceback from every rank at once)
#: never blocks a rank in write() while the watcher is busy.
PIPE_SIZE_BYTES = 1 << 20
_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """What identifies every process of one attempt; persisted in state.json so that a
    restarted dsguard can end the attempt a dead predecessor left behind."""

    run_id: str
    attempt: int
    #: start_new_session=True makes the launcher a session leader: sid == launcher pid.
    sid: int
    #: Wall-clock start (seconds since the epoch), minus a margin: psutil create_time has a
    #: coarse resolution, and a descendant can never predate the launcher.
    started_epoch_s: float
    #: The launcher's psutil create_time: with ``sid`` (its pid) it identifies the launcher
    #: even after its pid is reused. None (a state.json of an older dsguard): lineage cannot
    #: be proven, and only processes carrying the marker are ours.
    launcher_create_time: float | None = None

    def as_dict(self) -> dict[str, object]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> AttemptRef:
        return from_builtins(d, cls)


@dataclass
class Child:
    """The launcher process of one attempt plus what identifies its whole tree."""

    popen: subprocess.Popen[bytes]
    ref: AttemptRef
    stdout_fd: int = field(init=False)

    def __post_init__(self) -> None:
        assert self.popen.stdout is not None
        self.stdout_fd = self.popen.stdout.fileno()

    @property
    def pid(self) -> int:
        return self.popen.pid


def spawn(cmd: Command, *, run_id: str, attempt: int) -> Child:
    """Start the attempt's launcher in its own session, stdout+stderr merged into one pipe.

    Raises:
        OSError: the executable cannot be started (missing interpreter, bad permissions).
    """
    started = time.time() - 1.0
    popen = subprocess.Popen(
        cmd.argv,
        cwd=cmd.cwd,
        env=cmd.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    assert popen.stdout is not None
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(popen.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE_BYTES)
    launcher_ct: float | None = None
    with contextlib.suppress(psutil.Error):
        # Our own child cannot have been reaped and reused yet: this is the launcher.
        launcher_ct = psutil.Process(popen.pid).create_time()
    ref = AttemptRef(run_id, attempt, popen.pid, started, launcher_ct)
    return Child(popen=popen, ref=ref)


#: Two psutil create_time readings of one process are the same number: the same start tick
#: since boot (USER_HZ, 10 ms) plus the same boot time; this margin only absorbs float
#: rounding. It is under one tick on purpose: a window of 50 ms let a different process that
#: started 44 ms after the launcher (in the stranger_session chaos condition, its pid written
#: into state.json as the session id) pass for the launcher and be signalled. A boot time
#: that moved with a stepped wall clock fails the test, which only leaves a marker-less
#: leftover unproven: never a stranger signalled.
_SAME_START_S = 0.005
#: How far up a parent chain the lineage test looks (a launcher, a node agent, ranks,
#: DataLoader workers and their helpers are a handful of levels).
_MAX_DEPTH = 32

_GONE = (ProcessLookupError, PermissionError, psutil.NoSuchProcess, psutil.AccessDenied)


def _marker(proc: psutil.Process) -> tuple[str | None, str | None] | None:
    """The process's (run id, attempt) marker; None when its environment cannot be read."""
    try:
        env = proc.environ()
    except (psutil.ZombieProcess, psutil.AccessDenied, PermissionError, OSError):
        return None
    return env.get(RUN_ID_ENV), env.get(ATTEMPT_ENV)


def _descends_from_launcher(proc: psutil.Process, ref: AttemptRef) -> bool:
    """Whether ``proc`` is the recorded launcher or its parent chain reaches it, the launcher
    recognised by pid AND start time (a reused launcher pid is someone else)."""
    if ref.launcher_create_time is None:
        return False
    p: psutil.Process | None = proc
    for _ in range(_MAX_DEPTH):
        if p is None or p.pid <= 1:
            return False
        if p.pid == ref.sid:
            return abs(p.create_time() - ref.launcher_create_time) < _SAME_START_S
        p = p.parent()
    return False


def is_ours(proc: psutil.Process, ref: AttemptRef) -> bool:
    """Whether ``proc`` is proven to belong to the attempt ``ref`` (see the module doc).

    A process that vanishes while it is examined is not ours (there is nothing to signal)."""
    try:
        if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if proc.create_time() < ref.started_epoch_s:
            return False  # predates the attempt: a reused pid or session id
        marker = _marker(proc)
        if marker is not None and marker != (None, None):
            return marker == (ref.run_id, str(ref.attempt))
        return os.getsid(proc.pid) == ref.sid and _descends_from_launcher(proc, ref)
    except _GONE:
        return False


def attempt_processes(child: AttemptRef) -> list[psutil.Process]:
    """Every live (non-zombie) process proven to belong to this attempt."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if (info["create_time"] or 0.0) < child.started_epoch_s:
            continue
        if is_ours(proc, child):
            found.append(proc)
    return found


def signal_if_ours(
    proc: psutil.Process,
    ref: AttemptRef,
    sig: signal.Signals,
    proven: Mapping[int, float] | None = None,
) -> bool:
    """Send ``sig`` to ``proc`` only if it is still proven ours at this moment; True if sent.

    ``proven`` (pid -> start time) holds processes proven ours earlier in the same ending:
    a marker-less rank is proven through its launcher, and once the launcher died of the
    SIGTERM the rank is re-parented to PID 1 and can no longer be proven afresh; the same
    pid with the same start time is the same process, so the earlier proof stands.

    With a pidfd the process is pinned *before* the check, so a pid reused between the
    check and the signal cannot receive it; the pidfd must also name the very process that
    was listed (same start time), else the pid was reused before it was opened."""
    pidfd = _pidfd_open(proc.pid)
    try:
        try:
            start = psutil.Process(proc.pid).create_time()
        except _GONE:
            return False
        if start != proc.create_time():
            return False
        if not is_ours(proc, ref) and (proven or {}).get(proc.pid) != start:
            return False
        if pidfd is None:
            proc.send_signal(sig)  # psutil refuses a pid whose start time changed
        else:
            signal.pidfd_send_signal(pidfd, sig)
        return True
    except _GONE:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where the kernel or Python has none (or it is gone)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


class _Proven:
    """The processes of one attempt proven ours so far in one ending (pid -> start time)."""

    def __init__(self, ref: AttemptRef) -> None:
        self.ref = ref
        self.seen: dict[int, float] = {}

    def alive(self) -> list[psutil.Process]:
        """Every process proven ours now or earlier in this ending that still lives."""
        found = {p.pid: p for p in attempt_processes(self.ref)}
        for pid, start in list(self.seen.items()):
            if pid in found:
                continue
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == start and p.status() != psutil.STATUS_ZOMBIE:
                    found[pid] = p
        for p in found.values():
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(p.pid, p.create_time())
        return list(found.values())

    def signal(self, procs: list[psutil.Process], sig: signal.Signals) -> list[int]:
        return [p.pid for p in procs if signal_if_ours(p, self.ref, sig, self.seen)]


@dataclass(frozen=True, slots=True)
class EndReport:
    """What ending an attempt took (goes into events)."""

    terminated_pids: tuple[int, ...]
    killed_pids: tuple[int, ...]
    survivor_pids: tuple[int, ...]
    duration_s: float


def end_attempt(
    child: AttemptRef,
    grace_s: float,
    *,
    reap: Callable[[], object] = lambda: None,
    monotonic: Callable[[], float] = time.monotonic,
    kill_wait_s: float = 10.0,
) -> EndReport:
    """SIGTERM every process of the attempt, wait ``grace_s``, SIGKILL what is left, reap.

    SIGTERM goes to each process directly rather than only to the launcher: the ``deepspeed``
    runner forwards nothing on a single node (its ranks would survive it), and a rank blocked
    in an NCCL collective would otherwise hold the GPU until the NCCL timeout.
    """
    t0 = monotonic()
    proven = _Proven(child)
    procs = proven.alive()
    terminated = proven.signal(procs, signal.SIGTERM) if grace_s > 0 else []
    deadline = t0 + grace_s
    remaining = procs
    while grace_s > 0 and monotonic() < deadline:
        reap()  # reap the launcher (if it is our child) so it does not linger as a zombie
        remaining = proven.alive()
        if not remaining:
            break
        time.sleep(_POLL_S)
    else:
        remaining = proven.alive()
    killed = proven.signal(remaining, signal.SIGKILL)
    kill_deadline = monotonic() + kill_wait_s
    survivors = remaining
    while monotonic() < kill_deadline:
        reap()
        survivors = proven.alive()
        if not survivors:
            break
        time.sleep(_POLL_S)
    reap()
    return EndReport(
        terminated_pids=tuple(terminated),
        killed_pids=tuple(killed),
        survivor_pids=tuple(p.pid for p in survivors),
        duration_s=monotonic() - t0,
    )
