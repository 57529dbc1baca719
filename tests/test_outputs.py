"""``notify:`` and ``metrics:``: a real run posting to a local HTTP endpoint through apprise,
bounded retries that never hold up the caller, redacted URLs, and the Prometheus text
parsed back."""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dsguard.errors import JobFileError
from dsguard.job.file import load_job
from dsguard.job.model import redact_url
from dsguard.report.metrics import Metrics
from dsguard.report.notify import Notifications
from dsguard.run.events import EventLog, read_events
from tests.conftest import RunResult, write_job

SECRET = "s3cr3t-Pa55"


class _Hook:
    """A local web hook: records every POST (path, headers, JSON body)."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.got = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"null")
                hook.posts.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.end_headers()
                hook.got.set()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook() -> Iterator[_Hook]:
    h = _Hook()
    yield h
    h.server.shutdown()
    h.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parse_prom(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_real_run_notifies_a_local_webhook_and_writes_metrics(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], hook: _Hook
) -> None:
    pytest.importorskip("apprise")
    pytest.importorskip("prometheus_client")
    url = f"json://user:{SECRET}@127.0.0.1:{hook.port}/hook"
    write_job(
        tmp_path, ["--scenario", "oom,heartbeat", "--oom_above", "2", "--oom_then", "exit",
                   "--fail_at_step", "3", "--max_steps", "6"],
        notify=[url], metrics={"textfile": "dsguard.prom"},
    )  # fmt: skip
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    assert hook.got.wait(10)
    (post,) = hook.posts  # one trigger in this run: the success
    assert post["path"] == "/hook"
    body = post["body"]
    assert body["title"] == "dsguard: fake succeeded"
    assert body["message"].startswith(
        "succeeded after 3 attempts; micro 8 -> 2, accumulation 1 -> 4, global batch kept"
    )
    report = tmp_path / "runs" / "report.html"
    assert f"report: {report}" in body["message"] and report.is_file()
    sent = res.named("notification_sent")
    assert sent == [{**sent[0], "trigger": "succeeded", "tries": 1,
                     "url": f"json://127.0.0.1:{hook.port}/<redacted>"}]  # fmt: skip
    assert SECRET not in (tmp_path / "runs" / "events.jsonl").read_text()
    assert SECRET not in res.proc.stderr + res.proc.stdout

    prom = _parse_prom((tmp_path / "dsguard.prom").read_text())
    job = ("job", "fake")
    total = "dsguard_attempts_total"
    assert prom[(total, (job, ("kind", "cuda_oom")))] == 2
    assert prom[(total, (job, ("kind", "exit_0")))] == 1
    assert prom[("dsguard_state", (job, ("state", "succeeded")))] == 1
    assert prom[("dsguard_state", (job, ("state", "running")))] == 0
    assert prom[("dsguard_global_batch", (job,))] == 8
    assert prom[("dsguard_micro_batch_size", (job,))] == 2
    assert prom[("dsguard_last_step", (job,))] == 6
    assert 0 <= prom[("dsguard_checkpoint_age_seconds", (job,))] < 600
    assert oct((tmp_path / "dsguard.prom").stat().st_mode & 0o777) == "0o644"


def _log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "events.jsonl", run_id="r", job="j", strict=True)


def test_failed_deliveries_are_retried_a_bounded_number_of_times(tmp_path: Path) -> None:
    calls: list[str] = []

    def send(url: str, title: str, body: str) -> None:
        calls.append(url)
        raise OSError(f"connection refused for {url}")

    url = f"tgram://{SECRET}/12345"
    notes = Notifications((url,), tmp_path, send=send, tries=3, wait_s=0.0)
    log = _log(tmp_path)
    log.listeners.append(notes)
    log.emit("hang_detected", silent_s=1800.0, hang_timeout_s=1800.0)
    notes.close(timeout_s=10)
    log.close()
    assert calls == [url] * 3
    (failed,) = [e for e in read_events(tmp_path / "events.jsonl")
                 if e["event"] == "notification_failed"]  # fmt: skip
    assert failed["tries"] == 3 and failed["trigger"] == "hang"
    assert failed["url"] == "tgram://<redacted>"
    assert SECRET not in (tmp_path / "events.jsonl").read_text()


def test_a_stuck_service_never_blocks_the_supervisor(tmp_path: Path) -> None:
    release, started = threading.Event(), threading.Event()

    def send(url: str, title: str, body: str) -> None:
        started.set()
        release.wait(30)

    notes = Notifications(("json://127.0.0.1:9/x",), tmp_path, send=send, wait_s=0.0)
    log = _log(tmp_path)
    log.listeners.append(notes)
    log.emit("hang_detected", silent_s=1.0, hang_timeout_s=1.0)
    assert started.wait(10)  # the worker is now stuck in the service
    for _ in range(40):  # the emitting thread goes on; the bounded queue drops the excess
        log.emit("phase_started", phase=2, output_dir=None, init_from=None, reason="zero3")
    assert notes.dropped == 40 - 16
    release.set()
    notes.close(timeout_s=10)
    log.close()


def test_without_apprise_one_event_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "apprise", None)  # import apprise -> ImportError
    notes = Notifications(("json://127.0.0.1:9/x",), tmp_path)
    log = _log(tmp_path)
    log.listeners.append(notes)
    log.emit("hang_detected", silent_s=1.0, hang_timeout_s=1.0)
    log.emit("hang_detected", silent_s=1.0, hang_timeout_s=1.0)
    log.close()
    names = [e["event"] for e in read_events(tmp_path / "events.jsonl")]
    assert names.count("output_unavailable") == 1
    (ev,) = [e for e in read_events(tmp_path / "events.jsonl")
             if e["event"] == "output_unavailable"]  # fmt: skip
    assert "dsguard[notify]" in ev["reason"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"jsons://me:{SECRET}@hooks.example.com:8443/a/{SECRET}?k={SECRET}",
         "jsons://hooks.example.com:8443/<redacted>"),
        (f"slack://T1/{SECRET}/C3", "slack://<redacted>"),
        (f"mailto://me:{SECRET}@gmail.com", "mailto://<redacted>"),
        (f"ntfy://{SECRET}@ntfy.sh/topic", "ntfy://<redacted>"),
        (SECRET, "<redacted>"),
    ],
)  # fmt: skip
def test_urls_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_job_file_keys_and_their_errors(tmp_path: Path) -> None:
    path = write_job(tmp_path, [], notify=["ntfy://ntfy.sh/topic"],
                     metrics={"textfile": "m/dsguard.prom", "http_port": 9464})  # fmt: skip
    (tmp_path / "m").mkdir()
    job = load_job(path)
    assert job.outputs.notify == ("ntfy://ntfy.sh/topic",)
    assert job.outputs.metrics_textfile == tmp_path / "m" / "dsguard.prom"
    assert job.outputs.metrics_http_port == 9464
    bad = write_job(tmp_path, [], notify=[f"not a url {SECRET}"],
                    metrics={"textfile": "dsguard.txt", "http_port": 70000})  # fmt: skip
    with pytest.raises(JobFileError) as err:
        load_job(bad)
    text = "\n".join(str(p) for p in err.value.problems)
    assert f"{bad}:" in text and "notify[0]" in text and "not an apprise URL" in text
    assert "metrics.textfile" in text and "*.prom" in text
    assert "metrics.http_port" in text
    assert SECRET not in text


def test_metrics_endpoint_on_localhost(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    port = _free_port()
    metrics = Metrics("j", tmp_path, http_port=port)
    log = _log(tmp_path)
    log.listeners.append(metrics)
    try:
        log.emit("state_changed", from_state="starting", to_state="running", reason="x")
        knobs = {"micro_batch_size": 4, "gradient_accumulation_steps": 2}
        log.bind(attempt=1)
        log.emit("attempt_started", pid=1, argv=[], cwd="/", knobs=knobs, global_batch=8,
                 world_size=1, phase=1, resume_from=None, deepspeed_config=None,
                 output_dir=None, init_from=None, log="a.log", remedies=[])  # fmt: skip
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            prom = _parse_prom(r.read().decode())
    finally:
        metrics.close()
        log.close()
    assert prom[("dsguard_state", (("job", "j"), ("state", "running")))] == 1
    assert prom[("dsguard_gradient_accumulation_steps", (("job", "j"),))] == 2
    assert prom[("dsguard_attempt", (("job", "j"),))] == 1


def test_a_new_phase_and_a_give_up_are_notified(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], hook: _Hook
) -> None:
    """ZeRO-2 -> 3 without a transplant starts phase 2 (notified), then a user error that no
    rung can fix ends the run (notified as a give-up), both with the summary line."""
    pytest.importorskip("apprise")
    ds = tmp_path / "zero2.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    write_job(
        tmp_path,
        ["--scenario", "oom,user_error", "--oom_above", "0", "--fail_attempts", "1",
         "--oom_then", "exit", "--fail_at_step", "2"],
        deepspeed={"config": str(ds)}, ladder={"oom": ["zero3"]},
        notify=[f"json://127.0.0.1:{hook.port}/hook"],
    )  # fmt: skip
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 1, res.proc.stderr
    titles = [p["body"]["title"] for p in hook.posts]
    assert titles == ["dsguard: fake new phase", "dsguard: fake gave up"]
    phase, gave_up = (p["body"]["message"] for p in hook.posts)
    assert phase.startswith("phase 2 starts after attempt 1: ")
    assert "zero 2 -> 3, global batch kept" in phase  # the decided change, not yet run
    assert gave_up.startswith("gave up after 2 attempts (")
    assert "new phase from attempt #2" in gave_up
    assert [e["trigger"] for e in res.named("notification_sent")] == ["new phase", "gave up"]
