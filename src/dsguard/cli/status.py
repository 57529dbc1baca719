"""``dsguard status``: one job's state from its log dir, without talking to the daemon.

Everything is read from files the supervisor already writes atomically (``state.json``,
``dsguard.lock``, per-rank heartbeats, the checkpoint dir) plus NVML and ``/proc``, so
status works for a running, a finished and a killed dsguard alike, and can never disturb
the run: it never takes the job lock (a status that held it for a moment would make a
dsguard starting at that moment refuse to run).

The failure mode it is built against is a *plausible lie*: ``state.json`` says ``running``
while dsguard was SIGKILLed hours ago, or a pid in it now belongs to another program after
pid reuse. Liveness is therefore checked with psutil and the process's start time
(``pid_create_time``), and a non-terminal state with a dead supervisor is reported as
``stale``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from dsguard.exitcodes import EXIT_NO_STATE, EXIT_NOT_RUNNING, EXIT_RUNNING
from dsguard.host.gpu import GpuSnapshot, Unknown
from dsguard.host.gpu import snapshot as gpu_snapshot
from dsguard.protocol import HEARTBEAT_SUBDIR
from dsguard.run.events import format_knobs
from dsguard.run.heartbeat import read_heartbeats
from dsguard.run.lock import read_job_holder
from dsguard.run.logdir import LOCK_FILENAME, STATE_FILENAME
from dsguard.run.state import TERMINAL, State, read_state

#: Tolerance when comparing a recorded process start time with psutil's (boot-time drift).
CREATE_TIME_TOLERANCE_S = 1.0
_CKPT = re.compile(r"checkpoint-(\d+)")


def _default_gpu() -> GpuSnapshot | Unknown:
    return gpu_snapshot(timeout_s=10.0)


def pid_alive(pid: object, *, create_time: object = None, not_before: object = None) -> bool | None:
    """Is ``pid`` the process that was recorded? None when ``pid`` is not a pid at all.

    ``create_time`` (the recorded psutil start time) or ``not_before`` (a wall-clock time the
    process cannot predate) rule out a reused pid; a zombie counts as dead.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; another user's process cannot be checked further
    if isinstance(create_time, (int, float)) and not isinstance(create_time, bool):
        return abs(started - float(create_time)) <= CREATE_TIME_TOLERANCE_S
    if isinstance(not_before, (int, float)) and not isinstance(not_before, bool):
        return started >= float(not_before) - CREATE_TIME_TOLERANCE_S
    return True


def _ledger(state: State | None) -> dict[str, Any]:
    """The loop's ledger in state.json (its layout is the loop's: read by key, defensively)."""
    ledger = None if state is None else state.ledger
    return ledger if isinstance(ledger, dict) else {}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _state_fields(state: State | None) -> dict[str, Any]:
    """What status shows from state.json. A top-level field that is absent (an older file,
    or a run that has not got that far) is taken from the ledger when the ledger has it."""
    ledger = _ledger(state)
    if state is None:
        keys = ("job", "run_id", "state", "reason", "attempt", "phase", "knobs", "global_batch",
                "positions", "attempt_log", "resume_from", "delay_s")  # fmt: skip
        return {**dict.fromkeys(keys), "history": []}
    history = ledger.get("history")
    # The ledger is read by key and unchecked: a mistyped value there ("attempt": "x") is
    # shown as unknown, not as "#x" or a crash further down.
    return {
        "job": state.job,
        "run_id": state.run_id,
        "state": state.state.value,
        "reason": state.reason,
        "attempt": state.attempt if state.attempt is not None else _count(ledger.get("attempt")),
        "phase": state.phase if state.phase is not None else _count(ledger.get("phase")),
        "knobs": state.knobs if state.knobs is not None else _mapping(ledger.get("knobs")),
        "global_batch": state.global_batch,
        "positions": ledger.get("positions"),
        "attempt_log": state.attempt_log,
        "resume_from": state.resume_from,
        "delay_s": state.delay_s,
        "history": history if isinstance(history, list) else [],
    }


