"""The one cgroup parser: v1 and v2 layouts, limit, oom_kill counter, usage."""

from __future__ import annotations

from pathlib import Path

from dsguard.host.cgroup import (
    MemoryCgroup,
    memory_cgroups,
    memory_limit,
    memory_usage,
    oom_kill_count,
)


def _v2(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "sys"
    group = root / "system.slice" / "dsguard@job.service"
    group.mkdir(parents=True)
    for name, text in files.items():
        (group / name).write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/dsguard@job.service\n")
    return proc, root


def _v1(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "sys"
    group = root / "memory" / "user" / "job"
    group.mkdir(parents=True)
    for name, text in files.items():
        (group / name).write_text(text)
    proc = tmp_path / "cgroup"
    # v1 lists one line per hierarchy; only the one with the memory controller counts.
    proc.write_text("12:cpu,cpuacct:/user/job\n4:memory:/user/job\n1:name=systemd:/user/job\n")
    return proc, root


def test_v2_limit_counter_usage(tmp_path: Path) -> None:
    proc, root = _v2(
        tmp_path,
        {
            "memory.max": "8589934592\n",
            "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n",
            "memory.current": "123456\n",
        },
    )
    groups = memory_cgroups(proc, root)
    assert groups == [MemoryCgroup(2, root / "system.slice" / "dsguard@job.service")]
    assert memory_limit(proc, root) == 8589934592
    assert oom_kill_count(proc, root) == 2
    assert memory_usage(proc, root) == 123456


def test_v1_limit_counter_usage(tmp_path: Path) -> None:
    proc, root = _v1(
        tmp_path,
        {
            "memory.limit_in_bytes": "4294967296\n",
            "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n",
            "memory.usage_in_bytes": "777\n",
        },
    )
    assert [g.version for g in memory_cgroups(proc, root)] == [1]
    assert memory_limit(proc, root) == 4294967296
    assert oom_kill_count(proc, root) == 5
    assert memory_usage(proc, root) == 777


def test_no_limit_is_none_not_a_huge_number(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"memory.max": "max\n"})
    assert memory_limit(proc, root) is None
    proc1, root1 = _v1(tmp_path / "v1", {"memory.limit_in_bytes": "9223372036854771712\n"})
    assert memory_limit(proc1, root1) is None


def test_unreadable_is_unknown_never_zero(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-proc-cgroup"
    assert memory_cgroups(missing, tmp_path) == []
    assert memory_limit(missing, tmp_path) is None
    assert oom_kill_count(missing, tmp_path) is None
    assert memory_usage(missing, tmp_path) is None
    proc, root = _v2(tmp_path, {"memory.events": "oom 1\n"})  # no oom_kill line (old kernel)
    assert oom_kill_count(proc, root) is None
    assert memory_usage(proc, root) is None


def test_hybrid_layout_takes_the_tightest_limit(tmp_path: Path) -> None:
    """A hybrid host lists both a v2 entry and a v1 memory hierarchy: the tighter limit wins."""
    root = tmp_path / "sys"
    (root / "a").mkdir(parents=True)
    (root / "a" / "memory.max").write_text("2000\n")
    (root / "memory" / "b").mkdir(parents=True)
    (root / "memory" / "b" / "memory.limit_in_bytes").write_text("1000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a\n3:memory:/b\n")
    assert memory_limit(proc, root) == 1000
