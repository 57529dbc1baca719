"""Chaos loop for issue 13: hostile but realistic conditions against the real ``dsguard`` CLI.

``python -m bench.chaos [--seed N] [--quick] [--json F] [--markdown F] [--conditions a,b,...]``

Each *condition* sets up one scenario in a fresh temporary directory (a job file around the
fake trainer ``tests/fake_trainer.py`` or a tiny script, planted files, symlinks, a small tmpfs,
signals), runs the real CLI as a subprocess (``sys.executable -m dsguard ...``), and judges it:

* **survived**: dsguard ended with the exit code documented for that condition (never 70, the
  internal-error code that makes systemd restart it into the same crash), printed no Python
  traceback, and did what the condition's docstring says it must do after the fix;
* **data lost**: a file that existed before dsguard ran (under the job's output/checkpoint
  dirs, or a file outside the job a planted symlink points at) changed or disappeared without a
  byte-identical copy left behind (a quarantine *move* keeps the data; an in-place rewrite or a
  deletion does not), or a line of ``events.jsonl`` was lost or torn.

The seed fixes every random choice (each condition draws from its own ``Random`` derived from
the seed and its name, so running a subset does not change the choices). Conditions that need
root or a mount are skipped with the reason otherwise. Every process a condition started
(dsguard, its trainers, planted strangers) is ended before the next condition: they all run
with their working directory inside the condition's temporary directory, which is how they are
found.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import dsguard_cmd, write_job
from tests.fake_trainer import save_checkpoint
from tests.test_e2e_run import _first_step_trainer_pid
from tests.test_unattended import _run_processes

#: What the CLI's top-level handler returns for an unexpected exception (EX_SOFTWARE). Spelled
#: here rather than imported so the harness judges dsguard from the outside, like systemd does.
EXIT_INTERNAL = 70
EXIT_USAGE = 2
EXIT_NO_STATE = 4
TRACEBACK = "Traceback (most recent call last)"
DEFAULT_SEED = 13
#: A stop request must be honoured between any two steps; on a loaded 2-core machine a few
#: seconds of slack covers interpreter start-up noise, not a 300-checkpoint quarantine.
STOP_LATENCY_LIMIT_S = 2.0
SECRETS = {
    "args": "hf_chaosArgTokenQ7w8e9r0t1y2u3",
    "HF_TOKEN": "hf_chaosEnvTokenZ1x2c3v4b5n6m7",
    "WANDB_API_KEY": "wandbchaoskey0123456789abcdef",
    "MY_CLIENT_SECRET": "chaos-client-secret-5f4e3d",
    "DB_PASSWORD": "chaos-db-password-9a8b7c",
}


# -- sizes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scale:
    """How hard the size-bound conditions push (the full run vs the bounded test)."""

    flood_mb: int = 200
    kill_trials: int = 10
    bad_checkpoints: int = 1000


FULL = Scale()
#: Bounded so that the whole loop finishes in a few minutes on a shared 2-core machine.
QUICK = Scale(flood_mb=200, kill_trials=3, bad_checkpoints=600)


# -- the harness's own checks (unit-tested on synthetic cases) ---------------------------------


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return "sha256:" + h.hexdigest()


def _entry(path: Path) -> str:
    """A symlink is recorded as its target (never followed: a loop or an outside tree must not
    be read through it); a regular file by its content hash."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    return _file_digest(path)


def snapshot(*roots: Path) -> dict[str, str]:
    """Absolute path -> content fingerprint of every file and symlink under ``roots``."""
    out: dict[str, str] = {}
    for root in roots:
        if root.is_symlink() or root.is_file():
            out[str(root)] = _entry(root)
            continue
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            base = Path(dirpath)
            for name in filenames:
                out[str(base / name)] = _entry(base / name)
            for name in dirnames:  # symlinks to directories are listed here and not walked
                if (base / name).is_symlink():
                    out[str(base / name)] = _entry(base / name)
    return out


def lost_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Pre-existing files whose content survives nowhere: changed in place or deleted, with no
    byte-identical copy at a path that is new (or newly holds it) after the run.

    A quarantine moves a checkpoint aside, and the resume patch keeps ``*.dsguard-orig``: both
    leave the bytes on disk, so neither is loss. Each new copy accounts for one original only,
    so deleting one of two identical files is still caught.
    """
    pool = Counter(h for p, h in after.items() if before.get(p) != h)
    lost: list[str] = []
    for path, digest in sorted(before.items()):
        if after.get(path) == digest:
            continue
        if pool[digest] > 0:
            pool[digest] -= 1
            continue
        lost.append(path)
    return lost


def created_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths present after the run that were not there before."""
    return sorted(p for p in after if p not in before)


def events_problems(before: bytes, after: bytes | None) -> list[str]:
    """What is wrong with ``events.jsonl`` given its bytes before and after a run.

    The log is append-only: the old bytes must still be its prefix (a lost or rewritten line is
    data loss). Every line that has any byte from this run must be one JSON object with an
    ``event`` (a line that continues a half line left by an earlier crash swallows this run's
    first event: torn). A pre-existing half line itself is not this run's fault and is exempt
    as long as this run started on a new line. The file must end with a newline.
    """
    if after is None:
        return ["events.jsonl: missing after the run"] if before else []
    if not after.startswith(before):
        return ["events.jsonl: earlier lines changed or lost (not append-only)"]
    problems: list[str] = []
    start = len(before)
    offset = 0
    for number, raw in enumerate(after.split(b"\n"), start=1):
        end = offset + len(raw)
        touched = end > start
        offset = end + 1
        if not touched or not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "event" not in record:
            head = raw[:60].decode("utf-8", "replace")
            problems.append(f"events.jsonl line {number} torn or swallowed: {head!r}")
    if after and not after.endswith(b"\n") and len(after) > start:
        problems.append("events.jsonl: ends without a newline (last line torn)")
    return problems


