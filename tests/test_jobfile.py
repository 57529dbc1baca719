"""Job file and quick-start parsing: every bad input must name the file, line and field.

Each error test writes a small job file whose line numbers can be read off the literal, so a
regression in the YAML locator shows up as a wrong line rather than just a wrong message.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dsguard.errors import JobFileError, Problem
from dsguard.job.file import (
    _SECTIONS,
    DOCUMENT,
    FlagsSection,
    TrainSection,
    _TopSection,
    job_file_schema,
    load_job,
)
from dsguard.job.knobs import DEFAULT_FLAGS, FLAG_KNOBS, KNOB_NAMES, Knobs, Offload
from dsguard.job.model import ALL_RUNGS, CheckpointSpec, Job, Ladder, LauncherKind, Limits
from dsguard.job.quickstart import job_from_command

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "examples" / "llama7b-sft.yaml"
ZERO2 = ROOT / "configs" / "deepspeed" / "zero2.json"
ZERO3 = ROOT / "configs" / "deepspeed" / "zero3.json"


# ------------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def python_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bare ``python`` (job files, quick-start commands) is looked up on PATH; make sure the
    interpreter running the tests is found there even outside an activated venv."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "python").exists():
        pytest.skip("the test interpreter's directory has no `python`")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A training dir with a script and the repo's two DeepSpeed configs."""
    (tmp_path / "train.py").write_text("print('training')\n")
    shutil.copy(ZERO2, tmp_path / "zero2.json")
    shutil.copy(ZERO3, tmp_path / "zero3.json")
    return tmp_path


def write_job(directory: Path, text: str, name: str = "job.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def write_ds(directory: Path, config: dict[str, Any], name: str = "ds.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(config))
    return path


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(JobFileError) as info:
        load_job(path)
    return info.value.problems


def the_problem(problems: list[Problem], field: str) -> Problem:
    matching = [p for p in problems if p.field == field]
    assert len(matching) == 1, f"expected one problem for {field!r}, got {problems}"
    return matching[0]


def assert_problem(path: Path, field: str, line: int | None, *fragments: str) -> Problem:
    """The job at ``path`` fails with a problem for ``field`` at ``line`` whose message
    contains every fragment."""
    problem = the_problem(problems_of(path), field)
    assert problem.file == path
    assert problem.line == line, problem
    for fragment in fragments:
        assert fragment in problem.message, problem
    return problem


def only_problem(path: Path) -> Problem:
    problems = problems_of(path)
    assert len(problems) == 1, problems
    return problems[0]


# -------------------------------------------------------------------- examples and schema


def _example_in(directory: Path) -> Path:
    """The example job in a copy of the repo layout that also has the script it names."""
    (directory / "configs" / "examples").mkdir(parents=True)
    (directory / "configs" / "deepspeed").mkdir(parents=True)
    shutil.copy(EXAMPLE, directory / "configs" / "examples")
    shutil.copy(ZERO2, directory / "configs" / "deepspeed")
    (directory / "train.py").write_text("")
    return directory / "configs" / "examples" / EXAMPLE.name


def test_example_job_in_repo_has_no_problem_but_the_missing_script() -> None:
    if (ROOT / "train.py").is_file():
        assert load_job(EXAMPLE).name == "llama7b-sft"
        return
    problem = only_problem(EXAMPLE)
    assert (problem.field, problem.line) == ("script", 11)
    assert str(ROOT / "train.py") in problem.message


def test_example_job_resolves_everything(tmp_path: Path) -> None:
    job = load_job(_example_in(tmp_path))
    assert job.name == "llama7b-sft"
    assert job.launcher is LauncherKind.DEEPSPEED
    assert job.workdir == tmp_path
    assert job.script == tmp_path / "train.py"
    assert job.gpus == (0, 1, 2, 3)
    assert job.world_size == 4
    assert job.knobs == Knobs(
        micro_batch_size=4,
        gradient_accumulation_steps=4,
        max_length=2048,
        zero_stage=2,
        offload=Offload.NONE,
        lora=False,
        gradient_checkpointing=False,
        dataloader_workers=4,
        pin_memory=True,
    )
    assert job.knobs.global_batch(job.world_size) == 64
    assert job.explicit_knobs == frozenset(KNOB_NAMES) - {"ds_bucket_divisor"}
    assert job.deepspeed is not None
    assert job.deepspeed.config_path == tmp_path / "configs" / "deepspeed" / "zero2.json"
    assert job.deepspeed.flag == "--deepspeed"
    assert job.checkpoints == CheckpointSpec(dir=tmp_path / "outputs", resume_flag_explicit=True)
    assert job.ladder == Ladder()
    assert job.limits == Limits()
    assert job.log_dir == tmp_path / "runs" / "llama7b-sft"
    assert job.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # YAML numbers and booleans in args keep the text the user wrote.
    assert job.args[job.args.index("--learning_rate") + 1] == "2e-5"
    assert job.args[job.args.index("--warmup_ratio") + 1] == "0.03"
    assert job.args[job.args.index("--bf16") + 1] == "true"


@pytest.mark.parametrize(("config", "stage"), [(ZERO2, 2), (ZERO3, 3)])
def test_shipped_deepspeed_configs_are_hf_style(config: Path, stage: int) -> None:
    data = json.loads(config.read_text())
    assert data["zero_optimization"]["stage"] == stage
    assert data["train_micro_batch_size_per_gpu"] == "auto"
    assert data["gradient_accumulation_steps"] == "auto"
    assert data["bf16"] == {"enabled": "auto"}
    for key, value in data["zero_optimization"].items():
        if key.endswith(("bucket_size", "_parameters", "_distance")) and value != "auto":
            assert isinstance(value, int), key


def test_zero3_config_gives_stage_3_without_offload(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            train: {micro_batch_size: 1}
            deepspeed: {config: zero3.json}
            """,
        )
    )
    assert (job.knobs.zero_stage, job.knobs.offload) == (3, Offload.NONE)


def test_models_cover_the_knobs() -> None:
    assert set(TrainSection.names()) == set(KNOB_NAMES)
    assert set(FlagsSection.names()) == set(FLAG_KNOBS)
    schema = job_file_schema()
    assert {"name", "train", "deepspeed", "limits"} <= set(schema["properties"])


def test_schema_describes_the_file() -> None:
    """The editor schema states the same rules the checker enforces."""
    schema = job_file_schema()
    assert set(schema["properties"]) == {*_TopSection.names(), *_SECTIONS}
    assert schema["required"] == ["name", "train"]
    assert schema["additionalProperties"] is False
    train = schema["properties"]["train"]
    assert train["required"] == ["micro_batch_size"]
    # Issue 13.12: the upper bound is part of the rule (a micro-batch of 10**30 was accepted).
    assert train["properties"]["micro_batch_size"] == {
        "type": "integer", "minimum": 1, "maximum": 2**20,
    }  # fmt: skip
    assert train["additionalProperties"] is False
    backoff = schema["properties"]["limits"]["properties"]["backoff_s"]["anyOf"][0]
    assert (backoff["minItems"], backoff["maxItems"]) == (2, 2)
    json.dumps(schema)  # serialisable as is


# ------------------------------------------------------------------------- valid jobs


def test_minimal_job_gets_the_defaults(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train:
          micro_batch_size: 2
        """,
    )
    job = load_job(path)
    assert job == Job(
        name="t",
        source=path,
        workdir=work,
        launcher=LauncherKind.PYTHON,
        script=work / "train.py",
        module=None,
        args=(),
        python=sys.executable,
        gpus=None,
        world_size=1,
        env={},
        knobs=Knobs(micro_batch_size=2),
        explicit_knobs=frozenset({"micro_batch_size"}),
        flags=DEFAULT_FLAGS,
        deepspeed=None,
        checkpoints=None,
        ladder=Ladder(),
        limits=Limits(),
        log_dir=work / "runs" / "t",
    )


