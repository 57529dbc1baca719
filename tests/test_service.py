"""``dsguard service install`` in temp dirs, and the unit checked by systemd's own parser."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsguard.cli.service import (
    STOP_OVERHEAD_S,
    UNIT_NAME,
    UNIT_TEXT,
    UNIT_TIMEOUT_STOP_S,
    ServiceInstallError,
    default_dsguard_bin,
    install,
)
from dsguard.errors import JobFileError
from dsguard.exitcodes import EXIT_GAVE_UP, EXIT_USAGE
from tests.conftest import write_job

REPO_UNIT = Path(__file__).resolve().parents[1] / "systemd" / UNIT_NAME
ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def dsguard_bin() -> Path:
    found = default_dsguard_bin()
    if found is None:
        pytest.skip("dsguard is not installed as an executable here")
    return found


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    work = tmp_path / "work dir"  # a space: quoting must survive it
    work.mkdir()
    return write_job(work, [], name="llama7b-sft")


def shell_env(env_file: Path) -> dict[str, str]:
    """Read an env file as a POSIX shell does (the same quoting rules systemd's parser has)."""
    out = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; env -0', "sh", str(env_file)],
        capture_output=True, check=True, env={},
    ).stdout  # fmt: skip
    pairs = (item.split(b"=", 1) for item in out.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


def unit_setting(key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", UNIT_TEXT, flags=re.MULTILINE)


def test_user_install_writes_unit_and_env_file(
    tmp_path: Path, job_file: Path, dsguard_bin: Path
) -> None:
    environ = {
        "HOME": str(tmp_path / "home"),
        "PATH": "/opt/conda/envs/train/bin:/usr/local/cuda/bin:/usr/bin",
        "CUDA_HOME": "/usr/local/cuda-12.4",
        "HF_HOME": '/data/it\'s $HOME/hf "cache" `x` \\',
        "NCCL_SOCKET_IFNAME": "eth0",
        "HF_TOKEN": "hf_secret",
        "DISPLAY": ":0",
    }
    res = install(
        job_file, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "units",
        env_dir=tmp_path / "conf" / "dsguard", environ=environ, linger_dir=tmp_path / "linger",
    )  # fmt: skip
    assert res.job == "llama7b-sft" and res.unit_action == "written"
    assert res.unit_path == tmp_path / "units" / "dsguard@.service"
    assert res.unit_path.read_text() == UNIT_TEXT
    assert res.env_path == tmp_path / "conf" / "dsguard" / "llama7b-sft.env"
    assert res.env_path.stat().st_mode & 0o777 == 0o600  # may hold tokens later
    assert res.dropin_path is None
    got = shell_env(res.env_path)
    assert got["DSGUARD_BIN"] == str(dsguard_bin)
    assert got["DSGUARD_JOB"] == str(job_file)
    for key in ("PATH", "CUDA_HOME", "HF_HOME", "NCCL_SOCKET_IFNAME"):
        assert got[key] == environ[key], key
    assert "HF_TOKEN" not in got and "DISPLAY" not in got  # secrets/noise are not copied
    assert res.commands == (
        "systemctl --user daemon-reload && systemctl --user enable --now dsguard@llama7b-sft",
        f"loginctl enable-linger {ME}",
    )
    assert any("SSH logout" in n for n in res.notes)
    assert any("journalctl --user -u dsguard@llama7b-sft -f" in n for n in res.notes)
    assert any(f"dsguard status '{job_file}'" in n for n in res.notes)  # quoted: a space


def test_the_env_file_starts_dsguard_as_systemd_would(
    tmp_path: Path, job_file: Path, dsguard_bin: Path
) -> None:
    """ExecStart=/usr/bin/env ${DSGUARD_BIN} ...: the recorded binary really runs."""
    res = install(
        job_file, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
        env_dir=tmp_path / "e", environ={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
    )  # fmt: skip
    env = shell_env(res.env_path)
    out = subprocess.run(
        ["/usr/bin/env", env["DSGUARD_BIN"], "validate", env["DSGUARD_JOB"]],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "job 'llama7b-sft'" in out.stdout


def test_lingering_user_gets_no_linger_command(
    tmp_path: Path, job_file: Path, dsguard_bin: Path
) -> None:
    (tmp_path / "linger").mkdir()
    (tmp_path / "linger" / ME).touch()
    res = install(
        job_file, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
        env_dir=tmp_path / "e", environ={"HOME": str(tmp_path)}, linger_dir=tmp_path / "linger",
    )  # fmt: skip
    assert len(res.commands) == 1 and not any("enable-linger" in n for n in res.notes)


def test_default_user_dirs_follow_xdg(tmp_path: Path, job_file: Path, dsguard_bin: Path) -> None:
    home = tmp_path / "home"
    res = install(job_file, user=True, dsguard_bin=dsguard_bin, environ={"HOME": str(home)})
    assert res.unit_path == home / ".config" / "systemd" / "user" / UNIT_NAME
    assert res.env_path == home / ".config" / "dsguard" / "llama7b-sft.env"
    xdg = tmp_path / "xdg"
    res = install(
        job_file, user=True, dsguard_bin=dsguard_bin,
        environ={"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)},
    )  # fmt: skip
    assert res.unit_path == xdg / "systemd" / "user" / UNIT_NAME
    assert any("XDG_CONFIG_HOME" in n for n in res.notes)


def test_unit_is_shared_and_never_silently_clobbered(
    tmp_path: Path, job_file: Path, dsguard_bin: Path
) -> None:
    kw: dict[str, Any] = {
        "unit_dir": tmp_path / "u",
        "env_dir": tmp_path / "e",
        "environ": {"HOME": "/h"},
    }
    assert install(job_file, user=True, dsguard_bin=dsguard_bin, **kw).unit_action == "written"
    other = write_job(tmp_path, [], name="other-job")
    res = install(other, user=True, dsguard_bin=dsguard_bin, **kw)
    assert res.unit_action == "unchanged"  # one template, one env file per job
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == [
        "llama7b-sft.env",
        "other-job.env",
    ]
    unit = tmp_path / "u" / UNIT_NAME
    unit.write_text(UNIT_TEXT.replace("RestartSec=30s", "RestartSec=5s"))
    res = install(job_file, user=True, dsguard_bin=dsguard_bin, **kw)
    assert res.unit_action == "kept" and "RestartSec=5s" in unit.read_text()
    assert any("--force" in n for n in res.notes)
    res = install(job_file, user=True, dsguard_bin=dsguard_bin, force=True, **kw)
    assert res.unit_action == "updated" and unit.read_text() == UNIT_TEXT


def test_system_install_runs_the_job_as_a_user(
    tmp_path: Path, job_file: Path, dsguard_bin: Path
) -> None:
    res = install(
        job_file, user=False, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
        env_dir=tmp_path / "e", run_as="nobody", environ={},
    )  # fmt: skip
    assert res.dropin_path == tmp_path / "u" / "dsguard@llama7b-sft.service.d" / "10-user.conf"
    text = res.dropin_path.read_text()
    assert "User=nobody\n" in text and "Group=" in text
    assert res.commands == (
        "systemctl daemon-reload && systemctl enable --now dsguard@llama7b-sft",
    )
    as_root = install(
        job_file, user=False, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u2",
        env_dir=tmp_path / "e2", run_as="root", environ={},
    )  # fmt: skip
    assert as_root.dropin_path is None and any("as root" in n for n in as_root.notes)
    with pytest.raises(ServiceInstallError, match="no such user"):
        install(
            job_file, user=False, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u3",
            env_dir=tmp_path / "e3", run_as="no-such-user-dsguard", environ={},
        )  # fmt: skip


def test_bad_job_or_binary_installs_nothing(tmp_path: Path, dsguard_bin: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(JobFileError):
        install(bad, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u")
    job = write_job(tmp_path, [])
    with pytest.raises(ServiceInstallError, match="not an executable"):
        install(job, user=True, dsguard_bin=tmp_path / "nope", unit_dir=tmp_path / "u")
    with pytest.raises(ServiceInstallError, match="line break"):
        install(
            job, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
            env_dir=tmp_path / "e", environ={"PATH": "/bin\n/usr/bin"},
        )  # fmt: skip
    assert not (tmp_path / "e").exists() or not any((tmp_path / "e").iterdir())


def test_long_stop_grace_is_noted(tmp_path: Path, dsguard_bin: Path) -> None:
    job = write_job(tmp_path, [], limits={"stop_grace_s": 300})
    res = install(
        job, user=True, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u", env_dir=tmp_path / "e"
    )
    assert any("EXTEND_TIMEOUT_USEC" in n for n in res.notes)


def test_unit_settings_match_dsguard() -> None:
    """Exit codes and stop budget in the unit agree with the code they describe."""
    assert unit_setting("RestartPreventExitStatus") == [f"{EXIT_GAVE_UP} {EXIT_USAGE}"]
    assert unit_setting("SuccessExitStatus") == ["130 143"]
    assert unit_setting("TimeoutStopSec") == [f"{UNIT_TIMEOUT_STOP_S}s"]
    assert 45 + STOP_OVERHEAD_S < UNIT_TIMEOUT_STOP_S  # the default stop_grace_s fits
    for key, value in [("Type", "notify"), ("NotifyAccess", "main"), ("KillMode", "mixed"),
                       ("KillSignal", "SIGTERM"), ("OOMPolicy", "continue"),
                       ("Restart", "on-failure"), ("PrivateTmp", "no")]:  # fmt: skip
        assert unit_setting(key) == [value], key
    for forbidden in ("PrivateDevices", "ProtectHome", "MemoryDenyWriteExecute", "PrivateIPC"):
        assert unit_setting(forbidden) == [], forbidden


def test_repo_unit_file_is_the_installed_one() -> None:
    assert REPO_UNIT.read_text() == UNIT_TEXT


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("manager", ["system", "user"])
def test_systemd_analyze_verify_is_clean(
    tmp_path: Path, job_file: Path, dsguard_bin: Path, manager: str
) -> None:
    """systemd's own parser: any diagnostic (an unknown key, a bad value) fails the test,
    since verify only warns (exit 0) about lines it ignores."""
    res = install(
        job_file, user=manager == "user", dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
        env_dir=tmp_path / "e", run_as="nobody", environ={"HOME": str(tmp_path)},
    )  # fmt: skip
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_LEVEL="notice")
    argv = ["systemd-analyze", *(["--user"] if manager == "user" else []), "verify"]
    out = subprocess.run(
        [*argv, str(res.unit_path)], capture_output=True, text=True, env=env, check=False,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr == "", out.stderr
    # Control: the check does catch a bad line.
    bad = tmp_path / "u" / "dsguard-bad@.service"
    bad.write_text(UNIT_TEXT.replace("OOMPolicy=continue", "OOMPolicy=contine"))
    out = subprocess.run(
        [*argv, str(bad)], capture_output=True, text=True, env=env, check=False, timeout=60
    )
    assert "OOM policy" in out.stderr