def exit_problems(what: str, code: int | None, allowed: Collection[int], stderr: str) -> list[str]:
    """The process ended with a documented code, not 70, not by a signal, with no traceback."""
    problems: list[str] = []
    if code is None:
        problems.append(f"{what}: did not exit in time (killed by the harness)")
    elif code == EXIT_INTERNAL:
        problems.append(f"{what}: exit 70 (internal error){_last_line(stderr)}")
    elif code < 0:
        problems.append(f"{what}: killed by {signal.Signals(-code).name}")
    elif code not in allowed:
        problems.append(f"{what}: exit {code}, expected {sorted(allowed)}{_last_line(stderr)}")
    if has_traceback(stderr):
        problems.append(f"{what}: traceback on stderr{_last_line(stderr)}")
    return problems


def has_traceback(stderr: str) -> bool:
    return TRACEBACK in stderr


def _last_line(text: str) -> str:
    """The line that says what went wrong: the exception line of a traceback rather than the
    CLI's generic "internal error" line after it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith("dsguard: internal error"):
            return f" ({line[:160]})"
    return f" ({lines[-1][:160]})" if lines else ""


# -- results ---------------------------------------------------------------------------------


@dataclass
class Check:
    """What one condition found: problems (not survived), lost files, and plain notes."""

    problems: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def expect(self, ok: bool, text: str) -> None:
        if not ok:
            self.problems.append(text)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def exit(self, what: str, res: Cli, allowed: Collection[int]) -> None:
        self.problems += exit_problems(what, res.code, allowed, res.stderr)

    def files(self, before: dict[str, str], *roots: Path) -> dict[str, str]:
        after = snapshot(*roots)
        for path in lost_files(before, after):
            self.lost.append(path)
        return after

    def events(self, before: bytes, path: Path) -> None:
        after = path.read_bytes() if path.exists() and not path.is_symlink() else None
        found = events_problems(before, after)
        self.problems += found
        if any("torn" in p or "lost" in p for p in found):
            self.lost.append(f"{path} (a line lost or torn)")


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    title: str
    tried: bool
    survived: bool
    data_lost: bool
    seconds: float
    problems: tuple[str, ...]
    lost: tuple[str, ...]
    notes: tuple[str, ...]
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a condition gets: its own empty directory, its seeded RNG, the sizes, its check."""

    work: Path
    rng: random.Random
    scale: Scale
    check: Check


# -- running the CLI -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cli:
    code: int | None
    stdout: str
    stderr: str
    seconds: float


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", **extra)


def start(work: Path, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``dsguard ARGS`` in ``work``, output captured (unless redirected by ``popen``)."""
    kw: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen(dsguard_cmd(*args), cwd=work, env=_env(), text=True, **kw)


def finish(proc: subprocess.Popen[str], timeout: float, t0: float | None = None) -> Cli:
    t0 = time.monotonic() if t0 is None else t0
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        code = None
    return Cli(code, out or "", err or "", time.monotonic() - t0)


def cli(work: Path, *args: str, timeout: float = 90.0) -> Cli:
    t0 = time.monotonic()
    return finish(start(work, *args), timeout, t0)


def reap_strays(work: Path) -> list[int]:
    """End every process whose working directory is inside ``work``: all were started by this
    condition (dsguard, its trainers and their helpers, planted strangers), so none is a
    stranger's. Returns the pids that had to be killed."""
    me = os.getpid()
    killed: list[int] = []
    prefix = str(work)
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == me or not proc.cwd().startswith(prefix):
                continue
            proc.kill()
            killed.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    psutil.wait_procs([psutil.Process(p) for p in killed if psutil.pid_exists(p)], timeout=5)
    return killed


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() and not path.is_symlink() else b""


def _events(path: Path) -> list[dict[str, Any]]:
    """The parseable event records (torn lines are the integrity check's business)."""
    out: list[dict[str, Any]] = []
    for raw in _read(path).splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(raw)
            if isinstance(record, dict):
                out.append(record)
    return out


def _trace(work: Path) -> list[dict[str, Any]]:
    path = work / "trace.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _wait_until(pred: Callable[[], bool], timeout_s: float, poll_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(poll_s)
    return pred()


def _epoch(event: dict[str, Any]) -> float:
    """An event's ``ts`` (ISO 8601 with offset, or epoch seconds) as epoch seconds."""
    ts = event.get("ts")
    if isinstance(ts, (int, float)):
        return float(ts)
    return datetime.fromisoformat(str(ts)).timestamp()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _checkpoint(out: Path, step: int, *, truncate: bool = False, micro: int = 8) -> Path:
    """An HF-layout checkpoint exactly as the fake trainer writes one."""
    args = argparse.Namespace(
        output_dir=str(out), max_steps=6, save_steps=2, per_device_train_batch_size=micro
    )
    return save_checkpoint(args, step, truncate=truncate)


def _tiny_script(work: Path, body: str) -> Path:
    path = work / "tiny.py"
    path.write_text("import sys, time\n" + body)
    return path


def _runs(work: Path) -> Path:
    return work / "runs"


#: Scenario flags of the fake trainer: attempt 1 resumes a planted checkpoint-4 at micro 8,
#: OOMs at once; attempt 2 runs micro 4 from checkpoint-4, so dsguard patches its
#: trainer_state.json (transformers would otherwise restore micro 8).
OOM_THEN_PATCH = [
    "--scenario",
    "oom",
    "--oom_above",
    "4",
    "--fail_at_step",
    "1",
    "--oom_then",
    "exit",
]


# -- conditions: security (issue 13, items 1-4) ------------------------------------------------


def stranger_session(c: Ctx) -> None:
    """(1) After dsguard is SIGKILLed, a new unrelated process holds the session id that
    ``state.json`` recorded for the dead attempt (pid reuse, or any process after a reboot).

    The stand-in for pid reuse: the stranger is started in a session of its own after the
    attempt, and ``state.json``'s ``current_attempt.sid`` is pointed at it (a session id cannot
    be chosen, and wrapping the pid space is not bounded in time). After the fix the next
    ``dsguard run`` signals only a process proven to be ours at the moment of the signal (run
    marker in its environment, or start time and parent chain as recorded): the stranger lives,
    is not listed in ``run_recovered``'s ``leftover_pids``, and the run completes (exit 0).
    """
    work = c.work
    write_job(work, ["--scenario", "ok", "--max_steps", "30", "--step_s", "0.05"])
    first = start(work, "run", "job.yaml", "--quiet")
    trainer = _first_step_trainer_pid(work)
    first.kill()
    finish(first, 10)
    c.check.expect(_wait_until(lambda: _gone(trainer), 10), "harness: the trainer outlived dsguard")
    state_path = _runs(work) / "state.json"
    state = json.loads(state_path.read_text())
    if not state.get("current_attempt"):
        c.check.problem("harness: state.json recorded no current attempt")
        return
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], cwd=work, start_new_session=True
    )
    try:
        state["current_attempt"]["sid"] = stranger.pid
        state_path.write_text(json.dumps(state))
        before = snapshot(work / "out")
        ev_before = _read(_runs(work) / "events.jsonl")
        res = cli(work, "run", "job.yaml", "--quiet")
        c.check.exit("dsguard run after the SIGKILL", res, {0})
        rc = stranger.poll()
        c.check.expect(
            rc is None,
            f"stranger pid {stranger.pid} in the recorded session was signalled (exit {rc})",
        )
        for ev in _events(_runs(work) / "events.jsonl"):
            if ev["event"] == "run_recovered" and stranger.pid in ev.get("leftover_pids", []):
                c.check.note(f"run_recovered leftover_pids={ev['leftover_pids']}")
        c.check.files(before, work / "out")
        c.check.events(ev_before, _runs(work) / "events.jsonl")
    finally:
        stranger.kill()
        stranger.wait()


