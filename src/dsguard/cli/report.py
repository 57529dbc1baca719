"""``dsguard report``: the page of one run (or one section per log dir, or per queued job)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dsguard.exitcodes import EXIT_OK, EXIT_USAGE
from dsguard.job.model import Job


def cmd_report(ns: argparse.Namespace) -> int:
    from dsguard.core.summary import summary_line
    from dsguard.queue.store import queue_dir
    from dsguard.report.html import page
    from dsguard.report.load import queue_log_dirs, read_log_dir

    dirs = [Path(p) for p in ns.log_dirs]
    if ns.queue:
        dirs += queue_log_dirs()
        if not dirs:
            print(f"dsguard report: no job log dirs found for the queue in {queue_dir()}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
    if not dirs:
        print("dsguard report: give a log dir (or several, or --queue)", file=sys.stderr)
        return EXIT_USAGE
    views = []
    for d in dirs:
        try:
            view = read_log_dir(d)
        except (FileNotFoundError, NotADirectoryError) as exc:
            print(f"dsguard report: {exc}", file=sys.stderr)
            return EXIT_USAGE
        views.append((f"{view.job or d.name}  [{d}]", view))
        print(f"{d}: {summary_line(view)}")
    out = Path(ns.out) if ns.out else (dirs[0] / "report.html" if len(dirs) == 1 else
                                       Path("dsguard-report.html"))  # fmt: skip
    from dsguard.run.safefs import write_atomic

    write_atomic(out, page(views).encode(), mode=0o644, check_owner=False)
    print(f"report: {out}")
    if ns.png:
        from dsguard.report.png import NoBrowserError, screenshot

        try:
            # Chromium shoots the window, not the page: tall enough for every section (the
            # header, charts and table of a run, then about 80 px per attempt).
            rows = sum(len(v.attempts) for _, v in views)
            height = ns.height or min(16000, 1000 * len(views) + 80 * rows)
            screenshot(out, Path(ns.png), height=height)
        except (NoBrowserError, RuntimeError) as exc:
            print(f"dsguard report: --png: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"picture: {ns.png}")
    return EXIT_OK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rp = sub.add_parser(
        "report",
        help="one self-contained HTML page of a run: timeline, knobs, loss, memory",
        description="dsguard report LOG_DIR [LOG_DIR ...] [--out F.html] [--png F.png]; "
        "several log dirs (or --queue) give one section per job.",
    )
    rp.add_argument("log_dirs", nargs="*", metavar="LOG_DIR")
    rp.add_argument("--out", help="HTML file (default: LOG_DIR/report.html)")
    rp.add_argument("--png", help="also render the page to this PNG (needs Chromium)")
    rp.add_argument("--height", type=int, help="PNG height in pixels (default: fits the page)")
    rp.add_argument("--queue", action="store_true", help="every job of the queue")
    rp.set_defaults(func=cmd_report)


def run_outputs(job: Job) -> tuple[tuple[Callable[[dict[str, Any], Any], None], ...],
                                   Callable[[], None]]:  # fmt: skip
    """The event-log listeners for the job's ``notify:`` and ``metrics:``, and what to call
    when the run is over (lets queued notifications go out, stops the metrics threads)."""
    listeners: list[Callable[[dict[str, Any], Any], None]] = []
    closers: list[Callable[[], None]] = []
    out = job.outputs
    if out.notify:
        from dsguard.report.notify import Notifications

        notes = Notifications(out.notify, job.log_dir)
        listeners.append(notes)
        closers.append(notes.close)
    if out.metrics_textfile is not None or out.metrics_http_port is not None:
        from dsguard.report.metrics import Metrics

        metrics = Metrics(job.name, job.log_dir, textfile=out.metrics_textfile,
                          http_port=out.metrics_http_port)  # fmt: skip
        listeners.append(metrics)
        closers.append(metrics.close)

    def close() -> None:
        for fn in closers:
            fn()

    return tuple(listeners), close


_AGO = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)\s*", re.IGNORECASE)
_UNIT_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def since_epoch(text: str, now: float | None = None) -> float | None:
    """``--since``: ``2h`` (ago), ``30m``, ``90s``, ``1d``, or an ISO time (UTC unless it
    says otherwise), as seconds since the epoch; None when it is neither."""
    m = _AGO.fullmatch(text)
    if m is not None:
        t = time.time() if now is None else now
        return t - float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
