"""``dsguard doctor``: is this machine and this training environment ready for the job?

The failures this prevents are the ones that cost a night: a DeepSpeed JIT build that refuses
the CUDA toolkit at 2 a.m. (``ds_build_error`` gives up at once), a stale JIT ``lock`` file every
rank waits on forever (a ``hang`` after 30 minutes), a 64 MiB ``/dev/shm`` in a container
(DataLoader workers die with a bus error, NCCL cannot set up), a disk with no room for the next
checkpoint (``disk_full``), an unknown ``PYTORCH_CUDA_ALLOC_CONF`` key (CUDA initialisation
fails on every rank), GPU memory another process holds (a CUDA OOM dsguard would blame on the
config and "heal" by shrinking the batch).

Two halves, because the supervisor never imports torch or deepspeed:

* facts about the *training environment* come from :mod:`dsguard.probes.env_probe`, run with
  the job's interpreter and environment. A probe that cannot run (no such interpreter, torch
  missing, an import that kills the process) is itself a ``blocker`` row with the fix.
* facts about the *host* (NVML, RAM, swap, ``/dev/shm``, disk) are read here, with the same
  libraries the supervisor already uses (:mod:`dsguard.host.gpu`, psutil).

Every verdict is a pure function of those facts (``classify_*``), unit-tested without a GPU.
A check that could not measure says ``unknown``, never ``ok`` and never zero: a CPU host has no
NVML, which is not "0 GPUs with 0 bytes free".
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from dsguard.core.envfacts import EnvFacts
from dsguard.core.records import as_builtins
from dsguard.exitcodes import EXIT_BLOCKED, EXIT_OK
from dsguard.host import cgroup
from dsguard.host.envfacts import BuildLock, build_locks, detect, gpu_facts
from dsguard.host.gpu import GpuSnapshot, Unknown
from dsguard.host.gpu import snapshot as gpu_snapshot
from dsguard.host.probe import run_probe
from dsguard.job.model import Job, LauncherKind
from dsguard.probes import ENV_PROBE
from dsguard.probes.env_probe import parse_alloc_conf
from dsguard.run.checkpoints import list_checkpoints

__all__ = [
    "KNOWN_ALLOC_KEYS",
    "Check",
    "DoctorReport",
    "collect",
    "exit_code",
    "render_table",
]

Status = Literal["ok", "warn", "blocker", "unknown"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "blocker", "unknown")

GiB = 1024**3
MiB = 1024**2
#: /dev/shm below this is a warning: DataLoader workers pass batches through it and NCCL
#: puts its intra-node buffers there (Docker's default is 64 MiB).
SHM_WARN_BYTES = 1 * GiB
#: ...and below this, with workers or several ranks, a blocker.
SHM_BLOCKER_BYTES = 128 * MiB
DISK_MIN_FREE_BYTES = 10 * GiB
#: Other processes holding more than this on a job GPU: the first attempt starts short.
GPU_FOREIGN_WARN_BYTES = 1 * GiB
HOST_AVAILABLE_WARN_BYTES = 4 * GiB
PROBE_TIMEOUT_S = 180.0

#: Allocator keys torch 2.x knows (c10 ``AcceleratorAllocatorConfig`` and
#: ``CUDAAllocatorConfig::getKeys``, current main). A key outside this list and absent from
#: the installed torch's own libraries is reported: torch refuses an unknown key with
#: "Unrecognized key ... in CUDA allocator config" when CUDA starts.
KNOWN_ALLOC_KEYS: frozenset[str] = frozenset(
    {
        "max_split_size_mb",
        "max_non_split_rounding_mb",
        "garbage_collection_threshold",
        "roundup_power2_divisions",
        "expandable_segments",
        "large_segment_size_mb",
        "pinned_use_background_threads",
        "pinned_max_cached_size_mb",
        "pinned_max_round_threshold_mb",
        "backend",
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "pinned_num_register_threads",
        "pinned_reserve_segment_size_mb",
        "graph_capture_record_stream_reuse",
        "per_process_memory_fraction",
        "pinned_free_catch_all",
        "throw_on_cudamalloc_oom",
    }
)

#: DeepSpeed 0.19.8's ``cuda_minor_mismatch_ok``, used when the probe could not read the
#: installed DeepSpeed's own table.
DEFAULT_CUDA_MINOR_MISMATCH_OK: dict[str, list[str]] = {
    "10": ["10.0", "10.1", "10.2"],
    "11": [f"11.{m}" for m in range(9)],
    "12": ["12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"],
}
#: Ops a fine-tune commonly JIT-builds: CPU Adam (offloaded optimizer) and fused Adam.
KEY_OPS = ("cpu_adam", "fused_adam")


@dataclass(frozen=True, slots=True)
class Check:
    """One row: what was checked, the verdict, what was seen, and (warn/blocker) the fix."""

    name: str
    status: Status
    value: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)


@dataclass(frozen=True, slots=True)
class DoctorReport:
    checks: tuple[Check, ...]
    python: str
    job: str | None = None
    probe_s: float | None = None
    #: The probe's raw facts (``--json`` consumers and bug reports); None if it never ran.
    facts: Mapping[str, Any] | None = field(default=None, compare=False)
    #: The training environment as the run loop's remedies see it (``host.envfacts.detect``).
    env_facts: EnvFacts | None = field(default=None, compare=False)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "python": self.python,
            "probe_s": None if self.probe_s is None else round(self.probe_s, 3),
            "exit_code": exit_code(self),
            "counts": self.counts(),
            "checks": [c.as_dict() for c in self.checks],
            "facts": self.facts,
            "env_facts": None if self.env_facts is None else self.env_facts.as_dict(),
        }


def exit_code(report: DoctorReport) -> int:
    """0 when nothing blocks the job (warnings included), 1 for any blocker."""
    return EXIT_BLOCKED if any(c.status == "blocker" for c in report.checks) else EXIT_OK


def _gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GiB:.1f} GiB"


def _major_minor(version: str | None) -> str | None:
    if not version:
        return None
    parts = str(version).split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


# --------------------------------------------------------------------------------------------
# training environment (probe facts)
# --------------------------------------------------------------------------------------------


def classify_python(facts: Mapping[str, Any]) -> Check:
    py = facts.get("python") or {}
    return Check("python", "ok", f"{py.get('version', '?')} ({py.get('executable', '?')})")


def classify_torch(facts: Mapping[str, Any], *, python: str, nvml_gpus: int | None) -> list[Check]:
    """torch present; its CUDA build agrees with the GPUs NVML sees.

    ``nvml_gpus``: devices NVML reports, None when NVML is unavailable (unknown, not zero).
    """
    if "torch" not in facts:
        stage = facts.get("stage")
        if stage == "torch":
            return [
                Check(
                    "torch",
                    "blocker",
                    "importing torch killed the interpreter",
                    "run `python -c 'import torch'` with the job's interpreter to see the "
                    "crash; reinstall torch (a CUDA library mismatch is the usual cause)",
                )
            ]
        return []
    t = facts["torch"]
    if "error" in t:
        return [
            Check(
                "torch",
                "blocker",
                f"not importable: {t['error']}",
                f"{python} -m pip install torch (or set `python:` in the job to the training "
                "environment's interpreter)",
            )
        ]
    cuda, hip = t.get("cuda"), t.get("hip")
    rows = [Check("torch", "ok", f"{t.get('version')} ({_build_word(cuda, hip)})")]
    if cuda is None and hip is None:
        if nvml_gpus:
            rows.append(
                Check(
                    "torch cuda",
                    "warn",
                    f"CPU build of torch, but NVML sees {nvml_gpus} GPU(s): training would run "
                    "on the CPU",
                    "install a CUDA build of torch (pip install torch --index-url "
                    "https://download.pytorch.org/whl/cuXYZ) in the training environment",
                )
            )
        else:
            rows.append(Check("torch cuda", "ok", "CPU build; no GPUs to use"))
        return rows
    if "cuda_error" in t or not t.get("cuda_available"):
        why = t.get("cuda_error") or "; ".join(t.get("cuda_warnings") or []) or "no reason given"
        status: Status = "blocker" if nvml_gpus else "warn"
        rows.append(
            Check(
                "torch cuda",
                status,
                f"torch.cuda.is_available() is false: {why}",
                "a driver older than torch's CUDA, CUDA_VISIBLE_DEVICES hiding every GPU, or no "
                "/dev/nvidia* in the container: check `nvidia-smi` against torch.version.cuda",
            )
        )
    else:
        rows.append(
            Check("torch cuda", "ok", f"CUDA {cuda}: {t.get('device_count', '?')} device(s)")
        )
    return rows


def _build_word(cuda: object, hip: object) -> str:
    if hip:
        return f"ROCm {hip}"
    if cuda:
        return f"CUDA {cuda}"
    return "CPU build"


def cuda_match(nvcc: str, torch_cuda: str, table: Mapping[str, Sequence[str]]) -> str:
    """``match`` / ``compatible`` / ``mismatch``: DeepSpeed's ``assert_no_cuda_mismatch``.

    Major.minor equal is a match; otherwise both must be in ``cuda_minor_mismatch_ok`` for
    the toolkit's major version, else DeepSpeed's JIT build raises ``CUDAMismatchException``
    (unless ``DS_SKIP_CUDA_CHECK=1``).
    """
    sys_mm, torch_mm = _major_minor(nvcc), _major_minor(torch_cuda)
    if sys_mm == torch_mm:
        return "match"
    allowed = table.get(str(nvcc).split(".")[0], ())
    if sys_mm in allowed and torch_mm in allowed:
        return "compatible"
    return "mismatch"


def classify_toolkit(facts: Mapping[str, Any]) -> list[Check]:
    """CUDA_HOME and nvcc as DeepSpeed's op builder will find them."""
    tk = facts.get("toolkit") or {}
    env = facts.get("env") or {}
    t = facts.get("torch") or {}
    torch_cuda = t.get("cuda")
    home, how = tk.get("home"), tk.get("how")
    release = tk.get("nvcc_release")
    rows: list[Check] = []
    no_torch = "torch" not in facts or "error" in t
    cpu_torch = not no_torch and torch_cuda is None
    seen_home = f"{home} (from {how})" if home else "none found"
    seen_nvcc = f"{release} ({tk.get('nvcc')})" if release else "none"
    env_home = env.get("CUDA_HOME")
    if env_home and tk.get("exists") is False:
        rows.append(
            Check(
                "CUDA_HOME",
                "warn",
                f"CUDA_HOME={env_home} does not exist",
                "point CUDA_HOME at the CUDA toolkit root (the directory with bin/nvcc and "
                "include/cuda.h), or unset it",
            )
        )
    elif no_torch:
        rows.append(Check("CUDA_HOME", "unknown", f"{seen_home}; not judged without torch"))
    elif cpu_torch:
        rows.append(Check("CUDA_HOME", "ok", f"{seen_home}; not used by a CPU build of torch"))
    elif not home:
        rows.append(
            Check(
                "CUDA_HOME",
                "warn",
                "not set, no nvcc on PATH, no /usr/local/cuda: DeepSpeed cannot JIT-build CUDA "
                "ops (only prebuilt ones work)",
                f"install the CUDA {_major_minor(torch_cuda)} toolkit and set CUDA_HOME to it",
            )
        )
    elif not tk.get("cuda_h"):
        rows.append(
            Check(
                "CUDA_HOME",
                "warn",
                f"{seen_home} has no include/cuda.h: JIT builds would compile against the "
                "wrong directory",
                "set CUDA_HOME to the toolkit root (the directory with bin/nvcc and "
                "include/cuda.h), e.g. /usr/local/cuda",
            )
        )
    else:
        rows.append(Check("CUDA_HOME", "ok", seen_home))

    if no_torch:
        rows.append(Check("nvcc", "unknown", f"{seen_nvcc}; not judged without torch"))
        return rows
    if cpu_torch:
        rows.append(Check("nvcc", "ok", f"{seen_nvcc}; not used by a CPU build of torch"))
        return rows
    if not release:
        rows.append(
            Check(
                "nvcc",
                "warn",
                f"no usable nvcc: {tk.get('nvcc_error') or 'no CUDA_HOME'}; DeepSpeed's JIT "
                "builds of CUDA ops fail (ds_build_error)",
                f"install the CUDA {_major_minor(torch_cuda)} toolkit (nvcc) and set CUDA_HOME, "
                "or install DeepSpeed with prebuilt ops (DS_BUILD_OPS=1 pip install deepspeed)",
            )
        )
        return rows
    ds = facts.get("deepspeed") or {}
    table = ds.get("cuda_minor_mismatch_ok") or DEFAULT_CUDA_MINOR_MISMATCH_OK
    verdict = cuda_match(release, str(torch_cuda), table)
    value = f"{release} at {tk.get('nvcc')}; torch built with CUDA {torch_cuda}"
    if verdict == "match":
        rows.append(Check("nvcc", "ok", value))
    elif verdict == "compatible":
        rows.append(Check("nvcc", "ok", value + " (minor versions DeepSpeed accepts)"))
    elif env.get("DS_SKIP_CUDA_CHECK") == "1":
        rows.append(
            Check("nvcc", "ok", value + "; mismatch allowed by DS_SKIP_CUDA_CHECK=1 (at own risk)")
        )
    else:
        rows.append(
            Check(
                "nvcc",
                "warn",
                value + ": DeepSpeed's JIT builds refuse this pair (CUDAMismatchException)",
                f"install the CUDA {_major_minor(str(torch_cuda))} toolkit and point CUDA_HOME "
                "at it, or a torch built for CUDA "
                f"{_major_minor(release)}; DS_SKIP_CUDA_CHECK=1 skips the check at your own risk",
            )
        )
    return rows


