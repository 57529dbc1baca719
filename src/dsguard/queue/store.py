"""The queue's record: one SQLite database under ``DSGUARD_QUEUE_DIR``.

Why SQLite: ``queue add`` and ``queue cancel`` run while the daemon runs, from other
processes, and a daemon SIGKILLed (OOM killer, a power cut) must restart with every job's
state as last committed, never a half-written JSON file. WAL mode lets readers
(``dsguard queue``) read while the daemon writes; every change is one transaction.

The failure mode this is built against is "ran twice, or lost": a job is marked ``running``
with the pid and start time of its ``dsguard run`` in the same transaction that follows the
spawn, and a restarted daemon trusts that pid only if psutil says the same process is alive
(see :mod:`dsguard.queue.daemon`); the job's own lock stops a second ``dsguard run`` anyway.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

#: Overrides where the queue keeps its database, daemon lock and per-job files.
QUEUE_DIR_ENV = "DSGUARD_QUEUE_DIR"
DB_FILENAME = "queue.db"
DAEMON_LOCK_FILENAME = "daemon.lock"
#: The daemon's own event log (queue_job_* events); each job's events are in its log dir.
EVENTS_FILENAME = "events.jsonl"
JOBS_SUBDIR = "jobs"


def queue_dir() -> Path:
    """``$DSGUARD_QUEUE_DIR``, else ``$XDG_DATA_HOME/dsguard/queue``, else
    ``~/.local/share/dsguard/queue`` (data that must survive a reboot, unlike the locks)."""
    override = os.environ.get(QUEUE_DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg.startswith("/") else Path.home() / ".local" / "share"
    return base / "dsguard" / "queue"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    GAVE_UP = "gave_up"
    #: ``dsguard run`` refused the job (bad job file, log dir unusable) or kept dying.
    FAILED = "failed"
    #: Stopped by a signal that did not come from the queue daemon.
    STOPPED = "stopped"
    #: Never started: its ``--after`` predecessor did not succeed.
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.GAVE_UP, JobState.FAILED, JobState.STOPPED,
     JobState.SKIPPED, JobState.CANCELLED}
)  # fmt: skip

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    after TEXT,
    source TEXT NOT NULL,
    job_file TEXT NOT NULL,
    job_yaml TEXT NOT NULL,
    log_dir TEXT NOT NULL,
    checkpoint_dir TEXT,
    gpus_wanted INTEGER NOT NULL DEFAULT 0,
    gpu_ids TEXT,
    gpu_fraction REAL,
    host_mem_bytes INTEGER,
    matrix TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    assigned TEXT,
    pid INTEGER,
    pid_create_time REAL,
    starts INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    added_at REAL NOT NULL,
    picked_at REAL,
    ended_at REAL
);
"""


def log_dirs(root: Path) -> list[Path]:
    """The log dirs of the queue's jobs in queue order, read without creating or writing
    anything (``dsguard report --queue`` on a machine where no queue ever ran must not leave
    an empty database behind); [] when there is no database."""
    db = root / DB_FILENAME
    if not db.is_file():
        return []
    con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30.0)
    try:
        rows = con.execute("SELECT log_dir FROM jobs ORDER BY seq").fetchall()
    finally:
        con.close()
    return [Path(r[0]) for r in rows]


