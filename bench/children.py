"""Child processes for the benchmarks, run by ``dsguard run`` as the training command.

Standard library only and no package imports, so an attempt's start-up is a bare
interpreter's. Every role appends JSON records to a side file (``--side``), one ``os.write``
each on an O_APPEND descriptor, so records from concurrent processes never interleave.

Roles (first argument):

* ``oom``: a trainer that, when its micro-batch is above ``--oom_above``, waits for the
  benchmark's go file, prints a real-format CUDA OOM traceback, and blocks (as a rank does
  whose peers are stuck in NCCL). At or below it, it exits 0 (the healed attempt).
* ``launcher``: starts two ``rank`` processes in its own session (as ``deepspeed``'s
  per-node launcher does) and waits for both; it does not tear them down itself.
* ``rank``: rank 0 prints the OOM and exits 1; rank 1 blocks forever (an NCCL collective),
  optionally ignoring SIGTERM (a rank whose Python SIGTERM handler cannot run while it is
  blocked in C).
* ``print``: replays a file of log lines at ``--rate`` lines/s for ``--duration`` seconds,
  one ``write`` per line, then exits 0.

dsguard appends its own flags (``--per_device_train_batch_size N`` and so on); unknown
flags are ignored.
"""

import time

T_FIRST_STATEMENT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
    "has 78.12 GiB memory in use. Of the allocated memory 75.80 GiB is allocated by PyTorch, and "
    "1.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
TRACEBACK_HEAD = (
    "Traceback (most recent call last):",
    '  File "/home/user/train.py", line 88, in <module>',
    "    trainer.train()",
    '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2245, in train',
    "    return inner_training_loop(",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1747, '
    "in _call_impl",
    "    return forward_call(*args, **kwargs)",
)
STARTUP_LOG = (
    "[INFO|trainer.py:2314] 2026-11-22 02:13:45,123 >> ***** Running training *****",
    "[INFO|trainer.py:2315] 2026-11-22 02:13:45,123 >>   Num examples = 52,002",
    "[INFO|trainer.py:2318] 2026-11-22 02:13:45,123 >>   Instantaneous batch size per device = 8",
    "  0%|          | 0/1626 [00:00<?, ?it/s]",
)


def fork_epoch() -> float | None:
    """When the kernel created this process (wall clock), to the kernel's 10 ms tick.

    /proc/self/stat field 22 is the start time in clock ticks since boot (CLOCK_BOOTTIME).
    """
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError):
        return None


def record(side: str, **fields: object) -> None:
    line = (json.dumps(fields) + "\n").encode()
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def out(text: str) -> None:
    data = text.encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def wait_go(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.001)


def block_forever() -> None:
    while True:
        signal.pause()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["oom", "launcher", "rank", "print"])
    p.add_argument("--side", required=True)
    p.add_argument("--go", default="")
    p.add_argument("--per_device_train_batch_size", type=int, default=1)
    p.add_argument("--oom_above", type=int, default=1)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--ignore_term", action="store_true")
    p.add_argument("--lines", default="")
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--duration", type=float, default=10.0)
    ns, _unknown = p.parse_known_args(argv)
    return ns


def start_record(ns: argparse.Namespace, role: str, **extra: object) -> None:
    record(
        ns.side, ev="start", role=role, pid=os.getpid(), sid=os.getsid(0),
        attempt=os.environ.get("DSGUARD_ATTEMPT"), t=T_FIRST_STATEMENT, t_fork=fork_epoch(),
        **extra,
    )  # fmt: skip


def oom_traceback(prefix: str = "") -> None:
    """The head of the traceback, then the OOM line with its write time recorded just before."""
    out("".join(f"{prefix}{line}\n" for line in TRACEBACK_HEAD))


def role_oom(ns: argparse.Namespace) -> int:
    start_record(ns, "oom")
    if ns.per_device_train_batch_size <= ns.oom_above:
        return 0
    out("".join(line + "\n" for line in STARTUP_LOG))
    wait_go(ns.go)
    oom_traceback()
    t = time.time()
    out(OOM_LINE + "\n")
    record(ns.side, ev="oom", pid=os.getpid(), t=t)
    block_forever()
    return 0


def role_launcher(ns: argparse.Namespace, argv: list[str]) -> int:
    start_record(ns, "launcher")
    rest = argv[1:]  # everything after the role, forwarded to the ranks
    procs = [
        subprocess.Popen([sys.executable, __file__, "rank", "--rank", str(r), *rest])
        for r in (0, 1)
    ]
    codes = [p.wait() for p in procs]
    return 1 if any(codes) else 0


def role_rank(ns: argparse.Namespace) -> int:
    if ns.rank == 1 and ns.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start_record(ns, "rank", rank=ns.rank)
    if ns.per_device_train_batch_size <= ns.oom_above:
        return 0
    if ns.rank != 0:
        block_forever()
    prefix = f"[rank{ns.rank}]: "
    out("".join(f"{prefix}{line}\n" for line in STARTUP_LOG))
    wait_go(ns.go)
    oom_traceback(prefix)
    t = time.time()
    out(prefix + OOM_LINE + "\n")
    record(ns.side, ev="oom", pid=os.getpid(), t=t)
    return 1


def role_print(ns: argparse.Namespace) -> int:
    lines = Path(ns.lines).read_bytes().splitlines(keepends=True)
    total = min(len(lines), int(ns.rate * ns.duration))
    start_record(ns, "print", lines=total)
    t0 = time.monotonic()
    if total == 0:  # a silent attempt: the supervisor's idle cost
        time.sleep(ns.duration)
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - t0) * ns.rate) + 1)
        while i < due:
            os.write(1, lines[i])
            i += 1
        time.sleep(0.001)
    record(ns.side, ev="printed", lines=total, t=time.time(), s=time.monotonic() - t0)
    return 0


def main() -> int:
    argv = sys.argv[1:]
    ns = parse(argv)
    if ns.role == "oom":
        return role_oom(ns)
    if ns.role == "launcher":
        return role_launcher(ns, argv)
    if ns.role == "rank":
        return role_rank(ns)
    return role_print(ns)


if __name__ == "__main__":
    sys.exit(main())