def _heartbeats(log_dir: Path, attempt: object, now: float) -> dict[str, Any] | None:
    if not isinstance(attempt, int) or attempt <= 0:
        return None
    beats = read_heartbeats(log_dir / HEARTBEAT_SUBDIR, attempt)
    if not beats:
        return None
    ranks = [
        {
            "rank": hb.rank,
            "pid": hb.pid,
            "event": hb.event,
            "global_step": hb.global_step,
            "max_steps": hb.max_steps,
            "loss": hb.loss,
            "age_s": round(now - hb.time_s, 3),
            "max_memory_allocated_bytes": hb.max_memory_allocated_bytes,
            "max_memory_reserved_bytes": hb.max_memory_reserved_bytes,
            "host_rss_bytes": hb.host_rss_bytes,
        }
        for hb in beats
    ]
    lead = max(beats, key=lambda hb: (hb.global_step, -hb.rank))
    return {
        "attempt": attempt,
        "ranks": ranks,
        "last_step": lead.global_step,
        "max_steps": lead.max_steps,
        "loss": next((hb.loss for hb in beats if hb.rank == 0), lead.loss),
        "age_s": round(now - max(hb.time_s for hb in beats), 3),
    }


def _newest_checkpoint(ckpt_dir: object, now: float) -> dict[str, Any] | None:
    if not isinstance(ckpt_dir, str) or not ckpt_dir:
        return None
    root = Path(ckpt_dir)
    out: dict[str, Any] = {"dir": str(root), "path": None, "step": None, "age_s": None}
    try:
        entries = list(root.iterdir())
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
        return out
    except ValueError as exc:  # a NUL byte in a hand-edited or corrupt state.json
        out["error"] = f"not a usable path: {exc}"
        return out
    found = [(int(m.group(1)), p) for p in entries if (m := _CKPT.fullmatch(p.name)) and p.is_dir()]
    if not found:
        return out
    step, path = max(found, key=lambda sp: sp[0])
    # trainer_state.json is among the last files HF writes; the dir's own mtime moves with
    # any file added or removed inside it.
    mtimes = []
    for p in (path / "trainer_state.json", path):
        try:
            mtimes.append(p.stat().st_mtime)
        except OSError:
            continue
    out.update(path=str(path), step=step, age_s=round(now - mtimes[0], 3) if mtimes else None)
    return out


