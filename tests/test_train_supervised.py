"""dsguard supervising the real reference trainer (HF Trainer + DeepSpeed ZeRO-2 on CPU).

The proofs the ladder stands on, end to end through the supervisor: a run that fails and is
healed sees the same samples at every optimizer step as a clean run and the same losses
within fp32 rounding (micro-batch move; ZeRO-2 -> ZeRO-3 via the exact transplant), and a
LoRA move is a logged new phase that starts from the consolidated weights and completes.
Failures are injected with the trainer's documented test fault (a real
``torch.OutOfMemoryError`` raised at the start of a step, after the previous checkpoint).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from tests.conftest import RunResult, dsguard_cmd
from tests.test_train_reference import (
    LOSS_RTOL,
    RUN_TIMEOUT_S,
    ZERO2_CPU,
    argv,
    run_trainer,
    trainer_env,
)

pytestmark = [pytest.mark.train, pytest.mark.e2e]

#: Flags dsguard owns are left out of the job's args; it passes them itself.
OWNED = {
    "per_device_train_batch_size": None,
    "output_dir": None,
    "model_max_length": None,
    "dataloader_pin_memory": None,
}


def _steps(path: Path) -> dict[int, dict[str, Any]]:
    """global_step -> the last record for it (a resumed attempt re-runs nothing before)."""
    out: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out[int(rec["global_step"])] = rec
    return out


def _clean(tmp: Path, **extra: object) -> dict[int, dict[str, Any]]:
    tmp.mkdir()
    trace = tmp / "trace.jsonl"
    proc = run_trainer(
        tmp, *argv(deepspeed=str(ZERO2_CPU), **extra), DSGUARD_SAMPLE_TRACE=str(trace)
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    return _steps(trace)


def _supervise(work: Path, fault: str, **job: Any) -> RunResult:
    work.mkdir()
    spec: dict[str, Any] = {
        "name": "ref",
        "launcher": "python",
        "module": "dsguard.train",
        "args": [*argv(**OWNED), "--output_dir", "out"],
        "env": {
            "DSGUARD_FAULT": fault,
            "DSGUARD_SAMPLE_TRACE": str(work / "trace.jsonl"),
            "HF_HUB_OFFLINE": "1",
        },
        "train": {
            "micro_batch_size": 8,
            "gradient_accumulation_steps": 1,
            "max_length": 128,
            "pin_memory": False,
        },
        "deepspeed": {"config": str(ZERO2_CPU)},
        "checkpoints": {"dir": "out"},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 2},
        "log_dir": "runs",
    }
    spec.update(job)
    (work / "job.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = trainer_env()
    proc = subprocess.run(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=work, env=env, capture_output=True,
        text=True, timeout=3 * RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    return RunResult(proc, work)


def _assert_same_training(
    clean: dict[int, dict[str, Any]], healed: dict[int, dict[str, Any]]
) -> None:
    assert sorted(healed) == sorted(clean) == list(range(1, 9))
    for step in clean:
        assert healed[step]["sample_ids"] == clean[step]["sample_ids"], step
        assert healed[step]["loss"] == pytest.approx(clean[step]["loss"], rel=LOSS_RTOL), step


def test_supervised_micro_batch_move_is_exact(tmp_path: Path) -> None:
    """OOM at micro 8 after checkpoint-3: dsguard heals to 4x2 and the run matches a clean
    8x1 run sample for sample, loss for loss."""
    clean = _clean(tmp_path / "clean")
    res = _supervise(tmp_path / "sup", "oom:micro_above=4:at_step=4")
    assert res.code == 0, res.proc.stderr[-3000:]
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["micro_batch"]
    assert applied[0]["changes"] == {
        "micro_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]
    }  # fmt: skip
    assert applied[0]["global_batch_before"] == applied[0]["global_batch_after"] == 8
    assert res.named("attempt_started")[1]["resume_from"].endswith("checkpoint-3")
    healed = _steps(tmp_path / "sup" / "trace.jsonl")
    assert (healed[4]["micro"], healed[4]["accum"]) == (4, 2)
    _assert_same_training(clean, healed)
    caps = res.named("attempt_finished")[0]["capabilities"]
    assert {"heartbeat", "save_and_stop", "zero_transplant", "init_from"} <= set(caps)


def test_supervised_zero2_to_zero3_transplant_is_exact(tmp_path: Path) -> None:
    """The zero3 rung with a trainer that transplants: not a new phase, and the ZeRO-3
    continuation matches a clean ZeRO-2 run."""
    clean = _clean(tmp_path / "clean")
    res = _supervise(tmp_path / "sup", "oom:at_step=4:attempt=1", ladder={"oom": ["zero3"]})
    assert res.code == 0, res.proc.stderr[-3000:]
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["zero3"]
    assert applied[0]["new_phase"] is False
    assert applied[0]["changes"] == {"zero_stage": [2, 3]}
    second = res.named("attempt_started")[1]
    assert second["resume_from"].endswith("checkpoint-3")
    rendered = json.loads(Path(second["deepspeed_config"]).read_text())
    assert rendered["zero_optimization"]["stage"] == 3
    _assert_same_training(clean, _steps(tmp_path / "sup" / "trace.jsonl"))


def test_supervised_lora_move_is_a_new_phase_from_consolidated_weights(tmp_path: Path) -> None:
    """The lora rung: new_phase, phase_started with init_from = checkpoint-3, its own output
    dir, LoRA really on, and the run completes; phase 1's checkpoints are kept."""
    res = _supervise(tmp_path / "sup", "oom:at_step=4:attempt=1", ladder={"oom": ["lora"]})
    assert res.code == 0, res.proc.stderr[-3000:]
    applied = res.named("policy_applied")
    assert applied[0]["rung"] == "lora" and applied[0]["new_phase"] is True
    phase = res.named("phase_started")[0]
    assert phase["phase"] == 2 and phase["init_from"].endswith("checkpoint-3")
    second = res.named("attempt_started")[1]
    assert "--lora_enable" in second["argv"]
    assert second["argv"][second["argv"].index("--lora_enable") + 1] == "true"
    assert second["output_dir"].endswith("dsguard-phase-2")
    out = tmp_path / "sup" / "out"
    assert (out / "checkpoint-3" / "trainer_state.json").exists()
    assert list((out / "dsguard-phase-2").glob("checkpoint-*"))
    assert res.named("run_succeeded")
    assert sys.executable  # the trainer ran in this interpreter's environment


def test_supervised_offload_at_same_stage_is_exact(tmp_path: Path) -> None:
    """offload_optimizer at ZeRO-2 is a plain resume (zero_force_ds_cpu_optimizer: false with
    the HF torch optimizer) and matches a clean ZeRO-2 run."""
    clean = _clean(tmp_path / "clean")
    res = _supervise(
        tmp_path / "sup", "oom:at_step=4:attempt=1", ladder={"oom": ["offload_optimizer"]}
    )
    assert res.code == 0, res.proc.stderr[-3000:]
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["offload_optimizer"]
    assert applied[0]["new_phase"] is False
    rendered = json.loads(Path(res.named("attempt_started")[1]["deepspeed_config"]).read_text())
    assert rendered["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert rendered["zero_force_ds_cpu_optimizer"] is False
    _assert_same_training(clean, _steps(tmp_path / "sup" / "trace.jsonl"))
