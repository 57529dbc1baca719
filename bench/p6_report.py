"""P6 report: how long ``dsguard report`` takes and how big its page is for a long, eventful
night: 50 attempts (49 failures, a new phase at attempt 25, every relaunch resuming 20 steps
back so steps are replayed) and 10,000 heartbeats in the history. Target: under 1 s.

Run: ``python -m bench.run P6`` or ``python -m bench.p6_report``.
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT

ATTEMPTS, HEARTBEATS = 50, 10_000


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def synth_log_dir(root: Path, attempts: int = ATTEMPTS, heartbeats: int = HEARTBEATS) -> None:
    """A log dir with ``attempts`` attempts and ``heartbeats`` heartbeat history lines."""
    (root / "heartbeat").mkdir(parents=True)
    t, per = 1_790_000_000.0, heartbeats // attempts
    knobs = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 2048}
    ctx = {"run_id": "bench", "job": "bench"}
    evs: list[dict[str, Any]] = [
        {"event": "run_started", "attempt": None, "knobs": knobs, "global_batch": 64,
         "job_file": None, "recovered": False, "ts": t},
    ]  # fmt: skip
    step, phase = 0, 1
    for n in range(1, attempts + 1):
        if n == attempts // 2:
            phase, step = phase + 1, 0
            evs.append({"event": "phase_started", "attempt": n, "phase": phase, "ts": t,
                        "reason": "zero3"})  # fmt: skip
        evs.append({"event": "checkpoint_selected", "attempt": n, "step": step or None, "ts": t})
        evs.append({"event": "attempt_started", "attempt": n, "knobs": knobs, "global_batch": 64,
                    "phase": phase, "ts": t})  # fmt: skip
        lines = []
        for i in range(per):
            t += 2.0
            step += 1
            lines.append(json.dumps({
                "attempt": n, "rank": 0, "pid": 1, "time_s": t, "event": "step",
                "global_step": step, "loss": 3.0 / (1 + 0.01 * step) + 0.05 * (i % 7),
                "max_memory_reserved_bytes": (60 << 30) + i * (1 << 20),
                "host_rss_bytes": (20 << 30) + i * (1 << 20),
            }))  # fmt: skip
        (root / "heartbeat" / f"attempt-{n}-rank-0.jsonl").write_text("\n".join(lines) + "\n")
        code = 0 if n == attempts else 1
        evs.append({"event": "attempt_finished", "attempt": n, "exit_code": code,
                    "ended_by": "exit", "duration_s": per * 2.0, "last_step": step,
                    "ts": t})  # fmt: skip
        if n < attempts:
            evs.append({"event": "failure_detected", "attempt": n, "kind": "cuda_oom", "ts": t})
            evs.append({"event": "policy_applied", "attempt": n, "rung": "micro_batch",
                        "changes": {}, "new_phase": False, "delay_s": 30.0, "ts": t})  # fmt: skip
            evs.append({"event": "plan_applied", "attempt": n + 1, "ts": t,
                        "predicted_gpu_peak_bytes": 62 << 30,
                        "gpu_total_bytes": 80 << 30})  # fmt: skip
            t += 30.0
            step = max(0, step - 20)
    evs.append({"event": "run_succeeded", "attempt": attempts, "reason": "exit 0", "changes": {},
                "global_batch": 64, "initial_global_batch": 64, "ts": t})  # fmt: skip
    with open(root / "events.jsonl", "w", encoding="utf-8") as f:
        for ev in evs:
            f.write(json.dumps({"ts": _ts(float(ev.pop("ts", t))), **ctx, **ev}) + "\n")


def run(quick: bool) -> dict[str, Any]:
    from dsguard.report.html import page
    from dsguard.report.load import read_log_dir

    reps = 3 if quick else 9
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "log"
        synth_log_dir(root)
        times, html = [], ""
        for _ in range(reps):
            t0 = time.perf_counter()
            view = read_log_dir(root)
            html = page([("bench", view)])
            times.append(time.perf_counter() - t0)
        cli = []
        for _ in range(max(1, reps // 3)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dsguard", "report", str(root), "--out",
                            str(Path(tmp) / "r.html")], check=True, cwd=REPO_ROOT,
                           capture_output=True)  # fmt: skip
            cli.append(time.perf_counter() - t0)
        data = html.encode()
        return {
            "attempts": ATTEMPTS, "heartbeats": HEARTBEATS, "reps": reps,
            "events_bytes": (root / "events.jsonl").stat().st_size,
            "build_and_render_s": {"median": statistics.median(times), "max": max(times)},
            "cli_wall_s": {"median": statistics.median(cli), "max": max(cli)},
            "html_bytes": len(data), "html_gzip_bytes": len(gzip.compress(data)),
        }  # fmt: skip


def markdown(res: dict[str, Any]) -> str:
    b, c = res["build_and_render_s"], res["cli_wall_s"]
    return "\n".join([
        f"{res['attempts']} attempts, {res['heartbeats']:,} heartbeats "
        f"(events.jsonl {res['events_bytes'] / 1e3:.0f} kB), {res['reps']} repetitions:\n",
        "| what | median | max |", "|---|---:|---:|",
        f"| read log dir + summarise + render HTML (in process) | **{b['median'] * 1e3:.0f} ms** "
        f"| {b['max'] * 1e3:.0f} ms |",
        f"| `dsguard report LOG_DIR` (whole command, interpreter start included) | "
        f"**{c['median'] * 1e3:.0f} ms** | {c['max'] * 1e3:.0f} ms |",
        "",
        f"HTML: **{res['html_bytes'] / 1e3:.0f} kB** ({res['html_gzip_bytes'] / 1e3:.0f} kB "
        "gzipped); target < 1 s.",
    ])  # fmt: skip


if __name__ == "__main__":
    out = run("--quick" in sys.argv)
    print(markdown(out))
