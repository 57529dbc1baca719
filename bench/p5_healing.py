"""P5: healing efficiency on real CPU training, against an exhaustive sweep and HF's
``auto_find_batch_size``.

Everything is real: dsguard's reference trainer (``python -m dsguard.train``: HF Trainer +
DeepSpeed ZeRO-2 on the CPU accelerator, ``configs/deepspeed/zero2-cpu.json``, eager
attention, generated text) under a real host-memory budget (``RLIMIT_AS``, set by dsguard's
exec shim, i.e. ``resources.host_memory_limit``). Over budget, torch fails with
``DefaultCPUAllocator: can't allocate memory``.

1. **Profile.** Every micro-batch size of every scenario runs once without a limit for
   ``PROFILE_STEPS`` steps through ``bench/p5_train.py`` (the same trainer, printing its
   ``VmPeak`` on exit). A scenario's budget is the midpoint between the ``VmPeak`` of the micro
   it should heal to and that of twice it, so the start config fails and that one fits.
2. **dsguard.** ``dsguard run job.yaml --quiet`` on a generated python-launcher job
   (``module: dsguard.train``, ``resources.host_memory_limit`` = the budget, workers 0 and
   pinning off as in ``configs/examples/tiny-cpu.yaml``, so the ``host_oom`` ladder goes
   straight to the micro-batch). From ``events.jsonl``: attempts, failure kinds, final knobs,
   global batch. Seconds lost = last ``attempt_started`` - first ``attempt_started`` (failed
   attempts' wall time + relaunch overhead).
3. **Sweep.** micro in {start, start/2, ..., 1} with accumulation keeping the global batch,
   each run directly (exec shim + ``bench/p5_train.py``) under the same budget: which fit and
   their throughput; the best fitting one.
4. **HF.** The start config with ``--auto_find_batch_size true`` under the same budget (plus
   ``--log_level info``, so each try's ``***** Running training *****`` banner is logged).
   If it finds no batch size with DeepSpeed, the same again without ``--deepspeed``. Then
   HF's last failing size in a fresh process (does it fit outside HF's retry loop?).
5. **Repeats.** Every config that fitted somewhere, ``REPS`` more times round-robin under the
   tightest budget it fitted; medians over those plus the sweep run.

Throughput: each run writes ``DSGUARD_SAMPLE_TRACE`` (one JSON line per optimizer step with its
sample ids). The benchmark polls the file every 20 ms and stamps each new line, with the CPU
time of the training processes so far. samples/s = samples of steps 2..N / (time of step N -
time of step 1); per CPU-second likewise. Step 1 (lazy init, first optimizer-state
allocation) is excluded. Every run of a scenario processes the same samples in the same
order (same seed, same global batch), except HF after it changes the batch.

Run: ``python -m bench.run P5`` or ``python -m bench.p5_healing [--json F] [--only A,B]
[--reps N] [--keep DIR] [--from-json F]`` (``--quick``: 3 steps per run, no repeats, a smoke
check). Results and method: ``bench/RESULTS.md``, raw figures ``bench/p5_results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.common import REPO_ROOT, dsguard_argv, machine_info, read_jsonl

DS_CONFIG = REPO_ROOT / "configs" / "deepspeed" / "zero2-cpu.json"
STEPS = 4
QUICK_STEPS = 3
PROFILE_STEPS = 2
REPS = 2  # throughput repeats of every fitting config (full mode)
RUN_TIMEOUT_S = 420.0
POLL_S = 0.02
ENV = {"OMP_NUM_THREADS": "2", "MALLOC_ARENA_MAX": "2", "HF_HUB_OFFLINE": "1"}
MIB = 1024**2
_OOM_RX = re.compile(r"DefaultCPUAllocator: can't allocate memory|MemoryError|out of memory")
_TRY_RX = re.compile(r"\*{5} Running training \*{5}")
_TOTAL_RX = re.compile(
    r"Total train batch size \(w\. parallel, distributed & accumulation\) = (\d+)"
)


@dataclass(frozen=True)
class Scenario:
    """A start config; its budget is chosen so that ``fit_micro`` is the largest micro-batch
    on the halving chain that fits."""

    name: str
    model: str  # --model_preset
    max_length: int
    micro: int
    accum: int
    fit_micro: int

    @property
    def global_batch(self) -> int:
        return self.micro * self.accum

    def chain(self) -> list[int]:
        """Micro-batch sizes start, start/2, ..., 1 (what dsguard's micro_batch rung walks)."""
        out, m = [self.micro], self.micro
        while m > 1:
            m //= 2
            out.append(m)
        return out

    def label(self) -> str:
        return f"{self.model}, L={self.max_length}, {self.micro}x{self.accum}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("A", "tiny", 2048, 8, 1, 4),
    Scenario("B", "tiny", 2048, 8, 1, 2),
    Scenario("C", "small", 512, 16, 1, 8),
    Scenario("D", "small", 512, 16, 1, 4),
    Scenario("E", "small", 1024, 4, 2, 2),
)


