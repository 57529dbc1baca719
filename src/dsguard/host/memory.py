"""Evidence that the kernel OOM killer acted, and the attempt's memory pressure.

The cgroup facts (limit, ``oom_kill`` counter) are read by :mod:`dsguard.host.cgroup`, the one
cgroup parser; this module adds the host's RAM, the attempt's resident memory and the kernel
log. A SIGKILL alone does not prove a host OOM (a user, a watchdog or a container runtime may
have sent it); a rise of the cgroup's ``oom_kill`` counter across an attempt is evidence
(children inherit dsguard's cgroup). Unreadable means *unknown* (None), never zero. Two more
sources confirm a kill: the kernel log naming one of the attempt's pids, and the attempt's
resident memory having been within 10 % of its memory limit in the last samples before it died.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
from pathlib import Path

import psutil

from dsguard.core.sigkill import NEAR_LIMIT_FRACTION
from dsguard.host import cgroup
from dsguard.host.cgroup import CGROUP_ROOT

__all__ = [
    "CGROUP_ROOT",
    "NEAR_LIMIT_FRACTION",
    "kernel_oom_killed_pids",
    "memory_limit_bytes",
    "oom_daemon_journal",
    "oom_kill_count",
    "psi_memory_full_avg10",
    "tree_peaks",
    "tree_rss_bytes",
]

# The counter is read by host.cgroup, the one cgroup parser; re-exported for the run loop.
oom_kill_count = cgroup.oom_kill_count


# -- the kernel log ----------------------------------------------------------------------------

_KILLED = re.compile(
    r"(?:Out of memory|oom-kill|Memory cgroup out of memory).*?(?:Killed process |pid=)(\d+)"
)


def kernel_oom_killed_pids(
    kmsg: Path = Path("/dev/kmsg"), max_records: int = 20000
) -> set[int] | None:
    """Pids the kernel log says the OOM killer killed, or None when the log is unreadable.

    ``/dev/kmsg`` opened non-blocking yields the ring buffer record by record and EAGAIN at its
    end. Reading needs CAP_SYSLOG or ``kernel.dmesg_restrict=0``; without it the answer is
    unknown, not "nobody was killed".
    """
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found: set[int] = set()
    try:
        for _ in range(max_records):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while reading: skip on
                    continue
                return None
            if not record:
                break
            text = record.decode("utf-8", errors="replace")
            found.update(int(m.group(1)) for m in _KILLED.finditer(text))
    finally:
        os.close(fd)
    return found


# -- memory pressure of the attempt -------------------------------------------------------------


def memory_limit_bytes(
    proc_cgroup: Path = cgroup.PROC_SELF_CGROUP, root: Path = CGROUP_ROOT
) -> int | None:
    """The tightest memory limit the attempt lives under: the cgroup's (see
    :func:`dsguard.host.cgroup.memory_limit`), else the host's RAM. None when nothing can be
    read."""
    limits: list[int] = []
    limit = cgroup.memory_limit(proc_cgroup, root)
    if limit is not None:
        limits.append(limit)
    with contextlib.suppress(Exception):
        limits.append(int(psutil.virtual_memory().total))
    return min(limits) if limits else None


def tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and all its descendants (None if it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _status_kib(pid: int, keys: tuple[str, ...]) -> dict[str, int]:
    """``VmPeak:``-style lines of ``/proc/<pid>/status`` in bytes (those it has)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in keys:
                out[key] = int(rest.split()[0]) * 1024  # "VmPeak:  1234 kB"
    return out


def tree_peaks(pid: int) -> tuple[int, int] | None:
    """(the largest ``VmPeak`` of any process in ``pid``'s tree, the sum of their ``VmHWM``),
    or None when the tree is gone or nothing could be read.

    An unmodified training script sends no heartbeats, so the only peaks dsguard can have
    are the ones it reads from outside. ``VmPeak`` (peak virtual memory) is per process, as
    ``RLIMIT_AS`` is: the largest process (the rank) is what hits it. ``VmHWM`` (peak resident
    set) summed over the tree is what a memory cgroup or the RAM limits, less the page cache
    and with shared pages counted per process (proc(5))."""
    try:
        root = psutil.Process(pid)
        pids = [pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return None
    peak = hwm = 0
    for p in pids:
        got = _status_kib(p, ("VmPeak", "VmHWM"))
        peak = max(peak, got.get("VmPeak", 0))
        hwm += got.get("VmHWM", 0)
    return (peak, hwm) if peak or hwm else None


# -- memory pressure and user-space OOM daemons ------------------------------------------------


def psi_memory_full_avg10(cgroup_dir: Path | None = None) -> float | None:
    """PSI ``full avg10`` of memory (percent): the attempt's cgroup v2 ``memory.pressure``
    when given and present, else the whole machine's ``/proc/pressure/memory``. None when the
    kernel has no PSI (``psi=0``, kernels before 4.20)."""
    paths = [Path("/proc/pressure/memory")]
    if cgroup_dir is not None:
        paths.insert(0, cgroup_dir / "memory.pressure")
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                if line.startswith("full "):
                    fields = dict(f.split("=", 1) for f in line.split()[1:])
                    return float(fields["avg10"])
    return None


def oom_daemon_journal(since_wall_s: float, timeout_s: float = 5.0) -> list[str]:
    """What systemd-oomd and earlyoom logged to the journal since ``since_wall_s`` (empty
    when there is no journal, no journalctl, or it does not answer in time)."""
    argv = [
        "journalctl", "--quiet", "--no-pager", "--output=cat", f"--since=@{int(since_wall_s)}",
        "--identifier=systemd-oomd", "--identifier=earlyoom",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.splitlines()[-200:] if done.returncode == 0 else []