def collect(
    log_dir: Path,
    *,
    now: Callable[[], float] = time.time,
    gpu: Callable[[], GpuSnapshot | Unknown] | None = _default_gpu,
) -> dict[str, Any]:
    """Everything ``dsguard status`` shows, as a JSON-ready dict (see ``render_table``).

    Args:
        log_dir: the job's log dir (``state.json``, ``dsguard.lock``, ``heartbeat/``).
        now: wall clock (seconds since the epoch), injectable for tests.
        gpu: takes a GPU snapshot; None skips NVML (``"gpu": null``).
    """
    t = now()
    d: dict[str, Any] = {
        "log_dir": str(log_dir),
        "collected_at": datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds"),
        "problems": [],
    }
    state: State | None = None
    state_path = log_dir / STATE_FILENAME
    try:
        state = read_state(state_path)
    except FileNotFoundError:
        d["problems"].append(f"{state_path}: no state file (dsguard never ran with this log dir)")
    except (OSError, ValueError) as exc:
        d["problems"].append(f"{state_path}: unreadable: {exc}")
    d["has_state"] = state is not None

    d.update(_state_fields(state))
    d["last_failure"] = next(
        (h for h in reversed(d["history"]) if isinstance(h, dict) and h.get("kind")), None
    )

    # The supervisor: state.json's pid (with its start time), else the lock file's record.
    # The log dir's lock record, else (the log dir was deleted under a running dsguard) the
    # stable per-job lock's: the holder is found either way.
    holder, holder_path = read_job_holder(log_dir)
    sup_pid: int | None = None if state is None else state.pid
    sup_ct: float | None = None if state is None else state.pid_create_time
    source = "state.json"
    if sup_pid is None and holder is not None:
        sup_pid, sup_ct = holder.pid, holder.create_time
        source = LOCK_FILENAME if holder_path.name == LOCK_FILENAME else str(holder_path)
    alive = pid_alive(sup_pid, create_time=sup_ct)
    d["supervisor"] = {
        "pid": sup_pid,
        "alive": alive,
        "identity_checked": isinstance(sup_ct, (int, float)),
        "source": source if sup_pid is not None else None,
        "started_at": holder.started_at if holder is not None and holder.pid == sup_pid else None,
    }
    # The attempt's launcher: its start time cannot predate the attempt's recorded start.
    current = None if state is None else state.current_attempt
    child_pid = None if state is None else state.pid_child
    not_before = None if current is None else current.started_epoch_s
    d["attempt_process"] = (
        None
        if child_pid is None
        else {"pid": child_pid, "alive": pid_alive(child_pid, not_before=not_before)}
    )

    run_state = d["state"]
    terminal = run_state in {s.value for s in TERMINAL}
    d["running"] = alive is True
    # Stale only when the recorded dsguard is known to be gone; no recorded pid is "unknown".
    d["stale"] = state is not None and not terminal and alive is False
    if d["stale"]:
        d["problems"].append(
            f"state.json says {run_state!r} but dsguard (pid {sup_pid}) is not running: "
            "it was killed or crashed; `dsguard run` resumes the job"
        )
    elif state is not None and not terminal and alive is None:
        d["problems"].append("no dsguard pid recorded: cannot tell whether it is running")

    d["heartbeat"] = _heartbeats(log_dir, d["attempt"], t) if state is not None else None
    ckpt_dir = (None if state is None else state.checkpoint_dir) or _ledger(state).get("ckpt_dir")
    d["checkpoint"] = _newest_checkpoint(ckpt_dir, t)

    d["sparklines"] = _sparklines(log_dir) if state is not None else []
    if gpu is None:
        d["gpu"] = None
    else:
        snap = gpu()
        d["gpu"] = snap.as_dict()
    return d


def _sparklines(log_dir: Path) -> list[tuple[str, str]]:
    """Loss and memory over the run, one line each (issue 17); never fails status."""
    from dsguard.report.load import history_rows

    try:
        return history_rows(log_dir)
    except Exception:  # a history problem costs the sparklines, not the status
        return []


def status_exit_code(d: Mapping[str, Any]) -> int:
    """0: dsguard is running; 3: it is not (finished, stopped, killed); 4: no state at all."""
    if not d.get("has_state") and not d.get("running"):
        return EXIT_NO_STATE
    return EXIT_RUNNING if d.get("running") else EXIT_NOT_RUNNING


# -- rendering -------------------------------------------------------------------------------


def _age(s: object) -> str:
    if not isinstance(s, (int, float)):
        return "?"
    s = max(0.0, float(s))
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _gib(n: object) -> str:
    return f"{n / (1 << 30):.1f}" if isinstance(n, int) else "?"


def _knobs(k: object) -> str:
    return format_knobs(k) if isinstance(k, dict) else "?"


def _alive_word(alive: object) -> str:
    return {True: "alive", False: "NOT RUNNING", None: "unknown"}.get(
        alive if isinstance(alive, bool) else None, "unknown"
    )


