"""Test helpers for code that drives dsguard's run loop (like ``structlog.testing``).

:class:`FakeHost` implements :class:`dsguard.run.host.Host` from a script: each attempt's
output lines with their times, its exit code or signal, heartbeats, resident memory, OOM
counter moves, checkpoints appearing, and whether its GPU memory is released. Time is a fake
clock that jumps to the next scripted event, so a scenario that spans an hour of supervision
(a hang timeout, a backoff) runs in milliseconds and never sleeps.

Example::

    host = FakeHost([Script(lines=((1.0, "torch.OutOfMemoryError: CUDA out of memory"),),
                            exit_at_s=None),
                     Script(exit_at_s=5.0)])
    assert Supervisor(job, host=host).run() == 0
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from dsguard.core.classify import Evidence, StreamClassifier
from dsguard.core.envfacts import EnvFacts
from dsguard.core.events import LogWriteFailed
from dsguard.host.cgroup import MemoryCgroup
from dsguard.host.gpu import Holder, ReleaseResult, ReleaseStatus
from dsguard.job.model import CheckpointLayout
from dsguard.protocol import Heartbeat
from dsguard.run.checkpoints import CheckpointVerdict, Selection, checkpoint_step
from dsguard.run.host import Attempt
from dsguard.run.launch import Command
from dsguard.run.layouts import LatestChange
from dsguard.run.memlimit import LimitHow, MemoryLimit
from dsguard.run.proc import AttemptRef, EndReport
from dsguard.run.resume import StatePatch

__all__ = ["Beat", "FakeHost", "Script"]

#: The fake clock's origins: monotonic and wall readings are offsets from these.
_MONO_0 = 1000.0
_WALL_0 = 1_700_000_000.0
_PID_BASE = 40_000
_SIGTERM_EXIT_S = 0.05
_HEARTBEAT_NAME = re.compile(r"attempt-(\d+)-rank-")


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat of rank 0, ``at_s`` seconds after the attempt started."""

    at_s: float
    step: int
    loss: float | None = None
    capabilities: tuple[str, ...] = ()
    gpu_mem_bytes: int | None = None
    rss_bytes: int | None = None
    #: The metric that turned NaN/inf and the first step it was seen at (the HF callback's).
    nonfinite: str | None = None
    nonfinite_step: int | None = None


@dataclass(frozen=True, slots=True)
class Script:
    """What one attempt does; times are seconds after its spawn.

    Attributes:
        lines: output lines (without newline) and when they are printed.
        exit_at_s: when the launcher exits on its own; None: never (it hangs, or waits for
            a signal).
        exit_code: its exit code then (negative: killed by that signal, e.g. -9).
        sigterm_exit_code: its exit code when dsguard's SIGTERM arrives; None: it ignores
            SIGTERM and dies of the SIGKILL after the grace.
        heartbeats: progress reports of rank 0.
        rss_bytes: the tree's resident memory while it runs.
        oom_kills: how much the cgroup's OOM-kill counter rises when it ends.
        kernel_oom: the kernel log names its pid as killed by the OOM killer.
        checkpoints: complete ``checkpoint-N`` dirs (step N) appearing in the host's
            checkpoint dir at the given times.
        gpu: what waiting for its GPU memory after it ended answers.
        gpu_busy_until_s: its GPUs compute until then, idle after; None: unknown.
        spawn_error: the attempt cannot be started (an OSError with this message).
        save_on_stop_s: it honours a save-and-stop request by exiting 0 this long after it.
        psi_full_avg10: the memory pressure (PSI full avg10, percent) read after it ended.
        oom_daemon_lines: what systemd-oomd / earlyoom logged while it ran.
        vm_peak_bytes: the largest ``VmPeak`` of its process tree (read from outside while it
            runs, as ``/proc/<pid>/status`` gives it); None: unreadable.
        vm_hwm_bytes: the sum of its processes' ``VmHWM``.
        cgroup_peak_bytes: its memory cgroup's peak charge (``memory.max_usage_in_bytes``).
    """

    lines: tuple[tuple[float, str], ...] = ()
    exit_at_s: float | None = 1.0
    exit_code: int = 0
    sigterm_exit_code: int | None = -15
    heartbeats: tuple[Beat, ...] = ()
    rss_bytes: int | None = None
    oom_kills: int = 0
    kernel_oom: bool = False
    checkpoints: tuple[tuple[float, int], ...] = ()
    gpu: ReleaseStatus = "released"
    gpu_busy_until_s: float | None = None
    spawn_error: str | None = None
    save_on_stop_s: float | None = None
    psi_full_avg10: float | None = None
    oom_daemon_lines: tuple[str, ...] = ()
    vm_peak_bytes: int | None = None
    vm_hwm_bytes: int | None = None
    cgroup_peak_bytes: int | None = None


