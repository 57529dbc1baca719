"""Knob delivery beyond flags (issue 14): the script's own config file, dotlist arguments,
environment variables and the DeepSpeed config; undeliverable knobs left out of the ladder;
``limits.fixed``; packing and tokens per optimizer step. Pure or file-level: milliseconds."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.core import rungs
from dsguard.core.classify import FailureKind
from dsguard.core.ladder import GiveUp, PolicyConfig, Relaunch, decide, plan
from dsguard.core.render import render_attempt_config
from dsguard.errors import JobFileError, Problem
from dsguard.job.delivery import (
    RUNG_KNOBS,
    dotted_set,
    render_knobs_file,
    routes,
    tokens_per_step,
    undeliverable_rungs,
)
from dsguard.job.file import load_job
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs
from dsguard.job.model import ALL_RUNGS, Job
from dsguard.job.quickstart import job_from_command
from dsguard.run.events import human_line
from dsguard.run.launch import build_command
from dsguard.run.safefs import UnsafePathError, write_atomic_refusing_links

CONFIG = {"training": {"batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 1024},
          "model": {"name": "tiny", "layers": [1, 2]}}  # fmt: skip


@pytest.fixture(autouse=True)
def python_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('training')\n")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def job_file(work: Path, body: str) -> Path:
    path = work / "job.yaml"
    path.write_text(textwrap.dedent(body).lstrip("\n"))
    return path


FILE_JOB = """
name: cfg
script: train.py
args: [--config, config.json, --out, ckpt]
train: {micro_batch_size: 8, gradient_accumulation_steps: 1, max_length: 1024}
knobs_file:
  path: config.json
  arg: --config
  keys:
    micro_batch_size: training.batch_size
    gradient_accumulation_steps: training.gradient_accumulation_steps
    max_length: training.max_length
