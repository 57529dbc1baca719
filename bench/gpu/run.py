"""``python -m bench.gpu.run``: the GPU proof of issue 7, run and measured.

Each scenario of :mod:`bench.gpu.configs` is written into ``--out`` and run with
``dsguard run job.yaml`` (the real supervisor, the real reference trainer, bf16 on the GPU
under ``resources.gpu_memory_fraction``; fp32 with a tiny model under
``resources.host_memory_limit`` with ``--dry-run``). While it runs, side threads record the
trainer's sample trace (one line per optimizer step, timestamped here when it appears) and
NVML's device memory (pynvml; "unknown" where there is no GPU). Afterwards, per attempt:

* the config (knobs) and its memory estimate, the failure and the rung applied after it;
* peak GPU memory: NVML (device used, sampled every ``--nvml-interval-s``, minus the
  baseline before the scenario) and torch (``max_memory_reserved`` / ``_allocated`` from the
  dsguard heartbeats, written every step; ``attempt_finished.gpu_mem_peak_bytes`` carries the
  reserved figure; an attempt killed at its OOM line reports what its last heartbeat saw);
* step time and tokens/s over the long-sequence steps (the step after a checkpoint save and
  the first step of an attempt are left out); HF's own ``train_runtime`` line as a check;
* OOM line -> next first step: ``fatal_output_detected.ts`` (the supervisor read the line) to
  the first trace record of the next attempt, split into relaunch and start-up.

Then a short sweep (unsupervised runs of ``bench.gpu.probe``) finds the fastest config that
fits at the micro_batch / gradient_checkpointing scenarios' model, cap and sequence length, and
the healed configs are compared with it. Output: ``summary.json``, ``summary.md`` (tables for
bench/RESULTS.md), ``memory_throughput.png`` (or ``.csv`` without matplotlib). ``--export DIR``
also copies them and a ``results.tar.gz`` of every small file (events, logs, traces, jobs; no
checkpoints) to DIR, after every scenario, so a run cut short still leaves its results there.
``--report A/summary.json B/summary.json --out DIR`` merges runs split over several calls.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import importlib
import itertools
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.gpu import configs as C
from bench.gpu.probe import parse as parse_probe

REPO_ROOT = C.REPO_ROOT

#: Rough wall time per scenario on the H200 (start-up ~30 s per attempt, 1B checkpoint saves
#: ~15 GB, JIT builds), used to skip what cannot finish before --deadline-s.
GPU_NEED_S = {
    "micro_batch": 200, "gradient_checkpointing": 150, "build_failure": 110, "zero3": 300,
    "lora": 150, "offload": 260, "sweep": 200, "sweep_run": 60,
}  # fmt: skip
DRY_NEED_S = {
    "micro_batch": 130, "gradient_checkpointing": 130, "build_failure": 110, "zero3": 150,
    "lora": 110, "offload": 150, "sweep": 100, "sweep_run": 90,
}  # fmt: skip


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def parse_ts(ts: str) -> float:
    return dt.datetime.fromisoformat(ts).timestamp()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


# ---------------------------------------------------------------------------------------------
# side threads: the trace watcher and the NVML sampler
# ---------------------------------------------------------------------------------------------


class TraceWatcher(threading.Thread):
    """Timestamps each new line of the trainer's sample trace (``DSGUARD_SAMPLE_TRACE``).

    The trainer writes a record in ``on_step_end``; the time it is seen here (polled every
    ``poll_s``) is the step's end, to within the poll interval.
    """

    def __init__(self, path: Path, poll_s: float) -> None:
        super().__init__(name="trace-watcher", daemon=True)
        self.path = path
        self.poll_s = poll_s
        self.records: list[tuple[float, dict[str, Any]]] = []
        self._stop_event = threading.Event()
        self._offset = 0
        self._partial = b""

    def _poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        t = time.time()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.records.append((t, rec))

    def run(self) -> None:
        while not self._stop_event.wait(self.poll_s):
            self._poll()
        self._poll()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


class NvmlSampler(threading.Thread):
    """Device memory used (NVML) every ``poll_s``; per-process figures where NVML gives them."""

    def __init__(self, poll_s: float, index: int = 0) -> None:
        super().__init__(name="nvml-sampler", daemon=True)
        self.poll_s = poll_s
        self.index = index
        self.samples: list[tuple[float, int, dict[int, int]]] = []
        self.available = False
        self.reason = ""
        self.baseline: int | None = None
        self.total: int | None = None
        self._nvml: Any = None
        self._handle: Any = None
        self._stop_event = threading.Event()
        try:
            nvml: Any = importlib.import_module("pynvml")
            nvml.nvmlInit()
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
            info = nvml.nvmlDeviceGetMemoryInfo(self._handle)
            self._nvml = nvml
            self.baseline = int(info.used)
            self.total = int(info.total)
            self.available = True
        except Exception as exc:  # no GPU, no driver, no pynvml: "unknown", never zero
            self.reason = f"{type(exc).__name__}: {exc}"

    def _sample(self) -> None:
        nvml = self._nvml
        try:
            used = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception as exc:
            self.reason = f"read failed: {exc}"
            return
        procs: dict[int, int] = {}
        with contextlib.suppress(Exception):
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                mem = getattr(p, "usedGpuMemory", None)
                if isinstance(mem, int):
                    procs[int(p.pid)] = mem
        self.samples.append((time.time(), used, procs))

    def run(self) -> None:
        if not self.available:
            return
        while not self._stop_event.wait(self.poll_s):
            self._sample()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)

    def peak(self, t0: float, t1: float) -> dict[str, Any]:
        if not self.available:
            return {"nvml": "unknown", "reason": self.reason}
        window = [s for s in self.samples if t0 <= s[0] <= t1]
        if not window:
            return {"nvml": "no samples in window"}
        used = max(s[1] for s in window)
        proc_peak = max((max(s[2].values(), default=0) for s in window), default=0)
        return {
            "nvml_used_peak": used,
            "nvml_baseline": self.baseline,
            "nvml_peak_above_baseline": used - (self.baseline or 0),
            "nvml_process_peak": proc_peak or None,
            "nvml_samples": len(window),
        }

    def dump(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as f:
            for t, used, procs in self.samples:
                f.write(json.dumps({"t": round(t, 3), "used": used, "procs": procs}) + "\n")


# ---------------------------------------------------------------------------------------------
# the training environment
# ---------------------------------------------------------------------------------------------

_ENV_PROBE = r"""
import json, platform, sys
out = {"python": sys.version.split()[0], "platform": platform.platform()}
for name in ("torch", "deepspeed", "transformers", "peft", "accelerate", "dsguard"):
    try:
        mod = __import__(name)
        out[name] = str(getattr(mod, "__version__", "?"))
        out[name + "_file"] = str(getattr(mod, "__file__", ""))
    except Exception as exc:
        out[name] = "unavailable: %r" % (exc,)
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu_name"] = p.name
        out["gpu_total_bytes"] = int(p.total_memory)
        out["gpu_capability"] = "%d.%d" % (p.major, p.minor)