def test_relative_paths_resolve_against_job_dir_and_workdir(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "sft.py").write_text("")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    write_ds(jobs, {"zero_optimization": {"stage": 1}})
    path = write_job(
        jobs,
        """
        name: t
        workdir: ../code
        script: sft.py
        train: {micro_batch_size: 2}
        deepspeed: {config: ds.json}
        checkpoints: {dir: out}
        log_dir: logs
        """,
    )
    job = load_job(path)
    assert job.workdir == code
    assert job.script == code / "sft.py"
    assert job.deepspeed is not None and job.deepspeed.config_path == jobs / "ds.json"
    assert job.checkpoints is not None and job.checkpoints.dir == code / "out"
    assert job.log_dir == jobs / "logs"


def test_relative_job_path_is_kept_in_problems_and_made_absolute_in_job(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    write_job(work, "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\n")
    assert load_job(Path("job.yaml")).source == work / "job.yaml"
    write_job(work, "name: t\nscript: nope.py\ntrain: {micro_batch_size: 2}\n")
    assert only_problem(Path("job.yaml")).file == Path("job.yaml")


@pytest.mark.parametrize(
    ("zero", "stage", "offload"),
    [
        ({}, 0, Offload.NONE),
        ({"stage": 2, "offload_optimizer": {"device": "none"}}, 2, Offload.NONE),
        ({"stage": 2, "offload_optimizer": {"device": "cpu"}}, 2, Offload.OPTIMIZER),
        ({"stage": 3, "offload_param": {"device": "cpu"}}, 3, Offload.ALL),
        ({"stage": 3, "offload_param": {"device": "nvme"}}, 3, Offload.ALL),
    ],
)
def test_zero_stage_and_offload_come_from_the_deepspeed_config(
    work: Path, zero: dict[str, Any], stage: int, offload: Offload
) -> None:
    write_ds(work, {"zero_optimization": zero} if zero else {"bf16": {"enabled": "auto"}})
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            train: {micro_batch_size: 2}
            deepspeed: {config: ds.json}
            """,
        )
    )
    assert (job.knobs.zero_stage, job.knobs.offload) == (stage, offload)
    assert job.explicit_knobs == {"micro_batch_size", "zero_stage", "offload"}


def test_train_values_override_the_deepspeed_config(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            train: {micro_batch_size: 2, zero_stage: 3, offload: all, lora: true}
            deepspeed: {config: zero2.json, flag: null}
            """,
        )
    )
    assert (job.knobs.zero_stage, job.knobs.offload, job.knobs.lora) == (3, Offload.ALL, True)
    assert job.deepspeed is not None and job.deepspeed.flag is None


def test_flags_override_defaults_and_null_means_never_pass(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            args: [--lora_enable, "true"]
            train: {micro_batch_size: 2}
            flags:
              max_length: --max_seq_length
              lora: null
            """,
        )
    )
    assert job.flags["max_length"] == "--max_seq_length"
    assert job.flags["lora"] is None
    assert job.flags["micro_batch_size"] == DEFAULT_FLAGS["micro_batch_size"]
    assert job.args == ("--lora_enable", "true")  # not dsguard's flag any more


def test_args_and_env_scalars_keep_their_source_text(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            args: [--lr, 0.00002, --epochs, 3, --bf16, true, --seed, 010]
            env: {A: 1, B: yes, C: 010, D: text}
            train: {micro_batch_size: 2}
            """,
        )
    )
    assert job.args == ("--lr", "0.00002", "--epochs", "3", "--bf16", "true", "--seed", "010")
    assert job.env == {"A": "1", "B": "yes", "C": "010", "D": "text"}


def test_module_gpus_python_ladder_limits_checkpoints(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            f"""
            name: t.v2
            module: pkg.train
            launcher: torchrun
            python: {sys.executable}
            gpus: [2, 3]
            train: {{micro_batch_size: 8, max_length: 1024}}
            checkpoints: {{dir: out, resume_flag: null, output_flag: null, resume_at_start: false}}
            ladder: {{oom: [micro_batch, lora], host_oom: []}}
            limits: {{max_attempts: 3, backoff_s: [1, 2.5], min_max_length: 256}}
            """,
        )
    )
    assert (job.module, job.script, job.launcher) == ("pkg.train", None, LauncherKind.TORCHRUN)
    assert job.python == sys.executable
    assert (job.gpus, job.world_size) == ((2, 3), 2)
    assert job.checkpoints == CheckpointSpec(
        dir=work / "out", resume_flag=None, output_flag=None, resume_at_start=False,
        resume_flag_explicit=True,
    )  # fmt: skip
    assert job.ladder == Ladder(
        oom=("micro_batch", "lora"), host_oom=(), explicit=frozenset({"oom", "host_oom"})
    )
    assert job.limits == Limits(
        max_attempts=3, backoff_first_s=1.0, backoff_max_s=2.5, min_max_length=256
    )


def test_python_by_name_is_resolved_on_path(work: Path) -> None:
    name = Path(sys.executable).name
    job = load_job(
        write_job(
            work, f"name: t\nscript: train.py\npython: {name}\ntrain: {{micro_batch_size: 1}}\n"
        )
    )
    assert Path(job.python).is_absolute()


def test_empty_optional_sections_mean_defaults(work: Path) -> None:
    job = load_job(
        write_job(
            work,
            """
            name: t
            script: train.py
            args:
            env:
            train: {micro_batch_size: 2}
            flags:
            ladder:
            limits:
            """,
        )
    )
    assert (job.args, job.env, job.ladder, job.limits) == ((), {}, Ladder(), Limits())


def test_world_size_alone_is_kept(work: Path) -> None:
    job = load_job(
        write_job(work, "name: t\nscript: train.py\nworld_size: 8\ntrain: {micro_batch_size: 1}\n")
    )
    assert (job.gpus, job.world_size) == (None, 8)


# ----------------------------------------------------------------- errors: the document


def test_yaml_syntax_error_reports_the_mark(tmp_path: Path) -> None:
    path = write_job(
        tmp_path,
        """
        name: t
        script: train.py
        train: {micro_batch_size: 2
        limits: {}
        """,
    )
    problem = only_problem(path)
    assert (problem.field, problem.line) == (DOCUMENT, 4)
    assert "invalid YAML" in problem.message
    assert "line 3" in problem.message  # where the unclosed flow mapping started


def test_tab_indentation_is_a_syntax_error(tmp_path: Path) -> None:
    path = write_job(tmp_path, "name: t\ntrain:\n\tmicro_batch_size: 2\n")
    problem = only_problem(path)
    assert (problem.field, problem.line) == (DOCUMENT, 3)
    assert "'\\t'" in problem.message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    problem = only_problem(path)
    assert (problem.field, problem.line) == (DOCUMENT, None)
    assert "empty" in problem.message


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "a string")])
def test_root_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    problem = only_problem(write_job(tmp_path, text))
    assert (problem.field, problem.line) == (DOCUMENT, 1)
    assert f"must be a mapping of keys, got {kind}" in problem.message


def test_missing_job_file(tmp_path: Path) -> None:
    problem = only_problem(tmp_path / "nope.yaml")
    assert (problem.field, problem.line) == (DOCUMENT, None)
    assert "not found" in problem.message


