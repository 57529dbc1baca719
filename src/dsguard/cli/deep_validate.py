"""``dsguard validate --deep``: the rendered DeepSpeed configs, checked by DeepSpeed itself.

``dsguard validate`` checks the job file. ``--deep`` goes one step further, before any GPU
time is spent: it renders the DeepSpeed config of attempt 1 *and of every rung the ladder
could reach* (a ZeRO-3 or offload rung renders a different config, and finding out at 2 a.m.
that it is invalid ends the run with ``ds_config_error``), runs :mod:`dsguard.core.preflight` on
each, and hands the preflight-fixed configs to DeepSpeed's own ``DeepSpeedConfig`` inside the
training environment (:mod:`dsguard.probes.ds_config_probe`, run with ``job.python``). That
catches what dsguard's rules do not model: a typo'd ZeRO key (pydantic ``extra_forbidden``),
a wrong type in a section dsguard never reads, the installed DeepSpeed's own limits.

For a job that hands its config to the HF Trainer, the ``"auto"`` values the Trainer would
fill in are replaced by stand-ins of the right type before DeepSpeed sees them (the batch keys
by the knobs' values, hidden-size buckets by a 4096-wide model's); their real values exist
only inside the Trainer.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsguard.core.preflight import (
    ACCUM,
    HF_AUTO_KEYS,
    MICRO,
    TRAIN_BATCH,
    Fix,
    uses_hf_trainer,
)
from dsguard.core.render import render_attempt_config
from dsguard.errors import Problem
from dsguard.host.probe import run_probe
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job
from dsguard.probes import DS_CONFIG_PROBE

__all__ = [
    "DeepValidation",
    "DsError",
    "EnvValidation",
    "deep_validate",
    "hf_stand_ins",
    "run_deep_validation",
    "validate_in_environment",
]

PROBE_TIMEOUT_S = 180.0
#: Hidden size used for the stand-ins of HF's hidden-size buckets.
_STAND_IN_HIDDEN = 4096


@dataclass(frozen=True, slots=True)
class DsError:
    """One thing DeepSpeed's config classes refused; ``path`` is dotted ("" = whole config)."""

    path: str
    message: str
    kind: str


@dataclass(frozen=True, slots=True)
class EnvValidation:
    """DeepSpeed's verdict per config, or why it could not be asked (``error``)."""

    deepspeed_version: str | None
    results: list[list[DsError]] | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeepValidation:
    #: Preflight fixes of attempt 1's config (later rungs get their own at launch).
    fixes: list[Fix] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    deepspeed_version: str | None = None
    #: Distinct rendered configs checked (attempt 1 plus the ladder's).
    configs_checked: int = 0


def hf_stand_ins(cfg: Mapping[str, Any], knobs: Knobs, world_size: int) -> dict[str, Any]:
    """A copy with each HF-filled ``"auto"`` replaced by a value of the type HF would put there."""
    h = _STAND_IN_HIDDEN
    values: dict[str, Any] = {
        MICRO: knobs.micro_batch_size,
        ACCUM: knobs.gradient_accumulation_steps,
        TRAIN_BATCH: knobs.global_batch(world_size),
        "gradient_clipping": 1.0,
        "optimizer.params.lr": 5e-5,
        "optimizer.params.betas": [0.9, 0.999],
        "optimizer.params.eps": 1e-8,
        "optimizer.params.weight_decay": 0.0,
        "scheduler.params.warmup_min_lr": 0,
        "scheduler.params.warmup_max_lr": 5e-5,
        "scheduler.params.total_num_steps": 1000,
        "scheduler.params.warmup_num_steps": 1,
        "fp16.enabled": False,
        "bf16.enabled": False,
        "zero_optimization.stage": knobs.zero_stage or 0,
        "zero_optimization.reduce_bucket_size": h * h,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * h * h),
        "zero_optimization.stage3_param_persistence_threshold": 10 * h,
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
        "zero_optimization.offload_optimizer.device": "none",
        "zero_optimization.offload_param.device": "none",
        "zero_optimization.offload_optimizer.nvme_path": "none",
        "zero_optimization.offload_param.nvme_path": "none",
    }
    assert set(values) == HF_AUTO_KEYS
    out: dict[str, Any] = copy.deepcopy(dict(cfg))
    for path, value in values.items():
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(last) == "auto":
            node[last] = value
    return out


