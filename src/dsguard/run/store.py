"""Known-good configs across runs: a small SQLite file of what fitted and what ran out of memory.

Every run dsguard supervises measures whether a config fits; forgetting that at the end of the
run makes the next run of the same job pay for the same failures again. Each attempt's outcome
is recorded under a *regime signature* (see :func:`signature`): the model (a hash of its
``config.json`` and its parameter count), the memory it ran against (GPU name and memory, or
the host limit), world size, dtype, attention implementation, the job's starting knobs and the
versions of torch, DeepSpeed and transformers. A later run with the same signature starts from
the fastest config known to fit (``plan_applied`` with ``source: store``) and never plans a
config known to fail.

Each record also carries the *environment fingerprint* of the training interpreter (a hash of
every installed distribution's ``name==version``, ``run.fit.training_environment``). The
signature's three versions do not see the rest of the environment, and the rest matters: with
``datasets`` installed, transformers' Trainer imports it (and ``pyarrow``, ``pandas``), which
added 1.27 GiB of address space and 108 MiB resident per process on this project's CPU
benchmark, and known-good configs stopped fitting (``bench/RESULTS.md``, P5LIVE). A record
from another environment (or from a store written before the fingerprint existed: ``env``
NULL) is therefore not trusted as known-good, only used as a hint (``core.fit.plan_fit``).

The store is an optimisation, never a reason to fail: a corrupt file, a lock held by another
process past a short timeout, or a read-only directory make :class:`StoreUnavailable`, which
the loop reports once (``store_unavailable``) before planning without it.

Location: ``$DSGUARD_STORE``, else ``$XDG_DATA_HOME/dsguard/known-good.sqlite``, else
``~/.local/share/dsguard/known-good.sqlite`` (the XDG base-directory default,
https://specifications.freedesktop.org/basedir-spec/latest/).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: The environment variable that moves the store (tests point it at a temporary file).
STORE_ENV = "DSGUARD_STORE"
STORE_NAME = "known-good.sqlite"
#: How long to wait for another dsguard's write before planning without the store.
LOCK_TIMEOUT_S = 0.5

Outcome = Literal["fit", "oom"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    signature TEXT NOT NULL,
    knobs TEXT NOT NULL,
    outcome TEXT NOT NULL,
    peak_bytes INTEGER,
    samples_per_s REAL,
    recorded_s REAL NOT NULL,
    env TEXT
);
CREATE INDEX IF NOT EXISTS attempts_signature ON attempts (signature);
"""
#: Stores written before the environment fingerprint lack the column: added on first open
#: (old rows read as NULL: environment unknown).
_MIGRATE_ENV = "ALTER TABLE attempts ADD COLUMN env TEXT"


class StoreUnavailable(Exception):
    """The store cannot be used now (corrupt, locked, unwritable); the reason is the message."""


def store_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(STORE_ENV):
        return Path(env[STORE_ENV]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dsguard" / STORE_NAME


def signature(parts: Mapping[str, Any]) -> str:
    """A stable hash of the regime's parts (canonical JSON, sorted keys)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Known:
    """One recorded attempt of a signature."""

    knobs: dict[str, Any]
    outcome: Outcome
    peak_bytes: int | None
    samples_per_s: float | None
    recorded_s: float
    #: The training environment's fingerprint when recorded (None: unknown, an old store).
    env: str | None = None


class KnownGoodStore:
    """The SQLite file; every call opens, works and closes (no connection outlives a call,
    so a second dsguard is never locked out for longer than one statement)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        try:
            con.executescript(_SCHEMA)
            _migrate(con)
        except sqlite3.Error as exc:
            con.close()
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        return con

    def record(
        self,
        sig: str,
        knobs: Mapping[str, Any],
        outcome: Outcome,
        peak_bytes: int | None = None,
        samples_per_s: float | None = None,
        *,
        env: str | None = None,
    ) -> None:
        con = self._connect()
        try:
            con.execute(
                "INSERT INTO attempts (signature, knobs, outcome, peak_bytes, samples_per_s, "
                "recorded_s, env) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sig, json.dumps(dict(knobs), sort_keys=True), outcome, peak_bytes,
                 samples_per_s, time.time(), env),
            )  # fmt: skip
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        finally:
            con.close()

    def lookup(self, sig: str) -> list[Known]:
        con = self._connect()
        try:
            env = "env" if _has_env(con) else "NULL"
            rows = con.execute(
                f"SELECT knobs, outcome, peak_bytes, samples_per_s, recorded_s, {env} "
                "FROM attempts WHERE signature = ? ORDER BY recorded_s",
                (sig,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        finally:
            con.close()
        out: list[Known] = []
        for knobs, outcome, peak, sps, ts, env in rows:
            try:
                out.append(Known(json.loads(knobs), outcome, peak, sps, ts, env))
            except ValueError:
                continue  # one mangled row is not a reason to lose the rest
        return out


def _has_env(con: sqlite3.Connection) -> bool:
    return "env" in {row[1] for row in con.execute("PRAGMA table_info(attempts)")}


def _migrate(con: sqlite3.Connection) -> None:
    """Add the ``env`` column to a store from before it. Two dsguards opening an old store at
    once may both try: the loser's "duplicate column" is the winner's success. A read-only old
    store stays as it is and reads as environment unknown (``lookup``)."""
    if _has_env(con):
        return
    try:
        con.execute(_MIGRATE_ENV)
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc) and "readonly" not in str(exc):
            raise


def summarize(records: list[Known]) -> dict[str, dict[str, Any]]:
    """Per config (knobs as canonical JSON): its newest outcome, peak and best throughput.

    The newest outcome wins: a config that fitted once and ran out of memory since (another
    process took memory, a driver changed) is not planned again as known-good."""
    by: dict[str, dict[str, Any]] = {}
    for r in records:
        key = json.dumps(r.knobs, sort_keys=True)
        entry = by.setdefault(key, {"knobs": r.knobs, "samples_per_s": None, "peak_bytes": None})
        entry["outcome"] = r.outcome
        entry["env"] = r.env
        if r.peak_bytes is not None:
            entry["peak_bytes"] = r.peak_bytes
        if r.samples_per_s is not None:
            best = entry["samples_per_s"]
            entry["samples_per_s"] = max(best or 0.0, r.samples_per_s)
    return by
