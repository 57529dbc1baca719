"""What the GPUs hold right now, from NVML, without torch: memory, utilisation, compute processes.

Uses NVIDIA's own bindings (``nvidia-ml-py``, imported as ``pynvml``). Three failure modes
shape the API:

* **No NVIDIA driver / no library / no package** (a CPU box, a CI runner, a container without
  the driver mounted): the answer is :class:`Unknown` with the reason, never a snapshot of
  zero devices or zero bytes. "0 bytes used" would tell the run loop that a GPU was released
  when nothing was measured.
* **Transient NVML errors** (``NVMLError_Timeout``, ``NVMLError_Unknown``: a busy driver, an
  ECC scrub): each call is retried a few times with a short jittered backoff (tenacity, narrow
  ``retry=``, ``reraise=True``). Everything else (``GpuIsLost``, ``NoPermission``,
  ``NotSupported``) is not retried: retrying a lost GPU only delays the verdict.
* **A wedged GPU (Xid) can block an NVML call indefinitely.** :meth:`GpuProbe.snapshot` takes
  ``timeout_s``: the query runs on a helper thread and the caller gets ``Unknown`` at the
  deadline, so the run loop, which owns the systemd watchdog ping, never hangs on NVML.

Per-process figures are NVML's: host pids, ``usedGpuMemory`` None where the driver cannot
tell (kept as None, never summed as 0). Inside a container with its own pid namespace NVML
may list host pids that do not match ours, or none at all; :func:`wait_for_release` can then
only report what NVML shows, so the caller still checks its own processes are gone (psutil).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

T = TypeVar("T")

#: NVML errors worth another try: the driver was busy, not broken.
TRANSIENT_ERRORS: tuple[str, ...] = ("NVMLError_Timeout", "NVMLError_Unknown")
RETRY_ATTEMPTS = 3
#: Total time budget for one call's retries (the jittered waits are ~0.1-0.4 s).
RETRY_BUDGET_S = 3.0


@dataclass(frozen=True, slots=True)
class Unknown:
    """No measurement, and why. ``permanent``: asking again soon will not help (no driver)."""

    reason: str
    permanent: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"available": False, "reason": self.reason, "permanent": self.permanent}


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    #: None: NVML could not attribute memory to this process (not zero).
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One device as NVML reports it; a field is None when its query failed (see ``errors``)."""

    index: int
    name: str | None
    uuid: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    utilization_pct: int | None
    #: None: the process list could not be read (not "no processes").
    processes: tuple[GpuProcess, ...] | None
    #: "query: error" for every query that failed, e.g. ("processes: Not Supported",).
    errors: tuple[str, ...] = ()
    #: CUDA compute capability (major, minor); None when NVML could not tell. The env facts
    #: (``host.envfacts``) read it from here: one NVML reader, not one per caller.
    capability: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    devices: tuple[GpuDevice, ...]
    driver_version: str | None
    #: Transient NVML errors that were retried while taking this snapshot.
    retries: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": True,
            "driver_version": self.driver_version,
            "retries": self.retries,
            # Lists, not tuples: the same shape after a JSON round trip.
            "devices": [
                {
                    **asdict(d),
                    "processes": None if d.processes is None else [asdict(p) for p in d.processes],
                    "errors": list(d.errors),
                }
                for d in self.devices
            ],
        }