checkpoints: {dir: ckpt, output_flag: --out, resume_flag: null}
"""


def problems(path: Path) -> list[Problem]:
    with pytest.raises(JobFileError) as info:
        load_job(path)
    return info.value.problems


# -- the knobs file ------------------------------------------------------------------------


def test_knobs_file_job_routes_and_launch(work: Path) -> None:
    job = load_job(job_file(work, FILE_JOB))
    assert job.delivery.file is not None and job.delivery.file.fmt == "json"
    route = routes(job)
    assert route["micro_batch_size"] == "config.json: training.batch_size"
    # Not an HF script: no HF flag is assumed, so gradient checkpointing has no route.
    assert route["gradient_checkpointing"] is None and job.flags["micro_batch_size"] is None
    copy = work / "attempt-2.config.json"
    knobs = job.knobs.replace(micro_batch_size=4, gradient_accumulation_steps=2)
    cmd = build_command(job, knobs, run_id="r", attempt=2, base_env={}, ds_config=None,
                        resume_from=None, output_dir=None, knobs_file=copy)  # fmt: skip
    assert cmd.argv[-4:] == ["--config", str(copy), "--out", "ckpt"]
    assert "--per_device_train_batch_size" not in cmd.argv  # mapped: never also a flag
    data = json.loads(render_knobs_file(job.delivery.file, knobs))
    assert data["training"] == {"batch_size": 4, "gradient_accumulation_steps": 2,
                                "max_length": 1024}  # fmt: skip
    assert data["model"] == CONFIG["model"]
    assert json.loads((work / "config.json").read_text()) == CONFIG  # the user's file untouched


def test_knobs_file_as_a_positional_argument(work: Path) -> None:
    """``axolotl train config.yml`` / ``llamafactory-cli train config.yaml``: no flag names
    the file; the args item that does is replaced."""
    (work / "cfg.yaml").write_text("micro_batch_size: 8\nsample_packing: true\n")
    body = """
    name: positional
    script: train.py
    args: [train, ./cfg.yaml]
    train: {micro_batch_size: 8}
    knobs_file: {path: cfg.yaml, keys: {micro_batch_size: micro_batch_size}}
    """
    job = load_job(job_file(work, body))
    assert job.data.packing is True and job.data.source == "cfg.yaml: sample_packing"
    copy = work / "runs" / "attempt-1.cfg.yaml"
    cmd = build_command(job, job.knobs.replace(micro_batch_size=4), run_id="r", attempt=1,
                        base_env={}, ds_config=None, resume_from=None, output_dir=None,
                        knobs_file=copy)  # fmt: skip
    assert cmd.argv[-2:] == ["train", str(copy)]
    assert job.delivery.file is not None
    assert yaml.safe_load(render_knobs_file(job.delivery.file, job.knobs.replace(
        micro_batch_size=4)))["micro_batch_size"] == 4  # fmt: skip
    got = problems(job_file(work, body.replace("./cfg.yaml", "other.yaml")))
    assert got[0].field == "knobs_file.arg" and "no item of args names" in got[0].message


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml", ".toml"])
def test_knobs_file_round_trip_every_format(work: Path, suffix: str) -> None:
    """Each format is written so its own reader gives the content back, nested keys that
    were missing created, everything else unchanged."""
    base = {**CONFIG, "opt": {"lr": 0.0003, "betas": [0.9, 0.95], "name": 'adam "w"'},
            "runs": [{"seed": 1}, {"seed": 2}], "flag": True}  # fmt: skip
    src = work / f"knobs{suffix}"
    if suffix == ".json":
        src.write_text(json.dumps(base))
    elif suffix == ".toml":
        src.write_text(
            "[training]\nbatch_size = 8\ngradient_accumulation_steps = 1\nmax_length = 1024\n"
            '[model]\nname = "tiny"\nlayers = [1, 2]\n[opt]\nlr = 0.0003\nbetas = [0.9, 0.95]\n'
            'name = "adam \\"w\\""\n[[runs]]\nseed = 1\n[[runs]]\nseed = 2\n'
        )
        src.write_text("flag = true\n" + src.read_text())
    else:
        src.write_text(yaml.safe_dump(base))
    body = FILE_JOB.replace("config.json", src.name).replace(
        "    max_length: training.max_length", "    max_length: training.max_length\n"
        "    gradient_checkpointing: memory.deep.checkpointing",
    )  # fmt: skip
    job = load_job(job_file(work, body))
    assert job.delivery.file is not None
    knobs = job.knobs.replace(max_length=512, gradient_checkpointing=True)
    text = render_knobs_file(job.delivery.file, knobs).decode()
    if suffix == ".json":
        got = json.loads(text)
    elif suffix == ".toml":
        got = tomllib.loads(text)
    else:
        got = yaml.safe_load(text)
    want = dotted_set(dotted_set(base, "training.max_length", 512),
                      "memory.deep.checkpointing", True)  # fmt: skip
    assert got == want


def test_dotted_set_refuses_to_overwrite_a_value_with_a_mapping() -> None:
    with pytest.raises(ValueError, match="training is int"):
        dotted_set({"training": 4}, "training.batch_size", 2)
    assert dotted_set({}, "a.b.c", 1) == {"a": {"b": {"c": 1}}}


def test_symlinked_copy_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    log_dir = tmp_path / "log"
    log_dir.mkdir(mode=0o700)
    link = log_dir / "attempt-1.config.json"
    link.symlink_to(victim)
    with pytest.raises(UnsafePathError):
        write_atomic_refusing_links(link, b'{"x": 1}')
    assert victim.read_text() == "{}" and link.is_symlink()
    plain = log_dir / "attempt-2.config.json"
    write_atomic_refusing_links(plain, b'{"x": 1}')
    assert json.loads(plain.read_text()) == {"x": 1} and (plain.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize(
    ("edit", "field", "fragment"),
    [
        (("path: config.json", "path: nope.json"), "knobs_file.path", "not found"),
        (("path: config.json", "path: train.py"), "knobs_file.path", "unknown config format"),
        (("arg: --config", "arg: --cfg"), "knobs_file.arg", "is not in args"),
        (("micro_batch_size: training.batch_size", "micro_batchsize: training.batch_size"),
         "knobs_file.keys.micro_batchsize", "did you mean 'micro_batch_size'"),
        (("training.max_length", "training..max"), "knobs_file.keys.max_length", "dotted key"),
        (("max_length: 1024}", "max_length: 2048}"), "knobs_file.keys.max_length",
         "starts at 2048"),
        (("max_length: training.max_length", "max_length: model.name.x"),
         "knobs_file.keys.max_length", "model.name is str"),
    ],
)  # fmt: skip
def test_knobs_file_bad_input(work: Path, edit: tuple[str, str], field: str, fragment: str) -> None:
    path = job_file(work, FILE_JOB.replace(*edit))
    found = [p for p in problems(path) if p.field == field]
    assert found and fragment in found[0].message, problems(path)
    assert found[0].file == path and found[0].line is not None


def test_knobs_train_leaves_out_are_taken_from_the_script(work: Path) -> None:
    """config.json's accumulation 4 must not become dsguard's default 1 in every copy."""
    (work / "config.json").write_text(
        json.dumps(
            {"training": {"batch_size": 8, "gradient_accumulation_steps": 4, "max_length": 2048}}
        )
    )
    job = load_job(job_file(work, FILE_JOB.replace(
        "{micro_batch_size: 8, gradient_accumulation_steps: 1, max_length: 1024}",
        "{micro_batch_size: 8}")))  # fmt: skip
    assert (job.knobs.gradient_accumulation_steps, job.knobs.max_length) == (4, 2048)
    assert {"gradient_accumulation_steps", "max_length"} <= job.explicit_knobs
    (work / "config.json").write_text(
        json.dumps({"training": {"batch_size": 8, "gradient_accumulation_steps": "four"}})
    )
    got = problems(job_file(work, FILE_JOB.replace(
        "{micro_batch_size: 8, gradient_accumulation_steps: 1, max_length: 1024}",
        "{micro_batch_size: 8}")))  # fmt: skip
    assert [p.field for p in got] == ["knobs_file.keys.gradient_accumulation_steps"]
    assert "'four' is not a whole number" in got[0].message


def test_knob_with_two_routes_is_refused(work: Path) -> None:
    body = FILE_JOB + "knobs_env: {micro_batch_size: BS}\nflags: {max_length: --max_len}\n"
    got = {p.field: p.message for p in problems(job_file(work, body))}
    assert "also delivered by knobs_file.keys" in got["knobs_env.micro_batch_size"]
    assert "one route" in got["flags.max_length"]


# -- dotlist and env -----------------------------------------------------------------------

DOTLIST_JOB = """
name: dl
script: train.py
args: [training.batch_size=8, ++data.max_len=1024, --out, ckpt]
train: {micro_batch_size: 8, gradient_accumulation_steps: 1, max_length: 1024}
knobs_dotlist:
  micro_batch_size: training.batch_size
  gradient_accumulation_steps: +training.accum
  max_length: data.max_len
