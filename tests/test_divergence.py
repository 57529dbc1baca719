"""A loss or grad norm that turns NaN/inf while training: stopped, never reported as succeeded,
then given up naming the step or rolled back to a checkpoint before it with batches skipped.

Pure decisions (core/divergence), the job-file option, and the loop on a FakeHost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.core.classify import FailureKind, classify_text, nonfinite_text
from dsguard.core.divergence import (
    Divergence,
    Rollback,
    StopRun,
    decide_divergence,
    skip_window,
)
from dsguard.errors import JobFileError
from dsguard.job.file import load_job
from dsguard.job.model import DivergencePolicy
from dsguard.protocol import SKIP_BATCHES_ENV, parse_skip_batches, skipped
from dsguard.testing import Beat, Script
from tests.conftest import write_job
from tests.test_loop_scenarios import Outcome, Scenario, ok_attempt, run_scenario

ROLLBACK = DivergencePolicy(action="rollback", skip_batches=4, max_rollbacks=1)


# -- pure -------------------------------------------------------------------------------------


def test_give_up_names_the_step() -> None:
    d = decide_divergence(Divergence(5, "loss", "heartbeat"), DivergencePolicy(), 0)
    assert isinstance(d, StopRun) and "loss turned NaN/inf at step 5" in d.reason


def test_rollback_before_the_onset_and_its_limits() -> None:
    d = decide_divergence(Divergence(5, "grad_norm", "heartbeat"), ROLLBACK, 0)
    assert isinstance(d, Rollback) and d.before_step == 5
    again = decide_divergence(Divergence(9, "loss", "heartbeat"), ROLLBACK, 1)
    assert isinstance(again, StopRun) and "max_rollbacks 1" in again.reason
    unknown = decide_divergence(Divergence(None, "loss", "output"), ROLLBACK, 0)
    assert isinstance(unknown, StopRun) and "unknown step" in unknown.reason


@pytest.mark.parametrize(
    ("onset", "resume", "n", "window"),
    [
        (5, 4, 4, (5, 8)),  # never before the resumed step
        (100, 50, 20, (90, 109)),  # centred on the onset
        (100, 10, 2, (99, 100)),
        (7, None, 0, None),  # resume only
        (30, 0, 1, (30, 30)),  # always covers the onset
    ],
)
def test_skip_window(
    onset: int, resume: int | None, n: int, window: tuple[int, int] | None
) -> None:
    assert skip_window(onset, resume, n) == window


def test_nonfinite_lines_and_the_skip_env_format() -> None:
    assert nonfinite_text("Function 'MulBackward0' returned nan values in its 0th output.")
    assert nonfinite_text("FloatingPointError: Minimum loss scale reached (0.0001). Loss is inf")
    assert not nonfinite_text("Current loss scale already at minimum - cannot decrease scale")
    assert parse_skip_batches("5:8, 20:21,bad,9:3") == ((5, 8), (20, 21))
    assert skipped(6, ((5, 8),)) and not skipped(9, ((5, 8),))


def test_a_saved_log_that_exits_0_after_diverging_is_not_a_success() -> None:
    """What the live loop stops on (a NaN repeated at the logging steps) also decides a saved
    or finished log: ``dsguard explain`` on a run that trained to the end on NaN weights and
    exited 0 says loss_divergence, and one mention of NaN at exit 0 stays a success."""
    steps = "".join(
        f"{{'loss': {v}, 'grad_norm': {g}, 'learning_rate': 1e-05, 'epoch': 0.{i}}}\n"
        for i, (v, g) in enumerate([("2.31", "1.9"), ("nan", "nan"), ("nan", "nan")])
    )
    failure = classify_text("***** Running training *****\n" + steps, 0)
    assert failure is not None and failure.kind is FailureKind.LOSS_DIVERGENCE
    assert failure.exit.raw == 0 and "nan" in failure.evidence[0]
    tip = "tip: if you see 'loss: nan', lower the learning rate\n"
    assert classify_text("step 1 loss 2.3\n" + tip + "step 2 loss 2.1\n", 0) is None


# -- the job file -------------------------------------------------------------------------------


def test_rollback_needs_checkpoints_and_bad_values_point_at_the_line(tmp_path: Path) -> None:
    path = write_job(tmp_path, [], checkpoints=None, divergence={"action": "rollback"})
    with pytest.raises(JobFileError) as info:
        load_job(path)
    (p,) = [p for p in info.value.problems if p.field == "divergence.action"]
    assert p.line is not None and "needs a checkpoints: section" in p.message
    path = write_job(tmp_path, [], divergence={"action": "retry", "skip_batches": -1})
    with pytest.raises(JobFileError) as info:
        load_job(path)
    fields = {p.field for p in info.value.problems}
    assert {"divergence.action", "divergence.skip_batches"} <= fields
    text = yaml.safe_load(path.read_text())
    assert text["divergence"]["action"] == "retry"


def test_default_is_give_up(tmp_path: Path) -> None:
    assert load_job(write_job(tmp_path, [])).divergence == DivergencePolicy()


# -- the loop ---------------------------------------------------------------------------------


def diverging(**kw: Any) -> Script:
    """Healthy to step 4, NaN from step 5 on (the HF callback's heartbeat says so), and it
    would train on for an hour if nobody stopped it."""
    beats = (
        Beat(1.0, 2), Beat(2.0, 4), Beat(3.0, 5, nonfinite="loss", nonfinite_step=5),
        Beat(4.0, 6, nonfinite="loss", nonfinite_step=5),
    )  # fmt: skip
    return Script(heartbeats=beats, exit_at_s=3600.0, **kw)


def check_gave_up(o: Outcome) -> None:
    assert o.code == 1
    (det,) = o.named("divergence_detected")
    assert det["step"] == 5 and det["ended_by"] == "diverged" and det["source"] == "heartbeat"
    done = o.terminal()
    assert done["event"] == "run_gave_up" and done["kind"] == "loss_divergence"
    assert "step 5" in done["reason"] and done["duration_s"] < 60  # stopped, not run for an hour


def check_exit_0_is_not_success(o: Outcome) -> None:
    assert o.code == 1 and not o.named("run_succeeded")
    (det,) = o.named("divergence_detected")
    assert det["ended_by"] == "exit" and det["exit_code"] == 0


def check_rollback(o: Outcome) -> None:
    assert o.code == 0
    (rb,) = o.named("divergence_rolled_back")
    assert rb["diverged_at_step"] == 5 and rb["resume_step"] == 4
    assert rb["set_aside_steps"] == [6] and rb["skip_steps"] == [5, 8]
    assert [p.name for p in o.host.quarantined] == ["checkpoint-6"]
    second = o.named("attempt_started")[1]
    assert second["resume_from"].endswith("checkpoint-4")
    assert SKIP_BATCHES_ENV not in o.host.commands[0].env
    assert o.host.commands[1].env[SKIP_BATCHES_ENV] == "5:8"


def check_diverged_again(o: Outcome) -> None:
    assert o.code == 1 and len(o.named("divergence_detected")) == 2
    assert "after 1 rollback(s)" in o.terminal()["reason"]


def check_output_line(o: Outcome) -> None:
    assert o.code == 1
    (det,) = o.named("divergence_detected")
    assert det["source"] == "output" and det["step"] == 4


def check_one_mention(o: Outcome) -> None:
    assert o.code == 0 and not o.named("divergence_detected") and o.named("run_succeeded")


CKPT = {"checkpoints": {"dir": "out", "resume_flag": "--resume_from_checkpoint"}}
ANOMALY = "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."
SCENARIOS = [
    Scenario("give_up_names_the_step", [diverging()], check_gave_up),
    Scenario("exit_0_after_nan_is_not_success",
             [Script(heartbeats=(Beat(1.4, 3, nonfinite="grad_norm", nonfinite_step=3),),
                     exit_at_s=1.45)], check_exit_0_is_not_success),
    Scenario("rollback_resumes_before_the_onset_and_skips_batches",
             [diverging(checkpoints=((1.5, 2), (2.5, 4), (2.9, 6))), ok_attempt()],
             check_rollback,
             job={**CKPT, "divergence": {"action": "rollback", "skip_batches": 4}}),
    Scenario("diverged_again_after_max_rollbacks", [diverging(), diverging()],
             check_diverged_again,
             job={**CKPT, "divergence": {"action": "rollback", "max_rollbacks": 1}}),
    Scenario("output_line_divergence",
             [Script(heartbeats=(Beat(1.0, 4),), lines=((2.0, ANOMALY), (2.5, ANOMALY)),
                     exit_at_s=3600.0)],
             check_output_line),
    Scenario("one_mention_is_not_a_divergence",
             [Script(lines=((1.0, ANOMALY), (2.0, "step 2")), exit_at_s=3.0)],
             check_one_mention),
]  # fmt: skip


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_loop(tmp_path: Path, sc: Scenario) -> None:
    sc.check(run_scenario(tmp_path, sc))
