"""The memory cgroup dsguard (and every attempt, which inherits it) lives in: v1 and v2.

One parser of ``/proc/self/cgroup`` for every reader (the run loop's OOM evidence, ``dsguard
doctor``'s memory row); copies of it had already drifted (one took the first limit it found,
another the tightest). The facts read here:

* the memory **limit**: v2 ``memory.max``, v1 ``memory.limit_in_bytes``. "max" (v2) and the
  v1 "unlimited" value (a page-rounded ``LONG_MAX``) mean no limit;
* the **oom_kill counter**: v2 ``memory.events`` counts processes of the cgroup subtree killed
  by any OOM killer (global or the cgroup's own limit); v1 reports it in
  ``memory.oom_control`` (kernel 4.13+). A rise across an attempt is evidence of a kernel OOM
  kill (a bare SIGKILL is not: a user or a container runtime may have sent it);
* the memory **usage**: v2 ``memory.current``, v1 ``memory.usage_in_bytes``.

See the kernel's ``Documentation/admin-guide/cgroup-v2.rst`` and
``Documentation/admin-guide/cgroup-v1/memory.rst``. Unreadable means *unknown* (None), never
zero or "unlimited".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "CGROUP_ROOT",
    "PROC_SELF_CGROUP",
    "MemoryCgroup",
    "group_oom_kill_count",
    "group_peak_bytes",
    "memory_cgroups",
    "memory_limit",
    "memory_usage",
    "oom_kill_count",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
#: Limits at or above this are the v1 "no limit" value (LONG_MAX rounded down to a page).
_UNLIMITED = 1 << 60


@dataclass(frozen=True, slots=True)
class MemoryCgroup:
    """The directory of one memory controller hierarchy the process is in."""

    version: Literal[1, 2]
    dir: Path

    @property
    def limit_file(self) -> Path:
        return self.dir / ("memory.max" if self.version == 2 else "memory.limit_in_bytes")

    @property
    def oom_file(self) -> Path:
        return self.dir / ("memory.events" if self.version == 2 else "memory.oom_control")

    @property
    def usage_file(self) -> Path:
        return self.dir / ("memory.current" if self.version == 2 else "memory.usage_in_bytes")


def memory_cgroups(
    proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = CGROUP_ROOT
) -> list[MemoryCgroup]:
    """The memory cgroups listed in ``proc_cgroup`` (``hier:controllers:path`` lines): the v2
    unified entry (``0::/path``) and any v1 hierarchy with the memory controller. Empty when
    the file cannot be read (not in a container with /proc, or not Linux)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    out: list[MemoryCgroup] = []
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        rel = rel.lstrip("/")
        if hier == "0" and controllers == "":
            out.append(MemoryCgroup(2, root / rel))
        elif "memory" in controllers.split(","):
            out.append(MemoryCgroup(1, root / "memory" / rel))
    return out


def _read_int(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = path.read_text().strip()
        if text != "max":
            return int(text)
    return None


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


def memory_limit(proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """The tightest cgroup memory limit in bytes, or None when there is none or it is unknown."""
    limits = [
        n
        for cg in memory_cgroups(proc_cgroup, root)
        if (n := _read_int(cg.limit_file)) is not None and n < _UNLIMITED
    ]
    return min(limits) if limits else None


def oom_kill_count(proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """The cgroup's ``oom_kill`` counter (the first hierarchy that reports one), or None."""
    for cg in memory_cgroups(proc_cgroup, root):
        found = _read_counter(cg.oom_file, "oom_kill")
        if found is not None:
            return found
    return None


def group_oom_kill_count(cg: MemoryCgroup) -> int | None:
    """The ``oom_kill`` counter of one given cgroup (an attempt's own), or None."""
    return _read_counter(cg.oom_file, "oom_kill")


def group_peak_bytes(cg: MemoryCgroup) -> int | None:
    """The most one given cgroup (an attempt's own) was ever charged: v1
    ``memory.max_usage_in_bytes``, v2 ``memory.peak`` (kernel 5.19+). None when unreadable.
    Read before the cgroup is removed; it is the attempt's whole tree, page cache included,
    which is exactly what the limit counted."""
    name = "memory.peak" if cg.version == 2 else "memory.max_usage_in_bytes"
    return _read_int(cg.dir / name)


def memory_usage(proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """Bytes the cgroup is charged for now (page cache included), or None when unknown."""
    for cg in memory_cgroups(proc_cgroup, root):
        found = _read_int(cg.usage_file)
        if found is not None:
            return found
    return None
