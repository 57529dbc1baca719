"""A real diverged run healed by a rollback: the reference trainer (HF Trainer on CPU) whose
loss turns NaN at step 5 trains on (HF filters the NaN loss from its log, the grad norm is
NaN); dsguard stops it from the callback's heartbeat, sets the checkpoints saved after the
onset aside, resumes from checkpoint-3 with the batches of steps 4-5 skipped, and the run
ends with finite losses."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.conftest import RunResult, dsguard_cmd
from tests.test_train_reference import RUN_TIMEOUT_S, argv, trainer_env
from tests.test_train_supervised import OWNED

pytestmark = [pytest.mark.train, pytest.mark.e2e]


def test_nan_at_step_5_is_rolled_back_to_checkpoint_3(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    spec = {
        "name": "diverge",
        "launcher": "python",
        "module": "dsguard.train",
        "args": [*argv(**OWNED), "--output_dir", "out"],
        "env": {
            "DSGUARD_FAULT": "nan:at_step=5:attempt=1",
            "DSGUARD_SAMPLE_TRACE": str(trace),
            "HF_HUB_OFFLINE": "1",
        },
        "train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 128,
                  "pin_memory": False},
        "checkpoints": {"dir": "out"},
        "divergence": {"action": "rollback", "skip_batches": 2},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 2},
        "log_dir": "runs",
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path, env=trainer_env(),
        capture_output=True, text=True, timeout=3 * RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    res = RunResult(proc, tmp_path)
    assert res.code == 0, proc.stderr[-3000:]
    (det,) = res.named("divergence_detected")
    assert det["step"] == 5 and det["source"] == "heartbeat" and det["what"] == "grad_norm"
    (rb,) = res.named("divergence_rolled_back")
    assert rb["resume_step"] == 3 and rb["skip_steps"] == [4, 5] and rb["skip_honoured"]
    assert all(step >= 5 for step in rb["set_aside_steps"])
    second = res.named("attempt_started")[1]
    assert second["resume_from"].endswith("checkpoint-3")
    log2 = (tmp_path / "runs" / "attempt-2.log").read_text()
    assert "skipping the batches of step 4" in log2 and "skipping the batches of step 5" in log2
    steps: dict[int, float] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        steps[int(rec["global_step"])] = float(rec["loss"])  # the last attempt's record wins
    assert all(math.isfinite(steps[s]) and steps[s] > 0 for s in (6, 7, 8)), steps
    assert res.named("run_succeeded")
