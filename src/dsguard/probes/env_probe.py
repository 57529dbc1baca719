"""``dsguard doctor``'s probe: facts about the training environment, gathered *inside* it.

Run as ``JOB_PYTHON env_probe.py OUT.json`` with the job's environment. Standard library only
at import time (the interpreter may be old, or lack torch); torch and deepspeed are imported
inside ``try`` blocks so a broken install becomes a fact ("torch: ImportError ...") rather
than a crash. The JSON is rewritten after every section, so if importing torch kills the
interpreter (a segfault in a CUDA library) the facts gathered before it survive, and
``complete`` stays false.

Facts only, no verdicts: ``dsguard.cli.doctor`` classifies them, so the rules are unit-tested in
the supervisor without a training environment. Syntax stays Python 3.8-compatible.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import warnings
from typing import Any

#: Environment variables that decide how the training side behaves.
ENV_KEYS = (
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "DS_SKIP_CUDA_CHECK",
    "DS_BUILD_OPS",
    "TORCH_EXTENSIONS_DIR",
    "TORCH_CUDA_ARCH_LIST",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PATH",
)
_SUBPROCESS_TIMEOUT_S = 30


def parse_alloc_conf(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``key:value,key:[a:b,c:d]`` -> ([(key, value)], [errors]).

    The grammar of torch's allocator-config tokenizer: comma-separated ``key:value`` pairs,
    where a value may be a bracketed list (``roundup_power2_divisions:[256:1,>:4]``).
    """
    entries: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            entries.append(current)
            current = ""
        else:
            current += ch
    entries.append(current)
    pairs: list[tuple[str, str]] = []
    errors: list[str] = []
    if depth != 0:
        errors.append("unbalanced brackets")
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        key, colon, value = entry.partition(":")
        if not colon or not key.strip() or not value.strip():
            errors.append(f"{entry!r} is not key:value")
            continue
        pairs.append((key.strip(), value.strip()))
    return pairs, errors


