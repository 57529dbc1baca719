"""Calibration without heartbeats on real processes (issue 15 follow-up): dsguard reads the
attempt's own process tree (``/proc/<pid>/status``) and its memory cgroup from outside, for a
trainer that sends no heartbeats (the fake trainer without its heartbeat scenario, like an
unmodified run_clm). No DeepSpeed: one small Python process per attempt, a few seconds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsguard.core.estimate import ModelShape, Regime
from dsguard.core.fit import FitInputs
from dsguard.host.gpu import ReleaseResult
from dsguard.job.file import load_job
from dsguard.job.model import HOST_OOM_RUNGS
from dsguard.run.host import RealHost
from dsguard.run.loop import Supervisor
from dsguard.run.memlimit import create_memory_limit, remove_memory_limit
from tests.conftest import write_job

MiB = 2**20
SHAPE = ModelShape(
    hidden_size=256, num_layers=4, num_heads=8, intermediate_size=688, vocab_size=1000,
    num_kv_heads=8, max_position=1024, source="test",
)  # fmt: skip
#: micro 8 x 40 MiB touched at each step, steps 1 s apart: the tree lives ~4 s, so the loop's
#: 2 s samples see it.
ARGS = ["--alloc_mb_per_sample", "40", "--max_steps", "4", "--step_s", "1.0"]


def _run(tmp_path: Path, resources: dict[str, Any]) -> list[dict[str, Any]]:
    write_job(
        tmp_path, ARGS, resources=resources,
        train={"micro_batch_size": 8, "gradient_accumulation_steps": 1, "pin_memory": False},
    )  # fmt: skip
    facts = FitInputs(SHAPE, Regime("cpu", dtype_bytes=4), 4 << 30, rungs=HOST_OOM_RUNGS)
    sup = Supervisor(
        load_job(tmp_path / "job.yaml"),
        host=RealHost(
            gpu_release=lambda _p: ReleaseResult("unknown", (), 0.0, 1, "no NVML here"),
            gpu_busy=lambda _p: None,
        ),
        fit_facts=lambda _job: facts,
    )
    assert sup.run() == 0
    lines = (tmp_path / "runs" / "events.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_rlimit_as_calibrates_on_the_trees_vm_peak(tmp_path: Path) -> None:
    events = _run(tmp_path, {"host_memory_limit": "4GiB", "host_memory_via": "rlimit_as"})
    (cal,) = [e for e in events if e["event"] == "estimate_calibrated"]
    assert cal["measure"] == "vm_peak" and cal["source"] == "process_tree"
    # The trainer touched 320 MiB on top of the interpreter; RLIMIT_AS bounds the address space.
    assert 320 * MiB < cal["measured_bytes"] <= 4 << 30


def test_a_cgroup_calibrates_on_its_peak_charge(tmp_path: Path) -> None:
    if sys.platform != "linux":
        pytest.skip("memory cgroups are Linux")
    probe = create_memory_limit("probe", 0, 64 * MiB)
    if probe.how == "rlimit_as":
        pytest.skip(f"no memory cgroup can be created here: {probe.reason}")
    remove_memory_limit(probe)
    events = _run(tmp_path, {"host_memory_limit": "1GiB"})
    (cal,) = [e for e in events if e["event"] == "estimate_calibrated"]
    assert cal["measure"] == "cgroup_peak" and cal["source"] == "cgroup"
    assert 320 * MiB < cal["measured_bytes"] <= 1 << 30
