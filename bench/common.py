"""Shared helpers for the benchmarks: statistics, machine facts, job files, exit timing.

Nothing here is timed itself. The child processes the benchmarks supervise live in
``bench/children.py`` (stdlib only, so their start-up is a bare interpreter's).
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import select
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
CHILDREN = BENCH_DIR / "children.py"


# -- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """Order statistics of one measured quantity (same unit as the samples)."""

    n: int
    median: float
    p90: float
    min: float
    max: float

    def fmt(self, scale: float = 1.0, unit: str = "", digits: int = 0) -> str:
        def f(x: float) -> str:
            return f"{x * scale:.{digits}f}{unit}"

        return (
            f"median {f(self.median)} (min {f(self.min)}, p90 {f(self.p90)}, "
            f"max {f(self.max)}, n={self.n})"
        )

    def as_dict(self) -> dict[str, float]:
        return {"n": self.n, "median": self.median, "p90": self.p90, "min": self.min,
                "max": self.max}  # fmt: skip


def summarize(samples: Iterable[float]) -> Summary:
    xs = sorted(samples)
    if not xs:
        raise ValueError("no samples")
    # Nearest-rank p90: with 20 samples, the 18th smallest.
    p90 = xs[min(len(xs) - 1, max(0, -(-9 * len(xs) // 10) - 1))]
    return Summary(len(xs), statistics.median(xs), p90, xs[0], xs[-1])


# -- machine ---------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, str]:
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "nproc": nproc,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": datetime.now(UTC).date().isoformat(),
    }


# -- the dsguard CLI and job files -----------------------------------------------------------


def dsguard_argv() -> list[str]:
    """The installed ``dsguard`` console script next to this interpreter (what users run)."""
    script = Path(sys.executable).parent / "dsguard"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "dsguard"]


def write_job(workdir: Path, child_args: Sequence[str], **sections: Any) -> Path:
    """A python-launcher job running ``bench/children.py``; ``sections`` override keys."""
    job: dict[str, Any] = {
        "name": "bench",
        "workdir": str(workdir),
        "launcher": "python",
        "python": sys.executable,
        "script": str(CHILDREN),
        "args": [str(a) for a in child_args],
        "train": {"micro_batch_size": 2, "gradient_accumulation_steps": 1},
        "flags": {"max_length": None, "lora": None},
        "limits": {"backoff_s": [0, 0], "max_attempts": 3},
        "log_dir": str(workdir / "runs"),
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(job.get(key), dict):
            job[key] = {**job[key], **value}
        else:
            job[key] = value
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def wait_for(pred: Any, timeout: float, poll: float = 0.002) -> Any:
    """Poll ``pred()`` until it returns something truthy; raise TimeoutError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(poll)


# -- when did a process end? -----------------------------------------------------------------


class ExitWatch:
    """Wall-clock moment each watched process terminated, from pidfds (Linux >= 5.3).

    A pidfd becomes readable when its process terminates (turns zombie), whoever its parent
    is, so this sees a grandchild's death the moment the kernel records it, without polling
    ``/proc``. All pids must be added before :meth:`start`.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self.gone: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="exit-watch", daemon=True)

    def add(self, pid: int) -> None:
        try:
            self._fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            self.gone[pid] = time.time()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while self._fds and not self._stop.is_set():
            ready, _, _ = select.select(list(self._fds), [], [], 0.05)
            now = time.time()
            for fd in ready:
                self.gone[self._fds.pop(fd)] = now
                os.close(fd)

    def wait(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
        for fd in list(self._fds):
            os.close(fd)
        self._fds.clear()


def have_hyperfine() -> str | None:
    return shutil.which("hyperfine")


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w./=:,+-]+", arg) else json.dumps(arg)


def time_commands(
    cmds: dict[str, list[str]], runs: int, tmp: Path
) -> tuple[str, dict[str, dict[str, float]]]:
    """Wall time of each command (stdout discarded): hyperfine ``-N`` with 3 warm-ups when
    installed, else our own loop. Returns (tool, {name: summary + mean user/system CPU s})."""
    hf = have_hyperfine()
    res: dict[str, dict[str, float]] = {}
    if hf is not None:
        out_json = tmp / "hyperfine.json"
        argv = [hf, "-N", "--warmup", "3", "--runs", str(runs), "--export-json", str(out_json)]
        for name, cmd in cmds.items():
            argv += ["-n", name, " ".join(_quote(c) for c in cmd)]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for r in json.loads(out_json.read_text())["results"]:
            s = summarize(r["times"]).as_dict()
            res[r["command"]] = {**s, "user": r["user"], "system": r["system"]}
        return "hyperfine", res
    for name, cmd in cmds.items():
        for _ in range(3):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        xs = []
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            xs.append(time.perf_counter() - t)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res[name] = {
            **summarize(xs).as_dict(),
            "user": (ru1.ru_utime - ru0.ru_utime) / runs,
            "system": (ru1.ru_stime - ru0.ru_stime) / runs,
        }
    return "own timing", res


def ms(x: float) -> str:
    return f"{x * 1000:.0f} ms"
