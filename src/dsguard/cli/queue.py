"""``dsguard queue``: add, show, cancel and run the overnight queue (see ``dsguard.queue``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dsguard.errors import JobFileError
from dsguard.exitcodes import EXIT_OK, EXIT_USAGE

# Imported where used: the parser is built for every dsguard command, and `dsguard --help`
# must not pay for SQLite, PyYAML and NVML's retry machinery.
if TYPE_CHECKING:
    from dsguard.queue.derive import Matrix
    from dsguard.queue.store import QueueJob, Store


def _rows_for(store: Store, path: str, ns: argparse.Namespace) -> list[dict[str, Any]]:
    """The queue rows one job file becomes (one per ``--matrix`` value).

    Raises:
        JobFileError: the job file, or a derived one, is invalid.
    """
    from dsguard.job.file import load_job
    from dsguard.queue.derive import derive, dump, read_raw, slug
    from dsguard.queue.store import JOBS_SUBDIR
    from dsguard.run.safefs import write_atomic

    job = load_job(Path(path))
    assert job.source is not None
    raw = read_raw(job.source)
    matrix: Matrix | None = ns.matrix
    variants: list[tuple[str | None, tuple[str, str] | None]] = (
        [(None, None)] if matrix is None
        else [(f"{job.name}-{slug(v)}", (matrix.key, v)) for v in matrix.values]
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    for name, value in variants:
        doc = derive(raw, job, name=name, matrix=value)
        job_file = store.root / JOBS_SUBDIR / f"{doc['name']}.yaml"
        write_atomic(job_file, dump(doc).encode())
        derived = load_job(job_file, writable=True)
        wanted = ns.gpus if ns.gpus is not None else (len(job.gpus) if job.gpus else job.world_size)
        rows.append({
            "name": derived.name, "priority": ns.priority, "after": ns.after,
            "source": str(job.source), "job_file": str(job_file), "job_yaml": dump(doc),
            "log_dir": str(derived.log_dir),
            "checkpoint_dir": None if derived.checkpoints is None else str(derived.checkpoints.dir),
            "gpus_wanted": wanted,
            "gpu_ids": list(job.gpus) if job.gpus and ns.gpus is None else None,
            "gpu_fraction": job.resources.gpu_memory_fraction,
            "host_mem_bytes": job.resources.host_memory_limit_bytes,
            "matrix": None if value is None else {"key": value[0], "value": value[1]},
        })  # fmt: skip
    return rows


def _store() -> Store:
    from dsguard.queue.store import Store, queue_dir

    return Store(queue_dir())


def cmd_add(ns: argparse.Namespace) -> int:
    from dsguard.queue.store import QueueError

    store = _store()
    try:
        rows = [row for path in ns.jobs for row in _rows_for(store, path, ns)]
        store.add(rows)
    except JobFileError as err:
        for p in err.problems:
            print(str(p), file=sys.stderr)
        print("dsguard queue: nothing was added", file=sys.stderr)
        return EXIT_USAGE
    except QueueError as exc:
        print(f"dsguard queue add: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for row in rows:
        print(f"queued {row['name']} (log_dir {row['log_dir']})")
    return EXIT_OK


def _age(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def job_view(job: QueueJob, now: float) -> dict[str, Any]:
    """One job as ``dsguard queue status`` shows it: the queue's row and, once its run has
    a ``state.json``, the run's own state, attempt, rung, last step and checkpoint age."""
    from dsguard.cli.status import collect

    view: dict[str, Any] = {
        "name": job.name, "state": job.state.value, "reason": job.reason,
        "priority": job.priority, "after": job.after, "starts": job.starts,
        "gpus": list(job.assigned) if job.assigned else None, "pid": job.pid,
        "exit_code": job.exit_code, "log_dir": job.log_dir, "matrix": job.matrix,
        "run": None,
    }  # fmt: skip
    if job.starts == 0:
        return view
    d = collect(Path(job.log_dir), now=lambda: now, gpu=None)
    if d.get("has_state"):
        hb = d.get("heartbeat") or {}
        ckpt = d.get("checkpoint") or {}
        view["run"] = {
            "state": d.get("state"), "attempt": d.get("attempt"), "positions": d.get("positions"),
            "rung": _rung_names(job.job_file, d.get("positions")),
            "knobs": d.get("knobs"), "last_step": hb.get("last_step"),
            "checkpoint_step": ckpt.get("step"), "checkpoint_age_s": ckpt.get("age_s"),
        }  # fmt: skip
    return view


def _rung_names(job_file: str, positions: object) -> str | None:
    """The rung each ladder is at (``positions``: ladder -> index of the rung being applied),
    by name from the job's own ladder, e.g. ``oom:micro_batch``; None when not on a ladder."""
    if not isinstance(positions, dict) or not positions:
        return None
    from dsguard.job.file import load_job

    try:
        ladder = load_job(Path(job_file)).ladder
    except (JobFileError, OSError):
        return ",".join(f"{k}:{v}" for k, v in sorted(positions.items()))
    out = []
    for name, index in sorted(positions.items()):
        rungs = getattr(ladder, name, ())
        ok = isinstance(index, int) and 0 <= index < len(rungs)
        out.append(f"{name}:{rungs[index] if ok else index}")
    return ",".join(out)


