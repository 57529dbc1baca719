"""The run loop: the one place where pure decisions meet processes, files and signals.

The run is a state machine (``dsguard.core.states``) and the machine drives the loop: each
non-terminal state has one phase function that returns the next state.

* STARTING / BACKOFF -> start an attempt (checkpoint pick, render + preflight, command, spawn)
* RUNNING -> supervise it until it exits, prints a fatal line, hangs, or dsguard is stopped
* ENDING -> end its process tree (a fatal line, a hang, a stop request)
* after an exit or an end: observe (one :class:`~dsguard.run.observe.Observation`), judge
  (pure: ``classify`` then ``decide``), apply the decision to the ledger (pure)
* SUCCEEDED / GAVE_UP / STOPPED -> one finish path writes the terminal event, with the same
  fields whatever the outcome, and the exit code.

Every OS touch goes through a :class:`~dsguard.run.host.Host`, so the whole loop runs
against :class:`dsguard.testing.FakeHost` in tests. Everything the loop must remember across
attempts lives in a :class:`~dsguard.core.ledger.Ledger` saved in ``state.json`` at every
transition, so a dsguard that was SIGKILLed (or lost power) and is started again ends the
attempt it left behind and continues at the recorded rung.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

from dsguard import __version__
from dsguard.core.classify import (
    Evidence,
    Failure,
    FailureKind,
    StreamClassifier,
    decode_exit,
    diverged_lines,
)
from dsguard.core.divergence import (
    Divergence,
    Rollback,
    decide_divergence,
    nonfinite,
    skip_window,
)
from dsguard.core.evidence import MoveEvidence, parse_oom
from dsguard.core.fit import FitInputs, FitPlan
from dsguard.core.floor import Floor, MemoryFailure, judge_floor
from dsguard.core.ladder import (
    LADDER_FOR,
    REMEDY_KINDS,
    AttemptRecord,
    Decision,
    GiveUp,
    PolicyConfig,
    Relaunch,
    RemedyContext,
    is_recoverable,
)
from dsguard.core.ledger import (
    Ledger,
    apply_relaunch,
    apply_rollback,
    next_attempt,
    number_after,
    record_attempt,
    record_caps,
)
from dsguard.core.preflight import Problem as PreflightProblem
from dsguard.core.render import launcher_problems, render_attempt_config
from dsguard.core.sigkill import (
    KillEvidence,
    KillJudgement,
    judge_sigkill,
    kill_sender_in,
    oom_daemon_kills,
    rank_killed_in,
)
from dsguard.core.states import TERMINAL, RunState
from dsguard.core.throughput import (
    InRunProbe,
    ProbeMove,
    StepMark,
    add_mark,
    probe_memory_failure,
    probe_rate,
    step_rate,
)
from dsguard.errors import LockHeldError
from dsguard.exitcodes import EXIT_GAVE_UP, EXIT_SUCCEEDED, EXIT_USAGE, exit_code_for_signal
from dsguard.host.cgroup import MemoryCgroup
from dsguard.host.gpu import ReleaseResult
from dsguard.job.delivery import (
    render_knobs_file,
    routes,
    tokens_per_step,
    undeliverable_rungs,
)
from dsguard.job.knobs import Knobs
from dsguard.job.model import CheckpointLayout, Job
from dsguard.protocol import (
    CAP_INIT_FROM,
    CAP_SAVE_AND_STOP,
    CAP_SKIP_BATCHES,
    Heartbeat,
    format_skip_batches,
)
from dsguard.run import checkpoints as ckpts
from dsguard.run.events import EventLog
from dsguard.run.fit import FitState, emit_plan, fit_inputs, start_fit_state
from dsguard.run.heartbeat import capabilities
from dsguard.run.host import Attempt, Host, RealHost
from dsguard.run.launch import Command, build_command
from dsguard.run.lock import JobLock, acquire
from dsguard.run.logdir import LogDir, ensure_log_dir
from dsguard.run.memlimit import MemoryLimit
from dsguard.run.observe import EndedBy, Observation, judge, measured_host_peak, verdict
from dsguard.run.proc import AttemptRef, EndReport
from dsguard.run.safefs import write_atomic_refusing_links
from dsguard.run.sdnotify import Notifier, child_env
from dsguard.run.state import StateMachine, read_state, write_json_atomic

__all__ = ["Supervisor", "highest_attempt_used", "new_run_id"]

#: Main-loop tick while an attempt runs. Fatal lines and stop requests wake it at once (an
#: event); only a plain launcher exit waits for the tick (bench P4: 20 wakeups/s cost CPU).
_WAIT_POLL_S = 0.25
#: How often the wait loop looks at heartbeats for hang detection.
_PROGRESS_CHECK_S = 1.0
#: How long an attempt may run (with output) before a process tree without any rank
#: variables is judged to be one process: launchers start their ranks within seconds.
_WORLD_GRACE_S = 20.0
#: How often the attempt's resident memory is sampled (evidence for a later SIGKILL).
_RSS_SAMPLE_S = 2.0
_RSS_SAMPLES_KEPT = 5


#: Every name the log dir gives an attempt: ``attempt-N.log``, ``attempt-N.deepspeed.json``,
#: ``heartbeat/attempt-N-rank-R.json``, ``control/stop-attempt-N.json``.
_ATTEMPT_NAME = re.compile(r"(?:^|-)attempt-(\d+)(?=[.-])")


def highest_attempt_used(logs: LogDir) -> int:
    """The highest attempt number any file in the log dir is named after (0: none).

    state.json alone cannot say it: a discarded or finished state restarts the ladder, and a
    dsguard killed between spawning an attempt and recording it leaves a log state.json does
    not know. Reusing such a number would append a new run's output to an old run's log."""
    highest = 0
    for folder in (logs.root, logs.heartbeat_dir, logs.control_dir):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            m = _ATTEMPT_NAME.search(name)
            if m is not None:
                highest = max(highest, int(m.group(1)))
    return highest


def _host_measure(fit: FitState, obs: Observation) -> tuple[int, str] | None:
    """The attempt's host peak and its measure: the heartbeats' resident peak where resident
    memory is what is limited, else dsguard's own outside measurement that matches the limit
    (``run.observe.measured_host_peak``); None when neither exists."""
    if obs.host_rss_peak_bytes and (fit.rss_comparable or obs.host_peak is None):
        return obs.host_rss_peak_bytes, "host_rss"
    if obs.host_peak is not None:
        return obs.host_peak.bytes, obs.host_peak.measure
    return None


def _emit_evidence(events: EventLog, ev: MoveEvidence, decision: Decision) -> None:
    """What the memory failure's evidence said, and the move it led to."""
    fig = ev.figures
    events.emit(
        "evidence_considered",
        rung=decision.rung if isinstance(decision, Relaunch) else None,
        reason=decision.reason,
        tried_bytes=None if fig is None else fig.tried_bytes,
        total_bytes=None if fig is None else fig.total_bytes,
        free_bytes=None if fig is None else fig.free_bytes,
    )


def _note_store(events: EventLog, fit: FitState) -> None:
    """``store_unavailable`` once, the first time the known-good store failed."""
    if fit.store_problem is not None and not fit.store_problem_noted:
        fit.store_problem_noted = True
        events.emit("store_unavailable", reason=fit.store_problem)


def _label(k: Knobs) -> str:
    return f"micro {k.micro_batch_size} x accum {k.gradient_accumulation_steps}"


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


class _ConsoleGate:
    """dsguard's console (text lines or the child's raw echo) that a lost terminal silences.

    After SIGHUP the terminal is gone: a write may raise EIO or EPIPE, and a full pty that
    nobody reads would block dsguard in ``write()``. Once ``lost`` (a hangup, or the first
    failed write) every write is dropped; no write here ever raises into the loop."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.lost = False

    def write(self, data: Any) -> int:
        if not self.lost:
            try:
                self._stream.write(data)
            except (OSError, ValueError):
                self.lost = True
        return len(data)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.lost = True


@dataclass(frozen=True, slots=True)
class _Next:
    """What a phase returns: the state to move to, why, and the state.json fields to record.

    For a terminal state also the failure kind (None: no failure) and dsguard's exit code."""

    state: RunState
    reason: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    kind: FailureKind | None = None
    exit_code: int = EXIT_GAVE_UP


@dataclass
class _Current:
    """The attempt in flight (from its start until the loop has judged it)."""

    number: int
    knobs_global_batch: int
    cmd: Command | None = None
    handle: Attempt | None = None
    log_path: Path | None = None
    resume: Path | None = None
    #: The layout of the checkpoints judged for this attempt (how the resume is delivered).
    layout: CheckpointLayout = CheckpointLayout.HF
    resume_step: int | None = None
    start_step: int | None = None
    ds_rendered: dict[str, Any] | None = None
    classifier: StreamClassifier = field(default_factory=StreamClassifier)
    t0: float = 0.0
    oom_before: int | None = None
    #: How resources.host_memory_limit is enforced on this attempt (None: no limit).
    memlimit: MemoryLimit | None = None
    t0_wall: float = 0.0
    ended_by: EndedBy = "exit"
    world_checked: bool = False
    report: EndReport | None = None
    rss_samples: list[int] = field(default_factory=list)
    #: The attempt tree's largest VmPeak and summed VmHWM seen so far (sampled with the RSS).
    vm_peak: int | None = None
    vm_hwm: int | None = None
    #: The memory limit the attempt ran under, kept after it was released (``_floor``).
    limit_used: MemoryLimit | None = None
    silent_s: float = 0.0
    log_failure_noted: bool = False
    #: The loss or grad norm turned NaN/inf (seen while running or after the exit).
    divergence: Divergence | None = None
    #: Rank 0's step heartbeats seen so far (the trainer's step timestamps: throughput).
    step_marks: tuple[StepMark, ...] = ()