def _jit_ops(facts: Mapping[str, Any]) -> list[str]:
    ops = (facts.get("deepspeed") or {}).get("ops") or {}
    return [n for n, o in ops.items() if o.get("compatible") and not o.get("installed")]


def classify_ninja(facts: Mapping[str, Any]) -> Check:
    """torch's JIT needs ``ninja`` on PATH (``is_ninja_available`` runs ``ninja --version``)."""
    n = facts.get("ninja") or {}
    ds = facts.get("deepspeed") or {}
    jit = _jit_ops(facts)
    if n.get("path"):
        return Check("ninja", "ok", f"{n.get('version') or '?'} ({n['path']})")
    if ds.get("ops") is not None and not jit:
        return Check("ninja", "ok", "not on PATH; not needed (every DeepSpeed op is prebuilt)")
    bin_path = n.get("module_bin")
    if n.get("module") and bin_path:
        return Check(
            "ninja",
            "warn",
            f"the ninja package is installed but {bin_path} is not on PATH: torch's JIT "
            "builds look for `ninja` on PATH and fail",
            f"add its directory to the job's PATH (env: PATH: {os.path.dirname(bin_path)}:...) "
            "or install ninja system-wide",
        )
    return Check(
        "ninja",
        "warn",
        "not found: DeepSpeed ops that are not prebuilt cannot be JIT-built",
        "pip install ninja in the training environment and put its bin directory on PATH "
        "(or apt-get install ninja-build)",
    )


