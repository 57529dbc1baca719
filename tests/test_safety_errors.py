"""Issue 13 (defects 8 and 12): a clear one-line error and exit 2 where dsguard used to crash
with a traceback and exit 70 (under systemd: a restart loop that never names the problem).

Real commands in real subprocesses, real files, real symlink loops, a real read-only and a
real inode-exhausted tmpfs (root only; skipped with the reason elsewhere). Each case checks
that ``validate`` and ``run`` agree and that nothing was launched (the fake trainer writes
``trace.jsonl`` as soon as it starts).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import FAKE_TRAINER, RunResult, write_job


def _refused(res: RunResult, *fragments: str) -> str:
    """Exit 2, no traceback, the fragments on one stderr line, and no trainer started."""
    err = res.proc.stderr
    assert res.code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert any(all(f in line for f in fragments) for line in err.splitlines()), err
    assert not (res.workdir / "trace.jsonl").exists()
    return err


def _line_of(job: Path, key: str, after: int = 0) -> int:
    lines = job.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if i > after and text.startswith(key))


def _field_line(job: Path, field: str) -> int:
    """The line of ``section.key`` (block style, as write_job writes it) or a top key."""
    section, _, key = field.partition(".")
    line = _line_of(job, f"{section}:")
    return _line_of(job, f"  {key}:", after=line) if key else line


@pytest.mark.parametrize(
    ("sections", "field", "fragment"),
    [
        ({"log_dir": "afile/logs"}, "log_dir", "afile is a regular file"),
        ({"log_dir": "afile"}, "log_dir", "exists and is a regular file"),
        ({"log_dir": "loop/logs"}, "log_dir", "symlink loop"),
        ({"checkpoints": {"dir": "afile/out"}, "args": ["--output_dir", "afile/out"]},
         "checkpoints.dir", "afile is a regular file"),
        ({"checkpoints": {"dir": "afile"}, "args": ["--output_dir", "afile"]},
         "checkpoints.dir", "exists and is a regular file"),
    ],
)  # fmt: skip
def test_unusable_dirs_are_refused_by_validate_and_run(
    tmp_path: Path,
    run_dsguard: Callable[..., RunResult],
    sections: dict[str, object],
    field: str,
    fragment: str,
) -> None:
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "loop").symlink_to("loop")
    job = write_job(tmp_path, [], **sections)
    where = f"job.yaml:{_field_line(job, field)}"
    for command in ("validate", "run"):
        err = _refused(run_dsguard(command, "job.yaml"), where, f"{field}:", fragment)
        assert "nothing was launched" in err
    assert (tmp_path / "afile").read_text() == "a regular file\n"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a small tmpfs with the given options; unmounted after the test."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_log_dir_on_a_read_only_mount_is_refused(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], tmpfs: Callable[[str], Path]
) -> None:
    """Root ignores permission bits but not a read-only mount: `validate` said ok and `run`
    crashed with exit 70 at mkdir (EROFS)."""
    ro = tmpfs("ro,size=64k")
    job = write_job(tmp_path, [], log_dir=f"{ro.name}/logs")
    where = f"job.yaml:{_line_of(job, 'log_dir:')}"
    for command in ("validate", "run"):
        _refused(run_dsguard(command, "job.yaml"), where, "log_dir:", "read-only file system")


def test_lock_that_cannot_be_created_is_exit_2(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], tmpfs: Callable[[str], Path]
) -> None:
    """A log dir on a file system with no inode left: the directory exists and is writable,
    so every check passes, and creating the lock file fails with ENOSPC. That is the
    environment, not a bug: exit 2 naming the lock, not a traceback and exit 70."""
    full = tmpfs("size=256k,nr_inodes=3")
    (full / "logs").mkdir()
    n = 0
    error = 0
    while not error:  # use up the inodes the root and logs/ left
        try:
            (full / f"f{n}").touch()
        except OSError as exc:
            error = exc.errno or -1
        n += 1
    assert error == errno.ENOSPC
    write_job(tmp_path, [], log_dir=str(full / "logs"))
    assert run_dsguard("validate", "job.yaml").code == 0  # nothing wrong with the job file
    _refused(run_dsguard("run", "job.yaml"), "take the job lock", "No space left", "dsguard.lock")


def test_quick_start_log_dir_below_a_file(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """No job file to check: `run --log-dir` itself must refuse, before the supervisor's
    mkdir raised NotADirectoryError (exit 70)."""
    (tmp_path / "afile").write_text("")
    res = run_dsguard(
        "run", "--log-dir", "afile/logs", "--", "python", str(FAKE_TRAINER), "--output_dir", "o"
    )
    _refused(res, "dsguard run: log_dir:", "afile is a regular file")


def test_run_turns_a_log_dir_oserror_into_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever changed since validation (here: the job file's check bypassed, the log dir a
    file by the time run starts), creating the log dir is a one-line exit 2."""
    from dsguard.cli import main as cli
    from dsguard.job.file import load_job

    write_job(tmp_path, [], log_dir="runs")
    job = load_job(tmp_path / "job.yaml")
    (tmp_path / "runs").write_text("")  # after validation
    monkeypatch.setattr(cli, "_load", lambda _path, writable=False: job)
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "log_dir:" in err and "exists and is a regular file" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "code"),
    [('{"state": 5}', 4), ('{"state": "running", "attempt": "x"}', 4), ("{{{", 4),
     ('{"state": "gave_up", "checkpoint_dir": "/x\\u0000y"}', 3)],
)  # fmt: skip
def test_status_on_a_mistyped_state_file(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], text: str, code: int
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "state.json").write_text(text)
    for extra in ((), ("--json",)):
        res = run_dsguard("status", "logs", *extra)
        assert res.code == code, res.proc.stderr
        assert "Traceback" not in res.proc.stderr
    report = json.loads(res.proc.stdout)
    assert report["problems"] or report["checkpoint"]["error"]


def test_huge_micro_batch_is_refused_with_its_line(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    job = write_job(tmp_path, [], train={"micro_batch_size": 10**30})
    where = f"job.yaml:{_line_of(job, '  micro_batch_size:')}"
    for command in ("validate", "run"):
        _refused(
            run_dsguard(command, "job.yaml"), where, "train.micro_batch_size:",
            "valid range: 1 <= value <= 1048576",
        )  # fmt: skip


def test_huge_timeout_is_refused_with_its_line(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    job = write_job(tmp_path, [], limits={"hang_timeout_s": 1e30})
    where = f"job.yaml:{_line_of(job, '  hang_timeout_s:')}"
    for command in ("validate", "run"):
        _refused(run_dsguard(command, "job.yaml"), where, "limits.hang_timeout_s:", "604800")


def test_train_batch_size_seven_against_micro_four_is_refused(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """`train_batch_size: 7` with micro 4 x accum 1 x world 1 was silently rewritten to 4."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 7, "zero_optimization": {"stage": 2}}))
    job = write_job(tmp_path, [], train={"micro_batch_size": 4}, deepspeed={"config": str(ds)})
    where = f"job.yaml:{_line_of(job, '  config:')}"
    for command in ("validate", "run"):
        _refused(
            run_dsguard(command, "job.yaml"), where, "deepspeed.config:",
            "train_batch_size is 7", "= 4",
        )  # fmt: skip
