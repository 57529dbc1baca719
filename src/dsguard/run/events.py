"""The event log: ``log_dir/events.jsonl``, one JSON object per line, append-only.

Every line is written with a single ``os.write`` on an ``O_APPEND`` descriptor, so a reader (or
a dsguard killed mid-run) never sees half a line interleaved with another, and nothing
already written is ever rewritten. structlog carries the bound context (``run_id``,
``attempt``) and the timestamp; the sink renders JSON for the file and a short human line for
the console.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

import structlog

#: Bookkeeping events kept in the file but not shown on the console.
CONSOLE_QUIET = frozenset({"state_changed"})
_CONSOLE_WIDTH = 220


def _json_default(obj: object) -> object:
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def dumps(obj: object) -> str:
    return json.dumps(obj, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def format_knobs(k: dict[str, Any]) -> str:
    """The knobs in one short phrase: ``micro 4 x accum 2, max_length 1024, ZeRO-2``."""
    parts = [
        f"micro {k.get('micro_batch_size')} x accum {k.get('gradient_accumulation_steps')}",
    ]
    if k.get("max_length") is not None:
        parts.append(f"max_length {k['max_length']}")
    if k.get("zero_stage") is not None:
        parts.append(f"ZeRO-{k['zero_stage']}")
    if k.get("offload") not in (None, "none"):
        parts.append(f"offload {k['offload']}")
    for flag in ("gradient_checkpointing", "lora"):
        if k.get(flag):
            parts.append(flag)
    return ", ".join(parts)


def _fmt_changes(changes: object) -> str:
    if not isinstance(changes, dict) or not changes:
        return "no knob changed"
    return "changed " + ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in changes.items())


def human_line(ev: dict[str, Any]) -> str:
    """One readable line per event, for the console and ``dsguard events``."""
    name = ev.get("event", "?")
    ts = str(ev.get("ts", ""))[11:19]
    att = ev.get("attempt")
    head = f"[dsguard {ts}]" + (f" #{att}" if att is not None else "")
    if name == "attempt_started":
        knobs = ev.get("knobs", {})
        resume = ev.get("resume_from") or "fresh start"
        body = (
            f"attempt started (pid {ev.get('pid')}): {format_knobs(knobs)}, "
            f"global batch {ev.get('global_batch')}; resume: {resume}"
        )
    elif name == "failure_detected":
        rank = ev.get("rank")
        where = f" on rank {rank}" if rank is not None else ""
        evidence = ev.get("evidence") or []
        first = f": {evidence[0]}" if evidence else ""
        body = f"failure {ev.get('kind')}{where}{first}"
    elif name == "policy_applied":
        changes = ev.get("changes") or {}
        desc = ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in changes.items()) or "same config"
        extra = " [NEW PHASE]" if ev.get("new_phase") else ""
        before, after = ev.get("global_batch_before"), ev.get("global_batch_after")
        kept = (
            f"global batch {after} kept" if before == after else f"global batch {before} -> {after}"
        )
        body = f"policy {ev.get('rung') or 'retry'}: {desc}; {kept}{extra}"
        if ev.get("delay_s"):
            body += f"; waiting {ev['delay_s']:.0f} s"
    elif name == "attempt_finished":
        body = f"attempt finished: exit {ev.get('exit_code')} after {ev.get('duration_s', 0):.1f} s"
    elif name == "run_gave_up":
        body = f"GAVE UP after {ev.get('attempts')} attempt(s): {ev.get('reason')}"
        body += "; " + _fmt_changes(ev.get("changes"))
    elif name == "run_succeeded":
        body = f"SUCCEEDED after {ev.get('attempts')} attempt(s); " + _fmt_changes(
            ev.get("changes")
        )
        before, after = ev.get("initial_global_batch"), ev.get("global_batch")
        if before == after:
            body += f"; global batch {after} kept"
        else:
            body += f"; global batch CHANGED {before} -> {after} (new phase)"
    else:
        skip = {"ts", "event", "run_id", "attempt", "job"}
        body = name + " " + " ".join(f"{k}={v}" for k, v in ev.items() if k not in skip)
    line = f"{head} {body}".rstrip()
    return line if len(line) <= _CONSOLE_WIDTH else line[: _CONSOLE_WIDTH - 3] + "..."


class _Sink:
    """structlog 'logger': receives the final event dict and writes it out."""

    def __init__(self, fd: int, console: TextIO | None) -> None:
        self._fd = fd
        self._console = console
        self.last: dict[str, Any] | None = None

    def msg(self, **event: Any) -> None:
        line = (dumps(event) + "\n").encode()
        # One write per line on an O_APPEND fd: whole lines only, never rewritten.
        os.write(self._fd, line)
        self.last = event
        if self._console is not None and event.get("event") not in CONSOLE_QUIET:
            try:
                self._console.write(human_line(event) + "\n")
                self._console.flush()
            except (OSError, ValueError):
                self._console = None


class EventLog:
    """Append-only JSONL event log with bound context.

    Args:
        path: the events.jsonl file (created if missing; existing lines are kept).
        run_id: stamped on every event.
        console: where human-readable lines go (None: nowhere).
        now: wall clock, injectable for tests.
    """

    def __init__(
        self,
        path: Path,
        *,
        run_id: str,
        console: TextIO | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        **context: Any,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._sink = _Sink(self._fd, console)
        self._now = now

        def stamp(_: Any, __: str, ev: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
            # ts first, then event, for readable lines.
            ordered = {"ts": self._now().isoformat(timespec="milliseconds"), "event": ev["event"]}
            ordered.update((k, v) for k, v in ev.items() if k != "event")
            return ordered

        self._log: Any = structlog.wrap_logger(
            self._sink,
            processors=[stamp],
            wrapper_class=structlog.BoundLogger,
            context_class=dict,
        ).bind(run_id=run_id, attempt=None, **context)

    def bind(self, **context: Any) -> None:
        self._log = self._log.bind(**context)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Write one event; returns it as written (tests and state use it)."""
        self._log.msg(event, **fields)
        assert self._sink.last is not None
        return self._sink.last

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every parseable event line of ``path`` (a torn last line, if any, is skipped)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def default_console() -> TextIO:
    return sys.stderr
