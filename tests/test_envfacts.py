"""Environment facts: version parsing on real output, real toolkit dirs in tmp, the real probe.

The fake toolkits are filesystem fixtures, not mocks: directories with a ``bin/nvcc`` script
that prints what a real nvcc prints, ``include/cuda_runtime.h``, ``version.json`` /
``version.txt`` in NVIDIA's formats. The torch probe runs the real training interpreter. NVML
runs for real where it can (no driver here: the unknown path); the capability logic gets a
small stand-in with pynvml's own error classes, as in tests/test_gpu.py.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dsguard.host import envfacts
from dsguard.host.envfacts import (
    EnvFacts,
    GpuFact,
    build_locks,
    clear_cache,
    detect,
    find_toolkits,
    parse_nvcc_version,
    parse_version_json,
    parse_version_txt,
    read_gpus,
    select_gpus,
    stale_build_locks,
)

# Real `nvcc --version` outputs (13.0 is this machine's /usr/local/cuda-13.0).
NVCC_13_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12_1 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2023 NVIDIA Corporation
Built on Mon_Apr__3_17:16:06_PDT_2023
Cuda compilation tools, release 12.1, V12.1.105
Build cuda_12.1.r12.1/compiler.32688072_0
"""
NVCC_11_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2022 NVIDIA Corporation
Built on Wed_Sep_21_10:33:58_PDT_2022
Cuda compilation tools, release 11.8, V11.8.89
Build cuda_11.8.r11.8/compiler.31833905_0
"""
NVCC_10_2 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2019 NVIDIA Corporation
Built on Wed_Oct_23_19:24:38_PDT_2019
Cuda compilation tools, release 10.2, V10.2.89
"""
VERSION_JSON_12_2 = """{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "12.2.2"
   },
   "cuda_cccl" : {
      "name" : "CUDA C++ Core Compute Libraries",
      "version" : "12.2.140"
   },
   "cuda_nvcc" : {
      "name" : "CUDA NVCC",
      "version" : "12.2.140"
   }
}
"""
VERSION_JSON_NVCC_ONLY = '{"cuda_nvcc": {"name": "CUDA NVCC", "version": "11.8.89"}}'
VERSION_TXT_10_2 = "CUDA Version 10.2.89\nCUDA Patch Version 10.2.1\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NVCC_13_0, ("13.0", "13.0.88")),
        (NVCC_12_1, ("12.1", "12.1.105")),
        (NVCC_11_8, ("11.8", "11.8.89")),
        (NVCC_10_2, ("10.2", "10.2.89")),
        ("nvcc: command not found", None),
        ("", None),
    ],
)
def test_parse_nvcc_version(text: str, expected: tuple[str, str] | None) -> None:
    assert parse_nvcc_version(text) == expected


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        (parse_version_json, VERSION_JSON_12_2, ("12.2", "12.2.2")),
        (parse_version_json, VERSION_JSON_NVCC_ONLY, ("11.8", "11.8.89")),
        (parse_version_json, "not json", None),
        (parse_version_json, "[]", None),
        (parse_version_txt, VERSION_TXT_10_2, ("10.2", "10.2.89")),
        (parse_version_txt, "garbage", None),
    ],
)
def test_parse_version_files(parser: Any, text: str, expected: tuple[str, str] | None) -> None:
    assert parser(text) == expected


# -- toolkits on disk ---------------------------------------------------------------------------


