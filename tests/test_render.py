"""render_attempt_config: the one render -> remedies -> preflight path for an attempt."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dsguard.core.classify import FailureKind
from dsguard.core.preflight import check_deepspeed_config
from dsguard.core.remedies import ConfigPatch, Remedy, remedy_config
from dsguard.core.render import Rendered, render_attempt_config, render_deepspeed_config
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload
from dsguard.job.model import DeepSpeedSpec, Job, LauncherKind
from dsguard.run import launch

BASE: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "train_batch_size": 16,
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8},
    "fp16": {"enabled": True},
}


def _job(base: dict[str, Any] | None = BASE, flag: str | None = "--deepspeed") -> Job:
    spec = None if base is None else DeepSpeedSpec(Path("/w/ds.json"), base, flag=flag)
    return Job(
        name="j", source=None, workdir=Path("/w"), launcher=LauncherKind.PYTHON,
        script=Path("/w/train.py"), module=None, args=(), python="/usr/bin/python3",
        gpus=None, world_size=2, env={}, knobs=Knobs(8, zero_stage=2),
        explicit_knobs=frozenset(), flags=dict(DEFAULT_FLAGS), deepspeed=spec, checkpoints=None,
    )  # fmt: skip


BF16 = Remedy(
    "bf16", FailureKind.DS_BUILD_ERROR, "why",
    config=ConfigPatch(set={"bf16.enabled": True, "fp16.enabled": False}),
)  # fmt: skip


def test_the_renderer_has_one_home() -> None:
    """core.render is where callers import it from; launch keeps no second name for it."""
    assert render_deepspeed_config.__module__ == "dsguard.core.render"
    assert not hasattr(launch, "render_deepspeed_config")


def test_same_as_the_three_steps_it_replaces() -> None:
    """Knobs, then remedy patches, then preflight: the order the run loop used."""
    job = _job()
    knobs = Knobs(4, 2, zero_stage=3, offload=Offload.OPTIMIZER)
    before = copy.deepcopy(BASE)
    got = render_attempt_config(job, knobs, remedies=[BF16], world_size=2)
    rendered = remedy_config(render_deepspeed_config(BASE, knobs, 2), [BF16])
    pre = check_deepspeed_config(rendered, knobs=knobs, world_size=2, hf_trainer=True)
    assert isinstance(got, Rendered)
    assert got.config == pre.config and got.fixes == pre.fixes and got.problems == pre.problems
    assert got.rendered == rendered
    assert before == BASE  # the job's base config is never modified
    # the knobs, the remedy and a preflight fix all reached the final config
    assert got.config["zero_optimization"]["stage"] == 3
    assert got.config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert got.config["train_micro_batch_size_per_gpu"] == 4
    assert got.config["train_batch_size"] == 16  # 4 x 2 x 2: the global batch kept
    assert got.config["bf16"] == {"enabled": True} and got.config["fp16"] == {"enabled": False}
    assert "zero_optimization.reduce_bucket_size" in {f.path for f in got.fixes}
    assert got.config["zero_optimization"]["reduce_bucket_size"] == 500_000_000


def test_without_remedies_no_patch_and_problems_are_reported() -> None:
    base = dict(BASE, fp16={"enabled": True}, bf16={"enabled": True})  # both: DeepSpeed refuses
    got = render_attempt_config(_job(base), Knobs(8, zero_stage=2), remedies=(), world_size=2)
    assert not got.ok and got.problems
    assert all(p.message for p in got.problems)
    fixed = render_attempt_config(_job(), Knobs(8, zero_stage=2), remedies=(), world_size=2)
    assert fixed.ok and fixed.problems == []


def test_a_job_without_deepspeed_has_nothing_to_render() -> None:
    with pytest.raises(ValueError, match="no deepspeed"):
        render_attempt_config(_job(None), Knobs(8), remedies=(), world_size=1)


def test_validate_does_not_pay_for_the_remedies() -> None:
    """`dsguard validate` renders without importing the remedies' tables (start-up budget)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dsguard.core.render import render_attempt_config\n"
        "print('dsguard.core.remedies' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def _job_with(base: dict[str, Any], knobs: Knobs, world: int) -> Job:
    return Job(
        name="j", source=None, workdir=Path("/w"), launcher=LauncherKind.PYTHON,
        script=Path("/w/train.py"), module=None, args=(), python="/usr/bin/python3",
        gpus=None, world_size=world, env={}, knobs=knobs, explicit_knobs=frozenset(),
        flags=dict(DEFAULT_FLAGS), deepspeed=DeepSpeedSpec(Path("/w/ds.json"), base),
        checkpoints=None,
    )  # fmt: skip


def test_a_base_batch_key_overridden_by_the_job_is_a_visible_fix() -> None:
    """Issue 13.12: the base config's micro-batch 8 against train.micro_batch_size 4 was
    rewritten silently (render did it before the preflight could see it); now a fix with the
    file's value and the launched one, on every attempt it applies to."""
    base = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
            "train_batch_size": 8, "zero_optimization": {"stage": 2}}  # fmt: skip
    job = _job_with(base, Knobs(4, 2, zero_stage=2), world=1)  # 4 x 2 x 1 = 8
    got = render_attempt_config(job, job.knobs, remedies=(), world_size=1)
    assert got.ok and got.config["train_micro_batch_size_per_gpu"] == 4
    (fix,) = got.fixes
    assert (fix.path, fix.old, fix.new) == ("train_micro_batch_size_per_gpu", 8, 4)
    assert "train.micro_batch_size is 4" in fix.why
    rung = render_attempt_config(job, Knobs(2, 4, zero_stage=2), remedies=(), world_size=1)
    assert [(f.path, f.old, f.new) for f in rung.fixes] == [
        ("train_micro_batch_size_per_gpu", 8, 2)
    ]


def test_a_base_that_agrees_with_the_job_reports_nothing_on_any_rung() -> None:
    """A rung's own change is logged by the rung, not as a repair of the user's file."""
    base = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
            "train_batch_size": 8, "zero_optimization": {"stage": 2}}  # fmt: skip
    job = _job_with(base, Knobs(4, 2, zero_stage=2), world=1)
    for knobs in (job.knobs, Knobs(2, 4, zero_stage=2), Knobs(1, 8, zero_stage=3)):
        got = render_attempt_config(job, knobs, remedies=(), world_size=1)
        assert got.ok and got.fixes == [], got.fixes
        assert got.config["train_batch_size"] == 8