def render_table(d: Mapping[str, Any]) -> str:
    """A short aligned summary for a terminal (JSON is the machine format: ``json.dumps(d)``)."""
    rows: list[tuple[str, str]] = []
    state = d.get("state") or "unknown"
    if d.get("stale"):
        state = f"{state} (STALE: dsguard is gone)"
    reason = f" - {d['reason']}" if d.get("reason") else ""
    rows.append(("job", f"{d.get('job') or '?'}  [{d.get('log_dir')}]"))
    rows.append(("state", f"{state}{reason}"))
    sup = d.get("supervisor") or {}
    if sup.get("pid") is not None:
        since = f", since {sup['started_at']}" if sup.get("started_at") else ""
        rows.append(("dsguard", f"pid {sup['pid']} {_alive_word(sup.get('alive'))}{since}"))
    if d.get("attempt") is not None:
        line = f"#{d['attempt']}"
        proc = d.get("attempt_process")
        if isinstance(proc, dict):
            line += f", launcher pid {proc.get('pid')} {_alive_word(proc.get('alive'))}"
        if d.get("phase") not in (None, 1):
            line += f", phase {d['phase']}"
        rows.append(("attempt", line))
    if d.get("knobs") is not None:
        rows.append(("config", f"{_knobs(d['knobs'])}; global batch {d.get('global_batch')}"))
    hb = d.get("heartbeat")
    if isinstance(hb, dict):
        of = f"/{hb['max_steps']}" if hb.get("max_steps") else ""
        loss = f", loss {hb['loss']:.4g}" if isinstance(hb.get("loss"), (int, float)) else ""
        rows.append(
            (
                "progress",
                f"step {hb.get('last_step')}{of}{loss}; heartbeat {_age(hb.get('age_s'))} ago "
                f"({len(hb.get('ranks') or [])} rank(s))",
            )
        )
        for r in hb.get("ranks") or []:
            mem = r.get("max_memory_reserved_bytes")
            rss = r.get("host_rss_bytes")
            rows.append(
                (
                    f"  rank {r.get('rank')}",
                    f"step {r.get('global_step')}, {r.get('event')} {_age(r.get('age_s'))} ago, "
                    f"GPU reserved {_gib(mem)} GiB, host RSS {_gib(rss)} GiB",
                )
            )
    ck = d.get("checkpoint")
    if isinstance(ck, dict):
        if ck.get("path"):
            rows.append(
                ("checkpoint", f"{Path(ck['path']).name}, written {_age(ck.get('age_s'))} ago")
            )
        else:
            rows.append(("checkpoint", f"none yet in {ck.get('dir')}"))
    lf = d.get("last_failure")
    if isinstance(lf, dict):
        rows.append(("last failure", f"{lf.get('kind')} (attempt {lf.get('attempt')})"))
    g = d.get("gpu")
    if isinstance(g, dict):
        if not g.get("available"):
            rows.append(("gpu", f"unknown: {g.get('reason')}"))
        for dev in g.get("devices") or []:
            procs = dev.get("processes")
            who = (
                "processes unknown"
                if procs is None
                else ", ".join(f"pid {p['pid']} {_gib(p['used_bytes'])} GiB" for p in procs)
                or "no processes"
            )
            util = dev.get("utilization_pct")
            rows.append(
                (
                    f"gpu {dev.get('index')}",
                    f"{_gib(dev.get('used_bytes'))}/{_gib(dev.get('total_bytes'))} GiB, "
                    f"{'?' if util is None else util}% busy; {who}",
                )
            )
    for label, line in d.get("sparklines") or []:
        rows.append((label, line))
    for p in d.get("problems") or []:
        rows.append(("problem", str(p)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def render(d: Mapping[str, Any], *, as_json: bool | None = None) -> str:
    """The table on a terminal, JSON otherwise (or as forced by ``as_json``)."""
    use_json = (not os.isatty(1)) if as_json is None else as_json
    return json.dumps(d, default=str) if use_json else render_table(d)


__all__ = [
    "EXIT_NOT_RUNNING",
    "EXIT_NO_STATE",
    "EXIT_RUNNING",
    "collect",
    "pid_alive",
    "render",
    "render_table",
    "status_exit_code",
]
