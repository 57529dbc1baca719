"""What the training environment can build and run with: torch's CUDA, toolkits, GPU capability.

Why this module exists: the remedies for ``ds_build_error`` and ``loss_divergence``
(:mod:`dsguard.core.remedies`) turn on facts the supervisor cannot read from its own
interpreter. dsguard never imports torch and may run in another environment than the
training script, so each fact is taken where it lives:

* **torch's version and ``torch.version.cuda``** come from the *training* interpreter, in a
  subprocess with the attempt's environment. The same subprocess reports
  ``torch.utils.cpp_extension.CUDA_HOME`` (the toolkit torch and DeepSpeed's JIT builder will
  really use: ``CUDA_HOME``, else ``CUDA_PATH``, else ``nvcc`` on PATH, else
  ``/usr/local/cuda``) and the torch-extensions build root. Importing torch takes seconds, so
  the answer is cached per (interpreter, relevant environment) for the life of the process,
  i.e. per ``dsguard run``.
* **CUDA toolkits** are found on disk: ``CUDA_HOME``/``CUDA_PATH``, ``nvcc`` on PATH, the
  training interpreter's prefix (conda's ``cuda-nvcc``), ``/usr/local/cuda*`` and
  ``/opt/cuda*``. The version is ``nvcc --version``'s ``release X.Y`` when nvcc runs, else
  ``version.json`` (CUDA >= 11.1) or ``version.txt`` (older).
* **GPU compute capabilities** come from NVML (``nvmlDeviceGetCudaComputeCapability``).

Failure modes, and why each answer is shaped as it is:

* The torch probe fails (a wrong ``python:``, torch not importable, a hang): the torch fields
  are None and ``torch_error`` says why. Nothing that depends on torch's CUDA version is then
  guessed.
* No NVIDIA driver, no NVML library, a wedged GPU: ``gpus`` is None with ``gpu_error``. Unknown
  is never reported as "no GPU" or as "capability < 8.0": the bf16 remedy must not be refused
  (or granted) on a measurement that never happened.
* A toolkit directory without a runnable ``nvcc`` (a runtime-only install; many containers
  ship ``/usr/local/cuda`` with libraries only): reported with ``has_nvcc=False`` and never
  offered as ``CUDA_HOME``; DeepSpeed would fail with ``MissingCUDAException: Unable to run
  .../bin/nvcc``.
* ``nvcc`` that hangs (an NFS mount gone away): bounded by a timeout, then the version files.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsguard.core.envfacts import EnvFacts, GpuFact, Toolkit
from dsguard.host import gpu
from dsguard.host.probe import run_probe
from dsguard.probes import TORCH_FACTS_PROBE

__all__ = [
    "BuildLock",
    "EnvFacts",
    "GpuFact",
    "Toolkit",
    "build_locks",
    "clear_cache",
    "detect",
    "find_toolkits",
    "gpu_facts",
    "parse_nvcc_version",
    "parse_version_json",
    "parse_version_txt",
    "read_gpus",
    "select_gpus",
    "stale_build_locks",
]

#: Where toolkits are looked for besides CUDA_HOME / CUDA_PATH / PATH / the interpreter prefix.
DEFAULT_TOOLKIT_GLOBS: tuple[str, ...] = ("/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda*")
NVCC_TIMEOUT_S = 10.0
TORCH_PROBE_TIMEOUT_S = 120.0
NVML_TIMEOUT_S = 10.0

#: Environment variables that change what the torch probe answers (the cache key).
_PROBE_ENV_KEYS: tuple[str, ...] = (
    "CUDA_HOME",
    "CUDA_PATH",
    "PATH",
    "TORCH_EXTENSIONS_DIR",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "XDG_CACHE_HOME",
    "HOME",
)


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)


# -- version parsing (pure) -------------------------------------------------------------------

# "Cuda compilation tools, release 12.1, V12.1.105" (every nvcc since CUDA 7). DeepSpeed's own
# installed_cuda_version() reads the token after "release" the same way.
_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)(?:,\s*V(\d+(?:\.\d+)+))?")
# version.txt of CUDA <= 11.0: "CUDA Version 10.2.89"
_VERSION_TXT = re.compile(r"CUDA Version (\d+)\.(\d+)((?:\.\d+)*)")


def parse_nvcc_version(text: str) -> tuple[str, str] | None:
    """``(major.minor, full)`` from ``nvcc --version`` output, or None.

    >>> parse_nvcc_version("Cuda compilation tools, release 12.1, V12.1.105")
    ('12.1', '12.1.105')
    """
    m = _NVCC_RELEASE.search(text)
    if m is None:
        return None
    short = f"{int(m.group(1))}.{int(m.group(2))}"
    return short, m.group(3) or short


def parse_version_json(text: str) -> tuple[str, str] | None:
    """``(major.minor, full)`` from a toolkit's ``version.json`` (CUDA >= 11.1), or None.

    The toolkit's own version is ``cuda.version`` ("12.2.2"); ``cuda_nvcc.version`` is the
    compiler's ("12.2.140") and is used only when the former is missing.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    for key in ("cuda", "cuda_nvcc", "cuda_cudart"):
        entry = doc.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("version"), str):
            parts = entry["version"].split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return f"{int(parts[0])}.{int(parts[1])}", entry["version"]
    return None