def test_unsafe_yaml_tag_is_refused(tmp_path: Path) -> None:
    problem = only_problem(write_job(tmp_path, "name: !!python/object/apply:os.system [ls]\n"))
    assert (problem.field, problem.line) == (DOCUMENT, 1)


def test_duplicate_keys_are_reported_at_the_second_one(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train:
          micro_batch_size: 2
          lora: true
          micro_batch_size: 4
        name: u
        """,
    )
    problems = problems_of(path)
    assert len(problems) == 2
    nested = the_problem(problems, "train.micro_batch_size")
    assert nested.line == 6
    assert "duplicate key" in nested.message and "line 4" in nested.message
    top = the_problem(problems, "name")
    assert top.line == 7 and "line 1" in top.message


# ----------------------------------------------------------- errors: keys and types


def test_unknown_key_suggests_the_right_one(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        scirpt: train.py
        train:
          micro_batch: 2
        """,
    )
    problems = problems_of(path)
    typo = the_problem(problems, "scirpt")
    assert typo.line == 2 and "unknown key (did you mean 'script'?)" in typo.message
    nested = the_problem(problems, "train.micro_batch")
    assert nested.line == 4 and "did you mean 'micro_batch_size'?" in nested.message
    # The misspelt script key also leaves the job without a script.
    assert the_problem(problems, "script").line == 1
    assert the_problem(problems, "train.micro_batch_size").line == 3


def test_key_in_the_wrong_section_says_where_it_belongs(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        micro_batch_size: 2
        train: {micro_batch_size: 2, max_attempts: 3}
        """,
    )
    problems = problems_of(path)
    assert "belongs under train:" in the_problem(problems, "micro_batch_size").message
    misplaced = the_problem(problems, "train.max_attempts")
    assert misplaced.line == 4 and "belongs under limits:" in misplaced.message


@pytest.mark.parametrize(
    ("line3", "field", "fragments"),
    [
        (
            "train: {micro_batch_size: four}",
            "train.micro_batch_size",
            ["must be a valid integer", "'four'"],
        ),
        ("train: {micro_batch_size: 2.5}", "train.micro_batch_size", ["valid integer", "2.5"]),
        ("train: {micro_batch_size: true}", "train.micro_batch_size", ["valid integer"]),
        ("train: {micro_batch_size: 0}", "train.micro_batch_size", ["greater than or equal to 1"]),
        ("train: {micro_batch_size: 2, lora: 1}", "train.lora", ["valid boolean"]),
        ("train: {micro_batch_size: 2, offload: cpu}", "train.offload", ["'optimizer'"]),
        ("train: [1, 2]", "train", ["must be a mapping, got a list"]),
        ("train: {micro_batch_size: 2}\nargs: --lr 1", "args", ["valid list", "YAML list"]),
        ("train: {micro_batch_size: 2}\nargs: [[a]]", "args[0]", ["valid string, got a list"]),
        ("train: {micro_batch_size: 2}\ngpus: '0,1'", "gpus", ["valid list"]),
        ("train: {micro_batch_size: 2}\ngpus: [0, -1]", "gpus[1]", ["greater than or equal"]),
        ("train: {micro_batch_size: 2}\nenv: {A: null}", "env.A", ["valid string, got null"]),
        ("train: {micro_batch_size: 2}\nenv: {1: a}", "env.1", ["valid string"]),
        ("train: {micro_batch_size: 2}\nworld_size: 0", "world_size", ["greater than or equal"]),
        ("train: {micro_batch_size: 2}\nlimits: {max_attempts: 0}", "limits.max_attempts",
         ["greater than or equal to 1, got 0"]),
        ("train: {micro_batch_size: 2}\nlimits: {backoff_s: [5]}", "limits.backoff_s",
         ["at least 2 items", "[first, longest]"]),
        ("train: {micro_batch_size: 2}\nlimits: {backoff_s: [5, 300, 9]}", "limits.backoff_s",
         ["[first, longest]"]),
        ("train: {micro_batch_size: 2}\nlimits: {stop_grace_s: -1}", "limits.stop_grace_s",
         ["greater than or equal to 0"]),
        ("train: {micro_batch_size: 2}\nladder: {oom: micro_batch}", "ladder.oom",
         ["valid list"]),
        ("train: {micro_batch_size: 2}\nflags: {lora: 1}", "flags.lora", ["valid string"]),
        ("train: {micro_batch_size: 2}\ndeepspeed: {config: 7}", "deepspeed.config",
         ["valid string", "quote it"]),
    ],
)  # fmt: skip
def test_wrong_types_and_ranges(work: Path, line3: str, field: str, fragments: list[str]) -> None:
    path = write_job(work, "name: t\nscript: train.py\n" + line3 + "\n")
    line = 3 + next(i for i, text in enumerate(line3.split("\n")) if text.split(":")[0] in field)
    assert_problem(path, field, line, *fragments)


def test_bad_launcher_suggests_the_closest(work: Path) -> None:
    path = write_job(
        work, "name: t\nscript: train.py\nlauncher: deepspeeed\ntrain: {micro_batch_size: 1}\n"
    )
    assert_problem(path, "launcher", 3, "'torchrun'", "did you mean 'deepspeed'?")


@pytest.mark.parametrize("name", ["my job", "-job", "job/1", "ünï"])
def test_bad_name(work: Path, name: str) -> None:
    path = write_job(work, f"name: '{name}'\nscript: train.py\ntrain: {{micro_batch_size: 1}}\n")
    assert_problem(path, "name", 1, "systemd instance", repr(name))


def test_numeric_name_must_be_quoted(work: Path) -> None:
    path = write_job(work, "name: 2024\nscript: train.py\ntrain: {micro_batch_size: 1}\n")
    assert_problem(path, "name", 1, "valid string", "quote it")


# --------------------------------------------------------------- errors: missing things


def test_missing_name_points_at_the_top_mapping(work: Path) -> None:
    path = write_job(work, "# a job\nscript: train.py\ntrain: {micro_batch_size: 1}\n")
    assert_problem(path, "name", 2, "required key is missing")


def test_missing_train_section(work: Path) -> None:
    path = write_job(work, "name: t\nscript: train.py\n")
    assert_problem(path, "train", 1, "micro_batch_size")


def test_missing_micro_batch_size_points_at_train(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train:
          lora: true
        """,
    )
    assert_problem(path, "train.micro_batch_size", 3, "required key is missing")


def test_script_and_module_both(work: Path) -> None:
    path = write_job(
        work, "name: t\nscript: train.py\nmodule: pkg.train\ntrain: {micro_batch_size: 1}\n"
    )
    assert_problem(path, "module", 3, "either script or module, not both")


def test_script_and_module_neither(work: Path) -> None:
    path = write_job(work, "name: t\ntrain: {micro_batch_size: 1}\n")
    assert_problem(path, "script", 1, "set script:", "module:")


def test_bad_module_name(work: Path) -> None:
    path = write_job(work, "name: t\nmodule: pkg/train.py\ntrain: {micro_batch_size: 1}\n")
    assert_problem(path, "module", 2, "not a python module name")


def test_missing_script_file(work: Path) -> None:
    path = write_job(work, "name: t\nscript: sft.py\ntrain: {micro_batch_size: 1}\n")
    assert_problem(path, "script", 2, "script not found", str(work / "sft.py"))