def classify_hf(facts: Mapping[str, Any], *, python: str, needs_hf: bool) -> Check:
    pk = facts.get("packages") or {}
    shown = ", ".join(f"{k} {v}" for k, v in pk.items() if v and k != "pydantic")
    if needs_hf and not pk.get("transformers"):
        return Check(
            "transformers",
            "blocker",
            "not installed, but the job hands its config to the HF Trainer (--deepspeed)",
            f"{python} -m pip install transformers accelerate",
        )
    return Check("transformers", "ok", shown or "not installed (only HF Trainer jobs need it)")


def classify_deepspeed(
    facts: Mapping[str, Any], *, python: str, needs_deepspeed: bool | None, uses_nvme: bool
) -> list[Check]:
    """DeepSpeed importable, and the ops a fine-tune needs either prebuilt or buildable.

    ``needs_deepspeed``: the job uses DeepSpeed (None: no job, so no opinion).
    """
    if "deepspeed" not in facts:
        if facts.get("stage") == "deepspeed":
            return [
                Check(
                    "deepspeed",
                    "blocker",
                    "importing deepspeed killed the interpreter",
                    "run `python -c 'import deepspeed'` with the job's interpreter to see why",
                )
            ]
        return []
    ds = facts["deepspeed"]
    if "error" in ds:
        if needs_deepspeed:
            return [
                Check(
                    "deepspeed",
                    "blocker",
                    f"not importable: {ds['error']}",
                    f"DS_BUILD_OPS=0 {python} -m pip install deepspeed",
                )
            ]
        status: Status = "ok" if needs_deepspeed is False else "warn"
        return [
            Check(
                "deepspeed",
                status,
                f"not importable: {ds['error']}",
                None if status == "ok" else f"DS_BUILD_OPS=0 {python} -m pip install deepspeed",
            )
        ]
    rows = [Check("deepspeed", "ok", f"{ds.get('version')} (accelerator {ds.get('accelerator')})")]
    ops: Mapping[str, Mapping[str, Any]] | None = ds.get("ops")
    if ops is None:
        rows.append(
            Check(
                "deepspeed ops",
                "unknown",
                f"op report failed: {ds.get('ops_error', '?')}",
                "run ds_report in the training environment",
            )
        )
        return rows
    prebuilt = [n for n, o in ops.items() if o.get("installed")]
    jit = [n for n, o in ops.items() if o.get("compatible") and not o.get("installed")]
    broken = [n for n, o in ops.items() if not o.get("compatible") and not o.get("installed")]
    value = f"{len(ops)} ops: {len(prebuilt)} prebuilt, {len(jit)} JIT-buildable"
    if broken:
        value += f", not buildable here: {', '.join(broken)}"
    needed = [n for n in KEY_OPS if n in broken]
    if uses_nvme and "async_io" in broken:
        needed.append("async_io")
    if needed:
        rows.append(
            Check(
                "deepspeed ops",
                "warn",
                value + f" (needed: {', '.join(needed)})",
                "run ds_report in the training environment for the reason (a compiler, the CUDA "
                "toolkit, or libaio-dev for async_io); or prebuild, e.g. DS_BUILD_CPU_ADAM=1 "
                "pip install deepspeed",
            )
        )
    else:
        rows.append(Check("deepspeed ops", "ok", value))
    return rows