def _planted_log_symlink(c: Ctx, name: str) -> None:
    work = c.work
    write_job(work, ["--scenario", "ok"])
    victim = work / "victim.txt"
    victim.write_text("precious: a file that is not dsguard's\n")
    _runs(work).mkdir()
    (_runs(work) / name).symlink_to(victim)
    before = snapshot(victim, work / "out")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0, EXIT_USAGE})
    after = c.check.files(before, victim, work / "out")
    c.check.expect(
        after.get(str(victim)) == before[str(victim)],
        f"wrote through the planted symlink {name} -> {victim}",
    )


def symlink_events(c: Ctx) -> None:
    """(2a) A symlink planted at ``log_dir/events.jsonl`` points at a file that is not ours.

    After the fix dsguard opens its logs with ``O_NOFOLLOW``: it refuses with a one-line
    message (exit 2) or replaces nothing it does not own; the pointed-at file is byte-identical.
    """
    _planted_log_symlink(c, "events.jsonl")


def symlink_attempt_log(c: Ctx) -> None:
    """(2b) A symlink planted at ``log_dir/attempt-1.log`` points at a file that is not ours.

    After the fix the attempt log is opened with ``O_NOFOLLOW``: a clear refusal (exit 2) or a
    run that never writes through the link (exit 0); the pointed-at file is byte-identical.
    """
    _planted_log_symlink(c, "attempt-1.log")


def symlink_checkpoint(c: Ctx) -> None:
    """(2c) ``out/checkpoint-4`` is a symlink to a checkpoint tree outside the output dir, and
    the ladder's micro-batch change makes dsguard patch the resumed ``trainer_state.json``.

    After the fix dsguard never writes or moves anything outside the checkpoint dir: the outside
    tree is byte-identical and gains no ``.dsguard-orig``; the symlinked checkpoint is skipped or
    quarantined (the link itself, inside the dir) with a reason, and the run completes (exit 0).
    """
    work = c.work
    write_job(work, OOM_THEN_PATCH)
    outside = work / "outside"
    _checkpoint(outside, 4)
    (work / "out").mkdir()
    (work / "out" / "checkpoint-4").symlink_to(outside / "checkpoint-4")
    before_out, before_outside = snapshot(work / "out"), snapshot(outside)
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    after = c.check.files(before_outside, outside)
    c.check.files(before_out, work / "out")
    created = created_files(before_outside, after)
    c.check.expect(not created, f"created outside the checkpoint dir: {created}")
    c.check.expect(after == before_outside, "changed the checkpoint tree outside the output dir")


def secrets(c: Ctx) -> None:
    """(3) ``--hub_token hf_...`` in ``args`` and ``*_TOKEN``, ``*_KEY``, ``*SECRET*``,
    ``*PASSWORD*`` variables in ``env``.

    After the fix no secret value appears in anything dsguard writes (``events.jsonl``,
    ``state.json``, attempt logs, rendered configs) or prints (console of ``run``, ``status``,
    ``events``); the log dir is created 0700 and its files 0600. The run completes (exit 0).
    """
    work = c.work
    script = _tiny_script(work, "print('step 1 loss=1.0', flush=True)\ntime.sleep(0.2)\n")
    env = {k: v for k, v in SECRETS.items() if k != "args"}
    write_job(
        work,
        [],
        script=str(script),
        env=env,
        args=["--output_dir", "out", "--hub_token", SECRETS["args"]],
    )
    outputs = [cli(work, "run", "job.yaml")]
    c.check.exit("dsguard run", outputs[0], {0})
    outputs += [
        cli(work, *cmd)
        for cmd in (
            ["status", "runs"],
            ["events", "runs"],
            ["plan", "job.yaml", "--json"],
            ["validate", "job.yaml"],
        )
    ]
    for res in outputs[1:]:
        c.check.expect(not has_traceback(res.stderr), f"traceback: {_last_line(res.stderr)}")
    for name, value in SECRETS.items():
        printed = any(value in r.stdout or value in r.stderr for r in outputs)
        c.check.expect(not printed, f"secret {name} printed on the console")
        for path in sorted(_runs(work).rglob("*")):
            if path.is_file() and value.encode() in path.read_bytes():
                c.check.problem(f"secret {name} written to {path.relative_to(work)}")
    runs = _runs(work)
    if runs.is_dir():
        c.check.expect(
            runs.stat().st_mode & 0o077 == 0,
            f"log dir mode {oct(runs.stat().st_mode & 0o777)}, expected 0700",
        )
        loose = [p.name for p in runs.rglob("*") if p.is_file() and p.stat().st_mode & 0o077]
        c.check.expect(not loose, f"group/world-readable files in the log dir: {loose}")


