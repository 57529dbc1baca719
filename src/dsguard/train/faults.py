"""Fault injection for tests and benchmarks (``DSGUARD_FAULT``). Not for production runs.

Why: the supervisor's recovery paths (CUDA OOM ladder, host OOM ladder, external kill, hang)
must be exercised on *real* training on machines without a GPU. The reference trainer checks
the faults at the start of every optimizer step -- after the previous step's checkpoint has
been written -- and fails there with the genuine exception type and message format, so the
supervisor sees exactly what a real failure prints.

Syntax: one or more faults separated by ``,``; each is ``kind[:key=value]...``::

    DSGUARD_FAULT="oom:micro_above=4:at_step=4"       # CUDA OOM while micro-batch > 4
    DSGUARD_FAULT="sigkill:at_step=3:attempt=1"       # SIGKILL self, first attempt only
    DSGUARD_FAULT="nan:at_step=4:attempt=1"           # the loss turns NaN from step 4 on

kinds: ``oom`` (``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``),
``host_oom`` (``RuntimeError: ... DefaultCPUAllocator: can't allocate memory ...``),
``sigkill`` (the process SIGKILLs itself, as the kernel OOM killer would), ``hang`` (sleeps
forever inside the step, as a rank stuck in a collective would), ``nan`` (the loss, hence
the gradients and then the weights, turn NaN from that step on and training *goes on*, as a
diverged run does; the trainer applies it in ``compute_loss``, :func:`fire` never sees it).

keys (all optional; a fault fires when every given condition holds):
``at_step=S`` from optimizer step S on (1-based, i.e. when ``global_step >= S - 1`` steps are
done; default 1); ``micro_above=M`` only while ``per_device_train_batch_size > M``;
``max_length_above=L`` only while ``--model_max_length > L``; ``rank=R`` only on global rank
R; ``attempt=A`` only when ``DSGUARD_ATTEMPT`` is A (so a resumed attempt does not re-fire).

Pure parsing here; :func:`fire` imports torch lazily.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import NoReturn

FAULT_ENV = "DSGUARD_FAULT"
KINDS = ("oom", "host_oom", "sigkill", "hang", "nan")
_INT_KEYS = ("at_step", "micro_above", "max_length_above", "rank", "attempt")

CUDA_OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB "
    "memory in use. Of the allocated memory 75.80 GiB is allocated by PyTorch, and 1.31 GiB "
    "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
HOST_OOM_MESSAGE = (
    "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory)"
)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at_step: int = 1
    micro_above: int | None = None
    max_length_above: int | None = None
    rank: int | None = None
    attempt: int | None = None

    def due(
        self, *, step: int, micro: int, max_length: int | None, rank: int, attempt: int | None
    ) -> bool:
        """Whether this fault fires at the start of optimizer step ``step`` (1-based)."""
        if step < self.at_step:
            return False
        if self.micro_above is not None and micro <= self.micro_above:
            return False
        if self.max_length_above is not None and (
            max_length is None or max_length <= self.max_length_above
        ):
            return False
        if self.rank is not None and rank != self.rank:
            return False
        return self.attempt is None or attempt == self.attempt


def parse_faults(spec: str) -> tuple[Fault, ...]:
    """Parse a ``DSGUARD_FAULT`` value; raises ``ValueError`` naming the bad part."""
    faults: list[Fault] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        kind, *pairs = item.split(":")
        kind = kind.strip()
        if kind not in KINDS:
            raise ValueError(f"{FAULT_ENV}: unknown fault kind {kind!r} (one of {KINDS})")
        values: dict[str, int] = {}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            key = key.strip()
            if not sep or key not in _INT_KEYS:
                raise ValueError(f"{FAULT_ENV}: bad condition {pair!r} in {item!r}")
            try:
                values[key] = int(raw)
            except ValueError:
                raise ValueError(f"{FAULT_ENV}: {key} needs an integer, got {raw!r}") from None
        faults.append(Fault(kind=kind, **values))
    return tuple(faults)


def fire(fault: Fault) -> NoReturn:
    """Fail the way the real thing fails (see module docstring)."""
    if fault.kind == "oom":
        import torch

        raise torch.OutOfMemoryError(CUDA_OOM_MESSAGE)
    if fault.kind == "host_oom":
        raise RuntimeError(HOST_OOM_MESSAGE)
    if fault.kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:  # "hang", and the instant before SIGKILL lands
        time.sleep(3600)
