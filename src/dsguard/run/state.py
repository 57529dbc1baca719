"""The run's state: one enum, one transition table, one logged transition function.

``state.json`` in the log dir mirrors the in-memory status after every transition, written
atomically (temp file in the same directory, fsync, rename), so ``dsguard status`` and a
restarted dsguard always read a complete document, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsguard.core.states import TERMINAL, TRANSITIONS, RunState
from dsguard.errors import InvalidTransition
from dsguard.run.events import EventLog, dumps

# The enum and table moved to the pure core (dsguard.core.states); re-exported so callers of
# this module keep working.
__all__ = ["TERMINAL", "TRANSITIONS", "RunState", "StateMachine", "read_state", "write_json_atomic"]


def write_json_atomic(path: Path, data: object) -> None:
    """Replace ``path`` with ``data`` as JSON so readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps(data))
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_state(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


@dataclass
class StateMachine:
    """Holds the current state and the status document; the only writer of state.json."""

    path: Path
    events: EventLog
    status: dict[str, Any] = field(default_factory=dict)
    state: RunState = RunState.STARTING

    def __post_init__(self) -> None:
        self.status["state"] = self.state.value
        write_json_atomic(self.path, self.status)

    def update(self, **fields: Any) -> None:
        """Change status fields without a transition (persisted immediately)."""
        self.status.update(fields)
        write_json_atomic(self.path, self.status)

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
        write_json_atomic(self.path, self.status)