def render_table(views: Sequence[dict[str, Any]]) -> str:
    head = ["NAME", "STATE", "ATTEMPT", "RUNG", "GPUS", "STEP", "CKPT AGE", "REASON"]
    rows = [head]
    for v in views:
        run = v["run"] or {}
        rows.append([
            v["name"], v["state"], str(run.get("attempt") or "-"), run.get("rung") or "-",
            ",".join(map(str, v["gpus"])) if v["gpus"] else "-",
            str(run["last_step"]) if run.get("last_step") is not None else "-",
            _age(run.get("checkpoint_age_s")), v["reason"] or "",
        ])  # fmt: skip
    widths = [max(len(r[c]) for r in rows) for c in range(len(head) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    )


def cmd_status(ns: argparse.Namespace) -> int:
    from dsguard.queue.store import DB_FILENAME, queue_dir

    root = queue_dir()
    if not (root / DB_FILENAME).is_file():  # a read must not create the queue
        print(json.dumps({"queue_dir": str(root), "jobs": []}, indent=2) if ns.json
              else f"the queue is empty ({root})")  # fmt: skip
        return EXIT_OK
    store = _store()
    now = time.time()
    views = [job_view(j, now) for j in store.jobs()]
    if ns.json:
        print(json.dumps({"queue_dir": str(store.root), "jobs": views}, indent=2))
    elif not views:
        print(f"the queue is empty ({store.root})")
    else:
        print(render_table(views))
    return EXIT_OK


def cmd_cancel(ns: argparse.Namespace) -> int:
    from dsguard.queue.store import QueueError

    store = _store()
    try:
        job = store.cancel(ns.name)
    except QueueError as exc:
        print(f"dsguard queue cancel: {exc}", file=sys.stderr)
        return EXIT_USAGE
    running = " (the daemon ends its dsguard run)" if job.state.value == "running" else ""
    print(f"cancelled {ns.name}{running}")
    return EXIT_OK


def cmd_run(ns: argparse.Namespace) -> int:
    from dsguard.queue.alloc import GPU_BUSY_FRACTION
    from dsguard.queue.daemon import Daemon
    from dsguard.queue.store import QueueError

    busy = GPU_BUSY_FRACTION if ns.busy_fraction is None else ns.busy_fraction
    daemon = Daemon(_store(), slots=ns.slots, until_empty=ns.until_empty,
                    busy_fraction=busy, console=sys.stderr)  # fmt: skip

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        daemon.request_stop(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return daemon.run()
    except QueueError as exc:
        print(f"dsguard queue run: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _matrix(text: str) -> Matrix:
    from dsguard.queue.derive import Matrix

    try:
        return Matrix.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: Any) -> None:
    """``dsguard queue ...`` (called by ``cli/main.py``'s parser)."""
    q = sub.add_parser(
        "queue", help="the overnight queue: add jobs, show them, run them",
        description="dsguard queue [status] | add JOB.yaml... | cancel NAME | run. State "
        "lives in $DSGUARD_QUEUE_DIR (default ~/.local/share/dsguard/queue).",
    )  # fmt: skip
    q.set_defaults(func=cmd_status, json=False)
    qs = q.add_subparsers(dest="queue_cmd")
    add = qs.add_parser("add", help="queue job files (each a normal dsguard job)")
    add.add_argument("jobs", nargs="+", metavar="JOB.yaml")
    add.add_argument("--gpus", type=int, help="whole GPUs to hand out (default: the job's)")
    add.add_argument("--after", help="start only once this queued job has succeeded")
    add.add_argument("--priority", type=int, default=0, help="higher starts first")
    add.add_argument("--matrix", type=_matrix, metavar="KEY=V1,V2",
                     help="one job per value, NAME-VALUE, given --KEY VALUE")  # fmt: skip
    add.set_defaults(func=cmd_add)
    st = qs.add_parser("status", help="each job's state, attempt, rung, GPUs, step")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)
    ca = qs.add_parser("cancel", help="cancel a queued job, or end a running one")
    ca.add_argument("name")
    ca.set_defaults(func=cmd_cancel)
    run = qs.add_parser("run", help="the queue daemon, in the foreground")
    run.add_argument("--until-empty", action="store_true", help="exit when nothing is left")
    run.add_argument("--slots", type=int, default=1, help="CPU jobs at once (default 1)")
    run.add_argument(
        "--busy-fraction",
        type=float,
        help="a GPU with more of its memory in use is busy (default 0.05)",
    )
    run.set_defaults(func=cmd_run)


__all__ = ["add_parser", "job_view", "render_table"]
