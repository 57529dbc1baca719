"""P5 run_clm: transformers' own ``run_clm.py`` under a host limit where DeepSpeed's reduce
bucket, not the activations, is what does not fit (issue 15's case), live under ``dsguard run``.

**Setup (offline).** ``run_clm.py`` from transformers' ``examples/pytorch/language-modeling``
(not committed: see ``RUN_CLM``) trains a tiny random-init GPT-2 (``bench/runclm_assets.py``:
``--config_name``/``--tokenizer_name`` a local dir, ``--train_file`` a generated .txt,
``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``) with ZeRO-2 on the CPU accelerator and
``overlap_comm: true``, ``reduce_bucket_size`` = ``allgather_bucket_size`` = ``BUCKET``
elements. In fp32 each backward allocates two reduce buffers of ``4 * BUCKET`` bytes (DeepSpeed
``stage_1_and_2.py``, ``ipg_buffer``): 200000000 bytes each, the issue's figure. The model is so
small that micro-batch 8 and micro-batch 1 differ by ~35 MB of peak virtual memory while
halving the buckets saves ~200 MB. The budget (``BUDGET_MIB``, RLIMIT_AS via
``host_memory_via: rlimit_as``) sits between them: every micro-batch fails with
``DefaultCPUAllocator: can't allocate memory: you tried to allocate 200000000 bytes``; the
buckets halved fit at micro 8.

**Job file.** Written by ``dsguard init -- deepspeed --num_gpus 1 run_clm.py ...`` (what a user
would run), then given the budget, the env, ``limits.backoff_s: [0, 0]`` and a log dir. The
init output is checked (framework, ``--block_size`` route, packing, DeepSpeed config).

**Variants** (one ``dsguard run`` each, one after the other): ``fixed`` (an explicit
``ladder.host_oom`` in the default order, walked as written, ``--no-fit``: the old behaviour),
``evidence`` (default ladder, ``--no-fit``), ``fit-fresh`` (first fit, empty
``DSGUARD_STORE``), ``fit-warm`` (the same store again). From ``events.jsonl``: attempts,
failed attempts, the moves (``plan_applied``, ``evidence_considered``, ``policy_applied``),
seconds lost (last ``attempt_started`` - first), success, final knobs.

Run: ``python -m bench.p5_runclm [--json F] [--only fixed,evidence] [--keep DIR]``, or
``python -m bench.run P5RUNCLM``. Needs ``datasets``; skips with a message without it or
without ``run_clm.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO_ROOT, dsguard_argv, machine_info, read_jsonl
from bench.runclm_assets import BLOCK_SIZE, build

#: transformers' examples/pytorch/language-modeling/run_clm.py, as released with the installed
#: transformers (read here from huggingface/transformers 00d481d, ``check_min_version
#: ("4.57.0.dev0")``, Apache-2.0). It is third-party code and is not committed: place it here
#: (e.g. ``curl -o bench/external/run_clm.py https://raw.githubusercontent.com/huggingface/
#: transformers/v<VERSION>/examples/pytorch/language-modeling/run_clm.py``) or set
#: ``DSGUARD_RUN_CLM``.
RUN_CLM = Path(os.environ.get("DSGUARD_RUN_CLM", REPO_ROOT / "bench" / "external" / "run_clm.py"))
BASE_DS = REPO_ROOT / "configs" / "deepspeed" / "zero2-cpu.json"
#: Elements: 5e7 fp32 = the issue's 200000000-byte allocation. (``2e8``, the value in HF's
#: ZeRO-2 example config, is 800000000 bytes in fp32 and 400000000 in fp16/bf16.)
BUCKET = 50_000_000
#: Peak virtual memory measured here (3 steps, block 128, global batch 8): micro 8 2.56 GiB,
#: micro 1 2.53 GiB, micro 8 with buckets halved 2.37 GiB. The budget sits between the last two.
BUDGET_MIB = 2540
MICRO, STEPS = 8, 3
ENV = {"OMP_NUM_THREADS": "2", "MALLOC_ARENA_MAX": "2", "HF_HUB_OFFLINE": "1",
       "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}  # fmt: skip
DEFAULT_HOST_OOM = ["dataloader_workers", "pin_memory", "micro_batch", "ds_buckets"]
VARIANTS = ("fixed", "evidence", "fit-fresh", "fit-warm", "cgroup", "cgroup-tight")
#: The ``cgroup`` variants use the default mechanism (a memory cgroup where one can be made:
#: resident memory counts, not address space): the same budget, and a tight one near the
#: resident peak measured here (~0.6 GB at micro 8).
CGROUP_TIGHT_MIB = 560
RUN_TIMEOUT_S = 900.0


def missing() -> str | None:
    """Why the benchmark cannot run here (None: it can)."""
    for mod in ("datasets", "evaluate", "transformers", "deepspeed", "tokenizers"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (run_clm.py needs it; bench-only, not a dsguard dep)"
    if not RUN_CLM.is_file():
        return f"{RUN_CLM} is missing (transformers' run_clm.py; see bench/p5_runclm.py)"
    return None


def write_ds_config(path: Path) -> Path:
    cfg = json.loads(BASE_DS.read_text())
    z = cfg["zero_optimization"]
    z.update(reduce_bucket_size=BUCKET, allgather_bucket_size=BUCKET, overlap_comm=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


def user_command(assets: Path, out: str = "out") -> list[str]:
    """The run_clm command a user runs today (relative to the job's dir)."""
    return [
        "deepspeed", "--num_gpus", "1", str(RUN_CLM),
        "--config_name", f"{assets}/model", "--tokenizer_name", f"{assets}/model",
        "--train_file", f"{assets}/train.txt", "--block_size", str(BLOCK_SIZE),
        "--do_train", "--per_device_train_batch_size", str(MICRO),
        "--gradient_accumulation_steps", "1", "--max_steps", str(STEPS),
        "--save_steps", "100", "--logging_steps", "1", "--output_dir", out,
        "--report_to", "none", "--disable_tqdm", "true",
        "--deepspeed", f"{assets}/ds.json",
    ]  # fmt: skip


def init_job(work: Path, assets: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``dsguard init`` on the user's command: the job it wrote and a check of its mapping."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [*dsguard_argv(), "init", "--output", "job.yaml", "--", *user_command(assets)]
    subprocess.run(cmd, cwd=work, check=True, capture_output=True, text=True)
    text = (work / "job.yaml").read_text()
    job = yaml.safe_load(text)
    flags = job.get("flags", {})
    check = {
        "framework_line": next((ln for ln in text.splitlines() if "Framework:" in ln), None),
        "launcher": job.get("launcher"),
        "world_size": job.get("world_size"),
        "train": job.get("train"),
        "flags": flags,
        "deepspeed": job.get("deepspeed"),
        "packing": job.get("data", {}).get("packing"),
        "checkpoints": job.get("checkpoints"),
        "args_left": job.get("args"),
    }
    check["ok"] = bool(
        "run_clm" in str(check["framework_line"])
        and flags.get("max_length") == "--block_size"
        and flags.get("micro_batch_size") == "--per_device_train_batch_size"
        and job.get("train", {}).get("micro_batch_size") == MICRO
        and job.get("train", {}).get("max_length") == BLOCK_SIZE
        and check["packing"] is True
        and (job.get("deepspeed") or {}).get("config") == f"{assets}/ds.json"
    )
    return job, check


def variant_job(base: dict[str, Any], variant: str, work: Path) -> Path:
    job = json.loads(json.dumps(base))
    job.update(
        name=f"runclm-{variant}", workdir=str(work), python=sys.executable,
        env={**job.get("env", {}), **ENV}, log_dir=str(work / "runs"),
        resources={"host_memory_limit": f"{BUDGET_MIB}MiB", "host_memory_via": "rlimit_as"},
        limits={**job.get("limits", {}), "backoff_s": [0, 0], "max_attempts": 8},
    )  # fmt: skip
    job["fit"] = variant.startswith("fit")
    if variant.startswith("cgroup"):
        mib = CGROUP_TIGHT_MIB if variant == "cgroup-tight" else BUDGET_MIB
        job["resources"] = {"host_memory_limit": f"{mib}MiB"}
    if variant == "fixed":
        job["ladder"] = {"host_oom": list(DEFAULT_HOST_OOM)}
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def _ts(ev: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(ev["ts"])).timestamp()


def _move(e: dict[str, Any]) -> str:
    if e["event"] == "plan_applied":
        return f"plan({e.get('source')}): {e.get('changes')}"
    if e["event"] == "plan_skipped":
        return f"plan skipped: {e.get('reason')}"
    if e["event"] == "evidence_considered":
        return f"evidence -> {e.get('rung')} (tried {e.get('tried_bytes')} B)"
    return f"{e.get('rung')}: {e.get('changes')}"


def _tried(failure: dict[str, Any]) -> int | None:
    """The failing allocation's size the failure's evidence names (torch's CPU allocator)."""
    m = re.search(r"you tried to allocate (\d+) bytes", str(failure.get("evidence", "")))
    return int(m.group(1)) if m else None


def _hf_rate(log: Path) -> float | None:
    """run_clm's own ``train_samples_per_second`` of the last attempt: dsguard measures no
    throughput here (an unmodified example has no ``DsguardCallback``, so no heartbeats).
    Over 3 steps it is rough, but it tells micro 8 from micro 1."""
    try:
        m = re.search(r"'train_samples_per_second': '?([\d.]+)", log.read_text(errors="replace"))
    except OSError:
        return None
    return float(m.group(1)) if m else None


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    started = [e for e in events if e["event"] == "attempt_started"]
    end = next((e for e in events if e["event"] in ("run_succeeded", "run_gave_up")), None)
    ok = bool(end and end["event"] == "run_succeeded")
    moves = [e for e in events if e["event"] in
             ("plan_applied", "plan_skipped", "evidence_considered", "policy_applied")]  # fmt: skip
    fails = [e for e in events if e["event"] == "failure_detected"]
    tp = [e["samples_per_s"] for e in events if e["event"] == "throughput_measured"]
    final = started[-1] if started else None
    return {
        "succeeded": ok,
        "attempts": len(started),
        "failed_attempts": len(started) - (1 if ok else 0),
        "failure_kinds": [f.get("kind") for f in fails],
        "tried_bytes": [_tried(f) for f in fails],
        "limit_how": next(
            (e.get("how") for e in events if e["event"] == "memory_limit_applied"), None
        ),
        "failure_evidence": [str(f.get("evidence", ""))[:200] for f in fails],
        "moves": [_move(e) for e in moves],
        "events": {
            k: sum(1 for e in events if e["event"] == k)
            for k in ("plan_applied", "plan_skipped", "evidence_considered", "policy_applied")
        },
        "lost_s": round(_ts(started[-1]) - _ts(started[0]), 1) if started else None,
        "final_knobs": final.get("knobs") if final else None,
        "samples_per_s": tp[-1] if tp else None,
        "end_reason": end.get("reason") if end and not ok else None,
    }


def run_variant(base: dict[str, Any], variant: str, tmp: Path, store: Path) -> dict[str, Any]:
    work = tmp / variant
    work.mkdir(parents=True, exist_ok=True)
    job = variant_job(base, variant, work)
    env = {**os.environ, "DSGUARD_STORE": str(store), **ENV}
    argv = [*dsguard_argv(), "run", str(job), "--quiet"]
    if not variant.startswith("fit"):
        argv.append("--no-fit")
    print(f"  [P5RUNCLM] {variant} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with (work / "dsguard.txt").open("w") as log:
        proc = subprocess.run(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=RUN_TIMEOUT_S, check=False)  # fmt: skip
    res = summarize(read_jsonl(work / "runs" / "events.jsonl"))
    res["train_samples_per_s"] = _hf_rate(work / "runs" / f"attempt-{res['attempts']}.log")
    res.update(variant=variant, rc=proc.returncode, wall_s=round(time.monotonic() - t0, 1))
    print(f"  [P5RUNCLM] {variant}: {res['attempts']} attempts, lost {res['lost_s']} s, "
          f"ok={res['succeeded']}", file=sys.stderr, flush=True)  # fmt: skip
    return res


def run_all(tmp: Path, only: set[str] | None = None) -> dict[str, Any]:
    assets = tmp / "assets"
    build(assets)
    write_ds_config(assets / "ds.json")
    base, check = init_job(tmp / "init", assets)
    # Each variant its own store (every run writes its outcomes there), but fit-warm reads
    # the one fit-fresh filled.
    runs = [
        run_variant(base, v, tmp, tmp / f"store-{v.replace('-warm', '-fresh')}.sqlite")
        for v in VARIANTS
        if not only or v in only
    ]
    return {"budget_mib": BUDGET_MIB, "bucket_elements": BUCKET, "micro": MICRO,
            "steps": STEPS, "block_size": BLOCK_SIZE, "init": check, "runs": runs}  # fmt: skip


def run(quick: bool) -> dict[str, Any]:
    """``python -m bench.run P5RUNCLM`` (live: ``quick`` changes nothing, it is one pass)."""
    why = missing()
    if why is not None:
        return {"skipped": why}
    with tempfile.TemporaryDirectory(prefix="p5runclm-") as tmp:
        return run_all(Path(tmp))


def _knobs(k: dict[str, Any] | None) -> str:
    if not k:
        return "-"
    out = f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')}"
    div = k.get("ds_bucket_divisor", 1)
    return out + (f", buckets/{div}" if div and div > 1 else "")


def markdown(rep: dict[str, Any]) -> str:
    if "skipped" in rep:
        return f"Skipped: {rep['skipped']}\n"
    init = rep["init"]
    lines = [
        f"Budget {rep['budget_mib']} MiB (RLIMIT_AS), buckets {rep['bucket_elements']:.0e} "
        f"elements (fp32, overlap_comm), start micro {rep['micro']}x1, block {rep['block_size']},"
        f" {rep['steps']} steps. `dsguard init` mapping ok: **{init['ok']}** "
        f"({init['framework_line']}).",
        "",
        "| variant | limit | attempts | failed | lost s | moves | succeeded | final config | "
        "samples/s (run_clm) |",
        "|---|---|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rep["runs"]:
        moves = "; ".join(m for m in r["moves"] if not m.startswith("evidence")) or "-"
        sps = r.get("train_samples_per_s")
        lines.append(
            f"| {r['variant']} | {r.get('limit_how')} | {r['attempts']} | {r['failed_attempts']} "
            f"| {r['lost_s']} | {moves} | {r['succeeded']} | {_knobs(r['final_knobs'])} | "
            f"{'-' if sps is None else f'{sps:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--only", help="variants, e.g. fixed,evidence")
    parser.add_argument("--keep", help="work in this dir and keep it (logs, events)")
    ns = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(f"P5RUNCLM skipped: {why}", file=sys.stderr)
        return 0
    only = set(ns.only.split(",")) if ns.only else None
    if ns.keep:
        Path(ns.keep).mkdir(parents=True, exist_ok=True)
        rep = run_all(Path(ns.keep).resolve(), only)
    else:
        with tempfile.TemporaryDirectory(prefix="p5runclm-") as tmp:
            rep = run_all(Path(tmp), only)
    rep["machine"] = machine_info()
    if ns.json:
        Path(ns.json).write_text(json.dumps(rep, indent=2, default=str))
    sys.stdout.write(markdown(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
