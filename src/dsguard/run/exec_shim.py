"""``python -m dsguard.run.exec_shim [--cgroup DIR] [--as-bytes N] --parent PID -- CMD ARGS``.

The first process of every attempt. It sets up what must hold *before* the training command
runs, then execs it (same pid, same session), so nothing races the child:

* the parent-death signal (Linux ``PR_SET_PDEATHSIG``): if dsguard dies (SIGKILL, power
  loss of its cgroup, a crash), the launcher gets SIGTERM and its own handler ends its ranks
  (the DeepSpeed per-node launcher and torchrun's agent both do). SIGTERM, not SIGKILL, for
  exactly that reason. A restarted dsguard still sweeps leftovers by session and marker.
* the attempt's memory limit: it joins the attempt's memory cgroup (``--cgroup DIR``: its pid
  into ``DIR/cgroup.procs``) before the training command can allocate anything, so the kernel's
  OOM killer acts exactly as on a limited workstation (``run/memlimit``); where no cgroup can be
  joined, RLIMIT_AS (``--as-bytes``), inherited by every process the command forks.

``preexec_fn`` could do both, but it runs between fork and exec in a process that has
threads, where a lock held by another thread deadlocks the child; an exec shim cannot.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Sequence

from dsguard.exitcodes import EXIT_SHIM_CANNOT_EXEC, EXIT_SHIM_ORPHANED, EXIT_SUCCEEDED

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl: the sweep still applies
        return False


def _join_cgroup(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    except OSError as exc:
        print(
            f"dsguard-exec-shim: cannot join memory cgroup {path}: {exc.strerror}; "
            "falling back to RLIMIT_AS",
            file=sys.stderr,
        )
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsguard-exec-shim")
    parser.add_argument("--as-bytes", type=int, help="RLIMIT_AS for every process (bytes)")
    parser.add_argument("--cgroup", help="memory cgroup dir the attempt joins before exec")
    parser.add_argument("--parent", type=int, help="dsguard's pid (parent-death signal)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("no command to exec")
    if ns.parent is not None:
        _set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != ns.parent:
            # dsguard died between fork and prctl: the signal will never come. Do not train
            # unsupervised.
            return EXIT_SHIM_ORPHANED
    if ns.cgroup is not None and _join_cgroup(ns.cgroup):
        ns.as_bytes = None  # the cgroup is the limit; RLIMIT_AS is only the fallback
    if ns.as_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (ns.as_bytes, ns.as_bytes))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"dsguard-exec-shim: cannot exec {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return EXIT_SHIM_CANNOT_EXEC
    return EXIT_SUCCEEDED  # unreachable: execvp does not return on success


if __name__ == "__main__":
    sys.exit(main())
