"""One attempt's DeepSpeed config: rendered from the knobs, patched by remedies, preflighted.

Pure: no process is started and nothing is written (the run loop writes the config to
``log_dir``). ``dsguard validate``, ``validate --deep`` and the run loop all need the same
three steps in the same order; separate copies of them could let ``validate`` pass a config
the loop then refuses, so they live here once:

1. :func:`render_deepspeed_config`: the user's base config with the attempt's knobs;
2. the applied remedies' config patches (:func:`dsguard.core.remedies.remedy_config`);
3. :func:`dsguard.core.preflight.check_deepspeed_config`: the checks DeepSpeed (and HF's
   fill-in of ``"auto"``) would make minutes later, with the safe fixes applied.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dsguard.core.estimate import DS_BUCKET_DEFAULTS
from dsguard.core.preflight import Fix, Problem, check_deepspeed_config, uses_hf_trainer
from dsguard.job.delivery import ds_config_delivers
from dsguard.job.knobs import Knobs, Offload
from dsguard.job.model import Job, LauncherKind

if TYPE_CHECKING:
    # Imported where used: the remedies pull in the classifier's and envfacts' regex tables,
    # ~70 ms that `dsguard validate` (which applies no remedy) must not pay.
    from dsguard.core.remedies import Remedy

__all__ = ["Rendered", "render_attempt_config", "render_deepspeed_config"]

_BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


@dataclass(frozen=True, slots=True)
class Rendered:
    """One attempt's DeepSpeed config and the preflight's verdict on it."""

    #: The config to write and launch with: knobs, remedies and preflight fixes applied.
    config: dict[str, Any]
    #: What the preflight repaired (``config`` already has it).
    fixes: list[Fix] = field(default_factory=list)
    #: What the preflight refuses: the attempt must not be launched with this config.
    problems: list[Problem] = field(default_factory=list)
    #: The config the preflight was given (knobs and remedies applied, no fixes): two
    #: attempts with the same ``rendered`` get the same verdict.
    rendered: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _offload_block(existing: object, knobs: Knobs) -> dict[str, Any]:
    """An offload block that really offloads. A template's ``"device": "none"`` (DeepSpeed's
    "no offload") would otherwise survive and the rung would claim an offload that never
    happens; an explicit ``cpu``/``nvme`` device and its settings are kept."""
    block = dict(existing) if isinstance(existing, Mapping) else {}
    if block.get("device") in (None, "none"):
        block["device"] = "cpu"
    block.setdefault("pin_memory", knobs.pin_memory)
    return block


def render_deepspeed_config(
    base: Mapping[str, Any], knobs: Knobs, world_size: int, *, stated: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The DeepSpeed config for one attempt: the user's base config with dsguard's knobs.

    * ZeRO stage and offload blocks follow the knobs (existing block settings such as an NVMe
      device are kept; only missing keys get CPU defaults).
    * Batch keys that are ``"auto"`` stay ``"auto"`` (HF Trainer fills them from the flags
      dsguard passes); numeric ones are rewritten to match the knobs, because HF raises on a
      mismatch and a plain DeepSpeed script would silently train another global batch.
    * With offload and no ``optimizer`` block, HF creates a torch optimizer, which DeepSpeed
      rejects under offload unless ``zero_force_ds_cpu_optimizer`` is false.
    * ``stated``: batch keys written as numbers even when the base leaves them out or
      ``"auto"``: the config is the only route of that knob to the script (a plain DeepSpeed
      loop that reads its micro-batch from ``deepspeed.initialize``), so a missing key would
      leave the change unmade.
    """
    cfg: dict[str, Any] = copy.deepcopy(dict(base))
    if knobs.zero_stage is None:
        return cfg
    zero: dict[str, Any] = dict(cfg.get("zero_optimization") or {})
    zero["stage"] = knobs.zero_stage
    if knobs.offload is Offload.NONE:
        zero.pop("offload_optimizer", None)
        zero.pop("offload_param", None)
    else:
        zero["offload_optimizer"] = _offload_block(zero.get("offload_optimizer"), knobs)
        if knobs.offload is Offload.ALL:
            zero["offload_param"] = _offload_block(zero.get("offload_param"), knobs)
        else:
            zero.pop("offload_param", None)
        if "optimizer" not in cfg:
            cfg["zero_force_ds_cpu_optimizer"] = False
    if knobs.ds_bucket_divisor > 1:
        _shrink_buckets(zero, knobs.ds_bucket_divisor)
    cfg["zero_optimization"] = zero
    values = {
        "train_micro_batch_size_per_gpu": knobs.micro_batch_size,
        "gradient_accumulation_steps": knobs.gradient_accumulation_steps,
        "train_batch_size": knobs.global_batch(world_size),
    }
    for key in _BATCH_KEYS:
        if key in stated or (key in cfg and cfg[key] != "auto"):
            cfg[key] = values[key]
    return cfg


