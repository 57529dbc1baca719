"""One supervised OOM-then-heal run through the real ``dsguard run`` CLI, timed from outside.

Shared by P1 (one trainer process) and P2 (a launcher with two ranks). Timeline of a trial:

1. ``dsguard run job.yaml --quiet`` starts attempt 1 (micro-batch 2). Its processes append a
   ``start`` record (pid) to the side file and the OOMing one waits for a go file.
2. The benchmark opens a pidfd on every attempt-1 process (``ExitWatch``), then creates the
   go file.
3. The OOMing process prints a traceback, records ``time.time()`` just before writing the
   ``torch.OutOfMemoryError: CUDA out of memory`` line, writes it, and blocks (P1) or exits 1
   while its peer blocks (P2).
4. dsguard sees the line, ends attempt 1, halves the micro-batch and starts attempt 2, whose
   processes record their first-statement time (and their kernel fork time, 10 ms ticks)
   and exit 0; the run succeeds.

Measured against the OOM write time: when each attempt-1 process terminated (pidfd, exact),
when attempt 2's first process existed, plus dsguard's own event timestamps (ms) for a
breakdown. All clocks are this machine's ``time.time()``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import ExitWatch, dsguard_argv, read_jsonl, wait_for, write_job

TRIAL_TIMEOUT_S = 60.0


@dataclass
class Trial:
    rc: int
    t_oom: float
    #: attempt-1 pid -> role label ("oom", "launcher", "rank0", "rank1")
    roles: dict[int, str]
    #: attempt-1 pid -> wall time it terminated
    gone: dict[int, float]
    #: attempt 2's first process: first Python statement, kernel fork time (10 ms ticks)
    next_first_statement: float
    next_fork: float | None
    events: list[dict[str, Any]]

    def gone_after(self, *roles: str) -> float:
        """Seconds from the OOM write until every attempt-1 process of these roles was gone."""
        pids = [pid for pid, role in self.roles.items() if not roles or role in roles]
        return max(self.gone[pid] for pid in pids) - self.t_oom

    def event_after(self, name: str, **match: Any) -> float | None:
        for ev in self.events:
            if ev.get("event") == name and all(ev.get(k) == v for k, v in match.items()):
                return datetime.fromisoformat(ev["ts"]).timestamp() - self.t_oom
        return None

    def event_field(self, name: str, key: str) -> Any:
        for ev in self.events:
            if ev.get("event") == name:
                return ev.get(key)
        return None


def _role(rec: dict[str, Any]) -> str:
    if rec.get("role") == "rank":
        return f"rank{rec.get('rank')}"
    return str(rec.get("role"))


def run_trial(
    tmp: Path,
    child_args: list[str],
    procs_in_attempt: int,
    limits: dict[str, Any],
    dsguard: list[str] | None = None,
) -> Trial:
    """One dsguard run in ``tmp`` (empty). ``child_args`` go to ``bench/children.py``;
    ``dsguard`` replaces the installed CLI (a what-if with patched constants)."""
    side = tmp / "side.jsonl"
    go = tmp / "go"
    (tmp / "out").mkdir()
    job = write_job(
        tmp,
        [*child_args, "--side", str(side), "--go", str(go), "--oom_above", "1"],
        limits=limits,
        checkpoints={"dir": str(tmp / "out")},
    )
    stderr = (tmp / "dsguard.stderr").open("wb")
    proc = subprocess.Popen(
        [*(dsguard or dsguard_argv()), "run", str(job), "--quiet"],
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )
    watch = ExitWatch()
    try:

        def first_attempt() -> list[dict[str, Any]]:
            recs = [r for r in read_jsonl(side) if r["ev"] == "start" and r.get("attempt") == "1"]
            return recs if len(recs) >= procs_in_attempt else []

        starts = wait_for(first_attempt, 30.0)
        roles = {int(r["pid"]): _role(r) for r in starts}
        for pid in roles:
            watch.add(pid)
        watch.start()
        go.touch()
        rc = proc.wait(TRIAL_TIMEOUT_S)
        if not watch.wait(10.0):
            raise RuntimeError(f"attempt-1 processes still alive after the run: {tmp}")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10.0)
        for rec in read_jsonl(side):
            if rec.get("ev") == "start":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(rec["pid"]), signal.SIGKILL)
        raise
    finally:
        watch.close()
        stderr.close()
    records = read_jsonl(side)
    ooms = [r for r in records if r["ev"] == "oom"]
    nexts = [r for r in records if r["ev"] == "start" and r.get("attempt") == "2"]
    if rc != 0 or len(ooms) != 1 or not nexts:
        err = (tmp / "dsguard.stderr").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"trial did not OOM once then heal (rc={rc}): {err}")
    first = min(nexts, key=lambda r: float(r["t"]))
    forks = [float(r["t_fork"]) for r in nexts if r.get("t_fork") is not None]
    return Trial(
        rc=rc,
        t_oom=float(ooms[0]["t"]),
        roles=roles,
        gone=dict(watch.gone),
        next_first_statement=float(first["t"]),
        next_fork=min(forks) if forks else None,
        events=read_jsonl(tmp / "runs" / "events.jsonl"),
    )


def breakdown(trials: list[Trial]) -> dict[str, list[float]]:
    """Per-trial seconds after the OOM write for each milestone dsguard logs."""
    out: dict[str, list[float]] = {
        "detected (state -> ending)": [],
        "attempt ended (end_attempt returned)": [],
        "attempt 2 spawned (attempt_started)": [],
    }
    for t in trials:
        for key, value in (
            ("detected (state -> ending)", t.event_after("state_changed", to_state="ending")),
            ("attempt ended (end_attempt returned)", t.event_after("attempt_ended")),
            ("attempt 2 spawned (attempt_started)", t.event_after("attempt_started", attempt=2)),
        ):
            if value is not None:
                out[key].append(value)
    return out


def interpreter_start_s(reps: int = 10) -> float:
    """Median wall time of ``python -c pass`` with this interpreter (for context)."""
    import statistics
    import sys

    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)
