"""Read what a report is made of: a log dir's events, its heartbeat history, the job's
memory limit, and the queue's list of log dirs."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from dsguard.core.events import EVENTS
from dsguard.core.summary import RunView, build
from dsguard.protocol import HEARTBEAT_SUBDIR
from dsguard.run.logdir import LogDir

_decode = msgspec.json.Decoder().decode
_HISTORY = re.compile(r"attempt-(\d+)-rank-(\d+)\.jsonl")
#: Where the queue keeps its state unless ``DSGUARD_QUEUE_DIR`` says otherwise.
QUEUE_DIR_ENV = "DSGUARD_QUEUE_DIR"


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every whole JSON object line of ``path``; a torn last line (a writer killed mid-line)
    and any line that is not a JSON object are skipped."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    for raw in data.split(b"\n")[:-1]:  # the part after the last newline is torn or empty
        try:
            obj = _decode(raw)
        except msgspec.DecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def read_history(heartbeat_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """``{attempt: [heartbeat, ...]}`` from every rank's history file; a missing dir is no
    history (a trainer without dsguard's callback writes none)."""
    out: dict[int, list[dict[str, Any]]] = {}
    try:
        names = sorted(os.listdir(heartbeat_dir))
    except OSError:
        return out
    for name in names:
        m = _HISTORY.fullmatch(name)
        if m is not None:
            out.setdefault(int(m.group(1)), []).extend(_lines(heartbeat_dir / name))
    return out


def host_limit_bytes(job_file: str | None) -> int | None:
    """The job file's ``resources.host_memory_limit``, if the file is still there and loads;
    the report draws it as the host-memory limit. Never raises: the file may have been
    edited or moved since the run."""
    if not job_file:
        return None
    try:
        from dsguard.job.file import load_job

        return load_job(Path(job_file)).resources.host_memory_limit_bytes
    except Exception:  # a job file that no longer loads only costs the limit line
        return None


def history_rows(log_dir: Path, width: int = 40) -> list[tuple[str, str]]:
    """The loss and memory sparklines of the newest run in ``log_dir`` (``dsguard status``
    and ``dsguard events``); empty without an event log or heartbeat history."""
    from dsguard.core.summary import spark_rows

    logs = LogDir(log_dir)
    beats = read_history(log_dir / HEARTBEAT_SUBDIR)
    if not beats or not logs.events.is_file():
        return []
    return spark_rows(build(list(_lines(logs.events)), beats), width)


def read_log_dir(log_dir: Path) -> RunView:
    """The newest run in ``log_dir``.

    Raises:
        FileNotFoundError: the log dir has no ``events.jsonl``.
    """
    logs = LogDir(log_dir)
    if not logs.events.is_file():
        raise FileNotFoundError(f"{logs.events}: no event log")
    events = list(_lines(logs.events))
    beats = read_history(log_dir / HEARTBEAT_SUBDIR)
    view = build(events, beats, known_events=EVENTS)
    if view.host_limit_bytes is None:  # no memory_limit_applied (an older log): the job file's
        view.host_limit_bytes = host_limit_bytes(view.job_file)
    return view


def queue_log_dirs(root: Path | None = None) -> list[Path]:
    """The log dirs of the queue's jobs (``dsguard queue``), in queue order, read from the
    queue's own database under :func:`dsguard.queue.store.queue_dir`."""
    from dsguard.queue.store import log_dirs, queue_dir

    return log_dirs(queue_dir() if root is None else root)
