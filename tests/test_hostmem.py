"""Host-OOM evidence: cgroup counter, kernel log, resident memory near the limit."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dsguard.host.memory import (
    kernel_oom_killed_pids,
    memory_limit_bytes,
    oom_kill_count,
    tree_rss_bytes,
)
from tests.conftest import write_job
from tests.test_cgroup import _v2

KMSG = (
    b"6,1234,5678,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
    b"mems_allowed=0,global_oom,task_memcg=/user.slice,task=python,pid=4242,uid=1000\n"
    b"3,1235,5679,-;Out of memory: Killed process 4242 (python) total-vm:52428800kB, "
    b"anon-rss:41943040kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:90000kB\n"
    b"6,1236,5680,-;Memory cgroup out of memory: Killed process 777 (pt_data_worker)\n"
)


def test_kernel_log_records_name_the_killed_pids(tmp_path: Path) -> None:
    """Both kernel formats (global and memcg OOM) yield their pids."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(KMSG)
    assert kernel_oom_killed_pids(kmsg) == {4242, 777}


def test_unreadable_kernel_log_is_unknown(tmp_path: Path) -> None:
    """No access is None (unknown), never the empty set."""
    assert kernel_oom_killed_pids(tmp_path / "missing") is None


def test_cgroup_v2_counter_and_limit(tmp_path: Path) -> None:
    """The loop's readers (host.memory) see our cgroup's oom_kill and memory.max (v2)."""
    proc, root = _v2(
        tmp_path,
        {
            "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n",
            "memory.max": "8589934592\n",
        },
    )
    assert oom_kill_count(proc, root) == 2
    assert memory_limit_bytes(proc, root) == 8589934592


def test_unlimited_cgroup_falls_back_to_host_ram(tmp_path: Path) -> None:
    """memory.max "max" means no cgroup limit: the host's RAM bounds it."""
    proc, root = _v2(tmp_path, {"memory.max": "max\n"})
    limit = memory_limit_bytes(proc, root)
    assert limit is not None and limit > 1 << 30


def test_tree_rss_counts_this_process() -> None:
    """A live process has resident memory; a dead pid is None."""
    rss = tree_rss_bytes(os.getpid())
    assert rss is not None and rss > 10 << 20
    assert tree_rss_bytes(2**22 + 12345) is None


def test_sigkill_with_rss_near_the_limit_is_host_oom(tmp_path: Path) -> None:
    """A trainer that really holds ~300 MiB and is then SIGKILLed, under a (injected) 256 MiB
    limit: host_oom with the RSS evidence, host ladder (micro_batch) applied, run completes."""
    from dsguard.host.gpu import ReleaseResult
    from dsguard.job.file import load_job
    from dsguard.run.host import RealHost
    from dsguard.run.loop import Supervisor

    write_job(
        tmp_path,
        ["--scenario", "sigkill", "--alloc_mb_per_sample", "40", "--fail_attempts", "1",
         "--fail_at_step", "3", "--step_s", "1.2"],
        train={"micro_batch_size": 8, "gradient_accumulation_steps": 1, "pin_memory": False},
    )  # fmt: skip
    sup = Supervisor(
        load_job(tmp_path / "job.yaml"),
        host=RealHost(
            memory_limit=lambda: 256 << 20,
            gpu_release=lambda _p: ReleaseResult("unknown", (), 0.0, 1, "no NVML here"),
            gpu_busy=lambda _p: None,
        ),
    )
    assert sup.run() == 0
    events = [json.loads(x) for x in (tmp_path / "runs" / "events.jsonl").read_text().splitlines()]
    failure = next(e for e in events if e["event"] == "failure_detected")
    assert failure["kind"] == "host_oom"
    assert any("resident memory" in e for e in failure["host_oom_evidence"])
    applied = next(e for e in events if e["event"] == "policy_applied")
    assert applied["rung"] == "micro_batch"