def patch_keeps_mode(c: Ctx) -> None:
    """(4) The resume patch rewrites ``trainer_state.json`` of a checkpoint owned by another
    user (``nobody`` when the harness is root) with mode 0644.

    After the fix the patched file keeps its mode (0644) and owner; the original bytes are kept
    in ``trainer_state.json.dsguard-orig``; the run completes (exit 0).
    """
    work = c.work
    write_job(work, OOM_THEN_PATCH)
    state = _checkpoint(work / "out", 4) / "trainer_state.json"
    state.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)
    st0 = state.stat()
    before = snapshot(work / "out")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    c.check.files(before, work / "out")
    patched = [
        e for e in _events(_runs(work) / "events.jsonl") if e["event"] == "checkpoint_patched"
    ]
    c.check.expect(bool(patched), "harness: no checkpoint_patched event (the patch never ran)")
    st1 = state.stat()
    c.check.expect(
        st1.st_mode & 0o7777 == st0.st_mode & 0o7777,
        f"mode {oct(st0.st_mode & 0o777)} -> {oct(st1.st_mode & 0o777)}",
    )
    c.check.expect(
        (st1.st_uid, st1.st_gid) == (st0.st_uid, st0.st_gid),
        f"owner {st0.st_uid}:{st0.st_gid} -> {st1.st_uid}:{st1.st_gid}",
    )


# -- conditions: robustness (issue 13, items 5-12) -------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real filesystem of ``size`` mounted at ``path`` for the block, unmounted after (every
    process using it is ended first, or the unmount would fail busy)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        reap_strays(path.parent)
        subprocess.run(["umount", str(path)], check=False, capture_output=True)


def full_log_disk(c: Ctx) -> None:
    """(5) The log dir is on a 1 MiB filesystem and the trainer prints 8 MB: the disk fills.

    After the fix the child never blocks on dsguard's logging (the pipe is drained, what cannot
    be written is counted and dropped, ``log_write_failed`` recorded once): no false hang, the
    training completes (exit 0). A restart on the still-full disk does not crash (never 70).
    """
    work = c.work
    with small_tmpfs(work / "logdisk", "1m") as disk:
        write_job(
            work,
            ["--scenario", "ok", "--flood_mb", "8", "--max_steps", "6"],
            log_dir=str(disk / "runs"),
            limits={"hang_timeout_s": 5},
        )
        before = snapshot(work / "out")
        res = cli(work, "run", "job.yaml", "--quiet", timeout=120)
        c.check.exit("dsguard run on a full log disk", res, {0})
        ends = [r for r in _trace(work) if r["event"] == "end"]
        c.check.expect(bool(ends), "training did not complete (the trainer never finished)")
        names = [e["event"] for e in _events(disk / "runs" / "events.jsonl")]
        c.check.expect("hang_detected" not in names, "a false hang was declared")
        c.check.note(f"log_write_failed recorded {names.count('log_write_failed')}x")
        again = cli(work, "run", "job.yaml", "--quiet", timeout=120)
        c.check.exit("restart on the still-full disk", again, {0, 1, EXIT_USAGE})
        status = cli(work, "status", str(disk / "runs"))
        c.check.expect(not has_traceback(status.stderr), "dsguard status: traceback")
        c.check.files(before, work / "out")


def log_dir_deleted(c: Ctx) -> None:
    """(6) The log dir is deleted while a run is supervised, then a second ``dsguard run`` of
    the same job is started.

    After the fix the one-job-one-supervisor guarantee does not depend on the log dir's inode:
    the second ``dsguard run`` is refused (exit 2) and never launches a second trainer (the
    fake trainer holds an exclusive flock and records ``two_trainers`` if one is); the first
    recreates the log dir, logs it, and completes (exit 0).
    """
    work = c.work
    write_job(
        work,
        [
            "--scenario",
            "ok",
            "--max_steps",
            "60",
            "--step_s",
            "0.05",
            "--exclusive_lock",
            "trainer.lock",
        ],
    )
    first = start(work, "run", "job.yaml", "--quiet")
    _first_step_trainer_pid(work)

    # dsguard writes into the dir while it is removed: retry until it is really gone.
    def deleted() -> bool:
        shutil.rmtree(_runs(work), ignore_errors=True)
        return not _runs(work).exists()

    gone = _wait_until(deleted, 5)
    c.check.expect(gone, "harness: could not delete the log dir")
    second = cli(work, "run", "job.yaml", "--quiet", timeout=60)
    c.check.exit("second dsguard run", second, {EXIT_USAGE})
    res = finish(first, 90)
    c.check.exit("first dsguard run", res, {0})
    two = [r for r in _trace(work) if r["event"] == "two_trainers"]
    c.check.expect(not two, "two trainers ran on the same outputs at once")
    c.check.expect((_runs(work) / "events.jsonl").exists(), "the deleted log dir was not recreated")
    c.check.events(b"", _runs(work) / "events.jsonl")


def half_line(c: Ctx) -> None:
    """(7) ``events.jsonl`` ends with a half line (a crash mid-write elsewhere).

    After the fix the next run starts its appends on a new line: the half line stays as it was,
    ``run_started`` and every later event parse, nothing earlier is lost (exit 0).
    """
    work = c.work
    write_job(work, ["--scenario", "ok"])
    _runs(work).mkdir()
    old = b'{"ts": 1.0, "event": "state_changed", "run_id": "old", "attempt": 0}\n'
    old += b'{"ts": 2.0, "event": "run_sta'
    (_runs(work) / "events.jsonl").write_bytes(old)
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    c.check.events(old, _runs(work) / "events.jsonl")
    names = [e["event"] for e in _events(_runs(work) / "events.jsonl")]
    c.check.expect("run_started" in names, "run_started was swallowed by the half line")