def classify_jit(
    facts: Mapping[str, Any], *, locks: Sequence[BuildLock] | None = None
) -> Check | None:
    """The JIT extensions cache: writable, and no build lock that would hang the next build.

    ``locks``: the verdicts of :func:`dsguard.host.envfacts.build_locks` on the extensions dir
    the run loop cleans (the same verdict it acts on). Without them, the probe's list of lock
    files is used, each with an unknown verdict.
    """
    j = facts.get("jit")
    if j is None:
        return None
    if not j.get("dir"):
        return Check("jit cache", "unknown", "torch not importable: no extensions dir")
    where = f"{j['dir']}" + (" (TORCH_EXTENSIONS_DIR)" if j.get("from_env") else "")
    if not j.get("writable"):
        return Check(
            "jit cache",
            "warn",
            f"{where} is not writable: JIT builds of DeepSpeed ops fail",
            "set TORCH_EXTENSIONS_DIR to a writable directory in the job's env",
        )
    if locks is None:
        locks = [BuildLock(Path(lk["path"]), None, lk.get("age_s")) for lk in j.get("locks") or []]

    def shown(which: Sequence[BuildLock]) -> str:
        return ", ".join(
            f"{lk.path} ({'?' if lk.age_s is None else int(lk.age_s)} s old)" for lk in which
        )

    hang = "every rank's next build of that op waits on it forever (a hang)"
    stale = [lk for lk in locks if lk.held is False]
    if stale:
        return Check(
            "jit cache",
            "warn",
            f"stale lock file(s) left by an interrupted build, held by no process: "
            f"{shown(stale)}; {hang}",
            "delete the lock file(s); `dsguard run` removes them itself before an attempt",
        )
    maybe = [lk for lk in locks if lk.held is None]
    if maybe:
        return Check(
            "jit cache",
            "warn",
            f"lock file(s) left by an interrupted build: {shown(maybe)}; {hang}",
            "if no build is running now, delete the lock file(s)",
        )
    built = j.get("built") or []
    value = where + (f"; built: {', '.join(built)}" if built else "")
    running = [lk for lk in locks if lk.held]
    if running:
        value += f"; a build is running now (lock held): {shown(running)}"
    return Check("jit cache", "ok", value)


