"""Stream an attempt's output: tee it to the attempt log (and the console) and classify it live.

The child must never block on a full pipe, whatever it prints: the pump thread does nothing
but read, append to the log, and run the classifier over the new text. Fatal lines (a CUDA
OOM on any rank) are reported through ``on_fatal`` the moment they are read, so the run loop
can end the attempt before the surviving ranks sit in an NCCL collective for 10-30 minutes.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from dsguard.core.classify import Evidence, StreamClassifier
from dsguard.core.events import LogWriteFailed
from dsguard.run.events import redact_output
from dsguard.run.safefs import open_file, write_all

_READ_BYTES = 1 << 20
#: When a read returned little, wait this long before the next one: a child printing 1,000
#: short lines a second then costs ~10 wakeups/s instead of 1,000 (bench P4: 2.6 % -> <1 % of
#: a core), while a flood (full reads) is drained without pause. It bounds detection latency
#: of a fatal line to ~0.1 s (bench P1 target 0.5 s). The wait ends at once on stop().
_COALESCE_S = 0.1
_SMALL_READ_BYTES = 4096


#: After a failed attempt-log write (disk full), drop output for this long before trying the
#: disk again: a failing write per read would cost a syscall per chunk for nothing, and space
#: freed by a cleanup job or a rotated checkpoint should be used within a second.
_LOG_RETRY_S = 1.0

#: Output after the last line end is held back (until its line ends, the output pauses, or
#: EOF) so that a credential split across two reads is redacted whole; a line longer than
#: this goes out unfinished rather than held without bound.
_MAX_HELD_BYTES = 65536


class OutputPump:
    """Owns the read end of the attempt's output pipe until EOF or :meth:`stop`.

    Writing the attempt log can fail (ENOSPC, EIO, EDQUOT; a symlink planted at the path is
    refused the same way): the pump then keeps reading and classifying, because a child
    blocked in ``write()`` on a pipe nobody drains looks hung and would be killed for it.
    What could not be written is counted in :attr:`log_dropped_bytes` and dropped; the first
    failure is kept as :attr:`log_failure` (and passed to ``on_log_failed``, once per
    attempt); writing is retried every ``_LOG_RETRY_S``, and the gap is marked in the log
    when it resumes.
    """

    def __init__(
        self,
        fd: int,
        log_path: Path,
        classifier: StreamClassifier,
        *,
        on_fatal: Callable[[Evidence], None],
        echo: BinaryIO | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        on_log_failed: Callable[[LogWriteFailed], None] | None = None,
    ) -> None:
        self._fd = fd
        self._log_path = log_path
        self._classifier = classifier
        self._on_fatal = on_fatal
        self._on_log_failed = on_log_failed
        self._echo = echo
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dsguard-output", daemon=True)
        self._log_fd: int | None = None
        self._retry_at = 0.0
        self._gap_bytes = 0
        self._held = b""
        self.bytes_read = 0
        self.last_output_at = monotonic()
        self.error: BaseException | None = None
        #: Output bytes read but not in the attempt log (disk full, refused path).
        self.log_dropped_bytes = 0
        #: Failed writes (or opens) of the attempt log.
        self.log_write_failures = 0
        #: The first failure, as the ``log_write_failed`` event records it.
        self.log_failure: LogWriteFailed | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next idle poll, even without EOF (a stray process may hold the pipe)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _handle(self, evidence: list[Evidence]) -> None:
        for ev in evidence:
            if ev.fatal:
                self._on_fatal(ev)

    def _write_echo(self, data: bytes) -> None:
        if self._echo is None:
            return
        try:
            self._echo.write(data)
            self._echo.flush()
        except (OSError, ValueError):
            # A closed or broken console must not stop the log or the classifier.
            self._echo = None

    def _log_failed(self, exc: OSError, dropped: int) -> None:
        self.log_write_failures += 1
        self.log_dropped_bytes += dropped
        self._gap_bytes += dropped
        self._retry_at = self._monotonic() + _LOG_RETRY_S
        if self.log_failure is not None:
            return
        self.log_failure = LogWriteFailed(
            path=str(self._log_path), errno=exc.errno or 0, error=str(exc),
            dropped_bytes=dropped,
        )  # fmt: skip
        if self._on_log_failed is not None:
            # A reporting problem must not stop the drain: the child would block on the pipe.
            with contextlib.suppress(Exception):
                self._on_log_failed(self.log_failure)

    def _open_log(self) -> int | None:
        if self._log_fd is None and self._monotonic() >= self._retry_at:
            try:
                # Never through a symlink or into a FIFO planted at the path (see safefs).
                self._log_fd = open_file(self._log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            except OSError as exc:
                self._log_failed(exc, 0)
        return self._log_fd

    def _write_log(self, data: bytes) -> None:
        """Append ``data`` to the attempt log, or count it as dropped; never raise."""
        if self._monotonic() < self._retry_at or (fd := self._open_log()) is None:
            self.log_dropped_bytes += len(data)
            self._gap_bytes += len(data)
            return
        if self._gap_bytes:
            mark = f"\n[dsguard: {self._gap_bytes} bytes of output not logged: write failed]\n"
            n, err = write_all(fd, mark.encode())
            if err is not None:
                self._log_failed(err, len(data))
                return
            self._gap_bytes = 0
        n, err = write_all(fd, data)
        if err is not None:
            self._log_failed(err, len(data) - n)

    def _out(self, data: bytes, *, flush: bool = False) -> None:
        """Log and echo ``data`` through the redaction (``run.events.redact_output``): a
        script that prints ``--hub_token=hf_...`` or its environment must not leave the token
        in ``attempt-N.log``. Whole lines only (``\\n`` or a progress bar's ``\\r``), unless
        ``flush``: a token cut by a read boundary would otherwise escape the rules."""
        buf = self._held + data
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        if flush or len(buf) - cut > _MAX_HELD_BYTES:
            cut = len(buf)
        self._held = buf[cut:]
        if cut:
            out = redact_output(buf[:cut])
            self._write_log(out)
            self._write_echo(out)

    def _close_log(self) -> None:
        if self._log_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = None

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            self._open_log()
            while True:
                ready, _, _ = select.select([self._fd], [], [], 0.2)
                if not ready:
                    # The output paused: a fatal message written without its newline (a rank
                    # that then stalls) is judged now, not at the hang timeout, and shown.
                    self._out(b"", flush=True)
                    self._handle(self._classifier.check_partial())
                    if self._stop.is_set():
                        break
                    continue
                data = os.read(self._fd, _READ_BYTES)
                if not data:
                    break
                self.bytes_read += len(data)
                self.last_output_at = self._monotonic()
                self._out(data)
                self._handle(self._classifier.feed(decoder.decode(data)))
                if len(data) < _SMALL_READ_BYTES:
                    self._stop.wait(_COALESCE_S)
            self._handle(self._classifier.feed(decoder.decode(b"", final=True)))
            self._handle(self._classifier.close())
        except BaseException as exc:  # surfaced by the run loop: a dsguard fault, not the child's
            self.error = exc
        finally:
            with contextlib.suppress(Exception):  # never lose the end of the output
                self._out(b"", flush=True)
            self._close_log()