def test_missing_workdir_is_reported_once(work: Path) -> None:
    path = write_job(
        work, "name: t\nworkdir: gone\nscript: train.py\ntrain: {micro_batch_size: 1}\n"
    )
    assert only_problem(path).field == "workdir"
    assert_problem(path, "workdir", 2, "directory not found", str(work / "gone"))


def test_missing_python(work: Path) -> None:
    path = write_job(
        work,
        "name: t\nscript: train.py\npython: /nonexistent/bin/python\n"
        "train: {micro_batch_size: 1}\n",
    )
    assert_problem(path, "python", 3, "not found", "/nonexistent/bin/python")
    path = write_job(
        work, "name: t\nscript: train.py\npython: no-such-python9\ntrain: {micro_batch_size: 1}\n"
    )
    assert_problem(path, "python", 3, "not found on PATH")


# ------------------------------------------------------------ errors: DeepSpeed config

DS_JOB = """
name: t
script: train.py
train: {micro_batch_size: 2}
deepspeed:
  config: ds.json
"""


def test_deepspeed_config_missing(work: Path) -> None:
    path = write_job(work, DS_JOB)
    assert_problem(path, "deepspeed.config", 5, "DeepSpeed config not found", str(work / "ds.json"))


def test_deepspeed_config_unreadable(work: Path) -> None:
    (work / "ds.json").mkdir()  # a directory: reading it fails even as root
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "cannot read")


def test_deepspeed_config_invalid_json(work: Path) -> None:
    (work / "ds.json").write_text('{\n  "zero_optimization": {"stage": 2,}\n}\n')
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "not valid JSON", "line 2")


def test_deepspeed_config_duplicate_json_key(work: Path) -> None:
    (work / "ds.json").write_text('{"bf16": {}, "bf16": {}}')
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "duplicate key 'bf16'")


def test_deepspeed_config_not_an_object(work: Path) -> None:
    (work / "ds.json").write_text("[1, 2]")
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "must be a JSON object")


def test_deepspeed_config_bad_stage(work: Path) -> None:
    write_ds(work, {"zero_optimization": {"stage": "auto"}})
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "stage must be 0, 1, 2 or 3")


def test_deepspeed_section_needs_config(work: Path) -> None:
    path = write_job(
        work, "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\ndeepspeed: {flag: --ds}\n"
    )
    assert_problem(path, "deepspeed.config", 4, "required key is missing")


def test_derived_param_offload_needs_stage_3(work: Path) -> None:
    write_ds(work, {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})
    assert_problem(write_job(work, DS_JOB), "deepspeed.config", 5, "needs ZeRO stage 3")


# --------------------------------------------------------------- errors: ZeRO and offload


@pytest.mark.parametrize(
    ("train", "ds", "field", "fragment"),
    [
        ("{micro_batch_size: 2, zero_stage: 4}", True, "train.zero_stage", "0, 1, 2 and 3"),
        ("{micro_batch_size: 2, zero_stage: -1}", True, "train.zero_stage", "0, 1, 2 and 3"),
        ("{micro_batch_size: 2, zero_stage: 2}", False, "train.zero_stage", "deepspeed: section"),
        ("{micro_batch_size: 2, offload: optimizer}", False, "train.offload", "deepspeed: sect"),
        ("{micro_batch_size: 2, zero_stage: 0, offload: optimizer}", True, "train.offload",
         "stage 1 or higher"),
        ("{micro_batch_size: 2, offload: all}", True, "train.offload", "needs ZeRO stage 3"),
        ("{micro_batch_size: 2, zero_stage: 2, offload: all}", True, "train.offload",
         "zero_stage is 2"),
    ],
)  # fmt: skip
def test_zero_and_offload_rules(
    work: Path, train: str, ds: bool, field: str, fragment: str
) -> None:
    text = f"name: t\nscript: train.py\ntrain: {train}\n"
    if ds:
        text += "deepspeed: {config: zero2.json}\n"
    assert_problem(write_job(work, text), field, 3, fragment)


def test_zero_stage_0_conflicting_with_derived_offload_points_at_zero_stage(work: Path) -> None:
    write_ds(work, {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2, zero_stage: 0}\n"
    text += "deepspeed: {config: ds.json}\n"
    assert_problem(write_job(work, text), "train.zero_stage", 3, "stage 1 or higher")


def test_offload_none_without_deepspeed_is_harmless(work: Path) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2, offload: none}\n"
    assert load_job(write_job(work, text)).knobs.zero_stage is None


# --------------------------------------------------------------------- errors: limits


@pytest.mark.parametrize(
    ("limits", "field", "fragment"),
    [
        (
            "{min_micro_batch_size: 8}",
            "limits.min_micro_batch_size",
            "above train.micro_batch_size",
        ),
        ("{min_max_length: 2048}", "limits.min_max_length", "above train.max_length (1024)"),
        ("{backoff_s: [400, 300]}", "limits.backoff_s", "first delay 400s is longer"),
    ],
)
def test_impossible_limits(work: Path, limits: str, field: str, fragment: str) -> None:
    text = f"""
    name: t
    script: train.py
    train:
      micro_batch_size: 4
      max_length: 1024
    limits: {limits}
    """
    assert_problem(write_job(work, text), field, 6, fragment)


def test_default_min_max_length_above_a_short_max_length_is_fine(work: Path) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2, max_length: 256}\n"
    assert load_job(write_job(work, text)).knobs.max_length == 256


# --------------------------------------------------------------------- errors: ladder


def test_unknown_and_duplicate_rungs(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train: {micro_batch_size: 2}
        ladder:
          oom:
            - micro_batch
            - gradient_chekpointing
            - micro_batch
          host_oom: [pin_memory, swap]
        """,
    )
    problems = problems_of(path)
    typo = the_problem(problems, "ladder.oom[1]")
    assert typo.line == 7
    assert "unknown rung 'gradient_chekpointing'" in typo.message
    assert "did you mean 'gradient_checkpointing'?" in typo.message
    dup = the_problem(problems, "ladder.oom[2]")
    assert dup.line == 8 and "listed twice" in dup.message
    unknown = the_problem(problems, "ladder.host_oom[1]")
    assert unknown.line == 9 and all(r in unknown.message for r in ALL_RUNGS)


def test_unknown_ladder_key(work: Path) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\nladder: {oomm: []}\n"
    assert_problem(write_job(work, text), "ladder.oomm", 4, "did you mean 'oom'?")


# ------------------------------------------------------------ errors: flags dsguard owns


@pytest.mark.parametrize(
    ("args", "index", "owner"),
    [
        ('["--per_device_train_batch_size", "4"]', 0, "train.micro_batch_size"),
        ('["--bf16", "--per_device_train_batch_size=4"]', 1, "train.micro_batch_size"),
        ('["--gradient-accumulation-steps", "2"]', 0, "train.gradient_accumulation_steps"),
        ('["--gradient_checkpointing"]', 0, "train.gradient_checkpointing"),
        ('["--no_dataloader_pin_memory"]', 0, "train.pin_memory"),
        ('["--max_seq_length=512"]', 0, "train.max_length"),
        ('["--deepspeed", "ds.json"]', 0, "deepspeed.config"),
        ('["--deepspeed=ds.json"]', 0, "deepspeed.config"),
        ('["--resume_from_checkpoint", "outputs/checkpoint-5"]', 0, "when it resumes"),
    ],
)
def test_args_must_not_contain_flags_dsguard_owns(
    work: Path, args: str, index: int, owner: str
) -> None:
    path = write_job(
        work,
        f"""
        name: t
        script: train.py
        args: {args}
        train: {{micro_batch_size: 2}}
        flags: {{max_length: --max_seq_length}}
        deepspeed: {{config: zero2.json}}
        checkpoints: {{dir: outputs}}
        """,
    )
    assert_problem(path, f"args[{index}]", 3, owner, "remove it from args")


def test_owned_flag_in_block_args_points_at_its_line(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        args:
          - --bf16
          - "true"
          - --gradient_accumulation_steps
          - 4
        train: {micro_batch_size: 2}
        """,
    )
    assert_problem(
        path,
        "args[2]",
        6,
        "dsguard sets this from train.gradient_accumulation_steps; remove it from args",
    )