@dataclass
class _ProbeCost:
    """What the in-run probe's switches cost (``fit_probe_cost``): the seconds from each
    switch decision to the first step heartbeat of the config switched to (ending the
    attempt, the relaunch, start-up, that first step: an upper bound by one step), and the
    steps trained since the checkpoint resumed from, which the new attempt trains again."""

    switches: int = 0
    restart_s: float = 0.0
    steps_redone: int = 0
    redone_s: float = 0.0
    #: Wall time of a switch whose new config has not reported a step yet.
    dead_since: float | None = None
    reported: bool = False


@dataclass
class _Run:
    """One supervised run: its log, state machine, ledger and the attempt in flight."""

    run_id: str
    events: EventLog
    sm: StateMachine
    ledger: Ledger
    cfg: PolicyConfig
    t0: float
    base_env: dict[str, str]
    recovered: bool
    current: _Current | None = None
    #: The number in ``ledger.attempt`` was taken but no process started under it.
    unstarted: bool = False
    first_spawn: bool = True
    delay_s: float = 0.0
    #: Pids of the attempt that just ended, whose GPU memory must be free before relaunching.
    ended_pids: tuple[int, ...] = ()
    #: The failure kind the coming relaunch answers (for the systemd status line).
    last_kind: FailureKind | None = None
    #: The layout ``checkpoints.layout: auto`` last detected (logged when it changes).
    layout_seen: CheckpointLayout | None = None
    #: The ranks the attempts were seen to run differ from the job's world size: the global
    #: batch is reported as unknown from then on.
    world_mismatch: int | None = None
    #: Whether the training runs on the CPU (measured once, at the first host OOM).
    cpu_only: bool | None = None
    #: The estimator of this run (first fit, evidence, calibration; ``run.fit``).
    fit: FitState = field(default_factory=lambda: FitState(None, "not gathered"))
    #: ``fit_probe: in_run`` (issue 15): the probe's state; None when off or recovered.
    probe: InRunProbe | None = None
    #: The move the running attempt is being ended for, and the wall time it was decided.
    probe_move: ProbeMove | None = None
    probe_move_wall: float = 0.0
    probe_cost: _ProbeCost = field(default_factory=_ProbeCost)
    #: This run's consecutive host-memory failures, for the floor judgement (``core.floor``).
    memory_failures: list[MemoryFailure] = field(default_factory=list)


