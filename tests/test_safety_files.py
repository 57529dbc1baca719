"""Issue 13, what dsguard writes on disk: symlinks (2), secrets and modes (3), a patched
trainer_state.json's mode and owner (4), a full log disk (5), a torn last event line (7), and
checkpoints that are link loops or unreadable (8).

Real symlinks, real permission bits, a real full filesystem (a 1 MiB tmpfs mounted here,
root only) and real children; unreadable-as-a-user cases drop privileges to ``nobody`` in a
child, because root reads through any permission bits.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dsguard.core.classify import StreamClassifier
from dsguard.core.events import LogWriteFailed
from dsguard.run.checkpoints import (
    QUARANTINE_DIRNAME,
    list_checkpoints,
    quarantine,
    select_checkpoint,
)
from dsguard.run.events import EventLog, read_events
from dsguard.run.lock import acquire
from dsguard.run.logdir import ensure_log_dir
from dsguard.run.resume import BACKUP_SUFFIX, patch_train_batch_size
from dsguard.run.safefs import UnsafePathError, open_file, write_atomic
from dsguard.run.state import RunState, StateMachine, write_json_atomic
from dsguard.run.watch import OutputPump
from tests.conftest import FAKE_TRAINER, RunResult, write_job
from tests.test_checkpoints import make_checkpoint

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (chown, mount, setuid)")

HF_SECRET = "hf_" + "Ab3" * 12
ENV_SECRETS = {"HF_TOKEN": "hf-env-secret-1234567890", "WANDB_API_KEY": "wandb0123456789abcdef"}


def _digest(root: Path) -> dict[str, str]:
    """Every file below ``root`` and its hash (links not followed)."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    return victim


# -- 2: symlinks -------------------------------------------------------------------------------


def test_event_log_refuses_a_symlink_at_events_jsonl(tmp_path: Path) -> None:
    logs = tmp_path / "runs"
    logs.mkdir()
    victim = _victim(tmp_path)
    (logs / "events.jsonl").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"events\.jsonl: is a symlink"):
        EventLog(logs / "events.jsonl", run_id="r")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        ensure_log_dir(logs)
    assert victim.read_text() == "precious\n"


def test_log_dir_that_is_a_symlink_or_a_strangers_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "runs").symlink_to(real)
    with pytest.raises(UnsafePathError, match="runs: is a symlink") as info:
        ensure_log_dir(tmp_path / "runs")
    assert isinstance(info.value, OSError) and "\n" not in str(info.value)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        acquire(tmp_path / "runs", "job")  # the lock open checks too
    assert list(real.iterdir()) == []
    if IS_ROOT:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, pwd.getpwnam("nobody").pw_uid, -1)
        with pytest.raises(UnsafePathError, match="owned by uid"):
            ensure_log_dir(other)


def test_writers_refuse_fifos_and_hard_links(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.log")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        open_file(tmp_path / "fifo.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    victim = _victim(tmp_path)
    os.link(victim, tmp_path / "linked.log")
    with pytest.raises(UnsafePathError, match="hard links"):
        open_file(tmp_path / "linked.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert victim.read_text() == "precious\n"


def test_state_json_symlink_is_replaced_never_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "state.json").symlink_to(victim)
    write_json_atomic(tmp_path / "state.json", {"state": "running"})
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "state.json").is_symlink()
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600


def test_run_with_symlink_at_events_jsonl_launches_nothing(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """Refused before the launch with a usage error (exit 2, not 70: under systemd 70 is a
    restart loop); the file the link points to is untouched."""
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "2"])
    (tmp_path / "runs").mkdir()
    victim = _victim(tmp_path)
    (tmp_path / "runs" / "events.jsonl").symlink_to(victim)
    res = run_dsguard("run", "job.yaml", timeout=60)
    assert res.code == 2, res.proc.stderr
    assert "events.jsonl: is a symlink" in res.proc.stderr
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "trace.jsonl").exists()  # nothing was launched


def test_run_with_symlink_at_attempt_log_writes_nothing_through_it(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """The training runs (its output is still read and classified); the link stays a link
    and its target is unchanged: the attempt's output is dropped, not written through."""
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "2"])
    (tmp_path / "runs").mkdir()
    victim = _victim(tmp_path)
    (tmp_path / "runs" / "attempt-1.log").symlink_to(victim)
    res = run_dsguard("run", "job.yaml", "--quiet", timeout=90)
    assert res.code == 0, res.proc.stderr
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "runs" / "attempt-1.log").is_symlink()


