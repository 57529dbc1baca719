"""Start an attempt's process tree and end it completely, touching nothing dsguard did not start.

An attempt is identified two ways, because neither alone is enough:

* its **session**: the launcher is started with ``start_new_session=True``, so the launcher,
  the DeepSpeed per-node launcher and its ranks share session id == launcher pid, which
  survives re-parenting to PID 1 when the launcher dies first;
* its **marker**: ``DSGUARD_RUN_ID``/``DSGUARD_ATTEMPT`` in the environment, inherited by every
  descendant, which also finds torchrun workers (each in a session of its own) and anything
  else that called ``setsid``.

Both tests also require the process to have started no earlier than the attempt, so a reused
pid or session id can never make dsguard kill a stranger's process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

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

    def as_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "sid": self.sid,
            "started_epoch_s": self.started_epoch_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> AttemptRef:
        return cls(
            run_id=str(d["run_id"]),
            attempt=int(str(d["attempt"])),
            sid=int(str(d["sid"])),
            started_epoch_s=float(str(d["started_epoch_s"])),
        )


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
    return Child(popen=popen, ref=AttemptRef(run_id, attempt, popen.pid, started))


def attempt_processes(child: AttemptRef) -> list[psutil.Process]:
    """Every live (non-zombie) process that belongs to this attempt."""
    me = os.getpid()
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        info = proc.info
        if info["pid"] == me or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if (info["create_time"] or 0.0) < child.started_epoch_s:
            continue
        try:
            if os.getsid(proc.pid) == child.sid:
                found.append(proc)
                continue
            env = proc.environ()
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied, PermissionError):
            continue
        if env.get(RUN_ID_ENV) == child.run_id and env.get(ATTEMPT_ENV) == str(child.attempt):
            found.append(proc)
    return found


def _signal_all(procs: list[psutil.Process], sig: signal.Signals) -> list[int]:
    sent = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)
            sent.append(p.pid)
    return sent


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
    procs = attempt_processes(child)
    terminated = _signal_all(procs, signal.SIGTERM) if grace_s > 0 else []
    deadline = t0 + grace_s
    remaining = procs
    while grace_s > 0 and monotonic() < deadline:
        reap()  # reap the launcher (if it is our child) so it does not linger as a zombie
        remaining = attempt_processes(child)
        if not remaining:
            break
        time.sleep(_POLL_S)
    else:
        remaining = attempt_processes(child)
    killed = _signal_all(remaining, signal.SIGKILL)
    kill_deadline = monotonic() + kill_wait_s
    survivors = remaining
    while monotonic() < kill_deadline:
        reap()
        survivors = attempt_processes(child)
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
