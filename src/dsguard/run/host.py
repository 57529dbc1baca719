"""The one seam between the run loop and the machine it supervises on.

Every OS touch of the loop goes through a :class:`Host`: starting an attempt and reading its
output, ending its process tree, the memory and GPU facts that explain a kill, checkpoints on
disk, heartbeats, the clocks and the waits. :class:`RealHost` does them with the functions
dsguard always used; :class:`dsguard.testing.FakeHost` plays a script with a fake clock, so
every path of the loop (an OOM ladder walk, a hang, a stop in the middle of a backoff, an
attempt that exits 0 while being ended) is pinned in milliseconds instead of minutes of real
processes, which could not reproduce the races at all.

An attempt's output is read by the host, not by the loop: the real host pumps the child's
pipe through :class:`dsguard.run.watch.OutputPump` (the child must never block on a full
pipe), a fake host feeds scripted lines. Either way every line goes into the loop's
:class:`~dsguard.core.classify.StreamClassifier`, and a fatal line calls ``on_fatal`` at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import psutil

from dsguard.core.classify import Evidence, StreamClassifier
from dsguard.core.envfacts import EnvFacts
from dsguard.core.events import LogWriteFailed
from dsguard.host.cgroup import MemoryCgroup, group_oom_kill_count, group_peak_bytes
from dsguard.host.envfacts import detect, stale_build_locks
from dsguard.host.gpu import GpuProbe, GpuSnapshot, ReleaseResult, wait_for_release
from dsguard.host.memory import (
    kernel_oom_killed_pids,
    memory_limit_bytes,
    oom_daemon_journal,
    oom_kill_count,
    psi_memory_full_avg10,
    tree_peaks,
    tree_rss_bytes,
)
from dsguard.job.model import CheckpointLayout
from dsguard.protocol import Heartbeat
from dsguard.run import checkpoints as ckpts
from dsguard.run import layouts
from dsguard.run.heartbeat import read_heartbeats
from dsguard.run.launch import Command
from dsguard.run.layouts import LatestChange
from dsguard.run.memlimit import (
    MemoryLimit,
    create_memory_limit,
    remove_left_cgroups,
    remove_memory_limit,
)
from dsguard.run.proc import AttemptRef, Child, EndReport, attempt_processes, end_attempt
from dsguard.run.proc import spawn as spawn_child
from dsguard.run.ranks import free_port, nvidia_devices_present, observed_world_size
from dsguard.run.resume import StatePatch, patch_train_batch_size
from dsguard.run.state import write_json_atomic
from dsguard.run.watch import OutputPump

#: Bound on the wait for a killed attempt's GPU memory to be released before relaunching.
GPU_RELEASE_TIMEOUT_S = 60.0
#: How long the output pump may take to drain after the attempt's processes are gone.
_PUMP_DRAIN_S = 5.0


class Attempt(Protocol):
    """One started attempt: its launcher, its process-tree identity and its output."""

    @property
    def ref(self) -> AttemptRef: ...

    @property
    def pid(self) -> int: ...

    @property
    def last_output_at(self) -> float:
        """The host's monotonic time of the newest output (the spawn time before any)."""
        ...

    @property
    def output_bytes(self) -> int: ...

    @property
    def log_dropped_bytes(self) -> int:
        """Output that could not be written to the attempt log (a full disk), dropped."""
        ...

    @property
    def log_failure(self) -> LogWriteFailed | None:
        """The attempt log's first write failure, as ``log_write_failed`` records it."""
        ...

    def poll(self) -> int | None:
        """The launcher's exit code once it exited, else None (never blocks)."""
        ...

    def close(self) -> int:
        """Wait for the launcher, drain the rest of its output into the classifier, and
        return its exit code. Called once every process of the attempt is gone."""
        ...