def trainer_args(sc: Scenario, steps: int, out: Path) -> list[str]:
    """Everything but the knobs dsguard owns (micro, accumulation, max_length, workers,
    pinning, --deepspeed)."""
    return [
        "--model_preset", sc.model, "--attn_implementation", "eager",
        "--generate_data", "512", "--generate_max_chars", str(4 * sc.max_length),
        "--max_steps", str(steps), "--save_strategy", "no", "--logging_steps", "1",
        "--learning_rate", "1e-3", "--seed", "7", "--report_to", "none",
        "--disable_tqdm", "true", "--output_dir", str(out),
    ]  # fmt: skip


def knob_args(sc: Scenario, micro: int, accum: int, deepspeed: bool = True) -> list[str]:
    ds = ["--deepspeed", str(DS_CONFIG)] if deepspeed else []
    return [
        "--per_device_train_batch_size", str(micro), "--gradient_accumulation_steps", str(accum),
        "--model_max_length", str(sc.max_length), "--dataloader_num_workers", "0",
        "--dataloader_pin_memory", "false", *ds,
    ]  # fmt: skip


# -- one process, watched from outside ------------------------------------------------------


@dataclass
class Run:
    """One training process (or one dsguard run), as seen from outside."""

    label: str
    rc: int
    wall_s: float
    #: per optimizer step: (seconds after launch, wall-clock time, samples in the step,
    #: global_step, CPU seconds used by the training processes so far)
    steps: list[tuple[float, float, int, int, float]] = field(default_factory=list)
    vm_peak: int | None = None
    vm_hwm: int | None = None
    oom_line: str | None = None
    tries: int = 0  # HF "***** Running training *****" banners
    total_batches: list[int] = field(default_factory=list)  # HF per-try global batch
    timed_out: bool = False
    log: str = ""
    load1: float = 0.0  # 1-minute load average when the run ended

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def first_step_s(self) -> float | None:
        return self.steps[0][0] if self.steps else None

    def samples_per_s(self) -> float | None:
        """Steady throughput: samples of steps 2..N over the time from step 1 to step N."""
        st = self.steps
        if len(st) < 2 or st[-1][0] <= st[0][0]:
            return None
        return sum(s[2] for s in st[1:]) / (st[-1][0] - st[0][0])

    def samples_per_cpu_s(self) -> float | None:
        """Same steps as :meth:`samples_per_s`, per CPU-second of the training processes
        (less sensitive to other load on the machine than wall time)."""
        st = self.steps
        if len(st) < 2 or st[-1][4] <= st[0][4]:
            return None
        return sum(s[2] for s in st[1:]) / (st[-1][4] - st[0][4])

    def last_segment(self) -> Run:
        """The steps after the last restart of ``global_step`` (HF's in-process retries write
        trace lines for the steps a failed try completed)."""
        start = 0
        for i in range(1, len(self.steps)):
            if self.steps[i][3] <= self.steps[i - 1][3]:
                start = i
        return Run(label=self.label, rc=self.rc, wall_s=self.wall_s, steps=self.steps[start:])


