"""``dsguard events --follow``: the event log's existing events, then each new one as it lands.

The writer (:class:`dsguard.run.events.EventLog`) appends whole lines with one
``write`` each, but a reader polling the file can still catch the end of a write in
progress, or a line written by a dsguard that was killed mid-write. So the reader keeps the
bytes after the last newline and yields a line only once its newline has arrived: never a
torn line, never a line twice. Lines are decoded as whole lines, so a multi-byte UTF-8
character split across two reads is never mangled.

It also survives the lifecycle of the file around it: the log not existing yet (``dsguard
run`` not started), and the file being replaced or truncated (the log dir deleted and the
job rerun): it then starts reading the new file from the beginning.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_READ_BYTES = 1 << 16


def follow(
    path: Path,
    *,
    poll_s: float = 0.25,
    stop: threading.Event | None = None,
    from_start: bool = True,
    on_bad_line: Callable[[bytes], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield every event of ``path`` (JSON objects, one per line), then follow appends.

    Args:
        poll_s: how long to wait for new data when the file has nothing new.
        stop: the generator returns once this is set (checked between polls; the wait itself
            is ``stop.wait(poll_s)``, so setting it ends the follow promptly). None: follow
            until the consumer stops iterating (Ctrl-C in the CLI).
        from_start: False skips what is already in the file (``tail -f -n 0``).
        on_bad_line: called with a complete line that is not a JSON object (skipped).
    """
    event = stop if stop is not None else threading.Event()
    fh = None
    ident: tuple[int, int] | None = None
    pending = b""
    skip_existing = not from_start
    try:
        while not event.is_set():
            if fh is None:
                try:
                    fh = open(path, "rb")  # noqa: SIM115 - held across yields
                except FileNotFoundError:
                    skip_existing = False  # whatever appears later is new
                    event.wait(poll_s)
                    continue
                st = os.fstat(fh.fileno())
                ident = (st.st_dev, st.st_ino)
                pending = b""
                if skip_existing:
                    fh.seek(0, os.SEEK_END)
                    skip_existing = False
            chunk = fh.read(_READ_BYTES)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    ev = _parse(raw)
                    if ev is not None:
                        yield ev
                    elif raw.strip() and on_bad_line is not None:
                        on_bad_line(raw)
                continue
            # Nothing new: was the file replaced or truncated under us?
            if _replaced(path, ident, fh.tell()):
                fh.close()
                fh = None
                continue
            event.wait(poll_s)
    finally:
        if fh is not None:
            fh.close()


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _replaced(path: Path, ident: tuple[int, int] | None, pos: int) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False  # deleted: keep the old file open until a new one appears
    return (st.st_dev, st.st_ino) != ident or st.st_size < pos
