"""``dsguard queue run``: start queued jobs as ``dsguard run`` children, in order, where they fit.

Crash safety, the property everything here serves: **nothing run twice, nothing lost.**

* Each child runs in its own session (a Ctrl-C at the daemon's terminal, or a daemon killed
  by SIGKILL, does not reach it); a restarted daemon *adopts* every job whose recorded
  ``dsguard run`` (pid and psutil start time, committed right after the spawn) is still
  alive, and whose job lock (``run/lock.py``) a live process holds. It never starts a job
  whose lock is held.
* A job whose ``dsguard run`` died without a verdict (SIGKILL, a crash, the machine
  rebooted) is started again: ``dsguard run`` resumes it at its ladder rung from its own
  ``state.json``. After :data:`MAX_STARTS` such starts it is failed, not looped on.
* The verdict comes from the job's ``state.json`` (``succeeded``, ``gave_up``, ``stopped``),
  which works for an adopted child whose exit status the new daemon cannot see.
* A job that gives up does not stop the queue; its ``--after`` dependents are skipped, with
  the reason.
* Stopping the daemon (SIGTERM, Ctrl-C) sends SIGTERM to each job's ``dsguard run``, which
  saves and stops its attempt in order; the jobs go back to ``queued`` and the next daemon
  resumes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psutil
import yaml

from dsguard.exitcodes import EXIT_USAGE
from dsguard.host.gpu import GpuProbe, GpuSnapshot, Unknown
from dsguard.queue.alloc import GPU_BUSY_FRACTION, Held, Placement, Wait, Want, place
from dsguard.queue.derive import dump, with_gpus
from dsguard.queue.store import (
    DAEMON_LOCK_FILENAME,
    EVENTS_FILENAME,
    JOBS_SUBDIR,
    TERMINAL_STATES,
    JobState,
    QueueError,
    QueueJob,
    Store,
)
from dsguard.run.lock import read_job_holder
from dsguard.run.logdir import STATE_FILENAME
from dsguard.run.safefs import write_atomic
from dsguard.run.state import read_state

#: Starts of one job that ended without a verdict before it is failed (a dsguard that
#: crashes at once every time is a bug to look at, not to restart all night).
MAX_STARTS = 3
#: Environment variable naming the queue job in its ``dsguard run``'s environment.
QUEUE_JOB_ENV = "DSGUARD_QUEUE_JOB"
#: Tolerance when comparing a recorded process start time with psutil's.
_CT_TOLERANCE_S = 1.0
_VERDICTS = {"succeeded": JobState.SUCCEEDED, "gave_up": JobState.GAVE_UP,
             "stopped": JobState.STOPPED}  # fmt: skip


def same_process(pid: int | None, create_time: float | None) -> bool:
    """``pid`` is alive and is the process recorded (start time within tolerance)."""
    if pid is None or pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = proc.create_time()
    except psutil.Error:
        return False
    return create_time is None or abs(started - create_time) <= _CT_TOLERANCE_S


def live_holder(log_dir: Path) -> tuple[int, float | None] | None:
    """The live process holding ``log_dir``'s job lock, as ``(pid, create_time)``."""
    holder, _ = read_job_holder(log_dir)
    if holder is None or holder.pid is None:
        return None
    if not same_process(holder.pid, holder.create_time):
        return None
    return holder.pid, holder.create_time


def out_path(root: Path, name: str) -> Path:
    """Where a job's ``dsguard run`` console output goes."""
    return root / JOBS_SUBDIR / f"{name}.out"


@dataclass
class Child:
    pid: int
    create_time: float | None
    #: None: adopted from an earlier daemon (not our child: no exit status).
    popen: subprocess.Popen[bytes] | None
    term_sent: bool = False

    def exit_code(self) -> tuple[bool, int | None]:
        """``(ended, exit status or None when unknown)``."""
        if self.popen is not None:
            rc = self.popen.poll()
            return rc is not None, rc
        return not same_process(self.pid, self.create_time), None

    def terminate(self) -> None:
        if self.term_sent:
            return
        self.term_sent = True
        with contextlib.suppress(OSError):
            if self.popen is not None or same_process(self.pid, self.create_time):
                os.kill(self.pid, signal.SIGTERM)


