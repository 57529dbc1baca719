"""sd_notify(3) client: tell systemd that dsguard is ready, alive, busy stopping, and why.

Under ``Type=notify`` systemd passes a datagram socket address in ``NOTIFY_SOCKET`` (a path,
or ``@name`` for the abstract namespace) and, with ``WatchdogSec=``, the watchdog interval in
``WATCHDOG_USEC`` (for the pid in ``WATCHDOG_PID``). The protocol is newline-separated
``KEY=VALUE`` lines in one datagram; systemd documents it as stable and recommends a
standalone implementation over a dependency (``sd_notify(3)``, "Standalone
Implementations"), so this is ~100 lines of stdlib instead of a C extension.

Two rules shape the code:

* **Never raise into the caller.** A notification is advice to the service manager; a
  failed send (manager restarting, socket gone, queue full) must not end a supervision that
  is keeping a training job alive. Failures are reported once through ``warn`` and sending
  goes on; ``sd_notify(3)`` itself recommends ignoring the return value.
* **No-op without systemd.** Without ``NOTIFY_SOCKET`` every call returns False at once, so the
  run loop calls these unconditionally and ``dsguard run`` in a terminal behaves the same.

Children must not inherit ``NOTIFY_SOCKET``/``WATCHDOG_*`` (a training library that speaks
sd_notify would otherwise report READY or ping the watchdog for dsguard, or be rejected
noisily under ``NotifyAccess=main``): build their environment with :func:`child_env`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV = "WATCHDOG_USEC"
WATCHDOG_PID_ENV = "WATCHDOG_PID"
#: Variables that describe *dsguard's* relation to systemd; never pass them to a child.
SYSTEMD_ENV_VARS: tuple[str, ...] = (NOTIFY_SOCKET_ENV, WATCHDOG_USEC_ENV, WATCHDOG_PID_ENV)

#: A send blocks only while systemd's receive queue is full (a wedged manager); bound it so the
#: run loop, which also owns the watchdog pings, never waits long on advice.
SEND_TIMEOUT_S = 1.0
#: systemd truncates nothing, but a STATUS= line is shown in ``systemctl status``; keep it short.
STATUS_MAX_CHARS = 400


def _stderr_warn(message: str) -> None:
    try:
        sys.stderr.write(f"dsguard: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the sd_notify/watchdog variables (for every process dsguard starts)."""
    return {k: v for k, v in env.items() if k not in SYSTEMD_ENV_VARS}


def _socket_address(raw: str) -> str | bytes | None:
    """``NOTIFY_SOCKET`` as a ``sendto`` address: ``@name`` is abstract (leading NUL byte)."""
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    # systemd also allows vsock:CID:PORT (VMs); dsguard does not run as a VM's init.
    return None


