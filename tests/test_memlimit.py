"""``resources.host_memory_limit`` as a memory cgroup per attempt (run/memlimit.py).

The layout tests build cgroup trees in a temp dir; the end-to-end test makes a real child
cgroup on this machine (root, cgroup v1 here), runs a real trainer that allocates over the
limit, and checks that the kernel's OOM killer SIGKILLed it, that cgroup's ``oom_kill``
counter confirmed it, and the host-OOM ladder healed it. Skipped with the reason where no
memory cgroup can be created.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsguard.run.memlimit import create_memory_limit, remove_memory_limit
from tests.conftest import write_job

MiB = 1 << 20


def _v1_tree(tmp_path: Path) -> tuple[Path, Path]:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/box\n0::/\n")
    mine = tmp_path / "memory" / "box"
    mine.mkdir(parents=True)
    (mine / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    return proc, mine


def test_v1_child_gets_the_limit_and_is_removed(tmp_path: Path) -> None:
    proc, mine = _v1_tree(tmp_path)
    ml = create_memory_limit("r1", 3, 256 * MiB, proc_cgroup=proc, root=tmp_path)
    assert ml.how == "cgroup_v1" and ml.cgroup is not None
    assert ml.cgroup.dir == mine / "dsguard-r1-attempt-3"
    assert (ml.cgroup.dir / "memory.limit_in_bytes").read_text() == str(256 * MiB)
    # A temp dir is not a cgroupfs: the files written there must go before rmdir works.
    for f in ml.cgroup.dir.iterdir():
        f.unlink()
    assert remove_memory_limit(ml) and not ml.cgroup.dir.exists()


def test_v2_delegated_subtree(tmp_path: Path) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/user.slice/job\n")
    mine = tmp_path / "user.slice" / "job"
    mine.mkdir(parents=True)
    (mine / "cgroup.controllers").write_text("cpu memory pids\n")
    (mine / "cgroup.subtree_control").write_text("memory\n")
    ml = create_memory_limit("r1", 1, 512 * MiB, proc_cgroup=proc, root=tmp_path)
    assert ml.how == "cgroup_v2" and ml.cgroup is not None
    assert (ml.cgroup.dir / "memory.max").read_text() == str(512 * MiB)


def test_no_cgroup_falls_back_to_rlimit_as_with_the_reason(tmp_path: Path) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/gone\n")
    ml = create_memory_limit("r1", 1, 256 * MiB, proc_cgroup=proc, root=tmp_path)
    assert ml.how == "rlimit_as" and ml.cgroup is None and ml.reason
    assert remove_memory_limit(ml)


def _real_cgroup_or_skip() -> None:
    probe = create_memory_limit("probe", 0, 64 * MiB)
    if probe.how == "rlimit_as":
        pytest.skip(f"no memory cgroup can be created here: {probe.reason}")
    remove_memory_limit(probe)


def test_real_kernel_oom_kill_confirmed_by_the_cgroup_counter_and_healed(
    tmp_path: Path,
) -> None:
    """micro 8 x 40 MiB of activations under a 256 MiB cgroup: the kernel OOM-kills the
    trainer (exit -9), the attempt cgroup's oom_kill counter reads 1, the kill is confirmed,
    micro 8 -> 4 (global batch kept) fits, and the run succeeds."""
    if sys.platform != "linux":
        pytest.skip("memory cgroups are Linux")
    _real_cgroup_or_skip()
    from dsguard.host.gpu import ReleaseResult
    from dsguard.job.file import load_job
    from dsguard.run.host import RealHost
    from dsguard.run.loop import Supervisor

    write_job(
        tmp_path,
        ["--alloc_mb_per_sample", "40", "--max_steps", "4", "--step_s", "0.05"],
        train={"micro_batch_size": 8, "gradient_accumulation_steps": 1, "pin_memory": False},
        ladder={"host_oom": ["micro_batch"]},
        resources={"host_memory_limit": "256MiB"},
    )  # fmt: skip
    sup = Supervisor(
        load_job(tmp_path / "job.yaml"),
        host=RealHost(
            gpu_release=lambda _p: ReleaseResult("unknown", (), 0.0, 1, "no NVML here"),
            gpu_busy=lambda _p: None,
        ),
    )
    assert sup.run() == 0
    events = [json.loads(x) for x in (tmp_path / "runs" / "events.jsonl").read_text().splitlines()]

    def named(name: str) -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == name]

    limits = named("memory_limit_applied")
    assert [x["how"] for x in limits] == ["cgroup_v1", "cgroup_v1"] or [
        x["how"] for x in limits
    ] == ["cgroup_v2", "cgroup_v2"]
    assert limits[0]["limit_bytes"] == 256 * MiB
    first = named("attempt_finished")[0]
    assert first["exit_code"] == -9 and first["signal"] == 9
    (judged,) = named("sigkill_judged")
    assert judged["outcome"] == "confirmed"
    assert "cgroup oom_kill counter +1" in judged["reasons"]
    failure = named("failure_detected")[0]
    assert failure["kind"] == "host_oom" and failure["host_oom_confirmed"] is True
    applied = named("policy_applied")[0]
    assert applied["rung"] == "micro_batch" and applied["changes"]["micro_batch_size"] == [8, 4]
    assert named("run_succeeded")
    for x in limits:  # each attempt's cgroup is gone again
        assert not Path(x["cgroup"]).exists()


def test_shim_falls_back_to_rlimit_as_when_it_cannot_join(tmp_path: Path) -> None:
    """A cgroup that vanished (or is not writable) must not leave the attempt unlimited."""
    import subprocess

    limit = 1 << 34
    done = subprocess.run(
        [sys.executable, "-m", "dsguard.run.exec_shim", "--cgroup", str(tmp_path / "gone"),
         "--as-bytes", str(limit), "--", sys.executable, "-c",
         "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert int(done.stdout) == limit
    assert "falling back to RLIMIT_AS" in done.stderr


def test_a_cgroup_left_by_a_dead_supervisor_is_removed_by_name() -> None:
    _real_cgroup_or_skip()
    from dsguard.run.memlimit import remove_left_cgroups

    ml = create_memory_limit("deadrun", 7, 64 * MiB)
    assert ml.cgroup is not None and ml.cgroup.dir.is_dir()
    assert remove_left_cgroups("deadrun", 7) == [ml.cgroup.dir]
    assert not ml.cgroup.dir.exists()
    assert remove_left_cgroups("deadrun", 7) == []
