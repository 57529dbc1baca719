"""The queue's own overhead (issue 16): start latency per job and the daemon's memory.

Start latency: from the moment ``dsguard queue run`` picks a job (``picked_at``, recorded in
the queue's SQLite row just before the spawn) to the moment that job's ``dsguard run`` writes
``run_started`` (its ``ts``). For comparison, the same interval for ``dsguard run`` started
directly with ``subprocess.Popen`` (no queue): the difference is what the queue adds.

Daemon RSS: the ``dsguard queue run`` process's resident set, sampled with psutil every
50 ms while it runs the jobs; median and peak. The jobs are ``bench/children.py oom`` at a
micro-batch that fits (exits 0 at once), so the numbers are the supervisor's, not training's.

    .venv/bin/python -m bench.queue_overhead [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

from bench.common import dsguard_argv, machine_info, read_jsonl, summarize, write_job


def _run_started(log_dir: Path) -> float:
    ev = next(e for e in read_jsonl(log_dir / "events.jsonl") if e["event"] == "run_started")
    return datetime.fromisoformat(ev["ts"]).timestamp()


def _job(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    path = write_job(d, ["oom", "--side", str(d / "side.jsonl"), "--oom_above", "100"])
    path.write_text(path.read_text().replace("name: bench", f"name: {name}"))
    return path


def queue_latency(root: Path, n: int) -> tuple[list[float], list[int]]:
    env = dict(os.environ, DSGUARD_QUEUE_DIR=str(root / "queue"), DSGUARD_LOCK_DIR=str(root / "l"))
    jobs = [_job(root, f"q{i}") for i in range(n)]
    subprocess.run([*dsguard_argv(), "queue", "add", *map(str, jobs)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    daemon = subprocess.Popen([*dsguard_argv(), "queue", "run", "--until-empty", "--slots", "1"],
                              env=env, stderr=subprocess.DEVNULL)  # fmt: skip
    rss: list[int] = []
    proc = psutil.Process(daemon.pid)

    def sample() -> None:
        while daemon.poll() is None:
            try:
                rss.append(int(proc.memory_info().rss))
            except psutil.Error:
                return
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    assert daemon.wait(timeout=600) == 0
    t.join()
    db = sqlite3.connect(root / "queue" / "queue.db")
    rows = db.execute("SELECT log_dir, picked_at, state FROM jobs").fetchall()
    assert all(r[2] == "succeeded" for r in rows), rows
    return [_run_started(Path(r[0])) - r[1] for r in rows], rss


def direct_latency(root: Path, n: int) -> list[float]:
    env = dict(os.environ, DSGUARD_LOCK_DIR=str(root / "l"))
    out: list[float] = []
    for i in range(n):
        job = _job(root, f"d{i}")
        t0 = time.time()
        subprocess.run([sys.executable, "-m", "dsguard", "run", "--quiet", str(job)], env=env,
                       check=True, capture_output=True)  # fmt: skip
        out.append(_run_started(job.parent / "runs") - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10)
    ns = ap.parse_args()
    machine = machine_info()  # before the runs: its load average is the start's
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        q, rss = queue_latency(root, ns.jobs)
        d = direct_latency(root, ns.jobs)
    result = {
        "machine": machine,
        "jobs": ns.jobs,
        "queue_pick_to_run_started_s": summarize(q).as_dict(),
        "direct_popen_to_run_started_s": summarize(d).as_dict(),
        "daemon_rss_bytes": {"median": statistics.median(rss), "max": max(rss), "n": len(rss)},
    }
    print(json.dumps(result, indent=2))
    print(f"queue pick -> run_started: {summarize(q).fmt(1000, ' ms')}", file=sys.stderr)
    print(f"direct Popen -> run_started: {summarize(d).fmt(1000, ' ms')}", file=sys.stderr)
    print(f"daemon RSS: median {statistics.median(rss) / 2**20:.1f} MiB, "
          f"max {max(rss) / 2**20:.1f} MiB", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