class Notifier:
    """One service's connection to its manager, read from an environment at construction.

    Args:
        environ: where ``NOTIFY_SOCKET``/``WATCHDOG_*`` are read (default: ``os.environ``).
        warn: called with one line when a send fails (once until a send succeeds again) or the
            socket address is unusable; default: a line on stderr, which is the journal under
            systemd. Must not raise.
        monotonic: clock for :meth:`watchdog_if_due`, injectable for tests.
        pid: this process's pid, compared with ``WATCHDOG_PID`` (default: ``os.getpid()``).
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        warn: Callable[[str], None] = _stderr_warn,
        monotonic: Callable[[], float] = time.monotonic,
        pid: int | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self._warn = warn
        self._monotonic = monotonic
        self._failing = False
        self._last_status: str | None = None
        self._last_ping: float | None = None
        raw = env.get(NOTIFY_SOCKET_ENV, "")
        self.address: str | bytes | None = _socket_address(raw) if raw else None
        if raw and self.address is None:
            self._report(f"sd_notify disabled: unsupported NOTIFY_SOCKET {raw!r}")
        self.watchdog_usec: int | None = _watchdog_usec(env, os.getpid() if pid is None else pid)

    @property
    def enabled(self) -> bool:
        """True when a notification socket is configured (dsguard runs under Type=notify)."""
        return self.address is not None

    # -- the protocol ------------------------------------------------------------------------

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; True if it was sent.

        Never raises: a failure is reported through ``warn`` (once per failure streak) and the
        caller carries on.
        """
        if self.address is None:
            return False
        try:
            payload = "\n".join(assignments).encode("utf-8", errors="replace")
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(SEND_TIMEOUT_S)
                sock.sendto(payload, self.address)
        except (OSError, ValueError) as exc:
            if not self._failing:
                self._failing = True
                self._report(f"sd_notify failed ({', '.join(assignments)[:80]}): {exc!r}")
            return False
        self._failing = False
        return True

    def ready(self) -> bool:
        """READY=1: startup is over (send after the first attempt is spawned, not when healthy:
        a model load can outlast ``TimeoutStartSec``)."""
        return self.notify("READY=1")

    def status(self, text: str) -> bool:
        """STATUS=: the one-line text ``systemctl status`` shows. Identical consecutive texts are
        sent once, so the run loop may call this every iteration."""
        line = " ".join(text.split())[:STATUS_MAX_CHARS]
        if line == self._last_status:
            return False
        sent = self.notify(f"STATUS={line}")
        if sent:
            self._last_status = line
        return sent

    def watchdog(self) -> bool:
        """WATCHDOG=1: dsguard's main loop is alive. Call it from the loop itself, never from a
        helper thread, or a wedged loop would keep looking alive."""
        sent = self.notify("WATCHDOG=1")
        if sent:
            self._last_ping = self._monotonic()
        return sent

    def watchdog_if_due(self) -> bool:
        """Ping only when half the watchdog interval has passed since the last ping (or none was
        sent yet); cheap enough for a 50 ms poll loop. False when no watchdog is configured."""
        period = self.watchdog_ping_period_s()
        if period is None or self.address is None:
            return False
        if self._last_ping is not None and self._monotonic() - self._last_ping < period:
            return False
        return self.watchdog()

    def stopping(self) -> bool:
        """STOPPING=1: a stop has begun (the unit shows "deactivating"; final since systemd 259)."""
        return self.notify("STOPPING=1")

    def extend_timeout(self, usec: int) -> bool:
        """EXTEND_TIMEOUT_USEC=: the current start/stop/runtime timeout is extended to at least
        ``usec`` from now. Send it repeatedly (before it runs out) while a graceful stop
        outlasts ``TimeoutStopSec``; otherwise systemd SIGKILLs a rank mid-checkpoint."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(0, int(usec))}")

    def watchdog_interval_s(self) -> float | None:
        """The unit's ``WatchdogSec`` in seconds, or None when no watchdog applies to us."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 1_000_000

    def watchdog_ping_period_s(self) -> float | None:
        """How often to ping: half the interval (``sd_watchdog_enabled(3)``)."""
        interval = self.watchdog_interval_s()
        return None if interval is None else interval / 2

    def _report(self, message: str) -> None:
        # A broken logger must not end a supervision either.
        with contextlib.suppress(Exception):
            self._warn(message)


def _watchdog_usec(env: Mapping[str, str], pid: int) -> int | None:
    """``WATCHDOG_USEC`` if it is meant for ``pid`` (``WATCHDOG_PID`` unset or equal)."""
    raw = env.get(WATCHDOG_USEC_ENV)
    if not raw:
        return None
    owner = env.get(WATCHDOG_PID_ENV)
    if owner:
        try:
            if int(owner) != pid:
                return None  # inherited from a parent that is the watched process, not us
        except ValueError:
            return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec if usec > 0 else None


# -- module-level convenience: one notifier for this process, from os.environ ----------------

_default: Notifier | None = None


def default_notifier() -> Notifier:
    """The process-wide notifier, built from ``os.environ`` on first use."""
    global _default
    if _default is None:
        _default = Notifier()
    return _default


def ready() -> bool:
    return default_notifier().ready()


def status(text: str) -> bool:
    return default_notifier().status(text)


def watchdog() -> bool:
    return default_notifier().watchdog()


def stopping() -> bool:
    return default_notifier().stopping()


def extend_timeout(usec: int) -> bool:
    return default_notifier().extend_timeout(usec)


def watchdog_interval_s() -> float | None:
    return default_notifier().watchdog_interval_s()
