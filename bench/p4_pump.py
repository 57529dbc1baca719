"""P4 attribution: what the output pump thread costs per second at 1,000 lines/s, and why.

In-process, so the pump thread's own CPU can be read exactly (``/proc/self/task/TID/schedstat``,
nanoseconds on CPU): ``children.py print`` writes realistic lines at 1,000/s (one ``write``
each) into a pipe read by ``watch.OutputPump``, exactly as in a supervised run but without the
rest of the supervisor. The coalescing window ``watch._COALESCE_S`` (the sleep after a small
read) is varied from this benchmark (the source is not changed) to show that the pump's CPU
follows its wakeup count, not the bytes. A ``cProfile`` run with a CPU-time timer gives the
per-function split at the shipped setting.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import CHILDREN, read_jsonl, wait_for
from bench.logsynth import synth
from dsguard.core.classify import Evidence, StreamClassifier
from dsguard.run import watch
from dsguard.run.watch import OutputPump

RATE = 1000


def _thread_cpu_ns(tid: int) -> int:
    return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])


def _thread_wakeups(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def _printer(tmp: Path, duration: float, w: int) -> tuple[subprocess.Popen[bytes], Path]:
    side = tmp / "side.jsonl"
    lines = tmp / "lines.txt"
    if not lines.exists():
        lines.write_text(synth(int(RATE * duration), seed=4, failures=False).text)
    side.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(CHILDREN), "print", "--side", str(side), "--lines", str(lines),
         "--rate", str(RATE), "--duration", str(duration)],
        stdout=w, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, side


def _one(tmp: Path, duration: float, coalesce_s: float) -> dict[str, float]:
    r, w = os.pipe()
    proc, side = _printer(tmp, duration, w)
    os.close(w)
    fatal: list[Evidence] = []
    saved = watch._COALESCE_S
    watch._COALESCE_S = coalesce_s
    try:
        pump = OutputPump(r, tmp / "attempt.log", StreamClassifier(), on_fatal=fatal.append)
        pump.start()
        tid = pump._thread.native_id
        assert tid is not None
        start = wait_for(lambda: next((x for x in read_jsonl(side) if x["ev"] == "start"), None),
                         30.0)  # fmt: skip
        time.sleep(max(0.0, float(start["t"]) + 1.0 - time.time()))
        c0, x0, t0 = _thread_cpu_ns(tid), _thread_wakeups(tid), time.monotonic()
        time.sleep(max(0.5, duration - 2.0))
        c1, x1, t1 = _thread_cpu_ns(tid), _thread_wakeups(tid), time.monotonic()
        proc.wait(60.0)
        pump.join(10.0)
    finally:
        watch._COALESCE_S = saved
        os.close(r)
    secs = t1 - t0
    wakes = (x1 - x0) / secs
    cpu_pct = (c1 - c0) / 1e9 / secs * 100
    return {
        "coalesce_s": coalesce_s,
        "pump_cpu_pct": cpu_pct,
        "pump_wakeups_per_s": wakes,
        "cpu_us_per_wakeup": (c1 - c0) / 1e3 / max(1.0, x1 - x0),
    }


def _profile(tmp: Path, duration: float) -> list[tuple[str, float, int]]:
    """cProfile (thread CPU-time timer) of the pump thread at the shipped setting."""
    r, w = os.pipe()
    proc, _side = _printer(tmp, duration, w)
    os.close(w)
    pump = OutputPump(r, tmp / "attempt.log", StreamClassifier(), on_fatal=lambda _ev: None)
    prof = cProfile.Profile(time.thread_time)

    def body() -> None:
        prof.enable()
        try:
            pump._run()
        finally:
            prof.disable()

    th = threading.Thread(target=body)
    th.start()
    proc.wait(60.0)
    th.join(10.0)
    os.close(r)
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows: list[tuple[str, float, int]] = []
    for (file, line, func), (_cc, nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(file).name}:{line}({func})" if line else func
        rows.append((where, tt / total * 100 if total else 0.0, nc))
    rows.sort(key=lambda row: -row[1])
    return rows[:8]


def run(quick: bool = False) -> dict[str, Any]:
    duration = 6.0 if quick else 15.0
    out: dict[str, Any] = {"duration_s": duration, "rate": RATE, "variants": []}
    with tempfile.TemporaryDirectory(prefix="dsguard-p4p-") as d:
        tmp = Path(d)
        # 10 ms was the first release's window; each value once, the shipped one included.
        for coalesce in sorted({0.01, 0.05, 0.1, watch._COALESCE_S}):
            out["variants"].append(_one(tmp, duration, coalesce))
        out["profile"] = _profile(tmp, duration)
    out["shipped_coalesce_s"] = watch._COALESCE_S
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"Pump thread alone, in-process, {res['rate']:,} lines/s for {res['duration_s']:.0f} s "
        "(thread CPU from schedstat):\n",
        "| `watch._COALESCE_S` | pump thread CPU % of a core | wakeups/s | CPU us per wakeup |",
        "|---:|---:|---:|---:|",
    ]
    for v in res["variants"]:
        mark = " (shipped)" if v["coalesce_s"] == res["shipped_coalesce_s"] else ""
        lines.append(
            f"| {v['coalesce_s'] * 1000:.0f} ms{mark} | {v['pump_cpu_pct']:.2f} | "
            f"{v['pump_wakeups_per_s']:.0f} | {v['cpu_us_per_wakeup']:.0f} |"
        )
    lines.append(
        "\ncProfile of the pump thread at the shipped setting (CPU-time timer; share of the "
        "thread's profiled CPU, own time):\n"
    )
    lines.append("| function | % | calls |")
    lines.append("|---|---:|---:|")
    for where, pct, calls in res["profile"]:
        lines.append(f"| `{where}` | {pct:.0f} | {calls:,} |")
    return "\n".join(lines) + "\n"
