"""Preflight of the rendered DeepSpeed config: table-driven, pure, milliseconds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dsguard.core.preflight import (
    HF_AUTO_KEYS,
    Fix,
    PreflightResult,
    check_deepspeed_config,
    uses_hf_trainer,
)
from dsguard.core.render import render_deepspeed_config
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload
from dsguard.job.model import DeepSpeedSpec, Job, LauncherKind

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "deepspeed"
KNOBS = Knobs(micro_batch_size=4, gradient_accumulation_steps=2, zero_stage=2)
WORLD = 2  # global batch 16


def _base(**extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "train_batch_size": 16,
        "zero_optimization": {"stage": 2},
    }
    for dotted, value in extra.items():
        *parents, last = dotted.split("__")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def _check(
    cfg: dict[str, Any], *, hf: bool = True, knobs: Knobs = KNOBS, world: int = WORLD
) -> PreflightResult:
    return check_deepspeed_config(cfg, knobs=knobs, world_size=world, hf_trainer=hf)


def _get(cfg: dict[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node[part]
    return node


# (id, config, hf_trainer, {path: fixed value}, [problem paths])
CASES: list[tuple[str, dict[str, Any], bool, dict[str, Any], list[str]]] = [
    ("clean", _base(), True, {}, []),
    ("clean plain deepspeed", _base(), False, {}, []),
    # integer sizes
    (
        "float bucket 5e8 -> int",
        _base(zero_optimization__reduce_bucket_size=5e8),
        True,
        {"zero_optimization.reduce_bucket_size": 500_000_000},
        [],
    ),
    (
        "float 1.5e7 prefetch -> int",
        _base(zero_optimization__stage3_prefetch_bucket_size=1.5e7),
        False,
        {"zero_optimization.stage3_prefetch_bucket_size": 15_000_000},
        [],
    ),
    (
        "HF's 0.9*h*h (fractional) rounds",
        _base(zero_optimization__stage3_prefetch_bucket_size=0.9 * 4096 * 4096),
        True,
        {"zero_optimization.stage3_prefetch_bucket_size": 15_099_494},
        [],
    ),
    (
        "numeric string '5e8' -> int",
        _base(zero_optimization__allgather_bucket_size="5e8"),
        True,
        {"zero_optimization.allgather_bucket_size": 500_000_000},
        [],
    ),
    (
        "alias spelling is checked too",
        _base(zero_optimization__max_live_parameters=1e9),
        True,
        {"zero_optimization.max_live_parameters": 1_000_000_000},
        [],
    ),
    (
        "offload buffer size",
        _base(
            zero_optimization__stage=3,
            zero_optimization__offload_param={"device": "cpu", "buffer_size": 1e8},
        ),
        True,
        {"zero_optimization.offload_param.buffer_size": 100_000_000},
        [],
    ),
    (
        "negative bucket refused",
        _base(zero_optimization__allgather_bucket_size=-1),
        True,
        {},
        ["zero_optimization.allgather_bucket_size"],
    ),
    (
        "negative float refused, not rounded",
        _base(zero_optimization__sub_group_size=-1e9),
        True,
        {},
        ["zero_optimization.sub_group_size"],
    ),
    (
        "reduce_bucket_size 0 refused (gt=0)",
        _base(zero_optimization__reduce_bucket_size=0),
        True,
        {},
        ["zero_optimization.reduce_bucket_size"],
    ),
    (
        "non-numeric string refused",
        _base(zero_optimization__reduce_bucket_size="500MB"),
        True,
        {},
        ["zero_optimization.reduce_bucket_size"],
    ),
    (
        "fractional small float refused",
        _base(zero_optimization__stage3_max_reuse_distance=100.5),
        True,
        {},
        ["zero_optimization.stage3_max_reuse_distance"],
    ),
    (
        "bool is not a size",
        _base(zero_optimization__sub_group_size=True),
        True,
        {},
        ["zero_optimization.sub_group_size"],
    ),
    (
        "infinity refused",
        _base(zero_optimization__sub_group_size=float("inf")),
        True,
        {},
        ["zero_optimization.sub_group_size"],
    ),
    (
        "fp16 window float",
        _base(fp16={"enabled": True, "loss_scale_window": 1000.0}),
        True,
        {"fp16.loss_scale_window": 1000},
        [],
    ),
    # "auto"
    (
        "HF fills auto buckets and batch keys",
        _base(
            train_micro_batch_size_per_gpu="auto",
            train_batch_size="auto",
            gradient_accumulation_steps="auto",
            gradient_clipping="auto",
            zero_optimization__reduce_bucket_size="auto",
            zero_optimization__stage3_prefetch_bucket_size="auto",
            zero_optimization__stage3_param_persistence_threshold="auto",
        ),
        True,
        {},
        [],
    ),
    (
        "HF does not fill allgather_bucket_size",
        _base(zero_optimization__allgather_bucket_size="auto"),
        True,
        {},
        ["zero_optimization.allgather_bucket_size"],
    ),
    (
        "HF does not fill sub_group_size",
        _base(zero_optimization__stage=3, zero_optimization__sub_group_size="auto"),
        True,
        {},
        ["zero_optimization.sub_group_size"],
    ),
    (
        "auto bucket without HF",
        _base(zero_optimization__reduce_bucket_size="auto"),
        False,
        {},
        ["zero_optimization.reduce_bucket_size"],
    ),
    (
        "auto batch keys without HF",
        _base(train_batch_size="auto", train_micro_batch_size_per_gpu="auto"),
        False,
        {},
        ["train_batch_size", "train_micro_batch_size_per_gpu"],
    ),
    (
        "auto optimizer lr without HF",
        _base(optimizer={"type": "AdamW", "params": {"lr": "auto"}}),
        False,
        {},
        ["optimizer.params.lr"],
    ),
    (
        "auto inside a list is not filled",
        _base(optimizer={"type": "AdamW", "params": {"betas": ["auto", 0.999]}}),
        True,
        {},
        ["optimizer.params.betas[0]"],
    ),
    # batch
    (
        "explicit train_batch_size disagrees -> knobs",
        _base(train_batch_size=32),
        True,
        {"train_batch_size": 16},
        [],
    ),
    (
        "explicit micro/accum disagree -> knobs",
        _base(train_micro_batch_size_per_gpu=8, gradient_accumulation_steps=1),
        False,
        {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        [],
    ),
    (
        "float batch -> int",
        _base(train_batch_size=16.0),
        True,
        {"train_batch_size": 16},
        [],
    ),
    (
        "non-numeric batch refused",
        _base(train_micro_batch_size_per_gpu="four"),
        True,
        {},
        ["train_micro_batch_size_per_gpu"],
    ),
    (
        "HF: missing accumulation added (accelerate would use 1)",
        {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}},
        True,
        {"gradient_accumulation_steps": 2},
        [],
    ),
    (
        "plain DeepSpeed: only train_batch_size -> micro and accum added",
        {"train_batch_size": 16, "zero_optimization": {"stage": 2}},
        False,
        {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        [],
    ),
    (
        "HF: no zero_optimization -> added (accelerate requires it)",
        {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        True,
        {"zero_optimization": {"stage": 2}},
        [],
    ),
    # offload
    (
        "HF torch optimizer + offload -> zero_force_ds_cpu_optimizer false",
        _base(zero_optimization__offload_optimizer={"device": "cpu"}),
        True,
        {"zero_force_ds_cpu_optimizer": False},
        [],
    ),
    (
        "optimizer block + offload: DeepSpeed's optimizer, nothing to fix",
        _base(
            zero_optimization__offload_optimizer={"device": "cpu"},
            optimizer={"type": "AdamW", "params": {"lr": 1e-4}},
        ),
        True,
        {},
        [],
    ),
    (
        "plain DeepSpeed + offload: script's optimizer unknown, left alone",
        _base(zero_optimization__offload_optimizer={"device": "cpu"}),
        False,
        {},
        [],
    ),
    (
        "offload device auto -> cpu",
        _base(
            zero_optimization__offload_optimizer={"device": "auto"},
            zero_force_ds_cpu_optimizer=False,
        ),
        True,
        {"zero_optimization.offload_optimizer.device": "cpu"},
        [],
    ),
    (
        "offload at ZeRO-0",
        _base(zero_optimization__stage=0, zero_optimization__offload_optimizer={"device": "cpu"}),
        False,
        {},
        ["zero_optimization.stage"],
    ),
    (
        "legacy cpu_offload at ZeRO-0",
        _base(zero_optimization__stage=0, zero_optimization__cpu_offload=True),
        False,
        {},
        ["zero_optimization.stage"],
    ),
    (
        "offload_param at ZeRO-2",
        _base(zero_optimization__offload_param={"device": "cpu"}),
        False,
        {},
        ["zero_optimization.offload_param"],
    ),
    (
        "offload_param device none at ZeRO-2 is fine",
        _base(zero_optimization__offload_param={"device": "none"}),
        False,
        {},
        [],
    ),
    (
        "offload_param at ZeRO-3",
        _base(zero_optimization__stage=3, zero_optimization__offload_param={"device": "cpu"}),
        False,
        {},
        [],
    ),
    (
        "unknown offload device",
        _base(zero_optimization__offload_optimizer={"device": "gpu"}),
        False,
        {},
        ["zero_optimization.offload_optimizer.device"],
    ),
    (
        "nvme without a path",
        _base(zero_optimization__offload_optimizer={"device": "nvme"}),
        False,
        {},
        ["zero_optimization.offload_optimizer.nvme_path"],
    ),
    # precision
    (
        "fp16 and bf16 both on",
        _base(fp16={"enabled": True}, bf16={"enabled": True}),
        True,
        {},
        ["bf16.enabled"],
    ),
    (
        "fp16 and bf16 auto under HF",
        _base(fp16={"enabled": "auto"}, bf16={"enabled": "auto"}),
        True,
        {},
        [],
    ),
    (
        "fp16 on, bf16 off",
        _base(fp16={"enabled": True}, bf16={"enabled": False}),
        True,
        {},
        [],
    ),
]


@pytest.mark.parametrize(
    ("cfg", "hf", "fixed", "problems"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_preflight_table(
    cfg: dict[str, Any], hf: bool, fixed: dict[str, Any], problems: list[str]
) -> None:
    before = copy.deepcopy(cfg)
    result = _check(cfg, hf=hf)
    assert cfg == before, "the input config must not be modified"
    assert sorted(p.path for p in result.problems) == sorted(problems), result.problems
    assert {f.path for f in result.fixes} == set(fixed), result.fixes
    for path, value in fixed.items():
        got = _get(result.config, path)
        assert got == value
        assert type(got) is type(value)
    assert result.ok is (not problems)
    for fix in result.fixes:
        assert fix.why
        json.dumps(fix.as_dict())  # event-ready
    for problem in result.problems:
        assert problem.message


def test_fix_records_old_value() -> None:
    result = _check(_base(zero_optimization__reduce_bucket_size=5e8))
    assert result.fixes == [
        Fix("zero_optimization.reduce_bucket_size", 5e8, 500_000_000, result.fixes[0].why)
    ]
    assert "int_from_float" in result.fixes[0].why
    assert "500000000.0 -> 500000000" in str(result.fixes[0])


def test_added_key_has_no_old_value() -> None:
    result = _check({"zero_optimization": {"stage": 2}})
    accum = next(f for f in result.fixes if f.path == "gradient_accumulation_steps")
    assert accum.old is None
    assert "(absent)" in str(accum)


def test_auto_message_names_the_reason() -> None:
    plain = _check(_base(zero_optimization__reduce_bucket_size="auto"), hf=False)
    assert "HF Trainer" in plain.problems[0].message
    hf = _check(_base(zero_optimization__allgather_bucket_size="auto"), hf=True)
    assert "not found in kwargs" in hf.problems[0].message


def test_problem_and_fix_do_not_double_report() -> None:
    result = _check(_base(train_batch_size="auto"), hf=False)
    assert [p.path for p in result.problems] == ["train_batch_size"]


@pytest.mark.parametrize("name", ["zero2.json", "zero3.json", "zero2-cpu.json"])
@pytest.mark.parametrize("offload", list(Offload))
def test_shipped_templates_render_clean(name: str, offload: Offload) -> None:
    """Every template x offload level dsguard renders passes preflight under HF."""
    base = json.loads((CONFIGS / name).read_text())
    stage = 3 if offload is Offload.ALL else base["zero_optimization"]["stage"]
    knobs = KNOBS.replace(zero_stage=stage, offload=offload)
    cfg = render_deepspeed_config(base, knobs, WORLD)
    result = _check(cfg, knobs=knobs)
    assert result.problems == []
    assert {f.path for f in result.fixes} <= {"zero_force_ds_cpu_optimizer"}


def test_hf_auto_keys_cover_the_templates() -> None:
    for name in ("zero2.json", "zero3.json", "zero2-cpu.json"):
        base = json.loads((CONFIGS / name).read_text())
        stack: list[tuple[str, Any]] = [("", base)]
        while stack:
            prefix, node = stack.pop()
            if isinstance(node, dict):
                stack += [(f"{prefix}.{k}" if prefix else k, v) for k, v in node.items()]
            elif node == "auto":
                assert prefix in HF_AUTO_KEYS, (name, prefix)


def _job(flag: str | None) -> Job:
    return Job(
        name="j",
        source=None,
        workdir=Path("/"),
        launcher=LauncherKind.PYTHON,
        script=Path("/train.py"),
        module=None,
        args=(),
        python="/usr/bin/python3",
        gpus=None,
        world_size=1,
        env={},
        knobs=KNOBS,
        explicit_knobs=frozenset(),
        flags=dict(DEFAULT_FLAGS),
        deepspeed=DeepSpeedSpec(config_path=Path("/ds.json"), base={}, flag=flag),
        checkpoints=None,
    )


def test_uses_hf_trainer() -> None:
    assert uses_hf_trainer(_job("--deepspeed"))
    assert not uses_hf_trainer(_job("--deepspeed_config"))
    assert not uses_hf_trainer(_job(None))
