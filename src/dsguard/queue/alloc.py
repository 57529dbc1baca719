"""Where a queued job may run now: whole GPUs, a shared GPU, or a CPU slot.

Placement is a function of plain values (the NVML snapshot, what the queue's running jobs
hold, free host memory), so it is tested against a scripted NVML without a GPU.

A GPU is handed out exclusively when no queue job holds it **and** NVML shows at most
``busy_fraction`` of its memory used. The second condition is what tools like
task-spooler get wrong in both directions: it keeps a GPU that someone else's notebook
holds out of the pool, and it makes the next job wait until a finished (or killed)
attempt's memory is really released, instead of starting into memory a dying rank still
holds and being blamed with a CUDA OOM. Jobs that share a GPU on purpose say so with
``resources.gpu_memory_fraction``: they are packed while the fractions sum to at most 1 and
NVML shows that much memory free.

Without NVML (no driver, a CPU box) every job takes one of ``slots`` CPU slots, and a job
with ``resources.host_memory_limit`` also needs that much memory available (and the limits
of the running jobs plus its own within the machine's total).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsguard.host.gpu import GpuDevice, GpuSnapshot, Unknown

#: A GPU with more than this fraction of its memory in use is busy (someone else's process,
#: or a finished attempt whose memory the driver has not released yet).
GPU_BUSY_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Want:
    """What a job asks for."""

    gpus: int
    gpu_ids: tuple[int, ...] | None = None
    gpu_fraction: float | None = None
    host_mem_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """What one running queue job holds."""

    gpus: tuple[int, ...]
    gpu_fraction: float | None
    host_mem_bytes: int | None
    #: Took a CPU slot (no GPUs).
    slot: bool


@dataclass(frozen=True, slots=True)
class Placement:
    """``gpus`` None: a CPU slot (on a host without GPUs, or a job asking for none)."""

    gpus: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str
    #: The job can never be placed on this host (asks for more GPUs than there are).
    impossible: bool = False


def _busy(dev: GpuDevice, busy_fraction: float) -> bool:
    if dev.used_bytes is None or not dev.total_bytes:
        return True  # not measured: not free (a "0 used" guess would start into a held GPU)
    return dev.used_bytes > busy_fraction * dev.total_bytes


def _slot(
    want: Want, held: Sequence[Held], slots: int, mem: tuple[int, int] | None
) -> Placement | Wait:
    used = sum(1 for h in held if h.slot)
    if used >= slots:
        return Wait(f"all {slots} CPU slot(s) in use")
    if want.host_mem_bytes is not None and mem is not None:
        available, total = mem
        committed = sum(h.host_mem_bytes or 0 for h in held)
        if want.host_mem_bytes > total:
            return Wait(f"host_memory_limit exceeds this host's {total} bytes", impossible=True)
        if want.host_mem_bytes > available or committed + want.host_mem_bytes > total:
            return Wait(
                f"host memory: needs {want.host_mem_bytes} bytes, {available} available, "
                f"{committed} promised to running jobs"
            )
    return Placement(None)


def _shared(want: Want, devices: Sequence[GpuDevice], held: Sequence[Held]) -> Placement | Wait:
    frac = want.gpu_fraction or 1.0
    exclusive = {g for h in held if h.gpu_fraction is None for g in h.gpus}
    for dev in devices:
        if want.gpu_ids is not None and dev.index not in want.gpu_ids:
            continue
        given = sum(h.gpu_fraction or 0.0 for h in held if dev.index in h.gpus)
        free_ok = (
            dev.free_bytes is not None
            and dev.total_bytes is not None
            and (dev.free_bytes >= frac * dev.total_bytes)
        )
        if dev.index not in exclusive and given + frac <= 1.0 + 1e-9 and free_ok:
            return Placement((dev.index,))
    return Wait(f"no GPU with {frac:g} of its memory free and unpromised")


def place(
    want: Want,
    snap: GpuSnapshot | Unknown,
    held: Sequence[Held],
    *,
    slots: int,
    mem: tuple[int, int] | None = None,
    busy_fraction: float = GPU_BUSY_FRACTION,
) -> Placement | Wait:
    """Where ``want`` can run now, or why it waits.

    Args:
        snap: NVML now; no NVML at all (a permanent Unknown) or no devices: CPU slots only;
            a transient Unknown: GPU jobs wait.
        held: what the queue's running jobs hold.
        mem: ``(available, total)`` host memory in bytes, or None (not checked).
    """
    if isinstance(snap, Unknown) and not snap.permanent and want.gpus > 0:
        # NVML failed this time (a busy driver, a timeout) on a host that has it: a GPU job
        # started now as a CPU job would get no CUDA_VISIBLE_DEVICES, i.e. every GPU.
        return Wait(f"GPU state unknown: {snap.reason}")
    devices = snap.devices if isinstance(snap, GpuSnapshot) else ()
    if not devices or want.gpus == 0:
        return _slot(want, held, slots, mem)
    if want.gpu_fraction is not None:
        return _shared(want, devices, held)
    count = len(want.gpu_ids) if want.gpu_ids is not None else want.gpus
    if count > len(devices):
        return Wait(f"asks for {count} GPU(s); this host has {len(devices)}", impossible=True)
    taken = {g for h in held for g in h.gpus}
    free = [
        d.index
        for d in devices
        if d.index not in taken and not _busy(d, busy_fraction)
        and (want.gpu_ids is None or d.index in want.gpu_ids)
    ]  # fmt: skip
    if len(free) < count:
        busy = [d.index for d in devices if d.index not in taken and _busy(d, busy_fraction)]
        why = f"needs {count} free GPU(s), {len(free)} free"
        if busy:
            why += f"; GPU(s) {busy} hold memory (another process, or not released yet)"
        return Wait(why)
    return Placement(tuple(free[:count]))
