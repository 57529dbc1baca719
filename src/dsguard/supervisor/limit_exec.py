"""``python -m dsguard.supervisor.limit_exec --as-bytes N -- CMD ARGS``: set limits, then exec.

Limits must be in place before the training command allocates anything, and every process
it forks inherits them. Setting them from the supervisor after spawn would race the child;
``preexec_fn`` is unsafe in a process with threads (a lock held by another thread at fork time
deadlocks the child). A tiny exec shim has neither problem: it is the attempt's first
process, sets the limit on itself, and becomes the training command (same pid, same session).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsguard-limit-exec")
    parser.add_argument("--as-bytes", type=int, required=True, help="RLIMIT_AS (per process)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("no command to exec")
    resource.setrlimit(resource.RLIMIT_AS, (ns.as_bytes, ns.as_bytes))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"dsguard-limit-exec: cannot exec {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # unreachable: execvp does not return on success


if __name__ == "__main__":
    sys.exit(main())
