"""The contract between the supervisor and code running inside the training process.

Pure constants and (de)serialisers, no torch: imported by the supervisor (which reads
heartbeats and writes stop requests) and by ``dsguard.integrations.hf`` (which writes
heartbeats and honours requests). Everything travels through files under the job's log dir,
named by attempt so a late write from a dying attempt can never be mistaken for the next
attempt's, and written atomically (temp file + rename) so readers never see half a document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- environment variables set by the supervisor for every attempt ---------------------------
RUN_ID_ENV = "DSGUARD_RUN_ID"
ATTEMPT_ENV = "DSGUARD_ATTEMPT"
LOG_DIR_ENV = "DSGUARD_LOG_DIR"
#: Directory for per-rank heartbeat files (see :func:`heartbeat_path`).
HEARTBEAT_DIR_ENV = "DSGUARD_HEARTBEAT_DIR"
#: Directory where the supervisor drops requests (see :func:`stop_request_path`).
CONTROL_DIR_ENV = "DSGUARD_CONTROL_DIR"
#: Write a heartbeat every N optimizer steps (also on train begin/end and save).
HEARTBEAT_EVERY_ENV = "DSGUARD_HEARTBEAT_EVERY"
#: Fraction of each visible GPU's memory this job may use (torch per-process cap).
GPU_MEMORY_FRACTION_ENV = "DSGUARD_GPU_MEMORY_FRACTION"
#: A new phase starts from these consolidated weights (a checkpoint dir of the old phase)
#: instead of the initial model; honoured by code that announces ``init_from``.
INIT_FROM_ENV = "DSGUARD_INIT_FROM"

HEARTBEAT_SUBDIR = "heartbeat"
CONTROL_SUBDIR = "control"

# -- capabilities a training process announces in its heartbeat --------------------------------
CAP_HEARTBEAT = "heartbeat"
#: Rank-consistent save-and-stop on request (rank 0 decides, all ranks agree).
CAP_SAVE_AND_STOP = "save_and_stop"
#: Resumes a checkpoint saved under another ZeRO stage exactly (fp32 weights, Adam moments,
#: step transplanted into the new engine), so a ZeRO-stage rung is not a new phase.
CAP_ZERO_TRANSPLANT = "zero_transplant"
#: Honours INIT_FROM_ENV (consolidated full weights, incl. ZeRO-3 shards, before LoRA wrap).
CAP_INIT_FROM = "init_from"
CAP_GPU_MEMORY_FRACTION = "gpu_memory_fraction"


def heartbeat_path(heartbeat_dir: Path, attempt: int, rank: int) -> Path:
    return heartbeat_dir / f"attempt-{attempt}-rank-{rank}.json"


def stop_request_path(control_dir: Path, attempt: int) -> Path:
    """Existence of this file asks attempt ``attempt`` to save a checkpoint and stop."""
    return control_dir / f"stop-attempt-{attempt}.json"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One rank's latest progress report.

    ``event`` is what triggered the write: train_begin, step, save, stop_requested, train_end.
    Memory figures are the torch caching allocator's for CUDA (None on CPU), host RSS always.
    """

    attempt: int
    rank: int
    pid: int
    time_s: float  # wall clock, seconds since the epoch
    event: str
    global_step: int
    max_steps: int | None = None
    loss: float | None = None
    epoch: float | None = None
    max_memory_allocated_bytes: int | None = None
    max_memory_reserved_bytes: int | None = None
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    host_rss_bytes: int | None = None
    last_checkpoint: str | None = None
    capabilities: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "rank": self.rank,
            "pid": self.pid,
            "time_s": self.time_s,
            "event": self.event,
            "global_step": self.global_step,
            "max_steps": self.max_steps,
            "loss": self.loss,
            "epoch": self.epoch,
            "max_memory_allocated_bytes": self.max_memory_allocated_bytes,
            "max_memory_reserved_bytes": self.max_memory_reserved_bytes,
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
            "host_rss_bytes": self.host_rss_bytes,
            "last_checkpoint": self.last_checkpoint,
            "capabilities": list(self.capabilities),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Heartbeat:
        def opt_int(key: str) -> int | None:
            v = d.get(key)
            return None if v is None else int(v)

        def opt_float(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return cls(
            attempt=int(d["attempt"]),
            rank=int(d["rank"]),
            pid=int(d["pid"]),
            time_s=float(d["time_s"]),
            event=str(d["event"]),
            global_step=int(d["global_step"]),
            max_steps=opt_int("max_steps"),
            loss=opt_float("loss"),
            epoch=opt_float("epoch"),
            max_memory_allocated_bytes=opt_int("max_memory_allocated_bytes"),
            max_memory_reserved_bytes=opt_int("max_memory_reserved_bytes"),
            num_alloc_retries=opt_int("num_alloc_retries"),
            num_ooms=opt_int("num_ooms"),
            host_rss_bytes=opt_int("host_rss_bytes"),
            last_checkpoint=d.get("last_checkpoint"),
            capabilities=tuple(str(c) for c in d.get("capabilities") or ()),
        )