def _tree_cpu_s(root: psutil.Process, children_only: bool) -> float:
    """user + system CPU seconds of the live processes under ``root`` (and root itself)."""
    total = 0.0
    try:
        procs = root.children(recursive=True) + ([] if children_only else [root])
    except psutil.Error:
        return total
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def watch(argv: Sequence[str], *, label: str, trace: Path, log: Path, cwd: Path,
          env: dict[str, str], children_only: bool = False) -> Run:  # fmt: skip
    """Run ``argv`` to completion, stamping each new trace line as it appears with the time
    and the CPU time used so far by the training process tree (``children_only``: not the
    root, which is then dsguard itself)."""
    trace.unlink(missing_ok=True)
    full_env = {**os.environ, **ENV, **env, "DSGUARD_SAMPLE_TRACE": str(trace)}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    steps: list[tuple[float, float, int, int, float]] = []
    buf = b""
    pos = 0
    t0 = time.monotonic()
    timed_out = False
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        root = psutil.Process(proc.pid)

        def poll_trace() -> None:
            nonlocal buf, pos
            try:
                with trace.open("rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                return
            if not chunk:
                return
            now_m, now_w = time.monotonic() - t0, time.time()
            cpu = _tree_cpu_s(root, children_only)
            pos += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    rec = json.loads(line)
                    n, gs = len(rec["sample_ids"]), int(rec["global_step"])
                    steps.append((now_m, now_w, n, gs, cpu))

        while proc.poll() is None:
            poll_trace()
            if time.monotonic() - t0 > RUN_TIMEOUT_S:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(POLL_S)
        wall = time.monotonic() - t0
        poll_trace()
    text = log.read_text(errors="replace")
    run = Run(label=label, rc=proc.returncode, wall_s=wall, steps=steps, timed_out=timed_out,
              log=str(log), load1=os.getloadavg()[0])  # fmt: skip
    m = re.search(r"p5-memory: VmPeak=(-?\d+) VmHWM=(-?\d+)", text)
    if m:
        run.vm_peak, run.vm_hwm = int(m.group(1)), int(m.group(2))
    for line in text.splitlines():
        if _OOM_RX.search(line):
            run.oom_line = line.strip()[:200]
            break
    run.tries = len(_TRY_RX.findall(text))
    run.total_batches = [int(x) for x in _TOTAL_RX.findall(text)]
    return run


def direct(sc: Scenario, micro: int, accum: int, *, steps: int, budget: int | None, tmp: Path,
           label: str, extra: Sequence[str] = (), deepspeed: bool = True) -> Run:  # fmt: skip
    """The trainer itself (``bench/p5_train.py``), under ``RLIMIT_AS`` = budget if given,
    set by dsguard's own exec shim (as ``resources.host_memory_limit`` does)."""
    work = tmp / label
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    cmd = [py, "-m", "bench.p5_train", *trainer_args(sc, steps, work / "out"),
           *knob_args(sc, micro, accum, deepspeed), *extra]  # fmt: skip
    if budget is not None:
        cmd = [py, "-m", "dsguard.run.exec_shim", "--as-bytes", str(budget), "--", *cmd]
    print(f"  [P5] {label} ...", file=sys.stderr, flush=True)
    run = watch(cmd, label=label, trace=work / "trace.jsonl", log=work / "log.txt",
                cwd=REPO_ROOT, env={})  # fmt: skip
    print(f"  [P5] {label}: rc {run.rc}, {run.wall_s:.1f} s, {len(run.steps)} steps, "
          f"{_fmt_rate(run.samples_per_s())} samples/s, VmPeak {_gb(run.vm_peak)}",
          file=sys.stderr, flush=True)  # fmt: skip
    return run


# -- dsguard ---------------------------------------------------------------------------------


def write_p5_job(sc: Scenario, steps: int, budget: int, work: Path) -> Path:
    out = work / "outputs"
    job: dict[str, Any] = {
        "name": f"p5-{sc.name}",
        "workdir": str(work),
        "launcher": "python",
        "module": "dsguard.train",
        "python": sys.executable,
        "args": trainer_args(sc, steps, out),
        "env": dict(ENV),
        "train": {
            "micro_batch_size": sc.micro,
            "gradient_accumulation_steps": sc.accum,
            "max_length": sc.max_length,
            "dataloader_workers": 0,
            "pin_memory": False,
        },
        "deepspeed": {"config": str(DS_CONFIG)},
        "checkpoints": {"dir": str(out)},
        # The sweep and HF runs are limited by RLIMIT_AS (the exec shim): dsguard's runs too.
        "resources": {"host_memory_limit": f"{budget // MIB}MiB", "host_memory_via": "rlimit_as"},
        "limits": {"min_max_length": 256},
        "log_dir": str(work / "runs"),
    }
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def _ts(ev: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(ev["ts"])).timestamp()


def dsguard_run(sc: Scenario, steps: int, budget: int, tmp: Path) -> dict[str, Any]:
    work = tmp / f"{sc.name}-dsguard"
    work.mkdir(parents=True, exist_ok=True)
    job = write_p5_job(sc, steps, budget, work)
    print(f"  [P5] {sc.name} dsguard run ...", file=sys.stderr, flush=True)
    run = watch([*dsguard_argv(), "run", str(job), "--quiet"], label=f"{sc.name}-dsguard",
                trace=work / "trace.jsonl", log=work / "dsguard.txt", cwd=work,
                env={}, children_only=True)  # fmt: skip
    events = read_jsonl(work / "runs" / "events.jsonl")
    started = [e for e in events if e["event"] == "attempt_started"]
    failures = [e for e in events if e["event"] == "failure_detected"]
    policies = [e for e in events if e["event"] == "policy_applied"]
    end = next((e for e in events if e["event"] in ("run_succeeded", "run_gave_up")), None)
    final = started[-1] if started else None
    last_start = _ts(final) if final else 0.0
    # steps of the last attempt only (failed attempts may have written some)
    steps_last = [s for s in run.steps if s[1] >= last_start]
    final_run = Run(label=run.label, rc=run.rc, wall_s=run.wall_s, steps=steps_last)
    t_first_attempt = _ts(started[0]) if started else 0.0
    res: dict[str, Any] = {
        "rc": run.rc,
        "succeeded": bool(end and end["event"] == "run_succeeded"),
        "wall_s": run.wall_s,
        "attempts": len(started),
        "failed_attempts": len(started) - (1 if end and end["event"] == "run_succeeded" else 0),
        "failure_kinds": [f.get("kind") for f in failures],
        "failure_evidence": [str(f.get("evidence", ""))[:160] for f in failures],
        "rungs": [p.get("rung") for p in policies],
        "lost_s": last_start - t_first_attempt if started else None,
        "first_step_s": steps_last[0][0] if steps_last else None,  # after `dsguard run`
        "final_knobs": final.get("knobs") if final else None,
        "global_batch_start": started[0].get("global_batch") if started else None,
        "global_batch_final": final.get("global_batch") if final else None,
        "samples_per_step": sorted({s[2] for s in steps_last}),
        "samples_per_s": final_run.samples_per_s(),
        "samples_per_cpu_s": final_run.samples_per_cpu_s(),
        "final_attempt_s": (_ts(end) - last_start) if end and final else None,
        "load1_end": run.load1,
        "log": run.log,
    }
    knobs = res["final_knobs"] or {}
    print(f"  [P5] {sc.name} dsguard: {res['attempts']} attempts, lost {res['lost_s']}, final "
          f"{knobs.get('micro_batch_size')}x{knobs.get('gradient_accumulation_steps')}, "
          f"{_fmt_rate(res['samples_per_s'])} samples/s", file=sys.stderr, flush=True)  # fmt: skip
    return res


# -- scenario --------------------------------------------------------------------------------


def choose_budget(sc: Scenario, peaks: dict[tuple[str, int, int], int]) -> dict[str, int]:
    """Midpoint between VmPeak(fit_micro) and VmPeak(2 * fit_micro), rounded down to MiB."""
    fit = peaks[(sc.model, sc.max_length, sc.fit_micro)]
    over = peaks[(sc.model, sc.max_length, sc.fit_micro * 2)]
    budget = (fit + (over - fit) // 2) // MIB * MIB
    return {"budget": budget, "peak_fit": fit, "peak_over": over, "start_peak":
            peaks[(sc.model, sc.max_length, sc.micro)]}  # fmt: skip


def hf_summary(run: Run, sc: Scenario, deepspeed: bool) -> dict[str, Any]:
    seg = run.last_segment() if run.ok else Run(label=run.label, rc=run.rc, wall_s=run.wall_s)
    final_batch = seg.steps[-1][2] if seg.steps else None
    return {
        "deepspeed": deepspeed,
        "rc": run.rc,
        "ok": run.ok,
        "wall_s": run.wall_s,
        "tries": run.tries,
        "retries": max(0, run.tries - 1),
        "total_batches": run.total_batches,
        "steps_in_failed_tries": len(run.steps) - len(seg.steps) if run.ok else len(run.steps),
        "first_step_s": seg.first_step_s(),
        "samples_per_step": sorted({s[2] for s in seg.steps}),
        "final_micro": (final_batch // sc.accum) if final_batch else None,
        "global_batch_final": final_batch,
        "global_batch_changed": (final_batch != sc.global_batch) if final_batch else None,
        "samples_per_s": seg.samples_per_s(),
        "samples_per_cpu_s": seg.samples_per_cpu_s(),
        "oom_line": run.oom_line,
        "load1_end": run.load1,
        "log": run.log,
    }


#: (model, max_length, global batch, micro) -> sweep entries already measured, with budgets
SweepCache = dict[tuple[str, int, int, int], list[dict[str, Any]]]


def _sweep_entry(sc: Scenario, micro: int, budget: int, *, tmp: Path, steps: int,
                 cache: SweepCache) -> dict[str, Any]:  # fmt: skip
    """One sweep cell. Reused from another scenario of the same shape when that settles it:
    a config that fitted a smaller budget fits this one, one that failed a larger budget
    fails this one (same seed, same data, same allocations)."""
    key = (sc.model, sc.max_length, sc.global_batch, micro)
    for prev in cache.get(key, []):
        if (prev["fits"] and prev["budget"] <= budget) or (
            not prev["fits"] and prev["budget"] >= budget
        ):
            return {**prev, "reused_from": prev.get("reused_from") or prev["scenario"]}
    accum = sc.global_batch // micro
    r = direct(sc, micro, accum, steps=steps, budget=budget, tmp=tmp,
               label=f"{sc.name}-sweep-{micro}x{accum}")  # fmt: skip
    entry = {"scenario": sc.name, "budget": budget, "micro": micro, "accum": accum,
             "fits": r.ok, "rc": r.rc, "wall_s": r.wall_s, "first_step_s": r.first_step_s(),
             "samples_per_s": r.samples_per_s(), "samples_per_cpu_s": r.samples_per_cpu_s(),
             "oom_line": r.oom_line, "vm_peak": r.vm_peak,
             "load1_end": r.load1, "reused_from": None}  # fmt: skip
    cache.setdefault(key, []).append(entry)
    return entry


def run_scenario(sc: Scenario, steps: int, budget: int, *, tmp: Path, cache: SweepCache,
                 hf_check: bool) -> dict[str, Any]:  # fmt: skip
    res: dict[str, Any] = {"scenario": asdict(sc), "label": sc.label(), "budget": budget}
    res["dsguard"] = dsguard_run(sc, steps, budget, tmp)
    sweep = [_sweep_entry(sc, m, budget, tmp=tmp, steps=steps, cache=cache) for m in sc.chain()]
    res["sweep"] = sweep
    fitting = [s for s in sweep if s["fits"] and s["samples_per_s"]]
    best = max(fitting, key=lambda s: float(s["samples_per_s"])) if fitting else None
    res["best"] = best
    res["largest_fitting_micro"] = max((s["micro"] for s in fitting), default=None)
    ds_rate = res["dsguard"]["samples_per_s"]
    res["dsguard_over_best"] = ds_rate / best["samples_per_s"] if best and ds_rate else None
    # the same comparison per CPU-second (against the best by that measure)
    by_cpu = [s for s in fitting if s["samples_per_cpu_s"]]
    best_cpu = max(by_cpu, key=lambda s: float(s["samples_per_cpu_s"])) if by_cpu else None
    res["best_cpu"] = best_cpu
    ds_cpu = res["dsguard"]["samples_per_cpu_s"]
    res["dsguard_over_best_cpu"] = (
        ds_cpu / best_cpu["samples_per_cpu_s"] if best_cpu and ds_cpu else None
    )
    knobs = res["dsguard"]["final_knobs"] or {}
    same = next((s for s in sweep if s["micro"] == knobs.get("micro_batch_size")), None)
    res["sweep_of_dsguard_final"] = same["samples_per_s"] if same else None
    auto = ["--auto_find_batch_size", "true", "--log_level", "info"]
    hf = direct(sc, sc.micro, sc.accum, steps=steps, budget=budget, tmp=tmp,
                label=f"{sc.name}-hf-auto", extra=auto)  # fmt: skip
    res["hf"] = hf_summary(hf, sc, deepspeed=True)
    res["hf_plain"] = None
    if not hf.ok:
        # With DeepSpeed it found no batch size: the same without DeepSpeed (plain HF
        # Trainer, torch AdamW), as the issue allows.
        hf = direct(sc, sc.micro, sc.accum, steps=steps, budget=budget, tmp=tmp,
                    label=f"{sc.name}-hf-auto-plain", extra=auto, deepspeed=False)  # fmt: skip
        res["hf_plain"] = hf_summary(hf, sc, deepspeed=False)
    # HF retries inside the process that just failed. Would its last failing size have fit
    # in a fresh process under the same budget? (PROFILE_STEPS steps, accumulation as HF's.)
    tried = hf.total_batches
    res["hf_fresh_check"] = None
    if hf_check and hf.ok and len(tried) >= 2:
        m = tried[-2] // sc.accum
        ds = res["hf_plain"] is None
        r = direct(sc, m, sc.accum, steps=PROFILE_STEPS, budget=budget, tmp=tmp,
                   label=f"{sc.name}-fresh-{m}x{sc.accum}", deepspeed=ds)  # fmt: skip
        res["hf_fresh_check"] = {"micro": m, "accum": sc.accum, "fits": r.ok, "deepspeed": ds,
                                 "vm_peak": r.vm_peak, "oom_line": r.oom_line,
                                 "wall_s": r.wall_s}  # fmt: skip
    return res


def _key(model: str, max_length: int, global_batch: int, micro: int) -> str:
    return f"{model}-{max_length}-g{global_batch}-m{micro}"


def repeat_throughput(res: dict[str, Any], reps: int, tmp: Path) -> dict[str, Any]:
    """``reps`` more runs of every config that fitted in some scenario, round-robin (so load
    drift on a shared machine spreads over all configs), each under the tightest budget it
    fitted, with the scenarios' step count. Medians over these plus the sweep's own run."""
    by_name = {s.name: s for s in SCENARIOS}
    todo: dict[str, tuple[Scenario, int]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for r in res["scenarios"]:
        sc = by_name[r["scenario"]["name"]]
        for cell in r["sweep"]:
            if not cell["fits"]:
                continue
            key = _key(sc.model, sc.max_length, sc.global_batch, cell["micro"])
            if key not in todo or r["budget"] < todo[key][1]:
                todo[key] = (sc, r["budget"])
            c = configs.setdefault(key, {
                "model": sc.model, "max_length": sc.max_length, "micro": cell["micro"],
                "accum": cell["accum"], "wall": [], "cpu": [], "failed": 0,
            })  # fmt: skip
            if not cell.get("reused_from") and cell["samples_per_s"]:
                c["wall"].append(cell["samples_per_s"])
                c["cpu"].append(cell["samples_per_cpu_s"])
    for rep in range(reps):
        for key, (sc, budget) in sorted(todo.items()):
            c = configs[key]
            r = direct(sc, c["micro"], c["accum"], steps=int(res["steps"]), budget=budget,
                       tmp=tmp, label=f"rep{rep + 1}-{key}")  # fmt: skip
            if r.ok and r.samples_per_s():
                c["wall"].append(r.samples_per_s())
                c["cpu"].append(r.samples_per_cpu_s())
            else:
                c["failed"] += 1
    for key, c in configs.items():
        c["budget"] = todo[key][1]
        c["median_wall"] = statistics.median(c["wall"]) if c["wall"] else None
        c["median_cpu"] = statistics.median(x for x in c["cpu"] if x) if any(c["cpu"]) else None
    per_scenario: dict[str, Any] = {}
    for r in res["scenarios"]:
        sc = by_name[r["scenario"]["name"]]
        fits = [_key(sc.model, sc.max_length, sc.global_batch, c["micro"])
                for c in r["sweep"] if c["fits"]]  # fmt: skip
        knobs = r["dsguard"]["final_knobs"] or {}
        final = _key(sc.model, sc.max_length, sc.global_batch, int(knobs["micro_batch_size"]))
        out: dict[str, Any] = {"final": final, "fits": fits}
        for m in ("wall", "cpu"):
            ranked = [k for k in fits if configs[k][f"median_{m}"]]
            best = max(ranked, key=lambda k: float(configs[k][f"median_{m}"])) if ranked else None
            out[f"best_{m}"] = best
            f_med = configs[final][f"median_{m}"] if final in configs else None
            out[f"final_over_best_{m}"] = (
                f_med / configs[best][f"median_{m}"] if best and f_med else None
            )
        per_scenario[sc.name] = out
    return {"reps": reps, "configs": configs, "scenarios": per_scenario}


def run(
    quick: bool = False,
    only: Sequence[str] = (),
    keep: Path | None = None,
    reps: int | None = None,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """All scenarios (or ``previous`` results, to only add throughput repeats); within a
    shape, the tightest budget first (so sweep cells can be reused, see :func:`_sweep_entry`);
    then ``reps`` throughput repeats (:func:`repeat_throughput`)."""
    reps = (0 if quick else REPS) if reps is None else reps
    steps = QUICK_STEPS if quick else STEPS
    scenarios = [s for s in SCENARIOS if not only or s.name in only]
    out: dict[str, Any] = {"steps": steps, "profile_steps": PROFILE_STEPS, "env": ENV,
                           "ds_config": str(DS_CONFIG.relative_to(REPO_ROOT))}  # fmt: skip
    t_start = time.monotonic()
    with contextlib.ExitStack() as stack:
        if keep is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dsguard-p5-")))
        else:
            tmp = keep
            tmp.mkdir(parents=True, exist_ok=True)
        if previous is not None:
            out = previous
            out.setdefault("scenarios_s", out.get("total_s", 0.0))
        else:
            out.update(run_scenarios(scenarios, steps, tmp, hf_check=not quick))
            out["scenarios_s"] = time.monotonic() - t_start
        if reps > 0:
            t0 = time.monotonic()
            out["throughput"] = repeat_throughput(out, reps, tmp)
            out["throughput"]["wall_s"] = time.monotonic() - t0
    out["total_s"] = out.get("scenarios_s", 0.0) + out.get("throughput", {}).get("wall_s", 0.0)
    return out


def run_scenarios(scenarios: Sequence[Scenario], steps: int, tmp: Path,
                  hf_check: bool) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    t_start = time.monotonic()
    # 1. profile: VmPeak of every micro that a budget depends on, no limit
    needed: set[tuple[str, int, int]] = set()
    for sc in scenarios:
        needed |= {(sc.model, sc.max_length, m) for m in (sc.micro, sc.fit_micro,
                                                            sc.fit_micro * 2)}  # fmt: skip
    by_key = {(sc.model, sc.max_length): sc for sc in scenarios}
    peaks: dict[tuple[str, int, int], int] = {}
    profile = []
    for model, length, micro in sorted(needed):
        sc = by_key[(model, length)]
        accum = max(1, sc.global_batch // micro)
        r = direct(sc, micro, accum, steps=PROFILE_STEPS, budget=None, tmp=tmp,
                   label=f"profile-{model}-{length}-{micro}")  # fmt: skip
        if r.vm_peak is None or not r.ok:
            raise RuntimeError(f"profile run {r.label} failed (rc {r.rc}); see {r.log}")
        peaks[(model, length, micro)] = r.vm_peak
        profile.append({"model": model, "max_length": length, "micro": micro, "accum": accum,
                        "vm_peak": r.vm_peak, "vm_hwm": r.vm_hwm, "wall_s": r.wall_s,
                        "samples_per_s": r.samples_per_s(),
                        "samples_per_cpu_s": r.samples_per_cpu_s()})  # fmt: skip
    out["profile"] = profile
    out["profile_s"] = time.monotonic() - t_start
    results: list[dict[str, Any]] = []
    cache: SweepCache = {}
    order = sorted(scenarios, key=lambda s: (s.model, s.max_length, s.fit_micro))
    for sc in order:
        b = choose_budget(sc, peaks)
        t0 = time.monotonic()
        one = run_scenario(sc, steps, b["budget"], tmp=tmp, cache=cache, hf_check=hf_check)
        one["budget_choice"] = b
        one["scenario_s"] = time.monotonic() - t0
        results.append(one)
    out["scenarios"] = sorted(results, key=lambda r: str(r["scenario"]["name"]))
    # logs live in the work dir: keep the tails of unexpected failures in the results
    for one in results:
        for part in (one["dsguard"], one["hf"], one["hf_plain"]):
            if part is None:
                continue
            log = Path(part.pop("log"))
            bad = not part.get("succeeded", part.get("ok"))
            if bad and log.exists():
                part["log_tail"] = log.read_text(errors="replace")[-3000:]
    return out


# -- report ----------------------------------------------------------------------------------


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f} GB"


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _knobs(k: dict[str, Any] | None) -> str:
    k = k or {}
    return f"{k.get('micro_batch_size')}x{k.get('gradient_accumulation_steps')}"


def markdown(res: dict[str, Any]) -> str:
    loads = [
        float(x["load1_end"])
        for r in res["scenarios"]
        for x in [r["dsguard"], r["hf"], r["hf_plain"] or {}, *r["sweep"]]
        if "load1_end" in x
    ]
    lines = [
        f"1-minute load average at the end of each run: {min(loads, default=0):.2f} to "
        f"{max(loads, default=0):.2f}.\n",
        f"{res['steps']} optimizer steps per run (profile runs: {res['profile_steps']}), "
        f"`--save_strategy no`; scenarios {res['scenarios_s'] / 60:.1f} min, of which profile "
        f"{res['profile_s']:.0f} s.\n",
        "Profile, no limit (VmPeak = peak virtual memory, what RLIMIT_AS limits; VmHWM = peak "
        "RSS):\n",
        "| model, max_length | micro x accum | VmPeak | VmHWM | samples/s | per CPU-s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for p in res["profile"]:
        lines.append(
            f"| {p['model']}, {p['max_length']} | {p['micro']}x{p['accum']} | "
            f"{_gb(p['vm_peak'])} | {_gb(p['vm_hwm'])} | {_fmt_rate(p['samples_per_s'])} | "
            f"{_fmt_rate(p.get('samples_per_cpu_s'))} |"
        )
    lines += [
        "",
        "**dsguard against the exhaustive sweep.** Throughput is *samples/s / samples per "
        "CPU-second* over steps 2..N. Sweep cells marked *X are reused from scenario X's run "
        "(see Method). OOM = failed under the budget.\n",
        "| scenario | budget | dsguard: failed attempts | lost s | final | global batch | "
        "throughput | sweep under the same budget | best (wall / CPU) | dsguard / best "
        "(wall / CPU) |",
        "|---|---:|---:|---:|---|---|---:|---|---|---:|",
    ]
    for r in res["scenarios"]:
        ds = r["dsguard"]
        cells = []
        for s in r["sweep"]:
            v = _rates(s) if s["fits"] else "OOM"
            star = f"*{s['reused_from']}" if s.get("reused_from") else ""
            cells.append(f"{s['micro']}x{s['accum']}: {v}{star}")
        best = r["best"]
        ratio = r["dsguard_over_best"]
        gb = (
            f"{ds['global_batch_final']} kept"
            if ds["global_batch_start"] == ds["global_batch_final"]
            else f"{ds['global_batch_start']} -> {ds['global_batch_final']}"
        )
        lines.append(
            f"| {r['scenario']['name']}: {r['label']} | {r['budget'] / 2**30:.2f} GiB | "
            f"{ds['failed_attempts']}{'' if ds['succeeded'] else ' (gave up)'} | "
            f"{_s(ds['lost_s'])} | {_knobs(ds['final_knobs'])} | {gb} | "
            f"{_rates(ds)} | {'; '.join(cells)} | {_best(best)} / {_best(r['best_cpu'])} | "
            f"{_ratio(ratio)} / {_ratio(r['dsguard_over_best_cpu'])} |"
        )
    lines += _throughput_md(res.get("throughput"))
    lines += [
        "",
        "**Time and batch: dsguard, HF `--auto_find_batch_size true`, and the oracle** (same "
        "budget and start config; seconds from launch; oracle = the best sweep config run "
        "directly, i.e. what knowing the answer in advance costs; HF tries = `***** Running "
        "training *****` banners, with the global batch of each try):\n",
        "| scenario | run | attempts / tries | lost s | first step s | total s | final micro x "
        "accum | global batch | throughput |",
        "|---|---|---|---:|---:|---:|---|---|---:|",
    ]
    for r in res["scenarios"]:
        sc, ds, best = r["scenario"], r["dsguard"], r["best"] or {}
        g0 = sc["micro"] * sc["accum"]
        gb_ds = (
            f"{ds['global_batch_final']} kept"
            if ds["global_batch_start"] == ds["global_batch_final"]
            else f"**{ds['global_batch_start']} -> {ds['global_batch_final']}**"
        )
        name = sc["name"]
        lines.append(
            f"| {name} | dsguard | {ds['attempts']} | {_s(ds['lost_s'])} | "
            f"{_s(ds['first_step_s'])} | {_s(ds['wall_s'])} | {_knobs(ds['final_knobs'])} | "
            f"{gb_ds} | {_rates(ds)} |"
        )
        for hf in (r["hf"], r["hf_plain"]):
            if hf is None:
                continue
            if hf["global_batch_final"] is None:
                gb_hf = "-"
            elif hf["global_batch_changed"]:
                gb_hf = f"**{g0} -> {hf['global_batch_final']}**"
            else:
                gb_hf = f"{g0} kept"
            seq = " -> ".join(str(b) for b in hf["total_batches"]) or "-"
            what = "HF auto" + ("" if hf["deepspeed"] else ", no DeepSpeed")
            outcome = "" if hf["ok"] else f"; **failed** (rc {hf['rc']})"
            if hf["steps_in_failed_tries"]:
                outcome += f"; {hf['steps_in_failed_tries']} optimizer step(s) done by failed tries"
            final = f"{hf['final_micro']}x{sc['accum']}" if hf["final_micro"] else "-"
            lines.append(
                f"| {name} | {what} | {hf['tries']} ({seq}){outcome} | - | "
                f"{_s(hf['first_step_s'])} | {_s(hf['wall_s'])} | {final} | {gb_hf} | "
                f"{_rates(hf)} |"
            )
        lines.append(
            f"| {name} | oracle ({_best(r['best'])}) | 1 | 0 | "
            f"{_s(best.get('first_step_s'))} | {_s(best.get('wall_s'))} | {_best(r['best'])} | "
            f"{g0} kept | {_rates(best) if best else '-'} |"
        )
    checks = [r for r in res["scenarios"] if r.get("hf_fresh_check")]
    if checks:
        lines += ["", "HF's last failing size, retried in a fresh process under the same budget:\n"]
        for r in checks:
            c = r["hf_fresh_check"]
            lines.append(
                f"- {r['scenario']['name']}: micro {c['micro']}x{c['accum']}"
                f"{'' if c['deepspeed'] else ' (no DeepSpeed)'}: "
                f"{'fits' if c['fits'] else 'fails'} (VmPeak {_gb(c['vm_peak'])})"
            )
    return "\n".join(lines)


def _span(xs: Sequence[float | None]) -> str:
    v = sorted(x for x in xs if x)
    if not v:
        return "-"
    return f"{statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})"


def _throughput_md(tp: dict[str, Any] | None) -> list[str]:
    if not tp:
        return []
    cfgs = tp["configs"]
    lines = [
        "",
        f"**Throughput repeats.** Every config that fitted somewhere, run {tp['reps']} more "
        "times round-robin under the tightest budget it fitted, plus its sweep run: median "
        f"(min-max) of n runs ({tp['wall_s'] / 60:.1f} min).\n",
        "| model, max_length, global batch | micro x accum | n | samples/s | per CPU-s |",
        "|---|---|---:|---:|---:|",
    ]
    for key in sorted(cfgs, key=lambda k: (cfgs[k]["model"], cfgs[k]["max_length"],
                                           -cfgs[k]["micro"])):  # fmt: skip
        c = cfgs[key]
        g = c["micro"] * c["accum"]
        lines.append(
            f"| {c['model']}, {c['max_length']}, {g} | {c['micro']}x{c['accum']} | "
            f"{len(c['wall'])} | {_span(c['wall'])} | {_span(c['cpu'])} |"
        )
    lines += [
        "",
        "| scenario | dsguard's final config | fitting configs | best by median samples/s | "
        "final / best | best by median per CPU-s | final / best |",
        "|---|---|---|---|---:|---|---:|",
    ]

    def mk(k: str | None) -> str:
        return "-" if k is None else f"{cfgs[k]['micro']}x{cfgs[k]['accum']}"

    for name, r in sorted(tp["scenarios"].items()):
        lines.append(
            f"| {name} | {mk(r['final'])} | {', '.join(mk(k) for k in r['fits'])} | "
            f"{mk(r['best_wall'])} | {_ratio(r['final_over_best_wall'])} | {mk(r['best_cpu'])} | "
            f"{_ratio(r['final_over_best_cpu'])} |"
        )
    return lines


def _rates(x: dict[str, Any]) -> str:
    return f"{_fmt_rate(x.get('samples_per_s'))} / {_fmt_rate(x.get('samples_per_cpu_s'))}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _best(best: dict[str, Any] | None) -> str:
    return f"{best['micro']}x{best['accum']}" if best else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.p5_healing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per run")
    parser.add_argument("--only", default="", help="comma-separated scenario names (A,B,...)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--keep", type=Path, help="work dir to keep (logs, job files, traces)")
    parser.add_argument("--reps", type=int, help=f"throughput repeats (default {REPS}; quick 0)")
    parser.add_argument(
        "--from-json", type=Path, help="skip the scenarios: add throughput repeats to these"
    )
    ns = parser.parse_args(argv)
    only = [x.strip().upper() for x in ns.only.split(",") if x.strip()]
    info = machine_info()
    t0 = time.monotonic()
    previous = json.loads(ns.from_json.read_text()) if ns.from_json else None
    res = run(ns.quick, only, ns.keep, ns.reps, previous)
    if previous is not None:
        res["machine_repeats"] = info
    else:
        res["machine"] = info
    res["wall_s"] = time.monotonic() - t0
    if ns.json is not None:
        ns.json.write_text(json.dumps(res, indent=1, default=str))
    print("Command: `python -m bench.p5_healing" + (" --quick" if ns.quick else "") + "`\n")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
