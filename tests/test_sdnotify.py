"""sd_notify client against real AF_UNIX datagram sockets (a path one and an abstract one)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsguard.run.sdnotify import Notifier, child_env


class Receiver:
    """What systemd does: a bound SOCK_DGRAM socket that reads one notification per datagram."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(2.0)

    def recv(self) -> str:
        return self.sock.recv(65536).decode()

    def pending(self) -> bool:
        self.sock.setblocking(False)
        try:
            self.sock.recv(65536)
        except BlockingIOError:
            return False
        finally:
            self.sock.settimeout(2.0)
        return True


@pytest.fixture
def path_socket() -> Iterator[tuple[str, Receiver]]:
    # sun_path holds 108 bytes: pytest's tmp_path can be longer, so use a short dir in /tmp.
    d = tempfile.mkdtemp(prefix="sdn", dir="/tmp")
    path = os.path.join(d, "notify")
    rx = Receiver(path)
    yield path, rx
    rx.sock.close()
    shutil.rmtree(d)


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, Receiver]]:
    name = f"dsguard-test-{secrets.token_hex(6)}"
    rx = Receiver(b"\0" + name.encode())
    yield "@" + name, rx
    rx.sock.close()


def test_every_message_arrives_on_a_path_socket(path_socket: tuple[str, Receiver]) -> None:
    addr, rx = path_socket
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert n.enabled
    assert n.ready() and rx.recv() == "READY=1"
    assert n.status("attempt 2 running") and rx.recv() == "STATUS=attempt 2 running"
    assert n.watchdog() and rx.recv() == "WATCHDOG=1"
    assert n.stopping() and rx.recv() == "STOPPING=1"
    assert n.extend_timeout(30_000_000) and rx.recv() == "EXTEND_TIMEOUT_USEC=30000000"
    assert n.notify("STATUS=x", "WATCHDOG=1") and rx.recv() == "STATUS=x\nWATCHDOG=1"


def test_abstract_socket_name(abstract_socket: tuple[str, Receiver]) -> None:
    """``@name`` is the abstract namespace (systemd's default for user managers in containers)."""
    addr, rx = abstract_socket
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert n.ready()
    assert rx.recv() == "READY=1"


def test_status_is_one_line_and_sent_once_per_change(path_socket: tuple[str, Receiver]) -> None:
    """A multi-line STATUS would be cut by systemd; the loop may call status() every 50 ms."""
    addr, rx = path_socket
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert n.status("attempt 3\nrunning   cuda_oom")
    assert rx.recv() == "STATUS=attempt 3 running cuda_oom"
    assert not n.status("attempt 3 running cuda_oom")  # unchanged: nothing sent
    assert not rx.pending()
    assert n.status("attempt 4")
    assert rx.recv() == "STATUS=attempt 4"


def test_without_notify_socket_everything_is_a_silent_no_op() -> None:
    warnings: list[str] = []
    n = Notifier({}, warn=warnings.append)
    assert not n.enabled
    assert not any([n.ready(), n.status("x"), n.watchdog(), n.stopping(), n.extend_timeout(1)])
    assert n.watchdog_interval_s() is None
    assert warnings == []


def test_a_dead_socket_never_raises_and_warns_once_per_streak(tmp_path: Path) -> None:
    """systemd gone (or restarting): the supervision goes on; one warning, not one per ping."""
    d = tempfile.mkdtemp(prefix="sdn", dir="/tmp")
    addr = os.path.join(d, "notify")
    warnings: list[str] = []
    n = Notifier({"NOTIFY_SOCKET": addr}, warn=warnings.append)
    assert not n.ready()
    assert not n.watchdog()
    assert len(warnings) == 1 and "READY=1" in warnings[0]
    rx = Receiver(addr)  # the manager is back
    try:
        assert n.watchdog() and rx.recv() == "WATCHDOG=1"
        rx.sock.close()
        os.unlink(addr)
        assert not n.watchdog()
        assert len(warnings) == 2  # a new failure streak is reported again
    finally:
        shutil.rmtree(d)


def test_a_failing_warn_callback_does_not_escape() -> None:
    def boom(_: str) -> None:
        raise RuntimeError("logger broken")

    n = Notifier({"NOTIFY_SOCKET": "/nonexistent/dsguard/notify"}, warn=boom)
    assert not n.ready()


def test_unsupported_address_disables_with_a_warning() -> None:
    warnings: list[str] = []
    n = Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}, warn=warnings.append)
    assert not n.enabled and not n.ready()
    assert len(warnings) == 1 and "vsock" in warnings[0]


def test_watchdog_interval_and_ping_period() -> None:
    me = os.getpid()
    n = Notifier({"WATCHDOG_USEC": "180000000", "WATCHDOG_PID": str(me)})
    assert n.watchdog_interval_s() == 180.0
    assert n.watchdog_ping_period_s() == 90.0
    # No WATCHDOG_PID: the interval applies to whoever reads it.
    assert Notifier({"WATCHDOG_USEC": "2000000"}).watchdog_interval_s() == 2.0
    # Meant for another process (inherited from a watched parent): not ours to ping.
    assert (
        Notifier(
            {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, pid=me + 1
        ).watchdog_interval_s()
        is None
    )
    for bad in ("", "0", "-5", "soon"):
        assert Notifier({"WATCHDOG_USEC": bad}).watchdog_interval_s() is None


def test_watchdog_if_due_pings_at_half_the_interval(path_socket: tuple[str, Receiver]) -> None:
    addr, rx = path_socket
    now = [100.0]
    n = Notifier({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "10000000"}, monotonic=lambda: now[0])
    assert n.watchdog_if_due() and rx.recv() == "WATCHDOG=1"  # first call always pings
    now[0] += 4.9
    assert not n.watchdog_if_due()
    now[0] += 0.2
    assert n.watchdog_if_due() and rx.recv() == "WATCHDOG=1"
    assert not rx.pending()


def test_no_watchdog_configured_means_no_pings(path_socket: tuple[str, Receiver]) -> None:
    addr, rx = path_socket
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert not n.watchdog_if_due()
    assert not rx.pending()


def test_child_env_strips_the_systemd_variables() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2", "PATH": "/bin"}
    assert child_env(env) == {"PATH": "/bin"}
