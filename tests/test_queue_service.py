"""``dsguard service install --queue``: the queue daemon's unit and env file, in temp dirs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dsguard.cli.service import (
    QUEUE_UNIT_NAME,
    QUEUE_UNIT_TEXT,
    QUEUE_UNIT_TIMEOUT_STOP_S,
    default_dsguard_bin,
    install_queue,
)
from dsguard.exitcodes import EXIT_USAGE
from dsguard.queue.daemon import Daemon
from tests.conftest import dsguard_cmd
from tests.test_service import shell_env

REPO_UNIT = Path(__file__).resolve().parents[1] / "systemd" / QUEUE_UNIT_NAME


@pytest.fixture
def dsguard_bin() -> Path:
    found = default_dsguard_bin()
    if found is None:
        pytest.skip("dsguard is not installed as an executable here")
    return found


def setting(key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", QUEUE_UNIT_TEXT, flags=re.MULTILINE)


def test_the_unit_keeps_jobs_alive_across_a_daemon_restart() -> None:
    # KillMode=process: a crashed daemon's restart must not take its jobs with it (the new
    # daemon adopts them); control-group or mixed would SIGKILL every dsguard run.
    assert setting("KillMode") == ["process"]
    assert setting("Restart") == ["on-failure"]
    assert setting("RestartPreventExitStatus") == [str(EXIT_USAGE)]
    assert setting("ExecStart") == [
        "/usr/bin/env ${DSGUARD_BIN} queue run --slots ${DSGUARD_QUEUE_SLOTS}"
    ]
    assert setting("TimeoutStopSec") == [f"{QUEUE_UNIT_TIMEOUT_STOP_S}s"]
    assert Daemon.stop_timeout_s < QUEUE_UNIT_TIMEOUT_STOP_S


def test_the_repository_copy_is_the_installed_text() -> None:
    assert REPO_UNIT.read_text() == QUEUE_UNIT_TEXT


def test_install_writes_unit_and_env_and_the_env_runs_the_queue(
    tmp_path: Path, dsguard_bin: Path
) -> None:
    qdir = tmp_path / "my queue"
    res = install_queue(
        user=True, queue_dir=qdir, slots=3, dsguard_bin=dsguard_bin, unit_dir=tmp_path / "u",
        env_dir=tmp_path / "e", environ={"HOME": str(tmp_path), "PATH": os.environ["PATH"],
                                         "NCCL_SOCKET_IFNAME": "eth0"},
        linger_dir=tmp_path / "linger",
    )  # fmt: skip
    assert res.unit_path.read_text() == QUEUE_UNIT_TEXT and res.unit_action == "written"
    assert res.env_path.stat().st_mode & 0o777 == 0o600
    env = shell_env(res.env_path)
    assert env["DSGUARD_QUEUE_DIR"] == str(qdir) and env["DSGUARD_QUEUE_SLOTS"] == "3"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert any("enable-linger" in c for c in res.commands)
    out = subprocess.run(
        ["/usr/bin/env", env["DSGUARD_BIN"], "queue", "status"],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "the queue is empty" in out.stdout, out.stderr
    assert not qdir.exists()  # a read does not create the queue
    again = install_queue(user=True, queue_dir=qdir, dsguard_bin=dsguard_bin,
                          unit_dir=tmp_path / "u", env_dir=tmp_path / "e",
                          environ={"HOME": str(tmp_path)}, linger_dir=tmp_path)  # fmt: skip
    assert again.unit_action == "unchanged"


def test_the_cli_wants_a_job_or_queue(tmp_path: Path) -> None:
    res = subprocess.run(dsguard_cmd("service", "install", "--user"), capture_output=True,
                         text=True, check=False, timeout=60)  # fmt: skip
    assert res.returncode == EXIT_USAGE and "--queue" in res.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_is_clean(tmp_path: Path, dsguard_bin: Path) -> None:
    res = install_queue(user=False, queue_dir=tmp_path / "q", dsguard_bin=dsguard_bin,
                        unit_dir=tmp_path / "u", env_dir=tmp_path / "e",
                        environ={"HOME": str(tmp_path)})  # fmt: skip
    env = dict(os.environ, SYSTEMD_LOG_LEVEL="notice")
    out = subprocess.run(["systemd-analyze", "verify", str(res.unit_path)], capture_output=True,
                         text=True, env=env, check=False, timeout=60)  # fmt: skip
    assert out.returncode == 0 and out.stderr == "", out.stderr
