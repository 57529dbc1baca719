"""``fit_probe: in_run`` with the real reference trainer (HF Trainer + DeepSpeed ZeRO-2 on
CPU): dsguard measures the job's config, ends the attempt itself with a save-and-stop,
relaunches at the neighbour resuming from the checkpoint it just saved, measures it, keeps
the faster one, and the training is still one pass over the data: every optimizer step
trained once, each on the global batch, every sample of the epoch seen once. (That a resume
across a micro-batch move matches a clean run sample for sample and loss for loss is
``tests/test_train_supervised.py::test_supervised_micro_batch_move_is_exact``; a clean run
here would add a fourth trainer start-up to a test that already has three.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from tests.test_train_reference import argv
from tests.test_train_supervised import OWNED, _supervise

pytestmark = [pytest.mark.train, pytest.mark.e2e]

#: The tiny model trains a step in ~30-90 ms here and dsguard reads the heartbeats once a
#: second. Here the first config ran to step ~80 before its switch and the neighbour to
#: ~140 before the decision; 480 steps leave that room twice over, so a machine that
#: trains twice as fast still decides before the run ends (at 240 steps one CI run ended
#: with no ``fit_probe_decided``). A checkpoint every 10 steps.
STEPS = 480


def test_the_in_run_probe_switches_for_real_and_keeps_the_training_exact(
    tmp_path: Path,
) -> None:
    extra = {"max_steps": STEPS, "generate_data": 8 * STEPS, "save_steps": 10}
    res = _supervise(
        tmp_path / "sup", "", fit=False, fit_probe="in_run", fit_probe_steps=2,
        args=[*argv(**OWNED, **extra), "--output_dir", "out"],
        # The walk stops at micro 4: one neighbour, so at most two switches (8x1 <-> 4x2).
        limits={"backoff_s": [0, 0], "fatal_grace_s": 2, "min_micro_batch_size": 4},
    )  # fmt: skip
    assert res.code == 0, res.proc.stderr[-3000:]
    switched = res.named("fit_probe_switched")
    assert switched and switched[0]["reason"] == "probe"
    assert switched[0]["from_knobs"]["micro_batch_size"] == 8
    assert switched[0]["to_knobs"]["micro_batch_size"] == 4  # 8x1 has no larger neighbour
    # The trainer saved the step it reached when asked: the neighbour resumes there.
    assert res.named("stop_requested")
    assert switched[0]["steps_redone"] == 0
    started = res.named("attempt_started")
    assert started[1]["resume_from"].endswith(f"checkpoint-{switched[0]['resume_step']}")
    (decided,) = res.named("fit_probe_decided")
    assert decided["probe_samples_per_s"] > 0 and decided["baseline_samples_per_s"] > 0
    assert len(switched) == (1 if decided["kept_knobs"]["micro_batch_size"] == 4 else 2)
    (cost,) = res.named("fit_probe_cost")
    assert cost["switches"] == len(switched) and cost["restart_s"] > 0
    assert not res.named("failure_detected") and not res.named("policy_applied")
    trace = tmp_path / "sup" / "trace.jsonl"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["global_step"] for r in records] == list(range(1, STEPS + 1))  # none twice
    assert {(r["micro"], r["accum"]) for r in records} >= {(8, 1), (4, 2)}
    assert all(len(r["sample_ids"]) == 8 for r in records)  # the global batch, every step
    seen = sorted(i for r in records for i in r["sample_ids"])
    assert seen == list(range(8 * STEPS))  # one epoch: each sample once, none skipped