def validate_in_environment(
    python: str,
    items: Sequence[tuple[Mapping[str, Any], int]],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> EnvValidation:
    """Validate ``(config, world_size)`` pairs with the DeepSpeed installed for ``python``."""
    request = {"configs": [{"config": c, "world_size": w} for c, w in items]}
    probe = run_probe(
        DS_CONFIG_PROBE,
        python,
        env=os.environ if env is None else env,
        timeout_s=timeout_s,
        request=request,
    )
    data = probe.data
    if not probe.ok or data is None:
        return EnvValidation(None, None, f"DeepSpeed's check failed: {probe.error}")
    if "error" in data:
        return EnvValidation(None, None, f"deepspeed is not importable: {data['error']}")
    results = [
        [DsError(e.get("path", ""), e.get("message", ""), e.get("kind", "")) for e in r["errors"]]
        for r in data["results"]
    ]
    return EnvValidation(data.get("deepspeed_version"), results)


def _ladder_knobs(job: Job) -> list[tuple[str, Knobs]]:
    """Attempt 1's knobs, then every rung's the ladder could reach, labelled."""
    from dsguard.core.classify import FailureKind
    from dsguard.core.ladder import PolicyConfig, plan

    out: list[tuple[str, Knobs]] = [("attempt 1", job.knobs)]
    cfg = PolicyConfig.from_job(job)
    for kind in (FailureKind.CUDA_OOM, FailureKind.HOST_OOM):
        for step in plan(kind, job.knobs, cfg)[1:]:
            out.append((f"{kind.value} rung {step.rung}", step.knobs))
    return out


def run_deep_validation(
    job: Job, *, ladder: bool = True, timeout_s: float = PROBE_TIMEOUT_S
) -> DeepValidation:
    """Render, preflight and DeepSpeed-validate attempt 1's config (and the ladder's).

    Problems are :class:`dsguard.errors.Problem` located at the base DeepSpeed config, the
    file the user edits; a later rung's problem says which rung renders it.
    """
    spec = job.deepspeed
    if spec is None:
        return DeepValidation()
    hf = uses_hf_trainer(job)
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()

    def add(path: str, message: str, label: str) -> None:
        if (path, message) in seen:
            return
        seen.add((path, message))
        where = "" if label == "attempt 1" else f" (first at {label})"
        problems.append(Problem(spec.config_path, None, path or "(config)", message + where))

    checked: list[tuple[str, dict[str, Any], Knobs]] = []
    rendered_seen: set[str] = set()
    fixes: list[Fix] = []
    for label, knobs in _ladder_knobs(job) if ladder else [("attempt 1", job.knobs)]:
        # No remedies: they answer failures of a run, and validation runs before any.
        pre = render_attempt_config(job, knobs, remedies=(), world_size=job.world_size)
        key = json.dumps(pre.rendered, sort_keys=True, default=repr)
        if key in rendered_seen:
            continue
        rendered_seen.add(key)
        if label == "attempt 1":
            fixes = pre.fixes
        for p in pre.problems:
            add(p.path, p.message, label)
        final = hf_stand_ins(pre.config, knobs, job.world_size) if hf else pre.config
        checked.append((label, final, knobs))

    env = dict(os.environ)
    env.update(job.env)
    verdict = validate_in_environment(
        job.python, [(c, job.world_size) for _, c, _ in checked], env=env, timeout_s=timeout_s
    )
    if verdict.results is None:
        problems.append(
            Problem(
                spec.config_path,
                None,
                "deepspeed",
                f"cannot check the config with DeepSpeed's own classes ({verdict.error}); "
                f"install deepspeed for {job.python} or set `python:` to the training "
                "environment's interpreter",
            )
        )
    else:
        for (label, _, _), errors in zip(checked, verdict.results, strict=True):
            for e in errors:
                add(e.path, f"DeepSpeed {verdict.deepspeed_version} refuses it: {e.message}", label)
    return DeepValidation(
        fixes=fixes,
        problems=problems,
        deepspeed_version=verdict.deepspeed_version,
        configs_checked=len(checked),
    )


def deep_validate(job: Job) -> list[Problem]:
    """Every problem with the DeepSpeed configs this job would launch with; [] = launchable."""
    return run_deep_validation(job).problems