class Host(Protocol):
    """Everything the run loop does to or reads from the machine (see the module doc)."""

    def monotonic(self) -> float: ...

    def wall(self) -> float:
        """Seconds since the epoch (heartbeat files carry wall-clock mtimes)."""
        ...

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        """Wait ``seconds`` or until ``wake`` is set (a fatal line, a stop request); clears it."""
        ...

    def identity(self) -> tuple[int, float]:
        """dsguard's own pid and process start time (state.json: who supervises)."""
        ...

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
        """Start the attempt and its output reader. Raises OSError if it cannot start."""
        ...

    def processes(self, ref: AttemptRef) -> list[int]:
        """Pids of every live process of the attempt (by session and marker)."""
        ...

    def end(self, ref: AttemptRef, grace_s: float, attempt: Attempt | None) -> EndReport:
        """SIGTERM the attempt's tree, wait ``grace_s``, SIGKILL the rest, reap."""
        ...

    def tree_rss_bytes(self, pid: int) -> int | None: ...

    def tree_peaks(self, pid: int) -> tuple[int, int] | None:
        """(largest VmPeak in ``pid``'s tree, sum of its VmHWM), None when unknown."""
        ...

    def cgroup_peak_bytes(self, cgroup: MemoryCgroup) -> int | None:
        """The most the attempt's own memory cgroup was charged, None when unknown."""
        ...

    def oom_kill_count(self, cgroup: MemoryCgroup | None = None) -> int | None:
        """The OOM-kill counter of ``cgroup`` (an attempt's own) or of dsguard's; None when
        unknown."""
        ...

    def kernel_oom_killed_pids(self) -> set[int]: ...

    def memory_limit_bytes(self) -> int | None: ...

    def create_memory_limit(self, run_id: str, attempt: int, limit_bytes: int) -> MemoryLimit:
        """The attempt's memory cgroup with ``limit_bytes`` (or the RLIMIT_AS fallback)."""
        ...

    def remove_memory_limit(self, limit: MemoryLimit) -> bool:
        """Remove the attempt's cgroup after its processes are gone; False if it stays."""
        ...

    def remove_left_cgroups(self, run_id: str, attempt: int) -> list[Path]:
        """Remove the memory cgroup of an attempt a dead dsguard left (after its processes
        were ended); the paths removed."""
        ...

    def memory_pressure(self, cgroup: MemoryCgroup | None) -> float | None:
        """PSI memory ``full avg10`` in percent, the attempt's cgroup's where it has one."""
        ...

    def oom_daemon_lines(self, since_wall_s: float) -> list[str]:
        """systemd-oomd / earlyoom journal lines since then (empty: none or no journal)."""
        ...

    def gpu_release(self, pids: list[int], tick: Callable[[], object]) -> ReleaseResult:
        """Wait (bounded) until ``pids`` hold no GPU memory; ``tick`` keeps systemd fed."""
        ...

    def gpu_busy(self, pids: list[int]) -> bool | None:
        """Whether the GPUs ``pids`` use compute (a second hang signal); None = unknown."""
        ...

    def env_facts(
        self, python: str, env: Mapping[str, str], gpus: Sequence[int] | None
    ) -> EnvFacts: ...

    def remove_stale_build_locks(self, ext_dir: str) -> list[Path]:
        """Remove JIT-build locks no live process holds; the paths removed."""
        ...

    def select_checkpoint(
        self, ckpt_dir: Path, world_size: int, layout: CheckpointLayout = CheckpointLayout.HF
    ) -> ckpts.Selection:
        """The newest complete checkpoint of ``layout`` (``auto``: detected) and the
        incomplete newer ones; the Selection names the layout judged."""
        ...

    def point_latest(self, ckpt_dir: Path, tag: str | None) -> LatestChange | None:
        """Point DeepSpeed's ``latest`` at ``tag`` (None: move it aside). Raises OSError."""
        ...

    def observed_world_size(self, ref: AttemptRef) -> tuple[int, str] | None:
        """The ranks the attempt really runs, and how that was seen; None while unknown."""
        ...

    def cpu_only(self) -> bool:
        """No NVIDIA GPU on this host (decides how accelerate starts several processes)."""
        ...

    def free_port(self) -> int:
        """A TCP port free on 127.0.0.1 now (a one-process rendezvous's MASTER_PORT)."""
        ...

    def quarantine(self, path: Path, ckpt_dir: Path) -> Path: ...

    def patch_checkpoint(self, path: Path, micro_batch_size: int) -> StatePatch | None: ...

    def heartbeats(self, heartbeat_dir: Path, attempt: int) -> list[Heartbeat]: ...

    def newest_heartbeat_s(self, heartbeat_dir: Path, prefix: str) -> float | None:
        """Wall time of the newest heartbeat file whose name starts with ``prefix``."""
        ...

    def write_stop_request(self, path: Path, data: Mapping[str, Any]) -> None: ...