def classify_alloc_conf(env: Mapping[str, str | None], scan: Mapping[str, Any] | None) -> Check:
    """Parse ``PYTORCH_CUDA_ALLOC_CONF`` (or torch >= 2.9's ``PYTORCH_ALLOC_CONF``) and flag
    keys torch does not know: an unknown key aborts CUDA initialisation in every rank."""
    name = "PYTORCH_CUDA_ALLOC_CONF"
    text = env.get(name)
    if not text:
        name = "PYTORCH_ALLOC_CONF"
        text = env.get(name)
    if not text:
        return Check("PYTORCH_CUDA_ALLOC_CONF", "ok", "unset (torch's defaults)")
    pairs, errors = parse_alloc_conf(text)
    found: Mapping[str, bool] = (scan or {}).get("found") or {}
    unknown = [k for k, _ in pairs if k not in KNOWN_ALLOC_KEYS and not found.get(k)]
    shown = ", ".join(f"{k}={v}" for k, v in pairs) or "(empty)"
    if errors or unknown:
        what = []
        if unknown:
            what.append(f"unknown key(s) {', '.join(unknown)}")
        what.extend(errors)
        return Check(
            name,
            "warn",
            f"{shown}: {'; '.join(what)}; torch refuses this when CUDA starts ('Unrecognized "
            "key ... in CUDA allocator config')",
            f"fix or drop the key(s) in {name} (job env: or the environment dsguard runs in)",
        )
    return Check(name, "ok", shown)


# --------------------------------------------------------------------------------------------
# host facts
# --------------------------------------------------------------------------------------------