def _bad_log_dir(c: Ctx, log_dir: str) -> None:
    work = c.work
    write_job(work, ["--scenario", "ok"], log_dir=log_dir)
    (work / "blocker").write_text("a regular file\n")
    before = snapshot(work / "blocker")
    for cmd in ("validate", "run"):
        res = cli(work, cmd, "job.yaml", *(["--quiet"] if cmd == "run" else []))
        c.check.exit(f"dsguard {cmd}", res, {EXIT_USAGE})
        c.check.expect(bool(res.stderr.strip()), f"dsguard {cmd}: no message on stderr")
    c.check.expect(not (work / "trace.jsonl").exists(), "a trainer was launched")
    c.check.files(before, work / "blocker")


def log_dir_below_file(c: Ctx) -> None:
    """(8a) ``log_dir`` lies below a regular file (``blocker/runs``).

    After the fix both ``validate`` and ``run`` say so in one line and exit 2 (a job-file
    problem: under systemd, 70 would be a restart loop); nothing is launched.
    """
    _bad_log_dir(c, "blocker/runs")


def log_dir_is_file(c: Ctx) -> None:
    """(8a') ``log_dir`` names an existing regular file.

    After the fix ``validate`` and ``run`` exit 2 with a one-line message; nothing is launched
    and the file is untouched.
    """
    _bad_log_dir(c, "blocker")


def checkpoint_symlink_loop(c: Ctx) -> None:
    """(8b) ``out/checkpoint-8`` is a symlink loop (it points at itself), next to a good
    ``checkpoint-2``.

    After the fix the loop is skipped or quarantined with a reason (the link kept), the run
    resumes from ``checkpoint-2`` or starts fresh, and completes (exit 0).
    """
    work = c.work
    write_job(work, ["--scenario", "ok"])
    _checkpoint(work / "out", 2)
    (work / "out" / "checkpoint-8").symlink_to("checkpoint-8")
    before = snapshot(work / "out")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    c.check.files(before, work / "out")


def trainer_state_loop(c: Ctx) -> None:
    """(8c) ``out/checkpoint-8/trainer_state.json`` is a symlink loop.

    After the fix ``checkpoint-8`` is skipped or quarantined with a reason (kept byte-identical),
    and the run completes (exit 0).
    """
    work = c.work
    write_job(work, ["--scenario", "ok"])
    _checkpoint(work / "out", 2)
    state = _checkpoint(work / "out", 8) / "trainer_state.json"
    state.unlink()
    state.symlink_to("trainer_state.json")
    before = snapshot(work / "out")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    c.check.files(before, work / "out")


def status_mistyped_state(c: Ctx) -> None:
    """(8d) ``dsguard status`` on a ``state.json`` that parses as JSON but has the wrong types
    (hand-edited, or written by another version).

    After the fix ``status`` says the state is unreadable in one line and exits 4 (LSB
    "unknown"); the file is untouched.
    """
    work = c.work
    _runs(work).mkdir()
    state = _runs(work) / "state.json"
    state.write_text(
        json.dumps(
            {
                "state": "running",
                "pid": "1234",
                "attempt": "two",
                "knobs": [8, 1],
                "current_attempt": "none",
            }
        )
    )
    before = snapshot(state)
    for as_json in (False, True):
        res = cli(work, "status", "runs", *(["--json"] if as_json else []))
        c.check.exit(f"dsguard status{' --json' if as_json else ''}", res, {EXIT_NO_STATE})
    c.check.files(before, state)


def _default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def sighup(c: Ctx) -> None:
    """(9) SIGHUP with the console gone (an SSH disconnect): dsguard's stdout and stderr are a
    pseudo-terminal whose other end is closed, then SIGHUP arrives.

    After the fix a closed terminal does not end the night's training: dsguard keeps supervising
    (dropping console output) and the run completes (exit 0), or stops gracefully (exit 129,
    ``state.json`` terminal). It never dies mid-state: ``state.json`` is never left ``running``
    and no process of the attempt is orphaned.
    """
    work = c.work
    write_job(work, ["--scenario", "ok", "--max_steps", "40", "--step_s", "0.05"])
    master, slave = os.openpty()
    try:
        # SIGHUP's default action, as under a login shell, even when the harness itself runs
        # under nohup (an ignored signal is inherited and would hide the defect).
        proc = start(
            work, "run", "job.yaml", stdout=slave, stderr=slave, preexec_fn=_default_sighup
        )
    finally:
        os.close(slave)
    _first_step_trainer_pid(work)
    os.close(master)
    time.sleep(c.rng.uniform(0.0, 0.5))
    proc.send_signal(signal.SIGHUP)
    res = finish(proc, 90)
    c.check.note(f"exit {res.code} {res.seconds:.1f} s after SIGHUP")
    c.check.exit("dsguard run after SIGHUP", res, {0, 128 + signal.SIGHUP})
    state = json.loads(_read(_runs(work) / "state.json") or b"{}")
    c.check.expect(
        state.get("state") in ("succeeded", "stopped"), f"state.json left {state.get('state')!r}"
    )
    if state.get("run_id"):
        time.sleep(0.5)  # the parent-death signal is asynchronous
        left = _run_processes(state["run_id"])
        c.check.expect(not left, f"processes of the attempt orphaned: {left}")


