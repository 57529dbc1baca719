"""P5 first fit: dsguard's estimator and plan replayed against P5's measured peaks, plus
optional live ``dsguard run`` confirmations (fresh store, then warm store).

**Replay (no training, seconds).** ``bench/p5_results.json`` holds the peak virtual memory
(``VmPeak``, what ``RLIMIT_AS`` limits) that P5 measured for every micro-batch of its five
scenarios (two model sizes, dsguard's reference trainer, fp32 ZeRO-2 on CPU, eager attention)
and the budgets it ran them under. For each profiled config: dsguard's host-memory estimate
against the measured ``VmPeak`` (error). For each scenario: the config ``dsguard run``'s first
fit would start from under that budget (``core.fit.plan_fit``, the default ladders, 10 %
margin), and whether P5's measured peak of that config is under the budget (a fit: 0 failed
attempts) or not (at least 1). The fixed ladder's failed attempts are P5's own.

**Live (``--live``, minutes on 2 cores).** The scenarios' jobs run through ``dsguard run``
with the model given as ``--model_config`` (the preset's shape as JSON, so the planner can
read it) and a private ``DSGUARD_STORE``: once with a fresh store, once more with the store
the first run filled. From ``events.jsonl``: attempts, failed attempts, seconds lost before
the last attempt started, ``plan_applied``'s source. DeepSpeed's JIT op cache is a private
one, built before the runs outside the budget (``private_op_cache``).

Run: ``python -m bench.p5_fit [--live [--only A,C]] [--json F]``, or ``python -m bench.run
P5FIT`` (live; ``--quick``: the replay only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT
from dsguard.core.estimate import DsBuffers, ModelShape, Regime, estimate
from dsguard.core.fit import FitInputs, plan_fit
from dsguard.core.rungs import RungContext
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs
from dsguard.job.model import HOST_OOM_RUNGS, OOM_RUNGS

RESULTS = REPO_ROOT / "bench" / "p5_results.json"
GIB = 2**30
#: dsguard.train's presets (``PRESETS`` in ``dsguard/train/trainer.py``) with the byte
#: tokenizer's vocabulary (264), written out: the supervisor does not import the trainer.
PRESET_SHAPES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 264},
    "small": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 264},
}  # fmt: skip
#: configs/deepspeed/zero2-cpu.json's buckets (elements).
P5_BUFFERS = DsBuffers(50_000_000, 50_000_000)
REGIME = Regime("cpu", dtype_bytes=4, efficient_attention=False, buffers=P5_BUFFERS)
CTX = RungContext(1, 256, dict(DEFAULT_FLAGS), has_deepspeed=True, can_start_phase=True,
                  exact_zero_transfer=True)  # fmt: skip


def shape(model: str) -> ModelShape:
    s = PRESET_SHAPES[model]
    return ModelShape(
        s["hidden_size"], s["num_hidden_layers"], s["num_attention_heads"],
        s["intermediate_size"], s["vocab_size"], s["num_key_value_heads"], source=model,
    )  # fmt: skip


def knobs(max_length: int, micro: int, accum: int) -> Knobs:
    return Knobs(micro, accum, max_length=max_length, zero_stage=2, dataloader_workers=0,
                 pin_memory=False)  # fmt: skip


def replay(data: dict[str, Any]) -> dict[str, Any]:
    errors: list[dict[str, Any]] = []
    measured: dict[tuple[str, int, int], int] = {}
    for p in data["profile"]:
        k = knobs(p["max_length"], p["micro"], p["accum"])
        predicted = estimate(shape(p["model"]), k, REGIME).host_peak_bytes
        measured[(p["model"], p["max_length"], p["micro"])] = p["vm_peak"]
        errors.append({
            "model": p["model"], "max_length": p["max_length"], "micro": p["micro"],
            "vm_peak": p["vm_peak"], "predicted": predicted,
            "error_pct": round(100 * (predicted - p["vm_peak"]) / p["vm_peak"], 1),
        })  # fmt: skip
    scenarios = []
    for s in data["scenarios"]:
        sc, budget = s["scenario"], s["budget"]
        start = knobs(sc["max_length"], sc["micro"], sc["accum"])
        inputs = FitInputs(shape(sc["model"]), REGIME, budget, rungs=(*OOM_RUNGS, *HOST_OOM_RUNGS))
        plan = plan_fit(start, CTX, inputs)
        chosen = plan.chosen.knobs if plan.chosen is not None else start
        peak = measured.get((sc["model"], sc["max_length"], chosen.micro_batch_size))
        fits = None if peak is None else peak <= budget
        largest = s.get("largest_fitting_micro")
        scenarios.append({
            "scenario": sc["name"], "label": s["label"], "budget": budget,
            "planned": f"{chosen.micro_batch_size}x{chosen.gradient_accumulation_steps}"
            + (" gc" if chosen.gradient_checkpointing else "")
            + (f" buckets/{chosen.ds_bucket_divisor}" if chosen.ds_bucket_divisor > 1 else ""),
            "planned_micro": chosen.micro_batch_size, "measured_peak_of_planned": peak,
            "fits": fits, "failed_attempts": None if fits is None else (0 if fits else 1),
            "largest_fitting_micro": largest,
            "fixed_ladder_failed_attempts": s["dsguard"]["attempts"] - 1,
            "fixed_ladder_lost_s": s["dsguard"]["lost_s"],
            "note": plan.note,
        })  # fmt: skip
    errs = [abs(e["error_pct"]) for e in errors]
    return {
        "errors": errors,
        "median_abs_error_pct": statistics.median(errs),
        "worst_abs_error_pct": max(errs),
        "scenarios": scenarios,
    }


#: DeepSpeed's CPU-accelerator op, JIT-built at every start when its cache does not match.
SHM_BUILD = "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"


def private_op_cache(root: Path) -> Path:
    """A ``TORCH_EXTENSIONS_DIR`` of our own with DeepSpeed's shm op built in it, outside any
    limit, set in this process's environment (the trainers inherit it).

    torch rebuilds a JIT op whenever the cached build.ninja was written by a venv at another
    path; a rebuild inside a run's ``RLIMIT_AS`` fails (the compiler inherits the limit), and
    dsguard can do nothing about that (RESULTS, P5LIVE: S1's failed warm run)."""
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(root)}
    subprocess.run([sys.executable, "-c", SHM_BUILD], env=env, check=True, capture_output=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(root)
    return root


def live(data: dict[str, Any], only: set[str] | None, tmp: Path) -> list[dict[str, Any]]:
    """Each scenario through ``dsguard run`` twice (fresh store, warm store)."""
    from bench import p5_healing as p5

    private_op_cache(tmp / "torch_extensions")
    out = []
    for s in data["scenarios"]:
        sc = p5.Scenario(**s["scenario"])
        if only and sc.name not in only:
            continue
        store = tmp / f"{sc.name}-store.sqlite"
        model_json = tmp / f"{sc.model}.json"
        model_json.write_text(json.dumps(PRESET_SHAPES[sc.model]))
        for phase in ("fresh", "warm"):
            work = tmp / f"{sc.name}-{phase}"
            res = _dsguard(p5, sc, s["budget"], work, model_json=model_json, store=store)
            res.update(scenario=sc.name, store=phase)
            out.append(res)
    return out


def _dsguard(p5: Any, sc: Any, budget: int, work: Path, *, model_json: Path,
             store: Path) -> dict[str, Any]:  # fmt: skip
    """One ``dsguard run`` of P5's job for ``sc``, the model given as ``--model_config``."""
    work.mkdir(parents=True, exist_ok=True)
    original = p5.trainer_args

    def with_config(scenario: Any, steps: int, out: Path) -> list[str]:
        args: list[str] = original(scenario, steps, out)
        i = args.index("--model_preset")
        args[i : i + 2] = ["--model_config", str(model_json)]
        return args

    p5.trainer_args = with_config
    os.environ["DSGUARD_STORE"] = str(store)
    try:
        res: dict[str, Any] = p5.dsguard_run(sc, p5.STEPS, budget, work)
    finally:
        p5.trainer_args = original
    events = p5.read_jsonl(work / f"{sc.name}-dsguard" / "runs" / "events.jsonl")
    plans = [e for e in events if e["event"] in ("plan_applied", "plan_skipped")]
    out = {k: res[k] for k in ("attempts", "failed_attempts", "lost_s", "final_knobs",
                               "succeeded", "rungs", "wall_s", "samples_per_s")}  # fmt: skip
    out["plan"] = plans[0]["event"] if plans else None
    out["plan_source"] = plans[0].get("source") if plans else None
    out["plan_reason"] = plans[0].get("reason") if plans else None
    return out


def markdown(rep: dict[str, Any]) -> str:
    lines = [
        f"Estimator error on P5's measured VmPeaks ({len(rep['errors'])} configs, 2 model "
        f"sizes): median |error| **{rep['median_abs_error_pct']:.1f} %**, worst "
        f"**{rep['worst_abs_error_pct']:.1f} %**.",
        "",
        "| model | max_length | micro | measured VmPeak GiB | predicted GiB | error |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in rep["errors"]:
        lines.append(
            f"| {e['model']} | {e['max_length']} | {e['micro']} | {e['vm_peak'] / GIB:.2f} "
            f"| {e['predicted'] / GIB:.2f} | {e['error_pct']:+.1f} % |"
        )
    lines += [
        "",
        "| scenario | start | budget GiB | first fit | its measured VmPeak GiB | fits | "
        "failed attempts (first fit) | failed attempts (fixed ladder, P5) |",
        "|---|---|---:|---|---:|---|---:|---:|",
    ]
    for s in rep["scenarios"]:
        peak = s["measured_peak_of_planned"]
        lines.append(
            f"| {s['scenario']} | {s['label']} | {s['budget'] / GIB:.2f} | {s['planned']} | "
            f"{'-' if peak is None else f'{peak / GIB:.2f}'} | {s['fits']} | "
            f"{s['failed_attempts']} | {s['fixed_ladder_failed_attempts']} |"
        )
    if rep.get("live"):
        lines += [
            "",
            "| scenario | store | plan | attempts | failed | lost s | final micro x accum | "
            "samples/s |",
            "|---|---|---|---:|---:|---:|---|---:|",
        ]
    for r in rep.get("live", []):
        k = r["final_knobs"] or {}
        sps = r["samples_per_s"]
        lines.append(
            f"| {r['scenario']} | {r['store']} | {r['plan']} ({r['plan_source']}) | "
            f"{r['attempts']} | {r['failed_attempts']} | {r['lost_s']} | "
            f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')} | "
            f"{'-' if sps is None else f'{sps:.2f}'} |"
        )
    return "\n".join(lines) + "\n"


def run(quick: bool) -> dict[str, Any]:
    """``python -m bench.run P5FIT``: the replay, plus the live runs unless ``quick``."""
    data = json.loads(RESULTS.read_text())
    rep = replay(data)
    if not quick:
        with tempfile.TemporaryDirectory(prefix="p5fit-") as tmp:
            rep["live"] = live(data, None, Path(tmp))
    return rep


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", action="store_true")
    parser.add_argument("--only", help="scenario names for --live, e.g. A,C")
    parser.add_argument("--json")
    ns = parser.parse_args(argv)
    data = json.loads(RESULTS.read_text())
    rep = replay(data)
    if ns.live:
        with tempfile.TemporaryDirectory(prefix="p5fit-") as tmp:
            only = set(ns.only.split(",")) if ns.only else None
            rep["live"] = live(data, only, Path(tmp))
    if ns.json:
        Path(ns.json).write_text(json.dumps(rep, indent=2))
    sys.stdout.write(markdown(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