def _text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class GpuProbe:
    """An NVML session: initialised on the first snapshot, kept until :meth:`close`.

    ``nvmlInit`` can take a second per GPU when persistence mode is off, so a long-lived
    caller (the run loop) keeps one probe; a one-shot caller uses :func:`snapshot`.

    Args:
        nvml: the ``pynvml`` module or an object with the same functions and error classes
            (tests; default: ``import pynvml``).
        sleep: the retry wait, injectable so tests do not sleep.
        warn: called with one line per retried NVML error (must not raise).
    """

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        warn: Callable[[str], None] | None = None,
        attempts: int = RETRY_ATTEMPTS,
    ) -> None:
        self._nvml = nvml
        self._sleep = sleep
        self._warn = warn
        self._attempts = attempts
        self._initialised = False
        self._retries = 0
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    # -- NVML plumbing ---------------------------------------------------------------------

    def _module(self) -> Any:
        if self._nvml is None:
            self._nvml = importlib.import_module("pynvml")
        return self._nvml

    def _error(self, name: str) -> type[BaseException]:
        """An NVML error class by name; a class nothing raises if this binding lacks it."""
        cls = getattr(self._module(), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
        return type(f"_Absent{name}", (Exception,), {})

    def _before_sleep(self, rs: RetryCallState) -> None:
        self._retries += 1
        if self._warn is not None and rs.outcome is not None:
            fn = getattr(rs.fn, "__name__", "nvml")
            self._warn(f"NVML {fn} failed ({rs.outcome.exception()!r}); retry {rs.attempt_number}")

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        transient = tuple(self._error(n) for n in TRANSIENT_ERRORS)
        retrying = Retrying(
            retry=retry_if_exception_type(transient),
            stop=stop_after_attempt(self._attempts) | stop_after_delay(RETRY_BUDGET_S),
            wait=wait_exponential_jitter(multiplier=0.1, max=1.0, jitter=0.1),
            before_sleep=self._before_sleep,
            reraise=True,
            sleep=self._sleep,
        )
        return retrying(fn, *args)

    def _init(self) -> Unknown | None:
        try:
            nvml = self._module()
        except ImportError:
            return Unknown("nvidia-ml-py (pynvml) is not installed", permanent=True)
        if self._initialised:
            return None
        try:
            self._call(nvml.nvmlInit)
        except self._error("NVMLError_LibraryNotFound"):
            return Unknown("no NVML library: no NVIDIA driver on this host", permanent=True)
        except self._error("NVMLError_DriverNotLoaded"):
            return Unknown("NVIDIA driver not loaded", permanent=True)
        except self._error("NVMLError_NoPermission") as exc:
            return Unknown(f"NVML init refused: {_text(exc)}", permanent=True)
        except self._error("NVMLError") as exc:
            return Unknown(f"NVML init failed: {_text(exc)}")
        self._initialised = True
        return None

    def _device(self, index: int) -> GpuDevice:
        nvml = self._module()
        nvml_error = self._error("NVMLError")
        errors: list[str] = []

        def query(what: str, fn_name: str, *args: Any) -> Any:
            # A binding without the call (an old nvidia-ml-py, a test stand-in) answers None,
            # like a query the driver does not support; it is not an NVML error to report.
            fn = getattr(nvml, fn_name, None)
            if fn is None:
                return None
            try:
                return self._call(fn, *args)
            except nvml_error as exc:
                errors.append(f"{what}: {_text(exc)}")
                return None

        handle = query("handle", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return GpuDevice(index, None, None, None, None, None, None, None, tuple(errors))
        name = query("name", "nvmlDeviceGetName", handle)
        uuid = query("uuid", "nvmlDeviceGetUUID", handle)
        mem = query("memory", "nvmlDeviceGetMemoryInfo", handle)
        util = query("utilization", "nvmlDeviceGetUtilizationRates", handle)
        procs = query("processes", "nvmlDeviceGetComputeRunningProcesses", handle)
        # NotSupported on pre-Volta boards is expected; kept in errors like any other query.
        cap = query("capability", "nvmlDeviceGetCudaComputeCapability", handle)
        return GpuDevice(
            index=index,
            name=None if name is None else _text(name),
            uuid=None if uuid is None else _text(uuid),
            total_bytes=None if mem is None else int(mem.total),
            used_bytes=None if mem is None else int(mem.used),
            free_bytes=None if mem is None else int(mem.free),
            utilization_pct=None if util is None else int(util.gpu),
            processes=None
            if procs is None
            else tuple(
                GpuProcess(
                    pid=int(p.pid),
                    used_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                )
                for p in procs
            ),
            errors=tuple(errors),
            capability=None if cap is None else (int(cap[0]), int(cap[1])),
        )

    def _collect(self) -> GpuSnapshot | Unknown:
        self._retries = 0
        failed = self._init()
        if failed is not None:
            return failed
        nvml = self._module()
        try:
            count = int(self._call(nvml.nvmlDeviceGetCount))
        except self._error("NVMLError") as exc:
            return Unknown(f"NVML device count failed: {_text(exc)}")
        driver: str | None = None
        get_driver = getattr(nvml, "nvmlSystemGetDriverVersion", None)
        if get_driver is not None:
            with contextlib.suppress(self._error("NVMLError")):
                driver = _text(self._call(get_driver))
        devices = tuple(self._device(i) for i in range(count))
        return GpuSnapshot(devices=devices, driver_version=driver, retries=self._retries)

    # -- public ----------------------------------------------------------------------------

    def snapshot(self, timeout_s: float | None = None) -> GpuSnapshot | Unknown:
        """Every device's memory, utilisation and compute processes, or :class:`Unknown`.

        Never raises for NVML trouble. With ``timeout_s`` the query runs on a helper thread;
        past the deadline the result is Unknown, and while that query is still stuck every
        further call is Unknown at once (one stuck thread at most, never a pile of them).
        """
        if self.stuck:
            return Unknown("an earlier NVML query is still blocked (a wedged GPU?)")
        if timeout_s is None:
            with self._lock:
                return self._collect()
        box: list[GpuSnapshot | Unknown] = []

        def work() -> None:
            with self._lock:
                box.append(self._collect())

        self._worker = threading.Thread(target=work, name="dsguard-nvml", daemon=True)
        self._worker.start()
        self._worker.join(timeout_s)
        if not box:
            return Unknown(f"NVML did not answer within {timeout_s:g} s (a wedged GPU?)")
        return box[0]

    @property
    def stuck(self) -> bool:
        """An NVML query that timed out is still blocked on its helper thread."""
        return self._worker is not None and self._worker.is_alive()

    def close(self) -> None:
        """End the NVML session (nvmlShutdown); a later snapshot starts a new one.

        Skipped while a query is stuck: nvmlShutdown would block on the same driver lock.
        """
        if not self._initialised or self.stuck:
            return
        self._initialised = False
        with contextlib.suppress(self._error("NVMLError")):
            self._module().nvmlShutdown()


def snapshot(
    nvml: Any | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float | None = None,
) -> GpuSnapshot | Unknown:
    """One-shot :meth:`GpuProbe.snapshot` (init, query, shutdown): for ``dsguard status``."""
    probe = GpuProbe(nvml, sleep=sleep)
    try:
        return probe.snapshot(timeout_s)
    finally:
        probe.close()


# -- waiting for an ended attempt's memory to come back ---------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    device_index: int
    pid: int
    used_bytes: int | None


ReleaseStatus = Literal["released", "held", "unknown"]


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """Whether the given pids still hold GPU memory after waiting.

    ``unknown`` is its own answer, never folded into ``released``: relaunching onto memory an
    old rank still holds produces a CUDA OOM that dsguard would blame on the new config.
    """

    status: ReleaseStatus
    holders: tuple[Holder, ...]
    waited_s: float
    polls: int
    reason: str | None = None

    @property
    def released(self) -> bool:
        return self.status == "released"

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "holders": [asdict(h) for h in self.holders],
            "waited_s": round(self.waited_s, 3),
            "polls": self.polls,
            "reason": self.reason,
        }


def wait_for_release(
    pids: Iterable[int],
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    probe: Callable[[], GpuSnapshot | Unknown] | None = None,
    poll_s: float = 0.5,
    tick: Callable[[], object] | None = None,
) -> ReleaseResult:
    """Poll NVML until none of ``pids`` holds GPU memory, at most ``timeout_s``.

    A process that exits still holds its memory for a moment while the driver tears down its
    context (longer on a busy or faulty GPU). Returns ``released`` as soon as every device's
    process list is readable and none of ``pids`` is in it; ``held`` (with the holders) or
    ``unknown`` (with the reason) at the deadline; ``unknown`` at once when NVML is
    permanently unavailable (no driver). A device whose process list cannot be read makes the
    answer ``unknown`` unless another device already shows a holder.

    Args:
        probe: takes one snapshot (default: a :class:`GpuProbe` kept for this wait, each query
            bounded by ``poll_s`` x 20 so a wedged GPU cannot stall the caller).
        tick: called after every poll, e.g. the run loop's ``Notifier.watchdog_if_due``: a
            minute-long wait must not look like a wedged dsguard to the systemd watchdog.
    """
    wanted = set(pids)
    t0 = clock()
    if not wanted:
        return ReleaseResult("released", (), 0.0, 0, "no processes to wait for")
    own = GpuProbe() if probe is None else None
    bound = max(1.0, poll_s * 20)

    def take() -> GpuSnapshot | Unknown:
        if probe is not None:
            return probe()
        assert own is not None
        return own.snapshot(timeout_s=bound)

    deadline = t0 + timeout_s
    polls = 0
    try:
        while True:
            snap = take()
            polls += 1
            if tick is not None:
                tick()
            if isinstance(snap, Unknown):
                result = ReleaseResult("unknown", (), clock() - t0, polls, snap.reason)
                if snap.permanent:
                    return result
            else:
                holders = tuple(
                    Holder(d.index, p.pid, p.used_bytes)
                    for d in snap.devices
                    for p in d.processes or ()
                    if p.pid in wanted
                )
                blind = [d.index for d in snap.devices if d.processes is None]
                if holders:
                    pids_held = sorted({h.pid for h in holders})
                    result = ReleaseResult(
                        "held", holders, clock() - t0, polls, f"pids {pids_held} hold GPU memory"
                    )
                elif blind:
                    result = ReleaseResult(
                        "unknown", (), clock() - t0, polls,
                        f"cannot list the processes on GPU(s) {blind}",
                    )  # fmt: skip
                else:
                    return ReleaseResult("released", (), clock() - t0, polls)
            remaining = deadline - clock()
            if remaining <= 0:
                return result
            sleep(min(poll_s, remaining))
    finally:
        if own is not None:
            own.close()
