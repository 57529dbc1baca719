"""Every event dsguard writes to ``events.jsonl``, as one typed record each.

The event log is the run's only complete record: a user reading it the morning after, a
dashboard, and ``dsguard events`` all parse it. An event whose fields drift silently (a key
renamed in one call site, a Path written where a string was expected, a terminal event that
lacks ``changes`` on one exit path) breaks those readers long after the run that wrote it.
Each event is therefore one ``msgspec.Struct`` here; ``dsguard.run.events.EventLog.emit``
checks every event against its record before writing it.

Each line of ``events.jsonl`` also carries the bound context (:data:`CONTEXT_KEYS`), which
no record repeats. Field names carry their unit (``_s``, ``_bytes``). Fields every writer
passes are required; fields only some writers pass default to None and are then simply
absent from the line.

Pure: the standard library and msgspec only. ``python -m dsguard.core.events --markdown``
prints the README's event table from these definitions.
"""

from __future__ import annotations

import re
import sys
import typing
from typing import Any, Final, Literal

import msgspec

#: Bumped when a field changes type or meaning, or a required field is added or removed.
EVENTS_SCHEMA_VERSION: Final = 1

#: Keys every line carries besides the event's own fields (bound per run and attempt).
CONTEXT_KEYS: Final = ("ts", "event", "run_id", "attempt", "job")