def classify_gpus(
    snap: GpuSnapshot | Unknown,
    *,
    job_gpus: Sequence[int] | None,
    torch_cuda: bool,
    own_pids: frozenset[int] = frozenset(),
) -> list[Check]:
    """One row per device NVML reports (the job's devices when it lists them).

    No NVML (a CPU host, no driver) is ``unknown``, or ``warn`` when the training side expects
    GPUs; never "0 devices".
    """
    if isinstance(snap, Unknown):
        expects = torch_cuda or bool(job_gpus)
        return [
            Check(
                "gpus",
                "warn" if expects else "unknown",
                f"NVML unavailable: {snap.reason}",
                "check `nvidia-smi`: driver loaded, /dev/nvidia* visible in the container"
                if expects
                else None,
            )
        ]
    rows: list[Check] = []
    present = {d.index: d for d in snap.devices}
    wanted = list(job_gpus) if job_gpus is not None else sorted(present)
    if not snap.devices:
        return [
            Check(
                "gpus",
                "warn" if torch_cuda or job_gpus else "unknown",
                f"NVML works (driver {snap.driver_version}) but reports no devices",
                "check `nvidia-smi`" if torch_cuda or job_gpus else None,
            )
        ]
    for index in wanted:
        d = present.get(index)
        if d is None:
            rows.append(
                Check(
                    f"gpu {index}",
                    "blocker",
                    f"listed in the job but NVML sees only {sorted(present)}",
                    "fix `gpus:` in the job",
                )
            )
            continue
        value = f"{d.name or '?'}: {_gib(d.total_bytes)} total, {_gib(d.free_bytes)} free"
        foreign = [
            p
            for p in (d.processes or ())
            if p.pid not in own_pids and (p.used_bytes is None or p.used_bytes > 0)
        ]
        foreign_bytes = sum(p.used_bytes or 0 for p in foreign)
        busy = d.used_bytes is not None and d.used_bytes > GPU_FOREIGN_WARN_BYTES
        if foreign and (busy or foreign_bytes > GPU_FOREIGN_WARN_BYTES):
            pids = ", ".join(
                f"{p.pid} ({'?' if p.used_bytes is None else _gib(p.used_bytes)})" for p in foreign
            )
            rows.append(
                Check(
                    f"gpu {index}",
                    "warn",
                    f"{value}; held by other processes: {pids}",
                    "stop them or give the job other GPUs: a CUDA OOM on memory the job never "
                    "had would be 'healed' by shrinking the batch",
                )
            )
        elif busy:
            rows.append(
                Check(
                    f"gpu {index}",
                    "warn",
                    f"{value}; {_gib(d.used_bytes)} in use (processes not visible to NVML here)",
                    "check `nvidia-smi` for the owner before starting the job",
                )
            )
        else:
            unknown = " (some queries failed: " + "; ".join(d.errors) + ")" if d.errors else ""
            rows.append(Check(f"gpu {index}", "ok", value + unknown))
    return rows


def classify_memory(
    *,
    total: int,
    available: int,
    swap_total: int,
    swap_used: int,
    cgroup_limit: int | None,
) -> list[Check]:
    value = f"{_gib(total)} total, {_gib(available)} available"
    if cgroup_limit is not None and cgroup_limit < total:
        value += f"; cgroup limit {_gib(cgroup_limit)}"
    low = available < HOST_AVAILABLE_WARN_BYTES or available < total * 0.1
    rows = [
        Check(
            "host memory",
            "warn" if low else "ok",
            value,
            "free host memory before starting: model loading and optimizer offload need it, and "
            "a host OOM kills a rank"
            if low
            else None,
        )
    ]
    heavy = swap_total > 0 and swap_used > swap_total * 0.5
    rows.append(
        Check(
            "swap",
            "warn" if heavy else "ok",
            f"{_gib(swap_total)} total, {_gib(swap_used)} used" if swap_total else "none",
            "find what is swapping: a rank that swaps stalls its peers until NCCL times out"
            if heavy
            else None,
        )
    )
    return rows


def classify_shm(total: int | None, *, multi_process: bool) -> Check:
    if total is None:
        return Check(
            "/dev/shm",
            "warn",
            "missing: DataLoader workers and NCCL need shared memory",
            "mount a tmpfs on /dev/shm (docker run --shm-size=16g / --ipc=host)",
        )
    value = _gib(total) if total >= GiB else f"{total / MiB:.0f} MiB"
    if total < SHM_BLOCKER_BYTES and multi_process:
        return Check(
            "/dev/shm",
            "blocker",
            f"{value}: DataLoader workers die with a bus error and NCCL cannot allocate its "
            "buffers",
            "enlarge it (docker run --shm-size=16g or --ipc=host; Kubernetes: an emptyDir with "
            "medium Memory on /dev/shm)",
        )
    if total < SHM_WARN_BYTES:
        return Check(
            "/dev/shm",
            "warn",
            f"{value}: small for DataLoader workers and NCCL (containers default to 64 MiB)",
            "enlarge it (docker run --shm-size=16g or --ipc=host)",
        )
    return Check("/dev/shm", "ok", value)