except Exception as exc:
    out["torch_error"] = repr(exc)
print("GPU-BENCH-ENV " + json.dumps(out))
"""


def probe_environment(python: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"date": now_iso(), "nproc": os.cpu_count()}
    try:
        proc = subprocess.run(
            [python, "-c", _ENV_PROBE], capture_output=True, text=True, timeout=300,
            cwd=REPO_ROOT, check=False,
        )  # fmt: skip
        for line in proc.stdout.splitlines():
            if line.startswith("GPU-BENCH-ENV "):
                facts.update(json.loads(line[len("GPU-BENCH-ENV ") :]))
        if proc.returncode:
            facts["probe_error"] = proc.stderr[-2000:]
    except (OSError, subprocess.SubprocessError) as exc:
        facts["probe_error"] = repr(exc)
    try:
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if q.returncode == 0 and q.stdout.strip():
            name, driver, total = (x.strip() for x in q.stdout.splitlines()[0].split(","))
            facts.update(nvidia_smi_name=name, driver=driver, nvidia_smi_total=total)
    except (OSError, subprocess.SubprocessError):
        facts["driver"] = "unknown (no nvidia-smi)"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT,
            timeout=10, check=False,
        )  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
            text=True, cwd=REPO_ROOT, timeout=10, check=False,
        )  # fmt: skip
        if rev.returncode == 0:
            facts["git"] = rev.stdout.strip() + (" (+uncommitted)" if dirty.stdout.strip() else "")
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                facts["mem_total_bytes"] = int(line.split()[1]) * 1024
    return facts


# ---------------------------------------------------------------------------------------------
# build-failure preparation
# ---------------------------------------------------------------------------------------------

_BROKEN_CC = """#!/bin/sh
# bench/gpu: a C/C++ compiler whose back end is missing, as on a half-installed gcc. Anything
# that compiles fails with gcc's own message; version queries and the rest go to the real one.
for a in "$@"; do
  case "$a" in
    -c|-E|-S|*.c|*.cc|*.cpp|*.cxx|*.cu)
      echo "{name}: fatal error: cannot execute 'cc1plus': execvp: No such file or directory" >&2
      echo "compilation terminated." >&2
      exit 1;;
  esac
done
exec "{real}" "$@"
"""


def broken_compilers(bin_dir: Path) -> list[str]:
    bin_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name in ("c++", "g++", "gcc", "cc", "x86_64-linux-gnu-g++", "x86_64-linux-gnu-gcc"):
        real = shutil.which(name)
        if real is None:
            continue
        script = bin_dir / name
        script.write_text(_BROKEN_CC.replace("{name}", name).replace("{real}", real))
        script.chmod(0o755)
        made.append(name)
    return made


def seed_shm_comm(ext_dir: Path, python: str) -> str:
    """CPU accelerator only: DeepSpeed builds deepspeed_shm_comm for every run; give the fresh
    extensions dir a built one so that only the optimizer's op meets the broken compiler.

    Copied from the default cache when there is one (mtimes kept), then loaded once with the
    real compiler: a no-op when the copy is current, a rebuild (about a minute) when the cache
    was built for another environment (another venv writes other paths into build.ninja).
    """
    op = "deepspeed_shm_comm"
    ext_dir.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, torch.utils.cpp_extension as c; "
        "print(c.get_default_build_root()); print('py%d%d_' % sys.version_info[:2])"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    lines = proc.stdout.strip().splitlines()
    how = "built with the real compiler"
    if proc.returncode == 0 and len(lines) >= 2:
        root, prefix = Path(lines[-2]), lines[-1]
        for cached in sorted(root.glob(f"{prefix}*/{op}")):
            if (cached / f"{op}.so").is_file():
                shutil.copytree(cached, ext_dir / op, dirs_exist_ok=True)  # copy2: mtimes kept
                how = f"copied from {cached}, then loaded with the real compiler"
                break
    t0 = time.monotonic()
    subprocess.run(
        [python, "-c",
         "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"],
        env={**env, "TORCH_EXTENSIONS_DIR": str(ext_dir)}, check=True, timeout=600,
        capture_output=True,
    )  # fmt: skip
    return f"{how} ({time.monotonic() - t0:.0f} s)"


# ---------------------------------------------------------------------------------------------
# one scenario
# ---------------------------------------------------------------------------------------------


def _terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)


def _tee(proc: subprocess.Popen[bytes], log: Any) -> None:
    """dsguard's own lines to its log file and to this console (so a cut-off call shows them)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        log.flush()
        sys.stdout.write("   " + line.decode(errors="replace"))
        sys.stdout.flush()


def _dsguard(python: str, *args: str) -> list[str]:
    return [python, "-m", "dsguard", *args]


def _bytes(limit: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]i?B?)?\s*", limit)
    if m is None:
        raise ValueError(limit)
    scale = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    unit = m.group(2) or ""
    mult = 1
    if unit:
        mult = 1024 ** ("KMGT".index(unit[0]) + 1) if "i" in unit else scale[unit[0]]
    return int(float(m.group(1)) * mult)


