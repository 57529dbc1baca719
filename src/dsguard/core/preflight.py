"""Check each attempt's rendered DeepSpeed config the way DeepSpeed (and the HF Trainer) will.

Pure: no I/O, no torch, no deepspeed import. The run loop calls :func:`check_deepspeed_config`
on the config :func:`dsguard.run.launch.render_deepspeed_config` produced, before it
writes ``attempt-N.deepspeed.json`` and launches. A config DeepSpeed refuses costs a full
launch (minutes of model loading on every rank) and is then classified ``ds_config_error``,
which gives up the whole run; a config DeepSpeed *silently reinterprets* is worse, because the
run trains something other than what dsguard's knobs say. Both are caught here:

* **fixes** are unambiguous repairs, applied to the returned copy and logged
  (``preflight_fixed``): a bucket size written as a float (``5e8``, or HF's
  ``0.9 * hidden * hidden`` = ``15099494.4``) becomes the integer it denotes; a batch key that
  disagrees with the knobs is set to the knobs' value; a missing accumulation key is added;
  ``zero_force_ds_cpu_optimizer: false`` for an offloaded HF torch optimizer.
* **problems** need a human: negative or non-numeric sizes, ``"auto"`` where nothing fills it
  in, offload at a ZeRO stage that cannot offload, fp16 and bf16 both on. The run loop refuses
  to launch (exit 2), naming each one.

The rules are read from the installed versions' source, not from memory:

* DeepSpeed 0.19.8 ``runtime/zero/config.py``: bucket sizes and thresholds are pydantic
  ``int`` fields. Pydantic's lax mode accepts ``5e8`` (a float without a fractional part) but
  refuses ``15099494.4`` (``int_from_float``) and the string ``"5e8"`` (``int_parsing``); older
  pydantic/DeepSpeed combinations refused any float (DeepSpeed#6525).
  ``DeepSpeedConfigModel`` *drops* ``"auto"`` values (``strict=False``) and silently uses its
  own default, so ``"auto"`` without the HF Trainer is never what the user meant.
* DeepSpeed ``runtime/config.py``: ``train_batch_size == micro * accumulation * world_size``
  is an assertion; missing batch keys are derived (``accumulation = 1`` when only
  ``train_batch_size`` is given), which would silently ignore dsguard's micro-batch moves.
* transformers 5.23 ``integrations/deepspeed.py`` (``HfTrainerDeepSpeedConfig``) and
  accelerate (``DeepSpeedPlugin``, ``Accelerator._prepare_deepspeed``): the exact keys whose
  ``"auto"`` is filled in (:data:`HF_AUTO_KEYS`); any other ``"auto"`` makes accelerate raise
  ``ValueError: `KEY` not found in kwargs``. A config without ``gradient_accumulation_steps``
  gets ``1`` from accelerate, so an accumulation raised by dsguard would be lost (the global
  batch would silently shrink).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsguard.core.records import as_builtins
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job

__all__ = [
    "BATCH_KEYS",
    "HF_AUTO_KEYS",
    "INT_KEYS",
    "Fix",
    "PreflightResult",
    "Problem",
    "check_deepspeed_config",
    "uses_hf_trainer",
]

MICRO = "train_micro_batch_size_per_gpu"
ACCUM = "gradient_accumulation_steps"
TRAIN_BATCH = "train_batch_size"
BATCH_KEYS: tuple[str, ...] = (MICRO, ACCUM, TRAIN_BATCH)

#: The HF flag for a DeepSpeed config (``TrainingArguments.deepspeed``). Plain DeepSpeed
#: scripts use ``--deepspeed_config`` (``deepspeed.add_config_arguments``), where
#: ``--deepspeed`` is a bare switch.
HF_DEEPSPEED_FLAG = "--deepspeed"

#: Keys whose ``"auto"`` the HF Trainer path fills in, from the installed sources:
#: transformers ``HfTrainerDeepSpeedConfig.trainer_config_process`` (batch keys, clipping,
#: optimizer and scheduler params, fp16/bf16) and ``trainer_config_finalize`` (hidden-size
#: buckets, scheduler steps); accelerate ``DeepSpeedPlugin.__post_init__`` (stage, offload
#: devices and NVMe paths, 16-bit gather; from ``ACCELERATE_*`` env defaults) and
#: ``Accelerator._prepare_deepspeed`` (the three hidden-size keys at any ZeRO stage, from
#: ``model.config.hidden_size``). Every other ``"auto"`` is left in place and accelerate's
#: ``deepspeed_config_process`` raises on it.
HF_AUTO_KEYS: frozenset[str] = frozenset(
    {
        MICRO,
        ACCUM,
        TRAIN_BATCH,
        "gradient_clipping",
        "optimizer.params.lr",
        "optimizer.params.betas",
        "optimizer.params.eps",
        "optimizer.params.weight_decay",
        "scheduler.params.warmup_min_lr",
        "scheduler.params.warmup_max_lr",
        "scheduler.params.total_num_steps",
        "scheduler.params.warmup_num_steps",
        "fp16.enabled",
        "bf16.enabled",
        "zero_optimization.stage",
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        "zero_optimization.offload_optimizer.device",
        "zero_optimization.offload_param.device",
        "zero_optimization.offload_optimizer.nvme_path",
        "zero_optimization.offload_param.nvme_path",
    }
)

#: Integer fields of DeepSpeed's config models (dotted path -> smallest valid value, or None
#: for no bound), from ``DeepSpeedZeroConfig`` (fields and their ``stage3_`` aliases; both
#: spellings are accepted, ``populate_by_name=True``), the offload configs and
#: ``DeepSpeedFP16Config``. Checked at every stage: DeepSpeed validates the ZeRO-3 fields
#: whatever the stage is.
INT_KEYS: dict[str, int | None] = {
    "zero_optimization.reduce_bucket_size": 1,  # gt=0
    "zero_optimization.allgather_bucket_size": 0,
    "zero_optimization.sub_group_size": 0,
    "zero_optimization.stage3_prefetch_bucket_size": 0,
    "zero_optimization.prefetch_bucket_size": 0,
    "zero_optimization.stage3_param_persistence_threshold": 0,
    "zero_optimization.param_persistence_threshold": 0,
    "zero_optimization.stage3_model_persistence_threshold": 0,
    "zero_optimization.model_persistence_threshold": 0,
    "zero_optimization.stage3_max_live_parameters": 0,
    "zero_optimization.max_live_parameters": 0,
    "zero_optimization.stage3_max_reuse_distance": 0,
    "zero_optimization.max_reuse_distance": 0,
    "zero_optimization.stage3_module_granularity_threshold": None,
    "zero_optimization.module_granularity_threshold": None,
    "zero_optimization.zero_hpz_partition_size": 0,
    "zero_optimization.offload_param.buffer_count": 0,
    "zero_optimization.offload_param.buffer_size": 0,
    "zero_optimization.offload_param.max_in_cpu": 0,
    "zero_optimization.offload_optimizer.buffer_count": 0,
    "fp16.initial_scale_power": None,
    "fp16.loss_scale_window": 1,
    "fp16.hysteresis": None,
    "fp16.min_loss_scale": 1,
}

_OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: Relative tolerance under which a float counts as the integer it is next to. 1e-6 accepts
#: HF's ``0.9 * h * h`` (off by at most 0.5 in ~1.5e7) and refuses ``100.5``.
_INTEGRAL_RTOL = 1e-6
_TRUE_WORDS = frozenset({"true", "t", "yes", "y", "on", "1"})

_WHY_FLOAT = (
    "DeepSpeed declares this an int (pydantic): a float with a fractional part is a "
    "ValidationError (int_from_float), older pydantic/DeepSpeed refuse any float "
    "(DeepSpeed#6525); written as the integer it denotes"
)
_WHY_STRING = (
    "DeepSpeed declares this an int (pydantic): a string such as '5e8' is a ValidationError "
    "(int_parsing); written as the integer it denotes"
)


@dataclass(frozen=True, slots=True)
class Fix:
    """A repair applied to the config: ``path`` (dotted) went from ``old`` to ``new``.
    ``old`` is None when the key was added."""

    path: str
    old: Any
    new: Any
    why: str

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    def __str__(self) -> str:
        old = "(absent)" if self.old is None else repr(self.old)
        return f"{self.path}: {old} -> {self.new!r} ({self.why})"


@dataclass(frozen=True, slots=True)
class Problem:
    """Something only a human can decide; the attempt must not launch."""

    path: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """The checked config (a copy with every fix applied) and what was fixed or is wrong."""

    config: dict[str, Any]
    fixes: list[Fix] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def uses_hf_trainer(job: Job) -> bool:
    """Whether the job hands its DeepSpeed config to the HF Trainer.

    The HF Trainer takes the config path as ``--deepspeed PATH`` (dsguard's default flag); a
    plain DeepSpeed script takes ``--deepspeed_config PATH``. Only the HF path fills in
    ``"auto"``, so guessing wrong in the HF direction would let an unfilled ``"auto"`` through:
    the default flag is the one HF uses, and a job that changes it says it is not HF.
    """
    return job.deepspeed is not None and job.deepspeed.flag == HF_DEEPSPEED_FLAG


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _as_count(value: object) -> tuple[int | None, str | None]:
    """The integer ``value`` denotes, or why it denotes none."""
    if isinstance(value, bool):
        return None, f"{value!r} is a boolean, not a count"
    if isinstance(value, int):
        return value, None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text), None
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            return None, f"{value!r} is not a number"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, f"{value!r} is not a finite number"
        nearest = round(value)
        if abs(value - nearest) <= max(1e-9, _INTEGRAL_RTOL * abs(value)):
            return int(nearest), None
        return None, (
            f"{value!r} has a fractional part; DeepSpeed's int field refuses it "
            "(int_from_float) and it is too far from an integer to round safely"
        )
    return None, f"{value!r} is a {type(value).__name__}, not a number"


def _truthy(value: object) -> bool:
    """Pydantic's lax bool: what DeepSpeed's ``enabled`` fields accept as true."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value == 1
    return isinstance(value, str) and value.strip().lower() in _TRUE_WORDS


def _lookup(cfg: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any] | None, str]:
    """The mapping holding ``path``'s last key (None when a parent is missing), and that key."""
    *parents, last = path.split(".")
    node: object = cfg
    for part in parents:
        if not isinstance(node, Mapping):
            return None, last
        node = node.get(part)
    return (node if isinstance(node, Mapping) else None), last


