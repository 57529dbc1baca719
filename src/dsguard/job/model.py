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

from dsguard.exitcodes import EXIT_GAVE_UP, EXIT_SUCCEEDED
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


class CheckpointLayout(StrEnum):
    """How the training code lays out its checkpoints in ``checkpoints.dir``.

    ``hf``: HF Trainer ``checkpoint-N/`` dirs, resumed with ``--resume_from_checkpoint PATH``.
    ``deepspeed``: raw ``engine.save_checkpoint(dir)``: ``global_stepN/`` tags and a ``latest``
    file the script's own ``load_checkpoint`` follows (dsguard points it at the newest
    complete tag; no flag is passed unless ``resume_flag`` is set). ``accelerate``:
    ``save_state`` dirs (``checkpoint_N/`` or any name ending in a step number) with
    ``optimizer.bin`` and ``random_states_R.pkl``, resumed through a configured flag.
    ``lightning``: ``*.ckpt`` files. ``dcp``: ``torch.distributed.checkpoint`` dirs, complete
    once ``.metadata`` is written. ``auto``: detected from what the dir holds.
    """

    HF = "hf"
    DEEPSPEED = "deepspeed"
    ACCELERATE = "accelerate"
    LIGHTNING = "lightning"
    DCP = "dcp"
    AUTO = "auto"


