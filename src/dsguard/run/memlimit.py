"""``resources.host_memory_limit`` as a real kernel limit: a memory cgroup per attempt.

A memory cgroup is what a user's workstation, a container or a Slurm job gives a trainer: when
the attempt's resident memory (page cache it cannot reclaim included) reaches the limit, the
kernel's OOM killer SIGKILLs the biggest process in it, the launcher reports ``-9``, and the
cgroup's ``oom_kill`` counter rises. That is the failure the host-OOM ladder heals, so dsguard
reproduces it exactly where it can, and reads *that* cgroup's counter to confirm the kill
(on cgroup v1 the counter of a parent does not move when a child's limit kills).

Where the limit comes from, in order:

* **cgroup v1** (``/sys/fs/cgroup/memory``, writable by root): a child of dsguard's own memory
  cgroup, ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted, so the attempt is killed rather than swapped out);
* **cgroup v2** (a delegated subtree: dsguard's cgroup already lets its children use the
  memory controller): a child with ``memory.max`` and ``memory.swap.max = 0``;
* otherwise **RLIMIT_AS** on every process of the attempt (set by the exec shim): a limit on
  virtual address space, which fails an allocation (``can't allocate memory``) instead of
  killing, and which CUDA's large reservations make unusable on GPU jobs.

The attempt's first process (``run/exec_shim``) writes its own pid to the cgroup's
``cgroup.procs`` before it execs the training command, so no allocation of the attempt
escapes the limit; its children inherit the cgroup. The cgroup is removed after the attempt.
See the kernel's ``Documentation/admin-guide/cgroup-v1/memory.rst`` and ``cgroup-v2.rst``.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsguard.host.cgroup import CGROUP_ROOT, PROC_SELF_CGROUP, MemoryCgroup, memory_cgroups

__all__ = [
    "LimitHow",
    "MemoryLimit",
    "attempt_cgroup_name",
    "create_memory_limit",
    "remove_left_cgroups",
    "remove_memory_limit",
]

LimitHow = Literal["cgroup_v1", "cgroup_v2", "rlimit_as"]


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """How one attempt's host-memory limit is enforced."""

    how: LimitHow
    limit_bytes: int
    #: The attempt's own memory cgroup (None for RLIMIT_AS).
    cgroup: MemoryCgroup | None = None
    #: Why no cgroup could be used (RLIMIT_AS only).
    reason: str | None = None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _make_v1(parent: MemoryCgroup, name: str, limit: int) -> MemoryCgroup:
    child = MemoryCgroup(1, parent.dir / name)
    child.dir.mkdir(mode=0o755)
    try:
        _write(child.limit_file, str(limit))
        memsw = child.dir / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # only after limit_in_bytes: memsw may never be below it
            _write(memsw, str(limit))
        oom_control = child.oom_file.read_text() if child.oom_file.exists() else ""
        if "oom_kill_disable 1" in oom_control:  # inherited from the parent: re-enable
            _write(child.oom_file, "0")
    except OSError:
        _rmdir(child.dir)
        raise
    return child


def _make_v2(parent: MemoryCgroup, name: str, limit: int) -> MemoryCgroup:
    subtree = (parent.dir / "cgroup.subtree_control").read_text().split()
    if "memory" not in subtree:
        # Enabling it fails (EBUSY) while dsguard itself is a process of that cgroup (the
        # no-internal-process rule); a delegated subtree has it enabled already.
        _write(parent.dir / "cgroup.subtree_control", "+memory")
    child = MemoryCgroup(2, parent.dir / name)
    child.dir.mkdir(mode=0o755)
    try:
        _write(child.limit_file, str(limit))
        swap = child.dir / "memory.swap.max"
        if swap.exists():
            _write(swap, "0")
    except OSError:
        _rmdir(child.dir)
        raise
    return child


def create_memory_limit(
    run_id: str,
    attempt: int,
    limit_bytes: int,
    *,
    proc_cgroup: Path = PROC_SELF_CGROUP,
    root: Path = CGROUP_ROOT,
) -> MemoryLimit:
    """A fresh memory cgroup for the attempt under dsguard's own, or RLIMIT_AS with the reason."""
    name = attempt_cgroup_name(run_id, attempt)
    errors: list[str] = []
    groups = memory_cgroups(proc_cgroup, root)
    # v1 first: on a hybrid host the unified hierarchy has no memory controller.
    for cg in sorted(groups, key=lambda g: g.version):
        if not cg.limit_file.exists() and not (cg.dir / "cgroup.controllers").exists():
            continue
        try:
            if cg.version == 1:
                return MemoryLimit("cgroup_v1", limit_bytes, _make_v1(cg, name, limit_bytes))
            return MemoryLimit("cgroup_v2", limit_bytes, _make_v2(cg, name, limit_bytes))
        except OSError as exc:
            errors.append(f"cgroup v{cg.version} {cg.dir}: {exc.strerror or exc}")
    reason = "; ".join(errors) if errors else "no memory cgroup found in /proc/self/cgroup"
    return MemoryLimit("rlimit_as", limit_bytes, None, reason)


def attempt_cgroup_name(run_id: str, attempt: int) -> str:
    return f"dsguard-{run_id}-attempt-{attempt}"


def remove_left_cgroups(
    run_id: str,
    attempt: int,
    *,
    proc_cgroup: Path = PROC_SELF_CGROUP,
    root: Path = CGROUP_ROOT,
) -> list[Path]:
    """Remove the cgroup of an attempt a dead dsguard left behind (once its processes were
    ended): found by name under this dsguard's memory cgroups. The paths removed."""
    removed: list[Path] = []
    for cg in memory_cgroups(proc_cgroup, root):
        path = cg.dir / attempt_cgroup_name(run_id, attempt)
        how: LimitHow = "cgroup_v1" if cg.version == 1 else "cgroup_v2"
        if path.is_dir() and remove_memory_limit(
            MemoryLimit(how, 0, MemoryCgroup(cg.version, path))
        ):
            removed.append(path)
    return removed


def _rmdir(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        try:
            os.rmdir(path)
        except OSError:
            return False
    return True


def remove_memory_limit(limit: MemoryLimit, *, tries: int = 20) -> bool:
    """Remove the attempt's cgroup once its processes are gone (a just-killed process may
    still be exiting: EBUSY for a moment). False when it stays (harmless: empty, limited)."""
    if limit.cgroup is None:
        return True
    for _ in range(tries):
        if _rmdir(limit.cgroup.dir):
            return True
        time.sleep(0.05)
    return False