class Runner:
    def __init__(self, a: argparse.Namespace, table: dict[str, C.Scenario]) -> None:
        self.a = a
        self.table = table
        self.dry: bool = a.dry_run
        self.out: Path = a.out.resolve()
        self.python: str = a.python
        self.deadline = time.monotonic() + a.deadline_s if a.deadline_s else None
        self.need = DRY_NEED_S if self.dry else GPU_NEED_S
        self.results: list[dict[str, Any]] = []
        self.sweep: dict[str, Any] | None = None
        self.machine: dict[str, Any] = {}
        self.poll_s = a.trace_interval_s
        self.nvml_s = a.nvml_interval_s
        # --no-fit: start each scenario exactly as written, so the start config meets its real
        # OOM; without it the first-fit plan (issue 15) moves a start it predicts will not fit
        self.fit_flags: tuple[str, ...] = () if a.fit else ("--no-fit",)

    # -- time budget --------------------------------------------------------------------------

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def can_start(self, what: str) -> bool:
        left = self.remaining()
        return left is None or left >= self.need.get(what, 120)

    # -- scenarios ----------------------------------------------------------------------------

    def gpu_total(self) -> int:
        total = self.machine.get("gpu_total_bytes")
        return int(total) if isinstance(total, int) else C.H200_TOTAL_BYTES

    def run_scenario(self, sc: C.Scenario) -> dict[str, Any]:
        extra_env: dict[str, str] = {}
        prep: dict[str, Any] = {}
        if sc.build_failure:
            bin_dir = self.out / f".{sc.name}-broken-bin"
            ext_dir = self.out / f".{sc.name}-torch-extensions"
            for p in (bin_dir, ext_dir):
                if p.exists():
                    shutil.rmtree(p)
            prep["broken_compilers"] = broken_compilers(bin_dir)
            if self.dry:
                prep["shm_comm"] = seed_shm_comm(ext_dir, self.python)
            else:
                ext_dir.mkdir(parents=True)
            extra_env = {
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "TORCH_EXTENSIONS_DIR": str(ext_dir),
            }
            prep["torch_extensions_dir"] = str(ext_dir)
        elif sc.optimizer == "ds_adam":
            # a fresh extensions dir: the JIT builds happen (and are timed) in this run
            ext_dir = self.out / f".{sc.name}-torch-extensions"
            if ext_dir.exists():
                shutil.rmtree(ext_dir)
            ext_dir.mkdir(parents=True)
            extra_env["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
            prep["torch_extensions_dir"] = str(ext_dir)
        mat = C.materialize(
            sc, self.out, dry=self.dry, gpu_total_bytes=self.gpu_total(), python=self.python,
            extra_env=extra_env,
        )  # fmt: skip
        print(f"\n== {sc.name}: {sc.purpose}", flush=True)
        print(C.estimate_markdown(mat.estimate), flush=True)
        result: dict[str, Any] = {"scenario": sc.name, "purpose": sc.purpose, "prep": prep}
        val = subprocess.run(
            _dsguard(self.python, "validate", str(mat.job)), capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        result["validate"] = {"exit": val.returncode, "output": (val.stdout + val.stderr)[-2000:]}
        if val.returncode != 0:
            print(val.stdout + val.stderr, flush=True)
            result["outcome"] = "job file refused by dsguard validate"
            return result

        watcher = TraceWatcher(mat.dir / "trace.jsonl", self.poll_s)
        sampler = NvmlSampler(self.nvml_s)
        watcher.start()
        sampler.start()
        t0 = time.time()
        left = self.remaining()
        timeout = self.a.scenario_timeout_s
        if left is not None:
            timeout = max(30.0, min(timeout, left - 25.0))
        log = (mat.dir / "dsguard.out").open("wb")
        proc = subprocess.Popen(
            _dsguard(self.python, "run", str(mat.job), "--quiet", *self.fit_flags), cwd=mat.dir,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        pump = threading.Thread(target=_tee, args=(proc, log), daemon=True)
        pump.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _terminate(proc, 40)
        finally:
            pump.join(timeout=10)
            log.close()
        t1 = time.time()
        watcher.stop()
        sampler.stop()
        sampler.dump(mat.dir / "nvml.jsonl")
        result.update(
            dsguard_exit=proc.returncode, timed_out=timed_out, wall_s=round(t1 - t0, 1),
            **collect(mat, watcher.records, sampler, dry=self.dry),
        )  # fmt: skip
        (mat.dir / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        if not self.a.keep_checkpoints:
            result["checkpoints_removed"] = remove_checkpoints(mat.dir)
        print(f"-> {result.get('outcome')}  ({result['wall_s']} s)", flush=True)
        return result

    # -- sweep --------------------------------------------------------------------------------

    def run_sweep(self, sw: C.Sweep) -> dict[str, Any]:
        root = self.out / "sweep"
        if root.exists():
            shutil.rmtree(root)
        m = C.MODELS[sw.model]
        rows: list[dict[str, Any]] = []
        cap = sw.cap_gib or sw.host_limit
        print(f"\n== sweep: {sw.model}, seq {sw.seq}, cap {cap}", flush=True)
        for cfg in sw.candidates:
            if not self.can_start("sweep_run") and rows:
                rows.append({"config": cfg.label(), "skipped": "deadline"})
                continue
            rows.append(self._sweep_one(sw, cfg, root, m))
            print(f"   {rows[-1]['config']}: {rows[-1].get('outcome')} "
                  f"{rows[-1].get('tokens_per_s')} tok/s", flush=True)  # fmt: skip
        fitting = [r for r in rows if r.get("fits") and r.get("tokens_per_s")]
        best = max(fitting, key=lambda r: float(r["tokens_per_s"]), default=None)
        return {
            "model": sw.model, "seq": sw.seq, "cap_gib": sw.cap_gib, "host_limit": sw.host_limit,
            "steps": sw.steps, "rows": rows, "best": best, "compare": list(sw.compare),
        }  # fmt: skip

    def _sweep_one(
        self, sw: C.Sweep, cfg: C.TrainConfig, root: Path, m: C.ModelShape
    ) -> dict[str, Any]:
        name = re.sub(r"[^A-Za-z0-9]+", "-", cfg.label()).strip("-")
        d = root / name
        d.mkdir(parents=True)
        sc = C.Scenario(
            f"sweep-{name}", "sweep", sw.model, cfg, (), (), (), cap_gib=sw.cap_gib,
            host_limit=sw.host_limit, warmup_steps=0, long_steps=sw.steps,
            precision=sw.precision, eager=sw.eager, pin_memory=not self.dry,
        )  # fmt: skip
        (d / "model.json").write_text(json.dumps(m.hf_config(), indent=1) + "\n")
        (d / "ds.json").write_text(json.dumps(C.deepspeed_config("torch_opt"), indent=1) + "\n")
        tokens = C.write_data(d / "data.jsonl", sc, cfg)
        args = C.trainer_args(sc, save=False)
        argv = [
            self.python, "-m", "bench.gpu.probe", *args, "--deepspeed", "ds.json",
            "--per_device_train_batch_size", str(cfg.micro),
            "--gradient_accumulation_steps", str(cfg.accum),
            "--model_max_length", str(cfg.seq),
            "--gradient_checkpointing", str(cfg.gc).lower(),
            "--lora_enable", str(cfg.lora).lower(),
            "--dataloader_num_workers", "0",
            "--dataloader_pin_memory", str(not self.dry).lower(),
        ]  # fmt: skip
        env = dict(os.environ)
        path = os.pathsep.join(x for x in (str(REPO_ROOT), env.get("PYTHONPATH")) if x)
        # The dsguard callback is active (heartbeats, and the GPU cap) only with a heartbeat
        # dir, as under dsguard: give it one, as attempt 1.
        env.update(
            HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=path,
            DSGUARD_SAMPLE_TRACE=str(d / "trace.jsonl"), DSGUARD_ATTEMPT="1",
            DSGUARD_HEARTBEAT_DIR=str(d / "heartbeat"), DSGUARD_HEARTBEAT_EVERY="1",
        )  # fmt: skip
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        if self.dry:
            env.update(OMP_NUM_THREADS="2", MALLOC_ARENA_MAX="2")
        limit = _bytes(sw.host_limit) if (self.dry and sw.host_limit) else None
        if not self.dry and sw.cap_gib:
            env["DSGUARD_GPU_MEMORY_FRACTION"] = str(C.cap_fraction(sw.cap_gib, self.gpu_total()))

        watcher = TraceWatcher(d / "trace.jsonl", self.poll_s)
        sampler = NvmlSampler(self.nvml_s)
        watcher.start()
        sampler.start()
        t0 = time.time()
        with (d / "train.log").open("wb") as log:
            proc = subprocess.Popen(
                argv, cwd=d, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
            if limit is not None:  # RLIMIT_AS, as dsguard's exec shim sets it (before torch)
                resource.prlimit(proc.pid, resource.RLIMIT_AS, (limit, limit))
            try:
                proc.wait(timeout=self.a.sweep_timeout_s)
            except subprocess.TimeoutExpired:
                _terminate(proc, 20)
        t1 = time.time()
        watcher.stop()
        sampler.stop()
        text = (d / "train.log").read_text(errors="replace")
        steps = step_figures(watcher.records, tokens, n_short=0, skip_steps=set())
        probe = parse_probe(text) or {}
        hb = _heartbeat(d, 1)
        oom = bool(re.search(r"CUDA out of memory|DefaultCPUAllocator: can't allocate", text))
        row: dict[str, Any] = {
            "config": cfg.label(), "micro": cfg.micro, "accum": cfg.accum, "gc": cfg.gc,
            "exit": proc.returncode, "fits": proc.returncode == 0, "oom": oom,
            "outcome": "ok" if proc.returncode == 0 else ("OOM" if oom else "failed"),
            "wall_s": round(t1 - t0, 1), **steps, **sampler.peak(t0, t1),
            "torch_max_reserved": probe.get("torch_max_reserved")
            or hb.get("max_memory_reserved_bytes"),
            "torch_max_allocated": probe.get("torch_max_allocated")
            or hb.get("max_memory_allocated_bytes"),
            "cap_applied": "capped at" in text,
            "vm_peak": probe.get("VmPeak"), "vm_hwm": probe.get("VmHWM"),
            "estimate_peak": C.estimate(m, cfg, precision=sw.precision, eager=sw.eager)["peak"],
        }  # fmt: skip
        if proc.returncode != 0:
            row["tail"] = text[-600:]
        (d / "result.json").write_text(json.dumps(row, indent=1, default=str) + "\n")
        return row

    # -- the whole run ------------------------------------------------------------------------

    def run(self, names: Sequence[str], sweep: bool) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        self.machine = probe_environment(self.python)
        self.machine["mode"] = "dry-run (CPU, fp32, host-memory limits)" if self.dry else "GPU"
        (self.out / "machine.json").write_text(json.dumps(self.machine, indent=1) + "\n")
        print(json.dumps(self.machine, indent=1), flush=True)
        table = self.table
        for name in names:
            if not self.can_start(name):
                self.results.append({"scenario": name, "outcome": "skipped: deadline"})
                continue
            self.results.append(self.run_scenario(table[name]))
            self.write_outputs()
        if sweep:
            if self.can_start("sweep"):
                self.sweep = self.run_sweep(C.dry_sweep() if self.dry else C.gpu_sweep())
            else:
                self.sweep = {"skipped": "deadline"}
        self.write_outputs()
        ok = all(r.get("succeeded") for r in self.results)
        return 0 if ok else 1

    def summary(self) -> dict[str, Any]:
        return {
            "machine": self.machine, "dry_run": self.dry, "scenarios": self.results,
            "sweep": self.sweep, "written": now_iso(),
        }  # fmt: skip

    def write_outputs(self) -> None:
        summ = self.summary()
        write_report([summ], self.out)
        if self.a.export:
            export(self.out, Path(self.a.export))


# ---------------------------------------------------------------------------------------------
# collection
# ---------------------------------------------------------------------------------------------


def remove_checkpoints(d: Path) -> int:
    """Delete checkpoint payloads (GBs each on the GPU); keep trainer_state.json files."""
    removed = 0
    out = d / "outputs"
    if not out.exists():
        return 0
    for p in sorted(out.rglob("*"), reverse=True):
        if p.is_file() and p.name != "trainer_state.json" and p.suffix != ".json":
            removed += p.stat().st_size
            p.unlink()
    return removed


def step_figures(
    records: list[tuple[float, dict[str, Any]]], tokens: list[int], *, n_short: int,
    skip_steps: set[int],
) -> dict[str, Any]:  # fmt: skip
    """Step time and tokens/s from timestamped trace records (one attempt's)."""
    if not records:
        return {"steps_seen": 0}
    out: dict[str, Any] = {
        "steps_seen": len(records),
        "first_step": records[0][1].get("global_step"),
        "last_step": records[-1][1].get("global_step"),
        "first_step_t": records[0][0],
    }
    dts: list[float] = []
    toks: list[int] = []
    for (ta, _ra), (tb, rb) in itertools.pairwise(records):
        ids = [int(i) for i in rb.get("sample_ids") or []]
        step = int(rb.get("global_step", -1))
        if step in skip_steps or not ids or min(ids) < n_short:
            continue
        dts.append(tb - ta)
        toks.append(sum(tokens[i] for i in ids if 0 <= i < len(tokens)))
    if dts:
        out["step_time_s"] = round(statistics.median(dts), 4)
        out["tokens_per_step"] = int(statistics.median(toks))
        out["tokens_per_s"] = round(sum(toks) / sum(dts), 1) if sum(dts) > 0 else None
        out["timed_steps"] = len(dts)
    return out


def _knob_config(knobs: dict[str, Any]) -> C.TrainConfig:
    return C.TrainConfig(
        micro=int(knobs["micro_batch_size"]),
        accum=int(knobs["gradient_accumulation_steps"]),
        seq=int(knobs.get("max_length") or 0),
        zero=int(knobs.get("zero_stage") or 0),
        offload=str(knobs.get("offload") or "none"),
        lora=bool(knobs.get("lora")),
        gc=bool(knobs.get("gradient_checkpointing")),
    )


_HF_RUNTIME = re.compile(r"'train_runtime': '?([\d.]+)'?.*?'train_samples_per_second': '?([\d.]+)")
_OP_TIME = re.compile(r"Time to load (\w+) op: ([\d.]+) seconds")
_OP_BUILD = re.compile(r"Building extension module (\w+)\.\.\.")
_OP_FAILED = re.compile(r"Error building extension '(\w+)'")


def log_facts(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(errors="replace")
    out: dict[str, Any] = {}
    found = list(_HF_RUNTIME.finditer(text))
    if found:
        m = found[-1]
        out["hf_train_runtime_s"] = float(m.group(1))
        out["hf_samples_per_s"] = float(m.group(2))
    ops = {name: float(sec) for name, sec in _OP_TIME.findall(text)}
    if ops:
        out["op_load_s"] = ops
    built = sorted(set(_OP_BUILD.findall(text)))
    if built:
        out["ops_built"] = built
    failed = sorted(set(_OP_FAILED.findall(text)))
    if failed:
        out["ops_failed"] = failed
    for line in text.splitlines():
        if "compiler_error" not in out and "error:" in line and "cc1plus" in line:
            out["compiler_error"] = line.strip()[:300]
        if "gpu_cap" not in out and "dsguard: GPU" in line and "capped at" in line:
            out["gpu_cap"] = line.strip()[-80:]
    return out


def _heartbeat(run_dir: Path, attempt: int) -> dict[str, Any]:
    path = run_dir / "heartbeat" / f"attempt-{attempt}-rank-0.json"
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def collect(
    mat: C.Materialized, records: list[tuple[float, dict[str, Any]]], sampler: NvmlSampler,
    *, dry: bool,
) -> dict[str, Any]:  # fmt: skip
    sc = mat.scenario
    run_dir = mat.dir / "runs"
    events = read_jsonl(run_dir / "events.jsonl")
    m = C.MODELS[sc.model]
    n_short = sc.warmup_steps * sc.start.per_rank_batch
    attempts: dict[int, dict[str, Any]] = {}
    for ev in events:
        n = ev.get("attempt")
        if not isinstance(n, int):
            continue
        a = attempts.setdefault(n, {"attempt": n})
        kind = ev["event"]
        t = parse_ts(ev["ts"])
        if kind == "attempt_started":
            knobs = ev.get("knobs") or {}
            cfg = _knob_config(knobs)
            a.update(
                t_start=t, knobs=knobs, config=cfg.label(), phase=ev.get("phase"),
                resume_from=ev.get("resume_from"), global_batch=ev.get("global_batch"),
                remedies=ev.get("remedies"),
                estimate_peak=C.estimate(m, cfg, precision=sc.precision, eager=sc.eager)["peak"],
            )  # fmt: skip
        elif kind == "fatal_output_detected":
            a.update(t_fatal=t, fatal_line=str(ev.get("line"))[:200])
        elif kind == "attempt_finished":
            a.update(
                t_end=t, exit_code=ev.get("exit_code"), ended_by=ev.get("ended_by"),
                duration_s=ev.get("duration_s"), gpu_mem_peak_bytes=ev.get("gpu_mem_peak_bytes"),
                host_rss_peak_bytes=ev.get("host_rss_peak_bytes"), last_step_hb=ev.get("last_step"),
                capabilities=ev.get("capabilities"),
            )  # fmt: skip
        elif kind == "failure_detected":
            a.update(t_failure=t, failure=ev.get("kind"), evidence=(ev.get("evidence") or [""])[0])
        elif kind == "policy_applied":
            a.update(
                rung=ev.get("rung"), changes=ev.get("changes"), new_phase=ev.get("new_phase"),
                global_batch_kept=ev.get("global_batch_before") == ev.get("global_batch_after"),
            )  # fmt: skip
        elif kind == "remedy_applied":
            a.update(remedy=ev.get("remedy"), remedy_reason=ev.get("reason"))
        elif kind == "phase_started":
            a.update(phase_started={k: ev.get(k) for k in ("phase", "init_from", "output_dir")})
    ordered = [attempts[k] for k in sorted(attempts) if "t_start" in attempts[k]]
    skip = {sc.save_steps + 1}
    for k, a in enumerate(ordered):
        t_end = float(a.get("t_end", time.time())) + 1.0
        t_next = float(ordered[k + 1]["t_start"]) if k + 1 < len(ordered) else t_end
        mine = [(t, r) for t, r in records if a["t_start"] <= t <= min(t_end, t_next)]
        a.update(step_figures(mine, mat.tokens, n_short=n_short, skip_steps=skip))
        if "first_step_t" in a:
            a["startup_s"] = round(a["first_step_t"] - a["t_start"], 2)
        a.update(sampler.peak(a["t_start"], t_end))
        hb = _heartbeat(run_dir, a["attempt"])
        a["torch_max_reserved"] = hb.get("max_memory_reserved_bytes")
        a["torch_max_allocated"] = hb.get("max_memory_allocated_bytes")
        a["heartbeat_step"] = hb.get("global_step")
        a.update(log_facts(run_dir / f"attempt-{a['attempt']}.log"))
    latencies = []
    for k, a in enumerate(ordered[:-1]):
        nxt = ordered[k + 1]
        t_line = a.get("t_fatal", a.get("t_failure"))
        if t_line is None:
            continue
        lat: dict[str, Any] = {
            "attempt": a["attempt"],
            "from": "fatal_output_detected" if "t_fatal" in a else "failure_detected",
            "to_next_attempt_started_s": round(nxt["t_start"] - t_line, 3),
        }
        if "first_step_t" in nxt:
            lat["to_next_first_step_s"] = round(nxt["first_step_t"] - t_line, 2)
        a["oom_to_next_first_step_s"] = lat.get("to_next_first_step_s")
        latencies.append(lat)
    names = [e["event"] for e in events]
    succeeded = "run_succeeded" in names
    rungs = [a["rung"] for a in ordered if a.get("rung")]
    remedies = [a["remedy"] for a in ordered if a.get("remedy")]
    intended_ok = set(sc.intended) <= set(rungs)
    if sc.build_failure:
        intended_ok = any(r.startswith("avoid_") for r in remedies)
    gave_up = next((e for e in events if e["event"] == "run_gave_up"), None)
    outcome = "succeeded" if succeeded else ("gave up" if gave_up else "did not finish")
    if succeeded and not intended_ok:
        outcome += " (without the intended rung)"
    for a in ordered:  # JSON-friendly, relative times
        for key in ("t_start", "t_end", "t_fatal", "t_failure", "first_step_t"):
            if key in a:
                a[key] = round(float(a[key]), 3)
    return {
        "model": sc.model, "params": m.params(), "cap_gib": None if dry else sc.cap_gib,
        "host_limit": sc.host_limit if dry else None, "fault_injected": sc.fault,
        "intended": list(sc.intended), "rungs_applied": rungs, "remedies": remedies,
        "intended_exercised": intended_ok, "succeeded": succeeded, "outcome": outcome,
        "gave_up_reason": None if gave_up is None else gave_up.get("reason"),
        "attempts": ordered, "latencies": latencies,
        "global_batch_kept": all(a.get("global_batch_kept", True) for a in ordered),
        "final": ordered[-1] if ordered else None, "estimate": mat.estimate["rows"],
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------


def _gb(n: Any) -> str:
    return f"{n / 1e9:.1f}" if isinstance(n, int | float) else "-"


def _num(n: Any, digits: int = 0) -> str:
    return f"{n:,.{digits}f}" if isinstance(n, int | float) else "-"


def _nvml(a: dict[str, Any]) -> str:
    if "nvml_peak_above_baseline" in a:
        return _gb(a["nvml_peak_above_baseline"])
    return "unknown" if a.get("nvml") == "unknown" else "-"


def merge(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several calls' summaries -> one (later scenarios of the same name win)."""
    by_name: dict[str, dict[str, Any]] = {}
    sweep = None
    machine: dict[str, Any] = {}
    for s in summaries:
        machine = machine or dict(s.get("machine") or {})
        for r in s.get("scenarios") or []:
            if r.get("outcome", "").startswith("skipped") and r["scenario"] in by_name:
                continue
            by_name[r["scenario"]] = r
        if s.get("sweep") and not (s["sweep"] or {}).get("skipped"):
            sweep = s["sweep"]
    order = [n for n in C.SCENARIO_ORDER if n in by_name] + [
        n for n in by_name if n not in C.SCENARIO_ORDER
    ]
    return {
        "machine": machine, "dry_run": any(s.get("dry_run") for s in summaries),
        "scenarios": [by_name[n] for n in order], "sweep": sweep,
        "parts": len(summaries), "written": now_iso(),
    }  # fmt: skip


def comparisons(summ: dict[str, Any]) -> list[dict[str, Any]]:
    sweep = summ.get("sweep") or {}
    best = sweep.get("best")
    out = []
    for r in summ.get("scenarios") or []:
        final = r.get("final") or {}
        if r.get("scenario") not in (sweep.get("compare") or []) or not r.get("succeeded"):
            continue
        knobs = final.get("knobs") or {}
        if r.get("model") != sweep.get("model") or knobs.get("max_length") != sweep.get("seq"):
            continue  # not the sweep's model / sequence length: no like-for-like comparison
        row: dict[str, Any] = {
            "scenario": r["scenario"], "final_config": final.get("config"),
            "final_tokens_per_s": final.get("tokens_per_s"),
        }  # fmt: skip
        same = next(
            (x for x in sweep.get("rows") or [] if x.get("config") == final.get("config")), None
        )
        if same is not None:
            row["final_config_in_sweep_tokens_per_s"] = same.get("tokens_per_s")
        if best:
            row["best_config"] = best.get("config")
            row["best_tokens_per_s"] = best.get("tokens_per_s")
            ref = row.get("final_config_in_sweep_tokens_per_s") or row["final_tokens_per_s"]
            if isinstance(ref, int | float) and best.get("tokens_per_s"):
                row["ratio"] = round(float(ref) / float(best["tokens_per_s"]), 3)
        out.append(row)
    return out


def markdown(summ: dict[str, Any]) -> str:
    mc = summ.get("machine") or {}
    dry = summ.get("dry_run")
    gpu = mc.get("gpu_name") or mc.get("nvidia_smi_name") or "none"
    lines = [
        "**GPU proof (issue 7)**"
        + (" -- DRY RUN on the CPU, not GPU figures" if dry else "")
        + " (`bench/gpu/`; paste under bench/RESULTS.md's `## GPU`)",
        "",
        f"- machine: {gpu}"
        + (f", {_gb(mc.get('gpu_total_bytes'))} GB" if mc.get("gpu_total_bytes") else "")
        + f"; {mc.get('nproc')} CPUs ({mc.get('cpu', '?')}); "
        f"{_gb(mc.get('mem_total_bytes'))} GB RAM",
        f"- driver {mc.get('driver', 'unknown')}; CUDA (torch) {mc.get('torch_cuda')}; "
        f"torch {mc.get('torch')}; DeepSpeed {mc.get('deepspeed')}; transformers "
        f"{mc.get('transformers')}; peft {mc.get('peft')}; accelerate {mc.get('accelerate')}; "
        f"Python {mc.get('python')}",
        f"- dsguard {mc.get('dsguard')} (git {mc.get('git', 'n/a')}); date {mc.get('date')}",
        f"- command: `python -m bench.gpu.run{' --dry-run' if dry else ''} ...` "
        f"({summ.get('parts', 1)} part(s))",
        "",
        "### Scenarios",
        "",
        "| scenario | model | cap | start -> final | rungs / remedies | attempts | result "
        "| failure line -> next first step (s) | final tokens/s |",
        "|---|---|---|---|---|---:|---|---|---:|",
    ]
    for r in summ.get("scenarios") or []:
        atts = r.get("attempts") or []
        if not atts:
            lines.append(f"| {r['scenario']} | | | | | 0 | {r.get('outcome')} | | |")
            continue
        cap = f"{r['cap_gib']} GiB" if r.get("cap_gib") else (r.get("host_limit") or "none")
        if r.get("fault_injected"):
            cap += " (fault injected)"
        moves = ", ".join(r.get("rungs_applied") or []) or "-"
        if r.get("remedies"):
            moves += "; " + ", ".join(r["remedies"])
        lat = (
            ", ".join(
                f"{_num(x.get('to_next_first_step_s'), 1)} "
                f"(relaunch {_num(x.get('to_next_attempt_started_s'), 2)})"
                for x in r.get("latencies") or []
            )
            or "-"
        )
        result = r.get("outcome", "?")
        if not r.get("global_batch_kept", True):
            result += ", GLOBAL BATCH CHANGED"
        lines.append(
            f"| {r['scenario']} | {r.get('model')} | {cap} | {atts[0].get('config')} -> "
            f"{atts[-1].get('config')} | {moves} | {len(atts)} | {result} | {lat} | "
            f"{_num((r.get('final') or {}).get('tokens_per_s'))} |"
        )
    lines += [
        "",
        "### Per attempt",
        "",
        "| scenario | # | config | resume from | ended | next | est. peak GB | NVML peak GB "
        "| torch reserved / allocated GB | host RSS GB | start-up s | step s | tokens/s |",
        "|---|---:|---|---|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in summ.get("scenarios") or []:
        for a in r.get("attempts") or []:
            ended = a.get("failure") or ("ok" if a.get("exit_code") == 0 else a.get("ended_by"))
            nxt = a.get("rung") or a.get("remedy") or "-"
            if a.get("new_phase"):
                nxt += " (new phase)"
            resume = a.get("resume_from")
            resume = Path(resume).name if resume else "fresh"
            if (a.get("phase_started") or {}).get("init_from"):
                resume += " (init from " + Path(a["phase_started"]["init_from"]).name + ")"
            lines.append(
                f"| {r['scenario']} | {a['attempt']} | {a.get('config')} | {resume} | {ended} | "
                f"{nxt} | {_gb(a.get('estimate_peak'))} | {_nvml(a)} | "
                f"{_gb(a.get('torch_max_reserved'))} / {_gb(a.get('torch_max_allocated'))} | "
                f"{_gb(a.get('host_rss_peak_bytes'))} | {_num(a.get('startup_s'), 1)} | "
                f"{_num(a.get('step_time_s'), 3)} | {_num(a.get('tokens_per_s'))} |"
            )
    sweep = summ.get("sweep")
    if sweep and sweep.get("rows"):
        lines += [
            "",
            f"### Sweep: {sweep['model']}, seq {sweep['seq']}, cap "
            f"{sweep.get('cap_gib') or sweep.get('host_limit')} ({sweep['steps']} steps each, "
            "unsupervised)",
            "",
            "| config | result | est. peak GB | NVML peak GB | torch reserved GB "
            "| VmPeak GB | step s | tokens/s |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for x in sweep["rows"]:
            lines.append(
                f"| {x.get('config')} | {x.get('outcome', x.get('skipped'))} | "
                f"{_gb(x.get('estimate_peak'))} | {_nvml(x)} | {_gb(x.get('torch_max_reserved'))} "
                f"| {_gb(x.get('vm_peak'))} | {_num(x.get('step_time_s'), 3)} | "
                f"{_num(x.get('tokens_per_s'))} |"
            )
        comps = comparisons(summ)
        if comps:
            lines += ["", "Healed config against the best fitting config of the sweep:", ""]
            for c in comps:
                lines.append(
                    f"- {c['scenario']}: final {c.get('final_config')} "
                    f"{_num(c.get('final_tokens_per_s'))} tok/s in the healed run, "
                    f"{_num(c.get('final_config_in_sweep_tokens_per_s'))} tok/s in the sweep; "
                    f"best {c.get('best_config')} {_num(c.get('best_tokens_per_s'))} tok/s; "
                    f"ratio {c.get('ratio', '-')}"
                )
    lines += [
        "",
        "Notes: failure line = `fatal_output_detected` (dsguard read the CUDA OOM line; a "
        "host OOM is known at the process exit: `failure_detected`) to the next attempt's "
        "first trace record. NVML peak = device memory used minus the baseline before the scenario "
        "(sampled); torch = max_memory_reserved / max_memory_allocated from the dsguard "
        "heartbeat (every step; an attempt ended at its OOM line shows its last heartbeat, "
        "before the failing step). Step time and tokens/s: long-sequence steps only, from the "
        "timestamped sample trace, leaving out each attempt's first step and the step after "
        "the checkpoint save. est. = bench/gpu/configs.py's design estimate.",
    ]
    if dry:
        lines.append(
            "Dry run: CPU, fp32, tiny models, RLIMIT_AS limits instead of the GPU cap; "
            "'fault injected' scenarios use the trainer's DSGUARD_FAULT (a real-format CUDA "
            "OOM at a step), because a host limit cannot make a ZeRO stage or offload heal."
        )
    return "\n".join(lines) + "\n"


def write_plot(summ: dict[str, Any], out: Path) -> str:
    rows = []
    for r in summ.get("scenarios") or []:
        for a in r.get("attempts") or []:
            rows.append({
                "label": f"{r['scenario']}#{a['attempt']}",
                "config": a.get("config"),
                "ended": a.get("failure") or ("ok" if a.get("exit_code") == 0 else "?"),
                "estimate_gb": (a.get("estimate_peak") or 0) / 1e9,
                "nvml_gb": (a.get("nvml_peak_above_baseline") or 0) / 1e9,
                "torch_reserved_gb": (a.get("torch_max_reserved") or 0) / 1e9,
                "host_rss_gb": (a.get("host_rss_peak_bytes") or 0) / 1e9,
                "tokens_per_s": a.get("tokens_per_s"),
                "cap_gb": (r["cap_gib"] * 1024**3 / 1e9) if r.get("cap_gib") else None,
            })  # fmt: skip
    csv_path = out / "memory_throughput.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["label"])
        w.writeheader()
        w.writerows(rows)
    if not rows:
        return "no attempts"
    try:
        mpl: Any = importlib.import_module("matplotlib")
        mpl.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return f"matplotlib not installed: plot data in {csv_path.name}"
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(rows)), 5))
    xs = list(range(len(rows)))
    width = 0.27
    mem_key = "nvml_gb" if any(r["nvml_gb"] for r in rows) else "host_rss_gb"
    mem_name = "NVML peak" if mem_key == "nvml_gb" else "host RSS peak"
    ax.bar([x - width for x in xs], [r["estimate_gb"] for r in rows], width, label="estimate")
    ax.bar(xs, [r[mem_key] for r in rows], width, label=mem_name)
    ax.bar([x + width for x in xs], [r["torch_reserved_gb"] for r in rows], width,
           label="torch reserved")  # fmt: skip
    ax.set_ylabel("peak memory (GB)")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['label']}\n{r['ended']}" for r in rows], rotation=60, ha="right",
                       fontsize=7)  # fmt: skip
    caps = [(x, r["cap_gb"]) for x, r in zip(xs, rows, strict=True) if r["cap_gb"]]
    if caps:
        ax.plot([c[0] for c in caps], [c[1] for c in caps], "r_", markersize=28, mew=2,
                label="cap")  # fmt: skip
    ax2 = ax.twinx()
    tps = [(x, r["tokens_per_s"]) for x, r in zip(xs, rows, strict=True) if r["tokens_per_s"]]
    ax2.plot([t[0] for t in tps], [t[1] for t in tps], "kD", label="tokens/s")
    ax2.set_ylabel("tokens/s (long-sequence steps)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    title = "dsguard GPU proof: memory and throughput per attempt"
    if summ.get("dry_run"):
        title += " (DRY RUN, CPU)"
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out / "memory_throughput.png", dpi=110)
    plt.close(fig)
    return "memory_throughput.png"


def write_report(summaries: Sequence[dict[str, Any]], out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    summ = merge(summaries) if len(summaries) > 1 else dict(summaries[0])
    summ["comparisons"] = comparisons(summ)
    summ["plot"] = write_plot(summ, out)
    (out / "summary.json").write_text(json.dumps(summ, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(markdown(summ))
    return summ


_SMALL = 4 * 1024 * 1024


def _small_files(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        rel = p.relative_to(root).parts
        if any(part.startswith(".") for part in rel):  # extensions dirs, broken compilers
            continue
        if p.suffix in (".pt", ".safetensors", ".bin", ".so", ".o") or p.stat().st_size > _SMALL:
            continue
        yield p


def export(out: Path, dest: Path) -> None:
    """Summary files plus one tarball of the small files, for the device's $OUT."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "summary.md", "memory_throughput.png",
                 "memory_throughput.csv"):  # fmt: skip
        if (out / name).exists():
            shutil.copy2(out / name, dest / name)
    tmp = dest / "results.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for p in _small_files(out):
            tar.add(p, arcname=str(Path(out.name) / p.relative_to(out)))
    tmp.replace(dest / "results.tar.gz")


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.gpu.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="run dir (or report dir)")
    p.add_argument("--dry-run", action="store_true", help="CPU, fp32, tiny models, host limits")
    p.add_argument("--scenarios", nargs="*", default=None,
                   help=f"of {', '.join(C.SCENARIO_ORDER)} (default: all on the GPU, "
                   f"{', '.join(C.DRY_DEFAULT)} on --dry-run)")  # fmt: skip
    p.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True,
                   help="run the throughput sweep after the scenarios")  # fmt: skip
    p.add_argument("--sweep-only", action="store_true")
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="skip what cannot finish within this many seconds of the start",
    )
    p.add_argument("--fit", action=argparse.BooleanOptionalAction, default=True,
                   help="let dsguard's first-fit plan move the start config (--no-fit: start "
                   "as written and meet the OOM)")  # fmt: skip
    p.add_argument("--scenario-timeout-s", type=float, default=900.0)
    p.add_argument("--sweep-timeout-s", type=float, default=300.0)
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        help="copy summary + results.tar.gz here after every scenario ($OUT)",
    )
    p.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        help="only merge these summary.json files into --out",
    )
    p.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep checkpoint payloads (default: removed after each scenario)",
    )
    p.add_argument("--python", default=sys.executable, help="the training interpreter")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME:k=v,...",
        help="e.g. lora:micro=5 or zero3:seq=3584 (micro, accum, seq, cap_gib, "
        "long_steps): a start that fit, or a heal that did not, on the GPU",
    )
    p.add_argument("--trace-interval-s", type=float, default=None)
    p.add_argument("--nvml-interval-s", type=float, default=0.1)
    a = p.parse_args(argv)
    if a.report:
        summaries = [json.loads(Path(f).read_text()) for f in a.report]
        summ = write_report(summaries, a.out)
        print((a.out / "summary.md").read_text())
        print(f"plot: {summ['plot']}")
        return 0
    if a.trace_interval_s is None:
        a.trace_interval_s = 0.05 if a.dry_run else 0.01
    table = dict(C.scenarios(a.dry_run))
    if a.sweep_only:
        names: list[str] = []
    elif a.scenarios == []:
        # "--scenarios" with no names once ran every scenario (an H200 call meant for the
        # sweep alone spent its time on them): refuse it rather than guess
        p.error("--scenarios needs at least one name (--sweep-only runs the sweep alone)")
    elif a.scenarios:
        unknown = [n for n in a.scenarios if n not in table]
        if unknown:
            p.error(f"unknown scenario(s) {unknown}; known: {', '.join(table)}")
        names = list(a.scenarios)
    else:
        names = list(C.DRY_DEFAULT if a.dry_run else C.SCENARIO_ORDER)
    for spec in a.override:
        name, _, kv = spec.partition(":")
        if name not in table:
            p.error(f"--override {spec}: unknown scenario {name!r}")
        table[name] = C.override(table[name], kv)
    runner = Runner(a, table)
    t0 = time.monotonic()
    code = runner.run(names, a.sweep or a.sweep_only)
    print((runner.out / "summary.md").read_text())
    print(f"total {time.monotonic() - t0:.0f} s; summary in {runner.out}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
