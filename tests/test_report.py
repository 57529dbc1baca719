"""``dsguard report``: the summary from real log dirs, leniency towards odd lines, the page,
and the page rendered by a real headless Chromium where one is installed."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from dsguard.core.summary import build, summary_line
from dsguard.report.html import page
from dsguard.report.load import queue_log_dirs, read_history, read_log_dir
from dsguard.report.png import find_browser

DATA = Path(__file__).parent / "data" / "report"


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def _report(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "dsguard", "report", *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_cpu_demo_summary_from_its_real_log_dir() -> None:
    view = read_log_dir(DATA / "tiny-cpu")
    line = summary_line(view)
    assert line.startswith(
        "succeeded after 2 attempts; micro 8 -> 4, accumulation 1 -> 2, global batch kept; "
    ), line
    assert line.endswith("of training lost")
    one, two = view.attempts
    assert (one.kind, one.rung, two.kind) == ("host_oom", "micro_batch", None)
    # Attempt 2 started fresh (no checkpoint yet), so all of attempt 1 was lost.
    assert one.lost_s == pytest.approx(one.duration_s)
    assert two.lost_s == 0
    steps = [p.step for p in view.points]
    assert steps == sorted(steps) and steps[-1] == 6
    assert not any(p.replayed for p in view.points)
    assert two.samples_per_s is not None and two.samples_per_s > 0
    assert two.host_peak_bytes is not None and two.host_peak_bytes > 100 << 20


def test_phase_change_and_replayed_steps() -> None:
    view = read_log_dir(DATA / "phase")
    line = summary_line(view)
    assert "global batch kept" in line
    assert "new phase from attempt #2" in line
    assert [a.phase for a in view.attempts] == [1, 2, 2]
    assert [a.rung for a in view.attempts] == ["zero3", "micro_batch", None]
    replayed = sorted({p.step for p in view.points if p.replayed})
    # Attempt 3 resumed phase 2 from step 3; attempt 2 had reached step 5.
    assert view.attempts[2].resume_step == 3
    assert replayed == [3, 4, 5]
    assert all(p.attempt == 3 for p in view.points if p.replayed)
    # Phase 1's attempt is entirely lost (phase 2 started from scratch).
    assert view.attempts[0].lost_s == pytest.approx(view.attempts[0].duration_s)


def _events(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"run_id": "r", "job": "j"}
    ts = "2026-01-01T00:00:{:02d}.000+00:00"
    knobs8 = {"micro_batch_size": 8, "gradient_accumulation_steps": 1}
    evs: list[dict[str, Any]] = [
        {"event": "run_started", "attempt": None, "knobs": knobs8, "global_batch": 8},
        {"event": "attempt_started", "attempt": 1, "knobs": knobs8, "global_batch": 8, "phase": 1},
        *extra,
        {"event": "attempt_finished", "attempt": 1, "exit_code": 1, "ended_by": "exit",
         "gpu_mem_peak_bytes": 3 << 30},
        {"event": "failure_detected", "attempt": 1, "kind": "cuda_oom"},
        {"event": "run_gave_up", "attempt": 1, "reason": "ladder exhausted", "attempts": 1,
         "changes": {"max_length": [2048, 1024]}, "global_batch": 16, "initial_global_batch": 8},
    ]  # fmt: skip
    return [{**base, **e, "ts": ts.format(i)} for i, e in enumerate(evs)]


def test_unknown_events_extra_fields_and_predictions_do_not_break_it() -> None:
    plan = {"event": "plan_applied", "attempt": 1, "predicted_gpu_peak_bytes": 2 << 30,
            "predicted": {"host_peak_bytes": 1 << 30}, "whatever": [1, {"x": None}]}  # fmt: skip
    odd = {"event": "from_the_future", "attempt": 1, "knobs": "not a dict", "step": "3"}
    view = build(_events(plan, odd), known_events={"run_started", "attempt_started"})
    a = view.attempts[0]
    assert a.predicted["predicted_gpu_peak_bytes"] == 2 << 30
    assert a.predicted["predicted.host_peak_bytes"] == 1 << 30
    assert view.unknown_events["from_the_future"] == 1
    assert "plan_applied" not in view.unknown_events
    line = summary_line(view)
    # Honest: the terminal event says the global batch changed, so it is not "kept".
    assert line.startswith("gave up after 1 attempt (ladder exhausted); max_len 2048 -> 1024, ")
    assert "global batch 8 -> 16" in line and "kept" not in line
    html = page([("j", view)])
    assert "from_the_future x1" in html and "<svg" in html


def test_an_attempt_killed_before_its_first_heartbeat_has_an_empty_bar() -> None:
    """The demo's first attempt was OOM-killed during start-up: no heartbeat, no prediction
    (fit off). Its memory row says so; the page was not written (``max()`` of nothing)."""
    knobs4 = {"micro_batch_size": 4, "gradient_accumulation_steps": 2}
    second = [
        {"event": "attempt_started", "attempt": 2, "knobs": knobs4, "global_batch": 8,
         "phase": 1},
        {"event": "attempt_finished", "attempt": 2, "exit_code": 0, "ended_by": "exit"},
    ]  # fmt: skip
    evs = _events()
    ts = "2026-01-01T00:01:{:02d}.000+00:00"
    evs[-1:-1] = [
        {"run_id": "r", "job": "j", "ts": ts.format(i), **e} for i, e in enumerate(second)
    ]
    beats = {2: [{"global_step": 1, "time_s": 1.0, "rank": 0, "host_rss_bytes": 1 << 30}]}
    view = build(evs, beats)
    assert view.attempts[0].host_peak_bytes is None and view.attempts[1].host_peak_bytes
    html = page([("j", view)])
    assert "not measured (ended before its first heartbeat)" in html


def test_the_host_limit_line_says_how_the_limit_was_enforced() -> None:
    """A memory cgroup counts resident memory, RLIMIT_AS address space: the same 2.5 GiB
    line means different things, so the chart takes the mechanism from the event log."""
    beats = {1: [{"global_step": 1, "time_s": 1.0, "rank": 0, "host_rss_bytes": 1 << 30}]}
    for how, label in (
        ("cgroup_v1", "limit (memory cgroup: resident memory)"),
        ("rlimit_as", "limit (RLIMIT_AS: address space, not RSS)"),
    ):
        applied = {"event": "memory_limit_applied", "attempt": 1, "how": how,
                   "limit_bytes": 5 << 29, "cgroup": None, "reason": None}  # fmt: skip
        view = build(_events(applied), beats, known_events={"memory_limit_applied"})
        assert (view.host_limit_bytes, view.host_limit_how) == (5 << 29, how)
        assert label in page([("j", view)])
    assert "limit (resources.host_memory_limit)" in page(
        [("j", build(_events(), beats, host_limit_bytes=2 << 30))]
    )


def test_a_torn_last_line_and_garbage_are_skipped(tmp_path: Path) -> None:
    log = _copy("phase", tmp_path)
    whole = (log / "heartbeat" / "attempt-3-rank-0.jsonl").read_bytes().count(b"\n")
    with open(log / "events.jsonl", "ab") as f:
        f.write(b'{"event": "run_started", "run_id": "torn", "recov')  # a writer killed mid-line
    with open(log / "heartbeat" / "attempt-3-rank-0.jsonl", "ab") as f:
        f.write(b'not json\n[1, 2]\n{"attempt": 3, "global_ste')
    view = read_log_dir(log)
    assert view.run_id != "torn" and view.outcome == "succeeded"
    assert max(p.step for p in view.points) == 12
    assert len(read_history(log / "heartbeat")[3]) == whole == 10


def test_cli_writes_one_self_contained_page(tmp_path: Path) -> None:
    tiny, phase = _copy("tiny-cpu", tmp_path), _copy("phase", tmp_path)
    out = tmp_path / "both.html"
    res = _report(str(tiny), str(phase), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert f"{tiny}: succeeded after 2 attempts" in res.stdout
    text = out.read_text(encoding="utf-8")
    assert text.count("<section>") == 2
    assert "tiny-cpu" in text and "phase-demo" in text
    # Nothing fetched: no script, no external reference (the SVG namespace is a name only).
    assert "<script" not in text
    for attr in ('src="', "href=", "url(", "@import"):
        assert attr not in text
    single = _report(str(tiny))
    assert single.returncode == 0 and (tiny / "report.html").is_file()


def test_cli_refuses_a_dir_without_events(tmp_path: Path) -> None:
    res = _report(str(tmp_path))
    assert res.returncode == 2 and "no event log" in res.stderr


def test_png_without_a_browser_says_what_to_install(tmp_path: Path) -> None:
    log = _copy("tiny-cpu", tmp_path)
    res = _report(str(log), "--png", str(tmp_path / "r.png"),
                  env={"DSGUARD_CHROMIUM": "no-such-browser-here"})  # fmt: skip
    assert res.returncode == 2
    assert "apt-get install chromium" in res.stderr
    assert not (tmp_path / "r.png").exists()


def test_queue_reads_the_queue_database(tmp_path: Path) -> None:
    """``--queue`` lists the jobs the queue's own SQLite record holds, in queue order, and
    reading it creates nothing where no queue ever ran."""
    from dsguard.queue.store import DB_FILENAME, Store

    assert queue_log_dirs(tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
    store = Store(tmp_path / "q")
    for name, log_dir in (("a", DATA / "tiny-cpu"), ("b", DATA / "phase")):
        store.add([{"name": name, "source": "s", "job_file": "f", "job_yaml": "y",
                    "log_dir": str(log_dir)}])  # fmt: skip
    store.close()
    before = (tmp_path / "q" / DB_FILENAME).stat().st_mtime_ns
    assert queue_log_dirs(tmp_path / "q") == [DATA / "tiny-cpu", DATA / "phase"]
    assert (tmp_path / "q" / DB_FILENAME).stat().st_mtime_ns == before
    res = _report("--queue", env={"DSGUARD_QUEUE_DIR": str(tmp_path / "empty")})
    assert res.returncode == 2 and "no job log dirs" in res.stderr


# -- a real browser ---------------------------------------------------------------------------


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium
    writes), decoded with zlib: no imaging library needed."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    h = ctype = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and ctype in (2, 6)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 4 if ctype == 6 else 3
    raw, stride = zlib.decompress(idat), w * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h):
        start = y * (stride + 1)
        f, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return w, h, rows


@pytest.mark.skipif(find_browser() is None, reason="no headless Chromium installed "
                    "(apt-get install chromium)")  # fmt: skip
def test_the_page_renders_in_a_real_headless_browser(tmp_path: Path) -> None:
    log = _copy("phase", tmp_path)
    png = tmp_path / "r.png"
    res = _report(str(log), "--png", str(png), "--height", "900")
    assert res.returncode == 0, res.stderr
    w, h, rows = _png_pixels(png.read_bytes())
    assert (w, h) == (1240, 900)
    bpp = len(rows[0]) // w
    colours: set[bytes] = set()
    non_white = 0
    for row in rows[::3]:
        for i in range(0, len(row), bpp * 3):
            px = row[i : i + 3]
            colours.add(px)
            non_white += px != b"\xff\xff\xff"
    # A blank or error page has a handful of colours; the charts and text bring hundreds
    # (anti-aliasing), and the phase colours themselves must be on it.
    assert len(colours) > 50, len(colours)
    assert non_white > 2000
    phase1, phase2 = bytes.fromhex("2f6fbf"), bytes.fromhex("c2410c")
    assert phase1 in colours and phase2 in colours
    assert f"picture: {png}" in res.stdout


# -- sparklines and --since -------------------------------------------------------------------


def test_sparkline_scales_to_the_blocks() -> None:
    from dsguard.core.summary import sparkline

    assert sparkline([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5.0, None, 5.0]) == "▁ ▁"
    assert len(sparkline([float(i) for i in range(1000)], width=40)) == 40
    assert sparkline([]) == ""


def test_events_and_status_show_loss_and_memory_lines(tmp_path: Path) -> None:
    log = _copy("phase", tmp_path)
    ev = subprocess.run([sys.executable, "-m", "dsguard", "events", str(log), "--event",
                         "run_succeeded"], capture_output=True, text=True, check=False)  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    lines = ev.stdout.splitlines()
    assert "SUCCEEDED after 3 attempt(s)" in lines[0]
    loss = next(x for x in lines if x.startswith("loss"))
    assert "1 -> 0.08333" in loss and "3 attempt(s)" in loss and "█" in loss
    assert any(x.startswith("host mem") for x in lines)


def test_events_since(tmp_path: Path) -> None:
    from dsguard.cli.report import since_epoch

    assert since_epoch("2h", now=10_000.0) == 10_000.0 - 7200
    assert since_epoch("90s", now=100.0) == 10.0
    assert since_epoch("2026-11-23T16:51:26") == since_epoch("2026-11-23T16:51:26+00:00")
    assert since_epoch("yesterday") is None
    log = _copy("phase", tmp_path)

    def events(*args: str) -> list[str]:
        res = subprocess.run([sys.executable, "-m", "dsguard", "events", str(log), "--json",
                              *args], capture_output=True, text=True, check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout.splitlines()

    everything = events()
    late = events("--since", "2026-11-23T16:51:26")
    assert 0 < len(late) < len(everything)
    assert all(json.loads(x)["ts"] >= "2026-11-23T16:51:26" for x in late)
    assert events("--since", "1m") == []  # the fixture's run is older than a minute


def test_an_unknown_failure_shows_its_probable_kind_and_no_other_does() -> None:
    """failure_detected's probable_kind (core/lexicon.py) is printed beside ``unknown`` as
    "probably", never in its place, and never beside a kind the rules named."""
    evs = _events()
    fd = next(e for e in evs if e["event"] == "failure_detected")
    fd.update(kind="unknown", probable_kind="checkpoint_error", probable_words=["state_dict"])
    html = page([("j", build(evs))])
    assert "unknown (probably checkpoint_error)" in html
    fd.update(kind="cuda_oom")
    view = build(evs)
    assert view.attempts[0].kind_words == "cuda_oom"
    assert "probably" not in page([("j", view)])
