"""``dsguard`` command line: run, validate, plan, explain, events, status, service.

Exit codes: 0 succeeded (or valid), 1 gave up, 2 bad job file, usage, or the job is already
supervised, 128+N stopped by signal N (130 SIGINT, 143 SIGTERM), 70 an internal dsguard error
(a bug: under systemd it is restarted and recovers, unlike a deliberate give-up). All logic
lives in library functions; this module only parses arguments, prints, and maps outcomes to
exit codes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dsguard import __version__
from dsguard.errors import JobFileError
from dsguard.exitcodes import EXIT_INTERNAL_ERROR, EXIT_OK, EXIT_USAGE
from dsguard.job.model import Job

if TYPE_CHECKING:  # the classifier is imported where it is used, off --help's path
    from dsguard.core.classify import PasteUndone


def _load(path: str, *, writable: bool = False) -> Job:
    """The job file, validated; ``writable``: for the commands that will write its log dir
    (``run``, and ``validate``, which must refuse what ``run`` would)."""
    from dsguard.job.file import load_job

    return load_job(Path(path), writable=writable)


def _log_dir_unusable(log_dir: Path) -> str | None:
    """Why ``dsguard run`` cannot create ``log_dir`` or take its lock there, or None.

    The job file already refuses a log dir below a file or on a read-only mount; this covers
    the quick start (no job file) and whatever changed since validation. It creates nothing:
    the supervisor creates the directory and the lock file, with the modes it chooses. An
    ``OSError`` there used to escape as a traceback and exit 70, which systemd reads as
    "crashed, restart me": a restart loop that never names the directory.
    """
    from dsguard.job.file import dir_problem
    from dsguard.run.logdir import LogDir

    problem = dir_problem(log_dir, writable=True)
    if problem is not None:
        return problem
    logs = LogDir(log_dir)
    for path in (logs.lock, logs.events, logs.state):
        if path.is_dir():
            return f"{path} is a directory; dsguard needs to write a file there"
    return None


def _is_setup_error(exc: OSError, log_dir: Path) -> bool:
    """Whether ``exc`` came from creating ``log_dir`` (or a parent) or one of its lock files
    (the one in the log dir, or the stable per-job lock and its directory): the supervisor's
    first two steps, before anything is launched."""
    from dsguard.run.lock import job_lock_path
    from dsguard.run.logdir import LogDir

    if exc.filename is None:
        return False
    where = Path(os.fsdecode(exc.filename))
    stable = job_lock_path(log_dir)
    logs = LogDir(log_dir)
    return (
        where in (logs.lock, logs.heartbeat_dir, logs.control_dir, log_dir, stable)
        or where in log_dir.parents
        or where in stable.parents
    )


def _print_problems(err: JobFileError) -> int:
    for p in err.problems:
        print(str(p), file=sys.stderr)
    print("dsguard: nothing was launched", file=sys.stderr)
    return EXIT_USAGE


def cmd_run(ns: argparse.Namespace) -> int:
    from dsguard.run.loop import Supervisor

    command: list[str] = ns.command
    try:
        if command and command[0] == "--":
            command = command[1:]
        if ns.job and command:
            print("dsguard run: give a job file or '-- COMMAND', not both", file=sys.stderr)
            return EXIT_USAGE
        if ns.job and (ns.knob or ns.memory_limit):
            print(
                "dsguard run: --knob and --memory-limit are for a quick start; write them in "
                "the job file (flags:, resources.host_memory_limit)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if ns.job:
            job = _load(ns.job, writable=True)
        elif command:
            from dsguard.job.quickstart import job_from_command

            job = job_from_command(
                command,
                cwd=Path.cwd(),
                name=ns.name,
                log_dir=Path(ns.log_dir).resolve() if ns.log_dir else None,
                knob_flags=ns.knob,
                memory_limit=ns.memory_limit,
            )
        else:
            print("dsguard run: give a job file or '-- COMMAND ...'", file=sys.stderr)
            return EXIT_USAGE
    except JobFileError as err:
        return _print_problems(err)
    try:
        ns.exit_contract = _exit_contract(ns, job)
    except ValueError as exc:
        print(f"dsguard run: exit codes: {exc}", file=sys.stderr)
        return EXIT_USAGE
    unusable = _log_dir_unusable(job.log_dir)
    if unusable is not None:
        print(f"dsguard run: log_dir: {unusable}", file=sys.stderr)
        print("dsguard: nothing was launched", file=sys.stderr)
        return EXIT_USAGE

    if not ns.fit:
        import dataclasses

        job = dataclasses.replace(job, fit=False)
    from dsguard.cli.report import run_outputs

    listeners, close_outputs = run_outputs(job)  # notify: and metrics: (issue 17)
    sup = Supervisor(
        job,
        console=sys.stderr,
        echo=None if ns.quiet else sys.stdout.buffer,
        listeners=listeners,
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        sup.request_stop(signum)

    def on_hangup(signum: int, _frame: FrameType | None) -> None:
        # An SSH disconnect or a closed terminal must not end a night's training, nor leave
        # state.json `running` with orphaned ranks: keep supervising, silently.
        sup.console_lost(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    try:
        return sup.run()
    except OSError as exc:
        # Creating the log dir and taking the lock are the supervisor's first steps: a
        # failure there (no inode left, a quota, a directory removed since the check above)
        # is the environment's, not a bug, and must not become exit 70 (a systemd restart
        # loop). Any other OSError is left to main()'s internal-error path.
        from dsguard.run.safefs import UnsafePathError

        if isinstance(exc, UnsafePathError):
            # A symlink or a stranger's file where dsguard writes (run/safefs.py): refused
            # before anything is launched, and never written through.
            print(f"dsguard run: {exc}", file=sys.stderr)
            print("dsguard: nothing was launched", file=sys.stderr)
            return EXIT_USAGE
        if not _is_setup_error(exc, job.log_dir):
            raise
        print(f"dsguard run: cannot create the log dir or take the job lock: {exc}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    finally:
        close_outputs()  # queued notifications get their chance; metrics threads stop


def cmd_validate(ns: argparse.Namespace) -> int:
    try:
        job = _load(ns.job, writable=True)
    except JobFileError as err:
        return _print_problems(err)
    if ns.deep:
        from dsguard.cli.deep_validate import run_deep_validation

        res = run_deep_validation(job)
        if job.deepspeed is not None:
            for fix in res.fixes:
                print(f"{job.deepspeed.config_path}: fixed at launch: {fix}")
        if res.problems:
            return _print_problems(JobFileError(res.problems))
        print(
            f"DeepSpeed {res.deepspeed_version} accepts {res.configs_checked} rendered "
            "config(s) (attempt 1 and every rung of the ladder)"
        )
    elif job.deepspeed is not None:
        from dsguard.core.render import launcher_problems, render_attempt_config

        pre = render_attempt_config(job, job.knobs, remedies=(), world_size=job.world_size)
        for fix in pre.fixes:
            print(f"{job.deepspeed.config_path}: fixed at launch: {fix}")
        problems = [*launcher_problems(job), *pre.problems]
        if problems:
            for problem in problems:
                print(f"{job.deepspeed.config_path}: {problem}", file=sys.stderr)
            print("dsguard: nothing was launched", file=sys.stderr)
            return EXIT_USAGE
    _print_routes(ns.job, job)
    k = job.knobs
    print(
        f"{ns.job}: ok: job {job.name!r}, launcher {job.launcher}, world {job.world_size}, "
        f"global batch {k.global_batch(job.world_size)} "
        f"(micro {k.micro_batch_size} x accum {k.gradient_accumulation_steps} x world "
        f"{job.world_size}), log_dir {job.log_dir}"
    )
    return EXIT_OK


def _print_routes(where: str, job: Any) -> None:
    """What ``validate`` says about knob delivery: each rung left out of the ladder because a
    knob it changes cannot reach the script (or is fixed), and what packing was detected."""
    from dsguard.job.delivery import routes, undeliverable_rungs

    route = routes(job)
    for rung, knobs in undeliverable_rungs(job).items():
        whys = [
            f"{k} is fixed by limits.fixed"
            if k in job.limits.fixed
            else f"{k} cannot be delivered (no flag, knobs_file key, knobs_dotlist key or "
            "knobs_env name" + (", and not a DeepSpeed config key)" if route[k] is None else ")")
            for k in knobs
        ]
        print(f"{where}: ladder: rung {rung} is left out: {'; '.join(whys)}")
    if job.data.packing:
        print(f"{where}: data: packed ({job.data.source}): a max_length move starts a new phase")


def _plan_table(steps: Sequence[Any]) -> list[str]:
    """``dsguard plan``'s table: one row per step, one column per knob (labels from the knob
    table, so a new knob shows up here without a second list to update)."""
    from dsguard.job.knobs import KNOB_SPECS, format_knob

    head = ["step", "rung", "global", *(s.label for s in KNOB_SPECS.values()), "phase"]
    rows: list[list[str]] = []
    phase = 1
    for i, step in enumerate(steps):
        phase += 1 if step.new_phase else 0
        values = step.knobs.as_dict()
        rows.append(
            [
                str(i),
                step.rung or "(start)",
                str(step.global_batch),
                *(format_knob(values[name]) for name in KNOB_SPECS),
                f"{phase}{' NEW' if step.new_phase else ''}",
            ]
        )
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    # The rung name reads best left-aligned, the numbers right-aligned; the last column is
    # not padded (no trailing blanks).
    return [
        "  ".join(
            cell.ljust(w) if c == 1 else cell.rjust(w) if c < len(head) - 1 else cell
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [head, *rows]
    ]


def cmd_plan(ns: argparse.Namespace) -> int:
    from dsguard.core.classify import FailureKind
    from dsguard.core.ladder import PolicyConfig, plan

    try:
        job = _load(ns.job)
    except JobFileError as err:
        return _print_problems(err)
    if ns.fit:
        return _plan_fit(job, as_json=ns.json)
    cfg = PolicyConfig.from_job(job)
    kinds = (
        [FailureKind.CUDA_OOM, FailureKind.HOST_OOM] if ns.kind == "all" else [FailureKind(ns.kind)]
    )
    out: dict[str, Any] = {}
    for kind in kinds:
        steps = plan(kind, job.knobs, cfg)
        out[kind.value] = [
            {
                "rung": s.rung,
                "knobs": s.knobs.as_dict(),
                "global_batch": s.global_batch,
                "tokens_per_step": s.tokens_per_step,
                "new_phase": s.new_phase,
                "caveats": list(s.caveats),
            }
            for s in steps
        ]
        if ns.json:
            continue
        print(f"On repeated {kind}: ({len(steps) - 1} rungs, then give up)")
        if kind is kinds[0]:
            _print_routes(ns.job, job)
        for line in _plan_table(steps):
            print(line)
        print()
    if ns.json:
        print(json.dumps(out, indent=2))
    return EXIT_OK


def _explain_verdict(failure: Any, exit_code: int | None) -> str:
    """One sentence: what probably happened, and that a saved log has no live evidence.

    A saved log has no exit status unless ``--exit-code`` gives it, and never the cgroup
    OOM-kill counter, the kernel log or the memory pressure that confirm or refute a
    SIGKILL as a host OOM during a run; the verdict says so instead of pretending.
    """
    status = "no exit status given" if exit_code is None else f"exit status {exit_code}"
    if failure.kind.value == "host_oom" and failure.host_oom_confirmed is None:
        if failure.rank_exit is not None:
            why = f"the launcher or shell reported a process exited with {failure.rank_exit}"
        elif failure.exit.killed:
            why = f"the exit status {failure.exit.raw} is a SIGKILL"
        else:
            why = "the output shows an allocation failure"
        if failure.rank_exit is None and not failure.exit.killed:
            return f"host_oom: {why} (a saved log: {status}, no live evidence)"
        return (
            f"probable host_oom: {why}; unconfirmed (no live evidence: {status}, "
            "no cgroup OOM-kill counter or kernel log read)"
        )
    if failure.probable is not None:
        return (
            f"unknown: no rule names this failure; its words point to "
            f"{failure.probable.value} (probable, from its words alone; acted on as unknown) "
            f"(a saved log: {status}, no live evidence)"
        )
    return f"{failure.kind.value} (a saved log: {status}, no live evidence)"


def _plan_fit(job: Job, *, as_json: bool) -> int:
    from dsguard.cli.fitplan import plan_dict, plan_lines
    from dsguard.run.fit import plan_for

    fit_plan, state = plan_for(job)
    known, hints = state.known(), state.hints()
    env = None if state.inputs is None else state.inputs.env_fingerprint or None
    if as_json:
        out = plan_dict(fit_plan)
        out["store"] = {
            "path": None if state.store is None else str(state.store.path),
            "problem": state.store_problem, "env_fingerprint": env,
            "known": [{"knobs": k.as_dict(), "fits": v.fits, "samples_per_s": v.samples_per_s,
                       "peak_bytes": v.peak_bytes, "env": v.env} for k, v in known.items()],
            "other_env": [{"knobs": k.as_dict(), "fits": v.fits, "env": v.env,
                           "samples_per_s": v.samples_per_s, "peak_bytes": v.peak_bytes}
                          for k, v in hints.items()],
        }  # fmt: skip
        print(json.dumps(out, indent=2))
        return EXIT_OK
    for line in plan_lines(fit_plan):
        print(line)
    if state.store_problem is not None:
        print(f"known-good store not used: {state.store_problem}")
    elif state.store is not None:
        good = sum(1 for v in known.values() if v.fits)
        print(f"known-good store {state.store.path}: {good} config(s) known to fit, "
              f"{len(known) - good} known to fail for this regime "
              f"(environment {env or 'unknown'})")  # fmt: skip
        if hints:
            envs = sorted({v.env or "unknown" for v in hints.values()})
            print(f"  and {len(hints)} config(s) recorded in another environment "
                  f"({', '.join(envs)}): hints only, the plan starts one step safer")  # fmt: skip
    return EXIT_OK


def cmd_explain(ns: argparse.Namespace) -> int:
    from dsguard.core.classify import decode_exit, read_saved_text
    from dsguard.core.ladder import is_recoverable

    try:
        text = Path(ns.file).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"dsguard explain: {ns.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    failure, undone = read_saved_text(text, ns.exit_code)
    if failure is None:
        result: dict[str, Any] = {
            "kind": None, "recoverable": None, "rank": None, "evidence": [],
            "exit_code": ns.exit_code, "signal": decode_exit(ns.exit_code).signal,
            "verdict": "success (exit code 0)",
        }  # fmt: skip
    else:
        result = {
            "kind": failure.kind.value,
            "recoverable": is_recoverable(failure.kind),
            "retry_helps": failure.retry_helps,
            "rank": failure.rank,
            "rank_exit": failure.rank_exit,
            "evidence": list(failure.evidence),
            "exit_code": failure.exit.raw,
            "signal": failure.exit.signal,
            "live_evidence": False,
            "host_oom_confirmed": failure.host_oom_confirmed,
            "verdict": _explain_verdict(failure, ns.exit_code),
            "hint": failure.hint,
            "probable_kind": None if failure.probable is None else failure.probable.value,
            "probable_words": list(failure.probable_words),
            # a paste's quote marks, shared indentation or terminal wrap, undone to read it
            "paste_undone": None if undone is None else dataclasses.asdict(undone),
        }
    if ns.json:
        print(json.dumps(result))
        return EXIT_OK
    if failure is None:
        print("kind: none (exit code 0: success)")
        return EXIT_OK
    print(f"verdict: {result['verdict']}")
    print(f"kind: {result['kind']}")
    print(f"recoverable: {'yes' if result['recoverable'] else 'no'}")
    print(f"unchanged retry helps: {'yes' if result['retry_helps'] else 'no'}")
    print(f"rank: {result['rank'] if result['rank'] is not None else 'unknown'}")
    if result["signal"] is not None:
        print(f"exit: {result['exit_code']} (signal {result['signal']})")
    if result["rank_exit"] is not None:
        print(f"killed rank's exit status (from the launcher's report): {result['rank_exit']}")
    if result["hint"]:
        print(f"hint: {result['hint']}")
    if undone is not None:
        print(f"read without the paste's form: {_paste_undone_words(undone)}")
    if result["probable_kind"] is not None:
        words = ", ".join(result["probable_words"])
        print(f"probable kind: {result['probable_kind']} (the words that weighed most: {words})")
    print("evidence:")
    for line in result["evidence"]:
        print(f"  {line}")
    return EXIT_OK


def _paste_undone_words(undone: PasteUndone) -> str:
    words = ["its quote marks"] if undone.quoted else []
    if undone.indent:
        words.append(f"the {undone.indent}-character indentation every line had")
    if undone.width is not None:
        words.append(f"the lines a terminal cut at {undone.width} columns joined")
    return "; ".join(words)


def _log_dir_of(target: str) -> Path:
    p = Path(target)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return _load(target).log_dir
    return p


def _events_path(target: str) -> Path:
    p = Path(target)
    if p.is_file() and p.suffix not in (".yaml", ".yml"):
        return p
    return _log_dir_of(target) / "events.jsonl"


def cmd_events(ns: argparse.Namespace) -> int:
    from dsguard.run.events import human_line, read_events

    try:
        path = _events_path(ns.target)
    except JobFileError as err:
        return _print_problems(err)
    if not ns.follow and not path.is_file():
        print(f"dsguard events: {path}: no event log", file=sys.stderr)
        return EXIT_USAGE
    wanted = set(ns.event or [])
    since = None
    if ns.since is not None:
        from dsguard.cli.report import since_epoch

        since = since_epoch(ns.since)
        if since is None:
            print(f"dsguard events: --since {ns.since!r}: write e.g. 90s, 30m, 2h, 1d or an "
                  "ISO time (2026-01-31T22:00)", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
    if ns.follow:
        from dsguard.run.follow import follow

        source: Iterable[dict[str, Any]] = follow(path)
    else:
        source = read_events(path)
    try:
        for ev in source:
            if wanted and ev.get("event") not in wanted:
                continue
            if ns.attempt is not None and ev.get("attempt") != ns.attempt:
                continue
            if ns.run is not None and ev.get("run_id") != ns.run:
                continue
            if since is not None and not _after(ev, since):
                continue
            print(json.dumps(ev) if ns.json else human_line(ev), flush=ns.follow)
    except KeyboardInterrupt:
        pass
    if not ns.json and not ns.follow:
        from dsguard.report.load import history_rows

        for label, line in history_rows(path.parent):  # loss and memory, one line each
            print(f"{label:<9} {line}")
    return EXIT_OK


def _after(ev: dict[str, Any], since: float) -> bool:
    from dsguard.core.summary import ts_seconds

    t = ts_seconds(ev.get("ts"))
    return t is None or t >= since


def cmd_doctor(ns: argparse.Namespace) -> int:
    from dsguard.cli.doctor import collect, exit_code, render_table

    job: Job | None = None
    if ns.job:
        try:
            job = _load(ns.job)
        except JobFileError as err:
            return _print_problems(err)
    report = collect(job, python=ns.python)
    print(json.dumps(report.as_dict(), indent=2) if ns.json else render_table(report))
    return exit_code(report)


def cmd_status(ns: argparse.Namespace) -> int:
    from dsguard.cli.status import collect, render, status_exit_code

    try:
        log_dir = _log_dir_of(ns.target)
    except JobFileError as err:
        return _print_problems(err)
    d = collect(log_dir)
    print(render(d, as_json=True if ns.json else None))
    return status_exit_code(d)


def cmd_service_install(ns: argparse.Namespace) -> int:
    from dsguard.cli.service import ServiceInstallError, install, install_queue

    if (ns.job is None) == (not ns.queue):
        print("dsguard service install: give a job file or --queue", file=sys.stderr)
        return EXIT_USAGE
    try:
        if ns.queue:
            from dsguard.queue.store import queue_dir

            res = install_queue(user=ns.user, queue_dir=queue_dir(), slots=ns.slots,
                                force=ns.force)  # fmt: skip
        else:
            res = install(Path(ns.job), user=ns.user, run_as=ns.run_as, force=ns.force)
    except JobFileError as err:
        return _print_problems(err)
    except ServiceInstallError as exc:
        print(f"dsguard service install: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"unit: {res.unit_path} ({res.unit_action})")
    print(f"environment: {res.env_path}")
    if res.dropin_path is not None:
        print(f"drop-in: {res.dropin_path}")
    for note in res.notes:
        print(f"note: {note}")
    print("then run:")
    for command in res.commands:
        print(f"  {command}")
    return EXIT_OK


def _cmd_init(ns: argparse.Namespace) -> int:
    from dsguard.cli.init import cmd_init

    return cmd_init(ns)


def _exit_contract(ns: argparse.Namespace, job: Job | None = None) -> Any:
    """``dsguard run``'s exit codes as the engine wants them: the job file's ``exit_codes:``,
    each overridden by its ``--exit-*`` flag (None: the defaults).

    Raises:
        ValueError: the codes break the contract's rules (the same code twice, ...).
    """
    given = {k: getattr(ns, f"exit_{k}", None) for k in ("succeeded", "gave_up", "retry")}
    if job is not None:
        from dataclasses import asdict

        from dsguard.job.model import ExitCodes

        if job.exit_codes != ExitCodes():
            given = {k: v if v is not None else asdict(job.exit_codes)[k] for k, v in given.items()}
    if all(v is None for v in given.values()):
        return None
    from dsguard.exitcodes import ExitContract

    return ExitContract(**{k: v for k, v in given.items() if v is not None})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsguard",
        description="Self-healing supervisor for DeepSpeed / transformers training.",
    )
    parser.add_argument("--version", action="version", version=f"dsguard {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)

    _add_run_parsers(sub)
    _add_inspect_parsers(sub)
    from dsguard.cli.report import add_parser as add_report_parser

    add_report_parser(sub)

    svc = sub.add_parser("service", help="systemd integration")
    svc_sub = svc.add_subparsers(dest="service_cmd", required=True)
    inst = svc_sub.add_parser("install", help="write the unit and the job's environment file")
    inst.add_argument("job", nargs="?")
    inst.add_argument(
        "--queue",
        action="store_true",
        help="the queue daemon (dsguard-queue.service) instead of one job",
    )
    inst.add_argument("--slots", type=int, default=1, help="with --queue: CPU slots")
    inst.add_argument("--user", action="store_true", help="user manager (~/.config/systemd)")
    inst.add_argument("--run-as", help="system install: run the job as this user")
    inst.add_argument("--force", action="store_true", help="replace a different existing unit")
    inst.set_defaults(func=cmd_service_install)

    from dsguard.cli.queue import add_parser as add_queue_parser

    add_queue_parser(sub)
    from dsguard.cli.submit import add_parser as add_submit_parser

    add_submit_parser(sub)
    return parser


def _add_run_parsers(sub: Any) -> None:
    """``run`` and ``init``: the commands that start (or prepare) supervision."""
    run = sub.add_parser(
        "run",
        help="supervise a job until it succeeds or gives up",
        description="dsguard run JOB.yaml | dsguard run [--name N] -- deepspeed train.py ARGS",
    )
    run.add_argument("job", nargs="?", help="job file (YAML)")
    # `-- COMMAND ARGS` (quick start) is split off in main() before argparse sees it.
    run.set_defaults(command=[])
    run.add_argument("--name", help="job name for a quick start (default: the script name)")
    run.add_argument("--log-dir", help="log dir for a quick start (default: runs/NAME)")
    run.add_argument("--quiet", action="store_true", help="do not mirror the child's output")
    run.add_argument(
        "--no-fit", dest="fit", action="store_false",
        help="start exactly as the job says, not at the fastest config predicted to fit",
    )  # fmt: skip
    run.add_argument(
        "--knob", action="append", default=[], metavar="NAME=FLAG",
        help="quick start: the script's flag for a knob (e.g. max_length=--block_size); only "
        "flags the command has or --knob declares are passed",
    )  # fmt: skip
    run.add_argument(
        "--memory-limit", metavar="SIZE",
        help="quick start: resources.host_memory_limit (RLIMIT_AS per process), e.g. 6GiB",
    )  # fmt: skip
    for outcome in ("succeeded", "gave-up", "retry"):
        run.add_argument(f"--exit-{outcome}", type=int, metavar="CODE",
                         help=f"exit with CODE when the run {outcome.replace('-', ' ')} "
                         "(for a cluster engine; see docs/engines.md)")  # fmt: skip
    run.set_defaults(func=cmd_run)

    ini = sub.add_parser(
        "init",
        help="write a commented job file for your training command",
        description="dsguard init [--output FILE] [--name N] -- <the command you run today>",
    )
    ini.add_argument("--output", "-o", default="dsguard.yaml", help="job file to write")
    ini.add_argument("--name", help="job name (default: the script or module name)")
    ini.set_defaults(command=[], func=_cmd_init)


def _add_inspect_parsers(sub: Any) -> None:
    """The read-only commands: ``validate``, ``plan``, ``explain``, ``events``, ``doctor``,
    ``status``."""
    val = sub.add_parser("validate", help="check a job file; launch nothing")
    val.add_argument("job")
    val.add_argument(
        "--deep", action="store_true",
        help="also check every config the ladder can render with DeepSpeed's own classes, "
        "in the training environment",
    )  # fmt: skip
    val.set_defaults(func=cmd_validate)

    pl = sub.add_parser("plan", help="print the ladder this job would walk")
    pl.add_argument("job")
    pl.add_argument("--kind", choices=["cuda_oom", "host_oom", "all"], default="all")
    pl.add_argument("--json", action="store_true")
    pl.add_argument(
        "--fit", action="store_true",
        help="predicted peak memory of every config the ladder can reach exactly, against "
        "the memory available, and the first fit dsguard run would start from",
    )  # fmt: skip
    pl.set_defaults(func=cmd_plan)

    ex = sub.add_parser("explain", help="classify a saved training log")
    ex.add_argument("file")
    ex.add_argument(
        "--exit-code", type=int, default=None,
        help="exit status as the shell or launcher reported it (-9, 137 and 247 are SIGKILL)",
    )  # fmt: skip
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=cmd_explain)

    evp = sub.add_parser("events", help="pretty-print / filter an event log")
    evp.add_argument("target", help="log dir, events.jsonl, or job file")
    evp.add_argument("--event", action="append", help="only this event (repeatable)")
    evp.add_argument("--attempt", type=int)
    evp.add_argument("--run", help="only this run_id")
    evp.add_argument("--json", action="store_true")
    evp.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    evp.add_argument("--since", help="only events of the last 90s, 30m, 2h, 1d, or since a time")
    evp.set_defaults(func=cmd_events)

    doc = sub.add_parser(
        "doctor",
        help="check the training environment (torch/CUDA/nvcc, DeepSpeed ops, GPUs, memory, "
        "/dev/shm, disk)",
        description="Exit 1 when any check is a blocker; each blocker comes with its fix.",
    )
    doc.add_argument("job", nargs="?", help="job file (its interpreter and checkpoint dir)")
    doc.add_argument("--python", help="interpreter of the training environment")
    doc.add_argument("--json", action="store_true")
    doc.set_defaults(func=cmd_doctor)

    st = sub.add_parser(
        "status",
        help="state, attempt, knobs, progress, GPU memory of a job",
        description="Exit 0: dsguard is running; 3: not running; 4: no state found.",
    )
    st.add_argument("target", help="log dir or job file")
    st.add_argument("--json", action="store_true", help="JSON even on a terminal")
    st.set_defaults(func=cmd_status)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    # `dsguard run -- cmd ...`: argparse would take the first word of cmd as the job file.
    if len(args) >= 2 and args[0] in ("run", "init") and "--" in args:
        i = args.index("--")
        ns = parser.parse_args(args[:i])
        ns.command = args[i + 1 :]
    else:
        ns = parser.parse_args(args)
    if ns.cmd == "run":
        try:
            ns.exit_contract = _exit_contract(ns)
        except ValueError as exc:
            parser.error(f"run: {exc}")
    try:
        result: int = ns.func(ns)
    except Exception:  # a dsguard bug: say so, and let systemd restart us (not exit 1)
        traceback.print_exc()
        print("dsguard: internal error (a bug); state.json lets a restart recover",
              file=sys.stderr)  # fmt: skip
        result = EXIT_INTERNAL_ERROR
    contract = getattr(ns, "exit_contract", None)
    return result if contract is None else int(contract.apply(result))


if __name__ == "__main__":
    sys.exit(main())
