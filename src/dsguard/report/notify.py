"""Notifications: the job file's ``notify:`` apprise URLs hear about a give-up, a success, a
new phase and a hang, with the run's summary line and the path of its report page.

The supervisor must never wait on a chat service: :class:`Notifications` is an event-log
listener (``EventLog.listeners``) that only puts a small job on a bounded queue; one daemon
thread renders the report and sends, each URL retried a bounded number of times (tenacity,
exponential backoff, apprise's own connect/read timeouts per try). When the queue is full a
notification is dropped and counted, never blocked on. URLs are redacted to scheme and host
(:func:`dsguard.job.model.redact_url`) in every event and message.

apprise is optional (the ``notify`` extra): without it the first notification records one
``output_unavailable`` event and nothing else happens.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsguard.core.events import EVENTS
from dsguard.core.summary import build, summary_line
from dsguard.job.model import redact_url
from dsguard.run.events import EventLog
from dsguard.run.safefs import write_atomic

#: Event -> the trigger name used in titles and events.
TRIGGERS = {
    "run_gave_up": "gave up",
    "run_succeeded": "succeeded",
    "phase_started": "new phase",
    "hang_detected": "hang",
}
REPORT_NAME = "report.html"
QUEUE_SIZE = 16
TRIES = 3


@dataclass(frozen=True, slots=True)
class _Job:
    trigger: str
    title: str
    events: list[dict[str, Any]]
    path: Path
    context: dict[str, Any]
    what: str


def _what(ev: dict[str, Any]) -> str:
    """The news itself, before the run's summary line."""
    name, att = ev.get("event"), ev.get("attempt")
    if name == "hang_detected":
        return f"attempt {att} hung: no output or heartbeat for {ev.get('silent_s', 0):.0f} s"
    if name == "phase_started":
        return f"phase {ev.get('phase')} starts after attempt {att}: {ev.get('reason')}"
    return ""


def _send_apprise(url: str, title: str, body: str) -> None:
    """One try at one URL through apprise. Raises on failure (for the retry)."""
    import apprise

    app = apprise.Apprise()
    if not app.add(url):
        raise ValueError("apprise does not understand this URL")
    if not app.notify(title=title, body=body):
        raise OSError("the service did not accept the notification")


class Notifications:
    """Listener for ``EventLog.listeners`` (see the module)."""

    def __init__(
        self,
        urls: tuple[str, ...],
        log_dir: Path,
        *,
        send: Callable[[str, str, str], None] = _send_apprise,
        tries: int = TRIES,
        wait_s: float = 1.0,
    ) -> None:
        self.urls = urls
        self.log_dir = log_dir
        self._send = send
        self._tries, self._wait_s = tries, wait_s
        self._events: list[dict[str, Any]] = []
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._unavailable: str | None = None
        self._log: EventLog | None = None
        self._log_run: str | None = None
        self.dropped = 0

    def __call__(self, ev: dict[str, Any], log: EventLog) -> None:
        name = ev.get("event")
        if name == "run_started" and ev.get("recovered") is not True:
            self._events = []
        self._events.append(ev)
        trigger = TRIGGERS.get(str(name))
        if trigger is None or not self.urls:
            return
        if self._thread is None:
            self._unavailable = self._check_available()
            if self._unavailable is not None:
                log.emit("output_unavailable", output="notify", reason=self._unavailable)
                self.urls = ()
                return
            self._thread = threading.Thread(target=self._work, name="dsguard-notify", daemon=True)
            self._thread.start()
        title = f"dsguard: {ev.get('job') or 'job'} {trigger}"
        try:
            ctx = {k: ev.get(k) for k in ("run_id", "job", "attempt")}
            job = _Job(trigger, title, list(self._events), log.path, ctx, _what(ev))
            self._queue.put_nowait(job)
        except queue.Full:
            self.dropped += 1

    def _check_available(self) -> str | None:
        if self._send is not _send_apprise:
            return None
        try:
            import apprise  # noqa: F401
        except ImportError:
            return "the apprise package is not installed (pip install 'dsguard[notify]')"
        return None

    def close(self, timeout_s: float = 30.0) -> None:
        """Give queued notifications up to ``timeout_s`` to go out (a final give-up should
        reach its user), then return whatever happened: the thread is a daemon."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _body(self, job: _Job) -> str:
        view = build(job.events, {}, known_events=EVENTS)
        line = summary_line(view)
        report = self.log_dir / REPORT_NAME
        try:
            from dsguard.report.html import page
            from dsguard.report.load import read_log_dir

            write_atomic(report, page([(view.job or "job", read_log_dir(self.log_dir))]).encode())
            where = f"report: {report}"
        except Exception as exc:  # the summary still goes out without the page
            where = f"report not written ({exc}); run: dsguard report {self.log_dir}"
        return "\n".join(x for x in (job.what, line, where) if x)

    def _record(self, job: _Job, name: str, **fields: Any) -> None:
        """An event about a delivery, through this thread's own append-only handle on the
        event log: the supervisor may have closed its own by then (the run is over), and
        whole-line O_APPEND writes from two handles never interleave."""
        ctx = dict(job.context)
        run_id = str(ctx.pop("run_id", None) or "?")
        if self._log is None or self._log_run != run_id:
            if self._log is not None:
                self._log.close()
            self._log = EventLog(job.path, run_id=run_id, job=ctx.pop("job", None))
            self._log_run = run_id
        self._log.bind(attempt=ctx.get("attempt"))
        self._log.emit(name, **fields)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                if self._log is not None:
                    self._log.close()
                return
            body = self._body(job)
            for url in self.urls:
                self._deliver(job, url, body)

    def _deliver(self, job: _Job, url: str, body: str) -> None:
        from tenacity import RetryError, Retrying, stop_after_attempt, wait_exponential

        shown = redact_url(url)
        retry = Retrying(
            stop=stop_after_attempt(self._tries),
            wait=wait_exponential(multiplier=self._wait_s, max=30 * self._wait_s),
            reraise=False,
        )
        try:
            retry(self._send, url, job.title, body)
        except RetryError as err:
            exc = err.last_attempt.exception()
            error = f"{type(exc).__name__}: {exc}" if exc is not None else "failed"
            self._record(
                job, "notification_failed", trigger=job.trigger, url=shown,
                tries=self._tries, error=error.replace(url, shown)[:300],
            )  # fmt: skip
            return
        tries = retry.statistics.get("attempt_number", 1)
        self._record(job, "notification_sent", trigger=job.trigger, url=shown, tries=tries)