def _exe(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_toolkit(
    root: Path,
    nvcc_output: str | None,
    *,
    headers: bool = True,
    version_json: str | None = None,
    version_txt: str | None = None,
    nvcc_exit: int = 0,
) -> Path:
    """A toolkit directory as NVIDIA lays it out (the parts dsguard reads)."""
    root.mkdir(parents=True, exist_ok=True)
    if nvcc_output is not None:
        _exe(root / "bin" / "nvcc", f"#!/bin/sh\ncat <<'EOF'\n{nvcc_output}EOF\nexit {nvcc_exit}\n")
    if headers:
        (root / "include").mkdir(exist_ok=True)
        (root / "include" / "cuda_runtime.h").write_text("/* cuda runtime */\n")
    if version_json is not None:
        (root / "version.json").write_text(version_json)
    if version_txt is not None:
        (root / "version.txt").write_text(version_txt)
    return root


def test_find_toolkits_real_layouts(tmp_path: Path) -> None:
    usr_local = tmp_path / "usr" / "local"
    cu121 = make_toolkit(usr_local / "cuda-12.1", NVCC_12_1, version_json=VERSION_JSON_12_2)
    cu118 = make_toolkit(usr_local / "cuda-11.8", None, version_json=VERSION_JSON_NVCC_ONLY)
    cu102 = make_toolkit(
        usr_local / "cuda-10.2", "segfault\n", version_txt=VERSION_TXT_10_2, nvcc_exit=139
    )
    (usr_local / "cuda").symlink_to(cu121)
    # This machine's trap: /usr/local/bin/nvcc is a wrapper script, so torch would take
    # CUDA_HOME=/usr/local, which has no CUDA headers.
    _exe(usr_local / "bin" / "nvcc", f'#!/bin/sh\nexec "{cu121}/bin/nvcc" "$@"\n')
    home = make_toolkit(tmp_path / "opt" / "home-cuda", NVCC_11_8)

    env = {"CUDA_HOME": str(home), "PATH": f"{usr_local / 'bin'}{os.pathsep}/usr/bin"}
    found = find_toolkits(env, search_globs=[str(usr_local / "cuda"), str(usr_local / "cuda-*")])
    by_path = {t.path: t for t in found}
    assert [t.found_via for t in found] == ["CUDA_HOME", "PATH", "search", "search", "search"]
    assert [t.path for t in found] == [
        str(home),
        str(usr_local),
        str(usr_local / "cuda"),  # cuda-12.1 under its first-seen name, listed once
        str(cu102),
        str(cu118),
    ]
    assert by_path[str(home)].version == "11.8"
    assert by_path[str(home)].usable

    wrapper = by_path[str(usr_local)]
    assert (wrapper.version, wrapper.has_nvcc, wrapper.has_headers) == ("12.1", True, False)
    assert not wrapper.usable

    link = by_path[str(usr_local / "cuda")]
    assert link.realpath == os.path.realpath(cu121)
    assert (link.version, link.full_version, link.version_source) == ("12.1", "12.1.105", "nvcc")

    runtime_only = by_path[str(cu118)]
    assert (runtime_only.version, runtime_only.version_source) == ("11.8", "version.json")
    assert not runtime_only.has_nvcc

    broken = by_path[str(cu102)]  # nvcc exits 139: fall back to version.txt, not usable
    assert (broken.version, broken.version_source, broken.has_nvcc) == (
        "10.2",
        "version.txt",
        False,
    )

    facts = EnvFacts(toolkits=found, cuda_home=str(usr_local / "cuda-12.1"))
    assert facts.toolkit_at(facts.cuda_home) == link
    assert EnvFacts.from_dict(facts.as_dict()) == facts


def test_find_toolkits_in_the_interpreter_prefix(tmp_path: Path) -> None:
    """conda's cuda-nvcc installs nvcc next to python: that prefix is a toolkit."""
    prefix = make_toolkit(tmp_path / "conda" / "envs" / "train", NVCC_12_1)
    _exe(prefix / "bin" / "python", "#!/bin/sh\nexit 0\n")
    found = find_toolkits({}, python=str(prefix / "bin" / "python"), search_globs=[])
    assert [(t.path, t.found_via, t.version) for t in found] == [
        (str(prefix), "python-prefix", "12.1")
    ]


def test_nvcc_that_hangs_is_bounded(tmp_path: Path) -> None:
    tk = make_toolkit(tmp_path / "cuda-12.1", None, version_json=VERSION_JSON_12_2)
    _exe(tk / "bin" / "nvcc", "#!/bin/sh\nexec sleep 30\n")
    t0 = time.monotonic()
    got = envfacts.inspect_toolkit(str(tk), "search", nvcc_timeout_s=0.5)
    assert time.monotonic() - t0 < 10
    assert (got.version, got.version_source, got.has_nvcc) == ("12.2", "version.json", False)


# -- torch, from the training interpreter ---------------------------------------------------


def test_detect_probes_the_real_training_interpreter(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    clear_cache()
    ext = tmp_path / "ext"
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(ext))
    env.pop("CUDA_HOME", None)
    t0 = time.monotonic()
    facts = detect(sys.executable, env=env, search_globs=[])
    first_s = time.monotonic() - t0
    assert facts.torch_error is None
    assert facts.torch_version == torch.__version__
    assert facts.torch_cuda == torch.version.cuda
    assert facts.torch_extensions_dir == str(ext)
    assert facts.deepspeed_version is not None
    t0 = time.monotonic()
    again = detect(sys.executable, env=env, search_globs=[])
    assert again == facts
    assert time.monotonic() - t0 < max(0.5, first_s / 4)  # cached: no second torch import


def test_default_extensions_dir_is_torchs_own(tmp_path: Path) -> None:
    """Without TORCH_EXTENSIONS_DIR the probe names the directory torch itself builds in."""
    pytest.importorskip("torch")
    import subprocess

    clear_cache()
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    facts = detect(sys.executable, env=env, search_globs=[])
    torchs = subprocess.run(
        [sys.executable, "-c",
         "import torch.utils.cpp_extension as c; print(c._get_build_directory('probe', False))"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert facts.torch_extensions_dir == os.path.dirname(torchs)
    assert facts.torch_extensions_dir.startswith(str(tmp_path / "cache"))


def test_detect_with_a_broken_interpreter_says_why(tmp_path: Path) -> None:
    clear_cache()
    bad = tmp_path / "python"
    _exe(bad, "#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    facts = detect(str(bad), env={"PATH": "/usr/bin"}, search_globs=[])
    assert facts.torch_version is None
    assert facts.torch_error == f"{bad} exited 1: ModuleNotFoundError: No module named torch"
    missing = detect(str(tmp_path / "nope"), env={}, search_globs=[])
    assert missing.torch_error is not None
    assert "cannot run" in missing.torch_error


# -- GPUs ---------------------------------------------------------------------------------------


def _have_nvml_library() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_have_nvml_library(), reason="this host has an NVIDIA driver")
def test_no_driver_is_unknown_never_old() -> None:
    gpus, why = read_gpus()
    assert gpus is None
    assert why is not None
    assert "NVML" in why
    facts = detect("/nonexistent/python", env=dict(os.environ), search_globs=[])
    assert facts.gpus is None
    assert facts.gpu_error == why


class CapNvml:
    """pynvml's capability calls over a device table, raising pynvml's own errors."""

    NVMLError = pynvml.NVMLError

    def __init__(self, caps: list[tuple[int, int] | None]) -> None:
        self.caps = caps
        self.shutdown = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.caps)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3" if self.caps[h] == (9, 0) else "Tesla V100-SXM2-32GB"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}-aaaa"

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        cap = self.caps[h]
        if cap is None:
            raise pynvml.NVMLError_NotSupported()
        return cap


def test_read_gpus_capabilities() -> None:
    nvml = CapNvml([(9, 0), (7, 0), None])
    gpus, why = read_gpus(nvml)
    assert why is None
    assert gpus is not None
    assert [(g.index, g.capability) for g in gpus] == [(0, (9, 0)), (1, (7, 0)), (2, None)]
    assert gpus[0].uuid == "GPU-00000000-aaaa"
    assert nvml.shutdown == 1


H0 = GpuFact(0, "GPU-0", "H100", (9, 0))
H1 = GpuFact(1, "GPU-1", "H100", (9, 0))
V2 = GpuFact(2, "GPU-2", "V100", (7, 0))


@pytest.mark.parametrize(
    ("devices", "gpus", "visible", "pci", "expected", "noted"),
    [
        ((H0, H1, V2), None, None, False, (H0, H1, V2), False),
        ((H0, H1), [1], None, False, (H1,), False),  # uniform box: index is safe
        ((H0, H1, V2), [0, 1], None, True, (H0, H1), False),  # PCI order: index is NVML's
        ((H0, H1, V2), [0, 1], None, False, (H0, H1, V2), True),  # mixed + fastest-first
        ((H0, H1, V2), None, "GPU-2", False, (V2,), False),  # UUIDs are exact
        ((H0, H1, V2), None, "MIG-1c2d", False, (H0, H1, V2), True),
        ((H0, H1), None, "0", False, (H0,), False),
        ((H0, H1), None, "", False, (H0, H1), False),
        ((H0, H1), None, "-1", False, (), False),
    ],
)
def test_select_gpus(
    *,
    devices: tuple[GpuFact, ...],
    gpus: list[int] | None,
    visible: str | None,
    pci: bool,
    expected: tuple[GpuFact, ...],
    noted: bool,
) -> None:
    got, note = select_gpus(devices, gpus=gpus, visible=visible, pci_order=pci)
    assert got == expected
    assert (note is not None) == noted


def test_detect_selects_the_jobs_gpus() -> None:
    facts = detect(
        "/nonexistent/python",  # the torch part is not under test here
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "GPU-1"},
        search_globs=[],
        read_gpu=lambda: ((H0, H1, V2), None),
    )
    assert facts.gpus == (H1,)
    assert EnvFacts.from_dict(facts.as_dict()) == facts


# -- torch-extension build locks ------------------------------------------------------------


def test_stale_build_lock_of_a_killed_build(tmp_path: Path) -> None:
    """torch's own FileBaton, held by a live process, then orphaned by SIGKILL."""
    pytest.importorskip("torch")
    import signal
    import subprocess

    op_dir = tmp_path / "cpu_adam"
    op_dir.mkdir()
    lock = op_dir / "lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from torch.utils.file_baton import FileBaton\n"
         f"assert FileBaton({str(lock)!r}).try_acquire()\n"
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert lock.is_file()
        assert stale_build_locks(tmp_path) == []  # a build in progress is left alone
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert lock.is_file()  # the baton was never released
    assert stale_build_locks(tmp_path) == [lock]
    assert stale_build_locks(tmp_path / "missing") == []


def _fake_proc(
    tmp_path: Path, fds: dict[str, list[Path]], unreadable: tuple[str, ...] = ()
) -> Path:
    """A /proc stand-in: ``<pid>/fd/<n>`` symlinks to the files each pid holds open; a pid in
    ``unreadable`` has an ``fd`` that is a file, so listing it fails like EACCES would."""
    proc = tmp_path / "proc"
    for pid, files in fds.items():
        fd_dir = proc / pid / "fd"
        fd_dir.mkdir(parents=True)
        for n, target in enumerate(files):
            (fd_dir / str(n)).symlink_to(target)
    for pid in unreadable:
        (proc / pid).mkdir(parents=True)
        (proc / pid / "fd").write_text("")
    (proc / "self").mkdir(parents=True, exist_ok=True)  # not a pid: ignored
    return proc


def test_build_lock_verdicts_held_stale_unknown(tmp_path: Path) -> None:
    """One verdict per lock: held by a live process, stale, or unknown when some process's
    fds cannot be read; only the stale ones are what the run loop removes."""
    ext = tmp_path / "ext"
    held_lock, stale_lock = ext / "cpu_adam" / "lock", ext / "fused_adam" / "lock"
    for lock in (held_lock, stale_lock):
        lock.parent.mkdir(parents=True)
        lock.write_text("")
    (ext / "no_lock_op").mkdir()
    proc = _fake_proc(tmp_path / "a", {"100": [held_lock], "200": [tmp_path]})
    locks = build_locks(ext, proc=proc, now=time.time() + 60)
    assert [(lk.path, lk.held) for lk in locks] == [(held_lock, True), (stale_lock, False)]
    assert all(lk.age_s is not None and lk.age_s >= 59 for lk in locks)
    assert stale_build_locks(ext, proc=proc) == [stale_lock]

    blind = _fake_proc(tmp_path / "b", {"100": [held_lock]}, unreadable=("300",))
    assert [(lk.path, lk.held) for lk in build_locks(ext, proc=blind)] == [
        (held_lock, True),
        (stale_lock, None),
    ]
    assert stale_build_locks(ext, proc=blind) == []  # maybe held: never removed
    assert build_locks(ext, proc=tmp_path / "no-proc")[1].held is None
    assert build_locks(tmp_path / "missing") == []
