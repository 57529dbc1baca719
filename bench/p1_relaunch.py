"""P1: from a CUDA OOM line to (a) the attempt's process tree gone, (b) the next attempt up.

Each repetition is one real ``dsguard run job.yaml --quiet`` (a fresh temp dir) with
``limits.fatal_grace_s: 0`` and ``backoff_s: [0, 0]``: the SIGTERM grace is excluded, as the
issue asks (with the default ``fatal_grace_s: 2`` a trainer that ignores SIGTERM costs up to
2 s more; P2 reports that). See ``bench/relaunch.py`` for the timeline.

Run: ``python -m bench.run P1`` (``--quick``: 5 repetitions instead of 20).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import summarize, time_commands
from bench.relaunch import Trial, breakdown, interpreter_start_s, run_trial

LIMITS = {"fatal_grace_s": 0, "backoff_s": [0, 0], "max_attempts": 3}
#: What the exec shim does (parent-death signal, then exec), without importing anything from
#: site-packages: a candidate replacement, timed next to the shipped shim.
INLINE_SHIM = (
    "import ctypes,os,sys; ctypes.CDLL(None).prctl(1, 15, 0, 0, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def launch_overhead(runs: int) -> tuple[str, dict[str, dict[str, float]]]:
    """What starting an attempt through ``python -m dsguard.run.exec_shim`` adds."""
    py = sys.executable
    child = [py, "-c", "pass"]
    cmds = {
        "python -c pass": child,
        "python -m dsguard.run.exec_shim -- python -c pass": [
            py, "-m", "dsguard.run.exec_shim", "--", *child,
        ],
        "python -I -S -c INLINE_SHIM python -c pass": [py, "-I", "-S", "-c", INLINE_SHIM, *child],
    }  # fmt: skip
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        cmds["setpriv --pdeathsig TERM -- python -c pass"] = [
            setpriv, "--pdeathsig", "TERM", "--", *child,
        ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dsguard-p1s-") as d:
        return time_commands(cmds, runs, Path(d))


def run(quick: bool = False) -> dict[str, Any]:
    reps = 5 if quick else 20
    trials: list[Trial] = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="dsguard-p1-") as d:
            trials.append(run_trial(Path(d), ["oom"], 1, LIMITS))
    gone = [t.gone_after() for t in trials]
    nxt = [t.next_first_statement - t.t_oom for t in trials]
    fork = [t.next_fork - t.t_oom for t in trials if t.next_fork is not None]
    return {
        "reps": reps,
        "limits": LIMITS,
        "a_tree_gone_s": summarize(gone).as_dict(),
        "b_next_first_statement_s": summarize(nxt).as_dict(),
        "b_next_fork_s": summarize(fork).as_dict() if fork else None,
        "breakdown_s": {k: summarize(v).as_dict() for k, v in breakdown(trials).items() if v},
        "end_attempt_duration_s": summarize(
            float(t.event_field("attempt_ended", "duration_s")) for t in trials
        ).as_dict(),
        "python_c_pass_s": interpreter_start_s(),
        "launch_overhead": launch_overhead(10 if quick else 30),
        "raw": {"a": gone, "b": nxt},
    }


def markdown(res: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, float]) -> str:
        return (
            f"| {label} | {s['median'] * 1000:.0f} | {s['min'] * 1000:.0f} | "
            f"{s['p90'] * 1000:.0f} | {s['max'] * 1000:.0f} |"
        )

    lines = [
        f"{res['reps']} repetitions, `fatal_grace_s: 0`, `backoff_s: [0, 0]`; milliseconds "
        "after the OOM line's write:\n",
        "| milestone | median | min | p90 | max |",
        "|---|---:|---:|---:|---:|",
        row("**(a) attempt's process tree gone** (pidfd)", res["a_tree_gone_s"]),
        row("**(b) next attempt's first Python statement**", res["b_next_first_statement_s"]),
    ]
    if res["b_next_fork_s"]:
        lines.append(row("(b') next attempt's process created (kernel, 10 ms ticks)",
                         res["b_next_fork_s"]))  # fmt: skip
    for label, s in res["breakdown_s"].items():
        lines.append(row(f"dsguard event: {label}", s))
    e = res["end_attempt_duration_s"]
    lines.append(
        f"\n`end_attempt` itself (event `attempt_ended.duration_s`): median "
        f"{e['median'] * 1000:.0f} ms. `python -c pass` with this interpreter: "
        f"{res['python_c_pass_s'] * 1000:.0f} ms (part of (b) but not of (b')).\n"
    )
    tool, timing = res["launch_overhead"]
    lines += [
        f"Every attempt starts through dsguard's exec shim; its cost ({tool}, milliseconds; "
        f"`INLINE_SHIM` = `{INLINE_SHIM}`):\n",
        "| command | median | min | p90 | mean user + sys CPU |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t in timing.items():
        lines.append(
            f"| `{name}` | {t['median'] * 1000:.0f} | {t['min'] * 1000:.0f} | "
            f"{t['p90'] * 1000:.0f} | {(t['user'] + t['system']) * 1000:.0f} |"
        )
    return "\n".join(lines)