def test_flags_set_to_null_or_without_sections_are_not_owned(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        args: [--per_device_train_batch_size, 4, --deepspeed, x.json, --resume_from_checkpoint]
        train: {micro_batch_size: 2}
        flags: {micro_batch_size: null}
        """,
    )
    assert load_job(path).args[1] == "4"


def test_flag_values_must_be_flags_and_distinct(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train: {micro_batch_size: 2}
        flags:
          lora: use lora
          max_length: --per_device_train_batch_size
          zero_stage: --zero
        """,
    )
    problems = problems_of(path)
    assert "like --name" in the_problem(problems, "flags.lora").message
    clash = the_problem(problems, "flags.max_length")
    assert clash.line == 6 and "also the flag of flags.micro_batch_size" in clash.message
    zero = the_problem(problems, "flags.zero_stage")
    assert zero.line == 7 and "rendered config, not a flag" in zero.message


def test_output_dir_in_args_must_match_checkpoints_dir(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        args:
          - --output_dir
          - out2
        train: {micro_batch_size: 2}
        checkpoints: {dir: outputs}
        """,
    )
    assert_problem(path, "args[1]", 5, str(work / "out2"), "checkpoints.dir")


# ------------------------------------------------------------ errors: GPUs and environment


def test_gpus_and_world_size_must_agree(work: Path) -> None:
    text = "name: t\nscript: train.py\ngpus: [0, 1]\nworld_size: 4\ntrain: {micro_batch_size: 1}\n"
    assert_problem(write_job(work, text), "world_size", 4, "is 4 but gpus lists 2 GPUs")


def test_gpus_must_be_distinct_and_non_empty(work: Path) -> None:
    text = "name: t\nscript: train.py\ngpus: [0, 1, 0]\ntrain: {micro_batch_size: 1}\n"
    assert_problem(write_job(work, text), "gpus[2]", 3, "GPU 0 is listed twice")
    text = "name: t\nscript: train.py\ngpus: []\ntrain: {micro_batch_size: 1}\n"
    assert_problem(write_job(work, text), "gpus", 3, "must not be empty")


def test_env_names_and_cuda_visible_devices(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        gpus: [0]
        env:
          CUDA_VISIBLE_DEVICES: "1"
          BAD-NAME: x
        train: {micro_batch_size: 1}
        """,
    )
    problems = problems_of(path)
    assert the_problem(problems, "env.CUDA_VISIBLE_DEVICES").line == 5
    assert the_problem(problems, "env.BAD-NAME").line == 6


# ------------------------------------------------------------------ all problems at once


def test_every_problem_is_reported_in_line_order(work: Path) -> None:
    path = write_job(
        work,
        """
        name: bad name
        script: missing.py
        gpus: [0, 1]
        world_size: 3
        args: [--per_device_train_batch_size, 2]
        train:
          micro_batch_size: two
          offload: all
        deepspeed: {config: nowhere.json}
        ladder: {oom: [micro_batch, zero4]}
        limits: {backoff_s: [10, 1], max_attempts: 0}
        """,
    )
    problems = problems_of(path)
    assert [(p.field, p.line) for p in problems] == [
        ("name", 1),
        ("script", 2),
        ("world_size", 4),
        ("args[0]", 5),
        ("train.micro_batch_size", 7),
        ("deepspeed.config", 9),
        ("ladder.oom[1]", 10),
        ("limits.max_attempts", 11),
        ("limits.backoff_s", 11),
    ]
    assert str(JobFileError(problems)).splitlines()[0].startswith(f"{path}:1: name: ")


