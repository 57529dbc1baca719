"""Live: ``fit_probe: in_run`` on one of P5's budget scenarios, against the same job without
it (issue 15). Each ``dsguard run`` gets its own fresh known-good store.

P5's job (``bench/p5_healing.py``'s ``write_p5_job``: the reference trainer, fp32 ZeRO-2 on
CPU, a real ``RLIMIT_AS`` at the scenario's budget, the model as ``--model_config`` so the
first fit knows its shape), with more optimizer steps than P5's 4 so that two configs can be
timed and training goes on after. Default scenario E (small model, L=1024, start 4x2): the
first fit picks 2x4, P5 measured 1x8 1.33x faster, so the probe should switch and keep 1x8.

Run: ``python -m bench.p5_inrun [--scenario E] [--steps 14] [--json F]`` (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench import p5_fit
from bench import p5_healing as p5
from bench.common import read_jsonl
from bench.p5_fit import RESULTS
from bench.p5_scale import _peaks, scenarios

#: Step intervals each config is timed over (``fit_probe_steps``): the small model's steps
#: take 4-6 s here, so the default 4 would spend most of a short run measuring.
PROBE_STEPS = 2


def _label(k: dict[str, Any] | None) -> str:
    k = k or {}
    return f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')}"


def one(
    name: str, steps: int, probe: bool, tmp: Path, *, unlimited: bool = False,
    start: str | None = None, known_oom: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One ``dsguard run``. ``unlimited``: no ``RLIMIT_AS`` budget (P5's budgets are tight
    for the trainer as it is built now: see ``bench/RESULTS.md``); ``start``: the job's own
    config (``MxA``) with ``fit: false``; ``known_oom``: a config the fresh store is told ran
    out of memory before the run (as an earlier run at a tighter budget would record)."""
    data = json.loads(RESULTS.read_text())
    peaks = _peaks(data)
    row = next(s for s in scenarios(data, peaks) if s.name == name)
    fit_micro = max(m for (mo, le, m), v in peaks.items()
                    if (mo, le) == row.family and v <= row.budget)  # fmt: skip
    sc = p5.Scenario(row.name, row.model, row.max_length, row.micro, row.accum, fit_micro)
    work = tmp / f"{name}-{'in_run' if probe else 'no_probe'}"
    work.mkdir(parents=True)
    model_json = work / f"{sc.model}.json"
    model_json.write_text(json.dumps(p5_fit.PRESET_SHAPES[sc.model]))
    job_path = p5.write_p5_job(sc, steps, row.budget, work)
    job = yaml.safe_load(job_path.read_text())
    if unlimited:
        job.pop("resources", None)
    if start is not None:
        micro, accum = (int(x) for x in start.split("x"))
        job["train"] |= {"micro_batch_size": micro, "gradient_accumulation_steps": accum}
        job["fit"] = False
    args = job["args"]
    i = args.index("--model_preset")
    args[i : i + 2] = ["--model_config", str(model_json)]
    if probe:
        job |= {"fit_probe": "in_run", "fit_probe_steps": PROBE_STEPS}
    job_path.write_text(yaml.safe_dump(job, sort_keys=False))
    env = dict(os.environ, DSGUARD_STORE=str(work / "store.sqlite"))
    if known_oom is not None:
        _record_oom(job_path, work / "store.sqlite", known_oom)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dsguard", "run", str(job_path), "--quiet"], cwd=work, env=env,
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    wall_s = time.monotonic() - t0
    events = read_jsonl(work / "runs" / "events.jsonl")

    def named(event: str) -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == event]

    end = next((e for e in events if e["event"].startswith("run_")
                and e["event"] != "run_started"), {})  # fmt: skip
    cost = named("fit_probe_cost")
    return {
        "scenario": name, "fit_probe": "in_run" if probe else "off", "rc": proc.returncode,
        "end": end.get("event"), "wall_s": round(wall_s, 1),
        "run_duration_s": end.get("duration_s"), "steps": steps, "budget": row.budget,
        "attempts": [_label(e["knobs"]) for e in named("attempt_started")],
        "failures": [e["kind"] for e in named("failure_detected")],
        "plan": [(e["event"], e.get("source"), _label(e.get("knobs"))) for e in events
                 if e["event"] in ("plan_applied", "plan_skipped")],
        "throughput": [(_label(e["knobs"]), e["samples_per_s"], e["from_step"], e["to_step"])
                       for e in named("throughput_measured")],
        "switched": [{k: (_label(v) if k.endswith("_knobs") else v) for k, v in e.items()
                      if k in ("from_knobs", "to_knobs", "reason", "samples_per_s", "last_step",
                               "resume_step", "steps_redone")}
                     for e in named("fit_probe_switched")],
        "decided": [(_label(e["probe_knobs"]), e["probe_samples_per_s"],
                     _label(e["baseline_knobs"]), e["baseline_samples_per_s"],
                     _label(e["kept_knobs"])) for e in named("fit_probe_decided")],
        "cost": cost[0] | {"kept_knobs": _label(cost[0]["kept_knobs"])} if cost else None,
        "final": _label(end.get("knobs")),
        "stderr_tail": proc.stderr[-1500:] if proc.returncode else "",
    }  # fmt: skip


def _record_oom(job_path: Path, store: Path, config: str) -> None:
    """Tell the job's store that ``config`` (``MxA``) ran out of memory in its regime."""
    from dsguard.job.file import load_job
    from dsguard.run.fit import fit_inputs
    from dsguard.run.store import KnownGoodStore

    job = load_job(job_path)
    inputs = fit_inputs(job)
    assert not isinstance(inputs, str), inputs
    micro, accum = (int(x) for x in config.split("x"))
    knobs = job.knobs.replace(micro_batch_size=micro, gradient_accumulation_steps=accum)
    # Under this environment's fingerprint: a record without one is only a hint to the plan.
    KnownGoodStore(store).record(
        inputs.signature, knobs.as_dict(), "oom", None, None, env=inputs.env_fingerprint or None
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", default="E")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--json")
    parser.add_argument("--only-probe", action="store_true")
    parser.add_argument("--unlimited", action="store_true")
    parser.add_argument("--start", help="the job's own config, MxA (fit: false)")
    parser.add_argument("--known-oom", help="a config the store knows ran out of memory, MxA")
    ns = parser.parse_args(argv)
    out = []
    with tempfile.TemporaryDirectory(prefix="p5inrun-") as tmp:
        for probe in (True,) if ns.only_probe else (True, False):
            res = one(ns.scenario, ns.steps, probe, Path(tmp), unlimited=ns.unlimited,
                      start=ns.start, known_oom=ns.known_oom)  # fmt: skip
            print(json.dumps(res, default=str), flush=True)
            out.append(res)
    if ns.json:
        Path(ns.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