class Event(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every event record; the subclass's registered name is its ``event`` key."""


# -- nested values ----------------------------------------------------------------------------


class PreflightFix(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One repair of the rendered DeepSpeed config (``path`` dotted; ``old`` None: added)."""

    path: str
    old: Any
    new: Any
    why: str


class PreflightProblem(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One thing in the DeepSpeed config only a human can decide."""

    path: str
    message: str


class GpuHolder(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A process still holding GPU memory after its attempt ended."""

    device_index: int
    pid: int
    used_bytes: int | None


# -- run lifecycle ----------------------------------------------------------------------------


class RunStarted(Event):
    """Written once when ``dsguard run`` holds the job lock and starts (or recovers) a run:
    the config the run starts from, so every later change can be read against it."""

    job_file: str | None
    launcher: str
    world_size: int
    knobs: dict[str, Any]
    global_batch: int
    log_dir: str
    checkpoint_dir: str | None
    recovered: bool
    dsguard_version: str
    pid: int
    #: The number the run's first attempt gets: after every number the log dir already
    #: holds, so a new run never appends to an older run's attempt log.
    first_attempt: int | None = None


class RunRecovered(Event):
    """A previous dsguard left this run unfinished (killed, crashed, stopped): the ladder
    continues at its recorded rung instead of starting over, and leftover processes of its
    attempt were ended so they cannot hold the GPUs the next attempt needs."""

    previous_run_id: str | None
    previous_state: str
    previous_pid: int | None
    attempts_so_far: int
    knobs: dict[str, Any]
    positions: dict[str, int]
    phase: int
    leftover_pids: list[int]
    killed_pids: list[int]
    survivor_pids: list[int]


class StateDiscarded(Event):
    """``state.json`` of an earlier run was not resumed (unreadable, or the job's knobs
    changed): a new ladder starts, and this says why the old one was not continued."""

    path: str
    reason: str
    previous_run_id: str | None = None


class StateChanged(Event):
    """Every transition of the run's state machine (mirrored in ``state.json``): the audit
    trail of how the run reached its end state. Kept off the console."""

    from_state: str
    to_state: str
    reason: str


class _RunEnded(Event):
    """The fields every terminal event carries, so readers handle the three alike."""

    reason: str
    #: The failure kind that ended the run; None when no failure did.
    kind: str | None
    attempts: int
    knobs: dict[str, Any]
    #: ``{knob: [job's value, final value]}`` for every knob the ladder changed.
    changes: dict[str, Any]
    #: None once the ranks seen differ from the job's world size (``world_size_mismatch``).
    global_batch: int | None
    initial_global_batch: int
    phase: int
    duration_s: float
    #: Tokens per optimizer step (micro x accumulation x world x max_length) at the end and
    #: at the start; None when max_length is unknown (issue 14).
    tokens_per_step: int | None
    initial_tokens_per_step: int | None


class RunSucceeded(_RunEnded):
    """The training command exited 0: the run is over, with the knobs it ended on and
    whether the global batch (hence the training recipe) changed on the way."""


class RunGaveUp(_RunEnded):
    """dsguard stopped trying (non-recoverable failure, ladder exhausted, budget spent, GPU
    memory never released): ``reason`` is what a human must fix before the next run."""


class RunStopped(_RunEnded):
    """dsguard was asked to stop (SIGINT/SIGTERM, systemd stop); the run can be resumed by
    the next ``dsguard run``."""

    signal: int


# -- checkpoints ------------------------------------------------------------------------------


class CheckpointSelected(Event):
    """Which checkpoint the next attempt resumes from (``path`` None: a fresh start, with
    ``reason``); resuming a torn checkpoint is how a crash becomes silent corruption."""

    path: str | None
    step: int | None
    reason: str | None = None
    dir: str | None = None
    size_bytes: int | None = None
    warnings: list[str] | None = None


class CheckpointQuarantined(Event):
    """A checkpoint that cannot be resumed (incomplete, or resuming it failed) was moved
    aside so neither dsguard nor HF's ``resume_from_checkpoint`` picks it again."""

    path: str
    moved_to: str
    step: int | None
    reasons: list[str]


class CheckpointPatched(Event):
    """The checkpoint's ``trainer_state.json`` was edited (backup kept) so a resume does not
    restore the old micro-batch over the one the ladder chose."""

    path: str
    key: str
    old: Any
    new: Any
    backup: str
    reason: str


# -- attempts ---------------------------------------------------------------------------------


class PreflightFixed(Event):
    """The rendered DeepSpeed config was repaired before launch (a value DeepSpeed or HF
    would reject or silently override)."""

    deepspeed_config: str
    fixes: list[PreflightFix]


class PreflightRefused(Event):
    """The rendered DeepSpeed config has a problem only a human can decide: nothing is
    launched (a launch would die minutes later, or train a different batch)."""

    problems: list[PreflightProblem]


class AttemptNotStarted(Event):
    """The training command could not be started at all (missing executable, permissions)."""

    argv: list[str]
    error: str


class AttemptStarted(Event):
    """An attempt's launcher is running: the exact command, config and resume point, so any
    attempt can be reproduced by hand."""

    pid: int
    argv: list[str]
    cwd: str
    knobs: dict[str, Any]
    #: None once the ranks seen differ from the job's world size (``world_size_mismatch``).
    global_batch: int | None
    world_size: int
    phase: int
    resume_from: str | None
    deepspeed_config: str | None
    output_dir: str | None
    init_from: str | None
    log: str
    remedies: list[str]


class FatalOutputDetected(Event):
    """A rank printed a fatal error: dsguard ends the attempt now, because the other ranks
    would otherwise hang in a collective until NCCL's timeout."""

    kind: str
    rank: int | None
    line_no: int
    line: str


class HangSuspected(Event):
    """No output and no heartbeat for the hang timeout, but the GPUs are busy (a silent
    eval): not treated as a hang. Written once per silent stretch."""

    silent_s: float
    gpu_busy: bool


class HangDetected(Event):
    """No output, no heartbeat and idle (or unknown) GPUs for the hang timeout: the attempt
    is ended as hung."""

    silent_s: float
    hang_timeout_s: float


class StopRequested(Event):
    """dsguard asked a trainer that announced save_and_stop to checkpoint and exit."""

    path: str
    timeout_s: float


class StopSaveFinished(Event):
    """How the save-and-stop request ended (the trainer exited, or the wait timed out)."""

    exited: bool
    exit_code: int | None
    waited_s: float


class AttemptEnded(Event):
    """dsguard ended what was left of an attempt (fatal output, hang, stop, or survivors of
    a launcher that exited): which processes got SIGTERM, which SIGKILL, which survived."""

    by: str
    terminated_pids: list[int]
    killed_pids: list[int]
    survivor_pids: list[int]
    duration_s: float


class AttemptFinished(Event):
    """An attempt's launcher exited: exit status, output volume, last reported step and
    memory peaks, the evidence the classifier and the ladder work from."""

    exit_code: int | None
    signal: int | None
    ended_by: str
    duration_s: float
    output_bytes: int
    output_lines: int
    last_step: int | None
    last_loss: float | None
    gpu_mem_peak_bytes: int | None
    host_rss_peak_bytes: int | None
    capabilities: list[str]
    #: Output dropped because the attempt log could not be written (a full disk); None: none.
    log_dropped_bytes: int | None = None


class BuildLockRemoved(Event):
    """A stale torch-extensions build lock (left by a JIT build dsguard killed) was removed;
    every later process loading that op would otherwise wait on it forever."""

    path: str


class GpuReleaseChecked(Event):
    """Whether the ended attempt's processes still hold GPU memory before a relaunch: a
    leftover allocation would make the next attempt OOM for the wrong reason."""

    pids: list[int]
    status: Literal["released", "held", "unknown"]
    holders: list[GpuHolder]
    waited_s: float
    polls: int
    reason: str | None


# -- failures and the ladder ------------------------------------------------------------------


class FailureDetected(Event):
    """The attempt failed and was classified: the kind decides the rung, the evidence says
    why (the first lines that named it)."""

    kind: str
    rank: int | None
    evidence: list[str]
    exit_code: int | None
    signal: int | None
    recoverable: bool
    #: For a SIGKILL: true (the OOM killer's, confirmed), false (someone else's, refuted),
    #: null (unknown: treated as a host OOM); false when nothing was killed.
    host_oom_confirmed: bool | None
    host_oom_evidence: list[str]
    checkpoint_progress: bool
    #: For kind ``unknown``: the kind the output's words point to (core/lexicon.py), null
    #: when they point nowhere clearly. Information only: the loop acts on ``unknown``.
    probable_kind: str | None = None
    probable_words: list[str] = []


class EnvFactsDetected(Event):
    """The training environment's facts (torch, CUDA toolkits, GPUs) an environment remedy
    was decided from. Registered as ``env_facts``."""

    python: str
    torch_version: str | None
    torch_cuda: str | None
    torch_hip: str | None
    torch_error: str | None
    cuda_home: str | None
    torch_extensions_dir: str | None
    deepspeed_version: str | None
    toolkits: list[dict[str, Any]]
    gpus: list[dict[str, Any]] | None
    gpu_error: str | None
    ds_skip_cuda_check: bool
    notes: list[str]


class RemedyApplied(Event):
    """An environment remedy (build env, loss-scale fix) is applied from the next attempt
    on: ``env`` maps each variable to ``[before, after]``."""

    remedy: str
    kind: str
    reason: str
    env: dict[str, list[str | None]]
    config: dict[str, Any]
    flags: dict[str, str]
    caveats: list[str]
    new_phase: bool
    applied: list[str]


class PolicyApplied(Event):
    """The ladder's decision for the next attempt: the rung, the knob changes, whether the
    global batch was kept (it is unless the rung starts a new phase), and the tokens per
    optimizer step before and after (a max_length move keeps the batch in samples and still
    changes the tokens: None when max_length is unknown)."""

    rung: str | None
    changes: dict[str, Any]
    new_phase: bool
    caveats: list[str]
    reason: str
    delay_s: float
    knobs: dict[str, Any]
    global_batch_before: int
    global_batch_after: int
    phase: int | None = None
    output_dir: str | None = None
    tokens_per_step_before: int | None = None
    tokens_per_step_after: int | None = None


class PhaseStarted(Event):
    """A new phase began: the old phase's checkpoints cannot be resumed exactly under the new
    config, so this phase has its own output dir and a fresh optimizer."""

    phase: int
    output_dir: str | None
    init_from: str | None
    reason: str


class EventInvalid(Event):
    """An event did not match its definition here (a dsguard bug); outside tests the event
    is written anyway, followed by this note, because a log problem must never stop
    training."""

    invalid_event: str
    error: str


class StateInvalid(Event):
    """The ``state.json`` document did not match its record (a dsguard bug); outside tests
    it is written anyway, because a bookkeeping problem must never stop training."""

    error: str


# -- issue 13: what dsguard writes on disk ------------------------------------------------------


class LogWriteFailed(Event):
    """Writing the attempt's output log failed (disk full, I/O error, or a symlink refused at
    its path); the output is still read and classified so the child never blocks, and what
    could not be written is dropped and counted. Recorded once per attempt."""

    path: str
    errno: int
    error: str
    dropped_bytes: int


class StateWriteFailed(Event):
    """Writing ``state.json`` failed (disk full, log dir gone); supervising goes on and the
    next transition writes the whole document again. Recorded once per failing streak."""

    path: str
    error: str
    errno: int
    failures: int


class CheckpointQuarantineFailed(Event):
    """An unresumable checkpoint could not be moved aside (read-only or busy filesystem); it
    is skipped for this resume and left where it is, so nothing is lost."""

    path: str
    step: int | None
    reasons: list[str]
    error: str


#: event name -> its record, in the order the README lists them.
EVENTS: Final[dict[str, type[Event]]] = {
    "run_started": RunStarted,
    "run_recovered": RunRecovered,
    "state_discarded": StateDiscarded,
    "checkpoint_selected": CheckpointSelected,
    "checkpoint_quarantined": CheckpointQuarantined,
    "checkpoint_patched": CheckpointPatched,
    "preflight_fixed": PreflightFixed,
    "preflight_refused": PreflightRefused,
    "attempt_not_started": AttemptNotStarted,
    "attempt_started": AttemptStarted,
    "fatal_output_detected": FatalOutputDetected,
    "hang_suspected": HangSuspected,
    "hang_detected": HangDetected,
    "stop_requested": StopRequested,
    "stop_save_finished": StopSaveFinished,
    "attempt_ended": AttemptEnded,
    "attempt_finished": AttemptFinished,
    "build_lock_removed": BuildLockRemoved,
    "failure_detected": FailureDetected,
    "env_facts": EnvFactsDetected,
    "remedy_applied": RemedyApplied,
    "policy_applied": PolicyApplied,
    "phase_started": PhaseStarted,
    "gpu_release_checked": GpuReleaseChecked,
    "state_changed": StateChanged,
    "run_succeeded": RunSucceeded,
    "run_gave_up": RunGaveUp,
    "run_stopped": RunStopped,
    "event_invalid": EventInvalid,
    "state_invalid": StateInvalid,
    "log_write_failed": LogWriteFailed,
    "state_write_failed": StateWriteFailed,
    "checkpoint_quarantine_failed": CheckpointQuarantineFailed,
}

_NAMES: Final[dict[type[Event], str]] = {cls: name for name, cls in EVENTS.items()}


def event_name(record: Event) -> str:
    """The registered name of ``record``'s type.

    Raises:
        KeyError: the type is not registered (a record defined but not listed in EVENTS).
    """
    return _NAMES[type(record)]


class UnknownEvent(ValueError):
    """An event name that has no record in :data:`EVENTS`."""


def validate(name: str, fields: dict[str, Any]) -> Event:
    """``fields`` (JSON-ready: str, int, float, bool, None, list, dict) as the record of
    ``name``, with strict types (no "1" for 1).

    Raises:
        UnknownEvent: ``name`` is not registered.
        msgspec.ValidationError: an unknown field, a missing required one, or a wrong type.
    """
    cls = EVENTS.get(name)
    if cls is None:
        raise UnknownEvent(f"unknown event {name!r} (not defined in dsguard.core.events)")
    return msgspec.convert(fields, cls, strict=True)


# -- the README table -------------------------------------------------------------------------


def _type_text(tp: object) -> str:
    text = str(tp) if not isinstance(tp, type) else tp.__name__
    # Module paths off: ``typing.Any``, ``dsguard.core.events.X`` (``__main__.X`` under -m).
    text = re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", text)
    return text.replace("|", "\\|")  # a bare | would split the markdown table cell


def markdown_table() -> str:
    """The README's event table: one row per event, its fields (``?``: may be absent)."""
    rows = ["| event | fields | when |", "|---|---|---|"]
    for name, cls in EVENTS.items():
        hints = typing.get_type_hints(cls)
        fields = []
        for f in msgspec.structs.fields(cls):
            optional = "" if f.required else "?"
            fields.append(f"`{f.name}`{optional}: {_type_text(hints[f.name])}")
        doc = " ".join((cls.__doc__ or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | {', '.join(fields)} | {doc} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--markdown"]:
        sys.stderr.write("usage: python -m dsguard.core.events --markdown\n")
        return 2
    sys.stdout.write(markdown_table())
    return 0


# -- issue 13: processes, the lock, signals ------------------------------------------------
# Appended here (not in the table above) so parallel additions merge as separate blocks.


class ConsoleLost(Event):
    """dsguard's terminal went away (SIGHUP: an SSH disconnect, a closed window): it keeps
    supervising and stops writing to the console, whose writes could fail or block; the
    event log and attempt logs are unaffected."""

    signal: int
    reason: str


class LogDirRecreated(Event):
    """The job's log dir (or its event log) was deleted while dsguard ran: it was created
    again and the event log reopened. The job lock does not live there, so no second
    supervisor could start meanwhile; output of the running attempt written in between is
    lost with the deleted files."""

    path: str
    reason: str


EVENTS.update({"console_lost": ConsoleLost, "log_dir_recreated": LogDirRecreated})


# -- issue 17: notifications and metrics ------------------------------------------------------
# Appended here (not in the table above) so parallel additions merge as separate blocks.


class NotificationSent(Event):
    """A notification (give-up, success, new phase, hang) reached its service. ``url`` is
    redacted to its scheme and host: apprise URLs carry tokens and passwords."""

    trigger: str
    url: str
    tries: int


class NotificationFailed(Event):
    """A notification could not be delivered after its bounded retries; training is never
    held up by it (notifications are sent from a background thread)."""

    trigger: str
    url: str
    tries: int
    error: str


class OutputUnavailable(Event):
    """A configured output (``notify``, ``metrics.http_port``) cannot work in this install
    or on this host (a missing optional package, a port in use): said once, then ignored."""

    output: str
    reason: str


EVENTS.update(
    {
        "notification_sent": NotificationSent,
        "notification_failed": NotificationFailed,
        "output_unavailable": OutputUnavailable,
    }
)


# -- issue 14: knob delivery beyond flags, declared data semantics --------------------------
# Appended here (not in the table above) so parallel additions merge as separate blocks.


class KnobsRouted(Event):
    """How each knob reaches the script this run (``routes``: a flag, a key of the script's
    own config file, a ``key=value`` argument, an environment variable, the rendered
    DeepSpeed config; None: no route), and the rungs left out of the ladder because a knob
    they change has no route or is fixed by ``limits.fixed``: those moves are never made, so
    never logged as made. ``packing``: what the job says about packed data (None: unknown)."""

    routes: dict[str, str | None]
    left_out: dict[str, list[str]]
    fixed: list[str]
    packing: bool | None
    packing_source: str | None


EVENTS.update({"knobs_routed": KnobsRouted})


# -- issue 14: checkpoint layouts, launchers that run what they claim ----------------------
# Appended as one block so parallel additions merge as separate blocks.


class CheckpointLayoutDetected(Event):
    """``checkpoints.layout: auto`` found which layout the checkpoint dir holds (HF
    ``checkpoint-N``, raw DeepSpeed tags, accelerate ``save_state``, Lightning, DCP): it
    decides how each checkpoint is validated and how a resume reaches the script."""

    layout: str
    dir: str
    evidence: str


class DeepspeedLatestRepointed(Event):
    """DeepSpeed's ``latest`` (what the script's own ``load_checkpoint`` follows) was pointed
    at the newest complete tag, written atomically; ``previous_tag`` is what it named before.
    ``tag`` None: no complete tag is left, the file was moved aside (``moved_to``) and the
    script starts fresh."""

    path: str
    tag: str | None
    previous_tag: str | None
    moved_to: str | None = None


class DeepspeedLatestFailed(Event):
    """``latest`` could not be pointed at the chosen tag (read-only or full filesystem): the
    script's own resume may land on another tag than the one dsguard chose."""

    path: str
    tag: str | None
    error: str


class WorldSizeMismatch(Event):
    """The attempt runs another number of ranks than dsguard computed from the job (a
    launcher that started one process, a script that ignores the rank variables): the
    global batch dsguard would report is not the one being trained, so from now on it is
    reported as unknown (``global_batch`` None) instead of claimed kept."""

    expected_world_size: int
    observed_world_size: int
    source: str
    global_batch: int | None
    reason: str


EVENTS.update(
    {
        "checkpoint_layout_detected": CheckpointLayoutDetected,
        "deepspeed_latest_repointed": DeepspeedLatestRepointed,
        "deepspeed_latest_failed": DeepspeedLatestFailed,
        "world_size_mismatch": WorldSizeMismatch,
    }
)
_NAMES.update({cls: name for name, cls in EVENTS.items()})


# -- issue 12: SIGKILL judged, memory limits enforced, rungs skipped, divergence --------------


class MemoryLimitApplied(Event):
    """``resources.host_memory_limit`` is enforced on the attempt: by its own memory cgroup
    (``cgroup_v1``/``cgroup_v2``: the kernel's OOM killer SIGKILLs it at the limit, and that
    cgroup's ``oom_kill`` counter confirms it) or, where no cgroup can be made, by
    ``rlimit_as`` (allocations fail instead; ``reason`` says why no cgroup)."""

    how: str
    limit_bytes: int
    cgroup: str | None
    reason: str | None


class SigkillJudged(Event):
    """The attempt (or one of its ranks) died of SIGKILL: ``outcome`` is ``confirmed`` (the
    OOM killer's), ``refuted`` (someone else is known to have sent it and no OOM sign) or
    ``unknown``; ``host_oom`` says whether the host-OOM ladder answers it."""

    outcome: str
    reasons: list[str]
    host_oom: bool
    rank_killed: bool


class RungsSkipped(Event):
    """The ladder passed over rungs that could change nothing for this job (pin_memory already
    off or a CPU-only run, workers already 0, ...): no attempt is spent on them. ``skipped``
    lists ``{"rung", "reason"}``."""

    kind: str
    skipped: list[dict[str, str]]


class DivergenceDetected(Event):
    """The loss or grad norm turned NaN/inf (``what``) at optimizer ``step`` (null: unknown),
    seen in a heartbeat or an output line (``source``): the attempt is ended (``ended_by``
    ``diverged``), or, when it had already exited (even with 0), it is not a success."""

    step: int | None
    what: str
    source: str
    ended_by: str
    exit_code: int | None


class DivergenceRolledBack(Event):
    """``divergence.action: rollback``: the next attempt resumes from ``resume_step`` (the
    newest checkpoint before ``diverged_at_step``; null: from the start), the checkpoints at
    ``set_aside_steps`` were moved aside, and the batches of ``skip_steps`` ([first, last]
    optimizer step) are skipped; ``skip_honoured`` says whether the training code announced
    it honours that (``DSGUARD_SKIP_BATCHES``)."""

    diverged_at_step: int
    resume_step: int | None
    set_aside_steps: list[int]
    skip_steps: list[int] | None
    skip_honoured: bool
    rollback: int
    reason: str


EVENTS.update(
    {
        "divergence_detected": DivergenceDetected,
        "divergence_rolled_back": DivergenceRolledBack,
        "memory_limit_applied": MemoryLimitApplied,
        "sigkill_judged": SigkillJudged,
        "rungs_skipped": RungsSkipped,
    }
)
_NAMES.update({cls: name for name, cls in EVENTS.items()})


# -- issue 16: the overnight queue ---------------------------------------------------------------
# Written by `dsguard queue run` to the queue dir's own events.jsonl (each job's `dsguard run`
# keeps its own log in its log dir); appended here so parallel additions merge as blocks.


class QueueJobStarted(Event):
    """The queue daemon started a job's ``dsguard run`` (``gpus`` None: a CPU slot);
    ``start`` counts the job's starts (a second one resumes it at its rung)."""

    job: str
    pid: int
    gpus: list[int] | None
    start: int
    log_dir: str


class QueueJobAdopted(Event):
    """A restarted daemon found the job's ``dsguard run`` still alive (its recorded pid and
    start time, or the holder of the job lock) and took it over instead of starting another."""

    job: str
    pid: int
    reason: str


class QueueJobEnded(Event):
    """A job's ``dsguard run`` ended: ``outcome`` is the queue state it left the job in
    (``succeeded``, ``gave_up``, ``stopped``, ``failed``, ``cancelled``, or ``queued`` when it
    is started again); ``exit_code`` None when the daemon could not see it (adopted)."""

    job: str
    outcome: str
    reason: str | None
    exit_code: int | None


class QueueJobSkipped(Event):
    """A job was never started: its ``--after`` predecessor did not succeed."""

    job: str
    after: str
    reason: str


EVENTS.update({
    "queue_job_started": QueueJobStarted, "queue_job_adopted": QueueJobAdopted,
    "queue_job_ended": QueueJobEnded, "queue_job_skipped": QueueJobSkipped,
})  # fmt: skip
_NAMES.update({cls: name for name, cls in EVENTS.items()})


# -- issue 15: first fit, evidence-driven moves, calibration ---------------------------------


class PlanApplied(Event):
    """Before the first attempt, the start config was replaced by the fastest config
    predicted to fit (``source``: ``estimate``, or ``store`` for a known-good config of a
    matching earlier run, or ``store_other_env`` one step safer than a config an earlier run
    measured in another training environment, ``probe``), with the predicted peak against the
    memory available."""

    source: str
    changes: dict[str, Any]
    knobs: dict[str, Any]
    path: list[str]
    predicted_peak_bytes: int
    start_predicted_peak_bytes: int
    available_bytes: int | None
    margin: float
    device: str
    relative_step_time: float
    reason: str


class PlanSkipped(Event):
    """First fit was on, and the start config was kept: why (model shape unknown, start
    predicted to fit, nothing predicted to fit, memory unknown)."""

    reason: str
    predicted_peak_bytes: int | None = None
    available_bytes: int | None = None


class EvidenceConsidered(Event):
    """What the failure's evidence said about the next move on a default ladder: the failing
    allocation and memory figures of the OOM message, and the rung it led to."""

    rung: str | None
    reason: str
    tried_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    skipped: list[str] | None = None


class EstimateCalibrated(Event):
    """A finished attempt's measured peak against the estimate for its config; the ratio
    scales the estimator for the rest of the run. ``measure``: ``max_memory_reserved`` or
    ``host_rss`` (heartbeats), ``vm_peak`` / ``cgroup_peak`` / ``vm_hwm`` (measured by
    dsguard from outside)."""

    predicted_bytes: int
    measured_bytes: int
    measure: str
    scale: float
    #: Where the measurement came from: ``heartbeat`` (the trainer's own report),
    #: ``process_tree`` (``/proc/<pid>/status`` of the attempt's processes) or ``cgroup`` (the
    #: attempt's memory cgroup), the last two for scripts that send no heartbeats.
    source: str = "heartbeat"


class StoreUnavailable(Event):
    """The known-good store could not be read or written (a corrupt file, a lock another
    dsguard held past the timeout, an unwritable directory): the run plans and heals
    without it."""

    reason: str


EVENTS.update(
    {
        "store_unavailable": StoreUnavailable,
        "plan_applied": PlanApplied,
        "plan_skipped": PlanSkipped,
        "evidence_considered": EvidenceConsidered,
        "estimate_calibrated": EstimateCalibrated,
    }
)
_NAMES.update({cls: name for name, cls in EVENTS.items()})


# -- issue 15 (throughput): measured speed, the one-config probe ------------------------------


class ThroughputMeasured(Event):
    """An attempt's training speed between two step heartbeats (start-up and its first
    step excluded: the trainer's own step timestamps, not time since launch), recorded in
    the known-good store so a later run starts at the fastest config known to fit.
    ``tokens_per_s`` is samples/s x ``max_length`` (when known): an upper bound where
    examples are shorter than it."""

    knobs: dict[str, Any]
    samples_per_s: float
    steps_per_s: float
    from_step: int
    to_step: int
    span_s: float
    tokens_per_s: float | None = None


class FitProbePlanned(Event):
    """``fit_probe: true``: this run starts at the unmeasured config nearest the fastest one
    the store knows on its micro-batch chain (larger first, global batch kept, predicted to
    fit), so the store learns which of the two is faster."""

    knobs: dict[str, Any]
    direction: str
    baseline_knobs: dict[str, Any]
    baseline_samples_per_s: float
    predicted_peak_bytes: int
    available_bytes: int | None


class FitProbeDecided(Event):
    """The probe's measured speed against the baseline's: ``kept_knobs`` is the faster
    config, the one the next run of this regime starts from."""

    probe_knobs: dict[str, Any]
    probe_samples_per_s: float
    baseline_knobs: dict[str, Any]
    baseline_samples_per_s: float
    kept_knobs: dict[str, Any]
    speedup: float


EVENTS.update(
    {
        "throughput_measured": ThroughputMeasured,
        "fit_probe_planned": FitProbePlanned,
        "fit_probe_decided": FitProbeDecided,
    }
)
_NAMES.update({cls: name for name, cls in EVENTS.items()})


# -- issue 15: the probe inside one run (fit_probe: in_run) ------------------------------------


class FitProbeSwitched(Event):
    """``fit_probe: in_run``: dsguard ended the attempt itself (not a failure: no retry
    budget is spent) and relaunches at ``to_knobs``, resuming from the newest complete
    checkpoint (``resume_step``; the global batch is kept, so the resume is exact).
    ``reason``: ``probe`` (to the neighbour, once ``samples_per_s`` of ``from_knobs`` was
    measured), ``slower`` (back: the neighbour was not faster by the margin),
    ``out_of_memory`` (back: the neighbour did not fit). ``steps_redone``: the steps since
    ``resume_step`` that the next attempt trains again."""

    from_knobs: dict[str, Any]
    to_knobs: dict[str, Any]
    reason: str
    samples_per_s: float | None
    last_step: int | None
    resume_step: int | None
    steps_redone: int


class FitProbeCost(Event):
    """What the in-run probe cost this run, once it is over: ``restart_s`` from each switch
    decision to the first step of the config switched to (ending, relaunch, start-up, that
    step), ``redone_s`` the time the steps trained again had taken, ``lost_s`` their sum.
    ``kept_knobs``: the config that trains on; ``finished`` false when the run ended before
    the probe decided."""

    switches: int
    restart_s: float
    steps_redone: int
    redone_s: float
    lost_s: float
    kept_knobs: dict[str, Any] | None
    finished: bool


EVENTS.update(
    {
        "fit_probe_switched": FitProbeSwitched,
        "fit_probe_cost": FitProbeCost,
    }
)
_NAMES.update({cls: name for name, cls in EVENTS.items()})

# -- issue 15 (fitfix): a memory floor no move changes --


class MemoryFloorDetected(Event):
    """The memory the training needs before its first step (imports, model load) is above
    the limit, so no memory move can help: the run gives up now instead of walking the
    ladder. ``floor_bytes``: the memory measured (``measure``: ``resident_at_death``, the
    attempt tree's resident memory before the kill; ``vm_peak`` under RLIMIT_AS;
    ``heartbeat_before_step_1``) at the failures of ``attempts``; ``limit_bytes``: the limit
    it was measured against. ``reason`` says what to do (raise the limit)."""

    limit_bytes: int
    floor_bytes: int
    measure: str
    attempts: list[int]
    reason: str


EVENTS.update({"memory_floor_detected": MemoryFloorDetected})
_NAMES.update({cls: name for name, cls in EVENTS.items()})

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