def _host_memory() -> tuple[int, int]:
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


@dataclass
class Daemon:
    """The queue daemon (see the module doc); :meth:`run` until stopped or empty."""

    store: Store
    slots: int = 1
    until_empty: bool = False
    poll_s: float = 1.0
    busy_fraction: float = GPU_BUSY_FRACTION
    #: One NVML snapshot per scheduling pass (tests: a GpuProbe over a scripted NVML).
    gpu: Callable[[], GpuSnapshot | Unknown] | None = None
    memory: Callable[[], tuple[int, int]] = _host_memory
    #: How to start ``dsguard run`` (argv before the job file).
    dsguard_argv: tuple[str, ...] = (sys.executable, "-m", "dsguard", "run", "--quiet")
    #: How long a stop waits for the jobs' ``dsguard run`` to save and stop.
    stop_timeout_s: float = 120.0
    console: TextIO | None = None
    children: dict[str, Child] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _stopping: bool = False
    _lock_fd: int | None = None
    _probe: GpuProbe | None = None
    _events: Any = None

    def emit(self, name: str, **fields: Any) -> None:
        """One event in the queue's own ``events.jsonl`` (the records are in core/events.py)."""
        if self._events is not None:
            self._events.emit(name, **fields)

    def say(self, text: str) -> None:
        if self.console is not None:
            print(f"dsguard queue: {text}", file=self.console, flush=True)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        self._stop.set()

    # -- the daemon's own lock ------------------------------------------------------------

    def _lock(self) -> None:
        path = self.store.root / DAEMON_LOCK_FILENAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise QueueError(f"a queue daemon already runs for {self.store.root}") from None
        record = {"pid": os.getpid(), "create_time": psutil.Process().create_time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, with ``until_empty``, until nothing is queued or running).

        Raises:
            QueueError: another daemon runs for this queue dir.
        """
        self._lock()
        from dsguard.run.events import EventLog

        self._events = EventLog(self.store.root / EVENTS_FILENAME, run_id=f"queue-{os.getpid()}")
        try:
            self.adopt()
            while not self._stop.is_set():
                self.tick()
                if self.until_empty and not self._pending():
                    break
                self._stop.wait(self.poll_s)
            if self._stop.is_set():
                self.shutdown()
        finally:
            if self._probe is not None:
                self._probe.close()
            self._events.close()
            self._unlock()
        return 0

    def _pending(self) -> bool:
        return bool(self.children) or any(
            j.state in (JobState.QUEUED, JobState.RUNNING) for j in self.store.jobs()
        )

    def tick(self) -> None:
        """One pass: reap ended jobs, end cancelled ones, skip orphaned dependents, start
        what fits."""
        self.reap()
        self._end_cancelled()
        self._skip_dependents()
        self.schedule()

    def adopt(self) -> None:
        """At start: take over the jobs the last daemon left ``running``."""
        for job in self.store.jobs():
            # A job cancelled while no daemon ran may still have its dsguard run: adopted
            # too, so that _end_cancelled ends it.
            cancelled_live = job.state is JobState.CANCELLED and job.ended_at is None
            if job.state is not JobState.RUNNING and not cancelled_live:
                continue
            if same_process(job.pid, job.pid_create_time) and job.pid is not None:
                self.children[job.name] = Child(job.pid, job.pid_create_time, None)
                why = f"dsguard run pid {job.pid} still runs"
                self.emit("queue_job_adopted", job=job.name, pid=job.pid, reason=why)
                self.say(f"{job.name}: adopted ({why})")
                continue
            held = live_holder(Path(job.log_dir))
            if held is not None and not cancelled_live:
                self._adopt_holder(job, held)
                continue
            if job.state is JobState.RUNNING or job.pid is not None:
                self._finish(job, None)

    def _adopt_holder(self, job: QueueJob, held: tuple[int, float | None]) -> None:
        pid, ct = held
        self.children[job.name] = Child(pid, ct, None)
        self.store.update(job.name, state=JobState.RUNNING, pid=pid, pid_create_time=ct,
                          reason=f"adopted: pid {pid} holds the job lock")  # fmt: skip
        self.emit("queue_job_adopted", job=job.name, pid=pid, reason="it holds the job lock")
        self.say(f"{job.name}: adopted (pid {pid} holds its job lock)")

    def reap(self) -> None:
        for name, child in list(self.children.items()):
            ended, rc = child.exit_code()
            if not ended:
                continue
            del self.children[name]
            job = self.store.get(name)
            if job is not None:
                self._finish(job, rc)

    def _end_cancelled(self) -> None:
        for name, child in self.children.items():
            job = self.store.get(name)
            if job is not None and job.state is JobState.CANCELLED and not child.term_sent:
                self.say(f"{name}: cancelled; ending its dsguard run (pid {child.pid})")
                child.terminate()

    def _skip_dependents(self) -> None:
        changed = True
        while changed:
            changed = False
            jobs = {j.name: j for j in self.store.jobs()}
            for job in jobs.values():
                pre = jobs.get(job.after) if job.after is not None else None
                if job.state is not JobState.QUEUED or pre is None:
                    continue
                if pre.terminal and pre.state is not JobState.SUCCEEDED:
                    why = f"after {pre.name}, which {pre.state.value.replace('_', ' ')}"
                    if pre.reason:
                        why += f" ({pre.reason})"
                    self.store.update(job.name, state=JobState.SKIPPED, reason=why,
                                      ended_at=time.time())  # fmt: skip
                    self.emit("queue_job_skipped", job=job.name, after=pre.name, reason=why)
                    self.say(f"{job.name}: skipped: {why}")
                    changed = True

    # -- verdicts ---------------------------------------------------------------------------

    def _verdict(self, job: QueueJob) -> tuple[JobState, str | None] | None:
        """The run's own verdict in its ``state.json``, if written by this start."""
        path = Path(job.log_dir) / STATE_FILENAME
        try:
            if job.picked_at is not None and path.stat().st_mtime < job.picked_at - 1.0:
                return None  # an older run's file: this start never got to write one
            st = read_state(path)
        except (OSError, ValueError):
            return None
        verdict = _VERDICTS.get(st.state.value)
        return None if verdict is None else (verdict, st.reason)

    def _finish(self, job: QueueJob, rc: int | None) -> None:
        """Record how ``job``'s ``dsguard run`` ended (``rc`` None: not our child, or unknown)."""
        if job.state is JobState.CANCELLED:
            self._record(job, rc, JobState.CANCELLED, job.reason)
            return
        verdict = self._verdict(job)
        if self._stopping and (verdict is None or verdict[0] is JobState.STOPPED):
            self._record(job, rc, JobState.QUEUED, "the queue daemon stopped; resumes at its rung")
        elif verdict is not None:
            self._record(job, rc, *verdict)
        elif rc == EXIT_USAGE:
            held = live_holder(Path(job.log_dir))
            if held is not None:  # raced with a live supervisor of the same job: adopt it
                self._adopt_holder(job, held)
                return
            why = _last_line(out_path(self.store.root, job.name)) or "dsguard run refused it"
            self._record(job, rc, JobState.FAILED, why)
        else:
            how = "unknown exit" if rc is None else f"exit {rc}"
            if job.starts >= MAX_STARTS:
                why = f"dsguard run ended without a verdict {job.starts} times (last: {how})"
                self._record(job, rc, JobState.FAILED, why)
            else:
                why = f"dsguard run ended without a verdict ({how}); starts again at its rung"
                self._record(job, rc, JobState.QUEUED, why)

    def _record(self, job: QueueJob, rc: int | None, state: JobState, reason: str | None) -> None:
        """Write a job's end to the queue (one transaction), its event and a console line."""
        fields: dict[str, Any] = {"exit_code": rc, "pid": None, "pid_create_time": None,
                                  "state": state, "reason": reason}  # fmt: skip
        if state is JobState.QUEUED:
            fields["assigned"] = None
        else:
            fields["ended_at"] = time.time()
        self.store.update(job.name, **fields)
        self.emit("queue_job_ended", job=job.name, outcome=state.value, reason=reason,
                  exit_code=rc)  # fmt: skip
        self.say(f"{job.name}: {state.value}" + (f": {reason}" if reason else ""))

    # -- placement and start ------------------------------------------------------------------

    def _snapshot(self) -> GpuSnapshot | Unknown:
        if self.gpu is not None:
            return self.gpu()
        if self._probe is None:
            self._probe = GpuProbe()
        return self._probe.snapshot(timeout_s=10.0)

    def _held(self, jobs: dict[str, QueueJob]) -> list[Held]:
        out: list[Held] = []
        for name in self.children:
            j = jobs.get(name)
            if j is None:
                continue
            gpus = j.assigned or ()
            out.append(Held(gpus, j.gpu_fraction, j.host_mem_bytes, slot=not gpus))
        return out

    def schedule(self) -> None:
        jobs = {j.name: j for j in self.store.jobs()}
        ready = [
            j for j in jobs.values()
            if j.state is JobState.QUEUED and j.name not in self.children
            and (j.after is None or jobs[j.after].state is JobState.SUCCEEDED)
        ]  # fmt: skip
        if not ready:
            return
        snap = self._snapshot()
        mem = self.memory()
        for job in sorted(ready, key=lambda j: (-j.priority, j.seq)):
            want = Want(job.gpus_wanted, job.gpu_ids, job.gpu_fraction, job.host_mem_bytes)
            where = place(want, snap, self._held(jobs), slots=self.slots, mem=mem,
                          busy_fraction=self.busy_fraction)  # fmt: skip
            if isinstance(where, Wait):
                if where.impossible:
                    self.store.update(job.name, state=JobState.FAILED, reason=where.reason,
                                      ended_at=time.time())  # fmt: skip
                    self.say(f"{job.name}: failed: {where.reason}")
                elif job.reason != f"waiting: {where.reason}":
                    self.store.update(job.name, reason=f"waiting: {where.reason}")
                continue
            self.start(job, where)
            jobs[job.name] = self.store.get(job.name) or job

    def start(self, job: QueueJob, where: Placement) -> None:
        """Start ``job``'s ``dsguard run`` (or adopt the live one that holds its lock)."""
        held = live_holder(Path(job.log_dir))
        if held is not None:
            self._adopt_holder(job, held)
            return
        doc = with_gpus(yaml.safe_load(job.job_yaml), where.gpus)
        write_atomic(Path(job.job_file), dump(doc).encode())
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}  # fmt: skip
        env[QUEUE_JOB_ENV] = job.name
        picked = time.time()
        with open(out_path(self.store.root, job.name), "ab") as out:
            popen = subprocess.Popen(
                [*self.dsguard_argv, job.job_file], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True,
            )  # fmt: skip
        try:
            ct: float | None = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            ct = None
        self.children[job.name] = Child(popen.pid, ct, popen)
        self.store.update(
            job.name, state=JobState.RUNNING, pid=popen.pid, pid_create_time=ct,
            assigned=where.gpus, starts=job.starts + 1, picked_at=picked, reason=None,
        )  # fmt: skip
        self.emit("queue_job_started", job=job.name, pid=popen.pid, start=job.starts + 1,
                  gpus=None if where.gpus is None else list(where.gpus),
                  log_dir=job.log_dir)  # fmt: skip
        on = f"GPU(s) {','.join(map(str, where.gpus))}" if where.gpus else "a CPU slot"
        self.say(f"{job.name}: started on {on} (dsguard run pid {popen.pid})")

    def shutdown(self) -> None:
        """SIGTERM every job's ``dsguard run`` and wait for them to save and stop."""
        self._stopping = True
        for child in self.children.values():
            child.terminate()
        deadline = time.monotonic() + self.stop_timeout_s
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.2)
        for name in self.children:
            self.say(f"{name}: still stopping after {self.stop_timeout_s:g} s; left running")


def _last_line(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        problems = [ln for ln in lines if not ln.startswith("dsguard: nothing was launched")]
        return problems[-1].strip() if problems else None
    return None


__all__ = ["MAX_STARTS", "QUEUE_JOB_ENV", "TERMINAL_STATES", "Daemon", "live_holder"]