def _shrink_buckets(zero: dict[str, Any], divisor: int) -> None:
    """The ``ds_buckets`` rung: every buffer size divided by ``divisor`` (a missing key
    starts from DeepSpeed's default). ``"auto"`` is left to the HF Trainer, which fills it
    from the model's hidden size (already small: hidden**2 elements)."""
    for key, default in DS_BUCKET_DEFAULTS.items():
        value = zero.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        zero[key] = max(1, int(value) // divisor)


def render_attempt_config(
    job: Job, knobs: Knobs, *, remedies: Sequence[Remedy], world_size: int
) -> Rendered:
    """Render, patch and preflight the DeepSpeed config of one attempt of ``job``.

    Args:
        job: a job with a ``deepspeed:`` section (``ValueError`` otherwise: there is nothing
            to render, and the caller must not pretend there was).
        knobs: the attempt's knobs.
        remedies: environment remedies applied so far, in order (their config patches).
        world_size: data-parallel ranks of the attempt (the global-batch invariant).
    """
    if job.deepspeed is None:
        raise ValueError(f"job {job.name!r} has no deepspeed: section")
    rendered = render_deepspeed_config(
        job.deepspeed.base, knobs, world_size, stated=_stated_by_config(job)
    )
    if remedies:
        from dsguard.core.remedies import remedy_config

        rendered = remedy_config(rendered, remedies)
    pre = check_deepspeed_config(
        rendered, knobs=knobs, world_size=world_size, hf_trainer=uses_hf_trainer(job)
    )
    overrides = _overridden_batch_keys(job, rendered)
    return Rendered(pre.config, overrides + list(pre.fixes), list(pre.problems), rendered)


def _stated_by_config(job: Job) -> frozenset[str]:
    """The batch keys whose knob reaches the script only through the DeepSpeed config."""
    keys = {"micro_batch_size": "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps": "gradient_accumulation_steps"}  # fmt: skip
    return frozenset(key for knob, key in keys.items() if ds_config_delivers(job, knob))


def launcher_problems(job: Job) -> list[Problem]:
    """What the launcher cannot run as the job claims; the attempt must not start.

    ``launcher: python`` with a DeepSpeed config and a world size above 1 starts one process
    with no rank variables: ``deepspeed.init_distributed`` falls back to MPI discovery
    (``No module named 'mpi4py'``), and even with MPI it would train 1/N of the global batch
    dsguard reports. (At world size 1 the launch gets a one-process rendezvous instead.)
    """
    if job.launcher is LauncherKind.PYTHON and job.deepspeed is not None and job.world_size > 1:
        return [
            Problem(
                "launcher",
                f"launcher python starts one process, but the world size is {job.world_size};"
                " use launcher: deepspeed (or torchrun / accelerate) to start one rank per "
                "GPU, or set world_size: 1",
            )
        ]
    return []


#: The job-file knob each batch key of the DeepSpeed config comes from.
_KNOB_OF = {
    "train_micro_batch_size_per_gpu": "train.micro_batch_size",
    "gradient_accumulation_steps": "train.gradient_accumulation_steps",
    "train_batch_size": "micro x accumulation x world",
}


def _overridden_batch_keys(job: Job, rendered: Mapping[str, Any]) -> list[Fix]:
    """The base config's numeric batch keys that disagree with the job's own starting knobs,
    as fixes (old: the file's value, new: this attempt's).

    :func:`render_deepspeed_config` rewrites every numeric batch key to the knobs (HF raises
    on a mismatch, plain DeepSpeed would train another batch), and used to do it silently: a
    config saying ``train_micro_batch_size_per_gpu: 8`` ran with 4 and neither ``validate``
    nor the event log said so. Only a disagreement with the job's *starting* knobs is the
    user's to hear about; a later rung's change is logged by the rung itself, so a base
    config that agreed with ``train:`` reports nothing on any attempt. A disagreeing
    ``train_batch_size`` is refused by the job file (``dsguard.job.file.ds_batch_problem``)
    and appears here only for a job built without it.
    """
    assert job.deepspeed is not None
    base = job.deepspeed.base
    start = {
        "train_micro_batch_size_per_gpu": job.knobs.micro_batch_size,
        "gradient_accumulation_steps": job.knobs.gradient_accumulation_steps,
        "train_batch_size": job.knobs.global_batch(job.world_size),
    }
    fixes: list[Fix] = []
    for key in _BATCH_KEYS:
        old = base.get(key)
        if old is None or old == "auto" or isinstance(old, bool):
            continue
        if not isinstance(old, int | float) or old == start[key]:
            continue  # a non-number is the preflight's to refuse
        why = (
            f"the job's {_KNOB_OF[key]} is {start[key]}: dsguard's knobs override the "
            "DeepSpeed config's batch keys (the HF Trainer raises on a mismatch, plain "
            "DeepSpeed would silently train another batch)"
        )
        fixes.append(Fix(key, old, rendered.get(key), why))
    return fixes