@dataclass
class _FakeAttempt:
    """One scripted attempt as the loop's :class:`~dsguard.run.host.Attempt`."""

    host: FakeHost
    script: Script
    number: int
    run_id: str
    t0: float
    log_path: Path
    classifier: StreamClassifier
    on_fatal: Callable[[Evidence], None]
    exit_code: int | None = None
    exited_at: float | None = None
    stop_exit_at: float | None = None
    delivered: int = 0
    beats_seen: int = 0
    ckpts_seen: int = 0
    output_bytes: int = 0
    last_output_at: float = 0.0
    closed: bool = False
    #: The fake attempt log never fails (the real pump's full-disk path is tested for real).
    log_dropped_bytes: int = 0
    log_failure: LogWriteFailed | None = None

    @property
    def pid(self) -> int:
        return _PID_BASE + self.number

    @property
    def ref(self) -> AttemptRef:
        return AttemptRef(self.run_id, self.number, self.pid, _WALL_0 + self.t0 - 1.0)

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    def poll(self) -> int | None:
        return self.exit_code

    def natural_exit_t(self) -> float | None:
        times = [self.stop_exit_at]
        if self.script.exit_at_s is not None:
            times.append(self.t0 + self.script.exit_at_s)
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def pending(self) -> list[float]:
        """Absolute times of this attempt's next scripted events."""
        s = self.script
        out: list[float] = []
        if self.delivered < len(s.lines):
            out.append(self.t0 + s.lines[self.delivered][0])
        if self.beats_seen < len(s.heartbeats):
            out.append(self.t0 + s.heartbeats[self.beats_seen].at_s)
        if self.ckpts_seen < len(s.checkpoints):
            out.append(self.t0 + s.checkpoints[self.ckpts_seen][0])
        end = self.natural_exit_t()
        if self.alive and end is not None:
            out.append(end)
        return out

    def advance(self, t: float) -> None:
        """Deliver everything scheduled up to ``t`` (nothing after the attempt ended)."""
        end = self.natural_exit_t() if self.alive else self.exited_at
        upto = t if end is None else min(t, end)
        s = self.script
        while self.delivered < len(s.lines) and self.t0 + s.lines[self.delivered][0] <= upto:
            at, text = s.lines[self.delivered]
            self.delivered += 1
            self._emit_line(self.t0 + at, text)
        while (
            self.beats_seen < len(s.heartbeats)
            and self.t0 + s.heartbeats[self.beats_seen].at_s <= upto
        ):
            self.beats_seen += 1
        while (
            self.ckpts_seen < len(s.checkpoints)
            and self.t0 + s.checkpoints[self.ckpts_seen][0] <= upto
        ):
            self.host.add_checkpoint(s.checkpoints[self.ckpts_seen][1])
            self.ckpts_seen += 1
        if self.alive and end is not None and end <= t:
            code = 0 if end == self.stop_exit_at else s.exit_code
            self.die(code, end)

    def _emit_line(self, at: float, text: str) -> None:
        data = (text + "\n").encode()
        with open(self.log_path, "ab") as fh:
            fh.write(data)
        self.output_bytes += len(data)
        self.last_output_at = _MONO_0 + at
        for ev in self.classifier.feed(text + "\n"):
            if ev.fatal:
                self.on_fatal(ev)

    def die(self, code: int, at: float) -> None:
        self.exit_code = code
        self.exited_at = at
        self.host.oom_kills += self.script.oom_kills
        self.host.psi = self.script.psi_full_avg10
        self.host.journal += self.script.oom_daemon_lines
        if self.script.kernel_oom:
            self.host.kernel_oom_pids.add(self.pid)

    def close(self) -> int:
        assert self.exit_code is not None, "close() before the fake attempt ended"
        if not self.closed:
            self.closed = True
            self.classifier.close()
        return self.exit_code

    def heartbeat(self) -> Heartbeat | None:
        if self.beats_seen == 0:
            return None
        b = self.script.heartbeats[self.beats_seen - 1]
        return Heartbeat(
            attempt=self.number, rank=0, pid=self.pid, time_s=_WALL_0 + self.t0 + b.at_s,
            event="step", global_step=b.step, loss=b.loss,
            max_memory_reserved_bytes=b.gpu_mem_bytes, host_rss_bytes=b.rss_bytes,
            capabilities=b.capabilities, nonfinite=b.nonfinite, nonfinite_step=b.nonfinite_step,
        )  # fmt: skip


