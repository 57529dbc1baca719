"""``follow``: a real reader against real concurrent writer threads on a real file."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsguard.run.events import EventLog
from dsguard.run.follow import follow


def collect(
    it: Iterator[dict[str, Any]], n: int, stop: threading.Event, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Take ``n`` events (or fail after ``timeout_s``) and end the follow."""
    got: list[dict[str, Any]] = []
    timer = threading.Timer(timeout_s, stop.set)
    timer.start()
    try:
        for ev in it:
            got.append(ev)
            if len(got) == n:
                break
    finally:
        timer.cancel()
        stop.set()
    return got


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_existing_then_appended_events_from_the_real_event_log(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, run_id="R")
    # Real event records (the log refuses made-up ones); lines of very different lengths.
    for i in range(3):
        log.emit("build_lock_removed", path=f"old/{i}")

    def writer() -> None:
        for i in range(200):
            log.emit("build_lock_removed", path=f"new/{i}/" + "x" * (i * 37 % 5000))
            if i % 20 == 0:
                time.sleep(0.01)

    stop = threading.Event()
    it = follow(path, poll_s=0.01, stop=stop)
    t = in_thread(writer)
    got = collect(it, 203, stop)
    t.join()
    log.close()
    assert [int(e["path"].split("/")[1]) for e in got] == [0, 1, 2, *range(200)]
    assert [e["path"].split("/")[0] for e in got[:4]] == ["old", "old", "old", "new"]


def test_a_line_written_in_pieces_is_yielded_once_whole(tmp_path: Path) -> None:
    """Writes that end mid-line (and mid UTF-8 character) never surface as torn events."""
    path = tmp_path / "events.jsonl"
    lines = [
        json.dumps({"event": "e", "n": i, "text": "µ-batch → 4 ✓"}, ensure_ascii=False).encode()
        + b"\n"
        for i in range(50)
    ]
    blob = b"".join(lines)
    cut_points = sorted({(i * 7919) % len(blob) for i in range(120)} | {len(blob)})
    wrote_some = threading.Event()

    def writer() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = 0
        for cut in cut_points:
            os.write(fd, blob[start:cut])
            start = cut
            wrote_some.set()
            time.sleep(0.002)
        os.close(fd)

    stop = threading.Event()
    t = in_thread(writer)
    wrote_some.wait(5)
    got = collect(follow(path, poll_s=0.001, stop=stop), 50, stop)
    t.join()
    assert [e["n"] for e in got] == list(range(50))
    assert all(e["text"] == "µ-batch → 4 ✓" for e in got)


def test_waits_for_the_file_to_appear(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "events.jsonl"
    stop = threading.Event()
    it = follow(path, poll_s=0.01, stop=stop)

    def writer() -> None:
        time.sleep(0.1)
        log = EventLog(path, run_id="R")
        log.emit("build_lock_removed", path="a")
        log.emit("hang_suspected", silent_s=1.0, gpu_busy=True)
        log.close()

    t = in_thread(writer)
    got = collect(it, 2, stop)
    t.join()
    assert [e["event"] for e in got] == ["build_lock_removed", "hang_suspected"]


def test_stop_ends_the_follow_promptly(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "a"}\n')
    stop = threading.Event()
    got: list[dict[str, Any]] = []
    t0 = time.monotonic()
    threading.Timer(0.2, stop.set).start()
    got.extend(follow(path, poll_s=5.0, stop=stop))  # a long poll is cut short by stop
    assert got == [{"event": "a"}]
    assert time.monotonic() - t0 < 2.0


def test_from_start_false_skips_existing(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "old"}\n')
    stop = threading.Event()
    it = follow(path, poll_s=0.01, stop=stop, from_start=False)

    def writer() -> None:
        time.sleep(0.1)
        with open(path, "a") as fh:
            fh.write('{"event": "new"}\n')

    t = in_thread(writer)
    got = collect(it, 1, stop)
    t.join()
    assert got == [{"event": "new"}]


def test_replaced_file_is_read_from_its_start(tmp_path: Path) -> None:
    """The log dir wiped and the job rerun: follow the new file, not the deleted one."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "first-run"}\n')
    stop = threading.Event()
    it = follow(path, poll_s=0.01, stop=stop)
    assert next(it) == {"event": "first-run"}

    def writer() -> None:
        time.sleep(0.1)
        path.unlink()
        time.sleep(0.1)
        tmp = tmp_path / "new.jsonl"
        tmp.write_text('{"event": "second-run"}\n')
        tmp.rename(path)

    t = in_thread(writer)
    got = collect(it, 1, stop)
    t.join()
    assert got == [{"event": "second-run"}]


def test_truncated_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "a", "pad": "' + "x" * 100 + '"}\n')
    stop = threading.Event()
    it = follow(path, poll_s=0.01, stop=stop)
    assert next(it)["event"] == "a"

    def writer() -> None:
        time.sleep(0.1)
        path.write_text('{"event": "b"}\n')  # O_TRUNC then a shorter write

    t = in_thread(writer)
    got = collect(it, 1, stop)
    t.join()
    assert got == [{"event": "b"}]


@pytest.mark.parametrize("bad", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_bad_lines_are_skipped_and_reported(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "a"}\n' + bad + b'\n\n{"event": "b"}\n')
    stop = threading.Event()
    bad_lines: list[bytes] = []
    got = collect(follow(path, poll_s=0.01, stop=stop, on_bad_line=bad_lines.append), 2, stop)
    assert got == [{"event": "a"}, {"event": "b"}]
    assert bad_lines == [bad]
