"""``python -m bench.gpu.probe TRAINER-ARGS``: ``python -m dsguard.train`` plus its peak memory.

The same ``main`` as the reference trainer; on the way out (finished or raised) it prints one
line to stderr, ``gpu-bench-probe: {json}``, with the process's ``VmPeak`` (what RLIMIT_AS
limits) and ``VmHWM`` and, when CUDA was used, torch's ``max_memory_allocated`` /
``max_memory_reserved``. Used by the throughput sweep (unsupervised runs) and to calibrate
the dry run's host-memory limits. The supervised scenarios run ``dsguard.train`` itself.
"""

from __future__ import annotations

import atexit
import json
import sys
from pathlib import Path
from typing import Any

MARK = "gpu-bench-probe:"


def memory_facts() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmPeak", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                out["torch_max_allocated"] = int(torch.cuda.max_memory_allocated())
                out["torch_max_reserved"] = int(torch.cuda.max_memory_reserved())
        except Exception as exc:  # a broken CUDA context must not hide the line
            out["torch_error"] = repr(exc)
    return out


def _report() -> None:
    print(f"{MARK} {json.dumps(memory_facts())}", file=sys.stderr, flush=True)


def parse(text: str) -> dict[str, Any] | None:
    """The last probe line in ``text`` (a log), or None."""
    found: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                value = json.loads(line[len(MARK) :])
            except ValueError:
                continue
            if isinstance(value, dict):
                found = value
    return found


def main() -> int:
    atexit.register(_report)
    from dsguard.train.trainer import main as train_main

    return train_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
