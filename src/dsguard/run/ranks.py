"""How many ranks an attempt really runs, seen from outside, and whether the host has GPUs.

Why: dsguard's global-batch invariant multiplies by the world size it computes from the job
(``gpus:`` / ``world_size:``), but what runs is decided by the launcher. ``accelerate
launch --num_processes 2`` on a host without GPUs and without a multi-process mode starts
ONE process (its ``simple_launcher``), and the run then trains half the global batch dsguard
reports. Every torch.distributed launcher (torchrun, the DeepSpeed runner, accelerate's
multi-process path) gives each rank ``RANK`` and ``WORLD_SIZE`` in its environment, so the
environment of the attempt's processes says what really runs, without any help from the
training code.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

import psutil

__all__ = ["free_port", "nvidia_devices_present", "observed_world_size"]


def free_port() -> int:
    """A port the kernel calls free on 127.0.0.1 now. The rank binds it a few seconds later;
    another process could take it in between, which the rendezvous reports as
    ``EADDRINUSE`` (a retryable launch failure), never a silent mix-up of two jobs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def observed_world_size(procs: Iterable[psutil.Process]) -> tuple[int, str] | None:
    """``(world size, how it was seen)`` from the rank variables of ``procs``.

    The largest ``WORLD_SIZE`` any process carries with a ``RANK`` next to it; None when no
    process has them yet (the launcher has not started its ranks, or nothing ever sets them:
    a single process started without a rendezvous, which the caller judges after a while).
    """
    worlds: set[int] = set()
    ranks: set[int] = set()
    for proc in procs:
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        world, rank = env.get("WORLD_SIZE"), env.get("RANK")
        if world is None or rank is None:
            continue
        try:
            worlds.add(int(world))
            ranks.add(int(rank))
        except ValueError:
            continue
    if not worlds:
        return None
    seen = max(worlds)
    return seen, f"WORLD_SIZE={seen} in the environment of {len(ranks)} rank process(es)"


def nvidia_devices_present(
    dev: Path = Path("/dev"), proc_gpus: Path = Path("/proc/driver/nvidia/gpus")
) -> bool:
    """Whether the NVIDIA driver shows any GPU (``/dev/nvidiaN`` or its ``/proc`` entries).

    Cheap and torch-free on purpose: NVML may be absent from the supervisor's environment,
    and importing torch is what the supervisor never does.
    """
    try:
        if any(os.scandir(proc_gpus)):
            return True
    except OSError:
        pass
    try:
        return any(
            e.name.startswith("nvidia") and e.name[len("nvidia") :].isdigit()
            for e in os.scandir(dev)
        )
    except OSError:
        return False
