"""The typed contracts: event records, their check in ``EventLog.emit``, redaction, the
README's generated table, ``state.json`` and heartbeats with a schema version."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

import msgspec
import pytest

from dsguard.core.events import (
    EVENTS,
    EVENTS_SCHEMA_VERSION,
    RunGaveUp,
    RunStopped,
    RunSucceeded,
    markdown_table,
)
from dsguard.protocol import (
    HEARTBEAT_SCHEMA_VERSION,
    Heartbeat,
    decode_heartbeat,
    encode_heartbeat,
    heartbeat_path,
)
from dsguard.run.events import REDACTED, EventLog, EventSchemaError, read_events, strict_default
from dsguard.run.heartbeat import read_heartbeats
from dsguard.run.state import (
    STATE_SCHEMA_VERSION,
    RunState,
    StateFileError,
    StateMachine,
    read_state,
    write_json_atomic,
)

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "dsguard"


#: Events whose call sites in today's run loop still lack required fields: the loop rewrite
#: (issue 11) adds the terminal events' common fields. Empty this once it has landed.
def _log(tmp: Path, *, strict: bool = True) -> EventLog:
    return EventLog(tmp / "events.jsonl", run_id="R", job="j", strict=strict)


def _events(tmp: Path) -> list[dict[str, object]]:
    return list(read_events(tmp / "events.jsonl"))


# -- the records -----------------------------------------------------------------------------


def test_terminal_events_have_identical_fields() -> None:
    """Readers handle the three run endings alike; run_stopped adds only the signal."""
    names = {cls: [f.name for f in msgspec.structs.fields(cls)] for cls in EVENTS.values()}
    expected = ["reason", "kind", "attempts", "knobs", "changes", "global_batch",
                "initial_global_batch", "phase", "duration_s", "tokens_per_step",
                "initial_tokens_per_step"]  # fmt: skip
    assert names[RunSucceeded] == expected and names[RunGaveUp] == expected
    assert names[RunStopped] == [*expected, "signal"]
    assert all(f.required for f in msgspec.structs.fields(RunStopped))


def test_every_event_is_documented_snake_case_past_tense() -> None:
    for name, cls in EVENTS.items():
        assert name == name.lower() and " " not in name, name
        assert cls.__doc__ and len(cls.__doc__.split()) >= 8, f"{name}: say when and why"
    assert EVENTS_SCHEMA_VERSION >= 1


def _emit_calls() -> list[tuple[str, int, str, set[str], bool]]:
    """(file, line, event, keyword names, has **splat) of every literal emit call in src/."""
    calls = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                continue
            kws = {k.arg for k in node.keywords if k.arg is not None}
            splat = any(k.arg is None for k in node.keywords)
            calls.append((path.name, node.lineno, node.args[0].value, kws, splat))
    return calls


def test_every_emit_call_site_matches_its_record() -> None:
    """Statically, every ``emit("name", ...)`` in src/: a known event, only its fields, and
    (unless it splats a dict) every required one."""
    calls = _emit_calls()
    assert len(calls) >= 30, "the call-site scan found too few emits: is it still working?"
    unknown: list[str] = []
    missing: dict[str, list[str]] = {}
    for file, line, name, kws, splat in calls:
        cls = EVENTS.get(name)
        if cls is None:
            unknown.append(f"{file}:{line}: unknown event {name!r}")
            continue
        fields = {f.name: f for f in msgspec.structs.fields(cls)}
        unknown += [f"{file}:{line}: {name} has no field {k!r}" for k in sorted(kws - set(fields))]
        lacking = {k for k, f in fields.items() if f.required} - kws
        if lacking and not splat:
            missing.setdefault(name, []).append(f"{file}:{line}: lacks {sorted(lacking)}")
    assert unknown == []
    assert not missing, missing


# -- the check in emit -----------------------------------------------------------------------


class Color(StrEnum):
    RED = "red"


def test_emit_accepts_paths_enums_tuples_and_sets(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.emit(
        "checkpoint_quarantined", path=tmp_path / "checkpoint-3", moved_to=tmp_path / "q",
        step=3, reasons=("torn",),
    )  # fmt: skip
    log.emit("fatal_output_detected", kind=Color.RED, rank=None, line_no=4, line="x")
    log.emit("attempt_ended", by="exit", terminated_pids=frozenset({7}), killed_pids=(),
             survivor_pids=[], duration_s=2)  # fmt: skip
    log.close()
    ev = _events(tmp_path)
    assert ev[0]["path"] == str(tmp_path / "checkpoint-3") and ev[0]["reasons"] == ["torn"]
    assert ev[1]["kind"] == "red" and ev[2]["terminated_pids"] == [7]
    assert ev[2]["duration_s"] == 2  # written as given, not re-encoded


@pytest.mark.parametrize(
    ("name", "fields", "says"),
    [
        ("run_exploded", {}, "unknown event"),
        ("build_lock_removed", {"path": "/x", "size": 1}, "unknown field"),
        ("hang_detected", {"silent_s": 1.0}, "missing required field `hang_timeout_s`"),
        ("hang_detected", {"silent_s": "1", "hang_timeout_s": 2.0}, "Expected `float`"),
    ],
)
def test_strict_emit_fails_loudly_and_writes_nothing(
    tmp_path: Path, name: str, fields: dict[str, object], says: str
) -> None:
    log = _log(tmp_path)
    with pytest.raises(EventSchemaError, match=says):
        log.emit(name, **fields)
    log.close()
    assert _events(tmp_path) == []


def test_lenient_emit_writes_the_event_and_one_note(tmp_path: Path) -> None:
    """Production: a bad event never stops the run; it is kept, and the problem is named."""
    log = _log(tmp_path, strict=False)
    log.emit("run_gave_up", reason="no more rungs", attempts=3)
    log.close()
    ev = _events(tmp_path)
    assert [e["event"] for e in ev] == ["run_gave_up", "event_invalid"]
    assert ev[0]["reason"] == "no more rungs" and ev[0]["attempts"] == 3
    assert ev[1]["invalid_event"] == "run_gave_up" and "kind" in str(ev[1]["error"])


def test_strict_is_on_under_tests_and_overridable() -> None:
    assert strict_default() is True  # pytest sets PYTEST_CURRENT_TEST
    assert strict_default({}) is False
    assert strict_default({"PYTEST_CURRENT_TEST": "x", "DSGUARD_STRICT_EVENTS": "0"}) is False
    assert strict_default({"DSGUARD_STRICT_EVENTS": "1"}) is True


def test_emit_a_record(tmp_path: Path) -> None:
    log = _log(tmp_path)
    rec = RunStopped(reason="stopped by signal 15", kind=None, attempts=2, knobs={"zero_stage": 2},
                     changes={}, global_batch=8, initial_global_batch=8, phase=1,
                     duration_s=1.5, tokens_per_step=None, initial_tokens_per_step=None,
                     signal=int(signal.SIGTERM))  # fmt: skip
    written = log.emit(rec)
    log.close()
    assert written["event"] == "run_stopped" and written["signal"] == 15
    assert _events(tmp_path) == [written]
    with pytest.raises(TypeError):
        log.emit(rec, extra=1)


# -- redaction -------------------------------------------------------------------------------


def test_secrets_are_redacted_in_file_and_console(tmp_path: Path) -> None:
    class Console:
        text = ""

        def write(self, s: str) -> None:
            Console.text += s

        def flush(self) -> None:
            pass

    token = "hf_" + "A1b2C3d4E5" * 3
    log = EventLog(tmp_path / "events.jsonl", run_id="R", console=Console(), strict=True)  # type: ignore[arg-type]
    log.emit("attempt_not_started", error=f"bad token {token}", argv=[
        "python", "train.py", "--hub_token", "s3cret-1", "--token=s3cret-2",
        "--tokenizer_name", "gpt2", "--use_auth_token", "--lr", "1e-4",
    ])  # fmt: skip
    log.emit(
        "remedy_applied", remedy="r", kind="k", reason="x", config={}, flags={}, caveats=[],
        new_phase=False, applied=[],
        env={"HF_TOKEN": ["old", "new"], "WANDB_API_KEY": [None, "wandb-k"],
             "AWS_SECRET": ["s", None], "DB_PASSWORD": ["p", "q"],
             "CUDA_HOME": [None, "/usr/local/cuda"]},
    )  # fmt: skip
    log.close()
    raw = (tmp_path / "events.jsonl").read_text()
    for secret in ("s3cret-1", "s3cret-2", token, '"old"', "wandb-k", '"p"'):
        assert secret not in raw and secret not in Console.text, secret
    first, second = _events(tmp_path)
    assert first["argv"] == [
        "python", "train.py", "--hub_token", REDACTED, f"--token={REDACTED}",
        "--tokenizer_name", "gpt2", "--use_auth_token", "--lr", "1e-4",
    ]  # fmt: skip
    assert first["error"] == f"bad token {REDACTED}"
    assert second["env"] == {
        "HF_TOKEN": REDACTED, "WANDB_API_KEY": REDACTED, "AWS_SECRET": REDACTED,
        "DB_PASSWORD": REDACTED, "CUDA_HOME": [None, "/usr/local/cuda"],
    }  # fmt: skip


# -- structlog stays off the fast commands ---------------------------------------------------


def test_status_and_help_do_not_import_structlog(tmp_path: Path) -> None:
    """``dsguard status`` and ``--help`` are typed by hand and polled by scripts: they must
    not pay for the event pipeline (structlog) they never use."""
    write_json_atomic(tmp_path / "state.json", {"state": "succeeded"})
    code = (
        "import sys, contextlib, io\n"
        "from dsguard.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['status', {str(tmp_path)!r}, '--json'])\n"
        "    for argv in (['--help'], ['status', '--help']):\n"
        "        with contextlib.suppress(SystemExit):\n"
        "            main(argv)\n"
        "print('RC', rc, 'STRUCTLOG', 'structlog' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "RC 3 STRUCTLOG False" in out, out


# -- the README ------------------------------------------------------------------------------


def test_readme_event_table_matches_the_definitions() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- events-table:start")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- events-table:end -->")
    assert readme[start:end] == markdown_table(), (
        "README.md's event table is out of date: regenerate it with "
        "`python -m dsguard.core.events --markdown` and paste it between the "
        "events-table markers"
    )


def test_markdown_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dsguard.core.events", "--markdown"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out == markdown_table() and out.count("\n") == len(EVENTS) + 2


# -- state.json ------------------------------------------------------------------------------


def test_state_written_with_version_and_read_as_record(tmp_path: Path) -> None:
    log = _log(tmp_path)
    sm = StateMachine(tmp_path / "state.json", log, status={"job": "j", "log_dir": tmp_path})
    sm.transition(RunState.RUNNING, "attempt 1 started", attempt=1, pid_child=42,
                  current_attempt={"run_id": "R", "attempt": 1, "sid": 42,
                                   "started_epoch_s": 1.5})  # fmt: skip
    raw = json.loads((tmp_path / "state.json").read_text())
    assert raw["schema_version"] == STATE_SCHEMA_VERSION and raw["state"] == "running"
    st = read_state(tmp_path / "state.json")
    assert st.state is RunState.RUNNING and st.log_dir == str(tmp_path) and st.pid_child == 42
    assert st.current_attempt is not None and st.current_attempt.sid == 42
    assert msgspec.to_builtins(st.current_attempt) == raw["current_attempt"]
    assert st.ledger is None


def test_state_without_version_is_read_as_version_0(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "state.json", {"state": "gave_up", "attempt": 3})
    st = read_state(tmp_path / "state.json")
    assert st.schema_version == 0 and st.state is RunState.GAVE_UP and st.attempt == 3


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"state": "running", "attempt": "3"}, "attempt"),
        ({"state": "sleeping"}, "state"),
        ({"state": "running", "surprise": 1}, "surprise"),
        ({"schema_version": STATE_SCHEMA_VERSION + 1, "state": "running"}, "newer"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_mistyped_state_file_is_a_clear_error(tmp_path: Path, doc: object, says: str) -> None:
    write_json_atomic(tmp_path / "state.json", doc)
    with pytest.raises(StateFileError, match=says):
        read_state(tmp_path / "state.json")


def test_state_machine_strict_refuses_and_lenient_notes(tmp_path: Path) -> None:
    strict = StateMachine(tmp_path / "a.json", _log(tmp_path))
    with pytest.raises(StateFileError, match="pid"):
        strict.update(pid="not a pid")
    lenient_log = EventLog(tmp_path / "b.jsonl", run_id="R", strict=False)
    lenient = StateMachine(tmp_path / "b.json", lenient_log)
    lenient.update(pid="not a pid")
    lenient_log.close()
    assert json.loads((tmp_path / "b.json").read_text())["pid"] == "not a pid"
    notes = [e for e in read_events(tmp_path / "b.jsonl") if e["event"] == "state_invalid"]
    assert len(notes) == 1 and "pid" in str(notes[0]["error"])


# -- heartbeats ------------------------------------------------------------------------------


def test_heartbeat_round_trip_with_version(tmp_path: Path) -> None:
    hb = Heartbeat(attempt=2, rank=1, pid=9, time_s=5.0, event="step", global_step=7,
                   capabilities=("heartbeat", "save_and_stop"))  # fmt: skip
    doc = json.loads(encode_heartbeat(hb))
    assert doc["schema_version"] == HEARTBEAT_SCHEMA_VERSION and doc["capabilities"] == [
        "heartbeat", "save_and_stop",
    ]  # fmt: skip
    assert decode_heartbeat(encode_heartbeat(hb)) == hb
    assert hb.as_dict() == doc


def test_heartbeats_from_older_and_newer_trainers_are_read(tmp_path: Path) -> None:
    """The training env may run another dsguard version than the supervisor."""
    base = {"attempt": 1, "pid": 9, "time_s": 5, "event": "step", "global_step": 3}
    write_json_atomic(heartbeat_path(tmp_path, 1, 0), {**base, "rank": 0})  # no version
    write_json_atomic(heartbeat_path(tmp_path, 1, 1), {**base, "rank": 1, "schema_version": 2,
                                                       "new_field": [1]})  # fmt: skip
    write_json_atomic(heartbeat_path(tmp_path, 1, 2), {**base, "rank": "two"})  # mistyped
    beats = read_heartbeats(tmp_path, 1)
    assert [(b.rank, b.schema_version) for b in beats] == [(0, HEARTBEAT_SCHEMA_VERSION), (1, 2)]
    assert beats[0].time_s == 5.0
