"""Issue 12, the loop's reaction: a harmless mention never ends an attempt, a raised OOM does.

Drives the real :class:`Supervisor` on a :class:`FakeHost` (the scenario machinery of
test_loop_scenarios.py): the FakeHost feeds the scripted lines through the real
StreamClassifier, so what the loop acts on is exactly what the classifier calls fatal.
"""

from __future__ import annotations

from pathlib import Path

from dsguard.testing import Script
from tests.test_loop_scenarios import OOM, Outcome, Scenario, run_scenario

#: The issue's false alarms, each a real shape (a tip, fairseq's caught OOM, an eval loop's
#: retry, an echo of the previous run, a data sample, a batch-size finder's probe).
MENTIONS = (
    "Tip: if you see 'CUDA out of memory', lower the batch size",
    "2021-03-02 10:14:19 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: "
    "CUDA out of memory. Tried to allocate 2.00 GiB",
    "[eval] caught torch.OutOfMemoryError: CUDA out of memory; retrying with batch 8",
    "previous run ended with: RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB",
    "{'text': 'RuntimeError: CUDA out of memory.', 'label': 0}",
    "Batch size 2048 failed, trying batch size 1024",
)


def _check_mentions_succeed(o: Outcome) -> None:
    assert o.code == 0
    assert not o.named("fatal_output_detected") and not o.named("failure_detected")
    (fin,) = o.named("attempt_finished")
    assert fin["ended_by"] == "exit" and fin["exit_code"] == 0
    assert o.terminal()["event"] == "run_succeeded" and o.terminal()["attempts"] == 1


def test_mentions_do_not_end_a_healthy_run(tmp_path: Path) -> None:
    lines = tuple((1.0 + i, text) for i, text in enumerate(MENTIONS))
    script = Script(lines=(*lines, (20.0, "done")), exit_at_s=21.0)
    sc = Scenario("mentions_then_success", [script], _check_mentions_succeed)
    sc.check(run_scenario(tmp_path, sc))


def _check_mention_then_raised(o: Outcome) -> None:
    (fatal,) = o.named("fatal_output_detected")[:1]
    assert fatal["kind"] == "cuda_oom" and fatal["line"] == OOM  # the raised line, not the tip
    assert o.named("failure_detected")[0]["kind"] == "cuda_oom"


def test_a_raised_oom_after_mentions_still_ends_the_attempt(tmp_path: Path) -> None:
    first = Script(lines=((1.0, MENTIONS[0]), (2.0, MENTIONS[1]), (5.0, OOM)), exit_at_s=None)
    ok = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5)
    sc = Scenario("mention_then_raised_oom", [first, ok], _check_mention_then_raised)
    sc.check(run_scenario(tmp_path, sc))