def test_merge_keys_and_anchors_are_followed(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        base: &base {micro_batch_size: 2}
        train:
          <<: *base
          lora: maybe
        """,
    )
    problems = problems_of(path)
    assert the_problem(problems, "base").line == 3
    assert the_problem(problems, "train.lora").line == 6


# ============================================================================ quick start


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("")
    write_ds(
        tmp_path,
        {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
        "zero3-offload.json",
    )
    return tmp_path


def command_problems(argv: list[str], cwd: Path, **kwargs: Any) -> list[Problem]:
    with pytest.raises(JobFileError) as info:
        job_from_command(argv, cwd=cwd, **kwargs)
    for problem in info.value.problems:
        assert (problem.file, problem.line) == (None, None)
    return info.value.problems


def test_quick_start_deepspeed_num_gpus(cwd: Path) -> None:
    job = job_from_command(
        ["deepspeed", "--num_gpus", "4", "train.py", "--model_name_or_path", "m", "--bf16"],
        cwd=cwd,
    )
    assert job.launcher is LauncherKind.DEEPSPEED
    assert (job.world_size, job.gpus) == (4, None)
    assert job.script == cwd / "train.py"
    assert job.module is None
    assert job.args == ("--model_name_or_path", "m", "--bf16")
    assert job.source is None
    assert job.workdir == cwd
    assert job.name == "train"
    assert job.log_dir == cwd / "runs" / "train"
    # The command carries no knob flag, so none is passed (a script without them would die
    # on `unrecognized arguments`); the HF defaults remain only as starting values.
    assert job.flags == dict.fromkeys(DEFAULT_FLAGS)
    assert job.knobs == Knobs(micro_batch_size=8, gradient_accumulation_steps=1)
    assert job.explicit_knobs == frozenset()
    assert (job.deepspeed, job.checkpoints) == (None, None)


@pytest.mark.parametrize(
    ("options", "gpus", "world_size"),
    [
        (["--num_gpus=2"], None, 2),
        (["--num-gpus", "2"], None, 2),
        (["--include", "localhost:1,3"], (1, 3), 2),
        (["--include=localhost:0"], (0,), 1),
        (["--include", "localhost"], None, 1),
    ],
)
def test_quick_start_deepspeed_options(
    cwd: Path, options: list[str], gpus: tuple[int, ...] | None, world_size: int
) -> None:
    job = job_from_command(["deepspeed", *options, "train.py"], cwd=cwd)
    assert (job.gpus, job.world_size) == (gpus, world_size)


def test_quick_start_deepspeed_module(cwd: Path) -> None:
    job = job_from_command(["deepspeed", "--module", "pkg.train", "--x", "1"], cwd=cwd)
    assert (job.module, job.script, job.args, job.name) == (
        "pkg.train",
        None,
        ("--x", "1"),
        "pkg.train",
    )


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (["--num_gpus", "2", "--include", "localhost:0,1"], "--include"),
        (["--include", "node1:0,1"], "--include"),
        (["--include", "localhost:0@node1:0"], "--include"),
        (["--include", "localhost:a,b"], "--include"),
        (["--num_gpus", "two"], "--num_gpus"),
        (["--num_gpus", "0"], "--num_gpus"),
        (["--master_port", "29500"], "--master_port"),
    ],
)
def test_quick_start_deepspeed_bad_options(cwd: Path, options: list[str], field: str) -> None:
    problems = command_problems(["deepspeed", *options, "train.py"], cwd)
    assert field in [p.field for p in problems]


@pytest.mark.parametrize(
    "options",
    [
        ["--nproc_per_node", "4"],
        ["--nproc-per-node", "4"],
        ["--nproc_per_node=4"],
        ["--nproc-per-node=4"],
        ["--standalone", "--nnodes", "1", "--nproc_per_node", "4"],
        ["--nnodes=1:1", "--nproc_per_node=4"],
    ],
)
def test_quick_start_torchrun(cwd: Path, options: list[str]) -> None:
    job = job_from_command(["torchrun", *options, "train.py", "--a"], cwd=cwd)
    assert (job.launcher, job.world_size, job.args) == (LauncherKind.TORCHRUN, 4, ("--a",))


def test_quick_start_torchrun_module_and_multi_node(cwd: Path) -> None:
    job = job_from_command(["torchrun", "--nproc_per_node", "2", "-m", "pkg.train"], cwd=cwd)
    assert job.module == "pkg.train"
    problems = command_problems(["torchrun", "--nnodes", "2", "train.py"], cwd)
    assert [p.field for p in problems] == ["--nnodes"]


def test_python_m_torch_distributed_run_is_torchrun(cwd: Path) -> None:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py"]
    job = job_from_command(argv, cwd=cwd)
    assert (job.launcher, job.world_size, job.python) == (LauncherKind.TORCHRUN, 2, sys.executable)


@pytest.mark.parametrize(
    ("options", "gpus", "world_size"),
    [
        (["--num_processes", "2"], None, 2),
        (["--num_processes=2", "--multi_gpu"], None, 2),
        (["--gpu_ids", "0,1,2"], (0, 1, 2), 3),
        (["--gpu_ids", "all", "--num_processes", "8"], None, 8),
    ],
)
def test_quick_start_accelerate(
    cwd: Path, options: list[str], gpus: tuple[int, ...] | None, world_size: int
) -> None:
    job = job_from_command(["accelerate", "launch", *options, "train.py"], cwd=cwd)
    assert job.launcher is LauncherKind.ACCELERATE
    assert (job.gpus, job.world_size) == (gpus, world_size)


def test_quick_start_accelerate_needs_launch(cwd: Path) -> None:
    problems = command_problems(["accelerate", "train.py"], cwd)
    assert [p.field for p in problems] == ["accelerate"]
    problems = command_problems(
        ["accelerate", "launch", "--num_processes", "2", "--gpu_ids", "0", "train.py"], cwd
    )
    assert "disagree" in problems[0].message


def test_quick_start_python_forms(cwd: Path) -> None:
    job = job_from_command([sys.executable, "train.py", "--x"], cwd=cwd)
    assert (job.launcher, job.python, job.script) == (
        LauncherKind.PYTHON,
        sys.executable,
        cwd / "train.py",
    )
    assert (job.world_size, job.gpus) == (1, None)
    job = job_from_command([Path(sys.executable).name, "-m", "pkg.train", "--x"], cwd=cwd)
    assert (job.module, job.args) == ("pkg.train", ("--x",))
    assert Path(job.python).is_absolute()
    job = job_from_command([sys.executable, "-u", "-mpkg.train"], cwd=cwd)
    assert (job.module, job.env) == ("pkg.train", {"PYTHONUNBUFFERED": "1"})


def test_quick_start_bare_script(cwd: Path) -> None:
    job = job_from_command(["train.py", "--x", "1"], cwd=cwd)
    assert (job.launcher, job.python, job.script) == (
        LauncherKind.PYTHON,
        sys.executable,
        cwd / "train.py",
    )


def test_quick_start_interpreter_comes_from_the_launcher_shebang(cwd: Path) -> None:
    launcher = cwd / "bin" / "deepspeed"
    launcher.parent.mkdir()
    launcher.write_text("#!/opt/envs/train/bin/python3.11\nimport sys\n")
    job = job_from_command([str(launcher), "train.py"], cwd=cwd)
    assert job.python == "/opt/envs/train/bin/python3.11"
    launcher.write_text("#!/bin/sh\n'''exec' /very/long/env/bin/python \"$0\" \"$@\"\n' '''\n")
    assert job_from_command([str(launcher), "train.py"], cwd=cwd).python == (
        "/very/long/env/bin/python"
    )


def test_quick_start_knobs_are_parsed_and_removed(cwd: Path) -> None:
    argv = [
        "deepspeed",
        "train.py",
        "--per_device_train_batch_size",
        "4",
        "--bf16",
        "true",
        "--gradient_accumulation_steps=8",
        "--gradient_checkpointing",
        "--model_max_length",
        "1024",
        "--lora_enable",
        "False",
        "--dataloader-num-workers",
        "2",
        "--no_dataloader_pin_memory",
        "--seed",
        "1",
    ]
    job = job_from_command(argv, cwd=cwd)
    assert job.knobs == Knobs(
        micro_batch_size=4,
        gradient_accumulation_steps=8,
        max_length=1024,
        lora=False,
        gradient_checkpointing=True,
        dataloader_workers=2,
        pin_memory=False,
    )
    assert job.explicit_knobs == frozenset(FLAG_KNOBS)
    assert job.args == ("--bf16", "true", "--seed", "1")


@pytest.mark.parametrize(
    ("tokens", "value"),
    [
        (["--gradient_checkpointing"], True),
        (["--gradient_checkpointing", "--bf16"], True),
        (["--gradient_checkpointing", "true"], True),
        (["--gradient_checkpointing", "True"], True),
        (["--gradient_checkpointing", "1"], True),
        (["--gradient_checkpointing", "false"], False),
        (["--gradient_checkpointing", "False"], False),
        (["--gradient_checkpointing", "0"], False),
        (["--gradient_checkpointing=true"], True),
        (["--gradient_checkpointing=False"], False),
    ],
)
def test_quick_start_hf_booleans(cwd: Path, tokens: list[str], value: bool) -> None:
    job = job_from_command(["python", "train.py", *tokens], cwd=cwd)
    assert job.knobs.gradient_checkpointing is value
    assert "--gradient_checkpointing" not in " ".join(job.args)


def test_quick_start_deepspeed_output_dir_and_resume(cwd: Path) -> None:
    argv = [
        "deepspeed",
        "train.py",
        "--deepspeed",
        "zero3-offload.json",
        "--output_dir",
        "out",
        "--resume_from_checkpoint",
        "out/checkpoint-10",
        "--bf16",
    ]
    job = job_from_command(argv, cwd=cwd)
    assert job.deepspeed is not None
    assert job.deepspeed.config_path == cwd / "zero3-offload.json"
    assert job.deepspeed.flag == "--deepspeed"
    assert job.deepspeed.base["zero_optimization"]["stage"] == 3
    assert (job.knobs.zero_stage, job.knobs.offload) == (3, Offload.ALL)
    assert job.explicit_knobs == {"zero_stage", "offload"}
    assert job.checkpoints == CheckpointSpec(dir=cwd / "out")
    assert job.args == ("--output_dir", "out", "--bf16")


def test_quick_start_equals_forms_and_bare_resume(cwd: Path) -> None:
    argv = [
        "python",
        "train.py",
        f"--deepspeed={ZERO2}",
        "--output_dir=o",
        "--resume_from_checkpoint",
    ]
    job = job_from_command(argv, cwd=cwd)
    assert job.deepspeed is not None and job.knobs.zero_stage == 2
    assert job.checkpoints is not None and job.checkpoints.dir == cwd / "o"
    assert job.args == ("--output_dir=o",)


def test_quick_start_name_and_log_dir(cwd: Path) -> None:
    (cwd / "my sft (v2).py").write_text("")
    job = job_from_command(["python", "my sft (v2).py"], cwd=cwd)
    assert job.name == "my-sft-v2-"
    job = job_from_command(["python", "train.py"], cwd=cwd, name="sft", log_dir=Path("logs"))
    assert (job.name, job.log_dir) == ("sft", cwd / "logs")
    problems = command_problems(["python", "train.py"], cwd, name="bad name")
    assert [p.field for p in problems] == ["name"]


@pytest.mark.parametrize(
    ("args", "field", "fragment"),
    [
        (["--per_device_train_batch_size", "four"], "--per_device_train_batch_size", "'four'"),
        (["--per_device_train_batch_size=0"], "--per_device_train_batch_size", "at least 1"),
        (["--gradient_accumulation_steps"], "--gradient_accumulation_steps", "needs a value"),
        (["--dataloader_num_workers", "-1"], "--dataloader_num_workers", "at least 0"),
        (["--gradient_checkpointing", "maybe"], "--gradient_checkpointing", "true or false"),
        (["--no_dataloader_pin_memory=1"], "--no_dataloader_pin_memory", "takes no value"),
        (["--lora_enable", "--lora_enable"], "--lora_enable", "given twice"),
        (["--deepspeed", "nowhere.json"], "--deepspeed", "not found"),
        (["--deepspeed", '{"zero_optimization": {}}'], "--deepspeed", "path"),
    ],
)
def test_quick_start_unparseable_values(
    cwd: Path, args: list[str], field: str, fragment: str
) -> None:
    problems = command_problems(["python", "train.py", *args], cwd)
    assert len(problems) == 1
    assert problems[0].field == field
    assert fragment in problems[0].message


def test_quick_start_structural_errors(cwd: Path) -> None:
    assert [p.field for p in command_problems([], cwd)] == ["command"]
    assert [p.field for p in command_problems(["bash", "run.sh"], cwd)] == ["command"]
    assert [p.field for p in command_problems(["python", "missing.py"], cwd)] == ["script"]
    assert [p.field for p in command_problems(["torchrun", "--nproc_per_node", "2"], cwd)] == [
        "command"
    ]
    assert [p.field for p in command_problems(["python", "-X", "dev", "train.py"], cwd)] == ["-X"]
    assert "<command line>: script:" in str(
        JobFileError(command_problems(["python", "missing.py"], cwd))
    )


# ------------------------------------------------------------------------- resources


@pytest.mark.parametrize(
    ("value", "expected_bytes"),
    [("6GiB", 6 * 1024**3), ("800M", 800 * 1000**2), ("1.5 GB", 1_500_000_000), (4096, 4096)],
)
def test_host_memory_limit_sizes(work: Path, value: object, expected_bytes: int) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\n"
    text += f"resources: {{host_memory_limit: {json.dumps(value)}, gpu_memory_fraction: 0.5}}\n"
    job = load_job(write_job(work, text))
    assert job.resources.host_memory_limit_bytes == expected_bytes
    assert job.resources.gpu_memory_fraction == 0.5


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        # One problem at the key itself, not one per accepted type at made-up sub-keys.
        ("1.5", ["must be an integer or a string, got 1.5"]),
        ("[1]", ["must be an integer or a string, got a list"]),
        ('"lots"', ["'lots' is not a size"]),
        ("0", ["is not a size"]),
    ],
)
def test_bad_host_memory_limit(work: Path, value: str, fragments: list[str]) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\nresources:\n"
    text += f"  host_memory_limit: {value}\n"
    problem = only_problem(write_job(work, text))
    assert (problem.field, problem.line) == ("resources.host_memory_limit", 5)
    for fragment in fragments:
        assert fragment in problem.message, problem


def test_gpu_memory_fraction_bounds(work: Path) -> None:
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\nresources:\n"
    assert_problem(
        write_job(work, text + "  gpu_memory_fraction: 0\n"),
        "resources.gpu_memory_fraction",
        5,
        "must be greater than 0, got 0",
    )
    assert_problem(
        write_job(work, text + "  gpu_memory_fraction: 1.5\n"),
        "resources.gpu_memory_fraction",
        5,
        "must be less than or equal to 1, got 1.5",
    )


def test_tab_inside_a_value_is_refused(work: Path) -> None:
    """libyaml (the fast path) would keep a tab inside a plain value and name a directory
    with it; a file with a tab takes PyYAML's stricter parser, as before."""
    text = "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\ncheckpoints:\n"
    problem = only_problem(write_job(work, text + "  dir: out\t/x\n"))
    assert (problem.field, problem.line) == (DOCUMENT, 5)
    assert "invalid YAML" in problem.message and "'\\t'" in problem.message


# ------------------------------------------------- issue 13: sane bounds and usable paths


@pytest.mark.parametrize(
    ("line3", "field", "fragments"),
    [
        ("train: {micro_batch_size: 1000000000000000000000000000000}", "train.micro_batch_size",
         ["less than or equal to 1048576", "valid range: 1 <= value <= 1048576"]),
        ("train: {micro_batch_size: 2, gradient_accumulation_steps: 1048577}",
         "train.gradient_accumulation_steps", ["valid range: 1 <= value <= 1048576"]),
        ("train: {micro_batch_size: 2, max_length: 16777217}", "train.max_length",
         ["valid range: 1 <= value <= 16777216"]),
        ("train: {micro_batch_size: 2, dataloader_workers: 100000}", "train.dataloader_workers",
         ["valid range: 0 <= value <= 1024"]),
        ("train: {micro_batch_size: 2}\nworld_size: 100000000", "world_size",
         ["valid range: 1 <= value <= 65536"]),
        ("train: {micro_batch_size: 2}\ngpus: [0, 4294967296]", "gpus[1]",
         ["valid range: 0 <= value <= 1023"]),
        ("train: {micro_batch_size: 2}\nlimits: {max_attempts: 1000000000000}",
         "limits.max_attempts", ["valid range: 1 <= value <= 10000"]),
        ("train: {micro_batch_size: 2}\nlimits: {min_micro_batch_size: 10000000}",
         "limits.min_micro_batch_size", ["valid range: 1 <= value <= 1048576"]),
        ("train: {micro_batch_size: 2}\nlimits: {min_max_length: 100000000}",
         "limits.min_max_length", ["valid range: 1 <= value <= 16777216"]),
        ("train: {micro_batch_size: 2}\nlimits: {hang_timeout_s: 1.0e+30}",
         "limits.hang_timeout_s", ["valid range: 0 < value <= 604800"]),
        ("train: {micro_batch_size: 2}\nlimits: {hang_timeout_s: .inf}",
         "limits.hang_timeout_s", ["got inf", "valid range"]),
        ("train: {micro_batch_size: 2}\nlimits: {stop_grace_s: .nan}",
         "limits.stop_grace_s", ["valid range: 0 <= value <= 3600"]),
        ("train: {micro_batch_size: 2}\nlimits: {fatal_grace_s: 1.0e+30}",
         "limits.fatal_grace_s", ["valid range: 0 <= value <= 3600"]),
        ("train: {micro_batch_size: 2}\nlimits: {stop_save_timeout_s: 1.0e+30}",
         "limits.stop_save_timeout_s", ["valid range: 0 <= value <= 86400"]),
        ("train: {micro_batch_size: 2}\nlimits: {healthy_uptime_s: 1.0e+30}",
         "limits.healthy_uptime_s", ["valid range: 0 <= value <= 604800"]),
        ("train: {micro_batch_size: 2}\nlimits: {backoff_s: [1, 1.0e+30]}",
         "limits.backoff_s[1]", ["valid range: 0 <= value <= 86400"]),
        ("train: {micro_batch_size: 2}\nresources: {host_memory_limit: 100000000000000000000}",
         "resources.host_memory_limit", ["more than any address space", "64 PiB"]),
        ("train: {micro_batch_size: 2}\nresources: {host_memory_limit: 1000000TiB}",
         "resources.host_memory_limit", ["more than any address space"]),
    ],
)  # fmt: skip
def test_numbers_are_bounded_to_sane_ranges(
    work: Path, line3: str, field: str, fragments: list[str]
) -> None:
    """Issue 13.12: a micro-batch of 10**30 (or a timeout of 1e30, or .inf) was accepted and
    failed far from the job file; every number now has an upper bound, and the message names
    file, line, field and the whole range."""
    path = write_job(work, "name: t\nscript: train.py\n" + line3 + "\n")
    line = 3 + next(i for i, text in enumerate(line3.split("\n")) if text.split(":")[0] in field)
    assert_problem(path, field, line, *fragments)


def test_bounds_keep_the_largest_sane_values(work: Path) -> None:
    path = write_job(
        work,
        """
        name: t
        script: train.py
        train: {micro_batch_size: 1048576, gradient_accumulation_steps: 1048576,
                max_length: 16777216, dataloader_workers: 1024}
        limits: {max_attempts: 10000, hang_timeout_s: 604800, stop_grace_s: 3600,
                 backoff_s: [0, 86400], stop_save_timeout_s: 86400}
        resources: {host_memory_limit: 64PiB}
        """,
    )
    problems = problems_of(path)  # 64PiB is not a unit parse_size knows: the only problem
    assert [p.field for p in problems] == ["resources.host_memory_limit"]
    path.write_text(path.read_text().replace("64PiB", str(2**56)))
    job = load_job(path)
    assert job.knobs.micro_batch_size == 2**20 and job.limits.max_attempts == 10_000


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--per_device_train_batch_size", "1" + "0" * 30, "at most 1048576"),
        ("--gradient_accumulation_steps", "1048577", "valid range: 1 <= value <= 1048576"),
        ("--dataloader_num_workers", "5000", "at most 1024"),
    ],
)
def test_quick_start_knobs_are_bounded(work: Path, flag: str, value: str, fragment: str) -> None:
    with pytest.raises(JobFileError) as info:
        job_from_command(["python", "train.py", flag, value], cwd=work)
    (problem,) = info.value.problems
    assert problem.field == flag and fragment in problem.message