def sigterm_during_quarantine(c: Ctx) -> None:
    """(10) SIGTERM while dsguard quarantines many broken checkpoints before the first attempt.

    After the fix the stop request is honoured between any two steps: dsguard exits 143 within
    a few seconds of the signal, and no attempt is launched after it. Every broken checkpoint is
    kept (moved aside or left in place), byte-identical.
    """
    work = c.work
    write_job(work, ["--scenario", "ok"])
    for step in range(1, c.scale.bad_checkpoints + 1):
        _checkpoint(work / "out", step, truncate=True)
    before = snapshot(work / "out")
    quarantine = work / "out" / ".dsguard-quarantine"
    proc = start(work, "run", "job.yaml", "--quiet")
    started = _wait_until(lambda: quarantine.is_dir() and any(quarantine.iterdir()), 60, 0.005)
    c.check.expect(started, "harness: the quarantine never started")
    t0, sent_at = time.monotonic(), time.time()
    proc.send_signal(signal.SIGTERM)
    res = finish(proc, 120, t0)
    c.check.exit("dsguard run after SIGTERM", res, {128 + signal.SIGTERM})
    c.check.expect(
        res.seconds <= STOP_LATENCY_LIMIT_S,
        f"stop took {res.seconds:.1f} s (limit {STOP_LATENCY_LIMIT_S:.0f} s)",
    )
    events = _events(_runs(work) / "events.jsonl")
    moved = sum(e["event"] == "checkpoint_quarantined" for e in events)
    c.check.note(f"stopped {res.seconds:.1f} s after SIGTERM, {moved} quarantined")
    c.check.expect(
        moved < c.scale.bad_checkpoints,
        f"the quarantine went on after the stop request (all {moved} moved)",
    )
    late = [e for e in events if e["event"] == "attempt_started" and _epoch(e) >= sent_at]
    c.check.expect(not late, "an attempt was launched after the stop request")
    c.check.files(before, work / "out")


def _attempt_logs_never_mix(c: Ctx, between: Callable[[], object]) -> None:
    work = c.work
    write_job(work, ["--scenario", "ok"])
    first = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("first dsguard run", first, {0})
    between()
    logs = sorted(_runs(work).glob("attempt-*"))
    before = snapshot(*logs, work / "out")
    ev_before = _read(_runs(work) / "events.jsonl")
    second = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("second dsguard run", second, {0})
    after = c.check.files(before, *logs, work / "out")
    mixed = [Path(p).name for p in before if "attempt-" in p and after.get(p) != before[p]]
    c.check.expect(not mixed, f"the second run wrote into the first run's {mixed}")
    c.check.events(ev_before, _runs(work) / "events.jsonl")


def rerun_finished(c: Ctx) -> None:
    """(11) ``dsguard run`` again on a job that already succeeded.

    After the fix attempt numbers continue (or the new run's files are otherwise distinct): the
    first run's ``attempt-1.log`` and rendered configs stay byte-identical, logs of different
    runs never mix; the re-run completes (exit 0).
    """
    _attempt_logs_never_mix(c, lambda: None)


def rerun_discarded_state(c: Ctx) -> None:
    """(11') ``dsguard run`` again after ``state.json`` became unreadable (discarded).

    After the fix the first run's attempt logs stay byte-identical; the new run writes its own
    (exit 0).
    """
    _attempt_logs_never_mix(c, lambda: (_runs(c.work) / "state.json").write_text("{garbage"))


def ds_batch_mismatch(c: Ctx) -> None:
    """(12a) The DeepSpeed config says ``train_batch_size: 7`` while the job runs micro 4 x
    accum 1 on one GPU (global batch 4).

    After the fix the change is never silent: ``validate`` refuses it (exit 2) or names
    ``train_batch_size`` in what it fixes; ``run`` refuses it (exit 2) or records a
    ``preflight_fixed`` event and completes (exit 0).
    """
    work = c.work
    ds = work / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "train_batch_size": 7,
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
            }
        )
    )
    write_job(
        work,
        ["--scenario", "ok"],
        deepspeed={"config": str(ds)},
        train={"micro_batch_size": 4, "gradient_accumulation_steps": 1},
    )
    val = cli(work, "validate", "job.yaml")
    c.check.exit("dsguard validate", val, {0, EXIT_USAGE})
    said = "train_batch_size" in val.stdout + val.stderr
    c.check.expect(val.code == EXIT_USAGE or said, "validate: ok without naming train_batch_size")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0, EXIT_USAGE})
    names = [e["event"] for e in _events(_runs(work) / "events.jsonl")]
    c.check.expect(
        res.code == EXIT_USAGE or "preflight_fixed" in names,
        "run: train_batch_size rewritten without a preflight_fixed event",
    )


def huge_micro(c: Ctx) -> None:
    """(12b) ``micro_batch_size: 10**30``.

    After the fix the knobs are bounded to sane ranges: ``validate`` and ``run`` exit 2 with a
    message naming ``micro_batch_size``, and nothing is launched.
    """
    work = c.work
    write_job(work, ["--scenario", "ok"], train={"micro_batch_size": 10**30})
    for cmd in ("validate", "run"):
        res = cli(work, cmd, "job.yaml")
        c.check.exit(f"dsguard {cmd}", res, {EXIT_USAGE})
        c.check.expect(
            "micro_batch_size" in res.stderr, f"dsguard {cmd}: no message naming micro_batch_size"
        )
    c.check.expect(not (work / "trace.jsonl").exists(), "a trainer was launched")


# -- the earlier trials ----------------------------------------------------------------------