def _outside_tree(tmp_path: Path) -> tuple[Path, Path]:
    """An output dir whose newest checkpoint-9 links to a complete checkpoint elsewhere."""
    ckpt_dir = tmp_path / "out"
    make_checkpoint(ckpt_dir, 4)
    outside = tmp_path / "elsewhere"
    make_checkpoint(outside, 9)
    (outside / "checkpoint-9" / "trainer_state.json").write_text(
        json.dumps({"global_step": 9, "train_batch_size": 8})
    )
    (ckpt_dir / "checkpoint-9").symlink_to(outside / "checkpoint-9")
    return ckpt_dir, outside


def test_checkpoint_symlink_outside_is_quarantined_as_a_link(tmp_path: Path) -> None:
    ckpt_dir, outside = _outside_tree(tmp_path)
    before = _digest(outside)
    sel = select_checkpoint(ckpt_dir)
    assert sel.chosen is not None and sel.chosen.step == 4
    (bad,) = sel.rejected
    assert bad.step == 9 and "is a symlink" in bad.reasons[0]
    assert patch_train_batch_size(ckpt_dir / "checkpoint-9", 4) is None
    dest = quarantine(bad.path, ckpt_dir)
    assert dest.is_symlink() and dest.parent.name == QUARANTINE_DIRNAME
    assert _digest(outside) == before
    assert not list(outside.rglob("*" + BACKUP_SUFFIX))
    assert (outside / "checkpoint-9").is_dir()


# -- 3: secrets and modes ----------------------------------------------------------------------


