"""A rung that cannot change anything for this job is skipped (and said), not spent on an
attempt: pure decide() cases, then the loop's ``rungs_skipped`` event on a FakeHost."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsguard.core.classify import FailureKind
from dsguard.core.envfacts import EnvFacts
from dsguard.core.ladder import Relaunch, decide
from dsguard.core.rungs import RUNGS, inert_reason
from dsguard.job.knobs import Knobs
from dsguard.job.model import ALL_RUNGS
from dsguard.testing import Script
from tests.test_loop_scenarios import Outcome, Scenario, ok_attempt, run_scenario
from tests.test_policies import CTX, cfg


def _host_oom(knobs: Knobs, cpu_only: bool = False) -> Relaunch:
    ctx = dataclasses.replace(CTX, cpu_only=cpu_only)
    d = decide(FailureKind.HOST_OOM, knobs=knobs, positions={}, history=(), cfg=cfg(ctx=ctx))
    assert isinstance(d, Relaunch)
    return d


def test_workers_already_0_and_pinning_off_are_skipped_with_the_reason() -> None:
    d = _host_oom(Knobs(micro_batch_size=8, dataloader_workers=0, pin_memory=False))
    assert d.rung == "micro_batch"
    assert d.skipped == (
        ("dataloader_workers", "dataloader_workers is already 0"),
        ("pin_memory", "pin_memory is already false"),
    )


def test_pin_memory_on_a_cpu_only_run_is_skipped() -> None:
    knobs = Knobs(micro_batch_size=8, dataloader_workers=0, pin_memory=True)
    assert _host_oom(knobs).rung == "pin_memory"  # a GPU run: pinning does hold host RAM
    d = _host_oom(knobs, cpu_only=True)
    assert d.rung == "micro_batch"
    assert ("pin_memory", "a CPU-only run pins no memory") in d.skipped


def test_a_rung_with_something_to_give_skips_nothing() -> None:
    d = _host_oom(Knobs(micro_batch_size=8, dataloader_workers=4, pin_memory=True))
    assert d.rung == "dataloader_workers" and d.skipped == ()


@pytest.mark.parametrize("name", ALL_RUNGS)
def test_every_rung_has_a_reason_when_inert(name: str) -> None:
    k = Knobs(micro_batch_size=1, gradient_checkpointing=True, dataloader_workers=0,
              pin_memory=False, lora=True)  # fmt: skip
    ctx = dataclasses.replace(CTX, has_deepspeed=False)
    if RUNGS[name](k, ctx) is None:
        assert inert_reason(name, k, ctx)


def check_skipped_event(o: Outcome) -> None:
    assert o.code == 0
    (skipped,) = o.named("rungs_skipped")
    assert [s["rung"] for s in skipped["skipped"]] == ["dataloader_workers", "pin_memory"]
    assert o.named("policy_applied")[0]["rung"] == "micro_batch"
    assert len(o.named("attempt_started")) == 2  # no attempt spent on the inert rungs


def test_loop_logs_the_skipped_rungs(tmp_path: Path) -> None:
    sc = Scenario(
        "skip", [Script(exit_code=-9, exit_at_s=3.0, oom_kills=1), ok_attempt()],
        check_skipped_event,
        job={"train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1,
                       "dataloader_workers": 0, "pin_memory": False}},
    )  # fmt: skip
    sc.check(run_scenario(tmp_path, sc))


def check_cpu_only_skip(o: Outcome) -> None:
    assert o.code == 0
    (skipped,) = o.named("rungs_skipped")
    assert {"rung": "pin_memory", "reason": "a CPU-only run pins no memory"} in skipped["skipped"]
    assert o.named("policy_applied")[0]["rung"] == "micro_batch"


def test_loop_skips_pin_memory_on_a_cpu_only_torch(tmp_path: Path) -> None:
    sc = Scenario(
        "cpu", [Script(exit_code=-9, exit_at_s=3.0, oom_kills=1), ok_attempt()],
        check_cpu_only_skip,
        job={"train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1,
                       "dataloader_workers": 0, "pin_memory": True}},
        host={"torch_facts": EnvFacts(python="python", torch_version="2.13.0+cpu")},
    )  # fmt: skip
    sc.check(run_scenario(tmp_path, sc))
