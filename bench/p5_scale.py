"""P5 at the issue's scale: 9 budget scenarios over 2 model sizes, replayed on P5's measured
peaks and throughputs, for four policies side by side (fixed ladder, first fit with a fresh
store, warm store, warm store with ``fit_probe``).

**What is measured and what is modelled.** Every number this replay uses was measured by P5
(``bench/p5_results.json``, 2026-11-22, dsguard's reference trainer, fp32 ZeRO-2 on CPU, eager
attention, ``RLIMIT_AS`` budgets): the peak virtual memory (``VmPeak``) of each micro-batch
(the largest seen in any run that fitted, or the unlimited profile run), and the median
samples/s of 3 runs of every config that fits somewhere. Those are properties of the trainer
and the config, not of dsguard's code, so they still hold for this branch. What is replayed
is dsguard's *decisions*, with its real pure code (``core.fit.plan_fit``, the estimate, the
store's fastest-known choice, ``core.throughput.choose_probe``):

* a config *fits* a budget when its measured ``VmPeak`` is below it (P5's allocations are
  deterministic: same seed, same data; P5's sweep reused cells on that ground). **The live
  runs (P5LIVE in RESULTS) show this is too kind near the edge:** the address space a
  process takes grows into what it is allowed (1x16 of the small model: ``VmPeak`` 2.76-2.78
  GiB without a limit, 1.53-1.54 GiB under a 1.54 GiB one, P5's 1.44 GiB under 1.93 GiB), so
  ``VmPeak`` is not the need, and a config within a few % of the limit fits in one run and
  not the next; S1, S2 and T1's budgets sit there;
* after a memory failure the ladder halves the micro-batch (what P5's runs did every time;
  the evidence-driven ladder may pick another exact rung, not replayed here);
* seconds lost = failed attempts x the seconds P5 measured per failed attempt of the same
  model and length (start-up plus part of step 1: tiny 11.1 s, small L=512 18.4 s, small
  L=1024 13.3 s) -- modelled, not timed;
* the throughput of a config is P5's median; the exhaustive sweep's best is the fastest
  config that fits the budget.

Scenarios A-E are P5's (same budgets, so P5's live HF ``auto_find_batch_size`` runs are
their HF column); T1, S1, S2, L1 are new budgets placed as P5 placed its budgets (midway
between the peaks of adjacent micro-batches), covering the halvings P5 did not.

Edge budgets (``edge_scenarios``, replay only): 3 % above the peak of each micro-batch and
3 % below the next one's, where the estimate's 10 % margin is wider than the headroom (the
first fit then starts smaller than the largest fitting micro-batch) or nearly the whole gap.
With them: 9 budgets for the tiny model, 16 for the small one (two lengths).

**Live, every policy (``--policies``).** Each named scenario for real through ``dsguard run``
(P5's job, 4 optimizer steps, ``RLIMIT_AS`` at the budget, the trainer run as
``bench.p5_train`` so each attempt's log ends with its ``VmPeak``) under the fixed ladder
(``fit: false``, a store of its own), first fit with a fresh store, and the store that run
filled (``warm``, repeatable). Failed attempts, seconds lost (first attempt's start to the last
one's, or to the give-up), final config and samples/s come from ``events.jsonl`` and P5's step
trace; the work dirs (events, attempt logs, rendered DeepSpeed configs) are kept under
``--keep``. DeepSpeed JIT-builds its CPU shm op at every start when its cache does not match
this venv's paths; a build under the budget fails (the compiler inherits ``RLIMIT_AS``), so the
runs use a private ``TORCH_EXTENSIONS_DIR`` built once outside the limit (RESULTS, P5LIVE).

Run: ``python -m bench.p5_scale [--json F]`` (seconds; no training);
``python -m bench.p5_scale --policies S1,S2 --phases fresh,warm,ladder --keep DIR
--live-json F`` (minutes per scenario), ``--policies-report F`` for its table.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO_ROOT
from bench.p5_fit import CTX, GIB, REGIME, RESULTS, knobs, shape
from dsguard.core.estimate import estimate
from dsguard.core.fit import DEFAULT_MARGIN, FitInputs, KnownOutcome, fits, plan_fit
from dsguard.core.throughput import (
    InRunProbe,
    ProbeMove,
    choose_probe,
    probe_memory_failure,
    probe_rate,
)
from dsguard.job.knobs import Knobs
from dsguard.job.model import HOST_OOM_RUNGS, IN_RUN_PROBE_STEPS, OOM_RUNGS

MIB = 2**20
#: Seconds P5 measured per failed attempt (lost_s / failed attempts), by model and length.
LOST_PER_FAILURE_S = {("tiny", 2048): (12.06 + 21.36) / 3, ("small", 512): (19.44 + 35.82) / 3,
                      ("small", 1024): 13.34}  # fmt: skip
#: Runs of the same job replayed for the probe (each probes at most one config).
PROBE_RUNS = 6


@dataclass(frozen=True)
class Scn:
    name: str
    model: str
    max_length: int
    micro: int
    accum: int
    budget: int
    source: str  # "P5" (budget and HF from P5's live runs) or "new"

    @property
    def family(self) -> tuple[str, int]:
        return (self.model, self.max_length)


def _peaks(data: dict[str, Any]) -> dict[tuple[str, int, int], int]:
    """(model, max_length, micro) -> VmPeak: the largest seen in the unlimited profile or in
    any sweep run that fitted (a failed run's VmPeak is only the budget)."""
    out: dict[tuple[str, int, int], int] = {}
    for p in data["profile"]:
        k = (p["model"], p["max_length"], p["micro"])
        out[k] = max(out.get(k, 0), p["vm_peak"])
    for s in data["scenarios"]:
        sc = s["scenario"]
        for r in s["sweep"]:
            if r["fits"] and r["vm_peak"]:
                k = (sc["model"], sc["max_length"], r["micro"])
                out[k] = max(out.get(k, 0), r["vm_peak"])
    return out


def _rates(data: dict[str, Any]) -> dict[tuple[str, int, int], float]:
    return {
        (c["model"], c["max_length"], c["micro"]): c["median_wall"]
        for c in data["throughput"]["configs"].values()
    }


def scenarios(data: dict[str, Any], peaks: dict[tuple[str, int, int], int]) -> list[Scn]:
    out = [
        Scn(s["scenario"]["name"], s["scenario"]["model"], s["scenario"]["max_length"],
            s["scenario"]["micro"], s["scenario"]["accum"], s["budget"], "P5")
        for s in data["scenarios"]
    ]  # fmt: skip

    def mid(model: str, length: int, fit: int) -> int:
        a, b = peaks[(model, length, fit)], peaks[(model, length, fit * 2)]
        return (a + (b - a) // 2) // MIB * MIB

    out += [
        Scn("T1", "tiny", 2048, 8, 1, mid("tiny", 2048, 1), "new"),
        Scn("S1", "small", 512, 16, 1, mid("small", 512, 1), "new"),
        Scn("S2", "small", 512, 16, 1, mid("small", 512, 2), "new"),
        Scn("L1", "small", 1024, 4, 2, mid("small", 1024, 1), "new"),
    ]
    for e in edge_scenarios(peaks):
        # one budget within 1 % of another of the same family adds nothing (S2's gap is 6 %)
        if not any(o.family == e.family and abs(o.budget - e.budget) < 0.01 * e.budget
                   for o in out):  # fmt: skip
            out.append(e)
    return out


#: The start config of each family (model, max_length): P5's (micro, accum), global batch kept.
STARTS = {("tiny", 2048): (8, 1), ("small", 512): (16, 1), ("small", 1024): (4, 2)}
#: Where the edge budgets sit: this much above the peak of the largest micro that fits
#: ("tight": the estimate's 10 % margin is then wider than the headroom) or below the peak
#: of the next micro ("loose": the headroom is nearly the whole gap).
EDGE = 0.03


def edge_scenarios(peaks: dict[tuple[str, int, int], int]) -> list[Scn]:
    """Budgets at both edges of every gap between adjacent micro-batches' peaks (replay
    only): with the midpoint scenarios, at least 8 budgets per model size."""
    out = []
    prefix = {("tiny", 2048): "T", ("small", 512): "S", ("small", 1024): "L"}
    for (model, length), (micro, accum) in STARTS.items():
        m = 1
        while m * 2 <= micro:
            lo, hi = peaks[(model, length, m)], peaks[(model, length, m * 2)]
            for tag, budget in (("t", int(lo * (1 + EDGE))), ("l", int(hi * (1 - EDGE)))):
                name = f"{prefix[(model, length)]}{m}{tag}"
                out.append(Scn(name, model, length, micro, accum, budget // MIB * MIB, "edge"))
            m *= 2
    return out


def _fits(sc: Scn, k: Knobs, peaks: dict[tuple[str, int, int], int]) -> bool:
    return peaks[(sc.model, sc.max_length, k.micro_batch_size)] <= sc.budget


def _halve_until_fit(
    sc: Scn, k: Knobs, peaks: dict[tuple[str, int, int], int]
) -> tuple[Knobs, list[Knobs]]:
    """The fixed micro-batch ladder from ``k``: (the config that fits, the ones that failed)."""
    failed: list[Knobs] = []
    while not _fits(sc, k, peaks):
        failed.append(k)
        per = k.micro_batch_size * k.gradient_accumulation_steps
        k = k.replace(micro_batch_size=k.micro_batch_size // 2,
                      gradient_accumulation_steps=per // (k.micro_batch_size // 2))  # fmt: skip
    return k, failed


def _inputs(sc: Scn) -> FitInputs:
    return FitInputs(shape(sc.model), REGIME, sc.budget, rungs=(*OOM_RUNGS, *HOST_OOM_RUNGS))


def _label(k: Knobs) -> str:
    return f"{k.micro_batch_size}x{k.gradient_accumulation_steps}"


def replay_scenario(
    sc: Scn, peaks: dict[tuple[str, int, int], int], rates: dict[tuple[str, int, int], float]
) -> dict[str, Any]:
    start = knobs(sc.max_length, sc.micro, sc.accum)
    rate = {m: r for (mo, le, m), r in rates.items() if (mo, le) == sc.family}
    fitting = [m for m in rate if peaks[(sc.model, sc.max_length, m)] <= sc.budget]
    best_micro = max(fitting, key=lambda m: rate[m])
    best = rate[best_micro]
    cost = LOST_PER_FAILURE_S[sc.family]

    ladder_final, ladder_failed = _halve_until_fit(sc, start, peaks)
    inputs = _inputs(sc)
    plan = plan_fit(start, CTX, inputs)
    planned = plan.chosen.knobs if plan.chosen is not None else start
    fresh_final, fresh_failed = _halve_until_fit(sc, planned, peaks)

    # The store after the fresh run: its failures and its final config's measured rate.
    known: dict[Knobs, KnownOutcome] = {k: KnownOutcome(False) for k in fresh_failed}
    known[fresh_final] = KnownOutcome(True, rate[fresh_final.micro_batch_size])
    warm = plan_fit(start, CTX, inputs, known)
    warm_start = warm.chosen.knobs if warm.chosen is not None else start
    warm_final, warm_failed = _halve_until_fit(sc, warm_start, peaks)

    probe = _probe_runs(sc, start, inputs, dict(known), peaks=peaks, rate=rate)
    inrun = _in_run_probe(sc, fresh_final, set(fresh_failed), inputs, peaks=peaks, rate=rate)
    inrun["failed"] += len(fresh_failed)
    probe_s = inrun["switches"] * cost + inrun["slow_s"]
    inrun["lost_s"] = round(probe_s + len(fresh_failed) * cost, 1)
    # Training time (at the kept config) after which the faster config has won back what the
    # probe cost: lost = T x (r_kept / r_start - 1).
    gain = rate[inrun["final_micro"]] / rate[fresh_final.micro_batch_size] - 1
    inrun["break_even_min"] = round(probe_s / gain / 60, 1) if gain > 0 else None
    return {
        "scenario": sc.name, "source": sc.source, "model": sc.model,
        "max_length": sc.max_length, "start": _label(start), "budget": sc.budget,
        "largest_fitting": _label(ladder_final),
        "best": f"{best_micro}x{sc.micro * sc.accum // best_micro}",
        "best_samples_per_s": best,
        "ladder": {"failed": len(ladder_failed), "lost_s": round(len(ladder_failed) * cost, 1),
                   "final": _label(ladder_final),
                   "of_best": rate[ladder_final.micro_batch_size] / best},
        "fresh": {"planned": _label(planned), "plan_note": plan.note,
                  "failed": len(fresh_failed), "lost_s": round(len(fresh_failed) * cost, 1),
                  "final": _label(fresh_final),
                  "of_best": rate[fresh_final.micro_batch_size] / best},
        "warm": {"source": warm.source, "failed": len(warm_failed), "final": _label(warm_final),
                 "lost_s": round(len(warm_failed) * cost, 1),
                 "of_best": rate[warm_final.micro_batch_size] / best},
        "probe": probe | {"of_best": probe["final_rate"] / best,
                          "lost_s": round(probe["failed"] * cost, 1),
                          "probe_runs_of_best": [round(x / best, 3) for x in probe["probe_rates"]]},
        "inrun": inrun | {"of_best": rate[inrun["final_micro"]] / best},
    }  # fmt: skip


def _probe_runs(
    sc: Scn, start: Knobs, inputs: FitInputs, known: dict[Knobs, KnownOutcome], *,
    peaks: dict[tuple[str, int, int], int], rate: dict[int, float],
) -> dict[str, Any]:  # fmt: skip
    """Runs 2.. of the same job with ``fit_probe: true`` (run/fit.py's ``_with_probe``):
    each starts at the probe, or at the fastest known config once nothing is left to probe."""
    runs: list[str] = []
    probe_rates: list[float] = []
    failed = 0
    for _ in range(PROBE_RUNS):
        measured = {k: v.samples_per_s for k, v in known.items() if v.fits and v.samples_per_s}
        bad = {k for k, v in known.items() if not v.fits}

        def predicted(k: Knobs) -> bool:
            est = estimate(inputs.shape, k, inputs.regime)
            return fits(est, inputs.available_bytes, DEFAULT_MARGIN, None)

        choice = choose_probe(measured, bad, predicted)
        if choice is None:
            break
        final, oom = _halve_until_fit(sc, choice.knobs, peaks)
        failed += len(oom)
        for k in oom:
            known[k] = KnownOutcome(False)
        r = rate.get(final.micro_batch_size)
        known[final] = KnownOutcome(True, r)
        runs.append(f"{_label(choice.knobs)}{' (oom)' if oom else ''}")
        probe_rates.append(r or 0.0)
    plan = plan_fit(start, CTX, inputs, known)
    final = plan.chosen.knobs if plan.chosen is not None else start
    return {"probes": runs, "failed": failed, "final": _label(final),
            "final_rate": rate[final.micro_batch_size], "probe_rates": probe_rates}  # fmt: skip


def _in_run_probe(
    sc: Scn, start: Knobs, failed: set[Knobs], inputs: FitInputs, *,
    peaks: dict[tuple[str, int, int], int], rate: dict[int, float],
) -> dict[str, Any]:  # fmt: skip
    """One run with ``fit_probe: in_run`` on a fresh store (``core.throughput.probe_rate``,
    the loop's decisions): it starts where the first fit ended, each config measured at its
    P5 median rate; a config over the budget runs out of memory and the run goes back. Cost:
    one start-up (P5's seconds per failed attempt) per switch, plus the measured stretches
    (``IN_RUN_PROBE_STEPS`` + 1 steps each) run slower than the config kept would have.
    Steps redone: none, as the reference trainer saves on request before a switch (live:
    ``steps_redone`` 0); a trainer without save-and-stop redoes the steps since its last
    checkpoint on every switch (not modelled)."""

    def predicted(k: Knobs) -> bool:
        est = estimate(inputs.shape, k, inputs.regime)
        return fits(est, inputs.available_bytes, DEFAULT_MARGIN, None)

    p, at, ooms = InRunProbe(start, steps=IN_RUN_PROBE_STEPS), start, 0
    path, moves = [_label(start)], []
    measured: list[Knobs] = []
    while True:
        move: ProbeMove | None
        if _fits(sc, at, peaks):
            measured.append(at)
            p, move = probe_rate(p, at, rate[at.micro_batch_size], known={},
                                 known_failed=failed, predicted_fit=predicted)  # fmt: skip
        else:
            ooms += 1
            p, move = probe_memory_failure(p, at)
        if move is None:
            break
        moves.append(move.why)
        at = move.to
        path.append(_label(at) + (" (oom)" if not _fits(sc, at, peaks) else ""))
    final = p.kept or at
    gb = start.micro_batch_size * start.gradient_accumulation_steps
    steps = IN_RUN_PROBE_STEPS + 1
    slow_s = sum(max(0.0, steps * gb * (1 / rate[k.micro_batch_size]
                                        - 1 / rate[final.micro_batch_size]))
                 for k in measured)  # fmt: skip
    return {"path": path, "moves": moves, "switches": len(moves), "failed": ooms,
            "slow_s": round(slow_s, 1), "final": _label(final),
            "final_micro": final.micro_batch_size}  # fmt: skip


def hf_column(data: dict[str, Any]) -> dict[str, str]:
    """P5's live HF ``auto_find_batch_size`` runs (scenarios A-E only)."""
    out = {}
    for s in data["scenarios"]:
        hf, plain = s.get("hf") or {}, s.get("hf_plain")
        txt = f"{hf.get('tries')} tries, " + (
            f"micro {hf.get('final_micro')} (global {hf.get('global_batch_final')})"
            if hf.get("ok")
            else "no size found"
        )
        if plain:
            txt += f"; no DS: {plain.get('tries')} tries, micro {plain.get('final_micro')}"
        out[s["scenario"]["name"]] = txt
    return out


def run(quick: bool = True) -> dict[str, Any]:
    data = json.loads(RESULTS.read_text())
    peaks, rates = _peaks(data), _rates(data)
    rows = [replay_scenario(sc, peaks, rates) for sc in scenarios(data, peaks)]
    hf = hf_column(data)
    for r in rows:
        r["hf"] = hf.get(r["scenario"], "not run")

    def mean(policy: str, key: str) -> float:
        return float(statistics.mean(r[policy][key] for r in rows))

    summary = {
        p: {"mean_failed": mean(p, "failed"), "mean_lost_s": mean(p, "lost_s"),
            "min_of_best": min(r[p]["of_best"] for r in rows),
            "median_of_best": statistics.median(r[p]["of_best"] for r in rows)}
        for p in ("ladder", "fresh", "warm", "probe", "inrun")
    }  # fmt: skip
    errors: list[dict[str, Any]] = []
    for (model, length, micro), peak in sorted(peaks.items()):
        global_batch = {("tiny", 2048): 8, ("small", 512): 16, ("small", 1024): 8}[(model, length)]
        k = knobs(length, micro, global_batch // micro)
        predicted = estimate(shape(model), k, REGIME).host_peak_bytes
        errors.append(
            {
                "model": model,
                "max_length": length,
                "micro": micro,
                "vm_peak": peak,
                "predicted": predicted,
                "error_pct": 100 * (predicted - peak) / peak,
            }
        )
    abs_err = [abs(float(e["error_pct"])) for e in errors]
    return {
        "rows": rows, "summary": summary, "errors": errors,
        "median_abs_error_pct": statistics.median(abs_err), "worst_abs_error_pct": max(abs_err),
    }  # fmt: skip


def markdown(rep: dict[str, Any]) -> str:
    lines = [
        "| scenario | start | budget GiB | largest fitting | sweep best (samples/s) | fixed "
        "ladder: failed / lost s / final (of best) | first fit, fresh store: planned -> "
        "final, failed / lost s (of best) | warm store: start, failed (of best) | "
        "fit_probe runs: probes -> start (of best), failed | HF auto_find_batch_size (P5) |",
        "|---|---|---:|---|---|---|---|---|---|---|",
    ]
    for r in rep["rows"]:
        lad, fr, wa, pr = r["ladder"], r["fresh"], r["warm"], r["probe"]
        lines.append(
            f"| {r['scenario']} ({r['model']} L={r['max_length']}) | {r['start']} | "
            f"{r['budget'] / GIB:.2f} | {r['largest_fitting']} | {r['best']} "
            f"({r['best_samples_per_s']:.2f}) | {lad['failed']} / {lad['lost_s']} / "
            f"{lad['final']} ({lad['of_best']:.2f}) | {fr['planned']} -> {fr['final']}, "
            f"{fr['failed']} / {fr['lost_s']} ({fr['of_best']:.2f}) | {wa['final']} "
            f"({wa['source']}), {wa['failed']} ({wa['of_best']:.2f}) | "
            f"{', '.join(pr['probes']) or '-'} -> {pr['final']} ({pr['of_best']:.2f}), "
            f"{pr['failed']} | {r['hf']} |"
        )
    lines += [
        "",
        f"Estimator error on every measured VmPeak ({len(rep['errors'])} configs): median "
        f"|error| {rep['median_abs_error_pct']:.1f} %, worst {rep['worst_abs_error_pct']:.1f} %.",
        "",
        "| model | max_length | micro | measured VmPeak GiB | predicted GiB | error |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in rep["errors"]:
        lines.append(f"| {e['model']} | {e['max_length']} | {e['micro']} | "
                     f"{e['vm_peak'] / GIB:.2f} | {e['predicted'] / GIB:.2f} | "
                     f"{e['error_pct']:+.1f} % |")  # fmt: skip
    lines += ["", "| policy | mean failed attempts | mean s lost | throughput / sweep best: "
              "median | worst |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    names = {
        "ladder": "fixed ladder (fit off)",
        "fresh": "first fit, fresh store",
        "warm": "warm store (no probe)",
        "probe": "warm store after fit_probe runs",
        "inrun": "fit_probe: in_run, fresh store (one run)",
    }
    for p, s in rep["summary"].items():
        lines.append(f"| {names[p]} | {s['mean_failed']:.2f} | {s['mean_lost_s']:.1f} | "
                     f"{s['median_of_best']:.2f} | "
                     f"{s['min_of_best']:.2f} |")  # fmt: skip
    tail = inrun_markdown(rep["rows"]) + live_markdown(rep.get("live", []))
    return "\n".join(lines) + "\n" + tail


def inrun_markdown(rows: list[dict[str, Any]]) -> str:
    """``fit_probe: in_run``, one run per scenario on a fresh store (replayed)."""
    lines = [
        "",
        "| scenario | fit_probe: in_run path (one run, fresh store) | switches | out of memory "
        "| s lost (start-ups + slower stretches) | final (of best) | pays off after (min of "
        "training) |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        i = r.get("inrun")
        if i is None:
            continue
        even = i.get("break_even_min")
        lines.append(f"| {r['scenario']} | {' -> '.join(i['path'])} | {i['switches']} | "
                     f"{i['failed']} | {i['lost_s']} | {i['final']} ({i['of_best']:.2f}) | "
                     f"{'-' if even is None else f'{even:.1f}'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def live_markdown(rows: list[dict[str, Any]]) -> str:
    """The ``--live`` runs: dsguard fresh, dsguard ``fit_probe`` on the warm store, HF."""
    if not rows:
        return ""
    lines = [
        "",
        "| scenario | dsguard run | plan | attempts | failed | lost s | final | samples/s "
        "(P5 trace, steps 1-4) | throughput_measured (heartbeats) | probe events |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        for phase in ("fresh", "probe"):
            g = r[phase]
            k = g["final_knobs"] or {}
            tm = ", ".join(f"{t['samples_per_s']:.2f}" for t in g["throughput_measured"])
            pe = ", ".join(e["event"] for e in g["probe_events"]) or "-"
            sps = g["samples_per_s"]
            lines.append(
                f"| {r['scenario']} | {'fresh store' if phase == 'fresh' else 'fit_probe, warm'} "
                f"| {g['plan']} ({g['plan_source']}) | {g['attempts']} | "
                f"{g['failed_attempts']} | {g['lost_s']} | "
                f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')} | "
                f"{'-' if sps is None else f'{sps:.2f}'} | {tm or '-'} | {pe} |"
            )
    lines += [
        "",
        "| scenario | HF auto_find_batch_size | tries (global batch per try) | "
        "final global batch | first step s | samples/s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        for key, what in (("hf", "with DeepSpeed"), ("hf_plain", "without DeepSpeed")):
            h = r.get(key)
            if not h:
                continue
            sps, first = h["samples_per_s"], h["first_step_s"]
            lines.append(
                f"| {r['scenario']} | {what}: {'ok' if h['ok'] else 'no size found'} | "
                f"{h['tries']} ({','.join(str(b) for b in h['total_batches'])}) | "
                f"{h['global_batch_final'] or '-'} | "
                f"{'-' if first is None else f'{first:.0f}'} | "
                f"{'-' if sps is None else f'{sps:.2f}'} |"
            )  # fmt: skip
    return "\n".join(lines) + "\n"


def live(rows: list[dict[str, Any]], only: set[str], tmp: Path) -> list[dict[str, Any]]:
    """The new scenarios for real: ``dsguard run`` with a fresh store, then again with
    ``fit_probe: true`` on the store it filled; HF ``auto_find_batch_size`` under the same
    budget (with DeepSpeed, and without when that finds no size, as P5 did)."""
    from bench import p5_fit
    from bench import p5_healing as p5
    from bench.common import read_jsonl

    out = []
    original_job = p5.write_p5_job
    for r in rows:
        if r["scenario"] not in only:
            continue
        start_micro, start_accum = (int(x) for x in r["start"].split("x"))
        sc = p5.Scenario(r["scenario"], r["model"], r["max_length"], start_micro, start_accum,
                         int(r["largest_fitting"].split("x")[0]))  # fmt: skip
        store = tmp / f"{sc.name}-store.sqlite"
        model_json = tmp / f"{sc.model}.json"
        model_json.write_text(json.dumps(p5_fit.PRESET_SHAPES[sc.model]))
        res: dict[str, Any] = {"scenario": sc.name}
        for phase in ("fresh", "probe"):

            def job(sc_: Any, steps: int, budget: int, work: Path, _p: str = phase) -> Path:
                path: Path = original_job(sc_, steps, budget, work)
                if _p == "probe":
                    path.write_text(path.read_text() + "fit_probe: true\n")
                return path

            p5.write_p5_job = job  # type: ignore[assignment]
            try:
                work = tmp / f"{sc.name}-{phase}"
                got = p5_fit._dsguard(p5, sc, r["budget"], work, model_json=model_json,
                                      store=store)  # fmt: skip
            finally:
                p5.write_p5_job = original_job
            events = read_jsonl(work / f"{sc.name}-dsguard" / "runs" / "events.jsonl")
            got["throughput_measured"] = [
                {k: e.get(k) for k in ("knobs", "samples_per_s", "from_step", "to_step")}
                for e in events if e["event"] == "throughput_measured"
            ]  # fmt: skip
            got["probe_events"] = [e for e in events if e["event"].startswith("fit_probe")]
            res[phase] = got
        auto = ["--auto_find_batch_size", "true", "--log_level", "info"]
        hf = p5.direct(sc, sc.micro, sc.accum, steps=p5.STEPS, budget=r["budget"], tmp=tmp,
                       label=f"{sc.name}-hf-auto", extra=auto)  # fmt: skip
        res["hf"] = p5.hf_summary(hf, sc, deepspeed=True)
        if not hf.ok:
            hf = p5.direct(sc, sc.micro, sc.accum, steps=p5.STEPS, budget=r["budget"],
                           tmp=tmp, label=f"{sc.name}-hf-auto-plain", extra=auto,
                           deepspeed=False)  # fmt: skip
            res["hf_plain"] = p5.hf_summary(hf, sc, deepspeed=False)
        for k in ("hf", "hf_plain"):
            if k in res:
                res[k].pop("log", None)
        out.append(res)
        print(json.dumps(res, default=str)[:2000], file=sys.stderr, flush=True)
    return out


#: ``--policies`` phases: what each sets in the job file.
POLICY_KEYS: dict[str, dict[str, bool]] = {
    "ladder": {"fit": False}, "fresh": {}, "warm": {}, "probe": {"fit_probe": True},
}  # fmt: skip
_PEAK_RX = re.compile(r"p5-memory: VmPeak=(-?\d+) VmHWM=(-?\d+)")


def _attempts(logs: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per attempt: its knobs, how it ended, its ``VmPeak`` (``bench.p5_train``'s exit line:
    the real peak when it fitted, at most the budget when it ran out) and its OOM line."""
    out = []
    ends = {e.get("attempt"): e for e in events if e["event"] == "attempt_finished"}
    for e in events:
        if e["event"] != "attempt_started":
            continue
        n = e.get("attempt")
        log = logs / f"attempt-{n}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        m = _PEAK_RX.search(text)
        oom = next((ln.strip()[:200] for ln in text.splitlines()
                    if "can't allocate memory" in ln or "MemoryError" in ln), None)  # fmt: skip
        k = e.get("knobs") or {}
        end = ends.get(n) or {}
        out.append({
            "attempt": n, "knobs": _klabel(k), "ds_bucket_divisor": k.get("ds_bucket_divisor"),
            "exit_code": end.get("exit_code"), "vm_peak": int(m.group(1)) if m else None,
            "vm_hwm": int(m.group(2)) if m else None, "oom_line": oom,
            "host_rss_peak_bytes": end.get("host_rss_peak_bytes"),
        })  # fmt: skip
    return out


def _klabel(k: dict[str, Any]) -> str:
    div = k.get("ds_bucket_divisor") or 1
    gc = " gc" if k.get("gradient_checkpointing") else ""
    return (f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')}{gc}"
            + (f" buckets/{div}" if div > 1 else ""))  # fmt: skip


def live_policy_run(
    r: dict[str, Any], phase: str, work: Path, *, store: Path, model_json: Path, ext_dir: Path
) -> dict[str, Any]:
    """One ``dsguard run`` of the scenario's P5 job under ``phase``'s policy, the trainer run as
    ``bench.p5_train`` (``dsguard.train`` plus its ``VmPeak`` on exit), kept under ``work``."""
    from bench import p5_fit
    from bench import p5_healing as p5
    from bench.common import read_jsonl

    start_micro, start_accum = (int(x) for x in r["start"].split("x"))
    sc = p5.Scenario(r["scenario"], r["model"], r["max_length"], start_micro, start_accum,
                     int(r["largest_fitting"].split("x")[0]))  # fmt: skip
    original_job = p5.write_p5_job

    def job(sc_: Any, steps: int, budget: int, w: Path) -> Path:
        path: Path = original_job(sc_, steps, budget, w)
        spec = yaml.safe_load(path.read_text())
        spec["module"] = "bench.p5_train"  # dsguard.train, plus its VmPeak on exit
        # Our own op cache, built outside the limit: a shared one is rebuilt under the limit
        # whenever a venv at another path loaded the op since (see RESULTS, P5LIVE).
        spec["env"]["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
        spec.update(POLICY_KEYS[phase])
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    p5.write_p5_job = job  # type: ignore[assignment]
    t0 = time.time()
    try:
        got = p5_fit._dsguard(p5, sc, r["budget"], work, model_json=model_json, store=store)
    finally:
        p5.write_p5_job = original_job
    logs = work / f"{sc.name}-dsguard" / "runs"
    events = read_jsonl(logs / "events.jsonl")
    got["attempt_detail"] = _attempts(logs, events)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    got["code"] = head.stdout.strip()
    got["gave_up_after_s"] = _gave_up_after(events)
    got["throughput_measured"] = [
        {k: e.get(k) for k in ("knobs", "samples_per_s", "from_step", "to_step")}
        for e in events if e["event"] == "throughput_measured"
    ]  # fmt: skip
    got["probe_events"] = [e["event"] for e in events if e["event"].startswith("fit_probe")]
    got.update(scenario=r["scenario"], phase=phase, work=str(work), started=t0,
               budget=r["budget"])  # fmt: skip
    k = got.get("final_knobs") or {}
    fm = k.get("micro_batch_size")
    rates = r.get("_rates", {})
    got["p5_median_of_final"] = rates.get(fm)
    got["final_of_best_p5"] = (rates[fm] / r["best_samples_per_s"]) if fm in rates else None
    got["live_of_best_p5"] = (
        got["samples_per_s"] / r["best_samples_per_s"] if got.get("samples_per_s") else None
    )
    return got


def live_policies(
    rows: list[dict[str, Any]], order: list[str], phases: list[str], keep: Path, *,
    out_json: Path | None, rates: dict[tuple[str, int, int], float],
) -> list[dict[str, Any]]:  # fmt: skip
    """Every named scenario for real, under each phase in order (``ladder``: ``fit: false``
    with a store of its own; ``fresh``: first fit on an empty store; ``warm`` (repeatable):
    the store ``fresh`` filled; ``probe``: that store with ``fit_probe: true``). Work dirs are
    kept under ``keep``; results are written to ``out_json`` after every run."""
    from bench import p5_fit

    by_name = {r["scenario"]: r for r in rows}
    ext_dir = p5_fit.private_op_cache(keep / "torch_extensions")
    done: list[dict[str, Any]] = []
    if out_json and out_json.exists():
        done = json.loads(out_json.read_text()).get("runs", [])
    for name in order:
        r = dict(by_name[name])
        r["_rates"] = {m: v for (mo, le, m), v in rates.items()
                       if (mo, le) == (r["model"], r["max_length"])}  # fmt: skip
        model_json = keep / f"{r['model']}.json"
        model_json.write_text(json.dumps(p5_fit.PRESET_SHAPES[r["model"]]))
        for i, phase in enumerate(phases):
            label = f"{phase}{sum(1 for p in phases[:i] if p == phase) + 1}"
            if any(d["scenario"] == name and d.get("label") == label for d in done):
                continue
            store = keep / f"{name}-{'ladder' if phase == 'ladder' else 'fit'}-store.sqlite"
            work = keep / f"{name}-{label}"
            if work.exists():
                shutil.rmtree(work)
            print(f"[p5live] {name} {label} ...", file=sys.stderr, flush=True)
            got = live_policy_run(
                r, phase, work, store=store, model_json=model_json, ext_dir=ext_dir
            )
            got["label"] = label
            done.append(got)
            print(f"[p5live] {name} {label}: {got['attempts']} attempts, "
                  f"{got['failed_attempts']} failed, lost {got['lost_s']}, final "
                  f"{_klabel(got.get('final_knobs') or {})}, {got.get('samples_per_s')} "
                  f"samples/s, peaks {[a['vm_peak'] for a in got['attempt_detail']]}",
                  file=sys.stderr, flush=True)  # fmt: skip
            if out_json:
                out_json.write_text(json.dumps({"runs": done}, indent=2, default=str))
    return done


def _gave_up_after(events: list[dict[str, Any]]) -> float | None:
    """Seconds from the first attempt's start to ``run_gave_up`` (None: it did not give up)."""
    starts = [e["ts"] for e in events if e["event"] == "attempt_started"]
    ends = [e["ts"] for e in events if e["event"] == "run_gave_up"]
    if not starts or not ends:
        return None
    t = [datetime.fromisoformat(str(x)).timestamp() for x in (starts[0], ends[-1])]
    return round(t[1] - t[0], 1)


def _lost(g: dict[str, Any]) -> float:
    """Seconds from the first attempt's start to the last one's (a run that gave up: to its
    end, every second of it lost)."""
    if not g["succeeded"] and "gave_up_after_s" not in g:  # runs recorded before the key
        from bench.common import read_jsonl

        path = Path(g["work"]) / f"{g['scenario']}-dsguard" / "runs" / "events.jsonl"
        g["gave_up_after_s"] = _gave_up_after(read_jsonl(path))
    if not g["succeeded"] and g.get("gave_up_after_s") is not None:
        return float(g["gave_up_after_s"])
    return float(g.get("lost_s") or 0.0)


def policies_markdown(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """The ``--policies`` runs: one line per run, then the per-policy means."""
    by = {r["scenario"]: r for r in rows}
    lines = [
        "| scenario | budget GiB | policy | plan | attempts | failed | lost s | final | "
        "sweep best | final's P5 median / best | live samples/s (P5 trace) | VmPeak GiB per "
        "attempt (fitted: real peak) |",
        "|---|---:|---|---|---:|---:|---:|---|---|---:|---:|---|",
    ]
    names = {"ladder": "fixed ladder", "fresh": "first fit, fresh store", "warm": "warm store",
             "probe": "fit_probe, warm store"}  # fmt: skip
    for g in runs:
        r = by[g["scenario"]]
        peaks = ", ".join("-" if a["vm_peak"] is None else f"{a['vm_peak'] / GIB:.2f}"
                          for a in g["attempt_detail"])  # fmt: skip
        sps, fob = g.get("samples_per_s"), g.get("final_of_best_p5") if g["succeeded"] else None
        plan = f"{g['plan']} ({g['plan_source']})" if g.get("plan") else "-"
        lines.append(
            f"| {g['scenario']} ({r['model']} L={r['max_length']}) | {r['budget'] / GIB:.2f} | "
            f"{names[g['phase']]} ({g['label']}) | {plan} | {g['attempts']} | "
            f"{g['failed_attempts']} | {_lost(g):.0f} | "
            f"{_klabel(g.get('final_knobs') or {})}{'' if g['succeeded'] else ' (gave up)'} | "
            f"{r['best']} | {'-' if fob is None else f'{fob:.2f}'} | "
            f"{'-' if sps is None else f'{sps:.2f}'} | {peaks} |"
        )
    lines += [
        "",
        "| policy | runs | mean failed attempts | mean s lost | gave up | final's "
        "P5 median / sweep best: median | worst |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for phase, name in names.items():
        gs = [g for g in runs if g["phase"] == phase]
        if not gs:
            continue
        fobs = [g["final_of_best_p5"] for g in gs
                if g["succeeded"] and g.get("final_of_best_p5") is not None]  # fmt: skip
        lines.append(
            f"| {name} | {len(gs)} | {statistics.mean(g['failed_attempts'] for g in gs):.2f} | "
            f"{statistics.mean(_lost(g) for g in gs):.1f} | "
            f"{sum(not g['succeeded'] for g in gs)} | "
            f"{statistics.median(fobs) if fobs else float('nan'):.2f} | "
            f"{min(fobs) if fobs else float('nan'):.2f} |"
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--live", help="scenario names to run for real, e.g. T1,S1,S2,L1")
    parser.add_argument("--from-json", help="print the report of an earlier --json")
    parser.add_argument(
        "--policies",
        help="scenarios to run live under every policy, in "
        "order, e.g. S1,S2,T1 (with --phases, --keep, --live-json)",
    )
    parser.add_argument("--phases", default="fresh,warm,ladder")
    parser.add_argument("--keep", default="/tmp/p5live-keep", help="work dirs kept here")
    parser.add_argument(
        "--live-json",
        help="live runs' results, rewritten after each run (runs already in it are skipped)",
    )
    parser.add_argument("--policies-report", help="print the table of a --live-json")
    ns = parser.parse_args(argv)
    if ns.policies_report:
        runs = json.loads(Path(ns.policies_report).read_text())["runs"]
        sys.stdout.write(policies_markdown(runs, run()["rows"]))
        return 0
    if ns.policies:
        data = json.loads(RESULTS.read_text())
        keep = Path(ns.keep)
        keep.mkdir(parents=True, exist_ok=True)
        rep = run()
        live_policies(rep["rows"], ns.policies.split(","), ns.phases.split(","), keep,
                      out_json=Path(ns.live_json) if ns.live_json else None,
                      rates=_rates(data))  # fmt: skip
        return 0
    if ns.from_json:
        sys.stdout.write(markdown(json.loads(Path(ns.from_json).read_text())))
        return 0
    rep = run()
    if ns.live:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="p5scale-") as tmp:
            rep["live"] = live(rep["rows"], set(ns.live.split(",")), Path(tmp))
    if ns.json:
        Path(ns.json).write_text(json.dumps(rep, indent=2))
    sys.stdout.write(markdown(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