def sigkill_restart(c: Ctx) -> None:
    """SIGKILL dsguard at a random (seeded) moment of an OOM-healing run, then start it again,
    ``kill_trials`` times.

    Expected (today and after the fixes): the restart completes the run (exit 0); never two
    trainers at once (the fake trainer holds an exclusive flock); nothing of the killed run is
    left alive; every event line the restart writes parses, even after a line torn by the kill.
    """
    for trial in range(c.scale.kill_trials):
        work = c.work / f"t{trial}"
        work.mkdir()
        write_job(
            work,
            [
                "--scenario",
                "oom,children",
                "--oom_above",
                "2",
                "--fail_at_step",
                "3",
                "--max_steps",
                "6",
                "--step_s",
                "0.05",
                "--exclusive_lock",
                "trainer.lock",
            ],
        )
        first = start(work, "run", "job.yaml", "--quiet")
        time.sleep(c.rng.uniform(0.2, 1.8))
        first.kill()
        finish(first, 10)
        state = json.loads(_read(_runs(work) / "state.json") or b"{}")
        ev_before = _read(_runs(work) / "events.jsonl")
        res = cli(work, "run", "job.yaml", "--quiet", timeout=120)
        c.check.exit(f"trial {trial}: restart", res, {0})
        two = [r for r in _trace(work) if r["event"] == "two_trainers"]
        c.check.expect(not two, f"trial {trial}: two trainers at once")
        if state.get("run_id"):
            left = _run_processes(state["run_id"])
            c.check.expect(not left, f"trial {trial}: killed run's processes alive: {left}")
        c.check.events(ev_before, _runs(work) / "events.jsonl")
        names = [e["event"] for e in _events(_runs(work) / "events.jsonl")]
        c.check.expect("run_succeeded" in names, f"trial {trial}: no run_succeeded")
    c.check.note(f"{c.scale.kill_trials} kill/restart trials")


FLOOD_SCRIPT = """
total = int(sys.argv[1])
out = sys.stdout.buffer
mb = 1 << 20
written = 0
# A third with no newline at all, then very long lines (4 MiB), then a burst of short ones.
while written < total // 3:
    out.write(b"x" * mb)
    written += mb
while written < 2 * total // 3:
    out.write(b"y" * (4 * mb - 1) + b"\\n")
    written += 4 * mb
line = b"z" * 99 + b"\\n"
while written < total:
    out.write(line * 10486)
    written += 100 * 10486
out.flush()
with open("flood.bytes", "w") as fh:
    fh.write(str(written))
"""


def output_flood(c: Ctx) -> None:
    """The child prints ``flood_mb`` MB as fast as it can: a third without any newline, a third
    in 4 MiB lines, the rest in short lines, then exits 0.

    Expected (today and after the fixes): the run completes (exit 0), the attempt log holds
    every byte the child wrote, and dsguard's memory stays bounded (its peak RSS is noted).
    """
    work = c.work
    script = _tiny_script(work, FLOOD_SCRIPT)
    write_job(work, [], script=str(script), args=[str(c.scale.flood_mb << 20)])
    proc = start(work, "run", "job.yaml", "--quiet")
    peak = [0]

    def sample() -> None:
        with contextlib.suppress(psutil.Error):
            me = psutil.Process(proc.pid)
            while proc.poll() is None:
                peak[0] = max(peak[0], me.memory_info().rss)
                time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    res = finish(proc, 240)
    sampler.join(5)
    c.check.exit("dsguard run", res, {0})
    written = int((work / "flood.bytes").read_text()) if (work / "flood.bytes").exists() else -1
    log = _runs(work) / "attempt-1.log"
    size = log.stat().st_size if log.exists() else -1
    c.check.expect(
        written > 0 and size == written, f"attempt log has {size} bytes, the child wrote {written}"
    )
    c.check.note(
        f"{written / 1e6:.0f} MB in {res.seconds:.1f} s, dsguard peak RSS {peak[0] / 2**20:.0f} MiB"
    )
    c.check.events(b"", _runs(work) / "events.jsonl")


def corrupt_checkpoints(c: Ctx) -> None:
    """A good ``checkpoint-2``, a ``checkpoint-4`` with its weights 4 bytes short and a
    ``checkpoint-6`` whose ``trainer_state.json`` is not JSON.

    Expected (today and after the fixes): the broken ones are quarantined (moved aside, never
    deleted, byte-identical), the run resumes from ``checkpoint-2`` and completes (exit 0).
    """
    work = c.work
    write_job(work, ["--scenario", "ok"])
    _checkpoint(work / "out", 2)
    _checkpoint(work / "out", 4, truncate=True)
    bad = _checkpoint(work / "out", 6) / "trainer_state.json"
    text = bad.read_text()
    bad.write_text(text[: c.rng.randrange(1, len(text) - 1)])
    before = snapshot(work / "out")
    res = cli(work, "run", "job.yaml", "--quiet")
    c.check.exit("dsguard run", res, {0})
    c.check.files(before, work / "out")
    starts = [r for r in _trace(work) if r["event"] == "start"]
    resumed = starts[0]["resume"] if starts else None
    c.check.expect(
        bool(resumed) and str(resumed).endswith("checkpoint-2"),
        f"first attempt resumed from {resumed}, expected checkpoint-2",
    )
    c.check.events(b"", _runs(work) / "events.jsonl")


# -- the table of conditions -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    name: str
    title: str
    run: Callable[[Ctx], None]
    needs_root: bool = False
    needs_mount: bool = False


CONDITIONS: tuple[Condition, ...] = (
    Condition("stranger_session", "1 stranger in the old attempt's session", stranger_session),
    Condition("symlink_events", "2a symlink at events.jsonl", symlink_events),
    Condition("symlink_attempt_log", "2b symlink at attempt-1.log", symlink_attempt_log),
    Condition("symlink_checkpoint", "2c checkpoint-N symlink outside", symlink_checkpoint),
    Condition("secrets", "3 secrets in args and env", secrets),
    Condition("patch_keeps_mode", "4 patched trainer_state keeps mode/owner", patch_keeps_mode),
    Condition(
        "full_log_disk",
        "5 full log disk (1 MiB tmpfs)",
        full_log_disk,
        needs_root=True,
        needs_mount=True,
    ),
    Condition("log_dir_deleted", "6 log dir deleted + second run", log_dir_deleted),
    Condition("half_line", "7 half line at the end of events.jsonl", half_line),
    Condition("log_dir_below_file", "8a log_dir below a regular file", log_dir_below_file),
    Condition("log_dir_is_file", "8a' log_dir is a regular file", log_dir_is_file),
    Condition("checkpoint_symlink_loop", "8b checkpoint-8 symlink loop", checkpoint_symlink_loop),
    Condition("trainer_state_loop", "8c trainer_state.json symlink loop", trainer_state_loop),
    Condition("status_mistyped_state", "8d status on a mistyped state.json", status_mistyped_state),
    Condition("sighup", "9 SIGHUP with the terminal gone", sighup),
    Condition(
        "sigterm_during_quarantine",
        "10 SIGTERM during a long quarantine",
        sigterm_during_quarantine,
    ),
    Condition("rerun_finished", "11 re-run of a finished job", rerun_finished),
    Condition("rerun_discarded_state", "11' re-run after a discarded state", rerun_discarded_state),
    Condition("ds_batch_mismatch", "12a train_batch_size 7 vs micro 4", ds_batch_mismatch),
    Condition("huge_micro", "12b micro-batch 10^30", huge_micro),
    Condition("sigkill_restart", "SIGKILL at random points + restart", sigkill_restart),
    Condition("output_flood", "output flood (no newlines, 4 MiB lines)", output_flood),
    Condition(
        "corrupt_checkpoints", "corrupt checkpoints kept byte-identical", corrupt_checkpoints
    ),
)
BY_NAME = {cond.name: cond for cond in CONDITIONS}