def parse_version_txt(text: str) -> tuple[str, str] | None:
    """``(major.minor, full)`` from ``version.txt`` ("CUDA Version 10.2.89"), or None."""
    m = _VERSION_TXT.search(text)
    if m is None:
        return None
    short = f"{int(m.group(1))}.{int(m.group(2))}"
    return short, short + (m.group(3) or "")


# -- toolkits (filesystem + nvcc) --------------------------------------------------------------


def _run_nvcc(nvcc: Path, timeout_s: float) -> str | None:
    try:
        out = subprocess.run(
            [str(nvcc), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout + out.stderr


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def inspect_toolkit(
    path: str, found_via: str, *, nvcc_timeout_s: float = NVCC_TIMEOUT_S
) -> Toolkit:
    """The version of the toolkit at ``path``: ``nvcc --version``, else its version files."""
    root = Path(path)
    has_nvcc = False
    parsed: tuple[str, str] | None = None
    source = "unknown"
    nvcc = root / "bin" / "nvcc"
    if nvcc.is_file():
        text = _run_nvcc(nvcc, nvcc_timeout_s)
        if text is not None:
            parsed = parse_nvcc_version(text)
            has_nvcc = parsed is not None
            source = "nvcc" if parsed is not None else source
    if parsed is None:
        for name, parser in (
            ("version.json", parse_version_json),
            ("version.txt", parse_version_txt),
        ):
            text = _read_text(root / name)
            if text is not None and (parsed := parser(text)) is not None:
                source = name
                break
    return Toolkit(
        path=str(root),
        realpath=os.path.realpath(root),
        version=None if parsed is None else parsed[0],
        full_version=None if parsed is None else parsed[1],
        version_source=source,
        has_nvcc=has_nvcc,
        has_headers=(root / "include" / "cuda_runtime.h").is_file()
        or bool(glob.glob(str(root / "targets" / "*" / "include" / "cuda_runtime.h"))),
        found_via=found_via,
    )


def _which(name: str, path_var: str | None) -> str | None:
    for d in (path_var or "").split(os.pathsep):
        if not d:
            continue
        cand = Path(d) / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def _looks_like_toolkit(path: Path) -> bool:
    return (
        (path / "bin" / "nvcc").is_file()
        or (path / "version.json").is_file()
        or (path / "version.txt").is_file()
    )


def find_toolkits(
    env: Mapping[str, str],
    *,
    python: str | None = None,
    search_globs: Sequence[str] = DEFAULT_TOOLKIT_GLOBS,
    nvcc_timeout_s: float = NVCC_TIMEOUT_S,
) -> tuple[Toolkit, ...]:
    """Every CUDA toolkit findable from ``env``, deduplicated by real path, in priority order.

    Order: ``CUDA_HOME``, ``CUDA_PATH``, ``nvcc`` on ``PATH``, the training interpreter's prefix
    (conda installs ``nvcc`` next to ``python``), then ``search_globs`` (sorted). A symlink
    such as ``/usr/local/cuda -> cuda-12.1`` is listed once, under the first name seen.
    """
    candidates: list[tuple[str, str]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = env.get(var)
        if value:
            candidates.append((value, var))
    nvcc = _which("nvcc", env.get("PATH"))
    if nvcc is not None:
        candidates.append((str(Path(nvcc).parent.parent), "PATH"))
    if python:
        prefix = Path(python).parent.parent
        if (prefix / "bin" / "nvcc").is_file():
            candidates.append((str(prefix), "python-prefix"))
    for pattern in search_globs:
        for hit in sorted(glob.glob(pattern)):
            candidates.append((hit, "search"))

    seen: set[str] = set()
    out: list[Toolkit] = []
    for path, via in candidates:
        p = Path(path)
        if not p.is_dir() or not _looks_like_toolkit(p):
            continue
        real = os.path.realpath(p)
        if real in seen:
            continue
        seen.add(real)
        out.append(inspect_toolkit(str(p), via, nvcc_timeout_s=nvcc_timeout_s))
    return tuple(out)


# -- torch, from the training interpreter -------------------------------------------------------

_probe_cache: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
_probe_lock = threading.Lock()


def clear_cache() -> None:
    """Forget cached torch probes (a new run, or a test that changed the environment)."""
    with _probe_lock:
        _probe_cache.clear()


def _probe_torch(python: str, env: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    key = (python, tuple((k, env[k]) for k in _PROBE_ENV_KEYS if k in env))
    with _probe_lock:
        cached = _probe_cache.get(key)
    if cached is not None:
        return cached
    probe = run_probe(TORCH_FACTS_PROBE, python, env=env, timeout_s=timeout_s)
    if not probe.ok or probe.data is None:
        why = probe.error or "no answer"
        return {"error": why + (" (importing torch)" if probe.failure == "timeout" else "")}
    with _probe_lock:
        _probe_cache[key] = probe.data  # only answers are cached: a timeout may be transient
    return probe.data


# -- GPUs, from NVML -------------------------------------------------------------------------


def select_gpus(
    devices: Sequence[GpuFact],
    *,
    gpus: Sequence[int] | None,
    visible: str | None,
    pci_order: bool,
) -> tuple[tuple[GpuFact, ...], str | None]:
    """The devices a job uses, conservatively. Returns (devices, note).

    ``gpus`` (the job's physical indices) wins over ``visible`` (``CUDA_VISIBLE_DEVICES``:
    indices or ``GPU-`` UUIDs). NVML numbers devices in PCI bus order; CUDA numbers them
    fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. On a box whose GPUs differ in
    compute capability an index could therefore name another device, so there (and for any
    entry that cannot be resolved, e.g. ``MIG-`` UUIDs) every device counts: a question like
    "are all used GPUs >= 8.0" is then answered for the weakest GPU, never for a guess.
    """
    everything = tuple(devices)
    if gpus is not None:
        wanted: list[str] = [str(g) for g in gpus]
    elif visible is not None and visible.strip() != "":
        wanted = [w.strip() for w in visible.split(",") if w.strip()]
    else:
        return everything, None
    caps = {d.capability for d in everything}
    by_index = {str(d.index): d for d in everything}
    by_uuid = {d.uuid: d for d in everything if d.uuid}
    chosen: list[GpuFact] = []
    for w in wanted:
        if w in by_uuid:
            chosen.append(by_uuid[w])
        elif w.isdigit() and w in by_index:
            if not pci_order and len(caps) > 1:
                return everything, (
                    f"device {w} is a CUDA index and CUDA_DEVICE_ORDER is not PCI_BUS_ID on a "
                    "host with mixed GPUs: every GPU counts"
                )
            chosen.append(by_index[w])
        elif w == "-1" or w.upper() == "NONE":
            return (), None
        else:
            return everything, f"cannot resolve visible device {w!r}: every GPU counts"
    return tuple(dict.fromkeys(chosen)), None


def read_gpus(
    nvml: Any | None = None, *, timeout_s: float = NVML_TIMEOUT_S
) -> tuple[tuple[GpuFact, ...] | None, str | None]:
    """Every GPU NVML sees with its compute capability, or (None, why) when unknown.

    Read through :mod:`dsguard.host.gpu` (the one NVML reader: its retries of transient
    errors and its helper thread, because a wedged GPU can block NVML indefinitely and the
    caller is the run loop).
    """
    snap = gpu.snapshot(nvml, timeout_s=timeout_s)
    if isinstance(snap, gpu.Unknown):
        return None, snap.reason
    return gpu_facts(snap), None


def gpu_facts(snap: gpu.GpuSnapshot) -> tuple[GpuFact, ...]:
    """The env-facts view of an NVML snapshot (index, UUID, name, compute capability)."""
    return tuple(GpuFact(d.index, d.uuid, d.name, d.capability) for d in snap.devices)


# -- torch-extension build locks ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuildLock:
    """One ``<ext_dir>/<op>/lock`` file and the verdict on it."""

    path: Path
    #: True: a live process holds it open (a build is running; leave it). False: no process
    #: does (stale: safe to delete). None: cannot tell, because some process's fds could not
    #: be read (another user's) and any lock may be its.
    held: bool | None
    #: Seconds since the lock was last modified (None: it vanished while being looked at).
    age_s: float | None


def build_locks(
    ext_dir: str | Path, *, proc: str | Path = "/proc", now: float | None = None
) -> list[BuildLock]:
    """Every ``<ext_dir>/<op>/lock`` file with the one verdict dsguard has on it.

    torch's JIT build (``cpp_extension._jit_compile``) takes a ``FileBaton``: it creates
    ``lock`` with O_EXCL, keeps the fd open while ninja runs, and removes it when done. A
    process killed in between (dsguard's own SIGKILL of an attempt after a fatal line, the OOM
    killer, a user's kill -9) leaves the file behind, and every later process that loads *any*
    build of that op, even an up-to-date one, waits on it forever with no output: the next
    attempt looks like a hang. A lock is stale only when every process's fds could be read
    and none points at it. ``dsguard doctor`` reports these verdicts and the run loop removes
    exactly the stale ones (:func:`stale_build_locks`): the two never disagree.
    """
    root = Path(ext_dir)
    try:
        locks = sorted(p for p in root.glob("*/lock") if p.is_file())
    except OSError:
        return []
    if not locks:
        return []
    wanted = {os.path.realpath(p): p for p in locks}
    held, complete = _held_files(set(wanted), Path(proc))
    when = time.time() if now is None else now
    out: list[BuildLock] = []
    for real, path in wanted.items():
        age: float | None = None
        with contextlib.suppress(OSError):
            age = max(0.0, when - path.stat().st_mtime)
        verdict: bool | None = True if real in held else (False if complete else None)
        out.append(BuildLock(path, verdict, age))
    return sorted(out, key=lambda lk: lk.path)


def _held_files(wanted: set[str], proc: Path) -> tuple[set[str], bool]:
    """Which of ``wanted`` (real paths) some live process has open, and whether every
    process's fds could be read (False: the answer is incomplete)."""
    held: set[str] = set()
    try:
        pids = [e.name for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return held, False
    complete = True
    for pid in pids:
        try:
            fds = os.scandir(proc / pid / "fd")
        except FileNotFoundError:
            continue  # exited meanwhile
        except OSError:
            complete = False  # cannot see this process's fds: any lock may be its
            continue
        with fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target in wanted:
                        held.add(target)
    return held, complete


def stale_build_locks(ext_dir: str | Path, *, proc: str | Path = "/proc") -> list[Path]:
    """The lock files :func:`build_locks` finds stale: the ones the run loop removes before
    relaunching an attempt."""
    return [lk.path for lk in build_locks(ext_dir, proc=proc) if lk.held is False]


# -- all together ------------------------------------------------------------------------------


def detect(
    python: str,
    *,
    env: Mapping[str, str],
    gpus: Sequence[int] | None = None,
    search_globs: Sequence[str] = DEFAULT_TOOLKIT_GLOBS,
    nvml: Any | None = None,
    read_gpu: Callable[[], tuple[tuple[GpuFact, ...] | None, str | None]] | None = None,
    torch_timeout_s: float = TORCH_PROBE_TIMEOUT_S,
) -> EnvFacts:
    """Facts about the environment ``python`` trains in, with the attempt's ``env``.

    Args:
        python: the training interpreter (``job.python``).
        env: the environment an attempt gets (dsguard's, the job's ``env:``, applied remedies).
        gpus: the job's GPU indices (``job.gpus``); None: ``CUDA_VISIBLE_DEVICES`` or all.
        search_globs: toolkit locations besides the environment's (tests point these at tmp).
        nvml / read_gpu: NVML module or a replacement reader (tests; default ``pynvml``).

    Takes up to a few seconds on the first call (importing torch in ``python``); the torch part
    is cached per (interpreter, relevant environment), so later calls of the run are cheap.
    Never raises for an unusable environment: every unknown comes back with its reason.
    """
    notes: list[str] = []
    probe = _probe_torch(python, env, torch_timeout_s)
    torch_error = probe.get("error")
    if probe.get("cpp_extension_error"):
        notes.append(f"torch.utils.cpp_extension: {probe['cpp_extension_error']}")
    toolkits = find_toolkits(env, python=python, search_globs=search_globs)
    if read_gpu is not None:
        devices, gpu_error = read_gpu()
    else:
        devices, gpu_error = read_gpus(nvml)
    used: tuple[GpuFact, ...] | None = None
    if devices is not None:
        used, note = select_gpus(
            devices,
            gpus=gpus,
            visible=env.get("CUDA_VISIBLE_DEVICES"),
            pci_order=env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID",
        )
        if note:
            notes.append(note)
    return EnvFacts(
        python=python,
        torch_version=_opt_str(probe.get("torch_version")),
        torch_cuda=_opt_str(probe.get("cuda")),
        torch_hip=_opt_str(probe.get("hip")),
        torch_error=None if torch_error is None else str(torch_error),
        cuda_home=_opt_str(probe.get("cuda_home")),
        torch_extensions_dir=_opt_str(probe.get("torch_extensions_dir")),
        deepspeed_version=_opt_str(probe.get("deepspeed")),
        toolkits=toolkits,
        gpus=used,
        gpu_error=gpu_error,
        ds_skip_cuda_check=env.get("DS_SKIP_CUDA_CHECK", "0") == "1",
        notes=tuple(notes),
    )