def nvcc_release(nvcc: str) -> tuple[str | None, str | None]:
    """(``"12.4"``, None) from ``nvcc -V``, parsed as DeepSpeed's ``installed_cuda_version``
    does (the token after ``release``), or (None, error)."""
    try:
        out = subprocess.run(
            [nvcc, "-V"],
            capture_output=True,
            text=True,
            timeout=_SUBPROCESS_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if out.returncode != 0:
        return None, f"exit {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}"
    words = out.stdout.split()
    if "release" not in words:
        return None, f"no 'release' in its output: {out.stdout.strip()[-300:]}"
    release = words[words.index("release") + 1].replace(",", "").split(".")
    return ".".join(release[:2]), None


def _find_cuda_home() -> tuple[str | None, str | None]:
    """(path, how) the way ``torch.utils.cpp_extension._find_cuda_home`` resolves it on
    Linux; computed here too because a CPU build of torch reports None without looking."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            return value, var
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        return os.path.dirname(os.path.dirname(nvcc)), f"nvcc on PATH: {nvcc}"
    if os.path.exists("/usr/local/cuda"):
        return "/usr/local/cuda", "/usr/local/cuda"
    return None, None


def _toolkit(cuda_home: str | None, how: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"home": cuda_home, "how": how, "exists": None, "cuda_h": None}
    if cuda_home is None:
        return out
    out["exists"] = os.path.isdir(cuda_home)
    out["cuda_h"] = os.path.isfile(os.path.join(cuda_home, "include", "cuda.h"))
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    out["nvcc"] = nvcc
    if os.path.exists(nvcc):
        out["nvcc_release"], out["nvcc_error"] = nvcc_release(nvcc)
    else:
        out["nvcc_release"], out["nvcc_error"] = None, f"{nvcc} does not exist"
    return out


def _ninja() -> dict[str, Any]:
    """torch's JIT runs ``ninja --version`` from PATH (``is_ninja_available``); the pip
    package puts the binary next to the venv's python, which is on PATH only when the venv
    is activated."""
    out: dict[str, Any] = {"path": shutil.which("ninja"), "module": False, "module_bin": None}
    try:
        mod = importlib.import_module("ninja")
    except Exception:
        pass
    else:
        out["module"] = True
        bin_dir = getattr(mod, "BIN_DIR", None)
        if isinstance(bin_dir, str):
            out["module_bin"] = os.path.join(bin_dir, "ninja")
    if out["path"]:
        try:
            res = subprocess.run(
                [out["path"], "--version"],
                capture_output=True,
                text=True,
                timeout=_SUBPROCESS_TIMEOUT_S,
                check=False,
            )
            out["version"] = res.stdout.strip() if res.returncode == 0 else None
        except (OSError, subprocess.SubprocessError) as exc:
            out["version"] = None
            out["error"] = str(exc)
    return out


def _packages() -> dict[str, Any]:
    """Versions of the HF stack from package metadata (no import: importing transformers
    takes seconds and is not what is being checked)."""
    out: dict[str, Any] = {}
    try:
        metadata = importlib.import_module("importlib.metadata")
    except ImportError:
        return out
    for name in ("transformers", "accelerate", "peft", "pydantic"):
        try:
            out[name] = metadata.version(name)
        except Exception:
            out[name] = None
    return out


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _torch(facts: dict[str, Any]) -> Any:
    try:
        torch = importlib.import_module("torch")
    except BaseException as exc:  # SystemExit/OSError from broken CUDA libs included
        facts["torch"] = {"error": _error(exc)}
        return None
    version = getattr(torch, "version", None)
    info: dict[str, Any] = {
        "version": str(getattr(torch, "__version__", "?")),
        "cuda": getattr(version, "cuda", None),
        "hip": getattr(version, "hip", None),
        "lib_dir": os.path.join(os.path.dirname(str(torch.__file__)), "lib"),
    }
    facts["torch"] = info
    try:
        cpp = importlib.import_module("torch.utils.cpp_extension")
        info["cuda_home"] = cpp.CUDA_HOME
        info["extensions_root"] = cpp.get_default_build_root()
    except BaseException as exc:
        info["cpp_extension_error"] = _error(exc)
    if info["cuda"] is not None or info["hip"] is not None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                info["cuda_available"] = bool(torch.cuda.is_available())
                info["device_count"] = int(torch.cuda.device_count())
            except BaseException as exc:
                info["cuda_error"] = _error(exc)
        info["cuda_warnings"] = [str(w.message)[:500] for w in caught]
    return torch


def _deepspeed(facts: dict[str, Any]) -> None:
    log = io.StringIO()
    info: dict[str, Any] = {}
    facts["deepspeed"] = info
    with contextlib.redirect_stdout(log):
        try:
            ds = importlib.import_module("deepspeed")
        except BaseException as exc:
            info["error"] = _error(exc)
            info["log"] = log.getvalue()[-2000:]
            return
        info["version"] = str(getattr(ds, "__version__", "?"))
        try:
            all_ops = importlib.import_module("deepspeed.ops.op_builder.all_ops").ALL_OPS
            builder = importlib.import_module("deepspeed.ops.op_builder.builder")
            git = importlib.import_module("deepspeed.git_version_info")
            accel = importlib.import_module("deepspeed.accelerator").get_accelerator()
            info["accelerator"] = getattr(accel, "_name", None)
            mismatch_ok = getattr(builder, "cuda_minor_mismatch_ok", {})
            info["cuda_minor_mismatch_ok"] = {str(k): list(v) for k, v in mismatch_ok.items()}
            probe = getattr(builder, "probe_is_compatible", None)
            installed_ops = getattr(git, "installed_ops", {})
            same_accel = getattr(git, "accelerator_name", None) == info["accelerator"]
            ops: dict[str, Any] = {}
            for name, op in all_ops.items():
                try:
                    compatible = bool(probe(op) if probe else op.is_compatible(False))
                except BaseException:
                    compatible = False
                installed = bool(installed_ops.get(name, False)) and same_accel
                ops[name] = {"compatible": compatible, "installed": installed}
            info["ops"] = ops
        except BaseException as exc:
            info["ops_error"] = _error(exc)
    info["log"] = log.getvalue()[-2000:]


def _jit_cache(facts: dict[str, Any]) -> None:
    """Where torch JIT-builds extensions (DeepSpeed's ops included) and stale ``lock`` files:
    an interrupted build leaves ``BUILD_DIR/lock`` and every later build, on every rank, waits
    for it forever (``FileBaton.wait`` has no timeout)."""
    torch = facts.get("torch") or {}
    env_dir = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env_dir:
        root = env_dir
    elif torch.get("extensions_root"):
        if torch.get("hip"):
            accel = "rocm" + str(torch["hip"]).replace(".", "")
        elif torch.get("cuda"):
            accel = "cu" + str(torch["cuda"]).replace(".", "")
        else:
            accel = "cpu"
        pyver = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
        root = os.path.join(torch["extensions_root"], f"{pyver}_{accel}")
    else:
        facts["jit"] = {"dir": None}
        return
    info: dict[str, Any] = {"dir": root, "from_env": bool(env_dir), "exists": os.path.isdir(root)}
    probe_dir = root
    while probe_dir and not os.path.exists(probe_dir):
        probe_dir = os.path.dirname(probe_dir)
    info["writable"] = bool(probe_dir) and os.access(probe_dir, os.W_OK | os.X_OK)
    locks: list[dict[str, Any]] = []
    built: list[str] = []
    if info["exists"]:
        now = time.time()
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not os.path.isdir(path):
                continue
            lock = os.path.join(path, "lock")
            if os.path.exists(lock):
                try:
                    age = now - os.stat(lock).st_mtime
                except OSError:
                    age = None
                locks.append({"path": lock, "age_s": age})
            if any(f.endswith(".so") for f in os.listdir(path)):
                built.append(name)
    info["locks"] = locks
    info["built"] = built
    facts["jit"] = info


def _alloc_conf(facts: dict[str, Any]) -> None:
    """Which of the configured allocator keys this torch's c10 libraries contain.

    torch rejects an unknown key when the CUDA allocator starts ("Unrecognized key ... in
    CUDA allocator config", a TORCH_CHECK, so CUDA initialisation fails), and the list of
    known keys changes between versions. The keys are string literals in libc10*.so, so a
    key absent from all of them is not known to this build.
    """
    text = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    lib_dir = (facts.get("torch") or {}).get("lib_dir")
    if not text or not lib_dir or not os.path.isdir(lib_dir):
        return
    pairs, _ = parse_alloc_conf(text)
    libs = sorted(f for f in os.listdir(lib_dir) if re.match(r"libc10(_cuda|_hip)?\.so", f))
    blobs: list[bytes] = []
    for lib in libs:
        try:
            with open(os.path.join(lib_dir, lib), "rb") as fh:
                blobs.append(fh.read())
        except OSError:
            continue
    found = {key: any((b"\0" + key.encode() + b"\0") in blob for blob in blobs) for key, _ in pairs}
    facts["alloc_conf_scan"] = {"libs": libs, "found": found}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: env_probe.py OUT.json", file=sys.stderr)
        return 2
    out_path = argv[1]
    facts: dict[str, Any] = {"complete": False, "started": time.time()}

    def dump() -> None:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(facts, fh, default=str)
        os.replace(tmp, out_path)

    facts["python"] = {
        "version": platform.python_version(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "implementation": platform.python_implementation(),
    }
    facts["env"] = {k: os.environ.get(k) for k in ENV_KEYS}
    facts["ninja"] = _ninja()
    facts["packages"] = _packages()
    home, how = _find_cuda_home()
    facts["toolkit"] = _toolkit(home, how)
    dump()
    facts["stage"] = "torch"
    dump()
    _torch(facts)
    torch_home = (facts.get("torch") or {}).get("cuda_home")
    if torch_home and torch_home != home:
        facts["toolkit"] = _toolkit(torch_home, "torch.utils.cpp_extension.CUDA_HOME")
    facts["stage"] = "deepspeed"
    dump()
    _deepspeed(facts)
    facts["stage"] = "jit"
    dump()
    _jit_cache(facts)
    _alloc_conf(facts)
    facts["stage"] = "done"
    facts["complete"] = True
    facts["duration_s"] = time.time() - facts["started"]
    dump()
    return 0


if __name__ == "__main__":
    # Run by path: this directory is sys.path[0]; keep it from shadowing anything.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