def select(names: str | None) -> list[Condition]:
    """The conditions named in a comma-separated list (all when None), in table order."""
    if not names:
        return list(CONDITIONS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown condition(s): {', '.join(unknown)}")
    return [cond for cond in CONDITIONS if cond.name in wanted]


def condition_rng(seed: int, name: str) -> random.Random:
    """One RNG per condition: the same seed gives the same choices whatever else runs."""
    return random.Random(f"{seed}:{name}")


def skip_reason(cond: Condition) -> str | None:
    if cond.needs_root and os.geteuid() != 0:
        return "needs root (mounts a tmpfs)"
    if cond.needs_mount and shutil.which("mount") is None:
        return "no mount(8) here"
    return None


def run_condition(cond: Condition, seed: int, scale: Scale) -> Result:
    """Run one condition in a fresh temporary directory; a harness failure (a timeout, a file
    the scenario expected) counts as not survived, with the reason, never as a crash."""
    reason = skip_reason(cond)
    if reason is not None:
        return Result(cond.name, cond.title, False, False, False, 0.0, (), (), (), reason)
    check = Check()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"chaos-{cond.name}-") as tmp:
        work = Path(tmp).resolve()
        try:
            cond.run(Ctx(work, condition_rng(seed, cond.name), scale, check))
        except Exception as exc:
            check.problem(f"harness: {type(exc).__name__}: {exc}")
        finally:
            strays = reap_strays(work)
            if strays:
                check.note(f"harness ended {len(strays)} leftover process(es)")
    return Result(
        cond.name,
        cond.title,
        True,
        not check.problems,
        bool(check.lost),
        time.monotonic() - t0,
        tuple(check.problems),
        tuple(check.lost),
        tuple(check.notes),
    )


def run_all(
    conditions: Sequence[Condition],
    seed: int,
    scale: Scale,
    progress: Callable[[Result], None] = lambda _r: None,
) -> list[Result]:
    results = []
    for cond in conditions:
        result = run_condition(cond, seed, scale)
        progress(result)
        results.append(result)
    return results


# -- the report ------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def result_notes(r: Result) -> str:
    if r.skipped:
        return f"skipped: {r.skipped}"
    parts = list(r.problems[:3])
    if len(r.problems) > 3:
        parts.append(f"(+{len(r.problems) - 3} more)")
    if r.lost:
        parts.append(f"lost: {', '.join(Path(p).name for p in r.lost[:3])}")
    return "; ".join([*parts, *r.notes])


def markdown(results: Sequence[Result], seed: int, scale: Scale) -> str:
    """The reliability table: one row per condition, then the totals."""
    yes = {True: "yes", False: "**no**"}
    rows = [
        f"Seed {seed}; sizes: flood {scale.flood_mb} MB, {scale.kill_trials} SIGKILL trials, "
        f"{scale.bad_checkpoints} bad checkpoints.",
        "",
        "| condition | tried | survived | data lost | seconds | notes |",
        "|---|---|---|---|---:|---|",
    ]
    for r in results:
        lost = ("**yes**" if r.data_lost else "no") if r.tried else "-"
        survived = yes[r.survived] if r.tried else "-"
        rows.append(
            f"| {_cell(r.title)} | {'yes' if r.tried else 'no'} | {survived} | {lost} "
            f"| {r.seconds:.1f} | {_cell(result_notes(r))} |"
        )
    tried = [r for r in results if r.tried]
    rows += [
        "",
        f"**Totals:** {len(results)} conditions, {len(tried)} tried, "
        f"{sum(r.survived for r in tried)} survived, "
        f"{sum(r.data_lost for r in tried)} with data lost, "
        f"{len(results) - len(tried)} skipped.",
    ]
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--quick", action="store_true", help="the bounded sizes of the test")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument(
        "--conditions", help="comma-separated names (default: all): " + ", ".join(BY_NAME)
    )
    ns = parser.parse_args(argv)
    try:
        conditions = select(ns.conditions)
    except ValueError as exc:
        parser.error(str(exc))
    scale = QUICK if ns.quick else FULL

    def progress(r: Result) -> None:
        verdict = "skipped" if not r.tried else ("ok" if r.survived and not r.data_lost else "FAIL")
        print(f"{r.name}: {verdict} ({r.seconds:.1f} s) {result_notes(r)}", file=sys.stderr)

    results = run_all(conditions, ns.seed, scale, progress)
    table = markdown(results, ns.seed, scale)
    print(table)
    if ns.markdown:
        ns.markdown.write_text(table)
    if ns.json:
        doc = {"seed": ns.seed, "scale": asdict(scale), "results": [asdict(r) for r in results]}
        ns.json.write_text(json.dumps(doc, indent=2) + "\n")
    failed = [r for r in results if r.tried and (not r.survived or r.data_lost)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
