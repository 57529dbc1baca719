"""Shared helpers: write a job file around the fake trainer and run the real CLI on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

FAKE_TRAINER = Path(__file__).parent / "fake_trainer.py"


@pytest.fixture(autouse=True)
def _private_lock_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Stable per-job locks go to this test session's own dir, never the machine's
    ``/run/dsguard/locks`` (children inherit the variable)."""
    monkeypatch.setenv("DSGUARD_LOCK_DIR", str(tmp_path_factory.getbasetemp() / "locks"))


@pytest.fixture(autouse=True)
def _private_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The known-good store of each test is its own file, never ``~/.local/share``."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "known-good.sqlite"))


@dataclass
class RunResult:
    proc: subprocess.CompletedProcess[str]
    workdir: Path

    @property
    def code(self) -> int:
        return self.proc.returncode

    @property
    def events(self) -> list[dict[str, Any]]:
        path = self.workdir / "runs" / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    @property
    def trace(self) -> list[dict[str, Any]]:
        path = self.workdir / "trace.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]


def write_job(workdir: Path, trainer_args: list[str], **sections: Any) -> Path:
    """A python-launcher job running the fake trainer; ``sections`` override top-level keys."""
    job: dict[str, Any] = {
        "name": "fake",
        "launcher": "python",
        "script": str(FAKE_TRAINER),
        "args": ["--output_dir", "out", "--trace", "trace.jsonl", *trainer_args],
        "train": {"micro_batch_size": 8, "gradient_accumulation_steps": 1},
        "flags": {"max_length": None, "lora": None},
        "checkpoints": {"dir": "out"},
        "limits": {"backoff_s": [0, 0], "fatal_grace_s": 1, "stop_grace_s": 5},
        "log_dir": "runs",
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(job.get(key), dict):
            job[key] = {**job[key], **value}
        else:
            job[key] = value
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def dsguard_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dsguard", *args]


@pytest.fixture
def run_dsguard(tmp_path: Path) -> Callable[..., RunResult]:
    def run(*args: str, timeout: float = 120) -> RunResult:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.run(
            dsguard_cmd(*args),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
        return RunResult(proc, tmp_path)

    return run