@dataclass
class Supervisor:
    """Supervises one job until it succeeds, gives up or is stopped.

    Args:
        job: the validated job.
        console: human-readable event lines (None: silent).
        echo: where the child's raw output is mirrored (None: only the attempt log).
        host: every OS touch (processes, memory, GPUs, checkpoints, clocks); default: the
            real machine. ``dsguard.testing.FakeHost`` plays scripted attempts instead.
        now: the wall clock events are stamped with.
        base_env: the environment children start from.
        notifier: sd_notify client (READY/STATUS/WATCHDOG/STOPPING); no-op outside systemd.
    """

    job: Job
    console: TextIO | None = None
    echo: BinaryIO | None = None
    host: Host = field(default_factory=RealHost)
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    notifier: Notifier = field(default_factory=Notifier)
    #: Called with every event written (see ``EventLog.listeners``): notifications, metrics.
    listeners: tuple[Callable[[dict[str, Any], EventLog], None], ...] = ()
    #: Gathers the estimator's facts (model shape, memory available) for first fit and
    #: evidence-driven moves; tests give plain facts instead of a model and a GPU.
    fit_facts: Callable[[Job], FitInputs | str] = field(default=fit_inputs)

    _wake: threading.Event = field(default_factory=threading.Event, init=False)
    _stop_signal: int | None = field(default=None, init=False)
    _stop_requests: int = field(default=0, init=False)
    _fatal: Evidence | None = field(default=None, init=False)
    _gates: list[_ConsoleGate] = field(default_factory=list, init=False)
    _lock: JobLock | None = field(default=None, init=False)
    #: Every event log opened by this run (one more each time the log dir is recreated).
    _logs_opened: list[EventLog] = field(default_factory=list, init=False)
    #: The hangup signal not yet recorded as ``console_lost`` (set from a signal handler).
    _hangup: int | None = field(default=None, init=False)

    # -- control ---------------------------------------------------------------------------

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the loop to end the current attempt and stop (safe from a signal handler).

        A second request skips waiting for the trainer's save (the user insists)."""
        if self._stop_signal is None:
            self._stop_signal = signum
        self._stop_requests += 1
        self._wake.set()

    def console_lost(self, signum: int = signal.SIGHUP) -> None:
        """The terminal is gone (SIGHUP): keep supervising, stop writing to the console.

        Safe from a signal handler: it only flips flags; the loop writes ``console_lost`` at
        its next step (an event written from inside a handler could interleave a line)."""
        for gate in self._gates:
            gate.lost = True
        self._hangup = signum
        self._wake.set()

    def _note_console_lost(self, events: EventLog) -> None:
        signum, self._hangup = self._hangup, None
        if signum is not None:
            events.emit(
                "console_lost", signal=signum,
                reason="the terminal hung up: supervising on, console output dropped",
            )  # fmt: skip

    def _gate(self, stream: Any) -> Any:
        if stream is None:
            return None
        gate = _ConsoleGate(stream)
        gate.lost = self._hangup is not None
        self._gates.append(gate)
        return gate

    def _say(self, text: str) -> None:
        if self.console is not None:
            self._gate(self.console).write(text)

    def _on_fatal(self, ev: Evidence) -> None:
        if self._fatal is None:
            self._fatal = ev
        self._wake.set()

    def _sleep(self, seconds: float) -> None:
        self.host.sleep(seconds, self._wake)

    @property
    def _logs(self) -> LogDir:
        return LogDir(self.job.log_dir)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> int:
        job = self.job
        ensure_log_dir(job.log_dir, subdirs=False)  # 0700; refuses a symlink or a stranger's
        try:
            lock = acquire(job.log_dir, job.name)
        except LockHeldError as exc:
            # Two supervisors of one job would start two trainers on the same GPUs and
            # checkpoint dir: refuse, and touch nothing (the other one owns the log).
            self._say(f"dsguard: {exc}\n")
            return EXIT_USAGE
        with lock:
            self._lock = lock
            ensure_log_dir(job.log_dir)  # and its heartbeat/ and control/, 0700
            run_id = new_run_id(self.now())
            try:
                return self._drive(self._begin(self._open_events(run_id), run_id))
            finally:
                for log in self._logs_opened:
                    log.close()

    def _open_events(self, run_id: str) -> EventLog:
        events = EventLog(
            self._logs.events, run_id=run_id, console=cast(TextIO, self._gate(self.console)),
            now=self.now, job=self.job.name,
        )  # fmt: skip
        self._logs_opened.append(events)
        events.listeners.extend(self.listeners)
        return events

    def _check_log_dir(self, run: _Run) -> None:
        """Put the log dir back if it was deleted under us, and say so in it.

        The job lock does not live there (``run/lock``), so a second supervisor still cannot
        start; but the event log's descriptor now writes into a deleted file, so it is
        reopened on the recreated path. state.json is rewritten at the next transition."""
        lock = self._lock
        recreated = lock is not None and lock.ensure_log_dir()
        if not recreated and run.events.path.exists():
            return
        events = self._open_events(run.run_id)
        events.bind(attempt=None if run.current is None else run.current.number)
        run.events = run.sm.events = events
        events.emit(
            "log_dir_recreated", path=self.job.log_dir,
            reason="the log dir or its event log was deleted while dsguard ran",
        )  # fmt: skip
        run.sm.update()

    def _begin(self, events: EventLog, run_id: str) -> _Run:
        """Recover or start the ledger, open state.json, log ``run_started``."""
        job = self.job
        world = job.world_size
        ckpt_root = job.checkpoints.dir if job.checkpoints is not None else None
        recovered = self._recover(events)
        ledger = recovered or Ledger(knobs=job.knobs, ckpt_dir=ckpt_root)
        ledger = number_after(ledger, highest_attempt_used(self._logs))
        fit = start_fit_state(job, self.fit_facts)
        fit_plan = None
        if job.fit and recovered is None and ledger.attempts_made == 0:
            fit_plan = self._plan_first_fit(fit, ledger)
            if fit_plan.chosen is not None:
                ledger = dataclasses.replace(ledger, knobs=fit_plan.chosen.knobs)
        pid, created = self.host.identity()
        sm = StateMachine(
            self._logs.state,
            events,
            status={
                "run_id": run_id, "job": job.name, "job_file": job.source,
                "pid": pid, "pid_create_time": created,
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
            dsguard_version=__version__, pid=pid, first_attempt=ledger.attempt + 1,
        )  # fmt: skip
        left_out = {r: list(k) for r, k in undeliverable_rungs(job).items()}
        if job.delivery.declared or left_out or job.data.packing or job.limits.fixed:
            # Only when there is something to say: an HF job whose knobs all go by flag
            # gets no extra line.
            events.emit(
                "knobs_routed", routes=routes(job), left_out=left_out,
                fixed=list(job.limits.fixed), packing=job.data.packing,
                packing_source=job.data.source,
            )  # fmt: skip
        if fit_plan is not None:
            emit_plan(events, fit_plan, job.knobs, fit.probe)
        _note_store(events, fit)
        return _Run(
            run_id=run_id, events=events, sm=sm, ledger=ledger, cfg=PolicyConfig.from_job(job),
            t0=self.host.monotonic(), recovered=recovered is not None,
            # Children must not talk to systemd as us (NOTIFY_SOCKET, WATCHDOG_*).
            base_env=child_env(self.base_env), fit=fit,
            probe=None if job.in_run_probe_steps is None or recovered is not None
            else InRunProbe(ledger.knobs, steps=job.in_run_probe_steps),
        )  # fmt: skip

    def _plan_first_fit(self, fit: FitState, ledger: Ledger) -> FitPlan:
        """The first-fit plan from the job's knobs. Fresh (any move is free at the start)
        unless a complete checkpoint will be resumed: then only moves that resume it."""
        ckpt = ledger.ckpt_dir
        fresh = ckpt is None or self._newest_complete_step(ckpt) is None
        ctx = PolicyConfig.from_job(self.job).ctx
        if fresh:
            ctx = dataclasses.replace(ctx, can_start_phase=True, exact_zero_transfer=True)
        return fit.plan(ledger.knobs, ctx, fresh=fresh)

    def _drive(self, run: _Run) -> int:
        """Run the state machine: each state's phase returns the next state."""
        phases: dict[RunState, Callable[[_Run], _Next]] = {
            RunState.STARTING: self._on_starting,
            RunState.RUNNING: self._on_running,
            RunState.ENDING: self._on_ending,
            RunState.BACKOFF: self._on_backoff,
        }
        while True:
            self._check_log_dir(run)
            self._note_console_lost(run.events)
            nxt = phases[run.sm.state](run)
            if nxt.state in TERMINAL:
                return self._finish(run, nxt)
            run.sm.transition(nxt.state, nxt.reason, **nxt.fields)

    # -- STARTING / BACKOFF: start an attempt ----------------------------------------------

    def _on_starting(self, run: _Run) -> _Next:
        return self._start_attempt(run)

    def _on_backoff(self, run: _Run) -> _Next:
        """Wait for the last attempt's GPU memory and the backoff delay, then relaunch."""
        cur = run.current
        self._status(run.ledger, f"relaunching after {run.last_kind or 'a fit_probe switch'}")
        if self._stop_signal is not None:
            return self._stopped()
        released = self._await_gpu_release(run.events, list(run.ended_pids))
        if self._stop_signal is not None:
            # The wait is bounded but long (up to a minute): a stop that arrived during it
            # must not be followed by a launch.
            return self._stopped()
        if released.status == "held":
            # A leftover allocation is a hard "do not relaunch": the next attempt would OOM
            # for the wrong reason and the ladder would shrink a config that fits.
            number = run.ledger.attempt if cur is None else cur.number
            return _Next(
                RunState.GAVE_UP,
                f"GPU memory of attempt {number} still held after {released.waited_s:.0f} s "
                f"by pids {[h.pid for h in released.holders]}",
            )
        if run.delay_s > 0:
            deadline = self.host.monotonic() + run.delay_s
            while self._stop_signal is None and self.host.monotonic() < deadline:
                self.notifier.watchdog_if_due()
                self._sleep(min(0.5, max(0.0, deadline - self.host.monotonic())))
        return self._start_attempt(run)

    def _start_attempt(self, run: _Run) -> _Next:
        if self._stop_signal is not None:
            return self._stopped()
        job = self.job
        world = job.world_size
        run.ledger = next_attempt(run.ledger)
        run.unstarted = True
        ledger = run.ledger
        n = ledger.attempt
        knobs = ledger.knobs
        cur = run.current = _Current(number=n, knobs_global_batch=knobs.global_batch(world))
        run.events.bind(attempt=n)
        self._fatal = None
        self._wake.clear()
        # Stop requests are honoured between any two steps of a start: picking a checkpoint
        # can take minutes (thousands of bad ones set aside), and a launch after a stop
        # request would start a trainer the user just asked to end.
        self._resume_point(run, cur)
        if self._stop_signal is not None:
            return self._stopped()
        ds_path, problems = self._render_config(run, cur)
        if problems:
            return self._preflight_refused(run, problems)
        knobs_path = self._render_knobs_file(run, cur)
        if self._stop_signal is not None:
            return self._stopped()
        cgroup = self._apply_memory_limit(run, cur)
        cmd = cur.cmd = build_command(
            job, knobs, run_id=run.run_id, attempt=n, base_env=run.base_env,
            ds_config=ds_path, resume_from=cur.resume, output_dir=ledger.phase_output,
            init_from=ledger.phase_init_from, supervisor_pid=os.getpid(),
            remedies=ledger.remedies, knobs_file=knobs_path, layout=cur.layout,
            master_port=self.host.free_port(), cpu_only=self.host.cpu_only(),
            memory_cgroup=None if cgroup is None else cgroup.dir,
            skip_batches=format_skip_batches(ledger.skip_batches),
        )  # fmt: skip
        log_path = cur.log_path = self._logs.attempt_log(n)
        cur.oom_before = self.host.oom_kill_count(cgroup)
        cur.t0 = self.host.monotonic()
        cur.t0_wall = self.host.wall()
        if self._stop_signal is not None:
            return self._stopped()
        try:
            handle = cur.handle = self.host.spawn(
                cmd, run_id=run.run_id, attempt=n, log_path=log_path,
                classifier=cur.classifier, on_fatal=self._on_fatal,
                echo=cast(BinaryIO | None, self._gate(self.echo)),
            )  # fmt: skip
        except OSError as exc:
            self._release_memory_limit(cur)
            run.events.emit("attempt_not_started", argv=cmd.argv, error=str(exc))
            return _Next(RunState.GAVE_UP, f"cannot start {cmd.argv[0]!r}: {exc.strerror or exc}")
        run.unstarted = False
        run.events.emit(
            "attempt_started", pid=handle.pid, argv=cmd.argv, cwd=cmd.cwd,
            knobs=knobs.as_dict(), global_batch=self._global_batch(run, knobs),
            world_size=world, phase=ledger.phase, resume_from=cur.resume,
            deepspeed_config=ds_path, output_dir=ledger.phase_output,
            init_from=ledger.phase_init_from, log=log_path,
            remedies=[r.name for r in ledger.remedies],
        )  # fmt: skip
        # STARTING/BACKOFF -> RUNNING: the attempt's launcher is alive.
        return _Next(
            RunState.RUNNING, f"attempt {n} started",
            {
                "attempt": n, "pid_child": handle.pid, "current_attempt": handle.ref.as_dict(),
                "ledger": ledger.as_dict(), "knobs": knobs.as_dict(),
                "global_batch": knobs.global_batch(world), "phase": ledger.phase,
                "resume_from": cur.resume, "attempt_log": log_path,
                "checkpoint_dir": ledger.ckpt_dir,
            },
        )  # fmt: skip

    def _apply_memory_limit(self, run: _Run, cur: _Current) -> MemoryCgroup | None:
        """Give the attempt its own memory cgroup with ``resources.host_memory_limit`` (or
        say why RLIMIT_AS is used instead); the cgroup whose counter confirms an OOM kill."""
        limit_bytes = self.job.resources.host_memory_limit_bytes
        if limit_bytes is None:
            return None
        if self._stop_signal is not None:
            return None  # no launch follows; nothing to create
        if self.job.resources.host_memory_via == "rlimit_as":
            reason = "resources.host_memory_via is rlimit_as"
            ml = cur.memlimit = MemoryLimit("rlimit_as", limit_bytes, None, reason)
        else:
            ml = cur.memlimit = self.host.create_memory_limit(run.run_id, cur.number, limit_bytes)
        run.events.emit(
            "memory_limit_applied", how=ml.how, limit_bytes=ml.limit_bytes,
            cgroup=None if ml.cgroup is None else ml.cgroup.dir, reason=ml.reason,
        )  # fmt: skip
        return ml.cgroup

    def _release_memory_limit(self, cur: _Current) -> None:
        cur.limit_used = cur.memlimit or cur.limit_used
        if cur.memlimit is not None and cur.memlimit.cgroup is not None:
            self.host.remove_memory_limit(cur.memlimit)
        cur.memlimit = None

    def _resume_point(self, run: _Run, cur: _Current) -> None:
        """The checkpoint the attempt resumes from, and the newest complete step now (to
        tell afterwards whether the attempt made progress)."""
        ckpt_dir = run.ledger.ckpt_dir
        if ckpt_dir is None:
            return
        assert self.job.checkpoints is not None
        allow = run.recovered or cur.number > 1 or self.job.checkpoints.resume_at_start
        cur.resume = self._pick_checkpoint(run, cur, ckpt_dir, allow)
        cur.start_step = self._newest_complete_step(ckpt_dir)

    def _render_config(
        self, run: _Run, cur: _Current
    ) -> tuple[Path | None, list[PreflightProblem]]:
        """Render the attempt's DeepSpeed config, check it, write it: (path, problems).

        Checked the way DeepSpeed (and HF's fill-in of "auto") will, before a launch that
        would die on it minutes later or, worse, silently train another batch."""
        job = self.job
        if job.deepspeed is None:
            return None, []
        ds_path = self._logs.deepspeed_config(cur.number)
        pre = render_attempt_config(
            job, run.ledger.knobs, remedies=run.ledger.remedies, world_size=job.world_size
        )
        write_json_atomic(ds_path, pre.config)
        cur.ds_rendered = pre.config
        if pre.fixes:
            run.events.emit(
                "preflight_fixed", deepspeed_config=ds_path,
                fixes=[f.as_dict() for f in pre.fixes],
            )  # fmt: skip
        return ds_path, [*launcher_problems(job), *pre.problems]

    def _render_knobs_file(self, run: _Run, cur: _Current) -> Path | None:
        """Write this attempt's copy of the script's own config file (``knobs_file:``) with
        the attempt's knobs at their keys. The user's file is never written; the copy goes
        through safefs (0600, atomic) and a symlink planted at its name is refused, never
        written through."""
        kf = self.job.delivery.file
        if kf is None:
            return None
        path = self._logs.knobs_file(cur.number, kf.path.name)
        write_atomic_refusing_links(path, render_knobs_file(kf, run.ledger.knobs))
        return path

    def _preflight_refused(self, run: _Run, problems: list[PreflightProblem]) -> _Next:
        """A rendered DeepSpeed config DeepSpeed would reject: launch nothing.

        Before any attempt ran this is a bad job (exit 2, like a bad job file); at a later
        rung the run gives up (exit 1) naming the rung's config problem.
        """
        assert self.job.deepspeed is not None
        where = self.job.deepspeed.config_path
        run.events.emit("preflight_refused", problems=[p.as_dict() for p in problems])
        for p in problems:
            self._say(f"{where}: {p}\n")
        reason = "the DeepSpeed config is refused: " + "; ".join(str(p) for p in problems)
        first = not run.ledger.history
        return _Next(RunState.GAVE_UP, reason, exit_code=EXIT_USAGE if first else EXIT_GAVE_UP)

    # -- checkpoints -----------------------------------------------------------------------

    def _select(self, ckpt_dir: Path) -> ckpts.Selection:
        spec = self.job.checkpoints
        layout = spec.layout if spec is not None else CheckpointLayout.HF
        return self.host.select_checkpoint(ckpt_dir, self.job.world_size, layout)

    def _newest_complete_step(self, ckpt_dir: Path) -> int | None:
        chosen = self._select(ckpt_dir).chosen
        return None if chosen is None else chosen.step

    def _quarantine(
        self, events: EventLog, path: Path, ckpt_dir: Path, step: int | None, reasons: list[str]
    ) -> None:
        """Move an unresumable checkpoint aside; a move that fails (a read-only or busy
        filesystem) leaves it in place and is said, never a crash: it is skipped for this
        resume either way, and nothing is deleted."""
        try:
            dest = self.host.quarantine(path, ckpt_dir)
        except OSError as exc:
            events.emit(
                "checkpoint_quarantine_failed", path=path, step=step, reasons=reasons,
                error=str(exc),
            )  # fmt: skip
            return
        events.emit("checkpoint_quarantined", path=path, moved_to=dest, step=step, reasons=reasons)

    def _pick_checkpoint(
        self, run: _Run, cur: _Current, ckpt_dir: Path, allow: bool
    ) -> Path | None:
        spec = self.job.checkpoints
        events = run.events
        if spec is None:
            return None
        if not allow:
            events.emit(
                "checkpoint_selected", path=None, step=None,
                reason="checkpoints.resume_at_start is false: first attempt starts fresh",
            )  # fmt: skip
            return None
        sel = self._select(ckpt_dir)
        layout = cur.layout = CheckpointLayout(sel.layout)
        self._note_layout(run, ckpt_dir, sel)
        for bad in sel.rejected:
            if self._stop_signal is not None:
                # Between two moves: the rest stay where they are (set aside next run).
                return None
            self._quarantine(events, bad.path, ckpt_dir, bad.step, list(bad.reasons))
        if layout is CheckpointLayout.DEEPSPEED:
            self._point_latest(events, ckpt_dir, None if sel.chosen is None else sel.chosen.path)
        if sel.chosen is None:
            events.emit(
                "checkpoint_selected", path=None, step=None, dir=ckpt_dir,
                reason="no complete checkpoint: starting fresh",
            )  # fmt: skip
            return None
        cur.resume_step = sel.chosen.step
        events.emit(
            "checkpoint_selected", path=sel.chosen.path, step=sel.chosen.step,
            size_bytes=sel.chosen.size_bytes, warnings=list(sel.chosen.warnings),
        )  # fmt: skip
        if layout is not CheckpointLayout.HF:
            return sel.chosen.path
        patch = self.host.patch_checkpoint(sel.chosen.path, run.ledger.knobs.micro_batch_size)
        if patch is not None:
            events.emit(
                "checkpoint_patched", path=patch.path, key=patch.key, old=patch.old,
                new=patch.new, backup=patch.backup,
                reason="transformers <= 5.1 would restore the old micro-batch on resume and "
                "ignore the new one",
            )  # fmt: skip
        return sel.chosen.path

    def _note_layout(self, run: _Run, ckpt_dir: Path, sel: ckpts.Selection) -> None:
        """Log what ``layout: auto`` found, once per change (not on every attempt)."""
        spec = self.job.checkpoints
        layout = CheckpointLayout(sel.layout)
        if spec is None or spec.layout is not CheckpointLayout.AUTO or run.layout_seen is layout:
            return
        if sel.chosen is None and not sel.rejected:
            return  # nothing saved yet: nothing was detected
        run.layout_seen = layout
        run.events.emit("checkpoint_layout_detected", layout=layout.value, dir=ckpt_dir,
                        evidence=sel.evidence)  # fmt: skip

    def _point_latest(self, events: EventLog, ckpt_dir: Path, chosen: Path | None) -> None:
        """Make the script's own ``load_checkpoint`` land on the chosen tag: it follows
        ``latest``, which may still name a tag just set aside or one never finished."""
        tag = None if chosen is None else chosen.name
        try:
            change = self.host.point_latest(ckpt_dir, tag)
        except OSError as exc:
            events.emit("deepspeed_latest_failed", path=ckpt_dir / "latest", tag=tag,
                        error=str(exc))  # fmt: skip
            return
        if change is not None:
            events.emit(
                "deepspeed_latest_repointed", path=change.path, tag=change.tag,
                previous_tag=change.previous, moved_to=change.moved_to,
            )  # fmt: skip

    # -- RUNNING: supervise the attempt ----------------------------------------------------

    def _on_running(self, run: _Run) -> _Next:
        cur = run.current
        assert cur is not None and cur.handle is not None
        if run.first_spawn:
            self.notifier.ready()
            run.first_spawn = False
        self._status(run.ledger, "running")
        cur.ended_by = self._supervise(run, cur, cur.handle)
        if cur.ended_by == "exit":
            return self._conclude(run)
        # RUNNING -> ENDING: dsguard itself ends the attempt.
        if cur.ended_by == "fatal":
            assert self._fatal is not None
            reason = f"fatal output: {self._fatal.kind}"
        elif cur.ended_by == "hang":
            reason = f"no progress for {cur.silent_s:.0f} s"
        elif cur.ended_by == "diverged":
            assert cur.divergence is not None
            reason = f"training diverged: {cur.divergence.what} turned NaN/inf"
        elif cur.ended_by == "probe":
            assert run.probe_move is not None
            reason = f"fit_probe ({run.probe_move.why}): moving to {_label(run.probe_move.to)}"
        else:
            reason = f"stop requested by signal {self._stop_signal}"
        return _Next(RunState.ENDING, reason)

    def _supervise(self, run: _Run, cur: _Current, handle: Attempt) -> EndedBy:
        """Wait until the attempt exits, prints a fatal line, hangs, or dsguard must stop."""
        last_check = last_rss = self.host.monotonic()
        while True:
            if self._fatal is not None:
                # The race: a fatal line was read, but the launcher had already exited 0
                # before dsguard sent any signal (a trainer that caught the error and
                # finished, e.g. HF's auto_find_batch_size). Nothing of ours touched it, so
                # its exit stands: judged as a plain exit, it succeeded.
                return "exit" if handle.poll() == 0 else "fatal"
            if self._stop_signal is not None:
                return "stop"
            if handle.poll() is not None:
                return "exit"
            self._note_console_lost(run.events)
            self._note_log_failure(run.events, cur, handle)
            self.notifier.watchdog_if_due()
            now = self.host.monotonic()
            if now - last_check >= _PROGRESS_CHECK_S:
                last_check = now
                self._check_log_dir(run)
                self._check_world(run, cur, handle)
                # One read of the heartbeat files per check, for both of its readers.
                beats = self.host.heartbeats(self._logs.heartbeat_dir, cur.number)
                cur.divergence = self._divergence_now(cur, beats)
                if cur.divergence is not None:
                    return "diverged"
                self._mark_steps(cur, beats)
                if self._is_hung(run.events, cur, handle):
                    return "hang"
                if self._probe_switch_due(run, cur):
                    return "probe"
            if now - last_rss >= _RSS_SAMPLE_S:
                last_rss = now
                rss = self.host.tree_rss_bytes(handle.pid)
                if rss is not None:
                    cur.rss_samples = [*cur.rss_samples[-(_RSS_SAMPLES_KEPT - 1) :], rss]
                self._sample_peaks(cur, handle)
            self._sleep(_WAIT_POLL_S)

    def _sample_peaks(self, cur: _Current, handle: Attempt) -> None:
        """Keep the attempt tree's peaks (VmPeak, VmHWM only grow while a process lives, so
        the newest sample of a process is its peak so far): the host measure of scripts that
        send no heartbeats. Only the tree dsguard started (its launcher's descendants)."""
        peaks = self.host.tree_peaks(handle.pid)
        if peaks is not None:
            cur.vm_peak = max(cur.vm_peak or 0, peaks[0])
            cur.vm_hwm = max(cur.vm_hwm or 0, peaks[1])

    def _check_world(self, run: _Run, cur: _Current, handle: Attempt) -> None:
        """Compare the ranks the attempt really runs with the job's world size, once.

        Every torch.distributed launcher gives each rank RANK and WORLD_SIZE; a process tree
        where none has them after a grace is one process without a rendezvous (accelerate's
        simple_launcher, a plain ``python``). On a mismatch the global batch dsguard would
        report is not the one trained, so it is reported as unknown from then on."""
        if cur.world_checked:
            return
        expected = self.job.world_size
        seen = self.host.observed_world_size(handle.ref)
        if seen is None:
            if self.host.monotonic() - cur.t0 < _WORLD_GRACE_S or handle.output_bytes == 0:
                return
            seen = (
                1,
                f"no process of the attempt has RANK/WORLD_SIZE after {_WORLD_GRACE_S:.0f} s",
            )
        cur.world_checked = True
        observed, source = seen
        if observed == expected:
            return
        run.world_mismatch = observed
        run.events.emit(
            "world_size_mismatch", expected_world_size=expected, observed_world_size=observed,
            source=source, global_batch=None,
            reason=f"the job computes global batch "
            f"{run.ledger.knobs.global_batch(expected)} for {expected} rank(s), but "
            f"{observed} run: the trained global batch is not the one dsguard would report; "
            "check the launcher (launcher: and world_size: / gpus:)",
        )  # fmt: skip

    def _global_batch(self, run: _Run, knobs: Knobs) -> int | None:
        """The global batch to report: None once the ranks seen disagree with the job."""
        return None if run.world_mismatch is not None else knobs.global_batch(self.job.world_size)

    @staticmethod
    def _note_log_failure(events: EventLog, cur: _Current, handle: Attempt) -> None:
        """Say once per attempt that its log could not be written (a full disk): the output
        is still read and classified, so training goes on, but the user must know the log
        has gaps before relying on it."""
        if handle.log_failure is not None and not cur.log_failure_noted:
            cur.log_failure_noted = True
            events.emit(handle.log_failure)

    def _is_hung(self, events: EventLog, cur: _Current, handle: Attempt) -> bool:
        """No output and no heartbeat for hang_timeout_s, and the GPUs are not busy."""
        logs = self._logs
        output_age = self.host.monotonic() - handle.last_output_at
        newest = self.host.newest_heartbeat_s(logs.heartbeat_dir, logs.heartbeat_prefix(cur.number))
        hb_age = None if newest is None else max(0.0, self.host.wall() - newest)
        silent = output_age if hb_age is None else min(output_age, hb_age)
        if silent <= self.job.limits.hang_timeout_s:
            return False
        busy = self.host.gpu_busy(self.host.processes(handle.ref))
        if busy:
            # Silent but computing (a long eval that prints nothing): not a hang. Logged once
            # per silent stretch so the user sees why dsguard waited.
            if cur.silent_s == 0.0:
                events.emit("hang_suspected", silent_s=round(silent, 1), gpu_busy=True)
            cur.silent_s = silent
            return False
        cur.silent_s = silent
        return True

    # -- ENDING: end the attempt -----------------------------------------------------------

    def _on_ending(self, run: _Run) -> _Next:
        cur = run.current
        assert cur is not None and cur.handle is not None
        limits = self.job.limits
        grace_s = limits.fatal_grace_s
        if cur.ended_by == "fatal":
            fatal = self._fatal
            assert fatal is not None
            # One rank hit a fatal error; the others would hang in NCCL.
            run.events.emit(
                "fatal_output_detected", kind=fatal.kind, rank=fatal.rank,
                line_no=fatal.line_no, line=fatal.text,
            )  # fmt: skip
        elif cur.ended_by == "hang":
            # No output, no heartbeat, GPUs idle or unknown.
            run.events.emit(
                "hang_detected", silent_s=round(cur.silent_s, 1),
                hang_timeout_s=limits.hang_timeout_s,
            )  # fmt: skip
        elif cur.ended_by == "diverged":
            pass  # it would train on NaN weights for hours: end it like a fatal line
        elif cur.ended_by == "probe":
            # Not a failure: a trainer that can save on request saves the step it reached,
            # so the next config resumes there and nothing is trained twice.
            self._ask_to_save_and_stop(run.events, cur.handle, "fit_probe: switching config")
        else:
            self.notifier.stopping()
            self._ask_to_save_and_stop(run.events, cur.handle)
            # Ending takes the grace, up to 10 s of SIGKILL reaping and the output drain.
            self.notifier.extend_timeout(int((limits.stop_grace_s + 30) * 1e6))
            grace_s = limits.stop_grace_s
        cur.report = self.host.end(cur.handle.ref, grace_s, cur.handle)
        return self._conclude(run)

    def _ask_to_save_and_stop(
        self, events: EventLog, handle: Attempt, reason: str = "dsguard is stopping"
    ) -> None:
        """Ask a trainer that announced save_and_stop to checkpoint and exit, and wait."""
        attempt = handle.ref.attempt
        beats = self.host.heartbeats(self._logs.heartbeat_dir, attempt)
        if CAP_SAVE_AND_STOP not in capabilities(beats) or self._stop_requests > 1:
            return
        timeout_s = self.job.limits.stop_save_timeout_s
        path = self._logs.stop_request(attempt)
        self.host.write_stop_request(path, {"attempt": attempt, "reason": reason})
        events.emit("stop_requested", path=path, timeout_s=timeout_s)
        t0 = self.host.monotonic()
        next_extend = t0
        while handle.poll() is None and self._stop_requests <= 1:
            now = self.host.monotonic()
            if now - t0 > timeout_s:
                break
            if now >= next_extend:
                # Tell systemd the stop takes longer than TimeoutStopSec expected.
                self.notifier.extend_timeout(int(30e6))
                next_extend = now + 10.0
            self.notifier.watchdog_if_due()
            self._sleep(0.2)
        events.emit(
            "stop_save_finished", exited=handle.poll() is not None, exit_code=handle.poll(),
            waited_s=round(self.host.monotonic() - t0, 3),
        )  # fmt: skip

    # -- observe, judge, apply -------------------------------------------------------------

    def _conclude(self, run: _Run) -> _Next:
        """After the attempt exited or was ended: observe it, judge it, apply the decision."""
        cur = run.current
        assert cur is not None
        obs = self._observe(run, cur)
        run.ledger = record_caps(run.ledger, obs.caps)
        self._emit_finished(run, obs)
        if obs.ended_by == "stop":
            return self._stopped()
        if obs.ended_by == "probe":
            return self._conclude_probe(run, cur, obs, None)
        # A diverged attempt may have exited 0 on its own: it never succeeded.
        div = cur.divergence or self._divergence_now(
            cur, self.host.heartbeats(self._logs.heartbeat_dir, cur.number)
        )
        if div is not None:
            return self._conclude_diverged(run, cur, obs, div)
        failure = verdict(obs)
        if failure is not None and failure.kind in LADDER_FOR and run.probe is not None:
            run.probe, move = probe_memory_failure(run.probe, run.ledger.knobs)
            if move is not None:
                run.probe_move = move
                return self._conclude_probe(run, cur, obs, failure)
        run.ledger = record_attempt(
            run.ledger,
            AttemptRecord(
                obs.attempt, None if failure is None else failure.kind, obs.duration_s,
                obs.progressed,
            ),
        )  # fmt: skip
        self._calibrate(run, obs, failure)
        self._remember(run, cur, obs, failure)
        if failure is None:
            return _Next(
                RunState.SUCCEEDED, "the training command exited 0", exit_code=EXIT_SUCCEEDED
            )
        self._emit_failure(run, obs, failure)
        if failure.kind is FailureKind.HOST_OOM:
            self._note_cpu_only(run, cur)
        floor = self._floor(run, cur, obs, failure)
        if floor is not None:
            return _Next(RunState.GAVE_UP, floor.reason, kind=failure.kind)
        evidence = None
        if failure.kind in LADDER_FOR:
            evidence = run.fit.evidence(failure.evidence, run.ledger.knobs, cur.ds_rendered)
        decision = judge(
            failure, run.ledger, run.cfg, self._remedy_context(run, cur, failure), evidence
        )
        if evidence is not None:
            _emit_evidence(run.events, evidence, decision)
        if isinstance(decision, GiveUp):
            return _Next(RunState.GAVE_UP, decision.reason, kind=failure.kind)
        run.ended_pids = obs.pids
        run.last_kind = failure.kind
        return self._apply(run, cur, failure, decision)

    def _floor(self, run: _Run, cur: _Current, obs: Observation, failure: Failure) -> Floor | None:
        """Whether the host-memory floor before the first step is above the limit, so no move
        can help (``core.floor``); logged as ``memory_floor_detected``. The measure at
        failure: the attempt tree's largest VmPeak under RLIMIT_AS (what it limits), else its
        resident memory in the samples before it died."""
        if failure.kind is not FailureKind.HOST_OOM:
            run.memory_failures.clear()
            return None
        ml = cur.limit_used
        if ml is not None and ml.how == "rlimit_as":
            measured, measure = (None if obs.host_peak is None else obs.host_peak.bytes), "vm_peak"
        else:
            measured, measure = max(cur.rss_samples, default=None), "resident_at_death"
        figures = parse_oom(failure.evidence)
        run.memory_failures.append(MemoryFailure(
            obs.attempt, run.ledger.knobs, None, measured, measure,
            stepped=obs.last_step is not None and obs.last_step >= 1,
            floor_bytes=obs.host_rss_peak_bytes if obs.last_step == 0 else None,
            tried_bytes=None if figures is None else figures.tried_bytes,
        ))  # fmt: skip
        # Predicted now, all with the same (latest calibrated) scale, so they compare.
        failures = [
            dataclasses.replace(f, predicted_bytes=run.fit.predict(f.knobs))
            for f in run.memory_failures
        ]
        limit = ml.limit_bytes if ml is not None else self.host.memory_limit_bytes()
        found = judge_floor(failures, limit)
        if found is not None:
            run.events.emit(
                "memory_floor_detected", limit_bytes=found.limit_bytes,
                floor_bytes=found.floor_bytes, measure=found.measure,
                attempts=list(found.attempts), reason=found.reason,
            )  # fmt: skip
        return found

    @staticmethod
    def _emit_failure(run: _Run, obs: Observation, failure: Failure) -> None:
        """``sigkill_judged`` (when something was killed) and ``failure_detected``."""
        kill = obs.kill
        if kill is not None:
            run.events.emit(
                "sigkill_judged", outcome=kill.outcome, reasons=list(kill.reasons),
                host_oom=obs.kill_is_host_oom, rank_killed=obs.rank_killed,
            )  # fmt: skip
        confirmed = kill.host_oom_confirmed if kill is not None else False
        run.events.emit(
            "failure_detected", kind=failure.kind, rank=failure.rank,
            evidence=list(failure.evidence), exit_code=obs.exit_code,
            signal=obs.exit.signal, recoverable=is_recoverable(failure.kind),
            host_oom_confirmed=confirmed,
            host_oom_evidence=list(kill.reasons) if kill is not None and confirmed else [],
            checkpoint_progress=obs.progressed,
            probable_kind=failure.probable, probable_words=list(failure.probable_words),
        )  # fmt: skip

    @staticmethod
    def _divergence_now(cur: _Current, beats: list[Heartbeat]) -> Divergence | None:
        """The loss or grad norm turned NaN/inf: a heartbeat (of ``beats``, the attempt's)
        says so (with the first step), or the output shows NaN/inf divergence lines (the step
        is then the last heartbeat's)."""
        marked = [hb for hb in beats if hb.nonfinite is not None or nonfinite(hb.loss)]
        if marked:
            hb = min(marked, key=lambda b: b.global_step if b.nonfinite_step is None
                     else b.nonfinite_step)  # fmt: skip
            step = hb.global_step if hb.nonfinite_step is None else hb.nonfinite_step
            return Divergence(step, hb.nonfinite or "loss", "heartbeat")
        lines = diverged_lines(cur.classifier.evidence)
        if lines:
            last = max((hb.global_step for hb in beats), default=None)
            return Divergence(last, f"output line {lines[0].text[:200]!r}", "output")
        return None

    def _conclude_diverged(
        self, run: _Run, cur: _Current, obs: Observation, div: Divergence
    ) -> _Next:
        """Give up naming the step, or roll back to the newest checkpoint before it (later
        ones, holding diverged weights, set aside), skipping the batches around it."""
        events = run.events
        run.ledger = record_attempt(
            run.ledger,
            AttemptRecord(obs.attempt, FailureKind.LOSS_DIVERGENCE, obs.duration_s, False),
        )
        events.emit(
            "divergence_detected", step=div.step, what=div.what, source=div.source,
            ended_by=obs.ended_by, exit_code=obs.exit_code,
        )  # fmt: skip
        decision = decide_divergence(div, self.job.divergence, run.ledger.rollbacks)
        max_attempts = self.job.limits.max_attempts
        if isinstance(decision, Rollback) and len(run.ledger.history) >= max_attempts:
            return _Next(RunState.GAVE_UP, f"max_attempts ({max_attempts}) reached; "
                         f"last failure: {FailureKind.LOSS_DIVERGENCE}",
                         kind=FailureKind.LOSS_DIVERGENCE)  # fmt: skip
        if not isinstance(decision, Rollback):
            return _Next(RunState.GAVE_UP, decision.reason, kind=FailureKind.LOSS_DIVERGENCE)
        set_aside: list[int] = []
        resume: int | None = None
        ckpt_dir = run.ledger.ckpt_dir
        while ckpt_dir is not None:
            chosen = self.host.select_checkpoint(ckpt_dir, self.job.world_size).chosen
            if chosen is None or chosen.step < decision.before_step:
                resume = None if chosen is None else chosen.step
                break
            set_aside.append(chosen.step)
            why = f"saved at or after step {decision.before_step}, where training diverged"
            self._quarantine(events, chosen.path, ckpt_dir, chosen.step, [why])
        window = skip_window(decision.before_step, resume, self.job.divergence.skip_batches)
        run.ledger = apply_rollback(run.ledger, window)
        events.emit(
            "divergence_rolled_back", diverged_at_step=decision.before_step,
            resume_step=resume, set_aside_steps=set_aside,
            skip_steps=None if window is None else list(window),
            skip_honoured=CAP_SKIP_BATCHES in run.ledger.caps, rollback=run.ledger.rollbacks,
            reason=decision.reason,
        )  # fmt: skip
        run.ended_pids = obs.pids
        run.last_kind = FailureKind.LOSS_DIVERGENCE
        run.delay_s = 0.0
        return _Next(
            RunState.BACKOFF, decision.reason,
            {"ledger": run.ledger.as_dict(), "knobs": run.ledger.knobs.as_dict()},
        )  # fmt: skip

    def _observe(self, run: _Run, cur: _Current) -> Observation:
        """End what the launcher left behind, drain the output, read heartbeats, OOM
        evidence and checkpoint progress: everything the judge may use, in one record."""
        handle = cur.handle
        assert handle is not None
        seen = {handle.pid, *self.host.processes(handle.ref)}
        if cur.report is None and seen - {handle.pid}:
            # The launcher exited on its own; anything of the attempt still alive (a rank the
            # launcher did not reap, a DataLoader worker) would hold GPU memory into the next
            # attempt.
            cur.report = self.host.end(handle.ref, self.job.limits.fatal_grace_s, handle)
        if cur.report is not None:
            r = cur.report
            seen |= set(r.terminated_pids) | set(r.killed_pids)
            run.events.emit(
                "attempt_ended", by=cur.ended_by, terminated_pids=list(r.terminated_pids),
                killed_pids=list(r.killed_pids), survivor_pids=list(r.survivor_pids),
                duration_s=round(r.duration_s, 3),
            )  # fmt: skip
        exit_code = handle.close()
        self._note_log_failure(run.events, cur, handle)  # a short attempt ends before a poll
        duration_s = self.host.monotonic() - cur.t0
        run.sm.update(current_attempt=None)
        if cur.report is not None and cur.cmd is not None and self.job.deepspeed is not None:
            self._remove_stale_build_locks(run.events, cur.cmd.env)
        beats = self.host.heartbeats(self._logs.heartbeat_dir, cur.number)
        self._mark_steps(cur, beats)
        last = max(beats, key=lambda hb: hb.global_step, default=None)
        progressed = False
        if run.ledger.ckpt_dir is not None:
            end_step = self._newest_complete_step(run.ledger.ckpt_dir)
            progressed = end_step is not None and (
                cur.start_step is None or end_step > cur.start_step
            )
        pids = tuple(sorted(seen))
        kill, rank_killed = self._judge_kill(cur, exit_code, pids)
        ml = cur.memlimit
        cg = None if ml is None else ml.cgroup
        cg_peak = None if cg is None else self.host.cgroup_peak_bytes(cg)
        host_peak = measured_host_peak(
            None if ml is None else ml.how, self.job.world_size, cur.vm_peak, cur.vm_hwm, cg_peak
        )
        self._release_memory_limit(cur)  # after its counter and peak were read
        return Observation(
            attempt=cur.number, exit_code=exit_code, ended_by=cur.ended_by,
            duration_s=duration_s, evidence=cur.classifier.evidence,
            output_tail=cur.classifier.tail,
            output_bytes=handle.output_bytes, output_lines=cur.classifier.lines_seen,
            log_dropped_bytes=handle.log_dropped_bytes,
            pids=pids, kill=kill, rank_killed=rank_killed,
            progressed=progressed, caps=capabilities(beats) if beats else None,
            last_step=None if last is None else last.global_step,
            last_loss=None if last is None else last.loss,
            gpu_mem_peak_bytes=max(
                (hb.max_memory_reserved_bytes or 0 for hb in beats), default=0
            ) or None,
            host_rss_peak_bytes=max((hb.host_rss_bytes or 0 for hb in beats), default=0)
            or None, host_peak=host_peak,
        )  # fmt: skip

    @staticmethod
    def _mark_steps(cur: _Current, beats: list[Heartbeat]) -> None:
        """Keep rank 0's newest step heartbeat as a step mark (``core.throughput``)."""
        for hb in beats:
            if hb.rank == 0 and hb.event == "step":
                cur.step_marks = add_mark(cur.step_marks, StepMark(hb.time_s, hb.global_step))

    def _remember(
        self, run: _Run, cur: _Current, obs: Observation, failure: Failure | None
    ) -> None:
        """The attempt's outcome for later runs of the same regime: its config ran out of
        memory, or succeeded / finished optimizer steps (then with its peak and its samples/s
        between step heartbeats, start-up excluded: ``core.throughput``)."""
        knobs = run.ledger.knobs
        if failure is not None and failure.kind in LADDER_FOR:
            run.fit.remember(knobs, "oom", None, None)
        elif failure is None or (obs.last_step is not None and obs.last_step >= 1):
            host = _host_measure(run.fit, obs)
            peak = obs.gpu_mem_peak_bytes or (None if host is None else host[0])
            sps = self._throughput(run, cur, knobs)
            run.fit.remember(knobs, "fit", peak, sps)
        _note_store(run.events, run.fit)

    def _throughput(self, run: _Run, cur: _Current, knobs: Knobs) -> float | None:
        """The attempt's samples/s between step heartbeats (None: too few steps seen), and
        the probe's verdict when this attempt ran the ``fit_probe`` config."""
        rate = step_rate(cur.step_marks)
        batch = self._global_batch(run, knobs)
        if rate is None or batch is None:
            return None
        sps = rate.samples_per_s(batch)
        run.events.emit(
            "throughput_measured", knobs=knobs.as_dict(), samples_per_s=round(sps, 4),
            steps_per_s=round(rate.steps_per_s, 4), from_step=rate.from_step,
            to_step=rate.to_step, span_s=round(rate.span_s, 3),
            tokens_per_s=None if knobs.max_length is None else round(sps * knobs.max_length, 1),
        )  # fmt: skip
        probe = run.fit.probe
        if probe is not None and knobs == probe.knobs:
            run.fit.probe = None  # decided once, on the probe's first measured attempt
            base = probe.baseline_samples_per_s
            kept = probe.knobs if sps > base else probe.baseline
            run.events.emit(
                "fit_probe_decided", probe_knobs=knobs.as_dict(),
                probe_samples_per_s=round(sps, 4), baseline_knobs=probe.baseline.as_dict(),
                baseline_samples_per_s=round(base, 4), kept_knobs=kept.as_dict(),
                speedup=round(sps / base, 4),
            )  # fmt: skip
        return sps

    @staticmethod
    def _calibrate(run: _Run, obs: Observation, failure: Failure | None) -> None:
        """An attempt that finished optimizer steps measured its config's peak: the
        estimator is scaled to it for the rest of the run. After a memory failure the peak
        seen is only a lower bound of the need: it may scale the estimate up, never down.

        A script that sends no heartbeats (transformers' run_clm, unmodified) reports no
        steps: its host peak as dsguard measured it from outside (:class:`HostPeak`) is the
        config's need when it exited 0, and a lower bound when it ran out of memory; other
        failures say nothing of the need. Without this the estimate was never calibrated
        for such a script (run_clm's imports reserve ~2.1 GiB of address space, the
        estimate's runtime term 1 GiB: 45 % low, ``bench/RESULTS.md`` P5 run_clm)."""
        oom = failure is not None and failure.kind in LADDER_FOR
        stepped = obs.last_step is not None and obs.last_step >= 1
        silent = obs.caps is None and obs.host_peak is not None and (failure is None or oom)
        if not stepped and not silent:
            return
        host = _host_measure(run.fit, obs)
        got = run.fit.calibrate(
            run.ledger.knobs, obs.gpu_mem_peak_bytes, None if host is None else host[0],
            lower_bound=oom, host_measure="host_rss" if host is None else host[1],
        )  # fmt: skip
        if got is not None:
            predicted, measured, what = got
            source = "heartbeat" if what in {"max_memory_reserved", "host_rss"} else (
                "cgroup" if what == "cgroup_peak" else "process_tree"
            )  # fmt: skip
            run.events.emit(
                "estimate_calibrated", predicted_bytes=predicted, measured_bytes=measured,
                measure=what, scale=round(run.fit.scale, 4), source=source,
            )  # fmt: skip

    def _emit_finished(self, run: _Run, obs: Observation) -> None:
        run.events.emit(
            "attempt_finished", exit_code=obs.exit_code, signal=obs.exit.signal,
            ended_by=obs.ended_by, duration_s=round(obs.duration_s, 3),
            output_bytes=obs.output_bytes, output_lines=obs.output_lines,
            last_step=obs.last_step, last_loss=obs.last_loss,
            gpu_mem_peak_bytes=obs.gpu_mem_peak_bytes,
            host_rss_peak_bytes=obs.host_rss_peak_bytes, capabilities=sorted(run.ledger.caps),
            log_dropped_bytes=obs.log_dropped_bytes or None,
        )  # fmt: skip

    def _judge_kill(
        self, cur: _Current, exit_code: int | None, pids: tuple[int, ...]
    ) -> tuple[KillJudgement | None, bool]:
        """Who killed the attempt, when it (or one of its ranks) died of SIGKILL: the live
        evidence gathered here, the judgement in ``core/sigkill`` (confirmed, refuted,
        unknown). Also whether the launcher's output says a rank was killed although the
        launcher itself exited with a plain error. (None, False) when nothing was killed."""
        texts = [ev.text for ev in cur.classifier.evidence]
        rank_killed = rank_killed_in(texts)
        killed = (
            decode_exit(exit_code).killed
            or rank_killed
            or any(ev.kind is FailureKind.KILLED_EXTERNALLY for ev in cur.classifier.evidence)
        )
        if not killed:
            return None, False
        cgroup = None if cur.memlimit is None else cur.memlimit.cgroup
        after = self.host.oom_kill_count(cgroup)
        before = cur.oom_before
        delta = None if before is None or after is None else after - before
        limit = cur.memlimit.limit_bytes if cgroup is not None and cur.memlimit else None
        tail = [] if cur.log_path is None else _tail_lines(cur.log_path, 200)
        sender = kill_sender_in(tail)
        if cur.ended_by != "exit" and cur.report is not None and cur.report.killed_pids:
            # Only when dsguard ended the attempt: after a launcher exited on its own, the
            # leftovers dsguard killed are not what killed the launcher's rank.
            sender = "dsguard (it ended the attempt and SIGKILLed what outlived the grace)"
        evidence = KillEvidence(
            oom_kill_delta=delta,
            kernel_oom_pids=tuple(sorted(self.host.kernel_oom_killed_pids() & set(pids))),
            rss_peak_bytes=max(cur.rss_samples) if cur.rss_samples else None,
            limit_bytes=limit or self.host.memory_limit_bytes(),
            oom_daemon_lines=oom_daemon_kills(self.host.oom_daemon_lines(cur.t0_wall), pids),
            psi_full_avg10=self.host.memory_pressure(cgroup),
            sender=sender,
        )
        return judge_sigkill(evidence), rank_killed

    def _note_cpu_only(self, run: _Run, cur: _Current) -> None:
        """A torch build without CUDA or ROCm pins nothing, so the pin_memory rung is skipped
        rather than spent on an attempt. Measured once per run (the env probe starts the
        training interpreter); unknown (no torch found) counts as not CPU-only."""
        if run.cpu_only is not None:
            return
        if not run.ledger.knobs.pin_memory or "pin_memory" not in self.job.ladder.host_oom:
            return  # the answer could change nothing: spare the probe (seconds)
        env = {} if cur.cmd is None else cur.cmd.env
        facts = self.host.env_facts(self.job.python, env, self.job.gpus)
        run.cpu_only = (
            facts.torch_version is not None and facts.torch_cuda is None and facts.torch_hip is None
        )
        if run.cpu_only:
            run.cfg = dataclasses.replace(
                run.cfg, ctx=dataclasses.replace(run.cfg.ctx, cpu_only=True)
            )

    def _remedy_context(self, run: _Run, cur: _Current, failure: Failure) -> RemedyContext | None:
        """Facts the remedy ladder needs (env probe, log tail); only for remedy kinds, as
        the env probe starts the training interpreter (seconds)."""
        if failure.kind not in REMEDY_KINDS:
            return None
        env = {} if cur.cmd is None else cur.cmd.env
        facts = self.host.env_facts(self.job.python, env, self.job.gpus)
        run.events.emit("env_facts", **facts.as_dict())
        tail = [] if cur.log_path is None else _tail_lines(cur.log_path, 300)
        return RemedyContext(
            evidence_lines=(*failure.evidence, *tail),
            applied=frozenset(r.name for r in run.ledger.remedies),
            env_facts=facts,
            ds_config=cur.ds_rendered,
        )

    def _apply(self, run: _Run, cur: _Current, failure: Failure, decision: Relaunch) -> _Next:
        """Log the decision, set aside a checkpoint that failed to load, move the ledger."""
        job = self.job
        world = job.world_size
        events = run.events
        ledger = run.ledger
        if decision.quarantine_resumed_checkpoint and cur.resume is not None and ledger.ckpt_dir:
            self._quarantine(
                events, cur.resume, ledger.ckpt_dir, cur.resume_step,
                ["resuming from it failed: " + (failure.evidence or ("?",))[0]],
            )  # fmt: skip
        ckpt_root = job.checkpoints.dir if job.checkpoints is not None else None
        run.ledger = apply_relaunch(
            ledger, decision, ckpt_root=ckpt_root, init_from=self._phase_init_from(ledger)
        )
        if decision.remedy is not None:
            r = decision.remedy
            env = {} if cur.cmd is None else cur.cmd.env
            events.emit(
                "remedy_applied", remedy=r.name, kind=r.kind, reason=r.reason,
                env={k: [env.get(k), v] for k, v in r.env.items()},
                config=r.config.as_dict(), flags=dict(r.flags), caveats=list(r.caveats),
                new_phase=r.new_phase, applied=[x.name for x in run.ledger.remedies],
            )  # fmt: skip
        if decision.skipped:
            events.emit(
                "rungs_skipped", kind=failure.kind,
                skipped=[{"rung": r, "reason": why} for r, why in decision.skipped],
            )  # fmt: skip
        new = run.ledger
        phased = new.phase != ledger.phase
        extra = {"phase": new.phase, "output_dir": new.ckpt_dir} if phased else {}
        events.emit(
            "policy_applied", rung=decision.rung, changes=decision.changes,
            new_phase=decision.new_phase, caveats=list(decision.caveats),
            reason=decision.reason, delay_s=decision.delay_s, knobs=new.knobs.as_dict(),
            global_batch_before=cur.knobs_global_batch,
            global_batch_after=new.knobs.global_batch(world),
            tokens_per_step_before=tokens_per_step(ledger.knobs, world),
            tokens_per_step_after=tokens_per_step(new.knobs, world), **extra,
        )  # fmt: skip
        if decision.new_phase:
            self._emit_phase_started(events, new)
        run.delay_s = decision.delay_s
        # RUNNING/ENDING -> BACKOFF: relaunch after the delay with the decided knobs.
        return _Next(
            RunState.BACKOFF, decision.reason,
            {
                "ledger": new.as_dict(), "knobs": new.knobs.as_dict(),
                "delay_s": decision.delay_s, "global_batch": new.knobs.global_batch(world),
                "checkpoint_dir": new.ckpt_dir,
            },
        )  # fmt: skip

    def _phase_init_from(self, ledger: Ledger) -> Path | None:
        """What a new phase would start from: the newest complete checkpoint, when the
        training code can load weights from one (``init_from``); else the initial model."""
        if CAP_INIT_FROM not in ledger.caps or ledger.ckpt_dir is None:
            return None
        done = self._select(ledger.ckpt_dir).chosen
        return ledger.phase_init_from if done is None else done.path

    @staticmethod
    def _emit_phase_started(events: EventLog, ledger: Ledger) -> None:
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

    def _remove_stale_build_locks(self, events: EventLog, env: Mapping[str, str]) -> None:
        """A JIT build killed mid-way (by dsguard ending the attempt) leaves ``<op>/lock``;
        every later process that loads that op waits on it forever, silently: the next attempt
        would look like a hang. Only locks no live process holds open are removed."""
        facts = self.host.env_facts(self.job.python, env, self.job.gpus)
        if facts.torch_extensions_dir is None:
            return
        for lock in self.host.remove_stale_build_locks(facts.torch_extensions_dir):
            events.emit("build_lock_removed", path=lock)

    def _await_gpu_release(self, events: EventLog, pids: list[int]) -> ReleaseResult:
        """Before relaunching: the next attempt must not OOM on the last one's leftovers."""
        res = self.host.gpu_release(pids, self.notifier.watchdog_if_due)
        events.emit("gpu_release_checked", pids=pids, **res.as_dict())
        return res

    # -- fit_probe: in_run (issue 15) ------------------------------------------------------

    def _probe_switch_due(self, run: _Run, cur: _Current) -> bool:
        """Whether the probe ends this attempt now: once its rate is trusted (the job's
        ``fit_probe_steps`` step intervals), ``core.throughput.probe_rate`` decides."""
        p, cost = run.probe, run.probe_cost
        if p is None:
            return False
        if cost.dead_since is not None and cur.step_marks:
            # The config switched to reported its first step: the restart is paid.
            cost.restart_s += max(0.0, cur.step_marks[0].time_s - cost.dead_since)
            cost.dead_since = None
            self._probe_settle(run)
        rate = step_rate(cur.step_marks, min_intervals=p.steps)
        batch = self._global_batch(run, run.ledger.knobs)
        if p.stage == "done" or rate is None or batch is None:
            return False
        sps = rate.samples_per_s(batch)
        known = run.fit.known()
        _note_store(run.events, run.fit)
        run.probe, move = probe_rate(
            p, run.ledger.knobs, sps,
            known={k: v.samples_per_s for k, v in known.items() if v.fits and v.samples_per_s},
            known_failed={k for k, v in known.items() if not v.fits},
            predicted_fit=run.fit.probe_fits(run.ledger.knobs),
            min_micro=run.cfg.ctx.min_micro_batch_size,
        )  # fmt: skip
        q = run.probe
        if p.stage == "measure_b" and p.b == run.ledger.knobs and q.kept is not None:
            # The probed config against the one it had to beat (the fastest so far).
            assert p.a_samples_per_s is not None
            run.events.emit(
                "fit_probe_decided", probe_knobs=p.b.as_dict(),
                probe_samples_per_s=round(sps, 4), baseline_knobs=p.a.as_dict(),
                baseline_samples_per_s=round(p.a_samples_per_s, 4),
                kept_knobs=q.kept.as_dict(), speedup=round(sps / p.a_samples_per_s, 4),
            )  # fmt: skip
        if move is None:
            self._probe_settle(run)
            return False
        run.probe_move, run.probe_move_wall = move, self.host.wall()
        return True

    def _conclude_probe(
        self, run: _Run, cur: _Current, obs: Observation, failure: Failure | None
    ) -> _Next:
        """Relaunch at the probe's next config, resuming from the newest complete checkpoint
        (the global batch is kept, so the resume is exact, as after a micro_batch rung).
        Neither the switch nor an out-of-memory at the probed config is recorded in the
        attempt history: the retry budgets and ``max_attempts`` count failures of the
        training, not dsguard's exploration, so a healthy run never gives up over a probe."""
        move, run.probe_move = run.probe_move, None
        assert move is not None
        ledger, cost = run.ledger, run.probe_cost
        self._calibrate(run, obs, failure)
        self._remember(run, cur, obs, failure)
        if failure is not None:
            self._emit_failure(run, obs, failure)
        resume = None if ledger.ckpt_dir is None else self._newest_complete_step(ledger.ckpt_dir)
        redone = max(0, (obs.last_step or 0) - (resume or 0))
        rate = step_rate(cur.step_marks, min_intervals=1)
        cost.switches += 1
        cost.steps_redone += redone
        cost.redone_s += 0.0 if rate is None else redone / rate.steps_per_s
        if cost.dead_since is None:
            cost.dead_since = run.probe_move_wall if failure is None else self.host.wall()
        batch = self._global_batch(run, ledger.knobs)
        run.events.emit(
            "fit_probe_switched", from_knobs=ledger.knobs.as_dict(), to_knobs=move.to.as_dict(),
            reason=move.why, last_step=obs.last_step, resume_step=resume, steps_redone=redone,
            samples_per_s=None if rate is None or batch is None
            else round(rate.samples_per_s(batch), 4),
        )  # fmt: skip
        run.ledger = dataclasses.replace(ledger, knobs=move.to)
        run.ended_pids, run.delay_s, run.last_kind = obs.pids, 0.0, None
        world = self.job.world_size
        return _Next(
            RunState.BACKOFF, f"fit_probe ({move.why}): relaunching at {_label(move.to)}",
            {"ledger": run.ledger.as_dict(), "knobs": move.to.as_dict(), "delay_s": 0.0,
             "global_batch": move.to.global_batch(world)},
        )  # fmt: skip

    def _probe_settle(self, run: _Run, *, final: bool = False) -> None:
        """``fit_probe_cost`` once, when the probe is over and its last restart is paid
        (or the run ends first: then a restart not yet paid counts up to now)."""
        p, cost = run.probe, run.probe_cost
        if p is None or cost.reported or cost.switches == 0:
            return
        if not final and (p.stage != "done" or cost.dead_since is not None):
            return
        if cost.dead_since is not None:
            cost.restart_s += max(0.0, self.host.wall() - cost.dead_since)
            cost.dead_since = None
        cost.reported = True
        run.events.emit(
            "fit_probe_cost", switches=cost.switches, restart_s=round(cost.restart_s, 3),
            steps_redone=cost.steps_redone, redone_s=round(cost.redone_s, 3),
            lost_s=round(cost.restart_s + cost.redone_s, 3),
            kept_knobs=None if p.kept is None else p.kept.as_dict(), finished=p.stage == "done",
        )  # fmt: skip

    # -- the one finish path ---------------------------------------------------------------

    def _stopped(self) -> _Next:
        signum = self._stop_signal or signal.SIGTERM
        return _Next(
            RunState.STOPPED, f"stopped by signal {signum}", exit_code=exit_code_for_signal(signum)
        )

    def _finish(self, run: _Run, nxt: _Next) -> int:
        """Every terminal outcome ends here: one event with the same fields, one transition.

        ``attempts`` counts attempts whose process started (an attempt refused by preflight
        or that could not be spawned took a number but never ran)."""
        job = self.job
        world = job.world_size
        ledger = run.ledger
        fields: dict[str, Any] = {
            "reason": nxt.reason,
            "kind": None if nxt.kind is None else nxt.kind.value,
            "attempts": ledger.attempts_made - (1 if run.unstarted else 0),
            "knobs": ledger.knobs.as_dict(),
            "changes": job.knobs.diff(ledger.knobs),
            "global_batch": self._global_batch(run, ledger.knobs),
            "initial_global_batch": job.knobs.global_batch(world),
            # Unknown too once the ranks seen disagree with the job (world_size_mismatch).
            "tokens_per_step": None
            if run.world_mismatch is not None
            else tokens_per_step(ledger.knobs, world),
            "initial_tokens_per_step": tokens_per_step(job.knobs, world),
            "phase": ledger.phase,
            "duration_s": round(self.host.monotonic() - run.t0, 3),
        }
        self._probe_settle(run, final=True)
        if nxt.state is RunState.STOPPED:
            fields["signal"] = self._stop_signal or signal.SIGTERM
        name = {
            RunState.SUCCEEDED: "run_succeeded",
            RunState.GAVE_UP: "run_gave_up",
            RunState.STOPPED: "run_stopped",
        }[nxt.state]
        run.events.emit(name, **fields)
        run.sm.transition(nxt.state, nxt.reason, ledger=ledger.as_dict(), current_attempt=None)
        if nxt.state is RunState.SUCCEEDED:
            self._status(ledger, "succeeded")
        elif nxt.state is RunState.GAVE_UP:
            self._status(ledger, f"gave up: {nxt.reason}")
        # Lines and state held back by a full disk get one last chance to be written.
        run.sm.flush()
        run.events.flush()
        return nxt.exit_code

    # -- recovery --------------------------------------------------------------------------

    def _recover(self, events: EventLog) -> Ledger | None:
        """Continue a run a previous dsguard left unfinished (killed, crashed, or stopped).

        The lock guarantees that dsguard is gone. Its attempt may not be: the launcher gets
        SIGTERM from the parent-death signal, but its ranks or a torchrun worker may live on
        and hold GPUs. They are found by session and marker, ended, and their GPU memory is
        awaited before the ladder continues at the recorded rung.
        """
        path = self._logs.state
        if not path.exists():
            return None
        try:
            prev = read_state(path)
            prev_state = prev.state
            if prev.ledger is None:
                raise ValueError("no ledger recorded")
            ledger = Ledger.from_dict(prev.ledger)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            events.emit("state_discarded", path=path, reason=f"unreadable: {exc}")
            return None
        if prev_state in TERMINAL and prev_state is not RunState.STOPPED:
            return None  # that run is over: a new `dsguard run` starts a new one
        if prev.job_knobs != self.job.knobs.as_dict():
            events.emit(
                "state_discarded", path=path, previous_run_id=prev.run_id,
                reason="the job's knobs changed since that run: starting a new ladder",
            )  # fmt: skip
            return None
        report: EndReport | None = None
        leftover: list[int] = []
        current = prev.current_attempt
        if current is not None:
            ref = AttemptRef(
                run_id=current.run_id, attempt=current.attempt, sid=current.sid,
                started_epoch_s=current.started_epoch_s,
                launcher_create_time=current.launcher_create_time,
            )  # fmt: skip
            leftover = self.host.processes(ref)
            if leftover:
                report = self.host.end(ref, self.job.limits.fatal_grace_s, None)
            # Its memory cgroup (if it had one) outlived the dead dsguard: empty now.
            self.host.remove_left_cgroups(current.run_id, current.attempt)
        events.emit(
            "run_recovered", previous_run_id=prev.run_id,
            previous_state=prev_state.value, previous_pid=prev.pid,
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
