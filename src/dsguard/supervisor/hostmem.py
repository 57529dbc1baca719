"""Evidence that the kernel OOM killer acted: the cgroup's ``oom_kill`` counter.

A SIGKILL alone does not prove a host OOM (a user, a watchdog or a container runtime may have
sent it). cgroup v2 ``memory.events`` counts processes of the cgroup subtree killed by any OOM
killer (global or the cgroup's own limit); cgroup v1 reports ``oom_kill`` in
``memory.oom_control``. Children inherit dsguard's cgroup, so a rise across an attempt is
evidence. Unreadable means *unknown* (None), never zero.
"""

from __future__ import annotations

from pathlib import Path

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