#: The job file's ``checkpoints.layout:`` choices.
LAYOUT_NAMES: tuple[str, ...] = tuple(k.value for k in CheckpointLayout)


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
    layout: CheckpointLayout = CheckpointLayout.AUTO
    #: The job file named ``resume_flag`` itself. The HF default flag is passed only to an
    #: ``hf`` layout: a raw DeepSpeed loop resumes itself from ``latest`` and its argparse
    #: would refuse ``--resume_from_checkpoint``.
    resume_flag_explicit: bool = False

    def resume_flag_for(self, layout: CheckpointLayout) -> str | None:
        """The flag that carries the resume path for a checkpoint of ``layout``, if any."""
        if self.resume_flag_explicit or layout in (CheckpointLayout.HF, CheckpointLayout.AUTO):
            return self.resume_flag
        return None


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
    #: Knobs no rung may change (``limits.fixed``): "gradient_accumulation_steps=128 cannot be
    #: modified". A move that would need one is left out of the ladder, never made silently.
    fixed: tuple[str, ...] = ()


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

    ``host_memory_limit_bytes`` is a real kernel limit on the attempt: its own memory cgroup
    where dsguard can create one (the kernel's OOM killer SIGKILLs it at the limit, as on a
    workstation), else RLIMIT_AS per process (virtual address space, which CUDA inflates with
    its reservations: a GPU job needs the cgroup). See ``run/memlimit``.
    """

    gpu_memory_fraction: float | None = None
    host_memory_limit_bytes: int | None = None
    #: "auto": a memory cgroup where dsguard can make one, else RLIMIT_AS; "rlimit_as":
    #: always RLIMIT_AS (an address-space budget, e.g. to compare with runs limited so).
    host_memory_via: str = "auto"


# -- issue 12: what to do when the loss or grad norm turns NaN/inf -----------------------------

#: ``divergence.action`` values.
DIVERGENCE_ACTIONS: tuple[str, ...] = ("give_up", "rollback")


@dataclass(frozen=True, slots=True)
class DivergencePolicy:
    """The job's answer to a loss or grad norm that turned NaN/inf while training.

    ``give_up`` stops the attempt and the run, naming the step where it began. ``rollback``
    does what large-model teams do with loss spikes (PaLM, Chowdhery et al. 2022, section 5.1;
    OPT's logbook): resume from the newest checkpoint saved *before* that step and skip
    ``skip_batches`` optimizer steps' worth of data from there (``DSGUARD_SKIP_BATCHES``, see
    ``protocol``), at most ``max_rollbacks`` times per run.
    """

    action: str = "give_up"
    skip_batches: int = 20
    max_rollbacks: int = 2


# -- issue 14: knob delivery beyond flags, declared data semantics ---------------------------

#: The formats a knobs file may have, by file-name suffix.
KnobsFileFormat = Literal["json", "yaml", "toml"]


@dataclass(frozen=True, slots=True)
class KnobsFile:
    """The script's own config file, from which it reads its knobs (``knobs_file:``).

    dsguard writes a per-attempt copy (``log_dir/attempt-N.<name>``) with the knobs set at
    ``keys`` and replaces the value of ``arg`` in ``args`` with that copy's path; the user's
    file is read once, at load, and never written.
    """

    path: Path
    #: The flag whose value names the file; None: the file is a positional argument, and the
    #: args item that resolves to ``path`` is replaced.
    arg: str | None
    #: knob -> dotted key in the file (``training.batch_size``).
    keys: Mapping[str, str]
    fmt: KnobsFileFormat
    #: The file's content as read at load time (the base of every per-attempt copy).
    base: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class KnobDelivery:
    """Routes other than a command-line flag by which a knob reaches the script.

    A knob mapped here is never passed as a flag. When any route is declared the job is not
    an HF Trainer script, so HF's default flags are not assumed: only ``flags:`` entries the
    job file states are passed.
    """

    file: KnobsFile | None = None
    #: knob -> dotted key passed as a ``key=value`` argument (Hydra, OmegaConf, LLaMA-Factory,
    #: torchtune). A ``+``/``++`` prefix on the key is kept (Hydra's "add"/"force add").
    dotlist: Mapping[str, str] = field(default_factory=dict)
    #: knob -> environment variable name.
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def declared(self) -> bool:
        return self.file is not None or bool(self.dotlist) or bool(self.env)

    def mapped(self) -> frozenset[str]:
        """Knobs delivered through the file, a dotlist argument or the environment."""
        keys = set(self.dotlist) | set(self.env)
        if self.file is not None:
            keys |= set(self.file.keys)
        return frozenset(keys)


@dataclass(frozen=True, slots=True)
class DataSpec:
    """What the job says about its data. ``packing``: examples are concatenated into
    ``max_length`` chunks (run_clm's ``--block_size``, TRL ``packing``, axolotl
    ``sample_packing``), so a ``max_length`` move changes the dataset itself: the resumed
    data position is no longer the same text, and the move is a new phase. None = unknown."""

    packing: bool | None = None
    #: Where ``packing`` was learnt (``data.packing``, ``--block_size in args``, ...).
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ExitCodes:
    """issue 16: the job file's ``exit_codes:`` (the defaults are ``dsguard.exitcodes``'s;
    ``retry`` None keeps 128+N and 70 as they are). See docs/engines.md."""

    succeeded: int = EXIT_SUCCEEDED
    gave_up: int = EXIT_GAVE_UP
    retry: int | None = None


#: issue 15: step intervals the in-run probe (``fit_probe: in_run``) times each config over
#: unless the job says (``fit_probe_steps``): more than ``core.throughput.MIN_INTERVALS``
#: (2), since the verdict moves the rest of this run, not a later one that could correct it.
IN_RUN_PROBE_STEPS = 4


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
    #: ``fit_probe: true``: start at an unmeasured neighbour of the fastest config the
    #: known-good store measured, so later runs start at the faster of the two (issue 15).
    fit_probe: bool = False
    exit_codes: ExitCodes = field(default_factory=ExitCodes)
    divergence: DivergencePolicy = field(default_factory=DivergencePolicy)
    #: How the knobs reach a script that does not take HF flags (issue 14).
    delivery: KnobDelivery = field(default_factory=KnobDelivery)
    #: What the job declares about its data (packing), for the max_length rung (issue 14).
    data: DataSpec = field(default_factory=DataSpec)
    # A lambda: Outputs is defined below, in its own block (issue 17).
    outputs: Outputs = field(default_factory=lambda: Outputs())  # noqa: PLW0108
    #: issue 15, ``fit_probe: in_run``: the optimizer steps each config is timed over
    #: before the probe inside the run decides (``core.throughput.InRunProbe``); None: off.
    in_run_probe_steps: int | None = None


# -- issue 17: notifications and metrics ------------------------------------------------------

#: Apprise schemes that are plain web hooks: the host is shown in logs, the rest redacted.
_WEBHOOK_SCHEMES = frozenset({"json", "jsons", "form", "forms", "xml", "xmls"})


def redact_url(url: str) -> str:
    """``url`` safe to log: an apprise URL carries its credentials in the user part, the
    path (``tgram://BOT_TOKEN/CHAT``, ``discord://ID/TOKEN``) or the query, so only the
    scheme survives, plus the host of a plain web hook (``jsons://hooks.example.com/...``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<redacted>"
    if scheme.lower() in _WEBHOOK_SCHEMES:
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1].split("?", 1)[0]
        return f"{scheme}://{host}/<redacted>"
    return f"{scheme}://<redacted>"


@dataclass(frozen=True, slots=True)
class Outputs:
    """What dsguard tells the outside world besides its log dir.

    ``notify``: apprise URLs (Slack, Discord, Telegram, e-mail, ntfy, ``json://`` web hooks)
    told about a give-up, a success, a new phase and a hang. ``metrics_textfile``: a
    node_exporter textfile-collector file (``*.prom``) rewritten atomically; and
    ``metrics_http_port``: a ``/metrics`` endpoint on 127.0.0.1 (prometheus-client).
    """

    notify: tuple[str, ...] = ()
    metrics_textfile: Path | None = None
    metrics_http_port: int | None = None
