"""The event log: ``log_dir/events.jsonl``, one JSON object per line, append-only.

Every line is written with a single ``os.write`` on an ``O_APPEND`` descriptor, so a reader (or
a dsguard killed mid-run) never sees half a line interleaved with another, and nothing
already written is ever rewritten. The file is opened without following a symlink and is
0600 (:mod:`dsguard.run.safefs`); a torn last line left by a crash is closed off before the
first new event; a full disk never raises: lines wait in memory (bounded) and are written
in order once space is back.

structlog is the pipeline: the context (``run_id``, ``job``, then ``attempt``) is bound per run
and per attempt, and one processor chain (redact secrets, stamp, render) produces both the
JSON line for the file and the short human line for the console, so what the console shows
can never hold a value the file had redacted, or the other way round.

Every event is checked against its record in :mod:`dsguard.core.events` before it is written.
``strict`` decides what a mismatch does: under tests (``PYTEST_CURRENT_TEST`` is set, also in
the dsguard processes a test starts) it raises, so a drifting call site fails its test; in
production it never does (a log problem must not take a night's training down): the event is
written as given, followed by one ``event_invalid`` note naming the problem.
``DSGUARD_STRICT_EVENTS=1`` / ``=0`` overrides the detection either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

import msgspec

from dsguard.core.events import Event, UnknownEvent, event_name, validate
from dsguard.run.safefs import make_private_dir, open_file, write_all

#: Bookkeeping events kept in the file but not shown on the console.
CONSOLE_QUIET = frozenset({"state_changed"})
_CONSOLE_WIDTH = 220
#: Overrides the test/production detection of ``strict`` ("1": raise, "0": note and go on).
STRICT_ENV = "DSGUARD_STRICT_EVENTS"
REDACTED = "<redacted>"


class EventSchemaError(ValueError):
    """An event that does not match its definition in :mod:`dsguard.core.events` (strict)."""


def strict_default(environ: Mapping[str, str] = os.environ) -> bool:
    """Strict under pytest (and in processes it starts), lenient otherwise; see the module."""
    forced = environ.get(STRICT_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    return "PYTEST_CURRENT_TEST" in environ


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


def normalise(obj: Any) -> Any:
    """``obj`` with the values call sites pass (Path, Enum, tuple, set) as the JSON they
    are written as, so the record check sees what a reader of the file will see."""
    if isinstance(obj, Enum):
        return normalise(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {(k.value if isinstance(k, Enum) else k): normalise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [normalise(v) for v in obj]
    return obj


# -- redaction ---------------------------------------------------------------------------------

#: Names whose value is a credential: env keys ``*_TOKEN``, ``*_KEY``, ``*SECRET*``,
#: ``*PASSWORD*`` and flags like ``--hub_token`` (not ``--tokenizer_name``).
_SECRET_NAME = re.compile(r"(?:^|_)token$|_key$|secret|password|passwd", re.IGNORECASE)
#: Hugging Face access tokens anywhere in a string (a pasted command line, an error message).
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
#: Each name pattern here (_FLAG_EQ, _ENV_EQ, _FLAG_SP, _KW_QUOTED) tries a name once per
#: word (a lookbehind keeps it from starting again inside one) and never gives back what it
#: read of it (possessive ``*+``): a long word of output (a 64 KiB line of "x", a progress
#: bar's fill) once cost time quadratic in its length here, 100 s of the pump's thread for one
#: such line, while the child blocked on a full pipe.
_FLAG_EQ = re.compile(r"(?<![A-Za-z0-9_-])(--?([A-Za-z0-9][A-Za-z0-9_.-]*+)=)(\S+)")


def is_secret_name(name: str) -> bool:
    return _SECRET_NAME.search(name.lstrip("-").replace("-", "_")) is not None


#: ``HF_TOKEN=...``, ``WANDB_API_KEY=...`` as a shell or a wrapper echoes an environment.
_ENV_EQ = re.compile(r"\b([A-Z][A-Z0-9_]*+=)(\S+)")
#: ``--api_key VALUE`` as a wrapper echoes its argv joined by spaces (the ``=`` form is
#: :data:`_FLAG_EQ`): the value is the next word unless that word is another flag.
_FLAG_SP = re.compile(r"(?<![A-Za-z0-9_-])(--?([A-Za-z0-9][A-Za-z0-9_.-]*+)[ \t]+)([^\s-]\S*)")
#: ``Namespace(api_key='...')`` (argparse), ``{'hub_token': '...'}`` (a dict or JSON dump),
#: ``token: "..."``: a quoted value after a secret name, as scripts print their config.
_KW_QUOTED = re.compile(
    r"""(['"]?)(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*+)\1(\s*[=:]\s*)(['"])([^'"\n]*)\4"""
)
#: Cheap test before the substitutions: every redaction above needs one of these words.
_MAYBE_SECRET = re.compile(r"token|key|secret|passw|hf_", re.IGNORECASE)


def _redact_kw(m: re.Match[str]) -> str:
    if not is_secret_name(m.group(2)) or not m.group(5):
        return m[0]
    return f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"


def _redact_text(text: str) -> str:
    if _MAYBE_SECRET.search(text) is None:
        return text
    text = _FLAG_EQ.sub(
        lambda m: m.group(1) + REDACTED if is_secret_name(m.group(2)) else m[0], text
    )
    text = _FLAG_SP.sub(
        lambda m: m.group(1) + REDACTED if is_secret_name(m.group(2)) else m[0], text
    )
    text = _ENV_EQ.sub(
        lambda m: m.group(1) + REDACTED if is_secret_name(m.group(1)[:-1]) else m[0], text
    )
    text = _KW_QUOTED.sub(_redact_kw, text)
    return _HF_TOKEN.sub(REDACTED, text)


#: Output bytes without any of these (lower-cased) cannot hold what the rules redact.
_SECRET_WORDS = (b"hf_", b"secret", b"passw")
#: ... nor without one of these followed by ``=``, a space or a quote (a flag and its value, a
#: quoted name or value). The bare words are in every tokenizer line, so they are not enough.
_NAME_WORDS = (b"token", b"key")
_NAME_ENDS = (b"=", b" ", b"'", b'"')


def _may_hold_secret(low: bytes) -> bool:
    """Five ``bytes.find`` scans: about 20 % of the pump's time (bench P3), against several
    times that for one alternation regex over the same bytes."""
    if any(word in low for word in _SECRET_WORDS):
        return True
    for word in _NAME_WORDS:
        i = low.find(word)
        while i >= 0:
            j = i + len(word)
            if low[j : j + 1] in _NAME_ENDS:
                return True
            i = low.find(word, j)
    return False


def redact_output(data: bytes) -> bytes:
    """Child output with credentials replaced, for the attempt log and the console echo.

    A training script that prints its arguments or environment (``--hub_token=hf_...``,
    ``HF_TOKEN=...``, a wrapper's ``env`` dump) would otherwise put the token in
    ``attempt-N.log``, which is attached to bug reports like the event log. Latin-1 maps
    every byte to one character and back, so any encoding (or none) survives unchanged
    outside the redacted spans: the rules match ASCII only.
    """
    low = data.lower()  # ~0.4 ms per MiB; each word scan ~0.6 ms
    if not _may_hold_secret(low):
        return data  # nearly every read: the pump's cost stays in the classifier (bench P3)
    text = data.decode("latin-1")
    out = _redact_text(text)
    return data if out == text else out.encode("latin-1")


def redact(obj: Any) -> Any:
    """``obj`` with every credential replaced by ``"<redacted>"``: values of secret-looking
    keys, the argument after a secret flag (``--hub_token VALUE``), ``--token=VALUE``, and
    ``hf_...`` tokens. An event log is copied into bug reports; a token in it is leaked."""
    if isinstance(obj, str):
        return _redact_text(obj)
    if isinstance(obj, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and is_secret_name(k) and v is not None
            else redact(v)
            for k, v in obj.items()
        }  # fmt: skip
    if isinstance(obj, (list, tuple)):
        out: list[Any] = []
        hide_next = False
        for v in obj:
            if hide_next and isinstance(v, str) and not v.startswith("-"):
                out.append(REDACTED)
                hide_next = False
                continue
            hide_next = (
                isinstance(v, str) and v.startswith("-") and "=" not in v and (is_secret_name(v))
            )
            out.append(redact(v))
        return out
    return obj


# -- the processor chain -----------------------------------------------------------------------


def redact_processor(_: Any, __: str, ev: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: :func:`redact` over the whole event, context included."""
    return {k: (v if k == "event" else redact({k: v})[k]) for k, v in ev.items()}


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


def _batch_words(
    before: object, after: object, tok_before: object, tok_after: object, changed: str = ""
) -> str:
    """Say "global batch 16 kept" only when the tokens per optimizer step are kept too (or not
    known): a max_length move keeps the batch in samples and halves the tokens, and the
    user must not read "kept" for a recipe that changed."""
    tokens_changed = tok_before is not None and tok_after is not None and tok_before != tok_after
    if before != after:
        words = f"global batch {changed}{before} -> {after}" + (" (new phase)" if changed else "")
    elif tokens_changed:
        words = f"global batch {after} samples"
    else:
        return f"global batch {after} kept"
    if tokens_changed:
        words += f", tokens per step CHANGED {tok_before} -> {tok_after}"
    return words


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
        kept = _batch_words(
            ev.get("global_batch_before"), ev.get("global_batch_after"),
            ev.get("tokens_per_step_before"), ev.get("tokens_per_step_after"),
        )  # fmt: skip
        body = f"policy {ev.get('rung') or 'retry'}: {desc}; {kept}{extra}"
        if ev.get("delay_s"):
            body += f"; waiting {ev['delay_s']:.0f} s"
    elif name == "knobs_routed":
        # What the ladder cannot do comes first: a long list of routes is cut at the width.
        left = ev.get("left_out") or {}
        body = "rungs left out (no route or fixed): " + (", ".join(left) or "none")
        if ev.get("packing"):
            body += f"; packed data ({ev.get('packing_source')})"
        route = ev.get("routes") or {}
        other = [f"{k} by {r}" for k, r in route.items() if r and not r.startswith("flag ")]
        body += "; knobs: " + (", ".join(other) or "all by flag")
    elif name == "attempt_finished":
        body = f"attempt finished: exit {ev.get('exit_code')} after {ev.get('duration_s', 0):.1f} s"
    elif name == "run_gave_up":
        body = f"GAVE UP after {ev.get('attempts')} attempt(s): {ev.get('reason')}"
        body += "; " + _fmt_changes(ev.get("changes"))
    elif name == "run_succeeded":
        body = f"SUCCEEDED after {ev.get('attempts')} attempt(s); " + _fmt_changes(
            ev.get("changes")
        )
        body += "; " + _batch_words(
            ev.get("initial_global_batch"), ev.get("global_batch"),
            ev.get("initial_tokens_per_step"), ev.get("tokens_per_step"), changed="CHANGED ",
        )  # fmt: skip
    else:
        skip = {"ts", "event", "run_id", "attempt", "job"}
        body = name + " " + " ".join(f"{k}={v}" for k, v in ev.items() if k not in skip)
    line = f"{head} {body}".rstrip()
    return line if len(line) <= _CONSOLE_WIDTH else line[: _CONSOLE_WIDTH - 3] + "..."


class _Render:
    """The chain's last processor: the file line and the console line of one event dict."""

    def __init__(self, console: bool) -> None:
        from structlog.processors import JSONRenderer

        self._json = JSONRenderer(
            serializer=json.dumps, default=_json_default, ensure_ascii=False,
            separators=(",", ":"),
        )  # fmt: skip
        self._console = console

    def __call__(self, logger: Any, method: str, ev: MutableMapping[str, Any]) -> dict[str, Any]:
        line = str(self._json(logger, method, ev)) + "\n"
        human = None
        if self._console and ev.get("event") not in CONSOLE_QUIET:
            human = human_line(dict(ev)) + "\n"
        return {"line": line.encode(), "console": human, "written": dict(ev)}


#: Lines kept in memory while events.jsonl cannot be written (disk full); past this, new
#: lines are dropped and counted rather than growing dsguard without bound over a night.
MAX_PENDING_BYTES = 4 << 20


class _Writer:
    """structlog 'logger': writes what the chain rendered, and nothing else.

    A failing write (ENOSPC, EIO, EDQUOT: the log disk filled up) never raises: the line is
    kept and written before the next one, so the file stays whole lines in order once space
    comes back, and the console still shows it. A write that went out in part is finished
    first, never torn. Supervising goes on either way: the log serves the run, not the
    other way round.
    """

    def __init__(self, fd: int, console: TextIO | None, path: Path) -> None:
        self._fd = fd
        self._console = console
        self._path = path
        # Reentrant: a signal handler that logs must not deadlock on the line being written.
        self._lock = threading.RLock()
        self._pending = bytearray()
        self._failing = False
        self.write_failures = 0
        self.dropped_bytes = 0

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def flush(self) -> bool:
        """Write what is pending; True when nothing is left."""
        with self._lock:
            if not self._pending:
                return True
            n, err = write_all(self._fd, bytes(self._pending))
            del self._pending[:n]
            if err is None:
                self._failing = False
                return True
            self.write_failures += 1
            if not self._failing:
                self._failing = True
                self._say(
                    f"dsguard: cannot write {self._path}: {err.strerror or err}; keeping "
                    "events in memory and retrying (training goes on)\n"
                )
            return False

    def _say(self, text: str) -> None:
        if self._console is None:
            return
        try:
            self._console.write(text)
            self._console.flush()
        except (OSError, ValueError):
            self._console = None

    def msg(self, line: bytes, console: str | None, written: dict[str, Any]) -> dict[str, Any]:
        # One write per line on an O_APPEND fd: whole lines only, never rewritten.
        with self._lock:
            if len(self._pending) + len(line) > MAX_PENDING_BYTES:
                self.dropped_bytes += len(line)
            else:
                self._pending += line
            self.flush()
        if console is not None:
            self._say(console)
        return written


class EventLog:
    """Append-only JSONL event log with bound context; every event checked against its record.

    Args:
        path: the events.jsonl file (created if missing; existing lines are kept).
        run_id: stamped on every event.
        console: where human-readable lines go (None: nowhere).
        now: wall clock, injectable for tests.
        strict: raise :class:`EventSchemaError` on an event that does not match its record
            (None: :func:`strict_default`); otherwise write it plus an ``event_invalid`` note.
    """

    def __init__(
        self,
        path: Path,
        *,
        run_id: str,
        console: TextIO | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        strict: bool | None = None,
        **context: Any,
    ) -> None:
        # Imported here, not at module level: `dsguard status` and `--help` import this
        # module for its helpers and must not pay structlog's import time.
        import structlog

        make_private_dir(path.parent, narrow=True)
        self.path = path
        self.strict = strict_default() if strict is None else strict
        # Never through a symlink or hard link planted at the path (dsguard may be root).
        self._fd = open_file(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        self._now = now
        self._writer = _Writer(self._fd, console, path)
        self._start_on_new_line()

        def stamp(_: Any, __: str, ev: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
            # ts first, then event, for readable lines.
            ordered = {"ts": self._now().isoformat(timespec="milliseconds"), "event": ev["event"]}
            ordered.update((k, v) for k, v in ev.items() if k != "event")
            return ordered

        #: Called with every event as written (redacted) and this log, after the write:
        #: notifications and metrics ride on the event stream instead of on the loop. An
        #: exception from a listener is swallowed (the listener reports its own problems):
        #: a notification or metrics bug must never stop training.
        self.listeners: list[Callable[[dict[str, Any], EventLog], None]] = []
        self._log: Any = structlog.wrap_logger(
            self._writer,
            processors=[redact_processor, stamp, _Render(console is not None)],
            wrapper_class=structlog.BoundLogger,
            context_class=dict,
            cache_logger_on_first_use=False,
        ).bind(run_id=run_id, attempt=None, **context)

    def bind(self, **context: Any) -> None:
        self._log = self._log.bind(**context)

    def _check(self, name: str, fields: dict[str, Any]) -> str | None:
        """None when ``fields`` match ``name``'s record, else the problem (or raise: strict)."""
        try:
            validate(name, fields)
        except (UnknownEvent, msgspec.ValidationError) as exc:
            if self.strict:
                raise EventSchemaError(f"event {name!r}: {exc}") from exc
            return str(exc)
        return None

    def emit(self, event: str | Event, /, **fields: Any) -> dict[str, Any]:
        """Write one event (a name and its fields, or a record); returns it as written.

        Raises:
            EventSchemaError: strict, and the event does not match its record.
        """
        if isinstance(event, Event):
            if fields:
                raise TypeError("emit(record) takes no extra fields")
            name, data, problem = event_name(event), msgspec.to_builtins(event), None
        else:
            name, data = event, normalise(fields)
            problem = self._check(name, data)
        written: dict[str, Any] = self._log.msg(name, **data)
        if problem is not None:
            self._log.msg("event_invalid", invalid_event=name, error=problem)
        for listener in self.listeners:
            # A notification or metrics bug must never stop training.
            with contextlib.suppress(Exception):
                listener(written, self)
        return written

    def _start_on_new_line(self) -> None:
        """A dsguard killed mid-write (or a full disk) can leave a last line without its
        newline; appending straight after it would glue this run's first event to that
        fragment and every reader would drop both. Close the fragment off first."""
        try:
            size = os.fstat(self._fd).st_size
            last = os.pread(self._fd, 1, size - 1) if size > 0 else b"\n"
        except OSError:
            return
        if last != b"\n":
            self._writer.msg(b"\n", None, {})

    @property
    def write_failures(self) -> int:
        """Writes of events.jsonl that failed (disk full, ...); the lines were kept."""
        return self._writer.write_failures

    @property
    def dropped_bytes(self) -> int:
        """Bytes of events never written: more were pending than ``MAX_PENDING_BYTES``."""
        return self._writer.dropped_bytes

    @property
    def pending_bytes(self) -> int:
        """Bytes of events waiting for the disk to take them."""
        return self._writer.pending_bytes

    def flush(self) -> bool:
        """Retry writing pending lines; True when the file holds every line."""
        return self._writer.flush()

    def close(self) -> None:
        self._writer.flush()
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
