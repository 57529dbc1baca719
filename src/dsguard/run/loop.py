"""The run loop: the one place where pure decisions meet processes, files and signals.

launch -> watch output and exit -> classify -> decide -> act -> record, once per attempt,
until the job succeeds, the policy gives up, or dsguard is asked to stop.

Everything the loop must remember across attempts lives in a :class:`Ledger` that is saved
in ``state.json`` at every transition, so a dsguard that was SIGKILLed (or lost power) and is
started again ends the attempt it left behind and continues at the recorded rung.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import psutil

from dsguard import __version__
from dsguard.core.classify import (
    Evidence,
    FailureKind,
    StreamClassifier,
    classify,
    decode_exit,
)
from dsguard.core.ladder import (
    REMEDY_KINDS,
    AttemptRecord,
    GiveUp,
    PolicyConfig,
    RemedyContext,
    decide,
    is_recoverable,
)
from dsguard.core.preflight import Problem as PreflightProblem
from dsguard.core.preflight import check_deepspeed_config, uses_hf_trainer
from dsguard.core.remedies import Remedy, remedy_config
from dsguard.errors import LockHeldError
from dsguard.exitcodes import EXIT_GAVE_UP, EXIT_SUCCEEDED, EXIT_USAGE, exit_code_for_signal
from dsguard.host.envfacts import detect, stale_build_locks
from dsguard.host.gpu import GpuProbe, GpuSnapshot, ReleaseResult, wait_for_release
from dsguard.host.memory import (
    NEAR_LIMIT_FRACTION,
    kernel_oom_killed_pids,
    memory_limit_bytes,
    oom_kill_count,
    tree_rss_bytes,
)
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job
from dsguard.protocol import (
    CAP_INIT_FROM,
    CAP_SAVE_AND_STOP,
    CAP_ZERO_TRANSPLANT,
    CONTROL_SUBDIR,
    HEARTBEAT_SUBDIR,
    stop_request_path,
)
from dsguard.run import checkpoints as ckpts
from dsguard.run.events import EventLog
from dsguard.run.heartbeat import capabilities, read_heartbeats
from dsguard.run.launch import build_command, render_deepspeed_config
from dsguard.run.lock import acquire
from dsguard.run.logdir import EVENTS_FILENAME, STATE_FILENAME, LogDir
from dsguard.run.proc import AttemptRef, Child, EndReport, attempt_processes, end_attempt
from dsguard.run.proc import spawn as spawn_attempt
from dsguard.run.resume import patch_train_batch_size
from dsguard.run.sdnotify import Notifier, child_env
from dsguard.run.state import TERMINAL, RunState, StateMachine, read_state, write_json_atomic
from dsguard.run.watch import OutputPump

#: Main-loop tick while an attempt runs. Fatal lines and stop requests wake it at once (an
#: event); only a plain launcher exit waits for the tick (bench P4: 20 wakeups/s cost CPU).
_WAIT_POLL_S = 0.25
#: How often the wait loop looks at heartbeats for hang detection.
_PROGRESS_CHECK_S = 1.0
#: How often the attempt's resident memory is sampled (evidence for a later SIGKILL).
_RSS_SAMPLE_S = 2.0
_RSS_SAMPLES_KEPT = 5
#: How long the output pump may take to drain after the attempt's processes are gone.
_PUMP_DRAIN_S = 5.0
#: Bound on the wait for a killed attempt's GPU memory to be released before relaunching.
GPU_RELEASE_TIMEOUT_S = 60.0


def new_run_id(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of an attempt log (compiler ``error:`` lines live only there)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    return text.splitlines()[-n:]


def _opt_path(value: object) -> Path | None:
    return None if value is None else Path(str(value))


@dataclass
class Ledger:
    """What the loop carries from one attempt to the next (persisted in state.json)."""

    knobs: Knobs
    ckpt_dir: Path | None
    positions: dict[str, int] = field(default_factory=dict)
    history: list[AttemptRecord] = field(default_factory=list)
    phase: int = 1
    #: The output dir of the current phase when it is not the job's own (phase > 1).
    phase_output: Path | None = None
    #: Weights a new phase starts from, passed to every attempt of the phase: a LoRA phase's
    #: own checkpoints hold only adapters, so the base must be these weights on resume too.
    phase_init_from: Path | None = None
    #: What the training code announced in its heartbeats (the last attempt that did).
    caps: frozenset[str] = frozenset()
    #: Attempts started so far (attempt numbers name log and heartbeat files: never reused).
    attempt: int = 0
    #: Environment remedies applied so far (build errors, loss-scale collapse), in order.
    remedies: list[Remedy] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "knobs": self.knobs.as_dict(),
            "ckpt_dir": None if self.ckpt_dir is None else str(self.ckpt_dir),
            "positions": dict(self.positions),
            "history": [h.as_dict() for h in self.history],
            "phase": self.phase,
            "phase_output": None if self.phase_output is None else str(self.phase_output),
            "phase_init_from": (
                None if self.phase_init_from is None else str(self.phase_init_from)
            ),
            "caps": sorted(self.caps),
            "attempt": self.attempt,
            "remedies": [r.as_dict() for r in self.remedies],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ledger:
        return cls(
            knobs=Knobs.from_dict(dict(d["knobs"])),
            ckpt_dir=_opt_path(d.get("ckpt_dir")),
            positions={str(k): int(v) for k, v in dict(d.get("positions") or {}).items()},
            history=[AttemptRecord.from_dict(h) for h in d.get("history") or []],
            phase=int(d.get("phase", 1)),
            phase_output=_opt_path(d.get("phase_output")),
            phase_init_from=_opt_path(d.get("phase_init_from")),
            caps=frozenset(str(c) for c in d.get("caps") or ()),
            attempt=int(d.get("attempt", 0)),
            remedies=[Remedy.from_dict(r) for r in d.get("remedies") or []],
        )


@dataclass
class _AttemptOutcome:
    exit_code: int | None
    ended_by: str  # "exit" | "fatal" | "stop" | "hang"
    duration_s: float
    report: EndReport | None
    classifier: StreamClassifier
    output_bytes: int
    pids: tuple[int, ...]


@dataclass
class Supervisor:
    """Supervises one job until it succeeds, gives up or is stopped.

    Args:
        job: the validated job.
        console: human-readable event lines (None: silent).
        echo: where the child's raw output is mirrored (None: only the attempt log).
        monotonic / now / wall: clocks, injectable for tests.
        oom_probe: host-OOM evidence counter (see ``hostmem``); None return means unknown.
        base_env: the environment children start from.
        notifier: sd_notify client (READY/STATUS/WATCHDOG/STOPPING); no-op outside systemd.
        gpu_release: waits (bounded) until the given pids hold no GPU memory; default: NVML.
            "unknown" (no driver, NVML failing) is logged and the run proceeds; memory still
            "held" after the bound stops the run (see ``_await_gpu_release``).
        gpu_busy: whether the attempt's GPUs are busy (a second hang signal); None = unknown;
            default: NVML utilisation of the devices the attempt's processes use.
    """

    job: Job
    console: TextIO | None = None
    echo: BinaryIO | None = None
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    wall: Callable[[], float] = time.time
    oom_probe: Callable[[], int | None] = oom_kill_count
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    notifier: Notifier = field(default_factory=Notifier)
    gpu_release: Callable[[list[int]], ReleaseResult] | None = None
    gpu_busy: Callable[[list[int]], bool | None] | None = None
    #: The memory limit the attempt lives under (cgroup or host RAM); injectable for tests.
    memory_limit: Callable[[], int | None] = memory_limit_bytes
    _probe: GpuProbe | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.gpu_release is None:
            self.gpu_release = lambda pids: wait_for_release(
                pids, GPU_RELEASE_TIMEOUT_S, tick=self.notifier.watchdog_if_due
            )
        if self.gpu_busy is None:
            self.gpu_busy = self._nvml_busy

    def _nvml_busy(self, pids: list[int]) -> bool | None:
        """Any device holding memory of ``pids`` above 10 % utilisation; None when unknown."""
        if self._probe is None:
            self._probe = GpuProbe()
        snap = self._probe.snapshot(timeout_s=5.0)
        if not isinstance(snap, GpuSnapshot):
            return None
        wanted = set(pids)
        utils = [
            d.utilization_pct
            for d in snap.devices
            if d.processes is not None and any(p.pid in wanted for p in d.processes)
        ]
        if not utils or any(u is None for u in utils):
            return None
        return max(u for u in utils if u is not None) > 10

    _wake: threading.Event = field(default_factory=threading.Event, init=False)
    _stop_signal: int | None = field(default=None, init=False)
    _stop_requests: int = field(default=0, init=False)
    _fatal: Evidence | None = field(default=None, init=False)
    _silent_s: float = field(default=0.0, init=False)
    _rss_samples: list[int] = field(default_factory=list, init=False)

    # -- control ---------------------------------------------------------------------------

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the loop to end the current attempt and stop (safe from a signal handler).

        A second request skips waiting for the trainer's save (the user insists)."""
        if self._stop_signal is None:
            self._stop_signal = signum
        self._stop_requests += 1
        self._wake.set()

    def _on_fatal(self, ev: Evidence) -> None:
        if self._fatal is None:
            self._fatal = ev
        self._wake.set()

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    # -- checkpoints -------------------------------------------------------------------------

    def _newest_complete_step(self, ckpt_dir: Path) -> int | None:
        chosen = ckpts.select_checkpoint(ckpt_dir, world_size=self.job.world_size).chosen
        return None if chosen is None else chosen.step

    def _pick_checkpoint(
        self, events: EventLog, ckpt_dir: Path, allow: bool, micro_batch_size: int
    ) -> Path | None:
        if self.job.checkpoints is None or self.job.checkpoints.resume_flag is None:
            return None
        if not allow:
            events.emit(
                "checkpoint_selected", path=None, step=None,
                reason="checkpoints.resume_at_start is false: first attempt starts fresh",
            )  # fmt: skip
            return None
        sel = ckpts.select_checkpoint(ckpt_dir, world_size=self.job.world_size)
        for bad in sel.rejected:
            dest = ckpts.quarantine(bad.path, ckpt_dir)
            events.emit(
                "checkpoint_quarantined", path=bad.path, moved_to=dest, step=bad.step,
                reasons=list(bad.reasons),
            )  # fmt: skip
        if sel.chosen is None:
            events.emit(
                "checkpoint_selected", path=None, step=None, dir=ckpt_dir,
                reason="no complete checkpoint: starting fresh",
            )  # fmt: skip
            return None
        events.emit(
            "checkpoint_selected", path=sel.chosen.path, step=sel.chosen.step,
            size_bytes=sel.chosen.size_bytes, warnings=list(sel.chosen.warnings),
        )  # fmt: skip
        patch = patch_train_batch_size(sel.chosen.path, micro_batch_size)
        if patch is not None:
            events.emit(
                "checkpoint_patched", path=patch.path, key=patch.key, old=patch.old,
                new=patch.new, backup=patch.backup,
                reason="transformers <= 5.1 would restore the old micro-batch on resume and "
                "ignore the new one",
            )  # fmt: skip
        return sel.chosen.path

    # -- progress / hang ---------------------------------------------------------------------

    def _heartbeat_age_s(self, attempt: int) -> float | None:
        """Seconds since the newest heartbeat file of ``attempt`` was written, or None."""
        newest: float | None = None
        logs = LogDir(self.job.log_dir)
        hb_dir = logs.heartbeat_dir
        prefix = logs.heartbeat_prefix(attempt)
        with contextlib.suppress(OSError):
            for entry in os.scandir(hb_dir):
                if entry.name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        m = entry.stat().st_mtime
                        newest = m if newest is None else max(newest, m)
        return None if newest is None else max(0.0, self.wall() - newest)

    def _is_hung(self, child: Child, pump: OutputPump, events: EventLog) -> bool:
        """No output and no heartbeat for hang_timeout_s, and the GPUs are not busy."""
        now = self.monotonic()
        output_age = now - pump.last_output_at
        hb_age = self._heartbeat_age_s(child.ref.attempt)
        silent = output_age if hb_age is None else min(output_age, hb_age)
        if silent <= self.job.limits.hang_timeout_s:
            return False
        busy = None
        if self.gpu_busy is not None:
            busy = self.gpu_busy([p.pid for p in attempt_processes(child.ref)])
        if busy:
            # Silent but computing (a long eval that prints nothing): not a hang. Logged once
            # per silent stretch so the user sees why dsguard waited.
            if self._silent_s == 0.0:
                events.emit("hang_suspected", silent_s=round(silent, 1), gpu_busy=True)
            self._silent_s = silent
            return False
        self._silent_s = silent
        return True

    def _wait(self, child: Child, pump: OutputPump, events: EventLog) -> str:
        last_check = last_rss = self.monotonic()
        self._silent_s = 0.0
        self._rss_samples = []
        while True:
            if self._fatal is not None:
                return "fatal"
            if self._stop_signal is not None:
                return "stop"
            if child.popen.poll() is not None:
                return "exit"
            self.notifier.watchdog_if_due()
            now = self.monotonic()
            if now - last_check >= _PROGRESS_CHECK_S:
                last_check = now
                if self._is_hung(child, pump, events):
                    return "hang"
            if now - last_rss >= _RSS_SAMPLE_S:
                last_rss = now
                rss = tree_rss_bytes(child.pid)
                if rss is not None:
                    self._rss_samples = [*self._rss_samples[-(_RSS_SAMPLES_KEPT - 1) :], rss]
            self._sleep(_WAIT_POLL_S)

    # -- graceful stop -----------------------------------------------------------------------

    def _ask_to_save_and_stop(self, events: EventLog, child: Child) -> None:
        """Ask a trainer that announced save_and_stop to checkpoint and exit, and wait."""
        attempt = child.ref.attempt
        beats = read_heartbeats(self.job.log_dir / HEARTBEAT_SUBDIR, attempt)
        if CAP_SAVE_AND_STOP not in capabilities(beats) or self._stop_requests > 1:
            return
        timeout_s = self.job.limits.stop_save_timeout_s
        path = stop_request_path(self.job.log_dir / CONTROL_SUBDIR, attempt)
        write_json_atomic(path, {"attempt": attempt, "reason": "dsguard is stopping"})
        events.emit("stop_requested", path=path, timeout_s=timeout_s)
        t0 = self.monotonic()
        next_extend = t0
        while child.popen.poll() is None and self._stop_requests <= 1:
            now = self.monotonic()
            if now - t0 > timeout_s:
                break
            if now >= next_extend:
                # Tell systemd the stop takes longer than TimeoutStopSec expected.
                self.notifier.extend_timeout(int(30e6))
                next_extend = now + 10.0
            self.notifier.watchdog_if_due()
            self._sleep(0.2)
        events.emit(
            "stop_save_finished", exited=child.popen.poll() is not None,
            exit_code=child.popen.returncode, waited_s=round(self.monotonic() - t0, 3),
        )  # fmt: skip

    # -- one attempt -------------------------------------------------------------------------

    def _run_attempt(
        self, events: EventLog, sm: StateMachine, child: Child, log_path: Path, t0: float
    ) -> _AttemptOutcome:
        classifier = StreamClassifier()
        pump = OutputPump(
            child.stdout_fd, log_path, classifier, on_fatal=self._on_fatal, echo=self.echo,
            monotonic=self.monotonic,
        )  # fmt: skip
        pump.start()
        ended_by = self._wait(child, pump, events)
        seen = {child.pid} | {p.pid for p in attempt_processes(child.ref)}
        report: EndReport | None = None
        limits = self.job.limits
        reap = child.popen.poll
        if ended_by == "fatal":
            fatal = self._fatal
            assert fatal is not None
            # RUNNING -> ENDING: one rank hit a fatal error; the others would hang in NCCL.
            sm.transition(RunState.ENDING, f"fatal output: {fatal.kind}")
            events.emit(
                "fatal_output_detected", kind=fatal.kind, rank=fatal.rank,
                line_no=fatal.line_no, line=fatal.text,
            )  # fmt: skip
            report = end_attempt(child.ref, limits.fatal_grace_s, reap=reap)
        elif ended_by == "hang":
            # RUNNING -> ENDING: no output, no heartbeat, GPUs idle or unknown.
            sm.transition(RunState.ENDING, f"no progress for {self._silent_s:.0f} s")
            events.emit(
                "hang_detected", silent_s=round(self._silent_s, 1),
                hang_timeout_s=limits.hang_timeout_s,
            )  # fmt: skip
            report = end_attempt(child.ref, limits.fatal_grace_s, reap=reap)
        elif ended_by == "stop":
            # RUNNING -> ENDING: dsguard itself was asked to stop.
            sm.transition(RunState.ENDING, f"stop requested by signal {self._stop_signal}")
            self.notifier.stopping()
            self._ask_to_save_and_stop(events, child)
            # Ending takes the grace, up to 10 s of SIGKILL reaping and the output drain.
            self.notifier.extend_timeout(int((limits.stop_grace_s + 30) * 1e6))
            report = end_attempt(child.ref, limits.stop_grace_s, reap=reap)
        # The launcher exited on its own; anything of the attempt still alive (a rank the
        # launcher did not reap, a DataLoader worker) would hold GPU memory into the next
        # attempt.
        elif attempt_processes(child.ref):
            report = end_attempt(child.ref, limits.fatal_grace_s, reap=reap)
        if report is not None:
            seen |= set(report.terminated_pids) | set(report.killed_pids)
            events.emit(
                "attempt_ended", by=ended_by, terminated_pids=list(report.terminated_pids),
                killed_pids=list(report.killed_pids), survivor_pids=list(report.survivor_pids),
                duration_s=round(report.duration_s, 3),
            )  # fmt: skip
        child.popen.wait()
        # Every process of the attempt is gone, so the pipe holds all there will be: let the
        # pump drain it and end without waiting out its coalescing window.
        pump.stop()
        if not pump.join(_PUMP_DRAIN_S):
            pump.stop()  # a process outside our reach holds the pipe: stop reading it
            pump.join(_PUMP_DRAIN_S)
        if child.popen.stdout is not None:
            child.popen.stdout.close()
        if pump.error is not None:
            raise pump.error
        return _AttemptOutcome(
            exit_code=child.popen.returncode,
            ended_by=ended_by,
            duration_s=self.monotonic() - t0,
            report=report,
            classifier=classifier,
            output_bytes=pump.bytes_read,
            pids=tuple(sorted(seen)),
        )

    def _host_oom_evidence(
        self, oom_before: int | None, out: _AttemptOutcome, killed: bool
    ) -> list[str]:
        """Why a SIGKILL of this attempt was the OOM killer's, if anything says so.

        A bare SIGKILL proves nothing (a user, a watchdog, a container runtime); each source
        here is independent evidence: the cgroup's oom_kill counter rose, the kernel log names
        one of the attempt's pids, or its resident memory was within 10 % of the limit just
        before it died. Only consulted when something of the attempt was killed.
        """
        evidence: list[str] = []
        oom_after = self.oom_probe()
        if oom_before is not None and oom_after is not None and oom_after > oom_before:
            evidence.append(f"cgroup memory.events oom_kill +{oom_after - oom_before}")
        if not killed and not any(
            ev.kind is FailureKind.KILLED_EXTERNALLY for ev in out.classifier.evidence
        ):
            return evidence
        killed_pids = kernel_oom_killed_pids()
        if killed_pids:
            ours = sorted(killed_pids & set(out.pids))
            if ours:
                evidence.append(f"kernel log: OOM killer killed pid {ours[0]}")
        limit = self.memory_limit()
        if limit and self._rss_samples:
            peak = max(self._rss_samples)
            if peak >= NEAR_LIMIT_FRACTION * limit:
                evidence.append(
                    f"resident memory {peak / 2**30:.1f} GiB, {100 * peak / limit:.0f} % of "
                    f"the {limit / 2**30:.1f} GiB limit, just before the kill"
                )
        return evidence

    def _remove_stale_build_locks(self, events: EventLog, env: Mapping[str, str]) -> None:
        """A JIT build killed mid-way (by dsguard ending the attempt) leaves ``<op>/lock``;
        every later process that loads that op waits on it forever, silently: the next attempt
        would look like a hang. Only locks no live process holds open are removed."""
        facts = detect(self.job.python, env=env, gpus=self.job.gpus)
        if facts.torch_extensions_dir is None:
            return
        for lock in stale_build_locks(facts.torch_extensions_dir):
            with contextlib.suppress(OSError):
                lock.unlink()
                events.emit("build_lock_removed", path=lock)

    def _await_gpu_release(self, events: EventLog, pids: list[int]) -> ReleaseResult | None:
        """Before relaunching: the next attempt must not OOM on the last one's leftovers."""
        if self.gpu_release is None:
            return None
        res = self.gpu_release(pids)
        events.emit("gpu_release_checked", pids=pids, **res.as_dict())
        return res

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> int:
        job = self.job
        job.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            lock = acquire(job.log_dir, job.name)
        except LockHeldError as exc:
            # Two supervisors of one job would start two trainers on the same GPUs and
            # checkpoint dir: refuse, and touch nothing (the other one owns the log).
            if self.console is not None:
                self.console.write(f"dsguard: {exc}\n")
            return EXIT_USAGE
        with lock:
            run_id = new_run_id(self.now())
            events = EventLog(
                job.log_dir / EVENTS_FILENAME, run_id=run_id, console=self.console,
                now=self.now, job=job.name,
            )  # fmt: skip
            try:
                return self._run(events, run_id)
            finally:
                events.close()

    def _preflight_refused(
        self,
        events: EventLog,
        sm: StateMachine,
        ledger: Ledger,
        problems: list[PreflightProblem],
        attempt: int,
    ) -> int:
        """A rendered DeepSpeed config DeepSpeed would reject: launch nothing.

        Before any attempt ran this is a bad job (exit 2, like a bad job file); at a later
        rung the run gives up (exit 1) naming the rung's config problem.
        """
        assert self.job.deepspeed is not None
        where = self.job.deepspeed.config_path
        events.emit("preflight_refused", problems=[p.as_dict() for p in problems])
        first = not ledger.history
        reason = "the DeepSpeed config is refused: " + "; ".join(str(p) for p in problems)
        if self.console is not None:
            for p in problems:
                self.console.write(f"{where}: {p}\n")
        events.emit(
            "run_gave_up", reason=reason, attempts=attempt - 1, knobs=ledger.knobs.as_dict()
        )
        sm.transition(RunState.GAVE_UP, reason, ledger=ledger.as_dict())
        return EXIT_USAGE if first else EXIT_GAVE_UP

    def _stopped(self, events: EventLog, sm: StateMachine, attempts: int) -> int:
        signum = self._stop_signal or signal.SIGTERM
        events.emit("run_stopped", signal=signum, attempts=attempts)
        sm.transition(RunState.STOPPED, f"stopped by signal {signum}", current_attempt=None)
        return exit_code_for_signal(signum)

    def _recover(self, events: EventLog) -> Ledger | None:
        """Continue a run a previous dsguard left unfinished (killed, crashed, or stopped).

        The lock guarantees that dsguard is gone. Its attempt may not be: the launcher gets
        SIGTERM from the parent-death signal, but its ranks or a torchrun worker may live on
        and hold GPUs. They are found by session and marker, ended, and their GPU memory is
        awaited before the ladder continues at the recorded rung.
        """
        path = self.job.log_dir / STATE_FILENAME
        if not path.exists():
            return None
        try:
            prev = read_state(path)
            prev_state = RunState(prev["state"])
            ledger = Ledger.from_dict(prev["ledger"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            events.emit("state_discarded", path=path, reason=f"unreadable: {exc}")
            return None
        if prev_state in TERMINAL and prev_state is not RunState.STOPPED:
            return None  # that run is over: a new `dsguard run` starts a new one
        if prev.get("job_knobs") != self.job.knobs.as_dict():
            events.emit(
                "state_discarded", path=path, previous_run_id=prev.get("run_id"),
                reason="the job's knobs changed since that run: starting a new ladder",
            )  # fmt: skip
            return None
        report: EndReport | None = None
        leftover: list[int] = []
        current = prev.get("current_attempt")
        if isinstance(current, dict):
            ref = AttemptRef.from_dict(current)
            leftover = [p.pid for p in attempt_processes(ref)]
            if leftover:
                report = end_attempt(ref, self.job.limits.fatal_grace_s)
        events.emit(
            "run_recovered", previous_run_id=prev.get("run_id"),
            previous_state=prev_state.value, previous_pid=prev.get("pid"),
            attempts_so_far=ledger.attempt, knobs=ledger.knobs.as_dict(),
            positions=ledger.positions, phase=ledger.phase, leftover_pids=leftover,
            killed_pids=[] if report is None else list(report.killed_pids),
            survivor_pids=[] if report is None else list(report.survivor_pids),
        )  # fmt: skip
        if leftover:
            self._await_gpu_release(events, leftover)
        return ledger

    def _status(self, ledger: Ledger, text: str) -> None:
        k = ledger.knobs
        self.notifier.status(
            f"attempt {ledger.attempt}: {text}; micro {k.micro_batch_size} x accum "
            f"{k.gradient_accumulation_steps}, global batch {k.global_batch(self.job.world_size)}"
        )

    def _run(self, events: EventLog, run_id: str) -> int:
        job = self.job
        world = job.world_size
        cfg = PolicyConfig.from_job(job)
        ckpt_root = job.checkpoints.dir if job.checkpoints is not None else None
        recovered = self._recover(events)
        ledger = recovered or Ledger(knobs=job.knobs, ckpt_dir=ckpt_root)
        run_t0 = self.monotonic()
        me = psutil.Process()
        sm = StateMachine(
            job.log_dir / STATE_FILENAME,
            events,
            status={
                "run_id": run_id, "job": job.name, "job_file": job.source,
                "pid": os.getpid(), "pid_create_time": me.create_time(),
                "log_dir": job.log_dir, "checkpoint_dir": ledger.ckpt_dir,
                "job_knobs": job.knobs.as_dict(), "ledger": ledger.as_dict(),
                "attempt": ledger.attempt, "knobs": ledger.knobs.as_dict(),
                "global_batch": ledger.knobs.global_batch(world), "current_attempt": None,
            },
        )  # fmt: skip
        events.emit(
            "run_started", job_file=job.source, launcher=job.launcher, world_size=world,
            knobs=ledger.knobs.as_dict(), global_batch=ledger.knobs.global_batch(world),
            log_dir=job.log_dir, checkpoint_dir=ledger.ckpt_dir, recovered=recovered is not None,
            dsguard_version=__version__, pid=os.getpid(),
        )  # fmt: skip
        base_env = child_env(self.base_env)  # children must not talk to systemd as us
        first_spawn = True

        while True:
            if self._stop_signal is not None:
                return self._stopped(events, sm, ledger.attempt)
            ledger.attempt += 1
            attempt = ledger.attempt
            knobs = ledger.knobs
            events.bind(attempt=attempt)
            self._fatal = None
            self._wake.clear()
            resume: Path | None = None
            start_step: int | None = None
            if ledger.ckpt_dir is not None:
                assert job.checkpoints is not None
                allow = recovered is not None or attempt > 1 or job.checkpoints.resume_at_start
                resume = self._pick_checkpoint(
                    events, ledger.ckpt_dir, allow, knobs.micro_batch_size
                )
                start_step = self._newest_complete_step(ledger.ckpt_dir)

            ds_path: Path | None = None
            ds_rendered: dict[str, Any] | None = None
            if job.deepspeed is not None:
                ds_path = job.log_dir / f"attempt-{attempt}.deepspeed.json"
                rendered = remedy_config(
                    render_deepspeed_config(job.deepspeed.base, knobs, world), ledger.remedies
                )
                # Check it the way DeepSpeed (and HF's fill-in of "auto") will, before a launch
                # that would die on it minutes later or, worse, silently train another batch.
                pre = check_deepspeed_config(
                    rendered, knobs=knobs, world_size=world, hf_trainer=uses_hf_trainer(job)
                )
                write_json_atomic(ds_path, pre.config)
                ds_rendered = pre.config
                if pre.fixes:
                    events.emit(
                        "preflight_fixed", deepspeed_config=ds_path,
                        fixes=[f.as_dict() for f in pre.fixes],
                    )  # fmt: skip
                if pre.problems:
                    return self._preflight_refused(events, sm, ledger, pre.problems, attempt)
            cmd = build_command(
                job, knobs, run_id=run_id, attempt=attempt, base_env=base_env,
                ds_config=ds_path, resume_from=resume, output_dir=ledger.phase_output,
                init_from=ledger.phase_init_from, supervisor_pid=os.getpid(),
                remedies=ledger.remedies,
            )  # fmt: skip
            log_path = job.log_dir / f"attempt-{attempt}.log"
            oom_before = self.oom_probe()
            t0 = self.monotonic()
            try:
                child = spawn_attempt(cmd, run_id=run_id, attempt=attempt)
            except OSError as exc:
                reason = f"cannot start {cmd.argv[0]!r}: {exc.strerror or exc}"
                events.emit("attempt_not_started", argv=cmd.argv, error=str(exc))
                events.emit("run_gave_up", reason=reason, attempts=attempt)
                sm.transition(RunState.GAVE_UP, reason, ledger=ledger.as_dict())
                return EXIT_GAVE_UP
            events.emit(
                "attempt_started", pid=child.pid, argv=cmd.argv, cwd=cmd.cwd,
                knobs=knobs.as_dict(), global_batch=knobs.global_batch(world),
                world_size=world, phase=ledger.phase, resume_from=resume,
                deepspeed_config=ds_path, output_dir=ledger.phase_output,
                init_from=ledger.phase_init_from, log=log_path,
                remedies=[r.name for r in ledger.remedies],
            )  # fmt: skip
            # STARTING/BACKOFF -> RUNNING: the attempt's launcher is alive.
            sm.transition(
                RunState.RUNNING, f"attempt {attempt} started", attempt=attempt,
                pid_child=child.pid, current_attempt=child.ref.as_dict(),
                ledger=ledger.as_dict(), knobs=knobs.as_dict(),
                global_batch=knobs.global_batch(world), phase=ledger.phase,
                resume_from=resume, attempt_log=log_path, checkpoint_dir=ledger.ckpt_dir,
            )  # fmt: skip
            if first_spawn:
                self.notifier.ready()
                first_spawn = False
            self._status(ledger, "running")

            out = self._run_attempt(events, sm, child, log_path, t0)
            sm.update(current_attempt=None)
            if out.report is not None and job.deepspeed is not None:
                self._remove_stale_build_locks(events, cmd.env)
            status = decode_exit(out.exit_code)
            beats = read_heartbeats(job.log_dir / HEARTBEAT_SUBDIR, attempt)
            if beats:
                ledger.caps = capabilities(beats)
            last = max(beats, key=lambda hb: hb.global_step, default=None)
            gpu_peak = max((hb.max_memory_reserved_bytes or 0 for hb in beats), default=0)
            rss_peak = max((hb.host_rss_bytes or 0 for hb in beats), default=0)
            events.emit(
                "attempt_finished", exit_code=out.exit_code, signal=status.signal,
                ended_by=out.ended_by, duration_s=round(out.duration_s, 3),
                output_bytes=out.output_bytes, output_lines=out.classifier.lines_seen,
                last_step=None if last is None else last.global_step,
                last_loss=None if last is None else last.loss,
                gpu_mem_peak_bytes=gpu_peak or None, host_rss_peak_bytes=rss_peak or None,
                capabilities=sorted(ledger.caps),
            )  # fmt: skip
            if out.ended_by == "stop":
                return self._stopped(events, sm, attempt)

            host_oom_evidence = self._host_oom_evidence(oom_before, out, status.killed)
            confirmed = bool(host_oom_evidence)
            failure = classify(
                out.classifier.evidence, status, host_oom_confirmed=confirmed,
                hang=out.ended_by == "hang",
            )  # fmt: skip
            progressed = False
            if ledger.ckpt_dir is not None:
                end_step = self._newest_complete_step(ledger.ckpt_dir)
                progressed = end_step is not None and (start_step is None or end_step > start_step)

            if failure is None:
                ledger.history.append(AttemptRecord(attempt, None, out.duration_s, progressed))
                events.emit(
                    "run_succeeded", attempts=attempt, knobs=knobs.as_dict(),
                    changes=job.knobs.diff(knobs), global_batch=knobs.global_batch(world),
                    initial_global_batch=job.knobs.global_batch(world), phase=ledger.phase,
                    duration_s=round(self.monotonic() - run_t0, 3),
                )  # fmt: skip
                sm.transition(
                    RunState.SUCCEEDED, "the training command exited 0", ledger=ledger.as_dict()
                )
                self._status(ledger, "succeeded")
                return EXIT_SUCCEEDED

            events.emit(
                "failure_detected", kind=failure.kind, rank=failure.rank,
                evidence=list(failure.evidence), exit_code=out.exit_code,
                signal=status.signal, recoverable=is_recoverable(failure.kind),
                host_oom_confirmed=confirmed, host_oom_evidence=host_oom_evidence,
                checkpoint_progress=progressed,
            )  # fmt: skip
            ledger.history.append(AttemptRecord(attempt, failure.kind, out.duration_s, progressed))
            cfg_now = dataclasses.replace(
                cfg,
                ctx=dataclasses.replace(
                    cfg.ctx, exact_zero_transfer=CAP_ZERO_TRANSPLANT in ledger.caps
                ),
            )
            remedy_ctx: RemedyContext | None = None
            if failure.kind in REMEDY_KINDS:
                facts = detect(job.python, env=cmd.env, gpus=job.gpus)
                events.emit("env_facts", **facts.as_dict())
                remedy_ctx = RemedyContext(
                    evidence_lines=(*failure.evidence, *_tail_lines(log_path, 300)),
                    applied=frozenset(r.name for r in ledger.remedies),
                    env_facts=facts,
                    ds_config=ds_rendered,
                )
            decision = decide(
                failure.kind, knobs=knobs, positions=ledger.positions, history=ledger.history,
                cfg=cfg_now, remedy_ctx=remedy_ctx,
            )  # fmt: skip
            if isinstance(decision, GiveUp):
                events.emit(
                    "run_gave_up", reason=decision.reason, kind=failure.kind, attempts=attempt,
                    knobs=knobs.as_dict(), changes=job.knobs.diff(knobs),
                    duration_s=round(self.monotonic() - run_t0, 3),
                )  # fmt: skip
                sm.transition(RunState.GAVE_UP, decision.reason, ledger=ledger.as_dict())
                self._status(ledger, f"gave up: {decision.reason}")
                return EXIT_GAVE_UP

            if decision.quarantine_resumed_checkpoint and resume is not None and ledger.ckpt_dir:
                dest = ckpts.quarantine(resume, ledger.ckpt_dir)
                events.emit(
                    "checkpoint_quarantined", path=resume, moved_to=dest,
                    step=ckpts.checkpoint_step(resume),
                    reasons=["resuming from it failed: " + (failure.evidence or ("?",))[0]],
                )  # fmt: skip
            if decision.remedy is not None:
                r = decision.remedy
                ledger.remedies.append(r)
                events.emit(
                    "remedy_applied", remedy=r.name, kind=r.kind, reason=r.reason,
                    env={k: [cmd.env.get(k), v] for k, v in r.env.items()},
                    config=r.config.as_dict(), flags=dict(r.flags), caveats=list(r.caveats),
                    new_phase=r.new_phase, applied=[x.name for x in ledger.remedies],
                )  # fmt: skip
            before = knobs.global_batch(world)
            ledger.knobs = decision.knobs
            ledger.positions = decision.positions
            extra: dict[str, Any] = {}
            if decision.new_phase and ckpt_root is not None and ledger.ckpt_dir is not None:
                if CAP_INIT_FROM in ledger.caps:
                    done = ckpts.select_checkpoint(ledger.ckpt_dir, world_size=world).chosen
                    if done is not None:
                        ledger.phase_init_from = done.path
                else:
                    ledger.phase_init_from = None
                ledger.phase += 1
                ledger.ckpt_dir = ckpt_root / f"dsguard-phase-{ledger.phase}"
                ledger.phase_output = ledger.ckpt_dir
                extra = {"phase": ledger.phase, "output_dir": ledger.ckpt_dir}
            events.emit(
                "policy_applied", rung=decision.rung, changes=decision.changes,
                new_phase=decision.new_phase, caveats=list(decision.caveats),
                reason=decision.reason, delay_s=decision.delay_s,
                knobs=ledger.knobs.as_dict(), global_batch_before=before,
                global_batch_after=ledger.knobs.global_batch(world), **extra,
            )  # fmt: skip
            if decision.new_phase:
                start = (
                    f"the consolidated weights of {ledger.phase_init_from}"
                    if ledger.phase_init_from is not None
                    else "the initial model (the training code does not announce init_from)"
                )
                events.emit(
                    "phase_started", phase=ledger.phase, output_dir=ledger.phase_output,
                    init_from=ledger.phase_init_from,
                    reason=(
                        "the previous phase's checkpoints cannot be resumed exactly under the "
                        f"new config; this phase starts from {start} with a fresh optimizer "
                        "and LR schedule, in its own output dir (earlier checkpoints are kept)"
                    ),
                )  # fmt: skip
            # RUNNING/ENDING -> BACKOFF: relaunch after the delay with the decided knobs.
            sm.transition(
                RunState.BACKOFF, decision.reason, ledger=ledger.as_dict(),
                knobs=ledger.knobs.as_dict(), delay_s=decision.delay_s,
                global_batch=ledger.knobs.global_batch(world), checkpoint_dir=ledger.ckpt_dir,
            )  # fmt: skip
            self._status(ledger, f"relaunching after {failure.kind}")
            released = self._await_gpu_release(events, list(out.pids))
            if released is not None and released.status == "held":
                # A leftover allocation is a hard "do not relaunch": the next attempt would OOM
                # for the wrong reason and the ladder would shrink a config that fits.
                reason = (
                    f"GPU memory of attempt {attempt} still held after "
                    f"{released.waited_s:.0f} s by pids {[h.pid for h in released.holders]}"
                )
                events.emit(
                    "run_gave_up",
                    reason=reason,
                    attempts=attempt,
                    knobs=ledger.knobs.as_dict(),
                    changes=job.knobs.diff(ledger.knobs),
                )
                sm.transition(RunState.GAVE_UP, reason, ledger=ledger.as_dict())
                return EXIT_GAVE_UP
            if decision.delay_s > 0:
                deadline = self.monotonic() + decision.delay_s
                while self._stop_signal is None and self.monotonic() < deadline:
                    self.notifier.watchdog_if_due()
                    self._sleep(min(0.5, max(0.0, deadline - self.monotonic())))