def test_quick_start_world_and_gpus_are_bounded(work: Path) -> None:
    with pytest.raises(JobFileError) as info:
        job_from_command(["torchrun", "--nproc_per_node", "9" * 20, "train.py"], cwd=work)
    assert "at most 65536" in info.value.problems[0].message
    with pytest.raises(JobFileError) as info:
        job_from_command(["deepspeed", "--include", "localhost:0,99999", "train.py"], cwd=work)
    assert "between 0 and 1023" in str(info.value)


_PATH_JOB = """
name: t
script: train.py
train: {micro_batch_size: 2}
checkpoints: {dir: CKPT}
log_dir: LOGDIR
"""


@pytest.mark.parametrize(
    ("dirs", "field", "line", "fragments"),
    [
        (("afile/logs", "out"), "log_dir", 5, ["afile is a regular file", "below it"]),
        (("afile/a/b", "out"), "log_dir", 5, ["afile is a regular file"]),
        (("afile", "out"), "log_dir", 5, ["afile exists and is a regular file, not a directory"]),
        (("loop/logs", "out"), "log_dir", 5, ["loop/logs goes through a symlink loop"]),
        (("logs", "afile/ck"), "checkpoints.dir", 4, ["afile is a regular file", "below it"]),
        (("logs", "afile"), "checkpoints.dir", 4, ["exists and is a regular file"]),
    ],
)
def test_unusable_log_and_checkpoint_dirs_are_job_file_problems(
    work: Path, dirs: tuple[str, str], field: str, line: int, fragments: list[str]
) -> None:
    """Issue 13.8: these passed validation and crashed `dsguard run` (exit 70) at its first
    mkdir; now the job file names the line, for validate and run alike."""
    (work / "afile").write_text("not a directory\n")
    (work / "loop").symlink_to("loop")
    log_dir, ckpt = dirs
    path = write_job(work, _PATH_JOB.replace("CKPT", ckpt).replace("LOGDIR", log_dir))
    assert_problem(path, field, line, *fragments)