@dataclass
class FakeHost:
    """A scripted :class:`~dsguard.run.host.Host` with a fake clock (see the module doc).

    Args:
        scripts: one per attempt, in order (attempt numbers continue a recovered run's, so
            the n-th *spawn* plays the n-th script).
        ckpt_dir: where scripted checkpoints appear (the job's checkpoint dir).
        checkpoints: checkpoints present at the start: step -> complete.
        memory_limit: the memory limit attempts run under.
        leftovers: attempt number -> pids still alive from a dead dsguard's attempt.
        quarantine_s: how long setting one checkpoint aside takes (a big dir on a slow disk);
            scripted stop requests can arrive in between.
        oom_counter_readable: False: the OOM-kill counter cannot be read (None).
        torch_facts: what the environment probe answers (default: nothing known).
        limit_how: how ``resources.host_memory_limit`` is enforced on this fake machine.
    """

    scripts: Sequence[Script]
    ckpt_dir: Path | None = None
    checkpoints: Mapping[int, bool] = field(default_factory=dict)
    memory_limit: int | None = None
    leftovers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    quarantine_s: float = 0.0
    #: What :meth:`observed_world_size` reports for every attempt (None: unknown).
    world_seen: tuple[int, str] | None = None
    oom_counter_readable: bool = True
    limit_how: LimitHow = "cgroup_v1"
    torch_facts: EnvFacts | None = None

    t: float = field(default=0.0, init=False)
    oom_kills: int = field(default=0, init=False)
    kernel_oom_pids: set[int] = field(default_factory=set, init=False)
    psi: float | None = field(default=None, init=False)
    journal: tuple[str, ...] = field(default=(), init=False)
    #: Every attempt memory limit created, and those removed again, in order.
    memory_limits: list[MemoryLimit] = field(default_factory=list, init=False)
    memory_limits_removed: list[MemoryLimit] = field(default_factory=list, init=False)
    attempts: list[_FakeAttempt] = field(default_factory=list, init=False)
    #: Every checkpoint path set aside, in order.
    quarantined: list[Path] = field(default_factory=list, init=False)
    #: pids passed to each GPU-release wait, in order.
    release_waits: list[list[int]] = field(default_factory=list, init=False)
    stop_requests: list[Path] = field(default_factory=list, init=False)
    #: The command of every spawn, in order (argv and environment as built).
    commands: list[Command] = field(default_factory=list, init=False)
    _ckpts: dict[Path, bool] = field(default_factory=dict, init=False)
    _timers: list[tuple[float, Callable[[], object]]] = field(default_factory=list, init=False)
    _orphans: dict[int, tuple[int, ...]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for step, complete in self.checkpoints.items():
            self._ckpts[self._ckpt_path(step)] = complete
        self._orphans = dict(self.leftovers)

    # -- script control ----------------------------------------------------------------------

    def at(self, t: float, action: Callable[[], object]) -> None:
        """Run ``action`` (e.g. a stop request) when the fake clock reaches ``t``."""
        self._timers.append((t, action))
        self._timers.sort(key=lambda x: x[0])

    def _ckpt_path(self, step: int) -> Path:
        assert self.ckpt_dir is not None, "FakeHost(ckpt_dir=...) is needed for checkpoints"
        return self.ckpt_dir / f"checkpoint-{step}"

    def add_checkpoint(self, step: int, complete: bool = True) -> None:
        self._ckpts[self._ckpt_path(step)] = complete

    def _live(self) -> _FakeAttempt | None:
        return next((a for a in self.attempts if a.alive), None)

    def _advance(self, t: float) -> None:
        t = max(t, self.t)
        while self._timers and self._timers[0][0] <= t:
            at, action = self._timers.pop(0)
            self._step_to(max(at, self.t))
            action()
        self._step_to(t)

    def _step_to(self, t: float) -> None:
        for a in self.attempts:
            a.advance(t)
        self.t = t

    # -- clocks and waits --------------------------------------------------------------------

    def monotonic(self) -> float:
        return _MONO_0 + self.t

    def wall(self) -> float:
        return _WALL_0 + self.t

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        deadline = self.t + max(0.0, seconds)
        while not wake.is_set() and self.t < deadline:
            due = [deadline, *(t for t, _ in self._timers)]
            for a in self.attempts:
                due += a.pending()
            self._advance(min(x for x in due if x > self.t))
        wake.clear()

    def identity(self) -> tuple[int, float]:
        return 4242, _WALL_0 - 100.0

    # -- attempts ----------------------------------------------------------------------------

    def spawn(
        self,
        cmd: Command,
        *,
        run_id: str,
        attempt: int,
        log_path: Path,
        classifier: StreamClassifier,
        on_fatal: Callable[[Evidence], None],
        echo: BinaryIO | None,
    ) -> Attempt:
        index = len(self.attempts)
        assert index < len(self.scripts), f"attempt {attempt} has no script"
        self.commands.append(cmd)
        script = self.scripts[index]
        if script.spawn_error is not None:
            raise OSError(2, script.spawn_error)
        a = _FakeAttempt(
            host=self, script=script, number=attempt, run_id=run_id, t0=self.t,
            log_path=log_path, classifier=classifier, on_fatal=on_fatal,
            last_output_at=self.monotonic(),
        )  # fmt: skip
        self.attempts.append(a)
        a.advance(self.t)
        return a

    def _by_ref(self, ref: AttemptRef) -> _FakeAttempt | None:
        return next((a for a in self.attempts if a.number == ref.attempt), None)

    def processes(self, ref: AttemptRef) -> list[int]:
        a = self._by_ref(ref)
        if a is None:
            return list(self._orphans.get(ref.attempt, ()))
        return [a.pid] if a.alive else []

    def end(self, ref: AttemptRef, grace_s: float, attempt: Attempt | None) -> EndReport:
        t0 = self.t
        a = self._by_ref(ref)
        if a is None:
            pids = self._orphans.pop(ref.attempt, ())
            return EndReport(tuple(pids), (), (), 0.0)
        if not a.alive:
            return EndReport((), (), (), 0.0)
        natural = a.natural_exit_t()
        terminated: tuple[int, ...] = (a.pid,) if grace_s > 0 else ()
        killed: tuple[int, ...] = ()
        if grace_s > 0 and natural is not None and natural <= t0 + grace_s:
            self._advance(natural)  # already on its way out: exits with its own code
        elif grace_s > 0 and a.script.sigterm_exit_code is not None:
            self._advance(t0 + min(_SIGTERM_EXIT_S, grace_s))
            a.die(a.script.sigterm_exit_code, self.t)
        else:
            self._advance(t0 + grace_s)
            killed = (a.pid,)
            a.die(-9, self.t)
        return EndReport(terminated, killed, (), self.t - t0)

    # -- memory and GPUs ---------------------------------------------------------------------

    def tree_rss_bytes(self, pid: int) -> int | None:
        a = self._live()
        return None if a is None or a.pid != pid else a.script.rss_bytes

    def tree_peaks(self, pid: int) -> tuple[int, int] | None:
        a = self._live()
        if a is None or a.pid != pid or a.script.vm_peak_bytes is None:
            return None
        return a.script.vm_peak_bytes, a.script.vm_hwm_bytes or 0

    def cgroup_peak_bytes(self, cgroup: MemoryCgroup) -> int | None:
        name = cgroup.dir.name
        a = next((x for x in self.attempts if name.endswith(f"-attempt-{x.number}")), None)
        return None if a is None else a.script.cgroup_peak_bytes

    def oom_kill_count(self, cgroup: MemoryCgroup | None = None) -> int | None:
        return self.oom_kills if self.oom_counter_readable else None

    def create_memory_limit(self, run_id: str, attempt: int, limit_bytes: int) -> MemoryLimit:
        if self.limit_how == "rlimit_as":
            ml = MemoryLimit("rlimit_as", limit_bytes, None, "FakeHost: no memory cgroup")
        else:
            version: Literal[1, 2] = 1 if self.limit_how == "cgroup_v1" else 2
            where = Path(f"/fake/cgroup/dsguard-{run_id}-attempt-{attempt}")
            ml = MemoryLimit(self.limit_how, limit_bytes, MemoryCgroup(version, where))
        self.memory_limits.append(ml)
        return ml

    def remove_memory_limit(self, limit: MemoryLimit) -> bool:
        self.memory_limits_removed.append(limit)
        return True

    def remove_left_cgroups(self, run_id: str, attempt: int) -> list[Path]:
        return []

    def memory_pressure(self, cgroup: MemoryCgroup | None) -> float | None:
        return self.psi

    def oom_daemon_lines(self, since_wall_s: float) -> list[str]:
        return list(self.journal)

    def kernel_oom_killed_pids(self) -> set[int]:
        return set(self.kernel_oom_pids)

    def memory_limit_bytes(self) -> int | None:
        return self.memory_limit

    def gpu_release(self, pids: list[int], tick: Callable[[], object]) -> ReleaseResult:
        self.release_waits.append(list(pids))
        tick()
        a = next((x for x in self.attempts if x.pid in pids), None)
        status = "released" if a is None else a.script.gpu
        if status == "held":
            assert a is not None
            self._advance(self.t + 60.0)
            return ReleaseResult("held", (Holder(0, a.pid, 2 << 30),), 60.0, 120)
        if status == "unknown":
            return ReleaseResult("unknown", (), 0.0, 1, "FakeHost: no NVML")
        self._advance(self.t + 0.5)
        return ReleaseResult("released", (), 0.5, 2)

    def gpu_busy(self, pids: list[int]) -> bool | None:
        a = self._live()
        if a is None or a.pid not in pids or a.script.gpu_busy_until_s is None:
            return None
        return self.t - a.t0 < a.script.gpu_busy_until_s

    def env_facts(
        self, python: str, env: Mapping[str, str], gpus: Sequence[int] | None
    ) -> EnvFacts:
        return self.torch_facts or EnvFacts(python=python)

    def remove_stale_build_locks(self, ext_dir: str) -> list[Path]:
        return []

    # -- checkpoints, heartbeats, control ----------------------------------------------------

    def point_latest(self, ckpt_dir: Path, tag: str | None) -> LatestChange | None:
        return None

    def observed_world_size(self, ref: AttemptRef) -> tuple[int, str] | None:
        return self.world_seen

    def cpu_only(self) -> bool:
        return True

    def free_port(self) -> int:
        return 29500

    def select_checkpoint(
        self, ckpt_dir: Path, world_size: int, layout: CheckpointLayout = CheckpointLayout.HF
    ) -> Selection:
        found = []
        for path, complete in self._ckpts.items():
            step = checkpoint_step(path)
            if path.parent == ckpt_dir and step is not None:
                reasons = () if complete else ("FakeHost: scripted as incomplete",)
                found.append(CheckpointVerdict(path, step, complete, reasons, 0))
        found.sort(key=lambda v: v.step, reverse=True)
        chosen = next((v for v in found if v.complete), None)
        floor = -1 if chosen is None else chosen.step
        return Selection(chosen, tuple(v for v in found if not v.complete and v.step > floor))

    def quarantine(self, path: Path, ckpt_dir: Path) -> Path:
        self._ckpts.pop(path, None)
        self.quarantined.append(path)
        if self.quarantine_s > 0:
            self._advance(self.t + self.quarantine_s)
        return ckpt_dir / ".dsguard-quarantine" / path.name

    def patch_checkpoint(self, path: Path, micro_batch_size: int) -> StatePatch | None:
        return None

    def heartbeats(self, heartbeat_dir: Path, attempt: int) -> list[Heartbeat]:
        a = next((x for x in self.attempts if x.number == attempt), None)
        hb = None if a is None else a.heartbeat()
        return [] if hb is None else [hb]

    def newest_heartbeat_s(self, heartbeat_dir: Path, prefix: str) -> float | None:
        m = _HEARTBEAT_NAME.match(prefix)
        if m is None:
            return None
        beats = self.heartbeats(heartbeat_dir, int(m.group(1)))
        return beats[0].time_s if beats else None

    def write_stop_request(self, path: Path, data: Mapping[str, Any]) -> None:
        self.stop_requests.append(path)
        a = self._live()
        if a is not None and a.script.save_on_stop_s is not None:
            a.stop_exit_at = self.t + a.script.save_on_stop_s
