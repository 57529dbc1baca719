"""The run's state: one enum, one transition table, one logged transition function.

``state.json`` in the log dir mirrors the in-memory status after every transition, written
atomically (temp file in the same directory, fsync, rename), so ``dsguard status`` and a
restarted dsguard always read a complete document, never a torn one. Its layout is the
:class:`State` record (with ``schema_version``): a restarted dsguard resumes the ladder from
it and ``dsguard status`` reports from it, so a key written under one name and read under
another would silently lose the run's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from dsguard.core.states import TERMINAL, TRANSITIONS, RunState
from dsguard.errors import InvalidTransition
from dsguard.run.events import EventLog, dumps, normalise, redact
from dsguard.run.safefs import make_private_dir, write_atomic

# The enum and table moved to the pure core (dsguard.core.states); re-exported so callers of
# this module keep working.
__all__ = ["TERMINAL", "TRANSITIONS", "RunState", "StateMachine", "read_state", "write_json_atomic"]


def write_json_atomic(path: Path, data: object) -> None:
    """Replace ``path`` with ``data`` as JSON so readers see the old or the new file, never half.

    Through :func:`dsguard.run.safefs.write_atomic`: a symlink at ``path`` is replaced, never
    written through; the file is 0600 and a missing directory is created 0700 (the control dir
    of stop requests), because what dsguard records may hold paths, argv and evidence lines.

    Raises:
        UnsafePathError: the directory is a symlink or another user's.
        OSError: the write failed (disk full); ``path`` keeps its old content.
    """
    make_private_dir(path.parent)
    write_atomic(path, (dumps(data) + "\n").encode())


#: Bumped when a ``state.json`` field changes type or meaning; files without the key predate
#: it (version 0, same layout as 1).
STATE_SCHEMA_VERSION: Final = 1


class StateFileError(ValueError):
    """``state.json`` is not a state document this dsguard can read."""


class CurrentAttempt(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What identifies the running attempt's processes (``dsguard.run.proc.AttemptRef``), so a
    restarted dsguard can end an attempt its killed predecessor left running."""

    run_id: str
    attempt: int
    sid: int
    started_epoch_s: float
    #: The launcher's start time: proves a marker-less process descends from this attempt's
    #: launcher and not from a process that got its pid later. Absent in older files.
    launcher_create_time: float | None = None


class State(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``state.json``: the run's state and what the loop records with each transition.

    Every field but ``state`` may be absent in a file (a run that has not got that far, or an
    older dsguard). ``ledger`` is the loop's ``Ledger.as_dict()``: its layout belongs to the
    loop. Item access (``state["ledger"]``, ``state.get("pid")``) gives the same values as
    plain JSON for callers not yet reading attributes.
    """

    schema_version: int = STATE_SCHEMA_VERSION
    state: RunState
    reason: str | None = None
    run_id: str | None = None
    job: str | None = None
    job_file: str | None = None
    #: dsguard's own pid and psutil start time (rules out a reused pid in ``dsguard status``).
    pid: int | None = None
    pid_create_time: float | None = None
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    #: The job file's knobs: a changed job starts a new ladder instead of resuming this one.
    job_knobs: dict[str, Any] | None = None
    ledger: dict[str, Any] | None = None
    attempt: int | None = None
    knobs: dict[str, Any] | None = None
    global_batch: int | None = None
    phase: int | None = None
    #: The running attempt (None between attempts).
    current_attempt: CurrentAttempt | None = None
    #: The running attempt's launcher pid.
    pid_child: int | None = None
    resume_from: str | None = None
    attempt_log: str | None = None
    delay_s: float | None = None


def state_from_dict(data: dict[str, Any]) -> State:
    """``data`` (as written, Paths and enums allowed) as a :class:`State`.

    Raises:
        msgspec.ValidationError: an unknown key or a mistyped value.
    """
    return msgspec.convert(normalise(data), State, strict=True)


def read_state(path: Path) -> State:
    """The state document at ``path``.

    Raises:
        OSError: unreadable file (FileNotFoundError: no state yet).
        StateFileError: not JSON, not an object, a newer schema, or mistyped (says which key).
    """
    try:
        data = msgspec.json.decode(path.read_bytes())
    except msgspec.DecodeError as exc:
        raise StateFileError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StateFileError(f"{path}: not a JSON object")
    version = data.setdefault("schema_version", 0)
    if isinstance(version, int) and version > STATE_SCHEMA_VERSION:
        raise StateFileError(
            f"{path}: schema_version {version} is newer than this dsguard reads "
            f"({STATE_SCHEMA_VERSION}): upgrade dsguard"
        )
    try:
        return msgspec.convert(data, State, strict=True)
    except msgspec.ValidationError as exc:
        raise StateFileError(f"{path}: not a dsguard state file: {exc}") from exc


@dataclass
class StateMachine:
    """Holds the current state and the status document; the only writer of state.json.

    Every write is checked against :class:`State`. A mismatch (a dsguard bug) raises when the
    event log is strict (tests) and is otherwise written as given, with one ``state_invalid``
    event, because a bookkeeping problem must not stop the training it records.
    """

    path: Path
    events: EventLog
    status: dict[str, Any] = field(default_factory=dict)
    state: RunState = RunState.STARTING
    #: state.json writes that failed (disk full, ...); ``pending``: the file is stale now.
    write_failures: int = 0
    pending: bool = False
    _failing: bool = False

    def __post_init__(self) -> None:
        self.status["state"] = self.state.value
        self._write()

    def _write(self) -> None:
        # Redacted like every event: state.json is what `dsguard status` prints and what gets
        # pasted into bug reports, and the ledger's history holds output lines.
        doc: dict[str, Any] = redact({"schema_version": STATE_SCHEMA_VERSION, **self.status})
        try:
            checked = state_from_dict(doc)
        except msgspec.ValidationError as exc:
            if self.events.strict:
                raise StateFileError(f"state.json document: {exc}") from exc
            self.events.emit("state_invalid", error=str(exc))
            self._store(doc)
            return
        self._store(msgspec.to_builtins(checked))

    def _store(self, doc: object) -> None:
        """Write state.json; a failure (disk full, log dir gone) is counted and said once per
        streak, never raised: a night's training must not die of its bookkeeping, and the
        next transition (or :meth:`flush`) writes the whole document again."""
        try:
            write_json_atomic(self.path, doc)
        except OSError as exc:
            self.write_failures += 1
            self.pending = True
            if not self._failing:
                self._failing = True
                self.events.emit(
                    "state_write_failed", path=self.path, error=str(exc),
                    errno=exc.errno or 0, failures=self.write_failures,
                )  # fmt: skip
            return
        self.pending = False
        self._failing = False

    def flush(self) -> bool:
        """Retry a state.json write that failed; True when the file is current."""
        if self.pending:
            self._write()
        return not self.pending

    def update(self, **fields: Any) -> None:
        """Change status fields without a transition (persisted immediately)."""
        self.status.update(fields)
        self._write()

    def transition(self, to: RunState, reason: str, **fields: Any) -> None:
        """Move to ``to``; logs ``state_changed`` and rewrites state.json.

        Raises:
            InvalidTransition: ``to`` is not reachable from the current state (a dsguard bug).
        """
        if to not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{self.state} -> {to} ({reason})")
        prev = self.state
        self.state = to
        self.events.emit("state_changed", from_state=prev.value, to_state=to.value, reason=reason)
        self.status.update(fields)
        self.status["state"] = to.value
        self.status["reason"] = reason
        self._write()
