"""P2: one rank OOMs and exits, its peer hangs (an NCCL collective): time until both are gone.

The attempt is ``children.py launcher``: a small Python launcher that starts two ranks in its
own session (as ``deepspeed``'s per-node launcher does) and waits for them. Rank 0 prints a
``[rank0]:``-prefixed CUDA OOM traceback and exits 1; rank 1 blocks forever. The launcher here
never tears its ranks down itself (the real DeepSpeed launcher SIGTERMs the others about 1 s
after a rank fails; torchrun's agent stops them too), so this is the worst case in which only
dsguard ends the hang. Without dsguard the hang lasts the NCCL timeout (600 s+).

Configurations, each a real ``dsguard run`` per repetition:

* ``grace 0``: ``fatal_grace_s: 0`` (SIGKILL at once; the P2 target, <= 2 s);
* ``default grace, rank 1 dies on SIGTERM``: ``fatal_grace_s`` left at its default (2 s);
* ``default grace, rank 1 ignores SIGTERM``: the same, with a rank whose Python SIGTERM
  handler cannot run while it is blocked in C: it dies only at the SIGKILL after the grace.

Run: ``python -m bench.run P2`` (``--quick``: 3 repetitions per configuration, not 20).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.common import summarize
from bench.relaunch import Trial, breakdown, run_trial

CONFIGS: tuple[tuple[str, str, dict[str, Any], list[str]], ...] = (
    ("grace0", "`fatal_grace_s: 0`", {"fatal_grace_s": 0}, []),
    (
        "default_term_ok",
        "default `fatal_grace_s` (2 s), rank 1 dies on SIGTERM",
        {},
        [],
    ),
    (
        "default_term_ignored",
        "default `fatal_grace_s` (2 s), rank 1 ignores SIGTERM",
        {},
        ["--ignore_term"],
    ),
)


def run(quick: bool = False) -> dict[str, Any]:
    reps = 3 if quick else 20
    out: dict[str, Any] = {"reps": reps, "configs": {}}
    for key, label, extra_limits, extra_args in CONFIGS:
        limits = {"backoff_s": [0, 0], "max_attempts": 3, **extra_limits}
        trials: list[Trial] = []
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="dsguard-p2-") as d:
                trials.append(run_trial(Path(d), ["launcher", *extra_args], 3, limits))
        ranks = [t.gone_after("rank0", "rank1") for t in trials]
        tree = [t.gone_after() for t in trials]
        nxt = [t.next_first_statement - t.t_oom for t in trials]
        out["configs"][key] = {
            "label": label,
            "limits": limits,
            "both_ranks_gone_s": summarize(ranks).as_dict(),
            "tree_gone_s": summarize(tree).as_dict(),
            "rank0_exit_s": summarize(t.gone_after("rank0") for t in trials).as_dict(),
            "next_launcher_first_statement_s": summarize(nxt).as_dict(),
            "breakdown_s": {k: summarize(v).as_dict() for k, v in breakdown(trials).items() if v},
            "end_attempt_duration_s": summarize(
                float(t.event_field("attempt_ended", "duration_s")) for t in trials
            ).as_dict(),
            "killed_pids": [len(t.event_field("attempt_ended", "killed_pids")) for t in trials],
            "terminated_pids": [
                len(t.event_field("attempt_ended", "terminated_pids")) for t in trials
            ],
            "raw_both_ranks_gone_s": ranks,
        }
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"{res['reps']} repetitions per configuration; milliseconds after rank 0's OOM write:\n",
        "| configuration | both ranks gone (median / min / p90 / max) | launcher+ranks gone "
        "(median) | next attempt's launcher up (median) | end_attempt (median) |",
        "|---|---|---:|---:|---:|",
    ]
    for c in res["configs"].values():
        r = c["both_ranks_gone_s"]
        lines.append(
            f"| {c['label']} | **{r['median'] * 1000:.0f}** / {r['min'] * 1000:.0f} / "
            f"{r['p90'] * 1000:.0f} / {r['max'] * 1000:.0f} | "
            f"{c['tree_gone_s']['median'] * 1000:.0f} | "
            f"{c['next_launcher_first_statement_s']['median'] * 1000:.0f} | "
            f"{c['end_attempt_duration_s']['median'] * 1000:.0f} |"
        )
    return "\n".join(lines) + "\n"