class RealAttempt:
    """A real launcher process whose pipe an :class:`OutputPump` thread drains."""

    def __init__(self, child: Child, pump: OutputPump) -> None:
        self._child = child
        self._pump = pump

    @property
    def ref(self) -> AttemptRef:
        return self._child.ref

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def last_output_at(self) -> float:
        return self._pump.last_output_at

    @property
    def output_bytes(self) -> int:
        return self._pump.bytes_read

    @property
    def log_dropped_bytes(self) -> int:
        return self._pump.log_dropped_bytes

    @property
    def log_failure(self) -> LogWriteFailed | None:
        return self._pump.log_failure

    def poll(self) -> int | None:
        return self._child.popen.poll()

    def close(self) -> int:
        popen = self._child.popen
        popen.wait()
        # Every process of the attempt is gone, so the pipe holds all there will be: let the
        # pump drain it and end without waiting out its coalescing window.
        self._pump.stop()
        if not self._pump.join(_PUMP_DRAIN_S):
            self._pump.stop()  # a process outside our reach holds the pipe: stop reading it
            self._pump.join(_PUMP_DRAIN_S)
        if popen.stdout is not None:
            popen.stdout.close()
        if self._pump.error is not None:
            raise self._pump.error
        return popen.returncode


class RealHost:
    """The machine, through the functions of ``run/proc``, ``host/*`` and ``run/checkpoints``.

    Args:
        gpu_release: waits (bounded) until the given pids hold no GPU memory; default: NVML
            for up to :data:`GPU_RELEASE_TIMEOUT_S`.
        gpu_busy: whether the attempt's GPUs are busy; default: NVML utilisation of the
            devices the pids use.
        memory_limit: the memory limit attempts live under (cgroup or host RAM).
        oom_probe: the host-OOM evidence counter (see ``host/memory``).
    """

    def __init__(
        self,
        *,
        gpu_release: Callable[[list[int]], ReleaseResult] | None = None,
        gpu_busy: Callable[[list[int]], bool | None] | None = None,
        memory_limit: Callable[[], int | None] = memory_limit_bytes,
        oom_probe: Callable[[], int | None] = oom_kill_count,
    ) -> None:
        self._gpu_release = gpu_release
        self._gpu_busy = gpu_busy
        self._memory_limit = memory_limit
        self._oom_probe = oom_probe
        self._probe: GpuProbe | None = None

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        wake.wait(seconds)
        wake.clear()

    def identity(self) -> tuple[int, float]:
        return os.getpid(), psutil.Process().create_time()

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
        child = spawn_child(cmd, run_id=run_id, attempt=attempt)
        pump = OutputPump(
            child.stdout_fd, log_path, classifier, on_fatal=on_fatal, echo=echo,
            monotonic=self.monotonic,
        )  # fmt: skip
        pump.start()
        return RealAttempt(child, pump)

    def processes(self, ref: AttemptRef) -> list[int]:
        return [p.pid for p in attempt_processes(ref)]

    def end(self, ref: AttemptRef, grace_s: float, attempt: Attempt | None) -> EndReport:
        # Reaping the launcher (our child) while waiting keeps it from lingering as a zombie.
        reap: Callable[[], object] = (lambda: None) if attempt is None else attempt.poll
        return end_attempt(ref, grace_s, reap=reap)

    def tree_rss_bytes(self, pid: int) -> int | None:
        return tree_rss_bytes(pid)

    def tree_peaks(self, pid: int) -> tuple[int, int] | None:
        return tree_peaks(pid)

    def cgroup_peak_bytes(self, cgroup: MemoryCgroup) -> int | None:
        return group_peak_bytes(cgroup)

    def oom_kill_count(self, cgroup: MemoryCgroup | None = None) -> int | None:
        return self._oom_probe() if cgroup is None else group_oom_kill_count(cgroup)

    def kernel_oom_killed_pids(self) -> set[int]:
        return set(kernel_oom_killed_pids() or ())

    def memory_limit_bytes(self) -> int | None:
        return self._memory_limit()

    def create_memory_limit(self, run_id: str, attempt: int, limit_bytes: int) -> MemoryLimit:
        return create_memory_limit(run_id, attempt, limit_bytes)

    def remove_memory_limit(self, limit: MemoryLimit) -> bool:
        return remove_memory_limit(limit)

    def remove_left_cgroups(self, run_id: str, attempt: int) -> list[Path]:
        return remove_left_cgroups(run_id, attempt)

    def memory_pressure(self, cgroup: MemoryCgroup | None) -> float | None:
        v2_dir = cgroup.dir if cgroup is not None and cgroup.version == 2 else None
        return psi_memory_full_avg10(v2_dir)

    def oom_daemon_lines(self, since_wall_s: float) -> list[str]:
        return oom_daemon_journal(since_wall_s)

    def gpu_release(self, pids: list[int], tick: Callable[[], object]) -> ReleaseResult:
        if self._gpu_release is not None:
            return self._gpu_release(pids)
        return wait_for_release(pids, GPU_RELEASE_TIMEOUT_S, tick=tick)

    def gpu_busy(self, pids: list[int]) -> bool | None:
        if self._gpu_busy is not None:
            return self._gpu_busy(pids)
        return self._nvml_busy(pids)

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

    def env_facts(
        self, python: str, env: Mapping[str, str], gpus: Sequence[int] | None
    ) -> EnvFacts:
        return detect(python, env=env, gpus=gpus)

    def remove_stale_build_locks(self, ext_dir: str) -> list[Path]:
        removed: list[Path] = []
        for lock in stale_build_locks(ext_dir):
            with contextlib.suppress(OSError):
                lock.unlink()
                removed.append(lock)
        return removed

    def select_checkpoint(
        self, ckpt_dir: Path, world_size: int, layout: CheckpointLayout = CheckpointLayout.HF
    ) -> ckpts.Selection:
        return layouts.select(ckpt_dir, layout, world_size)

    def point_latest(self, ckpt_dir: Path, tag: str | None) -> LatestChange | None:
        return layouts.point_latest(ckpt_dir, tag)

    def observed_world_size(self, ref: AttemptRef) -> tuple[int, str] | None:
        return observed_world_size(attempt_processes(ref))

    def cpu_only(self) -> bool:
        return not nvidia_devices_present()

    def free_port(self) -> int:
        return free_port()

    def quarantine(self, path: Path, ckpt_dir: Path) -> Path:
        return ckpts.quarantine(path, ckpt_dir)

    def patch_checkpoint(self, path: Path, micro_batch_size: int) -> StatePatch | None:
        return patch_train_batch_size(path, micro_batch_size)

    def heartbeats(self, heartbeat_dir: Path, attempt: int) -> list[Heartbeat]:
        return read_heartbeats(heartbeat_dir, attempt)

    def newest_heartbeat_s(self, heartbeat_dir: Path, prefix: str) -> float | None:
        newest: float | None = None
        with contextlib.suppress(OSError):
            for entry in os.scandir(heartbeat_dir):
                if entry.name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        m = entry.stat().st_mtime
                        newest = m if newest is None else max(newest, m)
        return newest

    def write_stop_request(self, path: Path, data: Mapping[str, Any]) -> None:
        write_json_atomic(path, dict(data))