@dataclass(frozen=True, slots=True)
class QueueJob:
    """One row of the queue (see ``_SCHEMA``)."""

    name: str
    seq: int
    priority: int
    after: str | None
    #: The user's job file, and the derived one ``dsguard run`` is given (see ``derive``).
    source: str
    job_file: str
    job_yaml: str
    log_dir: str
    checkpoint_dir: str | None
    #: Whole GPUs asked for (0: a CPU slot); ``gpu_ids``: the ones the job file names.
    gpus_wanted: int
    gpu_ids: tuple[int, ...] | None
    gpu_fraction: float | None
    host_mem_bytes: int | None
    #: ``{"key": ..., "value": ...}`` for a ``--matrix`` job.
    matrix: dict[str, str] | None
    state: JobState
    reason: str | None
    assigned: tuple[int, ...] | None
    pid: int | None
    pid_create_time: float | None
    starts: int
    exit_code: int | None
    added_at: float
    picked_at: float | None
    ended_at: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def _ints(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(int(x) for x in json.loads(text))


def _row(r: sqlite3.Row) -> QueueJob:
    return QueueJob(
        name=r["name"], seq=r["seq"], priority=r["priority"], after=r["after"],
        source=r["source"], job_file=r["job_file"], job_yaml=r["job_yaml"],
        log_dir=r["log_dir"], checkpoint_dir=r["checkpoint_dir"],
        gpus_wanted=r["gpus_wanted"], gpu_ids=_ints(r["gpu_ids"]),
        gpu_fraction=r["gpu_fraction"], host_mem_bytes=r["host_mem_bytes"],
        matrix=None if r["matrix"] is None else json.loads(r["matrix"]),
        state=JobState(r["state"]), reason=r["reason"], assigned=_ints(r["assigned"]),
        pid=r["pid"], pid_create_time=r["pid_create_time"], starts=r["starts"],
        exit_code=r["exit_code"], added_at=r["added_at"], picked_at=r["picked_at"],
        ended_at=r["ended_at"],
    )  # fmt: skip


class QueueError(Exception):
    """A queue request that cannot be done as asked (unknown name, duplicate, ...)."""


class Store:
    """The queue database; every method is one transaction."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (root / JOBS_SUBDIR).mkdir(mode=0o700, exist_ok=True)
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below), so a
        # reader never sees half of a multi-row change and two writers never interleave.
        self._db = sqlite3.connect(root / DB_FILENAME, timeout=30.0, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed "running" row survives a power cut (NORMAL could lose the last
        # commit, and the restarted daemon would start the job a second time).
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def jobs(self) -> list[QueueJob]:
        rows = self._db.execute("SELECT * FROM jobs ORDER BY seq").fetchall()
        return [_row(r) for r in rows]

    def get(self, name: str) -> QueueJob | None:
        r = self._db.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        return None if r is None else _row(r)

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Add jobs (all or none). A name that is queued or running is refused; a finished
        one is replaced (adding it again means: run it again)."""
        with self.tx() as db:
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()[0]
            names = [row["name"] for row in rows]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise QueueError(f"job name(s) {', '.join(twice)} given more than once")
            for row in rows:
                old = db.execute("SELECT state FROM jobs WHERE name = ?", (row["name"],)).fetchone()
                if old is not None and JobState(old["state"]) not in TERMINAL_STATES:
                    raise QueueError(f"{row['name']}: already in the queue ({old['state']})")
                after = row.get("after")
                if (
                    after is not None
                    and after not in {r["name"] for r in rows}
                    and (
                        db.execute("SELECT 1 FROM jobs WHERE name = ?", (after,)).fetchone() is None
                    )
                ):
                    raise QueueError(f"--after {after}: no such job in the queue")
                seq += 1
                values = {**row, "seq": seq, "state": JobState.QUEUED.value,
                          "added_at": time.time()}  # fmt: skip
                for key in ("gpu_ids", "matrix"):
                    if values.get(key) is not None:
                        values[key] = json.dumps(values[key])
                db.execute("DELETE FROM jobs WHERE name = ?", (row["name"],))
                cols = ", ".join(values)
                marks = ", ".join(f":{k}" for k in values)
                db.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", values)

    def update(self, name: str, **fields: Any) -> None:
        if "state" in fields and isinstance(fields["state"], JobState):
            fields["state"] = fields["state"].value
        if "assigned" in fields and fields["assigned"] is not None:
            fields["assigned"] = json.dumps(list(fields["assigned"]))
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        with self.tx() as db:
            db.execute(f"UPDATE jobs SET {sets} WHERE name = :_name", {**fields, "_name": name})

    def cancel(self, name: str) -> QueueJob:
        """Mark ``name`` cancelled; a running one is ended by the daemon (it sees the state)."""
        with self.tx() as db:
            r = db.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
            if r is None:
                raise QueueError(f"{name}: no such job in the queue")
            job = _row(r)
            if job.terminal:
                raise QueueError(f"{name}: already {job.state}")
            # A queued job ends here; a running one when the daemon has ended its dsguard run.
            ended = time.time() if job.state is JobState.QUEUED else None
            db.execute(
                "UPDATE jobs SET state = ?, reason = ?, ended_at = ? WHERE name = ?",
                (JobState.CANCELLED.value, "cancelled by `dsguard queue cancel`", ended, name),
            )
        return job
