"""End to end (issue 14): scripts that take no HF flags, healed by the real CLI.

* a plain DeepSpeed loop (real ``deepspeed.initialize`` on CPU) that reads its micro-batch,
  accumulation and sequence length from its own ``--config config.json``: dsguard changes
  them through a per-attempt copy of that file;
* a plain torch loop configured by ``key=value`` overrides over packed data: dsguard moves
  ``max_length`` as a logged new phase and reports the tokens per step it changed.

Both fail on a real RLIMIT_AS (``resources.host_memory_limit``, ``host_memory_via: rlimit_as``:
the budgets are address-space budgets) with torch's own allocator
error, never a simulated one.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import RunResult

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).parent / "scripts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trace(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "trace.jsonl").read_text().splitlines()]


def test_plain_deepspeed_loop_healed_through_its_own_config_file(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    pytest.importorskip("deepspeed")
    config = {"training": {"batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 64},
              "model": {"dim": 16}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    job = {
        "name": "dsloop",
        "launcher": "python",
        "python": sys.executable,
        "script": str(SCRIPTS / "ds_config_loop.py"),
        "args": ["--config", "config.json", "--out", "out", "--trace", "trace.jsonl",
                 "--kib_per_token", "4096", "--alloc_from_step", "2"],
        "train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 64},
        "knobs_file": {"path": "config.json", "arg": "--config", "keys": {
            "micro_batch_size": "training.batch_size",
            "gradient_accumulation_steps": "training.gradient_accumulation_steps",
            "max_length": "training.max_length"}},
        # One DeepSpeed process without a launcher: its rendezvous comes from the job here.
        "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MALLOC_ARENA_MAX": "2"},
        "resources": {"host_memory_limit": "2300MiB", "host_memory_via": "rlimit_as"},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 1, "min_max_length": 16},
        "log_dir": "runs",
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    res = run_dsguard("run", "job.yaml", "--quiet", timeout=180)
    assert res.code == 0, res.proc.stderr[-3000:]

    trace = _trace(tmp_path)
    starts = [r for r in trace if r["event"] == "start"]
    # The script saw dsguard's knobs through the copy, and DeepSpeed's engine ran them.
    assert [(s["micro"], s["accum"], s["ds_micro"], s["ds_accum"]) for s in starts] == [
        (8, 1, 8, 1), (4, 2, 4, 2)]  # fmt: skip
    assert starts[0]["config"] == str(tmp_path / "runs" / "attempt-1.config.json")
    assert starts[1]["config"] == str(tmp_path / "runs" / "attempt-2.config.json")
    # Attempt 1 saved global_step2 and failed at step 3; the script resumed itself from
    # `latest` (DeepSpeed's own layout, which dsguard's checkpoint selection does not read:
    # it reports a fresh start), then kept the global batch and the data order.
    assert starts[1]["resume_step"] == 2
    steps = {r["step"]: (r["first_sample"], r["samples"]) for r in trace if r["event"] == "step"}
    assert steps == {s: ((s - 1) * 8 % 64, 8) for s in range(1, 7)}
    assert (tmp_path / "out" / "latest").read_text().strip() == "global_step6"

    assert json.loads((tmp_path / "config.json").read_text()) == config  # never edited
    copy = json.loads((tmp_path / "runs" / "attempt-2.config.json").read_text())
    assert copy["training"] == {"batch_size": 4, "gradient_accumulation_steps": 2,
                                "max_length": 64} and copy["model"] == {"dim": 16}  # fmt: skip

    failures = res.named("failure_detected")
    assert [f["kind"] for f in failures] == ["host_oom"]
    assert "can't allocate memory" in " ".join(failures[0]["evidence"])
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["micro_batch"]
    assert applied[0]["global_batch_before"] == applied[0]["global_batch_after"] == 8
    assert applied[0]["tokens_per_step_before"] == applied[0]["tokens_per_step_after"] == 512
    # pin_memory (first in the host_oom ladder with a move to make) has no route: left out,
    # never logged as a change.
    routed = res.named("knobs_routed")[0]
    assert routed["routes"]["micro_batch_size"] == "config.json: training.batch_size"
    assert routed["left_out"]["pin_memory"] == ["pin_memory"]
    for started in res.named("attempt_started"):
        assert not any(a.startswith("--per_device") for a in started["argv"])


def test_dotlist_script_packed_max_length_is_a_new_phase(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    job = {
        "name": "dotlist",
        "launcher": "python",
        "python": sys.executable,
        "script": str(SCRIPTS / "dotlist_loop.py"),
        "args": ["training.batch_size=4", "data.max_len=64", "data.packing=true",
                 "--out", "ckpt", "--trace", "trace.jsonl", "--kib_per_token", "8192"],
        "train": {"micro_batch_size": 4, "gradient_accumulation_steps": 1, "max_length": 64},
        "knobs_dotlist": {"micro_batch_size": "training.batch_size",
                          "gradient_accumulation_steps": "training.accum",
                          "max_length": "data.max_len"},
        "checkpoints": {"dir": "ckpt", "output_flag": "--out", "resume_flag": None},
        "ladder": {"host_oom": ["max_length"]},
        "resources": {"host_memory_limit": "2000MiB", "host_memory_via": "rlimit_as"},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 1, "min_max_length": 16},
        "log_dir": "runs",
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    res = run_dsguard("run", "job.yaml", timeout=120)
    assert res.code == 0, res.proc.stderr[-3000:]

    starts = [r for r in _trace(tmp_path) if r["event"] == "start"]
    assert [(s["micro"], s["accum"], s["max_len"]) for s in starts] == [(4, 1, 64), (4, 1, 32)]
    # Packed: 64 chunks of 64 tokens became 128 chunks of 32: another dataset, so a new phase
    # in its own output dir, never a resume that pretends the data position is the same.
    assert [s["n_chunks"] for s in starts] == [64, 128]
    assert starts[1]["out"] != "ckpt" and starts[1]["out"].startswith(str(tmp_path / "ckpt"))
    applied = res.named("policy_applied")
    assert [(a["rung"], a["new_phase"]) for a in applied] == [("max_length", True)]
    assert applied[0]["global_batch_before"] == applied[0]["global_batch_after"] == 4
    assert (applied[0]["tokens_per_step_before"], applied[0]["tokens_per_step_after"]) == (
        256, 128)  # fmt: skip
    assert "regroups the dataset" in applied[0]["caveats"][0]
    assert res.named("phase_started")
    assert res.named("knobs_routed")[0]["packing"] is True
    done = res.named("run_succeeded")[0]
    assert (done["initial_tokens_per_step"], done["tokens_per_step"]) == (256, 128)
    # The console never says the global batch was kept while the tokens per step changed.
    policy_lines = [ln for ln in res.proc.stderr.splitlines() if "policy max_length" in ln]
    assert policy_lines and "kept" not in policy_lines[0]
    assert "tokens per step CHANGED 256 -> 128" in policy_lines[0]
    argv = res.named("attempt_started")[1]["argv"]
    assert "data.max_len=32" in argv and "training.batch_size=4" in argv
    assert "training.accum=1" in argv  # appended: the command did not have it


def test_plain_deepspeed_loop_healed_through_its_deepspeed_config(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """No flag and no config-file key for the micro-batch: the rendered DeepSpeed config
    (passed as ``--deepspeed_config``) is the route dsguard changes it by."""
    pytest.importorskip("deepspeed")
    (tmp_path / "config.json").write_text(json.dumps({"training": {"max_length": 64}}))
    ds = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 0}}  # fmt: skip
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    job = {
        "name": "dsconf",
        "launcher": "python",
        "python": sys.executable,
        "script": str(SCRIPTS / "ds_config_loop.py"),
        "args": ["--config", "config.json", "--out", "out", "--trace", "trace.jsonl",
                 "--kib_per_token", "4096", "--max_steps", "4"],
        "train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 64},
        "knobs_file": {"path": "config.json", "arg": "--config",
                       "keys": {"max_length": "training.max_length"}},
        "deepspeed": {"config": "ds.json", "flag": "--deepspeed_config"},
        "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MALLOC_ARENA_MAX": "2"},
        "resources": {"host_memory_limit": "2300MiB", "host_memory_via": "rlimit_as"},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 1, "min_max_length": 16},
        "log_dir": "runs",
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    res = run_dsguard("run", "job.yaml", "--quiet", timeout=180)
    assert res.code == 0, res.proc.stderr[-3000:]
    starts = [r for r in _trace(tmp_path) if r["event"] == "start"]
    assert [(s["micro"], s["accum"]) for s in starts] == [(8, 1), (4, 2)]
    assert starts[1]["ds_config"] == str(tmp_path / "runs" / "attempt-2.deepspeed.json")
    rendered = json.loads((tmp_path / "runs" / "attempt-2.deepspeed.json").read_text())
    assert rendered["train_micro_batch_size_per_gpu"] == 4
    assert rendered["gradient_accumulation_steps"] == 2
    routed = res.named("knobs_routed")[0]["routes"]
    assert routed["micro_batch_size"] == routed["gradient_accumulation_steps"] == (
        "the rendered DeepSpeed config")  # fmt: skip
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["micro_batch"]
    assert applied[0]["global_batch_before"] == applied[0]["global_batch_after"] == 8