def classify_disk(
    path: Path, *, free: int | None, newest: tuple[str, int] | None, error: str | None = None
) -> Check:
    """Room for the next checkpoint: HF writes the new one before it rotates old ones out, and
    a ZeRO-stage move converts the newest to the universal format next to it."""
    if free is None:
        return Check("disk", "unknown", f"{path}: {error or 'cannot stat'}")
    value = f"{_gib(free)} free at {path}"
    if newest is not None:
        value += f"; newest checkpoint {newest[0]}: {_gib(newest[1])}"
    size = newest[1] if newest else 0
    if newest and free < size:
        return Check(
            "disk",
            "blocker",
            value + ": the next save fails (disk_full gives up the run)",
            "free space, or lower save_total_limit / move checkpoints.dir to a bigger disk",
        )
    if free < 2 * size or free < DISK_MIN_FREE_BYTES:
        return Check(
            "disk",
            "warn",
            value + f": less than {'2x the newest checkpoint' if newest else '10 GiB'}",
            "free space, or lower save_total_limit / move checkpoints.dir to a bigger disk",
        )
    return Check("disk", "ok", value)


# --------------------------------------------------------------------------------------------
# gathering
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    facts: dict[str, Any] | None
    #: Why the probe did not finish (None when it did).
    error: str | None
    duration_s: float


def run_env_probe(
    python: str, env: Mapping[str, str], *, timeout_s: float = PROBE_TIMEOUT_S
) -> ProbeOutcome:
    """Run :mod:`dsguard.probes.env_probe` with the training interpreter; keep partial facts."""
    probe = run_probe(ENV_PROBE, python, env=env, timeout_s=timeout_s)
    facts, error = probe.data, probe.error
    if facts is not None and not facts.get("complete") and error is None:
        error = "the probe stopped before it finished"
    return ProbeOutcome(facts, error, probe.duration_s)


