"""dsguard doctor: the classification rules (pure) and the real probe against real interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.cli.doctor import (
    Check,
    DoctorReport,
    GiB,
    MiB,
    classify_alloc_conf,
    classify_deepspeed,
    classify_disk,
    classify_gpus,
    classify_jit,
    classify_memory,
    classify_ninja,
    classify_shm,
    classify_toolkit,
    classify_torch,
    collect,
    cuda_match,
    exit_code,
    render_table,
)
from dsguard.cli.doctor import _disk_check as disk_check
from dsguard.host.envfacts import BuildLock
from dsguard.host.gpu import GpuDevice, GpuProcess, GpuSnapshot, Unknown
from dsguard.job.file import load_job
from dsguard.probes.env_probe import parse_alloc_conf

PY = "/opt/train/bin/python"
DS_TABLE = {"12": ["12.0", "12.1", "12.4", "12.6", "12.8"], "11": ["11.7", "11.8"]}


def _cuda_facts(**toolkit: Any) -> dict[str, Any]:
    return {
        "python": {"version": "3.11.9", "executable": PY},
        "env": {"DS_SKIP_CUDA_CHECK": toolkit.pop("skip", None), "CUDA_HOME": None},
        "torch": {"version": "2.5.1+cu124", "cuda": "12.4", "hip": None, "cuda_available": True},
        "toolkit": {
            "home": "/usr/local/cuda",
            "how": "CUDA_HOME",
            "exists": True,
            "cuda_h": True,
            "nvcc": "/usr/local/cuda/bin/nvcc",
            "nvcc_release": "12.4",
            **toolkit,
        },
        "deepspeed": {"version": "0.19.8", "cuda_minor_mismatch_ok": DS_TABLE},
    }


def _row(rows: list[Check], name: str) -> Check:
    return next(r for r in rows if r.name == name)


# -- CUDA toolkit vs torch: DeepSpeed's assert_no_cuda_mismatch --------------------------------


@pytest.mark.parametrize(
    ("nvcc", "torch_cuda", "verdict"),
    [
        ("12.4", "12.4", "match"),
        ("12.4", "12.4.1", "match"),
        ("12.6", "12.1", "compatible"),
        ("12.7", "12.4", "mismatch"),  # 12.7 is not in DeepSpeed's table (no such toolkit)
        ("13.0", "12.4", "mismatch"),
        ("11.8", "12.1", "mismatch"),
    ],
)
def test_cuda_match(nvcc: str, torch_cuda: str, verdict: str) -> None:
    assert cuda_match(nvcc, torch_cuda, DS_TABLE) == verdict


@pytest.mark.parametrize(
    ("toolkit", "cuda_home", "nvcc"),
    [
        ({}, "ok", "ok"),
        ({"nvcc_release": "12.8"}, "ok", "ok"),  # minor versions DeepSpeed accepts
        ({"nvcc_release": "13.0"}, "ok", "warn"),
        ({"nvcc_release": "13.0", "skip": "1"}, "ok", "ok"),
        ({"nvcc_release": None, "nvcc_error": "no nvcc"}, "ok", "warn"),
        ({"home": None, "how": None, "nvcc_release": None}, "warn", "warn"),
        ({"home": "/usr/local", "how": "nvcc on PATH: /usr/local/bin/nvcc", "cuda_h": False},
         "warn", "ok"),
    ],
)  # fmt: skip
def test_toolkit_rows(toolkit: dict[str, Any], cuda_home: str, nvcc: str) -> None:
    rows = classify_toolkit(_cuda_facts(**toolkit))
    assert _row(rows, "CUDA_HOME").status == cuda_home
    row = _row(rows, "nvcc")
    assert row.status == nvcc
    if nvcc == "warn":
        assert row.fix
    if toolkit.get("nvcc_release") == "13.0" and not toolkit.get("skip"):
        assert "DS_SKIP_CUDA_CHECK=1" in (row.fix or "")
        assert "CUDAMismatchException" in row.value


def test_toolkit_cpu_torch_is_informational() -> None:
    facts = _cuda_facts(nvcc_release="13.0")
    facts["torch"] = {"version": "2.13.0+cpu", "cuda": None, "hip": None}
    rows = classify_toolkit(facts)
    assert [r.status for r in rows] == ["ok", "ok"]
    assert "CPU build" in rows[1].value


def test_toolkit_missing_cuda_home_dir_warns() -> None:
    facts = _cuda_facts(exists=False, home="/opt/cuda-nope")
    facts["env"]["CUDA_HOME"] = "/opt/cuda-nope"
    assert _row(classify_toolkit(facts), "CUDA_HOME").status == "warn"


def test_toolkit_without_torch_is_unknown() -> None:
    facts = _cuda_facts()
    facts["torch"] = {"error": "ModuleNotFoundError: No module named 'torch'"}
    assert {r.status for r in classify_toolkit(facts)} == {"unknown"}


# -- torch ----------------------------------------------------------------------------------


def test_torch_missing_is_a_blocker_with_the_fix() -> None:
    facts = {"torch": {"error": "ModuleNotFoundError: No module named 'torch'"}}
    (row,) = classify_torch(facts, python=PY, nvml_gpus=None)
    assert row.status == "blocker"
    assert f"{PY} -m pip install torch" in (row.fix or "")


def test_torch_import_crash_is_a_blocker() -> None:
    (row,) = classify_torch({"stage": "torch"}, python=PY, nvml_gpus=None)
    assert row.status == "blocker"
    assert "killed" in row.value


@pytest.mark.parametrize(
    ("torch", "gpus", "status"),
    [
        ({"version": "2.13.0+cpu", "cuda": None, "hip": None}, None, "ok"),
        ({"version": "2.13.0+cpu", "cuda": None, "hip": None}, 8, "warn"),
        ({"version": "2.5+cu124", "cuda": "12.4", "cuda_available": True, "device_count": 8}, 8,
         "ok"),
        ({"version": "2.5+cu124", "cuda": "12.4", "cuda_available": False,
          "cuda_warnings": ["The NVIDIA driver on your system is too old"]}, 8, "blocker"),
        ({"version": "2.5+cu124", "cuda": "12.4", "cuda_available": False}, None, "warn"),
    ],
)  # fmt: skip
def test_torch_cuda_row(torch: dict[str, Any], gpus: int | None, status: str) -> None:
    rows = classify_torch({"torch": torch}, python=PY, nvml_gpus=gpus)
    assert rows[0].status == "ok"
    assert _row(rows, "torch cuda").status == status


def test_driver_too_old_is_quoted() -> None:
    torch = {"version": "2.5", "cuda": "12.4", "cuda_available": False,
             "cuda_warnings": ["The NVIDIA driver on your system is too old"]}  # fmt: skip
    row = _row(classify_torch({"torch": torch}, python=PY, nvml_gpus=2), "torch cuda")
    assert "too old" in row.value


# -- ninja, deepspeed, jit cache ------------------------------------------------------------

_OPS = {
    "cpu_adam": {"compatible": True, "installed": False},
    "fused_adam": {"compatible": True, "installed": False},
    "async_io": {"compatible": False, "installed": False},
}


@pytest.mark.parametrize(
    ("ninja", "ops", "status", "fix_has"),
    [
        ({"path": "/usr/bin/ninja", "version": "1.11.1"}, _OPS, "ok", None),
        ({"path": None, "module": True, "module_bin": "/venv/bin/ninja"}, _OPS, "warn", "PATH"),
        ({"path": None, "module": False}, _OPS, "warn", "pip install ninja"),
        ({"path": None}, {"cpu_adam": {"compatible": True, "installed": True}}, "ok", None),
    ],
)
def test_ninja(
    ninja: dict[str, Any], ops: dict[str, Any], status: str, fix_has: str | None
) -> None:
    row = classify_ninja({"ninja": ninja, "deepspeed": {"ops": ops}})
    assert row.status == status
    if fix_has:
        assert fix_has in (row.fix or "")


@pytest.mark.parametrize(("needs", "status"), [(True, "blocker"), (None, "warn"), (False, "ok")])
def test_deepspeed_missing(needs: bool | None, status: str) -> None:
    facts = {"deepspeed": {"error": "ModuleNotFoundError: No module named 'deepspeed'"}}
    (row,) = classify_deepspeed(facts, python=PY, needs_deepspeed=needs, uses_nvme=False)
    assert row.status == status


def test_deepspeed_ops() -> None:
    facts = {"deepspeed": {"version": "0.19.8", "accelerator": "cuda", "ops": _OPS}}
    rows = classify_deepspeed(facts, python=PY, needs_deepspeed=True, uses_nvme=False)
    assert _row(rows, "deepspeed ops").status == "ok"
    assert "not buildable here: async_io" in _row(rows, "deepspeed ops").value
    nvme = classify_deepspeed(facts, python=PY, needs_deepspeed=True, uses_nvme=True)
    assert _row(nvme, "deepspeed ops").status == "warn"
    broken = dict(_OPS, cpu_adam={"compatible": False, "installed": False})
    rows = classify_deepspeed(
        {"deepspeed": {"version": "0.19.8", "ops": broken}},
        python=PY,
        needs_deepspeed=True,
        uses_nvme=False,
    )
    assert _row(rows, "deepspeed ops").status == "warn"
    assert "cpu_adam" in _row(rows, "deepspeed ops").value


def test_jit_cache() -> None:
    base = {"dir": "/root/.cache/torch_extensions/py311_cu124", "exists": True, "writable": True}
    assert classify_jit({"jit": dict(base, locks=[], built=["cpu_adam"])}) == Check(
        "jit cache", "ok", "/root/.cache/torch_extensions/py311_cu124; built: cpu_adam"
    )
    lock = {"path": "/x/cpu_adam/lock", "age_s": 7200.0}
    row = classify_jit({"jit": dict(base, locks=[lock])})
    assert row is not None and row.status == "warn" and "/x/cpu_adam/lock" in row.value
    row = classify_jit({"jit": dict(base, writable=False)})
    assert row is not None and row.status == "warn" and "TORCH_EXTENSIONS_DIR" in (row.fix or "")
    assert classify_jit({}) is None


def test_jit_cache_uses_the_run_loops_lock_verdict() -> None:
    """With verdicts from host.envfacts.build_locks: stale warns (dsguard run removes it),
    held is a running build (ok), unknown warns with the careful fix."""
    base = {"dir": "/x", "exists": True, "writable": True, "locks": [], "built": []}
    stale = BuildLock(Path("/x/cpu_adam/lock"), False, 10.0)
    held = BuildLock(Path("/x/fused_adam/lock"), True, 2.0)
    unknown = BuildLock(Path("/x/async_io/lock"), None, None)
    row = classify_jit({"jit": base}, locks=[stale, held])
    assert row is not None and row.status == "warn"
    assert "held by no process" in row.value and "/x/cpu_adam/lock (10 s old)" in row.value
    assert "fused_adam" not in row.value and "dsguard run" in (row.fix or "")
    row = classify_jit({"jit": base}, locks=[held])
    assert row is not None and row.status == "ok" and "build is running" in row.value
    row = classify_jit({"jit": base}, locks=[unknown])
    assert row is not None and row.status == "warn" and "(? s old)" in row.value
    assert row.fix == "if no build is running now, delete the lock file(s)"
    assert classify_jit({"jit": base}, locks=[]) == Check("jit cache", "ok", "/x")


# -- PYTORCH_CUDA_ALLOC_CONF ----------------------------------------------------------------


def test_parse_alloc_conf() -> None:
    pairs, errors = parse_alloc_conf(
        "expandable_segments:True, max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"
    )
    assert pairs == [
        ("expandable_segments", "True"),
        ("max_split_size_mb", "128"),
        ("roundup_power2_divisions", "[256:1,>:4]"),
    ]
    assert errors == []
    assert parse_alloc_conf("garbage")[1] == ["'garbage' is not key:value"]
    assert parse_alloc_conf("a:[1")[1] == ["unbalanced brackets"]


@pytest.mark.parametrize(
    ("env", "scan", "status"),
    [
        ({}, None, "ok"),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None, "ok"),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segment:True"}, None, "warn"),  # typo
        ({"PYTORCH_CUDA_ALLOC_CONF": "future_key:1"}, {"found": {"future_key": True}}, "ok"),
        ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb"}, None, "warn"),
        ({"PYTORCH_ALLOC_CONF": "bogus:1"}, None, "warn"),
    ],
)
def test_alloc_conf(env: dict[str, str], scan: dict[str, Any] | None, status: str) -> None:
    row = classify_alloc_conf(env, scan)
    assert row.status == status
    if status == "warn":
        assert "Unrecognized key" in row.value and row.fix


# -- GPUs, memory, shm, disk ----------------------------------------------------------------


def _dev(index: int, used: int, procs: tuple[GpuProcess, ...] | None = ()) -> GpuDevice:
    total = 80 * GiB
    return GpuDevice(index, "NVIDIA H100", f"GPU-{index}", total, used, total - used, 0, procs)


def test_gpus_unknown_is_never_zero() -> None:
    (row,) = classify_gpus(Unknown("no NVML library", True), job_gpus=None, torch_cuda=False)
    assert row.status == "unknown" and "0" not in row.value
    (row,) = classify_gpus(Unknown("no NVML library", True), job_gpus=None, torch_cuda=True)
    assert row.status == "warn"


def test_gpus_per_device() -> None:
    snap = GpuSnapshot(
        devices=(
            _dev(0, 500 * MiB),
            _dev(1, 20 * GiB, (GpuProcess(4242, 20 * GiB),)),
            _dev(2, 30 * GiB, None),
        ),
        driver_version="550.54",
    )
    rows = classify_gpus(snap, job_gpus=None, torch_cuda=True)
    assert [(r.name, r.status) for r in rows] == [
        ("gpu 0", "ok"),
        ("gpu 1", "warn"),
        ("gpu 2", "warn"),
    ]
    assert "4242" in rows[1].value
    rows = classify_gpus(snap, job_gpus=[0, 5], torch_cuda=True)
    assert [(r.name, r.status) for r in rows] == [("gpu 0", "ok"), ("gpu 5", "blocker")]
    mine = classify_gpus(snap, job_gpus=[1], torch_cuda=True, own_pids=frozenset({4242}))
    assert mine[0].status == "warn"  # used memory with no foreign pid: still not free


def test_memory_rows() -> None:
    rows = classify_memory(
        total=64 * GiB, available=40 * GiB, swap_total=0, swap_used=0, cgroup_limit=None
    )
    assert [r.status for r in rows] == ["ok", "ok"]
    rows = classify_memory(
        total=64 * GiB,
        available=2 * GiB,
        swap_total=8 * GiB,
        swap_used=6 * GiB,
        cgroup_limit=32 * GiB,
    )
    assert [r.status for r in rows] == ["warn", "warn"]
    assert "cgroup limit 32.0 GiB" in rows[0].value


@pytest.mark.parametrize(
    ("total", "multi", "status"),
    [
        (16 * GiB, True, "ok"),
        (512 * MiB, False, "warn"),
        (64 * MiB, False, "warn"),
        (64 * MiB, True, "blocker"),
        (None, True, "warn"),
    ],
)
def test_shm(total: int | None, multi: bool, status: str) -> None:
    row = classify_shm(total, multi_process=multi)
    assert row.status == status
    if status != "ok":
        assert row.fix


@pytest.mark.parametrize(
    ("free", "newest", "status"),
    [
        (100 * GiB, ("checkpoint-10", 20 * GiB), "ok"),
        (30 * GiB, ("checkpoint-10", 20 * GiB), "warn"),
        (15 * GiB, ("checkpoint-10", 20 * GiB), "blocker"),
        (5 * GiB, None, "warn"),
        (50 * GiB, None, "ok"),
        (None, None, "unknown"),
    ],
)
def test_disk(free: int | None, newest: tuple[str, int] | None, status: str) -> None:
    assert classify_disk(Path("/ckpt"), free=free, newest=newest).status == status


def test_disk_measures_the_newest_checkpoint(tmp_path: Path) -> None:
    for step, size in ((5, 1000), (10, 3000)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x" * size)
    row = disk_check(tmp_path)
    assert "newest checkpoint checkpoint-10: 0.0 GiB" in row.value
    # a checkpoint dir that does not exist yet: measured on the nearest existing parent
    row = disk_check(tmp_path / "not-yet" / "outputs")
    assert row.status in ("ok", "warn") and "free at" in row.value


# -- report ---------------------------------------------------------------------------------


def test_report_table_json_and_exit_code() -> None:
    report = DoctorReport(
        checks=(
            Check("python", "ok", "3.11.9"),
            Check("nvcc", "warn", "13.0 vs 12.4", "install CUDA 12.4"),
            Check("gpus", "unknown", "NVML unavailable"),
        ),
        python=PY,
        job="llama",
        probe_s=2.5,
    )
    assert exit_code(report) == 0
    table = render_table(report)
    assert "WARN" in table and "fix: install CUDA 12.4" in table and "job llama" in table
    data = json.loads(json.dumps(report.as_dict()))
    assert data["counts"] == {"ok": 1, "warn": 1, "blocker": 0, "unknown": 1}
    assert data["checks"][1] == {
        "name": "nvcc", "status": "warn", "value": "13.0 vs 12.4", "fix": "install CUDA 12.4",
    }  # fmt: skip
    blocked = DoctorReport(checks=(*report.checks, Check("torch", "blocker", "x", "y")), python=PY)
    assert exit_code(blocked) == 1
    assert "BLOCKER" in render_table(blocked)


# -- the real probe -------------------------------------------------------------------------


def _no_gpu() -> Unknown:
    return Unknown("test: no NVML", permanent=True)


@pytest.fixture(scope="module")
def venv_report(tmp_path_factory: pytest.TempPathFactory) -> DoctorReport:
    """The probe run for a job whose interpreter is this venv's (torch CPU build + DeepSpeed)."""
    root = tmp_path_factory.mktemp("job")
    (root / "train.py").write_text("")
    (root / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    (root / "out" / "checkpoint-3").mkdir(parents=True)
    (root / "out" / "checkpoint-3" / "model.safetensors").write_bytes(b"x" * 4096)
    doc = {
        "name": "doc",
        "script": "train.py",
        "python": sys.executable,
        "train": {"micro_batch_size": 2},
        "deepspeed": {"config": "ds.json"},
        "checkpoints": {"dir": "out"},
        "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    }
    (root / "job.yaml").write_text(yaml.safe_dump(doc))
    return collect(load_job(root / "job.yaml"), gpu=_no_gpu)


def test_real_probe_on_the_training_venv(venv_report: DoctorReport) -> None:
    names = {c.name: c for c in venv_report.checks}
    for name in ("python", "torch", "torch cuda", "nvcc", "ninja", "deepspeed", "deepspeed ops"):
        assert name in names, name
    assert names["torch"].status == "ok"
    assert names["deepspeed"].status == "ok"
    assert names["gpus"].status == "unknown"
    assert not [c for c in venv_report.checks if c.status == "blocker"], render_table(venv_report)
    assert exit_code(venv_report) == 0
    assert venv_report.job == "doc" and venv_report.python == sys.executable
    assert "newest checkpoint checkpoint-3" in names["disk"].value
    assert names["PYTORCH_CUDA_ALLOC_CONF"].value == "expandable_segments=True"  # job env
    facts = venv_report.facts or {}
    assert facts.get("complete") is True
    assert "cpu_adam" in facts["deepspeed"]["ops"]
    json.dumps(venv_report.as_dict())


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter without torch: a fresh venv with no site packages."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    return str(root / "bin" / "python")


def test_real_probe_without_torch_is_a_blocker(bare_python: str) -> None:
    env = dict(os.environ, PYTHONNOUSERSITE="1")
    report = collect(None, python=bare_python, gpu=_no_gpu, base_env=env)
    torch = next(c for c in report.checks if c.name == "torch")
    assert torch.status == "blocker"
    assert f"{bare_python} -m pip install torch" in (torch.fix or "")
    assert exit_code(report) == 1
    assert "BLOCKER" in render_table(report)


def test_probe_that_cannot_start_is_a_blocker(tmp_path: Path) -> None:
    report = collect(None, python=str(tmp_path / "no-python"), gpu=_no_gpu)
    first = report.checks[0]
    assert (first.name, first.status) == ("training environment", "blocker")
    assert "no such interpreter" in first.value and first.fix
    # host rows are still there
    assert {"host memory", "/dev/shm", "disk"} <= {c.name for c in report.checks}
    assert exit_code(report) == 1


def test_probe_sees_the_jobs_environment(bare_python: str) -> None:
    env = dict(os.environ, PYTHONNOUSERSITE="1", PYTORCH_CUDA_ALLOC_CONF="bogus_key:1")
    report = collect(None, python=bare_python, gpu=_no_gpu, base_env=env)
    row = next(c for c in report.checks if c.name == "PYTORCH_CUDA_ALLOC_CONF")
    assert row.status == "warn" and "bogus_key" in row.value


def test_report_carries_the_env_facts_the_remedies_use(tmp_path: Path) -> None:
    """doctor reads the training environment through host.envfacts.detect too, from the same
    NVML snapshot as its GPU rows, so doctor and the run loop's remedies see one set of facts."""
    why = "no NVML library: no NVIDIA driver on this host"
    report = collect(None, python=str(tmp_path / "no-python"), gpu=lambda: Unknown(why))
    facts = report.env_facts
    assert facts is not None
    assert facts.python == str(tmp_path / "no-python")
    assert facts.torch_version is None and "no such interpreter" in (facts.torch_error or "")
    assert facts.gpus is None and facts.gpu_error == why
    assert report.as_dict()["env_facts"]["gpu_error"] == why
