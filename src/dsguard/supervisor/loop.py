"""The run loop: the one place where pure decisions meet processes, files and signals.

launch -> watch output and exit -> classify -> decide -> act -> record, once per attempt,
until the job succeeds, the policy gives up, or dsguard is asked to stop.
"""

from __future__ import annotations

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

from dsguard import __version__
from dsguard.job import Job
from dsguard.knobs import Knobs
from dsguard.policies.ladder import (
    AttemptRecord,
    GiveUp,
    PolicyConfig,
    decide,
    is_recoverable,
)
from dsguard.protocol import CAP_INIT_FROM, CAP_ZERO_TRANSPLANT, HEARTBEAT_SUBDIR
from dsguard.supervisor import checkpoints as ckpts
from dsguard.supervisor.classify import (
    Evidence,
    Failure,
    StreamClassifier,
    classify,
    decode_exit,
)
from dsguard.supervisor.events import EVENTS_FILENAME, EventLog
from dsguard.supervisor.heartbeat import capabilities, read_heartbeats
from dsguard.supervisor.hostmem import oom_kill_count
from dsguard.supervisor.launch import build_command, render_deepspeed_config
from dsguard.supervisor.proc import Child, EndReport, attempt_processes, end_attempt, spawn
from dsguard.supervisor.resume import patch_train_batch_size
from dsguard.supervisor.state import STATE_FILENAME, RunState, StateMachine, write_json_atomic
from dsguard.supervisor.watch import OutputPump

EXIT_SUCCEEDED = 0
EXIT_GAVE_UP = 1
EXIT_USAGE = 2

_WAIT_POLL_S = 0.05
#: How long the output pump may take to drain after the attempt's processes are gone.
_PUMP_DRAIN_S = 5.0


def exit_code_for_signal(signum: int) -> int:
    """128 + signal number: 130 for SIGINT, 143 for SIGTERM (shell convention)."""
    return 128 + signum