def _shm_total(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def _disk_check(path: Path) -> Check:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        return classify_disk(path, free=None, newest=None, error=exc.strerror)
    ckpts = list_checkpoints(path)
    newest = (ckpts[0].name, _dir_size(ckpts[0])) if ckpts else None
    return classify_disk(path, free=free, newest=newest)


def _probe_blocker(outcome: ProbeOutcome, python: str) -> Check:
    stage = (outcome.facts or {}).get("stage")
    where = f" while checking {stage}" if stage and stage != "done" else ""
    old = " (an interpreter too old for the probe, which needs Python 3.7+)"
    if outcome.facts is not None or "SyntaxError" not in (outcome.error or ""):
        old = ""
    return Check(
        "training environment",
        "blocker",
        f"the probe could not run with {python}{where}{old}: {outcome.error}",
        "set `python:` in the job to the training environment's interpreter (the one with "
        "torch and deepspeed), and check it starts: "
        f"{python} -c 'import torch, deepspeed'",
    )


def _env_facts(
    python: str,
    env: Mapping[str, str],
    job: Job | None,
    snap: GpuSnapshot | Unknown,
    timeout_s: float,
) -> EnvFacts:
    """The same facts the remedies decide on in the run loop, read from the doctor's NVML
    snapshot (one NVML pass: the doctor's GPU rows and the env facts cannot disagree)."""
    gpu_answer = (None, snap.reason) if isinstance(snap, Unknown) else (gpu_facts(snap), None)
    return detect(
        python,
        env=env,
        gpus=job.gpus if job is not None else None,
        read_gpu=lambda: gpu_answer,
        torch_timeout_s=timeout_s,
    )


def collect(
    job: Job | None,
    *,
    python: str | None = None,
    gpu: Callable[[], GpuSnapshot | Unknown] | None = None,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    base_env: Mapping[str, str] | None = None,
) -> DoctorReport:
    """Check the training environment (``python``, default ``job.python``) and this host.

    The probe gets the environment an attempt would get: ``base_env`` (default dsguard's own)
    plus ``job.env`` and the job's ``CUDA_VISIBLE_DEVICES``. ``gpu`` replaces the NVML
    snapshot (tests); ``probe_timeout_s`` bounds the probe (a wedged GPU can hang CUDA init).
    """
    py = python or (job.python if job is not None else sys.executable)
    env = dict(os.environ if base_env is None else base_env)
    if job is not None:
        env.update(job.env)
        if job.gpus is not None:
            # What the attempt's ranks see (the DeepSpeed runner sets it from --include).
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
    outcome = run_env_probe(py, env, timeout_s=probe_timeout_s)
    facts = outcome.facts or {}
    snap = (gpu or (lambda: gpu_snapshot(timeout_s=15.0)))()
    nvml_gpus = None if isinstance(snap, Unknown) else len(snap.devices)
    env_facts = _env_facts(py, env, job, snap, probe_timeout_s)
    torch_facts = facts.get("torch") or {}
    torch_cuda = bool(torch_facts.get("cuda") or torch_facts.get("hip"))

    from dsguard.core.preflight import uses_hf_trainer

    needs_ds: bool | None = None
    uses_nvme = False
    needs_hf = False
    if job is not None:
        needs_ds = job.deepspeed is not None or job.launcher is LauncherKind.DEEPSPEED
        needs_hf = uses_hf_trainer(job)
        uses_nvme = job.deepspeed is not None and '"nvme"' in json.dumps(job.deepspeed.base)

    checks: list[Check] = []
    if outcome.error is not None:
        checks.append(_probe_blocker(outcome, py))
    if "python" in facts:
        checks.append(classify_python(facts))
        checks.extend(classify_torch(facts, python=py, nvml_gpus=nvml_gpus))
        checks.extend(classify_toolkit(facts))
        checks.append(classify_ninja(facts))
        checks.extend(
            classify_deepspeed(facts, python=py, needs_deepspeed=needs_ds, uses_nvme=uses_nvme)
        )
        checks.append(classify_hf(facts, python=py, needs_hf=needs_hf))
        jit_dir = env_facts.torch_extensions_dir or (facts.get("jit") or {}).get("dir")
        jit = classify_jit(facts, locks=build_locks(jit_dir) if jit_dir else None)
        if jit is not None:
            checks.append(jit)
    checks.extend(
        classify_gpus(snap, job_gpus=job.gpus if job is not None else None, torch_cuda=torch_cuda)
    )
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    checks.extend(
        classify_memory(
            total=vm.total,
            available=vm.available,
            swap_total=sw.total,
            swap_used=sw.used,
            cgroup_limit=cgroup.memory_limit(),
        )
    )
    multi = job is not None and (job.world_size > 1 or job.knobs.dataloader_workers > 0)
    checks.append(classify_shm(_shm_total(), multi_process=multi))
    if job is not None:
        ckpt_dir = job.checkpoints.dir if job.checkpoints is not None else job.workdir
    else:
        ckpt_dir = Path.cwd()
    checks.append(_disk_check(ckpt_dir))
    alloc_env: Mapping[str, str | None] = facts.get("env") or {
        "PYTORCH_CUDA_ALLOC_CONF": env.get("PYTORCH_CUDA_ALLOC_CONF"),
        "PYTORCH_ALLOC_CONF": env.get("PYTORCH_ALLOC_CONF"),
    }
    checks.append(classify_alloc_conf(alloc_env, facts.get("alloc_conf_scan")))
    return DoctorReport(
        checks=tuple(checks),
        python=py,
        job=job.name if job is not None else None,
        probe_s=outcome.duration_s,
        facts=outcome.facts,
        env_facts=env_facts,
    )


def render_table(report: DoctorReport) -> str:
    """Aligned rows, with each warn/blocker's fix on the line below it."""
    marks = {"ok": "ok", "warn": "WARN", "blocker": "BLOCKER", "unknown": "unknown"}
    width = max((len(c.name) for c in report.checks), default=10)
    head = f"dsguard doctor: {report.python}" + (f" (job {report.job})" if report.job else "")
    lines = [head]
    for c in report.checks:
        lines.append(f"  {c.name:<{width}}  {marks[c.status]:<8} {c.value}")
        if c.fix and c.status in ("warn", "blocker"):
            lines.append(f"  {'':<{width}}  {'':<8} fix: {c.fix}")
    n = report.counts()
    lines.append(
        f"{n['blocker']} blocker(s), {n['warn']} warning(s), {n['unknown']} unknown, "
        f"{n['ok']} ok" + (f"; probe {report.probe_s:.1f} s" if report.probe_s is not None else "")
    )
    return "\n".join(lines)