def test_secrets_never_reach_the_log_dir_or_console_and_modes_are_private(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    # The fake trainer does not take --hub_token (its argparse error would print argv into
    # the attempt log, which is the child's own output): a wrapper drops it.
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(
        "import runpy, sys\n"
        "i = sys.argv.index('--hub_token'); del sys.argv[i:i + 2]\n"
        f"sys.argv[0] = {str(FAKE_TRAINER)!r}\n"
        f"runpy.run_path({str(FAKE_TRAINER)!r}, run_name='__main__')\n"
    )
    write_job(
        tmp_path, ["--scenario", "ok", "--max_steps", "2", "--hub_token", HF_SECRET],
        env=dict(ENV_SECRETS), script=str(wrapper),
    )  # fmt: skip
    old = os.umask(0o022)
    try:
        res = run_dsguard("run", "job.yaml", timeout=90)
    finally:
        os.umask(old)
    logs = tmp_path / "runs"
    secrets = [HF_SECRET, *ENV_SECRETS.values()]
    console = res.proc.stdout + res.proc.stderr
    for secret in secrets:
        assert secret not in console
        for p in logs.rglob("*"):
            if p.is_file():
                assert secret.encode() not in p.read_bytes(), p
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    for p in logs.iterdir():  # what dsguard itself creates (heartbeats are the trainer's)
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert {"events.jsonl", "state.json", "dsguard.lock", "attempt-1.log"} <= {
        p.name for p in logs.iterdir()
    }


def test_new_log_dir_and_its_subdirs_are_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        logs = ensure_log_dir(tmp_path / "a" / "runs")
        ev = EventLog(logs.events, run_id="r")
        ev.emit("state_invalid", error="x")
        ev.close()
        write_json_atomic(logs.state, {"state": "running"})
        write_json_atomic(logs.stop_request(1), {"reason": "x"})
    finally:
        os.umask(old)
    for d in (logs.root, logs.heartbeat_dir, logs.control_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (logs.events, logs.state, logs.stop_request(1)):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_existing_world_readable_events_file_is_narrowed(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text("")
    os.chmod(tmp_path / "events.jsonl", 0o644)
    os.chmod(tmp_path, 0o755)
    EventLog(tmp_path / "events.jsonl", run_id="r").close()
    assert stat.S_IMODE((tmp_path / "events.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700


def test_state_json_is_redacted(tmp_path: Path) -> None:
    ev = EventLog(tmp_path / "events.jsonl", run_id="r")
    sm = StateMachine(
        tmp_path / "state.json", ev, status={"reason": f"argv --hub_token={HF_SECRET}"}
    )
    sm.transition(RunState.RUNNING, f"launched with {HF_SECRET}")
    ev.close()
    text = (tmp_path / "state.json").read_text()
    assert HF_SECRET not in text and "<redacted>" in text


# -- 4: the patched trainer_state.json keeps mode and owner --------------------------------------


@needs_root
def test_patched_trainer_state_keeps_mode_and_owner(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    state = ckpt / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 4, "train_batch_size": 8}))
    os.chown(state, nobody.pw_uid, nobody.pw_gid)
    os.chmod(state, 0o644)
    patch = patch_train_batch_size(ckpt, 4)
    assert patch is not None
    for p in (state, patch.backup):
        st = p.stat()
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid), p
        assert stat.S_IMODE(st.st_mode) == 0o644, p
    assert json.loads(state.read_text())["train_batch_size"] == 4


# -- 5: a full log disk ------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(size: str) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mnt = Path(tempfile.mkdtemp(prefix="dsguard-full-"))
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    return filler


def test_pump_keeps_draining_when_the_log_disk_is_full(tmp_path: Path) -> None:
    """A real child prints 3 MiB into a pipe whose log is on a full disk: it is never blocked,
    the drop is counted and reported once, and writing resumes once space comes back."""
    with _tmpfs("1m") as mnt:
        filler = _fill(mnt)
        script = (
            "import sys, time\n"
            "for _ in range(3 * 1024):\n"
            "    sys.stdout.write('y' * 1023 + '\\n')\n"
            "sys.stdout.flush(); time.sleep(2.5); print('AFTER THE GAP', flush=True)\n"
        )
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert child.stdout is not None
        seen: list[LogWriteFailed] = []
        pump = OutputPump(child.stdout.fileno(), mnt / "attempt-1.log", StreamClassifier(),
                          on_fatal=lambda _: None, on_log_failed=seen.append)  # fmt: skip
        pump.start()
        deadline = time.monotonic() + 30
        while pump.bytes_read < 3 * 1024 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
        filler.unlink()  # space comes back while the child sleeps
        assert child.wait(timeout=30) == 0
        pump.stop()
        assert pump.join(10)
        child.stdout.close()
        assert pump.error is None
        assert pump.bytes_read == 3 * 1024 * 1024 + len("AFTER THE GAP\n")
        assert len(seen) == 1 and seen[0].errno == errno.ENOSPC
        assert pump.log_failure == seen[0]
        assert pump.log_dropped_bytes >= 2 * 1024 * 1024
        text = (mnt / "attempt-1.log").read_text()
        assert "bytes of output not logged" in text and text.endswith("AFTER THE GAP\n")


def test_event_log_and_state_survive_a_full_disk(tmp_path: Path) -> None:
    with _tmpfs("256k") as mnt:
        ev = EventLog(mnt / "events.jsonl", run_id="r")
        sm = StateMachine(mnt / "state.json", ev)
        filler = _fill(mnt)
        sm.transition(RunState.RUNNING, "launched")  # neither raises
        sm.transition(RunState.BACKOFF, "x" * 300)
        assert ev.write_failures >= 1 and ev.pending_bytes > 0
        assert sm.write_failures >= 1 and sm.pending
        filler.unlink()
        assert sm.flush() and ev.flush()
        ev.close()
        names = [e["event"] for e in read_events(mnt / "events.jsonl")]
        assert names == ["state_changed", "state_write_failed", "state_changed"]
        assert json.loads((mnt / "state.json").read_text())["state"] == "backoff"


def test_run_on_a_full_log_disk_finishes_and_exits_0(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """The log dir on a 1 MiB tmpfs, a child printing 4 MB: it finishes, dsguard exits 0."""
    with _tmpfs("1m") as mnt:
        write_job(tmp_path, ["--scenario", "ok", "--max_steps", "2", "--flood_mb", "4"],
                  log_dir=str(mnt / "runs"))  # fmt: skip
        t0 = time.monotonic()
        res = run_dsguard("run", "job.yaml", "--quiet", timeout=120)
        assert res.code == 0, res.proc.stderr[-3000:]
        assert time.monotonic() - t0 < 100
        assert "Traceback" not in res.proc.stderr
        assert "SUCCEEDED" in res.proc.stderr
        # Said on the console even though the event log's disk is full.
        assert "log_write_failed" in res.proc.stderr


# -- 7: a torn last line -------------------------------------------------------------------------


def test_a_torn_last_line_does_not_swallow_the_next_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event":"run_started","run_id":"old"}\n{"event":"attempt_sta')
    ev = EventLog(path, run_id="new")
    ev.emit("state_invalid", error="first of the new run")
    ev.close()
    events = list(read_events(path))
    assert [e.get("run_id") for e in events] == ["old", "new"]
    assert events[1]["event"] == "state_invalid"
    # An intact file gets no blank line.
    ev = EventLog(path, run_id="newer")
    ev.close()
    assert not path.read_text().endswith("\n\n")


# -- 8: checkpoint link loops and unreadable checkpoints ----------------------------------------


def test_checkpoint_symlink_loop_is_listed_rejected_and_moved(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 4)
    (tmp_path / "checkpoint-8").symlink_to("checkpoint-8")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-8", "checkpoint-4"]
    sel = select_checkpoint(tmp_path)
    assert sel.chosen is not None and sel.chosen.step == 4
    (bad,) = sel.rejected
    assert "is a symlink" in bad.reasons[0]
    dest = quarantine(bad.path, tmp_path)
    assert dest.is_symlink() and not os.path.lexists(tmp_path / "checkpoint-8")


def test_trainer_state_symlink_loop_is_a_reason_and_never_patched(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 4)
    make_checkpoint(tmp_path, 9)
    state = tmp_path / "checkpoint-9" / "trainer_state.json"
    state.unlink()
    state.symlink_to("trainer_state.json")
    sel = select_checkpoint(tmp_path)
    assert sel.chosen is not None and sel.chosen.step == 4
    assert "trainer_state.json is a symlink" in sel.rejected[0].reasons[0]
    assert patch_train_batch_size(tmp_path / "checkpoint-9", 2) is None
    assert not (tmp_path / "checkpoint-9" / ("trainer_state.json" + BACKUP_SUFFIX)).exists()


def _as_nobody(root: Path) -> dict[str, object]:
    """select + quarantine in a forked child that dropped root (root reads through mode 000)."""
    nobody = pwd.getpwnam("nobody")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            sel = select_checkpoint(root)
            out: dict[str, object] = {"chosen": sel.chosen and sel.chosen.step}
            out["rejected"] = [
                [bad.step, list(bad.reasons), quarantine(bad.path, root).name]
                for bad in sel.rejected
            ]
            os.write(wfd, json.dumps(out).encode())
            code = 0
        except BaseException as exc:
            os.write(wfd, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    result: dict[str, object] = json.loads(data)
    assert os.waitstatus_to_exitcode(status) == 0, result
    return result


@needs_root
def test_unreadable_checkpoint_is_quarantined_not_a_crash() -> None:
    """As an unprivileged trainer user: a checkpoint dir mode 000 cannot be listed (a reason)
    nor moved into another directory (rename needs write on it): it is renamed in place."""
    nobody = pwd.getpwnam("nobody")
    root = Path(tempfile.mkdtemp(prefix="dsguard-unreadable-"))
    try:
        make_checkpoint(root, 4)
        make_checkpoint(root, 8)
        for p in [root, *root.rglob("*")]:
            os.chown(p, nobody.pw_uid, nobody.pw_gid)
        os.chmod(root, 0o755)
        os.chmod(root / "checkpoint-8", 0)
        out = _as_nobody(root)
        assert out["chosen"] == 4
        rejected = out["rejected"]
        assert isinstance(rejected, list) and len(rejected) == 1
        step, reasons, dest = rejected[0]
        assert step == 8 and "Permission denied" in reasons[0]
        assert dest == QUARANTINE_DIRNAME + "-checkpoint-8"
        assert (root / dest).is_dir() and not (root / "checkpoint-8").exists()
    finally:
        for p in [root, *root.rglob("*")]:
            with contextlib.suppress(OSError):
                os.chmod(p, 0o700)
        shutil.rmtree(root, ignore_errors=True)


def test_write_atomic_refuses_a_symlinked_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        write_atomic(tmp_path / "link" / "x.json", b"{}")
    assert list(real.iterdir()) == []
