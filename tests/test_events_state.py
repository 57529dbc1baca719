"""Event log and state file: whole lines, append-only, atomic state, logged transitions."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dsguard.errors import InvalidTransition
from dsguard.run.events import EventLog, human_line, read_events
from dsguard.run.state import RunState, StateMachine, read_state, write_json_atomic


def fixed_now() -> datetime:
    return datetime(2026, 11, 22, 2, 0, 0, 123000, tzinfo=UTC)


def test_event_has_required_keys_and_units(tmp_path: Path) -> None:
    """ts, event, run_id, attempt on every line; bound attempt carried to later events."""
    log = EventLog(tmp_path / "events.jsonl", run_id="R", now=fixed_now, job="j")
    log.emit("build_lock_removed", path="/x/lock")
    log.bind(attempt=2)
    log.emit("attempt_ended", by="fatal", terminated_pids=[], killed_pids=[], survivor_pids=[],
             duration_s=1.5)  # fmt: skip
    log.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    assert events[0] == {
        "ts": "2026-11-22T02:00:00.123+00:00", "event": "build_lock_removed", "run_id": "R",
        "attempt": None, "job": "j", "path": "/x/lock",
    }  # fmt: skip
    assert events[1]["attempt"] == 2 and events[1]["duration_s"] == 1.5


def test_log_appends_and_never_rewrites(tmp_path: Path) -> None:
    """A second EventLog on the same file (a restarted dsguard) appends after the old lines."""
    path = tmp_path / "events.jsonl"
    a = EventLog(path, run_id="A")
    a.emit("build_lock_removed", path="/x/lock")
    a.close()
    before = path.read_bytes()
    b = EventLog(path, run_id="B")
    b.emit("build_lock_removed", path="/x/lock")
    b.close()
    after = path.read_bytes()
    assert after.startswith(before)
    assert [e["run_id"] for e in read_events(path)] == ["A", "B"]


def test_concurrent_emitters_write_whole_lines(tmp_path: Path) -> None:
    """8 threads x 200 large events: every line parses (single write per line, O_APPEND)."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path, run_id="R")
    blob = "x" * 3000

    def work(i: int) -> None:
        for j in range(200):
            log.emit("state_changed", from_state=str(i), to_state=str(j), reason=blob)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 1600
    assert all(json.loads(line)["reason"] == blob for line in lines)


def test_read_events_skips_a_torn_last_line(tmp_path: Path) -> None:
    """A reader racing a writer (or a crash mid-line elsewhere) never yields a broken event."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"event":"a"}\n{"event":"b"')
    assert [e["event"] for e in read_events(path)] == ["a"]


def test_atomic_write_leaves_old_file_on_failure(tmp_path: Path) -> None:
    """An unserialisable-free crash mid-write leaves the previous complete document."""
    path = tmp_path / "state.json"
    write_json_atomic(path, {"state": "running"})

    class Boom:
        def __str__(self) -> str:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"state": Boom()})
    assert read_state(path).state == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left


def test_transitions_are_logged_and_persisted(tmp_path: Path) -> None:
    """Each transition: one state_changed event and a parseable state.json with the new state."""
    log = EventLog(tmp_path / "events.jsonl", run_id="R")
    sm = StateMachine(tmp_path / "state.json", log, status={"job": "j"})
    sm.transition(RunState.RUNNING, "attempt 1 started", attempt=1)
    sm.transition(RunState.BACKOFF, "cuda_oom")
    assert read_state(tmp_path / "state.json").state == "backoff"
    assert read_state(tmp_path / "state.json").attempt == 1
    changes = [e for e in read_events(tmp_path / "events.jsonl") if e["event"] == "state_changed"]
    assert [(e["from_state"], e["to_state"]) for e in changes] == [
        ("starting", "running"), ("running", "backoff")
    ]  # fmt: skip


def test_invalid_transition_raises(tmp_path: Path) -> None:
    """Leaving a terminal state is a dsguard bug, not a child failure."""
    log = EventLog(tmp_path / "events.jsonl", run_id="R")
    sm = StateMachine(tmp_path / "state.json", log)
    sm.transition(RunState.GAVE_UP, "x")
    with pytest.raises(InvalidTransition):
        sm.transition(RunState.RUNNING, "y")


def test_human_line_policy_applied() -> None:
    """The console line says what changed and that the global batch was kept."""
    line = human_line({
        "ts": "2026-11-22T02:00:00.000+00:00", "event": "policy_applied", "attempt": 1,
        "rung": "micro_batch", "changes": {"micro_batch_size": [8, 4]},
        "global_batch_before": 8, "global_batch_after": 8, "new_phase": False,
    })  # fmt: skip
    assert "micro_batch_size 8 -> 4" in line and "global batch 8 kept" in line
