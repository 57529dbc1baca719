"""NVML probe: the real no-driver path on this host, the logic against an injected fake NVML.

The fake is the one double in dsguard's tests that stands in for something that can run
here: this host has no NVIDIA GPU. It raises pynvml's *real* error classes, so the retry and
classification code is exercised against the exact exception types the bindings raise.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from dsguard.host.gpu import (
    GpuDevice,
    GpuProbe,
    GpuProcess,
    GpuSnapshot,
    Unknown,
    snapshot,
    wait_for_release,
)

GiB = 1 << 30


def _have_nvml_library() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class FakeNvml:
    """The slice of ``pynvml`` dsguard uses, with pynvml's own exception classes."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_Unknown = pynvml.NVMLError_Unknown
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost

    def __init__(self, devices: list[dict[str, Any]]) -> None:
        self.devices = devices
        self.calls: dict[str, int] = {}
        #: name -> exceptions to raise on the next calls (consumed in order)
        self.fail: dict[str, list[BaseException]] = {}
        self.init_count = 0
        self.shutdown_count = 0
        self.block: threading.Event | None = None

    def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        queue = self.fail.get(name)
        if queue:
            raise queue.pop(0)

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.block is not None:
            self.block.wait(10)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._enter("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        self._enter("nvmlDeviceGetName")
        return str(self.devices[h]["name"]).encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._enter("nvmlDeviceGetUUID")
        return f"GPU-{h:08d}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo")
        d = self.devices[h]
        return SimpleNamespace(total=d["total"], used=d["used"], free=d["total"] - d["used"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=self.devices[h]["util"], memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.devices[h]["procs"]]


def two_gpus() -> FakeNvml:
    return FakeNvml(
        [
            {"name": "NVIDIA H100 80GB HBM3", "total": 80 * GiB, "used": 30 * GiB, "util": 97,
             "procs": [(4242, 29 * GiB), (4243, None)]},
            {"name": "NVIDIA H100 80GB HBM3", "total": 80 * GiB, "used": 0, "util": 0,
             "procs": []},
        ]
    )  # fmt: skip


# -- the real thing on this host ---------------------------------------------------------------


@pytest.mark.skipif(_have_nvml_library(), reason="this host has an NVIDIA driver")
def test_no_driver_is_unknown_never_zero() -> None:
    snap = snapshot()
    assert isinstance(snap, Unknown)
    assert snap.permanent and "no NVIDIA driver" in snap.reason
    assert snap.as_dict()["available"] is False


@pytest.mark.skipif(_have_nvml_library(), reason="this host has an NVIDIA driver")
def test_no_driver_release_is_unknown_at_once() -> None:
    slept: list[float] = []
    res = wait_for_release([12345], 60, sleep=slept.append)
    assert res.status == "unknown" and not res.released
    assert res.polls == 1 and slept == []
    assert res.reason is not None and "no NVIDIA driver" in res.reason


@pytest.mark.skipif(not _have_nvml_library(), reason="no NVIDIA driver on this host")
def test_real_gpu_snapshot() -> None:
    snap = snapshot(timeout_s=30)
    assert isinstance(snap, GpuSnapshot), snap
    for d in snap.devices:
        assert d.total_bytes is None or d.total_bytes > 0


def test_package_missing_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    snap = GpuProbe().snapshot()
    assert isinstance(snap, Unknown) and snap.permanent and "nvidia-ml-py" in snap.reason


# -- logic, against the fake -------------------------------------------------------------------


def test_snapshot_fields() -> None:
    nvml = two_gpus()
    snap = snapshot(nvml)
    assert isinstance(snap, GpuSnapshot)
    assert snap.driver_version == "550.54.15" and snap.retries == 0
    d0, d1 = snap.devices
    assert d0 == GpuDevice(
        index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-00000000", total_bytes=80 * GiB,
        used_bytes=30 * GiB, free_bytes=50 * GiB, utilization_pct=97,
        processes=(GpuProcess(4242, 29 * GiB), GpuProcess(4243, None)),
    )  # fmt: skip
    assert d1.processes == () and d1.used_bytes == 0
    assert nvml.init_count == 1 and nvml.shutdown_count == 1  # one-shot: init, query, shutdown
    as_dict = snap.as_dict()
    assert as_dict["devices"][0]["processes"][1] == {"pid": 4243, "used_bytes": None}


def test_transient_errors_are_retried_with_the_injected_sleep() -> None:
    nvml = two_gpus()
    nvml.fail["nvmlDeviceGetMemoryInfo"] = [pynvml.NVMLError_Timeout(), pynvml.NVMLError_Unknown()]
    slept: list[float] = []
    warned: list[str] = []
    probe = GpuProbe(nvml, sleep=slept.append, warn=warned.append)
    snap = probe.snapshot()
    assert isinstance(snap, GpuSnapshot)
    assert snap.devices[0].total_bytes == 80 * GiB and snap.devices[0].errors == ()
    assert snap.retries == 2 and len(slept) == 2 and all(0 < s <= 1.0 for s in slept)
    assert len(warned) == 2 and "nvmlDeviceGetMemoryInfo" in warned[0]
    probe.close()


def test_retries_are_bounded_then_the_field_is_unknown() -> None:
    nvml = two_gpus()
    nvml.fail["nvmlDeviceGetUtilizationRates"] = [pynvml.NVMLError_Timeout()] * 3
    probe = GpuProbe(nvml, sleep=lambda _: None)
    snap = probe.snapshot()
    assert isinstance(snap, GpuSnapshot)
    d0 = snap.devices[0]
    assert d0.utilization_pct is None and d0.errors == ("utilization: Timeout",)
    assert d0.used_bytes == 30 * GiB  # the rest of the device is still reported
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 3 + 1  # 3 on GPU 0, 1 on GPU 1


def test_lost_gpu_is_not_retried() -> None:
    nvml = two_gpus()
    nvml.fail["nvmlDeviceGetComputeRunningProcesses"] = [pynvml.NVMLError_GpuIsLost()]
    slept: list[float] = []
    snap = GpuProbe(nvml, sleep=slept.append).snapshot()
    assert isinstance(snap, GpuSnapshot)
    assert snap.devices[0].processes is None  # unknown, not "no processes"
    assert snap.devices[0].errors == ("processes: GPU is lost",)
    assert slept == [] and nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 2


@pytest.mark.parametrize(
    ("error", "reason", "permanent"),
    [
        (pynvml.NVMLError_LibraryNotFound(), "no NVIDIA driver", True),
        (pynvml.NVMLError_DriverNotLoaded(), "driver not loaded", True),
        (pynvml.NVMLError_NoPermission(), "refused", True),
        (pynvml.NVMLError_InsufficientPower(), "init failed", False),
    ],
)
def test_init_failures_are_unknown(error: BaseException, reason: str, permanent: bool) -> None:
    nvml = two_gpus()
    nvml.fail["nvmlInit"] = [error]
    snap = GpuProbe(nvml, sleep=lambda _: None).snapshot()
    assert isinstance(snap, Unknown) and reason in snap.reason and snap.permanent is permanent


def test_transient_init_error_is_retried() -> None:
    nvml = two_gpus()
    nvml.fail["nvmlInit"] = [pynvml.NVMLError_Timeout()]
    snap = GpuProbe(nvml, sleep=lambda _: None).snapshot()
    assert isinstance(snap, GpuSnapshot) and nvml.calls["nvmlInit"] == 2


def test_probe_initialises_once_for_many_snapshots() -> None:
    nvml = two_gpus()
    probe = GpuProbe(nvml)
    for _ in range(3):
        assert isinstance(probe.snapshot(), GpuSnapshot)
    probe.close()
    probe.close()
    assert nvml.init_count == 1 and nvml.shutdown_count == 1


def test_a_blocked_nvml_call_ends_at_the_deadline() -> None:
    """A wedged GPU must not stall the loop that pings the systemd watchdog."""
    nvml = two_gpus()
    nvml.block = threading.Event()
    probe = GpuProbe(nvml)
    snap = probe.snapshot(timeout_s=0.2)
    assert isinstance(snap, Unknown) and "did not answer" in snap.reason
    assert probe.stuck
    again = probe.snapshot(timeout_s=5)  # at once, no second stuck thread
    assert isinstance(again, Unknown) and "still blocked" in again.reason
    assert isinstance(probe.snapshot(), Unknown)  # inline calls too (they'd wait on the lock)
    nvml.block.set()
    assert probe._worker is not None
    probe._worker.join(5)
    nvml.block = None
    assert isinstance(probe.snapshot(timeout_s=5), GpuSnapshot)
    probe.close()
    assert nvml.calls["nvmlDeviceGetCount"] == 2


# -- wait_for_release ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def _snap(*procs_per_device: tuple[GpuProcess, ...] | None) -> GpuSnapshot:
    devices = tuple(
        GpuDevice(i, "gpu", None, 80 * GiB, 0, 80 * GiB, 0, procs)
        for i, procs in enumerate(procs_per_device)
    )
    return GpuSnapshot(devices=devices, driver_version="x")


def scripted(*snaps: GpuSnapshot | Unknown) -> Callable[[], GpuSnapshot | Unknown]:
    seq = list(snaps)

    def probe() -> GpuSnapshot | Unknown:
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return probe


def test_release_waits_until_the_pids_are_gone() -> None:
    clock = Clock()
    held = _snap((GpuProcess(11, GiB), GpuProcess(99, GiB)), (GpuProcess(12, None),))
    half = _snap((GpuProcess(99, GiB),), (GpuProcess(12, None),))
    gone = _snap((GpuProcess(99, GiB),), ())  # pid 99 is someone else's: not waited for
    ticks: list[float] = []
    res = wait_for_release(
        [11, 12], 30, clock=clock, sleep=clock.sleep, probe=scripted(held, half, gone),
        poll_s=0.5, tick=lambda: ticks.append(clock()),
    )  # fmt: skip
    assert res.status == "released" and res.released
    assert ticks == [1000.0, 1000.5, 1001.0]  # the watchdog can be fed during the wait
    assert res.polls == 3 and clock.slept == [0.5, 0.5] and res.waited_s == 1.0


def test_release_times_out_as_held_with_the_holders() -> None:
    clock = Clock()
    held = _snap((GpuProcess(11, 3 * GiB),), ())
    res = wait_for_release([11], 2, clock=clock, sleep=clock.sleep, probe=scripted(held))
    assert res.status == "held" and not res.released
    assert [(h.device_index, h.pid, h.used_bytes) for h in res.holders] == [(0, 11, 3 * GiB)]
    assert res.waited_s == 2.0 and sum(clock.slept) == 2.0
    assert res.as_dict()["holders"] == [{"device_index": 0, "pid": 11, "used_bytes": 3 * GiB}]


def test_unlistable_device_is_unknown_not_released() -> None:
    clock = Clock()
    res = wait_for_release([11], 1, clock=clock, sleep=clock.sleep, probe=scripted(_snap((), None)))
    assert res.status == "unknown" and res.reason is not None and "[1]" in res.reason


def test_transient_unknown_keeps_polling_until_known() -> None:
    clock = Clock()
    res = wait_for_release(
        [11], 10, clock=clock, sleep=clock.sleep,
        probe=scripted(Unknown("NVML did not answer"), _snap(())),
    )  # fmt: skip
    assert res.status == "released" and res.polls == 2


def test_transient_unknown_until_the_deadline_stays_unknown() -> None:
    clock = Clock()
    res = wait_for_release([11], 1, clock=clock, sleep=clock.sleep, probe=scripted(Unknown("busy")))
    assert res.status == "unknown" and res.reason == "busy" and res.waited_s == 1.0


def test_release_with_the_fake_nvml_end_to_end() -> None:
    nvml = two_gpus()
    probe = GpuProbe(nvml)
    clock = Clock()
    res = wait_for_release([4243], 5, clock=clock, sleep=clock.sleep, probe=probe.snapshot)
    assert res.status == "held" and res.holders[0].used_bytes is None
    nvml.devices[0]["procs"] = [(4242, GiB)]
    res = wait_for_release([4243], 5, clock=clock, sleep=clock.sleep, probe=probe.snapshot)
    assert res.released
    probe.close()


def test_nothing_to_wait_for() -> None:
    res = wait_for_release([], 5, probe=lambda: Unknown("never asked"))
    assert res.released and res.polls == 0


class _CapOnlyNvml:
    """A binding with the capability call but no memory/utilisation/process calls."""

    NVMLError = pynvml.NVMLError

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        if h == 1:
            raise pynvml.NVMLError_NotSupported()
        return (9, 0)


def test_capability_is_read_and_missing_binding_calls_are_none() -> None:
    """One NVML reader serves the env facts too: capability comes from the same snapshot."""
    snap = snapshot(_CapOnlyNvml(), sleep=lambda _s: None)
    assert isinstance(snap, GpuSnapshot)
    d0, d1 = snap.devices
    assert d0.capability == (9, 0) and d0.errors == ()
    assert d0.total_bytes is None and d0.processes is None and snap.driver_version is None
    assert d1.capability is None and d1.errors == ("capability: Not Supported",)