def test_default_log_dir_below_a_file_says_it_is_the_default(work: Path) -> None:
    (work / "runs").write_text("")
    path = write_job(work, "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\n")
    problem = only_problem(path)
    assert problem.field == "log_dir" and "the default log_dir" in problem.message


def test_usable_dirs_load(work: Path) -> None:
    (work / "logs").mkdir()
    path = write_job(work, _PATH_JOB.replace("CKPT", "out/x").replace("LOGDIR", "logs/new/deep"))
    job = load_job(path, writable=True)
    assert job.log_dir == work / "logs" / "new" / "deep"
    assert not job.log_dir.exists()  # validation creates nothing


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only tmpfs needs root")
def test_log_dir_on_a_read_only_mount(work: Path) -> None:
    """Root ignores permission bits, not a read-only mount: the condition root hits too."""
    import subprocess

    mnt = work / "ro"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)],
        capture_output=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        path = write_job(work, _PATH_JOB.replace("CKPT", "out").replace("LOGDIR", "ro/logs"))
        assert load_job(path).log_dir == mnt / "logs"  # read-only commands still load it
        with pytest.raises(JobFileError) as info:
            load_job(path, writable=True)
        problem = the_problem(info.value.problems, "log_dir")
        assert problem.line == 5 and "read-only file system" in problem.message
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize(
    ("tbs", "accum", "world", "refused"),
    [(7, 1, 1, True), (8, 1, 1, True), (8, 2, 1, False), (16, 2, 2, False), (16.0, 4, 1, False),
     ("auto", 1, 1, False), (32, 1, 2, True)],
)  # fmt: skip
def test_explicit_train_batch_size_must_match_the_knobs(
    work: Path, tbs: object, accum: int, world: int, refused: bool
) -> None:
    """Issue 13.12: `train_batch_size: 7` against micro 4 was silently rewritten to 4. It is
    the global batch itself, so the job states two: refused, with both values named."""
    write_ds(work, {"train_batch_size": tbs, "zero_optimization": {"stage": 2}})
    path = write_job(
        work,
        f"""
        name: t
        script: train.py
        world_size: {world}
        train: {{micro_batch_size: 4, gradient_accumulation_steps: {accum}}}
        deepspeed: {{config: ds.json}}
        """,
    )
    if not refused:
        assert load_job(path).knobs.micro_batch_size == 4
        return
    want = 4 * accum * world
    assert_problem(
        path, "deepspeed.config", 5, f"train_batch_size is {tbs!r}",
        f"micro 4 x accumulation {accum} x world {world} = {want}", f"set it to {want}",
    )  # fmt: skip


def test_quick_start_refuses_a_disagreeing_train_batch_size(work: Path) -> None:
    write_ds(work, {"train_batch_size": 7, "zero_optimization": {"stage": 2}})
    argv = ["python", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4"]
    with pytest.raises(JobFileError) as info:
        job_from_command(argv, cwd=work)
    (problem,) = info.value.problems
    assert problem.field == "--deepspeed" and "train_batch_size is 7" in problem.message