knobs_env: {dataloader_workers: NUM_WORKERS}
"""


def test_dotlist_and_env_delivery(work: Path) -> None:
    job = load_job(job_file(work, DOTLIST_JOB))
    knobs = job.knobs.replace(micro_batch_size=2, gradient_accumulation_steps=4, max_length=512,
                              dataloader_workers=3)  # fmt: skip
    cmd = build_command(job, knobs, run_id="r", attempt=1, base_env={}, ds_config=None,
                        resume_from=None, output_dir=None)  # fmt: skip
    tail = cmd.argv[cmd.argv.index(str(job.script)) + 1 :]
    # In place (prefix kept) when the argument is there; appended with the mapping's prefix
    # when it is not; no HF flag for anything.
    assert tail == ["training.batch_size=2", "++data.max_len=512", "--out", "ckpt",
                    "+training.accum=4"]  # fmt: skip
    assert cmd.env["NUM_WORKERS"] == "3"


def test_dotlist_value_in_args_must_agree_with_train(work: Path) -> None:
    body = DOTLIST_JOB.replace("training.batch_size=8", "training.batch_size=16")
    got = problems(job_file(work, body))
    assert any(p.field == "args[0]" and "starts at 8" in p.message for p in got), got


# -- undeliverable knobs, limits.fixed -----------------------------------------------------


def test_rung_knob_table_matches_the_rungs() -> None:
    """RUNG_KNOBS (what validate and the give-up name) covers exactly what each rung moves."""
    assert set(RUNG_KNOBS) == set(ALL_RUNGS)
    start = Knobs(micro_batch_size=8, max_length=4096, zero_stage=0, dataloader_workers=4)
    ctx = rungs.RungContext(1, 512, DEFAULT_FLAGS, True, True)
    for name, fn in rungs.RUNGS.items():
        for knobs in (start, start.replace(zero_stage=3)):
            move = fn(knobs, ctx)
            if move is not None:
                break
        assert move is not None, name
        moved = set(knobs.diff(move.knobs))
        # Offload from a lower stage also switches ZeRO; walk() checks every changed knob.
        allowed = {*RUNG_KNOBS[name], *(["zero_stage"] if name.startswith("offload") else [])}
        assert moved and moved <= allowed, (name, moved)


def test_undeliverable_knobs_leave_their_rungs_out(work: Path) -> None:
    job = load_job(job_file(work, FILE_JOB))
    left = undeliverable_rungs(job)
    assert left["gradient_checkpointing"] == ("gradient_checkpointing",)
    assert left["lora"] == ("lora",) and "micro_batch" not in left
    cfg = PolicyConfig.from_job(job)
    steps = plan(FailureKind.CUDA_OOM, job.knobs, cfg)
    assert [s.rung for s in steps] == [None, "micro_batch", "micro_batch", "micro_batch",
                                       "max_length"]  # fmt: skip
    done = decide(FailureKind.CUDA_OOM, knobs=steps[-1].knobs, positions={"oom": 2},
                  history=(), cfg=cfg)  # fmt: skip
    assert isinstance(done, GiveUp)
    assert "possible rungs: micro_batch, max_length" in done.reason
    assert "lora (lora has no route to the script)" in done.reason


def test_limits_fixed_accumulation_leaves_micro_batch_out(work: Path) -> None:
    body = FILE_JOB + "limits: {fixed: [gradient_accumulation_steps]}\n"
    job = load_job(job_file(work, body))
    assert job.limits.fixed == ("gradient_accumulation_steps",)
    cfg = PolicyConfig.from_job(job)
    d = decide(FailureKind.CUDA_OOM, knobs=job.knobs, positions={}, history=(), cfg=cfg)
    # micro_batch needs the accumulation to keep the global batch: never made; max_length is.
    assert isinstance(d, Relaunch) and d.rung == "max_length"
    assert d.knobs.gradient_accumulation_steps == 1 and d.knobs.micro_batch_size == 8
    assert undeliverable_rungs(job)["micro_batch"] == ("gradient_accumulation_steps",)


def test_limits_fixed_unknown_knob(work: Path) -> None:
    got = problems(job_file(work, FILE_JOB + "limits: {fixed: [grad_accum]}\n"))
    assert got[0].field == "limits.fixed[0]" and "unknown knob" in got[0].message


def test_deepspeed_config_is_a_route_for_a_plain_deepspeed_script(work: Path) -> None:
    (work / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                              "zero_optimization": {"stage": 1}}))  # fmt: skip
    body = """
    name: ds
    script: train.py
    train: {micro_batch_size: 8, gradient_accumulation_steps: 1}
    deepspeed: {config: ds.json, flag: --deepspeed_config}
    flags: {micro_batch_size: null, gradient_accumulation_steps: null, lora: null,
            gradient_checkpointing: null}
    """
    job = load_job(job_file(work, body))
    assert routes(job)["micro_batch_size"] == "the rendered DeepSpeed config"
    rendered = render_attempt_config(
        job,
        job.knobs.replace(micro_batch_size=4, gradient_accumulation_steps=2),
        remedies=(),
        world_size=1,
    )
    # "auto" and absent keys are written: the config is this knob's only route.
    assert rendered.config["train_micro_batch_size_per_gpu"] == 4
    assert rendered.config["gradient_accumulation_steps"] == 2
    cfg = PolicyConfig.from_job(job)
    d = decide(FailureKind.CUDA_OOM, knobs=job.knobs, positions={}, history=(), cfg=cfg)
    assert isinstance(d, Relaunch) and d.rung == "micro_batch"
    # The HF Trainer reads them from its own flags: there the config is no route.
    hf = load_job(job_file(work, body.replace("flag: --deepspeed_config", "flag: --deepspeed")))
    assert routes(hf)["micro_batch_size"] is None and "micro_batch" in undeliverable_rungs(hf)


def test_hf_trainer_job_keeps_its_ds_buckets_rung(work: Path) -> None:
    """The HF Trainer passes the ZeRO block of ``--deepspeed`` on as written: the buckets'
    route is the rendered config (the run_clm case: without it the rung was left out)."""
    (work / "ds.json").write_text(
        json.dumps(
            {
                "zero_optimization": {
                    "stage": 2,
                    "reduce_bucket_size": 50_000_000,
                    "allgather_bucket_size": 50_000_000,
                }
            }
        )
    )
    body = """
    name: hf
    script: train.py
    train: {micro_batch_size: 8, gradient_accumulation_steps: 1}
    deepspeed: {config: ds.json, flag: --deepspeed}
    """
    job = load_job(job_file(work, body))
    assert routes(job)["ds_bucket_divisor"] == "the rendered DeepSpeed config"
    assert "ds_buckets" not in undeliverable_rungs(job)
    rendered = render_attempt_config(job, job.knobs.replace(ds_bucket_divisor=2), remedies=(),
                                     world_size=1)  # fmt: skip
    assert rendered.config["zero_optimization"]["reduce_bucket_size"] == 25_000_000
    assert routes(job)["micro_batch_size"] == "flag --per_device_train_batch_size"


# -- packing and tokens per step -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "data", "packing"),
    [
        ("[--block_size, '1024']", "", True),
        ("[--packing]", "", True),
        ("[--packing, 'false']", "", None),
        ("[--sample_packing, 'true', --x, '1']", "", True),
        ("[dataset.packed=true]", "", True),
        ("[--block_size, '1024']", "data: {packing: false}\n", False),
        ("[]", "", None),
    ],
)
def test_packing_detected(work: Path, args: str, data: str, packing: bool | None) -> None:
    body = f"name: p\nscript: train.py\nargs: {args}\ntrain: {{micro_batch_size: 2}}\n{data}"
    assert load_job(job_file(work, body)).data.packing is packing


@pytest.fixture
def packed(work: Path) -> Job:
    body = """
    name: packed
    script: train.py
    args: [--output_dir, out]
    train: {micro_batch_size: 2, gradient_accumulation_steps: 2, max_length: 2048}
    flags: {max_length: --block_size}
    checkpoints: {dir: out}
    ladder: {oom: [max_length]}
    world_size: 2
    data: {packing: true}
    """
    return load_job(job_file(work, body))


def test_block_size_as_the_max_length_flag_means_packing(work: Path) -> None:
    body = "name: p\nscript: train.py\ntrain: {micro_batch_size: 2}\n"
    body += "flags: {max_length: --block_size}\n"
    data = load_job(job_file(work, body)).data
    assert data.packing is True and "run_clm" in str(data.source)


def test_packed_max_length_move_starts_a_new_phase(packed: Job) -> None:
    cfg = PolicyConfig.from_job(packed)
    d = decide(FailureKind.CUDA_OOM, knobs=packed.knobs, positions={}, history=(), cfg=cfg)
    assert isinstance(d, Relaunch) and d.new_phase and d.knobs.max_length == 1024
    assert "regroups the dataset" in d.caveats[0]
    assert tokens_per_step(packed.knobs, 2) == 2 * 2 * 2 * 2048
    assert tokens_per_step(d.knobs, 2) == 2 * 2 * 2 * 1024
    steps = plan(FailureKind.CUDA_OOM, packed.knobs, cfg)
    assert [s.tokens_per_step for s in steps][:2] == [16384, 8192]


def test_unpacked_max_length_is_a_plain_move(packed: Job) -> None:
    cfg = PolicyConfig.from_job(packed)
    ctx = rungs.RungContext(**{**_fields(cfg.ctx), "packing": None})
    move = rungs.max_length(packed.knobs, ctx)
    assert move is not None and not move.new_phase


def _fields(ctx: rungs.RungContext) -> dict[str, Any]:
    return {name: getattr(ctx, name) for name in rungs.RungContext.__dataclass_fields__}


def test_console_says_kept_only_when_tokens_per_step_are_kept() -> None:
    base: dict[str, Any] = {"event": "policy_applied", "ts": "2026-01-01T00:00:00",
                            "rung": "max_length", "changes": {"max_length": [2048, 1024]},
                            "global_batch_before": 8, "global_batch_after": 8}  # fmt: skip
    line = human_line({**base, "tokens_per_step_before": 16384, "tokens_per_step_after": 8192})
    assert "kept" not in line and "tokens per step CHANGED 16384 -> 8192" in line
    assert "global batch 8 kept" in human_line({**base, "tokens_per_step_before": 16384,
                                                "tokens_per_step_after": 16384})  # fmt: skip
    assert "global batch 8 kept" in human_line(base)  # tokens unknown: samples are all we know
    end = {"event": "run_succeeded", "ts": "x", "attempts": 2, "changes": {},
           "initial_global_batch": 8, "global_batch": 8,
           "initial_tokens_per_step": 16384, "tokens_per_step": 8192}  # fmt: skip
    assert "kept" not in human_line(end) and "CHANGED 16384 -> 8192" in human_line(end)


# -- quick start ---------------------------------------------------------------------------


def test_quick_start_passes_only_flags_the_command_has(work: Path) -> None:
    job = job_from_command(["python", "train.py", "--block_size", "1024", "--lr", "1"],
                           cwd=work, knob_flags=["max_length=--block_size"],
                           memory_limit="6GiB")  # fmt: skip
    assert job.flags["max_length"] == "--block_size" and job.knobs.max_length == 1024
    assert job.flags["micro_batch_size"] is None and job.flags["lora"] is None
    assert job.resources.host_memory_limit_bytes == 6 * 1024**3
    assert job.data.packing is True  # run_clm's --block_size packs
    cmd = build_command(job, job.knobs, run_id="r", attempt=1, base_env={}, ds_config=None,
                        resume_from=None, output_dir=None)  # fmt: skip
    assert "--per_device_train_batch_size" not in cmd.argv
    assert cmd.argv[-4:] == ["--lr", "1", "--block_size", "1024"]
    with_hf = job_from_command(["python", "train.py", "--per_device_train_batch_size", "4"],
                               cwd=work)  # fmt: skip
    # An HF TrainingArguments flag: the script parses all of TrainingArguments, so its other
    # knob flags exist too; the script's own --model_max_length is not assumed.
    assert with_hf.flags["micro_batch_size"] == "--per_device_train_batch_size"
    assert with_hf.flags["gradient_accumulation_steps"] == "--gradient_accumulation_steps"
    assert with_hf.flags["max_length"] is None and with_hf.flags["lora"] is None


@pytest.mark.parametrize(
    ("knob", "limit", "where", "fragment"),
    [
        ("max_len=--block_size", None, "--knob max_len=--block_size", "no knob 'max_len'"),
        ("zero_stage=--zero", None, "--knob zero_stage=--zero", "through its config"),
        ("max_length", None, "--knob max_length", "NAME=FLAG"),
        ("micro_batch_size=--bs", None, "--knob micro_batch_size=--bs", "does not give --bs"),
        (None, "lots", "--memory-limit", "not a size"),
    ],
)
def test_quick_start_bad_knob_and_limit(
    work: Path, knob: str | None, limit: str | None, where: str, fragment: str
) -> None:
    with pytest.raises(JobFileError) as info:
        job_from_command(["python", "train.py"], cwd=work,
                         knob_flags=[knob] if knob else [], memory_limit=limit)  # fmt: skip
    got = {p.field: p.message for p in info.value.problems}
    assert fragment in got[where], got


def test_validate_and_plan_name_the_rungs_left_out(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dsguard.cli.main import main

    path = job_file(work, FILE_JOB + "limits: {fixed: [gradient_accumulation_steps]}\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rung micro_batch is left out: gradient_accumulation_steps is fixed" in out
    assert "rung lora is left out: lora cannot be delivered" in out
    assert main(["plan", str(path), "--kind", "cuda_oom"]) == 0
    out = capsys.readouterr().out
    assert "rung gradient_checkpointing is left out" in out
    rows = [ln.split()[1] for ln in out.splitlines() if ln.split()[:1] and ln.split()[0].isdigit()]
    assert rows == ["(start)", "max_length"]  # micro_batch would need the fixed accumulation


def test_hf_job_has_nothing_left_out_and_the_console_line_is_short(work: Path) -> None:
    hf = load_job(job_file(work, "name: hf\nscript: train.py\ntrain: {micro_batch_size: 4}\n"))
    assert undeliverable_rungs(hf) == {}  # ZeRO rungs without DeepSpeed are inert, not lost
    job = load_job(job_file(work, FILE_JOB))
    line = human_line({"event": "knobs_routed", "ts": "x", "routes": routes(job),
                       "left_out": {r: list(k) for r, k in undeliverable_rungs(job).items()},
                       "packing": None})  # fmt: skip
    assert "micro_batch_size by config.json: training.batch_size" in line
    assert "rungs left out (no route or fixed): gradient_checkpointing" in line


def test_the_plain_deepspeed_example_validates() -> None:
    example = Path(__file__).resolve().parents[1] / "configs/examples/plain-deepspeed.yaml"
    job = load_job(example)
    assert job.delivery.file is not None
    assert routes(job)["micro_batch_size"] == "plain-deepspeed.config.json: training.batch_size"
    assert undeliverable_rungs(job)["pin_memory"] == ("pin_memory",)


def test_quick_start_cli_knob_and_memory_limit(tmp_path: Path, run_dsguard: Any) -> None:
    """The real CLI: --knob and --memory-limit reach the job; no HF flag is invented."""
    (tmp_path / "echo.py").write_text("import sys; print('ARGS', sys.argv[1:])\n")
    res = run_dsguard("run", "--quiet", "--log-dir", "runs", "--knob", "max_length=--block_size",
                      "--memory-limit", "4GiB", "--", sys.executable, "echo.py",
                      "--block_size", "128")  # fmt: skip
    assert res.code == 0, res.proc.stderr
    argv = res.named("attempt_started")[0]["argv"]
    assert argv[-2:] == ["--block_size", "128"] and "--as-bytes" in argv
    assert str(4 * 1024**3) in argv and not any(a.startswith("--per_device") for a in argv)
    assert res.named("knobs_routed")[0]["packing"] is True
