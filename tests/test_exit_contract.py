"""The exit-code contract with cluster engines: ``dsguard run --exit-*`` renumbers success,
give-up and "restart me", checked by running dsguard and reading its exit status."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from dsguard.exitcodes import (
    EXIT_GAVE_UP,
    EXIT_INTERNAL_ERROR,
    EXIT_USAGE,
    KUBEFLOW_RETRYABLE_MIN,
    NVRX_NO_RESTART,
    ExitContract,
    exit_code_for_signal,
)
from tests.conftest import dsguard_cmd, write_job


def run(tmp_path: Path, *flags: str) -> int:
    return subprocess.run(dsguard_cmd("run", "job.yaml", "--quiet", *flags), cwd=tmp_path,
                          capture_output=True, check=False, timeout=120).returncode  # fmt: skip


def test_the_contract_maps_only_its_outcomes() -> None:
    c = ExitContract(succeeded=0, gave_up=NVRX_NO_RESTART, retry=200)
    assert c.apply(0) == 0 and c.apply(EXIT_GAVE_UP) == NVRX_NO_RESTART
    assert c.apply(exit_code_for_signal(signal.SIGTERM)) == 200
    assert c.apply(EXIT_INTERNAL_ERROR) == 200
    assert c.apply(EXIT_USAGE) == EXIT_USAGE  # a bad job file is never "retry me"
    assert ExitContract().apply(exit_code_for_signal(signal.SIGTERM)) == 143
    for bad in ({"gave_up": 0}, {"retry": 1}, {"gave_up": 2}, {"retry": 256}):
        with pytest.raises(ValueError, match=r"must differ|0\.\.255|cannot mean"):
            ExitContract(**bad)


def test_defaults_already_fit_kubeflow_exit_code_policy() -> None:
    """restartPolicy: ExitCode retries 128+ only: a stop (143) is retried, a give-up (1) is
    not. The one default that needs --exit-retry there is the internal error (70)."""
    assert exit_code_for_signal(signal.SIGTERM) >= KUBEFLOW_RETRYABLE_MIN
    assert EXIT_GAVE_UP < KUBEFLOW_RETRYABLE_MIN and EXIT_INTERNAL_ERROR < KUBEFLOW_RETRYABLE_MIN


@pytest.mark.e2e
def test_gave_up_exits_with_the_configured_code(tmp_path: Path) -> None:
    write_job(tmp_path, ["--scenario", "user_error", "--fail_at_step", "1"])
    assert run(tmp_path) == EXIT_GAVE_UP
    write_job(tmp_path, ["--scenario", "user_error", "--fail_at_step", "1"], log_dir="runs2")
    assert run(tmp_path, "--exit-gave-up", str(NVRX_NO_RESTART)) == NVRX_NO_RESTART


@pytest.mark.e2e
def test_success_exits_with_the_configured_code(tmp_path: Path) -> None:
    write_job(tmp_path, [])
    assert run(tmp_path, "--exit-succeeded", "0", "--exit-gave-up", "93") == 0
    write_job(tmp_path, [], log_dir="runs2")
    assert run(tmp_path, "--exit-succeeded", "42") == 42


@pytest.mark.e2e
def test_a_stopped_run_exits_with_the_retry_code(tmp_path: Path) -> None:
    """Preemption (SIGTERM): the engine must start dsguard again; SkyPilot's
    ``recover_on_exit_codes: [200]`` does so for exactly this code."""
    write_job(tmp_path, ["--max_steps", "200", "--step_s", "0.2"])
    argv = dsguard_cmd("run", "job.yaml", "--quiet", "--exit-retry", "200")
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "trace.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 200


def test_bad_contract_is_a_usage_error(tmp_path: Path) -> None:
    write_job(tmp_path, [])
    assert run(tmp_path, "--exit-gave-up", "0") == EXIT_USAGE


@pytest.mark.e2e
def test_the_job_files_exit_codes_apply_and_a_flag_overrides_them(tmp_path: Path) -> None:
    trainer = ["--scenario", "user_error", "--fail_at_step", "1"]
    write_job(tmp_path, trainer, exit_codes={"gave_up": NVRX_NO_RESTART})
    assert run(tmp_path) == NVRX_NO_RESTART
    write_job(tmp_path, trainer, exit_codes={"gave_up": NVRX_NO_RESTART}, log_dir="runs2")
    assert run(tmp_path, "--exit-gave-up", "94") == 94


def test_bad_exit_codes_in_the_job_file_launch_nothing(tmp_path: Path) -> None:
    path = write_job(tmp_path, [], exit_codes={"gave_up": 5, "retry": 5})
    res = subprocess.run(dsguard_cmd("run", "job.yaml"), cwd=tmp_path, capture_output=True,
                         text=True, check=False, timeout=60)  # fmt: skip
    assert res.returncode == EXIT_USAGE
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "exit_codes" in t)
    assert f"job.yaml:{line}: exit_codes: the succeeded, gave-up and retry codes must differ" in (
        res.stderr
    )
    assert not (tmp_path / "trace.jsonl").exists()
    write_job(tmp_path, [], exit_codes={"gave_up": 0})
    res = subprocess.run(dsguard_cmd("validate", "job.yaml"), cwd=tmp_path, capture_output=True,
                         text=True, check=False, timeout=60)  # fmt: skip
    assert res.returncode == EXIT_USAGE and "exit_codes.gave_up" in res.stderr
