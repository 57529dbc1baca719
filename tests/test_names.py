"""One home for each name: knob, rung, launcher and offload names are defined once and every
other list is derived from it. These tests derive each consumer's view and cross-check it, so
a knob or rung added in one place and forgotten in another fails here, not in a user's run."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from dsguard.core import rungs
from dsguard.core.render import render_deepspeed_config
from dsguard.job.file import FlagsSection, TrainSection, _TopSection
from dsguard.job.knobs import (
    ALWAYS_PASSED_KNOBS,
    BOOL_KNOBS,
    DEFAULT_FLAGS,
    FLAG_KNOBS,
    KNOB_NAMES,
    KNOB_SPECS,
    OFFLOAD_NAMES,
    REQUIRED_KNOBS,
    Knobs,
    Offload,
)
from dsguard.job.model import (
    ALL_RUNGS,
    HOST_OOM_RUNGS,
    LAUNCHER_NAMES,
    OOM_RUNGS,
    CheckpointSpec,
    DeepSpeedSpec,
    Job,
    LauncherKind,
)
from dsguard.job.quickstart import job_from_command
from dsguard.run.launch import build_command, knob_args


def _job(launcher: LauncherKind = LauncherKind.PYTHON) -> Job:
    return Job(
        name="j", source=None, workdir=Path("/w"), launcher=launcher,
        script=Path("/w/train.py"), module=None, args=(), python="/usr/bin/python3",
        gpus=None, world_size=2, env={}, knobs=Knobs(8, zero_stage=2),
        explicit_knobs=frozenset(), flags=DEFAULT_FLAGS,
        deepspeed=DeepSpeedSpec(Path("/w/ds.json"), {"zero_optimization": {"stage": 2}}),
        checkpoints=CheckpointSpec(Path("/w/out")),
    )  # fmt: skip


def test_every_rung_name_has_exactly_one_rung_function() -> None:
    assert tuple(rungs.RUNGS) == ALL_RUNGS
    for name, fn in rungs.RUNGS.items():
        assert fn.__name__ == name
    # Every public function of the module with the Rung signature is reachable by name.
    rung_like = {
        n for n, obj in vars(rungs).items()
        if callable(obj) and getattr(obj, "__module__", "") == rungs.__name__
        and not n.startswith("_") and not isinstance(obj, type)
    }  # fmt: skip
    # inert_reason ("can this rung change anything here?") and blocked ("may this move change
    # these knobs?") answer for every rung; they are not rungs.
    assert rung_like - {"inert_reason", "blocked"} == set(ALL_RUNGS)
    assert set(OOM_RUNGS) <= set(ALL_RUNGS) and set(HOST_OOM_RUNGS) <= set(ALL_RUNGS)
    assert set(OOM_RUNGS) | set(HOST_OOM_RUNGS) == set(ALL_RUNGS)


def test_knob_table_matches_the_knobs_dataclass() -> None:
    fields = dataclasses.fields(Knobs)
    assert KNOB_NAMES == tuple(f.name for f in fields) == tuple(KNOB_SPECS)
    hints = typing.get_type_hints(Knobs)
    for name, spec in KNOB_SPECS.items():
        base = {"int": int, "bool": bool, "offload": Offload}[spec.kind]
        assert base in (typing.get_args(hints[name]) or (hints[name],)), name
    assert frozenset(n for n in KNOB_NAMES if hints[n] is bool) == BOOL_KNOBS
    assert {"micro_batch_size"} == REQUIRED_KNOBS
    assert len({s.label for s in KNOB_SPECS.values()}) == len(KNOB_SPECS)


def test_every_knob_has_a_schema_key_and_a_way_to_the_script() -> None:
    """A knob either has a flag (flags: key, default flag, knob_args) or reaches DeepSpeed
    through the rendered config; none is silently dropped."""
    assert TrainSection.names() == KNOB_NAMES
    assert FlagsSection.names() == FLAG_KNOBS == tuple(DEFAULT_FLAGS)
    assert set(FLAG_KNOBS) >= ALWAYS_PASSED_KNOBS
    job = _job()
    base_cfg = render_deepspeed_config(job.deepspeed.base, job.knobs, 2)  # type: ignore[union-attr]
    changed = {
        "micro_batch_size": 4, "gradient_accumulation_steps": 2, "max_length": 256,
        "zero_stage": 3, "offload": Offload.OPTIMIZER, "lora": True,
        "gradient_checkpointing": True, "dataloader_workers": 3, "pin_memory": False,
        "ds_bucket_divisor": 4,
    }  # fmt: skip
    assert set(changed) == set(KNOB_NAMES)
    for name in KNOB_NAMES:
        knobs = job.knobs.replace(**{name: changed[name]})
        if name in FLAG_KNOBS:
            flag = DEFAULT_FLAGS[name]
            assert flag is not None and flag in knob_args(job, knobs), name
        else:
            cfg = render_deepspeed_config(job.deepspeed.base, knobs, 2)  # type: ignore[union-attr]
            assert cfg != base_cfg, name


def test_the_quick_start_parser_knows_every_flag_knob(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    values = {n: ("true" if n in BOOL_KNOBS else "3") for n in FLAG_KNOBS}
    argv = ["python", "train.py"]
    for name in FLAG_KNOBS:
        argv += [str(DEFAULT_FLAGS[name]), values[name]]
    job = job_from_command(argv, cwd=tmp_path)
    assert job.explicit_knobs >= set(FLAG_KNOBS)
    assert job.args == ()  # every knob flag was taken out: dsguard passes them itself
    for name in FLAG_KNOBS:
        got = getattr(job.knobs, name)
        assert got == (True if name in BOOL_KNOBS else 3), name


def test_every_launcher_name_is_accepted_and_launches_differently() -> None:
    """Each launcher name is a job-file choice and gets its own argv prefix (a name with no
    branch in launch would fall through to another launcher's command)."""
    assert tuple(k.value for k in LauncherKind) == LAUNCHER_NAMES
    prefixes = set()
    for name in LAUNCHER_NAMES:
        top, errors = _TopSection.check({"name": "j", "launcher": name})
        assert errors == [] and top is not None and top.launcher == name
        argv = build_command(
            _job(LauncherKind(name)), Knobs(8), run_id="r", attempt=1, base_env={},
            ds_config=None, resume_from=None, output_dir=None,
        ).argv  # fmt: skip
        assert "/w/train.py" in argv
        prefixes.add(tuple(argv[: argv.index("/w/train.py")]))
    assert len(prefixes) == len(LAUNCHER_NAMES)
    _, errors = _TopSection.check({"name": "j", "launcher": "mpirun"})
    assert errors and errors[0].type == "literal_error"


def test_offload_names_are_the_enum_and_the_schema_choices() -> None:
    assert tuple(o.value for o in Offload) == OFFLOAD_NAMES
    for name in OFFLOAD_NAMES:
        section, errors = TrainSection.check({"micro_batch_size": 1, "offload": name})
        assert errors == [] and section is not None and section.offload == name
    _, errors = TrainSection.check({"micro_batch_size": 1, "offload": "gpu"})
    assert errors and errors[0].type == "literal_error"
