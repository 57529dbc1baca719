"""``dsguard init -- <command>``: each framework shape detected from the command, its script
and its config file, written as a job file the parser accepts (job/initjob.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.cli.main import main
from dsguard.job.file import job_file_schema, load_job
from dsguard.job.frameworks import FRAMEWORKS
from dsguard.job.initjob import detect, render_job
from dsguard.job.model import Job, LauncherKind


def _init(tmp_path: Path, argv: list[str]) -> tuple[str, dict[str, Any]]:
    text = render_job(detect(argv, tmp_path), "j")
    return text, yaml.safe_load(text)


def _load(tmp_path: Path, doc: dict[str, Any]) -> Job:
    """Load the generated file with the job-file parser. Keys this branch's parser does not
    know yet (``knobs_dotlist``, ``data``: issue 14's knob delivery, parsed once merged) are
    dropped here and asserted on the text instead."""
    known = set(job_file_schema()["properties"])
    path = tmp_path / "generated.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if k in known}))
    return load_job(path)


def _script(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / name).write_text(body)
    return name


def test_hf_trainer_under_deepspeed_with_its_config(tmp_path: Path) -> None:
    _script(tmp_path, "train.py", "args = TrainingArguments()\ntrainer = Trainer(model)\n")
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    text, doc = _init(tmp_path, [
        "deepspeed", "--num_gpus", "2", "train.py", "--per_device_train_batch_size", "8",
        "--gradient_accumulation_steps", "2", "--output_dir", "out", "--deepspeed", "ds.json",
        "--learning_rate", "1e-5",
    ])  # fmt: skip
    assert "Framework: hf_trainer" in text and FRAMEWORKS["hf_trainer"].sources[0] in text
    assert doc["args"] == ["--output_dir", "out", "--learning_rate", "1e-5"]
    assert doc["train"] == {"micro_batch_size": 8, "gradient_accumulation_steps": 2,
                            "zero_stage": 2}  # fmt: skip
    assert doc["flags"]["max_length"] is None  # the command has no such flag: never passed
    job = _load(tmp_path, doc)
    assert (job.launcher, job.world_size) == (LauncherKind.DEEPSPEED, 2)
    assert job.knobs.global_batch(2) == 32
    assert job.deepspeed is not None and job.deepspeed.flag == "--deepspeed"
    assert job.checkpoints is not None and job.checkpoints.layout.value == "hf"
    assert job.checkpoints.resume_flag == "--resume_from_checkpoint"


def test_run_clm_maps_block_size_and_declares_packing(tmp_path: Path) -> None:
    _script(tmp_path, "run_clm.py", "def group_texts(examples): ...\n")
    text, doc = _init(tmp_path, [
        "torchrun", "--nproc_per_node", "2", "run_clm.py", "--per_device_train_batch_size",
        "4", "--block_size", "1024", "--output_dir", "out",
    ])  # fmt: skip
    assert doc["flags"]["max_length"] == "--block_size" and doc["train"]["max_length"] == 1024
    assert doc["data"] == {"packing": True} and "Note: group_texts" in text
    job = _load(tmp_path, doc)
    assert job.flags["max_length"] == "--block_size" and job.world_size == 2
    # run_clm parses TrainingArguments: its HF flags exist though the command did not use
    # them, so the gradient-checkpointing, worker and pinning rungs keep their route.
    assert doc["flags"]["gradient_checkpointing"] == "--gradient_checkpointing"
    assert doc["flags"]["dataloader_workers"] == "--dataloader_num_workers"
    assert doc["flags"]["pin_memory"] == "--dataloader_pin_memory"
    assert doc["flags"]["lora"] is None


def test_trl_with_packing_flag(tmp_path: Path) -> None:
    _script(tmp_path, "sft.py", "from trl import SFTConfig, SFTTrainer\n")
    _, doc = _init(tmp_path, [
        "accelerate", "launch", "--num_processes", "2", "sft.py", "--packing",
        "--max_length", "2048", "--per_device_train_batch_size", "2", "--output_dir", "o",
    ])  # fmt: skip
    assert doc["data"] == {"packing": True} and doc["flags"]["max_length"] == "--max_length"
    assert "--packing" in doc["args"]  # the script's own flag stays
    job = _load(tmp_path, doc)
    assert job.launcher is LauncherKind.ACCELERATE and job.knobs.max_length == 2048


def test_llamafactory_cli_yaml_becomes_a_dotlist_job(tmp_path: Path) -> None:
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8,
        "cutoff_len": 2048, "packing": True, "output_dir": "saves/qwen",
    }))  # fmt: skip
    text, doc = _init(tmp_path, ["llamafactory-cli", "train", "sft.yaml", "learning_rate=1e-5"])
    assert (doc["launcher"], doc["module"]) == ("python", "llamafactory.launcher")
    assert doc["args"] == ["sft.yaml", "learning_rate=1e-5"]
    # The shape issue 14 gives knobs_dotlist (its parser lands with the knob-delivery work).
    assert doc["knobs_dotlist"] == {
        "micro_batch_size": "per_device_train_batch_size",
        "gradient_accumulation_steps": "gradient_accumulation_steps",
        "max_length": "cutoff_len",
    }
    assert doc["train"] == {"micro_batch_size": 2, "gradient_accumulation_steps": 8,
                            "max_length": 2048}  # fmt: skip
    assert all(v is None for v in doc["flags"].values())
    assert doc["checkpoints"]["dir"] == "saves/qwen" and doc["checkpoints"]["resume_flag"] is None
    assert doc["data"] == {"packing": True} and "get_last_checkpoint" in text
    _load(tmp_path, doc)


def test_axolotl_train_runs_under_accelerate_with_its_override_flags(tmp_path: Path) -> None:
    (tmp_path / "ax.yaml").write_text(yaml.safe_dump({
        "micro_batch_size": 2, "gradient_accumulation_steps": 4, "sequence_len": 4096,
        "sample_packing": True, "output_dir": "./outputs/run",
    }))  # fmt: skip
    _, doc = _init(tmp_path, ["axolotl", "train", "ax.yaml"])
    assert (doc["launcher"], doc["module"]) == ("accelerate", "axolotl.cli.train")
    assert doc["flags"]["micro_batch_size"] == "--micro_batch_size"
    assert doc["train"]["max_length"] == 4096 and doc["data"] == {"packing": True}
    assert doc["checkpoints"]["dir"] == "./outputs/run"
    job = _load(tmp_path, doc)
    assert job.module == "axolotl.cli.train" and job.knobs.micro_batch_size == 2


def test_torchtune_run_with_dotlist_override(tmp_path: Path) -> None:
    (tmp_path / "tt.yaml").write_text(yaml.safe_dump({
        "batch_size": 4, "gradient_accumulation_steps": 4, "dataset": {"packed": False},
        "tokenizer": {"max_seq_len": None}, "output_dir": "/tmp/tt-out",
    }))  # fmt: skip
    _, doc = _init(tmp_path, [
        "tune", "run", "--nproc_per_node", "2", "full_finetune_distributed", "--config",
        "tt.yaml", "batch_size=8",
    ])  # fmt: skip
    assert doc["module"] == "torchtune._cli.tune" and doc["world_size"] == 2
    assert doc["train"] == {"micro_batch_size": 8, "gradient_accumulation_steps": 4}
    assert doc["knobs_dotlist"]["max_length"] == "tokenizer.max_seq_len"
    assert "data" not in doc and doc["checkpoints"]["dir"] == "/tmp/tt-out"


def test_plain_deepspeed_loop_reads_its_batch_from_the_deepspeed_config(tmp_path: Path) -> None:
    _script(tmp_path, "train_ds.py", "engine, *_ = deepspeed.initialize(model=m)\n")
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "zero_optimization": {"stage": 1},
    }))  # fmt: skip
    _, doc = _init(tmp_path, ["deepspeed", "train_ds.py", "--deepspeed_config", "ds.json",
                              "--out", "out"])  # fmt: skip
    assert doc["train"] == {"micro_batch_size": 4, "gradient_accumulation_steps": 2,
                            "zero_stage": 1}  # fmt: skip
    assert doc["deepspeed"] == {"config": "ds.json", "flag": "--deepspeed_config"}
    assert doc["checkpoints"]["layout"] == "deepspeed"
    assert doc["checkpoints"]["resume_flag"] is None  # it resumes itself from `latest`
    assert all(v is None for v in doc["flags"].values())
    job = _load(tmp_path, doc)
    assert job.checkpoints is not None and job.checkpoints.resume_flag is None


def test_accelerate_save_state_loop(tmp_path: Path) -> None:
    _script(tmp_path, "loop.py", "acc = Accelerator()\nacc.save_state(path)\n")
    _, doc = _init(tmp_path, ["accelerate", "launch", "loop.py",
                              "--per_device_train_batch_size", "4", "--out", "out"])  # fmt: skip
    assert doc["checkpoints"]["layout"] == "accelerate"
    assert doc["flags"]["micro_batch_size"] == "--per_device_train_batch_size"
    assert doc["flags"]["gradient_accumulation_steps"] is None  # the command has none
    _load(tmp_path, doc)


def test_init_never_writes_over_a_file_and_prints_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, "train.py", "Trainer(model)\n")
    argv = ["init", "--", "python", "train.py", "--per_device_train_batch_size", "2",
            "--output_dir", "out"]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "dsguard.yaml")
    first = (tmp_path / "dsguard.yaml").read_text()
    assert main(argv) == 2
    assert "exists; not overwritten" in capsys.readouterr().err
    assert (tmp_path / "dsguard.yaml").read_text() == first
    assert main(["validate", "dsguard.yaml"]) == 0


def test_every_framework_row_names_real_knobs_and_cites_a_public_source() -> None:
    from dsguard.job.knobs import KNOB_SPECS

    for fw in FRAMEWORKS.values():
        assert set(fw.knobs) <= set(KNOB_SPECS), fw.name
        assert fw.sources and all(s.startswith("https://github.com/") for s in fw.sources)
        assert fw.versions and fw.layout in ("hf", "deepspeed", "accelerate", "auto")
        if fw.route == "flags":
            assert all(f.startswith("--") for f in fw.knobs.values()), fw.name
        else:
            assert not any(k.startswith("-") for k in fw.knobs.values()), fw.name