def _walk(node: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Every leaf of a JSON value as ``(dotted path, value)``; list items as ``path[i]``."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _walk(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{prefix}[{i}]")
    else:
        yield prefix, node


class _Checker:
    def __init__(self, cfg: Mapping[str, Any], knobs: Knobs, world_size: int, hf: bool) -> None:
        self.cfg: dict[str, Any] = copy.deepcopy(dict(cfg))
        self.knobs = knobs
        self.world_size = world_size
        self.hf = hf
        self.fixes: list[Fix] = []
        self.problems: list[Problem] = []
        #: Paths already judged, so the generic "auto" sweep does not report them twice.
        self.seen: set[str] = set()

    def fix(self, holder: dict[str, Any], key: str, path: str, new: Any, why: str) -> None:
        self.fixes.append(Fix(path, holder.get(key), new, why))
        holder[key] = new
        self.seen.add(path)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))
        self.seen.add(path)

    def auto_message(self, path: str) -> str:
        if not self.hf:
            return (
                "'auto' is a placeholder only the HF Trainer integration fills in, and this job "
                f"does not hand its config to the HF Trainer (its DeepSpeed flag is not "
                f"{HF_DEEPSPEED_FLAG}); DeepSpeed itself fails on it or silently drops it for "
                "its own default: write a value"
            )
        return (
            "the HF Trainer fills in 'auto' only for the batch keys, gradient_clipping, "
            "optimizer/scheduler params, fp16/bf16.enabled and the hidden-size ZeRO buckets; "
            f'accelerate raises "`{path}` not found in kwargs" for any other: write a value'
        )

    # -- batch ------------------------------------------------------------------------------

    def batch(self) -> None:
        k = self.knobs
        want = {
            MICRO: k.micro_batch_size,
            ACCUM: k.gradient_accumulation_steps,
            TRAIN_BATCH: k.global_batch(self.world_size),
        }
        invariant = (
            f"dsguard's knobs are micro {k.micro_batch_size} x accumulation "
            f"{k.gradient_accumulation_steps} x world {self.world_size} = {want[TRAIN_BATCH]}; "
            "DeepSpeed asserts train_batch_size == micro * accumulation * world_size"
            + (" and the HF Trainer raises on a mismatch with its flags" if self.hf else "")
        )
        for key in BATCH_KEYS:
            value = self.cfg.get(key)
            if key not in self.cfg:
                if key == ACCUM:
                    why = (
                        "without it accelerate sets gradient_accumulation_steps to 1, so an "
                        "accumulation raised by dsguard would be lost and the global batch "
                        "would shrink"
                        if self.hf
                        else "without it DeepSpeed derives accumulation from "
                        "train_batch_size (1 when only that is given) instead of dsguard's knob"
                    )
                    self.fix(self.cfg, key, key, want[key], why)
                elif key == MICRO and not self.hf:
                    why = (
                        "without it DeepSpeed derives the micro-batch from train_batch_size, so "
                        "dsguard's micro-batch moves would not reach the engine"
                    )
                    self.fix(self.cfg, key, key, want[key], why)
                continue
            if value == "auto":
                if not self.hf:
                    self.problem(key, self.auto_message(key))
                self.seen.add(key)
                continue
            count, error = _as_count(value)
            if error is not None:
                self.problem(key, f"{error}; expected {want[key]} ({invariant})")
            elif count != want[key] or type(value) is not int:
                self.fix(self.cfg, key, key, want[key], invariant)

    # -- integer sizes ----------------------------------------------------------------------

    def integers(self) -> None:
        for path, minimum in INT_KEYS.items():
            holder, key = _lookup(self.cfg, path)
            if holder is None or key not in holder:
                continue
            value = holder[key]
            if value == "auto":
                continue  # judged by the "auto" sweep, with the HF list
            count, error = _as_count(value)
            if error is not None:
                self.problem(path, f"{error}; DeepSpeed's config needs an integer here")
                continue
            assert count is not None
            if minimum is not None and count < minimum:
                bound = "greater than 0" if minimum == 1 else "0 or more"
                self.problem(path, f"{value!r}: DeepSpeed requires {bound}")
                continue
            if type(value) is not int:
                assert isinstance(holder, dict)
                why = _WHY_STRING if isinstance(value, str) else _WHY_FLOAT
                self.fix(holder, key, path, count, why)

    # -- ZeRO and offload -------------------------------------------------------------------

    def zero(self) -> None:
        zero = self.cfg.get("zero_optimization")
        if zero is None:
            if self.hf:
                stage = self.knobs.zero_stage or 0
                self.fix(
                    self.cfg,
                    "zero_optimization",
                    "zero_optimization",
                    {"stage": stage},
                    "accelerate raises 'Please specify the ZeRO optimization config' without "
                    f"it; stage {stage} is what DeepSpeed would use",
                )
            return
        if not isinstance(zero, dict):
            self.problem("zero_optimization", "must be an object")
            return
        stage = zero.get("stage", 0)
        if stage == "auto":
            return  # the sweep judges it; the knobs normally set the stage
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage <= 3:
            self.problem("zero_optimization.stage", f"{stage!r}: ZeRO stages are 0, 1, 2 and 3")
            return

        optimizer_offload = zero.get("cpu_offload") is True  # pre-0.3 spelling, still accepted
        param_offload = zero.get("cpu_offload_param") is True
        for block_key in ("offload_optimizer", "offload_param"):
            path = f"zero_optimization.{block_key}"
            block = zero.get(block_key)
            if block is None:
                continue
            if not isinstance(block, dict):
                self.problem(path, "must be an object")
                continue
            device = block.get("device", "none")
            if device == "auto":
                self.fix(
                    block,
                    "device",
                    f"{path}.device",
                    "cpu",
                    "'auto' becomes 'none' (accelerate's ACCELERATE_DEEPSPEED_OFFLOAD_*_DEVICE "
                    "default, and DeepSpeed drops 'auto' for its default 'none'): the offload "
                    "dsguard asked for would not happen",
                )
                device = "cpu"
            if device not in _OFFLOAD_DEVICES:
                self.problem(f"{path}.device", f"{device!r}: expected one of none, cpu, nvme")
                continue
            if device == "nvme" and not block.get("nvme_path"):
                self.problem(f"{path}.nvme_path", "NVMe offload needs nvme_path")
            if device != "none":
                if block_key == "offload_optimizer":
                    optimizer_offload = True
                else:
                    param_offload = True
        if (optimizer_offload or param_offload) and stage == 0:
            self.problem(
                "zero_optimization.stage",
                "CPU/NVMe offload is a ZeRO feature: stage 0 does not offload, so the memory "
                "the offload was meant to free would not be freed; use stage 1-3 or no offload",
            )
        if param_offload and stage in (1, 2):
            self.problem(
                "zero_optimization.offload_param",
                f"parameter offload works only with ZeRO-3, the config has stage {stage}: "
                "DeepSpeed would keep every parameter on the GPU; use stage 3 or offload only "
                "the optimizer",
            )
        if (
            optimizer_offload
            and self.hf
            and "optimizer" not in self.cfg
            and self.cfg.get("zero_force_ds_cpu_optimizer", True) is not False
        ):
            self.fix(
                self.cfg,
                "zero_force_ds_cpu_optimizer",
                "zero_force_ds_cpu_optimizer",
                False,
                "no optimizer block, so the HF Trainer builds a torch optimizer; with this "
                "true (DeepSpeed's default) accelerate swaps it for DeepSpeedCPUAdam (a "
                "JIT-built op, and optimizer state unlike the checkpoint's) and DeepSpeed "
                "refuses other client optimizers under offload",
            )

    # -- precision --------------------------------------------------------------------------

    def precision(self) -> None:
        fp16 = self.cfg.get("fp16")
        bf16 = self.cfg.get("bf16", self.cfg.get("bfloat16"))
        if (
            isinstance(fp16, Mapping)
            and isinstance(bf16, Mapping)
            and _truthy(fp16.get("enabled"))
            and _truthy(bf16.get("enabled"))
        ):
            self.problem(
                "bf16.enabled",
                "fp16 and bf16 are both enabled; DeepSpeed asserts 'bfloat16 and fp16 modes "
                "cannot be simultaneously enabled': keep one",
            )

    # -- "auto" anywhere --------------------------------------------------------------------

    def autos(self) -> None:
        for path, value in _walk(self.cfg):
            if value != "auto" or path in self.seen:
                continue
            if self.hf and path in HF_AUTO_KEYS:
                continue
            self.problem(path, self.auto_message(path))


def check_deepspeed_config(
    cfg: Mapping[str, Any], *, knobs: Knobs, world_size: int, hf_trainer: bool
) -> PreflightResult:
    """Check one attempt's DeepSpeed config; return a fixed copy, the fixes and the problems.

    Args:
        cfg: the rendered config (not modified).
        knobs: the attempt's knobs: the batch keys must agree with them.
        world_size: data-parallel ranks of the attempt.
        hf_trainer: the config goes to the HF Trainer (``"auto"`` is filled in for the keys in
            :data:`HF_AUTO_KEYS`); see :func:`uses_hf_trainer`.
    """
    checker = _Checker(cfg, knobs, world_size, hf_trainer)
    checker.batch()
    checker.integers()
    checker.zero()
    checker.precision()
    checker.autos()
    return PreflightResult(config=checker.cfg, fixes=checker.fixes, problems=checker.problems)
