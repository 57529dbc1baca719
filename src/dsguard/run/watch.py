"""Stream an attempt's output: tee it to the attempt log (and the console) and classify it live.

The child must never block on a full pipe, whatever it prints: the pump thread does nothing
but read, append to the log, and run the classifier over the new text. Fatal lines (a CUDA
OOM on any rank) are reported through ``on_fatal`` the moment they are read, so the run loop
can end the attempt before the surviving ranks sit in an NCCL collective for 10-30 minutes.
"""

from __future__ import annotations

import codecs
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from dsguard.core.classify import Evidence, StreamClassifier

_READ_BYTES = 1 << 20
#: When a read returned little, wait this long before the next one: a child printing 1,000
#: short lines a second then costs ~10 wakeups/s instead of 1,000 (bench P4: 2.6 % -> <1 % of
#: a core), while a flood (full reads) is drained without pause. It bounds detection latency
#: of a fatal line to ~0.1 s (bench P1 target 0.5 s). The wait ends at once on stop().
_COALESCE_S = 0.1
_SMALL_READ_BYTES = 4096


class OutputPump:
    """Owns the read end of the attempt's output pipe until EOF or :meth:`stop`."""

    def __init__(
        self,
        fd: int,
        log_path: Path,
        classifier: StreamClassifier,
        *,
        on_fatal: Callable[[Evidence], None],
        echo: BinaryIO | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fd = fd
        self._log_path = log_path
        self._classifier = classifier
        self._on_fatal = on_fatal
        self._echo = echo
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dsguard-output", daemon=True)
        self.bytes_read = 0
        self.last_output_at = monotonic()
        self.error: BaseException | None = None

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

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            with open(self._log_path, "ab", buffering=0) as log:
                while True:
                    ready, _, _ = select.select([self._fd], [], [], 0.2)
                    if not ready:
                        if self._stop.is_set():
                            break
                        continue
                    data = os.read(self._fd, _READ_BYTES)
                    if not data:
                        break
                    self.bytes_read += len(data)
                    self.last_output_at = self._monotonic()
                    log.write(data)
                    self._write_echo(data)
                    self._handle(self._classifier.feed(decoder.decode(data)))
                    if len(data) < _SMALL_READ_BYTES:
                        self._stop.wait(_COALESCE_S)
                self._handle(self._classifier.feed(decoder.decode(b"", final=True)))
                self._handle(self._classifier.close())
        except BaseException as exc:  # surfaced by the run loop: a dsguard fault, not the child's
            self.error = exc
