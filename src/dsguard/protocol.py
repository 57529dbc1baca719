"""The contract between the supervisor and code running inside the training process.

Pure constants and (de)serialisers, the standard library and msgspec only (no torch):
imported by the supervisor (which reads heartbeats and writes stop requests) and by
``dsguard.integrations.hf`` (which writes heartbeats and honours requests). Everything
travels through files under the job's log dir, named by attempt so a late write from a dying
attempt can never be mistaken for the next attempt's, and written atomically (temp file +
rename) so readers never see half a document.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

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


def heartbeat_history_path(heartbeat_dir: Path, attempt: int, rank: int) -> Path:
    """Every heartbeat of one rank, appended one JSON line each (``dsguard report`` draws the
    loss and memory curves from it; :func:`heartbeat_path` holds only the latest). Appended
    with one ``write`` per line, so a reader sees whole lines; a torn last line left by a
    killed rank is skipped by readers."""
    return heartbeat_dir / f"attempt-{attempt}-rank-{rank}.jsonl"


def stop_request_path(control_dir: Path, attempt: int) -> Path:
    """Existence of this file asks attempt ``attempt`` to save a checkpoint and stop."""
    return control_dir / f"stop-attempt-{attempt}.json"


#: Bumped when a heartbeat field changes type or meaning. A heartbeat without the key comes
#: from a trainer with an older dsguard: same layout as version 1.
HEARTBEAT_SCHEMA_VERSION: Final = 1


class Heartbeat(msgspec.Struct, frozen=True):
    """One rank's latest progress report.

    ``event`` is what triggered the write: train_begin, step, save, stop_requested, train_end,
    diverged (the first NaN/inf loss or grad norm, see ``nonfinite``).
    Memory figures are the torch caching allocator's for CUDA (None on CPU), host RSS always.

    Unknown keys are ignored, not refused: the training environment may have a newer dsguard
    than the supervisor, and refusing its heartbeats would hide the run's progress and its
    capabilities (save-and-stop) from the supervisor.
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
    capabilities: tuple[str, ...] = ()
    schema_version: int = HEARTBEAT_SCHEMA_VERSION
    #: The metric that turned NaN/inf ("loss", "grad_norm") and the first optimizer step it
    #: was seen at; JSON has no NaN, so ``loss`` alone cannot say it (msgspec writes null).
    nonfinite: str | None = None
    nonfinite_step: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON document (what :func:`encode_heartbeat` writes), as builtins."""
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return out


def encode_heartbeat(beat: Heartbeat) -> bytes:
    """The heartbeat file's content."""
    return msgspec.json.encode(beat)


#: What a history line keeps of a heartbeat (the rest is in the latest-only file): about
#: 200 bytes a line instead of 450, so a long run's history stays small.
HISTORY_FIELDS: Final = ("attempt", "rank", "pid", "time_s", "event", "global_step", "loss",
                         "max_memory_reserved_bytes", "host_rss_bytes")  # fmt: skip
#: Ranks other than 0 append every Nth step heartbeat only (and every non-step one): their
#: memory matters for the peaks, which ``max_memory_reserved_bytes`` keeps anyway, and the
#: loss is rank 0's.
HISTORY_OTHER_RANKS_EVERY: Final = 10


def encode_history_line(beat: Heartbeat) -> bytes:
    """One line of :func:`heartbeat_history_path` (newline included)."""
    doc = {k: getattr(beat, k) for k in HISTORY_FIELDS if getattr(beat, k) is not None}
    return msgspec.json.encode(doc) + b"\n"


def decode_heartbeat(data: bytes | str) -> Heartbeat:
    """A heartbeat file's content as a :class:`Heartbeat`.

    Raises:
        msgspec.DecodeError: not JSON, or a missing or mistyped field (a ValueError).
    """
    return msgspec.json.decode(data, type=Heartbeat)


# -- issue 12: skipping batches after a divergence rollback -------------------------------------
#: Optimizer steps whose data batches the training code must skip (not train on), as
#: ``"start:end[,start:end]"`` (1-based, inclusive): set on the attempts after a divergence
#: rollback. Honoured by code that announces :data:`CAP_SKIP_BATCHES` (the reference trainer);
#: other code trains on them again.
SKIP_BATCHES_ENV = "DSGUARD_SKIP_BATCHES"
CAP_SKIP_BATCHES = "skip_batches"


def format_skip_batches(ranges: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{a}:{b}" for a, b in ranges)


def parse_skip_batches(value: str) -> tuple[tuple[int, int], ...]:
    """``"10:19,40:45"`` -> ((10, 19), (40, 45)); a malformed part is ignored (never fatal)."""
    out: list[tuple[int, int]] = []
    for part in value.split(","):
        a, sep, b = part.strip().partition(":")
        if sep and a.strip().isdigit() and b.strip().isdigit() and int(a) <= int(b):
            out.append((int(a), int(b)))
    return tuple(out)


def skipped(step: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(a <= step <= b for a, b in ranges)
