"""validate --deep: render + preflight + DeepSpeed's own config classes in the training env."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.cli.deep_validate import (
    deep_validate,
    hf_stand_ins,
    run_deep_validation,
    validate_in_environment,
)
from dsguard.job.file import load_job
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job

ZERO2 = Path(__file__).resolve().parent.parent / "configs" / "deepspeed" / "zero2.json"


def _job(tmp_path: Path, ds: dict[str, Any], *, python: str = sys.executable, **extra: Any) -> Job:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    doc: dict[str, Any] = {
        "name": "deep",
        "script": "train.py",
        "python": python,
        "args": ["--output_dir", "out"],
        "world_size": 2,
        "train": {"micro_batch_size": 4, "gradient_accumulation_steps": 2},
        "deepspeed": {"config": "ds.json"},
        "checkpoints": {"dir": "out"},
        **extra,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_job(path)


def test_float_bucket_is_fixed_and_deepspeed_accepts_the_result(tmp_path: Path) -> None:
    base = json.loads(ZERO2.read_text())
    base["zero_optimization"]["reduce_bucket_size"] = 5e8
    base["zero_optimization"]["allgather_bucket_size"] = 0.9 * 4096 * 4096  # fractional
    job = _job(tmp_path, base)
    result = run_deep_validation(job)
    assert result.problems == [], [str(p) for p in result.problems]
    assert {f.path: f.new for f in result.fixes} == {
        "zero_optimization.reduce_bucket_size": 500_000_000,
        "zero_optimization.allgather_bucket_size": 15_099_494,
    }
    assert result.deepspeed_version
    # attempt 1 plus the ladder's ZeRO-3 / offload rungs, each rendered differently
    assert result.configs_checked >= 3


def test_string_bucket_is_refused_by_deepspeeds_own_class(tmp_path: Path) -> None:
    base = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_optimization": {
            "stage": 2,
            "reduce_bucket_size": "lots",
            "stage3_prefech_bucket_size": 1,  # a typo only DeepSpeed's schema knows
        },
    }
    job = _job(tmp_path, base)
    problems = deep_validate(job)
    text = [str(p) for p in problems]
    ours = [p for p in problems if not p.message.startswith("DeepSpeed ")]
    theirs = [p for p in problems if p.message.startswith("DeepSpeed ")]
    assert [p.field for p in ours] == ["zero_optimization.reduce_bucket_size"], text
    assert {p.field for p in theirs} == {
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefech_bucket_size",
    }, text
    bucket = next(p for p in theirs if p.field == "zero_optimization.reduce_bucket_size")
    assert "unable to parse string as an integer" in bucket.message  # pydantic's own text
    assert all(p.file == tmp_path / "ds.json" for p in problems)
    assert "ds.json: zero_optimization.reduce_bucket_size: " in text[0]


def test_rung_only_problem_names_the_rung(tmp_path: Path) -> None:
    """Attempt 1 (ZeRO-2, no offload) is fine; the offload rung's block has a bad size."""
    base = json.loads(ZERO2.read_text())
    base["zero_optimization"]["offload_optimizer"] = {"device": "none", "buffer_count": -4}
    job = _job(tmp_path, base, ladder={"oom": ["micro_batch", "offload_optimizer"]})
    problems = deep_validate(job)
    assert problems
    assert all("offload_optimizer" in p.message or "offload_optimizer" in p.field for p in problems)
    # every problem is first seen at the offload rung: attempt 1 itself is clean
    assert all("(first at cuda_oom rung offload_optimizer)" in p.message for p in problems), [
        str(p) for p in problems
    ]


def test_no_deepspeed_in_the_training_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    job = _job(tmp_path, json.loads(ZERO2.read_text()), python=str(bare / "bin" / "python"))
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    (problem,) = deep_validate(job)
    assert problem.field == "deepspeed"
    assert "deepspeed is not importable" in problem.message
    assert "install deepspeed" in problem.message


def test_missing_interpreter() -> None:
    verdict = validate_in_environment("/nonexistent/python", [({}, 1)])
    assert verdict.results is None and "no such interpreter" in (verdict.error or "")


def test_job_without_deepspeed(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump({"name": "plain", "script": "train.py", "train": {"micro_batch_size": 2}})
    )
    assert deep_validate(load_job(path)) == []


@pytest.mark.parametrize("stage", [2, 3])
def test_hf_stand_ins_fill_only_autos(stage: int) -> None:
    cfg = json.loads(ZERO2.read_text())
    cfg["zero_optimization"]["stage"] = stage
    cfg["zero_optimization"]["reduce_bucket_size"] = "auto"
    cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}
    knobs = Knobs(micro_batch_size=4, gradient_accumulation_steps=2, zero_stage=stage)
    out = hf_stand_ins(cfg, knobs, 2)
    assert out["train_batch_size"] == 16
    assert out["train_micro_batch_size_per_gpu"] == 4
    assert out["zero_optimization"]["reduce_bucket_size"] == 4096 * 4096
    kept = cfg["zero_optimization"]["allgather_bucket_size"]
    assert out["zero_optimization"]["allgather_bucket_size"] == kept  # not "auto": untouched
    assert out["scheduler"]["params"]["warmup_num_steps"] == 1
    assert cfg["train_batch_size"] == "auto"  # input untouched
    assert "auto" not in json.dumps(out)
