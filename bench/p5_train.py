"""``python -m bench.p5_train TRAINER-ARGS``: dsguard's reference trainer, plus memory facts.

Exactly ``python -m dsguard.train`` (same ``main``), except that on the way out, whether
training finished or raised, it prints one line to stderr::

    p5-memory: VmPeak=<bytes> VmHWM=<bytes>

``VmPeak`` is the process's peak virtual address space, the quantity ``RLIMIT_AS`` (dsguard's
``resources.host_memory_limit``) limits; ``VmHWM`` is the peak resident set. P5 uses it to
choose host-memory budgets that make a start config fail and a smaller one fit.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path

MARK = "p5-memory:"


def memory_line() -> str:
    fields: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmPeak", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return f"{MARK} VmPeak={fields.get('VmPeak', -1)} VmHWM={fields.get('VmHWM', -1)}"


def _report() -> None:
    print(memory_line(), file=sys.stderr, flush=True)


def main() -> int:
    atexit.register(_report)
    from dsguard.train.trainer import main as train_main

    return train_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
