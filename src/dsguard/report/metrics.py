"""Metrics for Prometheus: the job file's ``metrics: {textfile: PATH, http_port: N}``.

``textfile`` is for node_exporter's textfile collector (``--collector.textfile.directory``):
the file is replaced atomically (temp file + rename, :func:`dsguard.run.safefs.write_atomic`)
so the collector never reads half a file, and made 0644 so a collector running as another
user can read it. ``http_port`` serves the same text at ``http://127.0.0.1:N/metrics`` (the
standard library's HTTP server; loopback only, the figures include the job's name).

:class:`Metrics` is an event-log listener: every event updates the figures and rewrites the
file; a daemon thread also refreshes them every :data:`REFRESH_S` from the heartbeats (step,
memory) and the checkpoint dir (checkpoint age), which move without events. Nothing here can
block or fail the supervisor: a write error is kept for the next try.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dsguard.core.states import RunState
from dsguard.protocol import HEARTBEAT_SUBDIR
from dsguard.run.checkpoints import list_checkpoints
from dsguard.run.events import EventLog
from dsguard.run.heartbeat import read_heartbeats
from dsguard.run.safefs import write_atomic

REFRESH_S = 15.0
#: Events after which the heartbeat and checkpoint figures are read at once.
_REFRESH_ON = frozenset({"attempt_finished", "run_succeeded", "run_gave_up", "run_stopped"})
#: name -> (type, help). The one list of what dsguard exports.
METRICS: dict[str, tuple[str, str]] = {
    "dsguard_attempts_total": (
        "counter", "Finished attempts by failure kind (or exit_0, or fit_probe_switch: ended by "
        "dsguard to time another config, not a failure)."),
    "dsguard_fit_probe_lost_seconds": (
        "gauge", "What the in-run fit_probe's switches cost (restarts and steps trained again)."),
    "dsguard_state": ("gauge", "1 for the run's current state, 0 for the others."),
    "dsguard_attempt": ("gauge", "The current attempt number."),
    "dsguard_phase": ("gauge", "The current phase (a new phase is not an exact resume)."),
    "dsguard_last_step": ("gauge", "The newest optimizer step a heartbeat reported."),
    "dsguard_loss": ("gauge", "Rank 0's latest loss from its heartbeat."),
    "dsguard_checkpoint_age_seconds": ("gauge", "Age of the newest checkpoint dir."),
    "dsguard_gpu_memory_peak_bytes": ("gauge", "Current attempt's peak reserved GPU memory."),
    "dsguard_host_memory_peak_bytes": ("gauge", "Current attempt's peak host RSS."),
    "dsguard_global_batch": ("gauge", "Global batch (micro x accumulation x world size)."),
    "dsguard_micro_batch_size": ("gauge", "Current micro-batch size per GPU."),
    "dsguard_gradient_accumulation_steps": ("gauge", "Current gradient accumulation steps."),
    "dsguard_last_event_timestamp_seconds": ("gauge", "When dsguard last wrote an event."),
}  # fmt: skip


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Listener for ``EventLog.listeners`` (see the module)."""

    def __init__(
        self,
        job: str,
        log_dir: Path,
        *,
        textfile: Path | None = None,
        http_port: int | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.job, self.log_dir, self.textfile = job, log_dir, textfile
        self._now = now
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.values: dict[str, float] = {}
        self.state: str | None = None
        self.ckpt_dir: Path | None = None
        self.attempt: int | None = None
        self.write_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: ThreadingHTTPServer | None = None
        self._port = http_port
        self._log: EventLog | None = None

    # -- the listener ------------------------------------------------------------------------

    def __call__(self, ev: dict[str, Any], log: EventLog) -> None:
        self._log = log
        if self._thread is None:
            self._start(log)
        with self._lock:
            self._update(ev)
        if ev.get("event") in _REFRESH_ON:
            self.refresh()  # heartbeats and checkpoints too: they moved with the attempt
        else:
            self.write()

    def _update(self, ev: dict[str, Any]) -> None:
        name = ev.get("event")
        v = self.values
        if isinstance(ev.get("ts"), str):
            from dsguard.core.summary import ts_seconds

            t = ts_seconds(ev["ts"])
            if t is not None:
                v["dsguard_last_event_timestamp_seconds"] = t
        if name == "run_started" and isinstance(ev.get("checkpoint_dir"), str):
            self.ckpt_dir = Path(ev["checkpoint_dir"])
        elif name == "state_changed" and isinstance(ev.get("to_state"), str):
            self.state = ev["to_state"]
        elif name == "attempt_started":
            self.attempt = ev.get("attempt") if isinstance(ev.get("attempt"), int) else None
            raw = ev.get("knobs")
            knobs: dict[str, Any] = raw if isinstance(raw, dict) else {}
            for key in ("micro_batch_size", "gradient_accumulation_steps"):
                if isinstance(knobs.get(key), int):
                    v[f"dsguard_{key}"] = knobs[key]
            pairs = (("global_batch", "dsguard_global_batch"), ("phase", "dsguard_phase"),
                     ("attempt", "dsguard_attempt"))  # fmt: skip
            for key, metric in pairs:
                if isinstance(ev.get(key), int):
                    v[metric] = ev[key]
            if isinstance(ev.get("output_dir"), str):
                self.ckpt_dir = Path(ev["output_dir"])
            v.pop("dsguard_gpu_memory_peak_bytes", None)
            v.pop("dsguard_host_memory_peak_bytes", None)
        elif name == "attempt_finished":
            code = ev.get("exit_code")
            if ev.get("ended_by") == "probe":
                # fit_probe: in_run asked the trainer to save and stop (exit 0 or -15) to time
                # another config: a planned switch, counted apart from failures.
                self.outcomes["fit_probe_switch"] += 1
            else:
                self.outcomes["exit_0" if code == 0 else "failed"] += 1
            for key, metric in (("gpu_mem_peak_bytes", "dsguard_gpu_memory_peak_bytes"),
                                ("host_rss_peak_bytes", "dsguard_host_memory_peak_bytes"),
                                ("last_step", "dsguard_last_step")):  # fmt: skip
                if isinstance(ev.get(key), int):
                    v[metric] = ev[key]
        elif name == "fit_probe_cost" and isinstance(ev.get("lost_s"), (int, float)):
            v["dsguard_fit_probe_lost_seconds"] = ev["lost_s"]
        elif name == "failure_detected" and isinstance(ev.get("kind"), str):
            # The attempt was counted as "failed" when it finished; name its kind instead.
            if self.outcomes["failed"] > 0:
                self.outcomes["failed"] -= 1
            self.outcomes[ev["kind"]] += 1

    # -- heartbeats and checkpoints ----------------------------------------------------------

    def refresh(self) -> None:
        """Step, loss and memory from the current attempt's heartbeats; checkpoint age."""
        with self._lock:
            v = self.values
            if self.attempt is not None:
                beats = read_heartbeats(self.log_dir / HEARTBEAT_SUBDIR, self.attempt)
                if beats:
                    v["dsguard_last_step"] = max(b.global_step for b in beats)
                    zero = [b.loss for b in beats if b.rank == 0 and b.loss is not None]
                    if zero:
                        v["dsguard_loss"] = zero[0]
                    gpu = [b.max_memory_reserved_bytes or 0 for b in beats]
                    host = [b.host_rss_bytes or 0 for b in beats]
                    for metric, seen in (("dsguard_gpu_memory_peak_bytes", gpu),
                                         ("dsguard_host_memory_peak_bytes", host)):  # fmt: skip
                        if any(seen):
                            v[metric] = max(*seen, v.get(metric, 0))
            newest = list_checkpoints(self.ckpt_dir) if self.ckpt_dir is not None else []
            if newest:
                with contextlib.suppress(OSError):  # removed or quarantined meanwhile
                    age = self._now() - newest[0].stat().st_mtime
                    v["dsguard_checkpoint_age_seconds"] = max(0.0, age)
        self.write()

    # -- output ------------------------------------------------------------------------------

    def text(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        job = _label(self.job)
        out: list[str] = []
        with self._lock:
            for name, (kind, help_text) in METRICS.items():
                lines = self._samples(name, job)
                if lines:
                    out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]
        return "\n".join(out) + "\n"

    def _samples(self, name: str, job: str) -> list[str]:
        if name == "dsguard_attempts_total":
            return [
                f'{name}{{job="{job}",kind="{_label(k)}"}} {n}'
                for k, n in sorted(self.outcomes.items())
                if n > 0
            ]
        if name == "dsguard_state":
            return [
                f'{name}{{job="{job}",state="{s.value}"}} {int(s.value == self.state)}'
                for s in RunState
            ]
        value = self.values.get(name)
        if value is None or not math.isfinite(value):
            return []
        return [f'{name}{{job="{job}"}} {value:.17g}']

    def write(self) -> None:
        if self.textfile is None:
            return
        try:
            write_atomic(self.textfile, self.text().encode(), mode=0o644, check_owner=False)
            self.write_error = None
        except OSError as exc:  # kept for the next event or refresh; training goes on
            self.write_error = str(exc)

    def _start(self, log: EventLog) -> None:
        self._thread = threading.Thread(target=self._loop, name="dsguard-metrics", daemon=True)
        self._thread.start()
        if self._port is None:
            return
        try:
            self._server = _serve(self, self._port)
        except OSError as exc:
            why = f"cannot listen on 127.0.0.1:{self._port}: {exc.strerror or exc}"
            log.emit("output_unavailable", output="metrics.http_port", reason=why)

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                self.refresh()
            except Exception:  # a metrics bug must end neither this thread nor the run
                continue

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _serve(metrics: Metrics, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # no request lines on dsguard's console

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dsguard-metrics-http", daemon=True).start()
    return server
