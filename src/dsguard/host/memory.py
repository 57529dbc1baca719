"""Evidence that the kernel OOM killer acted: the cgroup's ``oom_kill`` counter.

A SIGKILL alone does not prove a host OOM (a user, a watchdog or a container runtime may have
sent it). cgroup v2 ``memory.events`` counts processes of the cgroup subtree killed by any OOM
killer (global or the cgroup's own limit); cgroup v1 reports ``oom_kill`` in
``memory.oom_control``. Children inherit dsguard's cgroup, so a rise across an attempt is
evidence. Unreadable means *unknown* (None), never zero. Two more sources confirm a kill:
the kernel log naming one of the attempt's pids, and the attempt's resident memory having been
within 10 % of its memory limit in the last samples before it died.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read_counter(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


def oom_kill_count(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> int | None:
    """Current oom_kill count of our cgroup, or None when it cannot be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        rel = rel.lstrip("/")
        if hier == "0" and controllers == "":
            found = _read_counter(root / rel / "memory.events", "oom_kill")
            if found is not None:
                return found
        elif "memory" in controllers.split(","):
            found = _read_counter(root / "memory" / rel / "memory.oom_control", "oom_kill")
            if found is not None:
                return found
    return None


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
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> int | None:
    """The tightest memory limit the attempt lives under: cgroup memory.max (v2) or
    memory.limit_in_bytes (v1), else the host's RAM. None when nothing can be read."""
    limits: list[int] = []
    with contextlib.suppress(OSError):
        for line in proc_cgroup.read_text().splitlines():
            hier, _, rest = line.partition(":")
            controllers, _, rel = rest.partition(":")
            rel = rel.lstrip("/")
            if hier == "0" and controllers == "":
                path = root / rel / "memory.max"
            elif "memory" in controllers.split(","):
                path = root / "memory" / rel / "memory.limit_in_bytes"
            else:
                continue
            with contextlib.suppress(OSError, ValueError):
                text = path.read_text().strip()
                if text != "max" and int(text) < 1 << 60:
                    limits.append(int(text))
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


#: RSS this close to the limit just before a SIGKILL is taken as the OOM killer's work.
NEAR_LIMIT_FRACTION = 0.9
