"""The validated, resolved job: what every stage after parsing works from.

``jobfile.py`` turns a YAML file (or a quick-start command line) into a :class:`Job`; nothing
past that point sees YAML or relative paths. Every path here is absolute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, get_args

from dsguard.job.knobs import Knobs


class LauncherKind(StrEnum):
    PYTHON = "python"
    DEEPSPEED = "deepspeed"
    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"


#: The job file's ``launcher:`` choices (derived: the enum is the one list).
LAUNCHER_NAMES: tuple[str, ...] = tuple(k.value for k in LauncherKind)

#: The one list of rung names, in ladder order. ``core.rungs.RUNGS`` maps each to its
#: function and the job file validates ``ladder:`` against it; a name added here without a
#: rung function fails at import, not at the first OOM.
RungName = Literal[
    "micro_batch",
    "gradient_checkpointing",
    "max_length",
    "zero3",
    "offload_optimizer",
    "offload_params",
    "lora",
    "dataloader_workers",
    "pin_memory",
    "ds_buckets",
]
ALL_RUNGS: tuple[RungName, ...] = get_args(RungName)
#: The default ladders (an order over :data:`RungName`, which mypy checks each entry against).
OOM_RUNGS: tuple[RungName, ...] = (
    "micro_batch",
    "gradient_checkpointing",
    "max_length",
    "zero3",
    "offload_optimizer",
    "offload_params",
    "ds_buckets",
    "lora",
)
HOST_OOM_RUNGS: tuple[RungName, ...] = (
    "dataloader_workers", "pin_memory", "micro_batch", "ds_buckets",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeepSpeedSpec:
    """The base DeepSpeed config; dsguard renders one per attempt from it and the knobs."""

    config_path: Path
    base: Mapping[str, Any]
    flag: str | None = "--deepspeed"


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    dir: Path
    resume_flag: str | None = "--resume_from_checkpoint"
    #: The script's output-dir flag. A new phase (a move that cannot resume exactly) must not
    #: write checkpoint-N dirs into the old phase's directory (mixed ZeRO-2/ZeRO-3 shards in
    #: one dir), so dsguard rewrites this flag's value in ``args`` to a per-phase subdir.
    output_flag: str | None = "--output_dir"
    #: Resume the first attempt from an existing complete checkpoint too (a restarted
    #: dsguard continues instead of retraining from step 0).
    resume_at_start: bool = True


@dataclass(frozen=True, slots=True)
class Ladder:
    oom: tuple[str, ...] = OOM_RUNGS
    host_oom: tuple[str, ...] = HOST_OOM_RUNGS
    #: The ladders the job file spelled out (``ladder: oom: [...]``): their order is the
    #: user's and is walked as written; the default ones may be reordered by the evidence
    #: (``core.evidence``).
    explicit: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Limits:
    min_micro_batch_size: int = 1
    min_max_length: int = 512
    max_attempts: int = 12
    backoff_first_s: float = 5.0
    backoff_max_s: float = 300.0
    #: An attempt that stayed up this long resets the backoff streak (a job that crashes
    #: once a day must not wait the maximum backoff forever).
    healthy_uptime_s: float = 1800.0
    #: Wait after SIGTERM to the launcher before SIGKILL of the whole session. The DeepSpeed
    #: launcher and torchrun give their ranks 30 s, so a graceful stop needs more than that;
    #: a fatal OOM needs no grace at all (see ``fatal_grace_s``).
    stop_grace_s: float = 45.0
    #: Grace after a fatal line (CUDA OOM): the other ranks would hang in NCCL, so be quick.
    fatal_grace_s: float = 2.0
    #: No output and no heartbeat for this long = a hang. Longer than legitimate pauses
    #: (first-step compile, eval, a large checkpoint save), shorter than the NCCL timeout
    #: (DeepSpeed 10 min, HF ddp_timeout 30 min) is the useful range for heartbeat users.
    hang_timeout_s: float = 1800.0
    #: On a graceful stop, how long the training process may take to save a checkpoint
    #: after dsguard asked it to (only with the save_and_stop capability).
    stop_save_timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Resources:
    """Per-job caps, so two jobs can share one workstation.

    ``gpu_memory_fraction`` is enforced inside the training process, by torch's own
    per-process cap: the supervisor passes it only as ``DSGUARD_GPU_MEMORY_FRACTION``
    (:data:`dsguard.protocol.GPU_MEMORY_FRACTION_ENV`), and ``DsguardCallback``
    (:mod:`dsguard.integrations.hf`, which the reference trainer installs first) calls
    ``torch.cuda.set_per_process_memory_fraction`` on its rank's GPU. It never goes through
    ``PYTORCH_CUDA_ALLOC_CONF``, so a script without the callback runs uncapped, but a torch
    that does not know an allocator option cannot abort the job.

    ``host_memory_limit_bytes`` is a real kernel limit on every process of the attempt
    (RLIMIT_AS, per process: virtual address space, which CUDA inflates with its
    reservations; use it for CPU training, or systemd's MemoryMax for a GPU job).
    """

    gpu_memory_fraction: float | None = None
    host_memory_limit_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    #: The job file, or None for a quick-start command line.
    source: Path | None
    workdir: Path
    launcher: LauncherKind
    #: Exactly one of script/module is set.
    script: Path | None
    module: str | None
    args: tuple[str, ...]
    #: Interpreter of the training environment.
    python: str
    gpus: tuple[int, ...] | None
    #: Data-parallel world size used for the global-batch invariant.
    world_size: int
    env: Mapping[str, str]
    knobs: Knobs
    #: Knobs the user set explicitly; others are passed to the script only once dsguard
    #: changes them (so scripts that lack a flag are not broken by defaults).
    explicit_knobs: frozenset[str]
    #: knob name -> command-line flag, or None = never passed.
    flags: Mapping[str, str | None]
    deepspeed: DeepSpeedSpec | None
    checkpoints: CheckpointSpec | None
    ladder: Ladder = field(default_factory=Ladder)
    limits: Limits = field(default_factory=Limits)
    log_dir: Path = Path("runs")
    resources: Resources = field(default_factory=Resources)
    #: Start at the fastest config predicted to fit (``dsguard run --no-fit`` or ``fit:
    #: false`` in the job file: start exactly as written).
    fit: bool = True