def new_run_id(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass
class _AttemptOutcome:
    exit_code: int | None
    ended_by: str  # "exit" | "fatal" | "stop"
    duration_s: float
    report: EndReport | None
    classifier: StreamClassifier
    fatal: Evidence | None
    output_bytes: int


@dataclass
class Supervisor:
    """Supervises one job until it succeeds, gives up or is stopped.

    Args:
        job: the validated job.
        console: human-readable event lines (None: silent).
        echo: where the child's raw output is mirrored (None: only the attempt log).
        monotonic / now: clocks, injectable for tests.
        oom_probe: host-OOM evidence counter (see ``hostmem``); None return means unknown.
        base_env: the environment children start from.
    """

    job: Job
    console: TextIO | None = None
    echo: BinaryIO | None = None
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    oom_probe: Callable[[], int | None] = oom_kill_count
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    _wake: threading.Event = field(default_factory=threading.Event, init=False)
    _stop_signal: int | None = field(default=None, init=False)
    _fatal: Evidence | None = field(default=None, init=False)

    # -- control ---------------------------------------------------------------------------

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the loop to end the current attempt and stop (safe from a signal handler)."""
        if self._stop_signal is None:
            self._stop_signal = signum
        self._wake.set()

    def _on_fatal(self, ev: Evidence) -> None:
        if self._fatal is None:
            self._fatal = ev
        self._wake.set()

    # -- checkpoints -------------------------------------------------------------------------

    def _newest_complete_step(self, ckpt_dir: Path) -> int | None:
        chosen = ckpts.select_checkpoint(ckpt_dir, world_size=self.job.world_size).chosen
        return None if chosen is None else chosen.step

    def _pick_checkpoint(self, events: EventLog, ckpt_dir: Path, allow: bool) -> Path | None:
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
        return sel.chosen.path

    # -- one attempt -------------------------------------------------------------------------

    def _wait(self, child: Child) -> str:
        while True:
            if self._fatal is not None:
                return "fatal"
            if self._stop_signal is not None:
                return "stop"
            if child.popen.poll() is not None:
                return "exit"
            self._wake.wait(_WAIT_POLL_S)
            self._wake.clear()

    def _run_attempt(
        self, events: EventLog, sm: StateMachine, child: Child, log_path: Path, t0: float
    ) -> _AttemptOutcome:
        classifier = StreamClassifier()
        pump = OutputPump(
            child.stdout_fd, log_path, classifier, on_fatal=self._on_fatal, echo=self.echo,
            monotonic=self.monotonic,
        )  # fmt: skip
        pump.start()
        ended_by = self._wait(child)
        report: EndReport | None = None
        limits = self.job.limits
        if ended_by == "fatal":
            fatal = self._fatal
            assert fatal is not None
            # RUNNING -> ENDING: one rank hit a fatal error; the others would hang in NCCL.
            sm.transition(RunState.ENDING, f"fatal output: {fatal.kind}")
            events.emit(
                "fatal_output_detected", kind=fatal.kind, rank=fatal.rank,
                line_no=fatal.line_no, line=fatal.text,
            )  # fmt: skip
            report = end_attempt(child, limits.fatal_grace_s, monotonic=self.monotonic)
        elif ended_by == "stop":
            sm.transition(RunState.ENDING, f"stop requested by signal {self._stop_signal}")
            report = end_attempt(child, limits.stop_grace_s, monotonic=self.monotonic)
        # The launcher exited on its own; anything of the attempt still alive (a rank the
        # launcher did not reap, a DataLoader worker) would hold GPU memory into the next
        # attempt.
        elif attempt_processes(child):
            report = end_attempt(child, limits.fatal_grace_s, monotonic=self.monotonic)
        if report is not None:
            events.emit(
                "attempt_ended", by=ended_by, terminated_pids=list(report.terminated_pids),
                killed_pids=list(report.killed_pids), survivor_pids=list(report.survivor_pids),
                duration_s=round(report.duration_s, 3),
            )  # fmt: skip
        child.popen.wait()
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
            fatal=self._fatal,
            output_bytes=pump.bytes_read,
        )

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        job = self.job
        job.log_dir.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id(self.now())
        events = EventLog(
            job.log_dir / EVENTS_FILENAME, run_id=run_id, console=self.console, now=self.now,
            job=job.name,
        )  # fmt: skip
        try:
            return self._run(events, run_id)
        finally:
            events.close()

    def _stopped(self, events: EventLog, sm: StateMachine, attempts: int) -> int:
        signum = self._stop_signal or signal.SIGTERM
        events.emit("run_stopped", signal=signum, attempts=attempts)
        sm.transition(RunState.STOPPED, f"stopped by signal {signum}")
        return exit_code_for_signal(signum)

    def _run(self, events: EventLog, run_id: str) -> int:
        job = self.job
        world = job.world_size
        knobs: Knobs = job.knobs
        cfg = PolicyConfig.from_job(job)
        positions: dict[str, int] = {}
        history: list[AttemptRecord] = []
        phase = 1
        ckpt_root = job.checkpoints.dir if job.checkpoints is not None else None
        ckpt_dir = ckpt_root
        phase_output: Path | None = None
        #: Weights a new phase starts from (every attempt of the phase: a LoRA phase's own
        #: checkpoints hold only adapters, so the base must be these weights on resume too).
        phase_init_from: Path | None = None
        #: What the training code announced in its heartbeats (the last attempt that did).
        caps: frozenset[str] = frozenset()
        run_t0 = self.monotonic()
        sm = StateMachine(
            job.log_dir / STATE_FILENAME,
            events,
            status={
                "run_id": run_id, "job": job.name, "job_file": job.source,
                "pid": os.getpid(), "log_dir": job.log_dir, "attempt": 0,
                "knobs": knobs.as_dict(), "global_batch": knobs.global_batch(world),
                "positions": positions, "phase": phase, "history": [],
            },
        )  # fmt: skip
        events.emit(
            "run_started", job_file=job.source, launcher=job.launcher, world_size=world,
            knobs=knobs.as_dict(), global_batch=knobs.global_batch(world), log_dir=job.log_dir,
            checkpoint_dir=ckpt_dir, dsguard_version=__version__, pid=os.getpid(),
        )  # fmt: skip

        attempt = 0
        while True:
            attempt += 1
            events.bind(attempt=attempt)
            self._fatal = None
            self._wake.clear()
            if self._stop_signal is not None:
                return self._stopped(events, sm, attempt - 1)
            resume: Path | None = None
            start_step: int | None = None
            if ckpt_dir is not None:
                assert job.checkpoints is not None
                allow = attempt > 1 or job.checkpoints.resume_at_start
                resume = self._pick_checkpoint(events, ckpt_dir, allow)
                start_step = self._newest_complete_step(ckpt_dir)
                if resume is not None:
                    patch = patch_train_batch_size(resume, knobs.micro_batch_size)
                    if patch is not None:
                        events.emit(
                            "checkpoint_patched", path=patch.path, key=patch.key,
                            old=patch.old, new=patch.new, backup=patch.backup,
                            reason="transformers <= 5.1 would restore the old micro-batch on "
                            "resume and ignore the new one",
                        )  # fmt: skip

            ds_path: Path | None = None
            if job.deepspeed is not None:
                ds_path = job.log_dir / f"attempt-{attempt}.deepspeed.json"
                rendered = render_deepspeed_config(job.deepspeed.base, knobs, world)
                write_json_atomic(ds_path, rendered)
            cmd = build_command(
                job, knobs, run_id=run_id, attempt=attempt, base_env=self.base_env,
                ds_config=ds_path, resume_from=resume, output_dir=phase_output,
                init_from=phase_init_from, supervisor_pid=os.getpid(),
            )  # fmt: skip
            log_path = job.log_dir / f"attempt-{attempt}.log"
            oom_before = self.oom_probe()
            t0 = self.monotonic()
            try:
                child = spawn(cmd, run_id=run_id, attempt=attempt)
            except OSError as exc:
                reason = f"cannot start {cmd.argv[0]!r}: {exc.strerror or exc}"
                events.emit("attempt_not_started", argv=cmd.argv, error=str(exc))
                events.emit("run_gave_up", reason=reason, attempts=attempt)
                sm.transition(RunState.GAVE_UP, reason)
                return EXIT_GAVE_UP
            events.emit(
                "attempt_started", pid=child.pid, argv=cmd.argv, cwd=cmd.cwd,
                knobs=knobs.as_dict(), global_batch=knobs.global_batch(world),
                world_size=world, phase=phase, resume_from=resume, deepspeed_config=ds_path,
                output_dir=phase_output, init_from=phase_init_from, log=log_path,
            )  # fmt: skip
            # STARTING/BACKOFF -> RUNNING: the attempt's launcher is alive.
            sm.transition(
                RunState.RUNNING, f"attempt {attempt} started", attempt=attempt,
                pid=child.pid, knobs=knobs.as_dict(), global_batch=knobs.global_batch(world),
                phase=phase, resume_from=resume, attempt_log=log_path,
            )  # fmt: skip

            out = self._run_attempt(events, sm, child, log_path, t0)
            status = decode_exit(out.exit_code)
            beats = read_heartbeats(job.log_dir / HEARTBEAT_SUBDIR, attempt)
            if beats:
                caps = capabilities(beats)
            last = max(beats, key=lambda hb: hb.global_step, default=None)
            events.emit(
                "attempt_finished", exit_code=out.exit_code, signal=status.signal,
                ended_by=out.ended_by, duration_s=round(out.duration_s, 3),
                output_bytes=out.output_bytes, output_lines=out.classifier.lines_seen,
                last_step=None if last is None else last.global_step,
                last_loss=None if last is None else last.loss,
                gpu_mem_peak_bytes=max(
                    (hb.max_memory_reserved_bytes or 0 for hb in beats), default=None
                ) or None,
                host_rss_bytes=max((hb.host_rss_bytes or 0 for hb in beats), default=None)
                or None,
                capabilities=sorted(caps),
            )  # fmt: skip
            if out.ended_by == "stop":
                return self._stopped(events, sm, attempt)

            oom_after = self.oom_probe()
            confirmed = oom_before is not None and oom_after is not None and oom_after > oom_before
            failure: Failure | None = classify(
                out.classifier.evidence, status, host_oom_confirmed=confirmed
            )
            progressed = False
            if ckpt_dir is not None:
                end_step = self._newest_complete_step(ckpt_dir)
                progressed = end_step is not None and (start_step is None or end_step > start_step)

            if failure is None:
                history.append(AttemptRecord(attempt, None, out.duration_s, progressed))
                events.emit(
                    "run_succeeded", attempts=attempt, knobs=knobs.as_dict(),
                    changes=job.knobs.diff(knobs),
                    global_batch=knobs.global_batch(world),
                    initial_global_batch=job.knobs.global_batch(world), phase=phase,
                    duration_s=round(self.monotonic() - run_t0, 3),
                )  # fmt: skip
                sm.transition(RunState.SUCCEEDED, "the training command exited 0")
                return EXIT_SUCCEEDED

            events.emit(
                "failure_detected", kind=failure.kind, rank=failure.rank,
                evidence=list(failure.evidence), exit_code=out.exit_code,
                signal=status.signal, recoverable=is_recoverable(failure.kind),
                host_oom_confirmed=confirmed, checkpoint_progress=progressed,
            )  # fmt: skip
            history.append(AttemptRecord(attempt, failure.kind, out.duration_s, progressed))
            sm.update(history=[h.as_dict() for h in history])
            cfg_now = dataclasses.replace(
                cfg,
                ctx=dataclasses.replace(cfg.ctx, exact_zero_transfer=CAP_ZERO_TRANSPLANT in caps),
            )
            decision = decide(
                failure.kind, knobs=knobs, positions=positions, history=history, cfg=cfg_now
            )
            if isinstance(decision, GiveUp):
                events.emit(
                    "run_gave_up", reason=decision.reason, kind=failure.kind, attempts=attempt,
                    knobs=knobs.as_dict(), changes=job.knobs.diff(knobs),
                    duration_s=round(self.monotonic() - run_t0, 3),
                )  # fmt: skip
                sm.transition(RunState.GAVE_UP, decision.reason)
                return EXIT_GAVE_UP

            if decision.quarantine_resumed_checkpoint and resume is not None and ckpt_dir:
                dest = ckpts.quarantine(resume, ckpt_dir)
                events.emit(
                    "checkpoint_quarantined", path=resume, moved_to=dest,
                    step=ckpts.checkpoint_step(resume),
                    reasons=["resuming from it failed: " + (failure.evidence or ("?",))[0]],
                )  # fmt: skip
            before = knobs.global_batch(world)
            knobs = decision.knobs
            positions = decision.positions
            extra: dict[str, Any] = {}
            if decision.new_phase and ckpt_root is not None and ckpt_dir is not None:
                if CAP_INIT_FROM in caps:
                    done = ckpts.select_checkpoint(ckpt_dir, world_size=world).chosen
                    phase_init_from = done.path if done is not None else phase_init_from
                else:
                    phase_init_from = None
                phase += 1
                ckpt_dir = ckpt_root / f"dsguard-phase-{phase}"
                phase_output = ckpt_dir
                extra = {"phase": phase, "output_dir": ckpt_dir}
            events.emit(
                "policy_applied", rung=decision.rung, changes=decision.changes,
                new_phase=decision.new_phase, caveats=list(decision.caveats),
                reason=decision.reason, delay_s=decision.delay_s, knobs=knobs.as_dict(),
                global_batch_before=before, global_batch_after=knobs.global_batch(world),
                **extra,
            )  # fmt: skip
            if decision.new_phase:
                start = (
                    f"the consolidated weights of {phase_init_from}"
                    if phase_init_from is not None
                    else "the initial model (the training code does not announce init_from)"
                )
                events.emit(
                    "phase_started", phase=phase, output_dir=phase_output,
                    init_from=phase_init_from,
                    reason=(
                        "the previous phase's checkpoints cannot be resumed exactly under the "
                        f"new config; this phase starts from {start} with a fresh optimizer "
                        "and LR schedule, in its own output dir (earlier checkpoints are kept)"
                    ),
                )  # fmt: skip
            # RUNNING/ENDING -> BACKOFF: relaunch after the delay with the decided knobs.
            sm.transition(
                RunState.BACKOFF, decision.reason, knobs=knobs.as_dict(),
                positions=positions, phase=phase, delay_s=decision.delay_s,
                global_batch=knobs.global_batch(world),
            )  # fmt: skip
            if decision.delay_s > 0:
                deadline = self.monotonic() + decision.delay_s
                while self._stop_signal is None and self.monotonic() < deadline:
                    self._wake.wait(min(0.5, max(0.0, deadline - self.monotonic())))
                    self._wake.clear()
