"""Entry point: ``python -m bench.run [P1 .. P6 P5FIT P5SCALE P5RUNCLM classify] [--quick]
[--json F]``.

Runs the chosen benchmarks (all by default) one after the other and prints a Markdown report
(machine facts, then one section per benchmark with the command that reproduces it). ``--quick``
uses fewer repetitions and shorter windows: a smoke check, not numbers to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import (
    p1_relaunch,
    p2_hung_ranks,
    p3_classifier,
    p4_footprint,
    p5_fit,
    p5_healing,
    p5_runclm,
    p5_scale,
    p6_report,
    p_classify,
)
from bench.common import REPO_ROOT, machine_info

BENCHMARKS: dict[str, tuple[str, Callable[[bool], dict[str, Any]], Callable[..., str]]] = {
    "P1": ("P1 detection to relaunch", p1_relaunch.run, p1_relaunch.markdown),
    "P2": ("P2 hung ranks", p2_hung_ranks.run, p2_hung_ranks.markdown),
    "P3": ("P3 classifier throughput", p3_classifier.run, p3_classifier.markdown),
    "P4": ("P4 footprint and start-up", p4_footprint.run, p4_footprint.markdown),
    "P5": ("P5 healing efficiency", p5_healing.run, p5_healing.markdown),
    "P5FIT": ("P5 first fit and the estimator", p5_fit.run, p5_fit.markdown),
    "P5SCALE": (
        "P5 at scale: first fit, store, fit_probe (replay)",
        p5_scale.run,
        p5_scale.markdown,
    ),
    "P5RUNCLM": (
        "P5 run_clm: DeepSpeed's reduce bucket under a host limit (live)",
        p5_runclm.run,
        p5_runclm.markdown,
    ),
    "P6": ("P6 report generation", p6_report.run, p6_report.markdown),
    "CLASSIFY": ("Classifier accuracy on real logs", p_classify.run, p_classify.markdown),
}


def _git_rev() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    rev = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--", "src")
    return f"{rev}{' + uncommitted changes in src/' if dirty else ''}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "which",
        nargs="*",
        metavar="P1|P2|P3|P4|P5|P5FIT|P5SCALE|P5RUNCLM|P6|classify",
        help="default: all",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke check)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    ns = parser.parse_args(argv)
    which = [w.upper() for w in ns.which] or list(BENCHMARKS)
    unknown = [w for w in which if w not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    info = machine_info()
    info["git"] = _git_rev()
    report = [
        "## Machine\n",
        *(f"- {k}: {v}" for k, v in info.items()),
        f"- mode: {'--quick (smoke check)' if ns.quick else 'full'}",
        "",
    ]
    results: dict[str, Any] = {"machine": info, "quick": ns.quick}
    quick_flag = " --quick" if ns.quick else ""
    for key in which:
        title, run, md = BENCHMARKS[key]
        print(f"running {title} ...", file=sys.stderr, flush=True)
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        res = run(ns.quick)
        res["wall_s"] = time.monotonic() - t0
        res["loadavg_1m_before_after"] = [load0, os.getloadavg()[0]]
        results[key] = res
        report += [
            f"## {title}\n",
            f"Command: `python -m bench.run {key}{quick_flag}` "
            f"({res['wall_s']:.0f} s; 1-min load average {load0:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after)\n",
            md(res),
            "",
        ]
    text = "\n".join(report)
    print(text)
    if ns.markdown is not None:
        ns.markdown.write_text(text)
    if ns.json is not None:
        ns.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
