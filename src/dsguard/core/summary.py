"""What happened in one run, from its events and heartbeat history: the model behind
``dsguard report``, the notifications and the metrics file.

Pure: plain dicts in (event lines as ``dsguard events --json`` prints them, heartbeat history
lines as the training callback appends them), frozen values out. The readers are lenient on
purpose: a report is read the morning after, often by a newer dsguard than the one that wrote
the log, so an unknown event, an extra field or a field of the wrong type is skipped, never
raised on (a report that crashes on one odd line hides the whole night).

"Training lost" is wall time no later attempt kept: for a failed attempt, the time after it
reached the step the next attempt resumed from (all of it when the next attempt started
fresh). Without heartbeat history the whole attempt is counted and the figure is marked as
an upper bound (``lost_exact`` False). An attempt the in-run ``fit_probe`` ended to time
another config (``fit_probe_switched``) is a planned switch, not a failure: it loses no
training, and what the switches cost (restarts, steps trained again) is the probe's own figure
(``fit_probe_cost``), reported apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dsguard.job.knobs import KNOB_SPECS

#: Words for the knobs in the summary line (the table labels are too terse for prose).
_PROSE = {"micro_batch_size": "micro", "gradient_accumulation_steps": "accumulation"}
TERMINAL_EVENTS = {"run_succeeded": "succeeded", "run_gave_up": "gave up", "run_stopped": "stopped"}
#: Events that carry the planner's prediction of an attempt's peaks (issue 16's planner).
PLAN_EVENTS = frozenset({"plan_applied"})


@dataclass(frozen=True, slots=True)
class Point:
    """One heartbeat of the history: what the loss and memory curves are drawn from."""

    attempt: int
    phase: int
    t_s: float
    step: int
    loss: float | None
    gpu_bytes: int | None
    host_bytes: int | None
    #: A step an earlier attempt of the same phase already trained (replayed after a resume).
    replayed: bool = False


@dataclass(slots=True)
class AttemptView:
    number: int
    phase: int = 1
    knobs: dict[str, Any] = field(default_factory=dict)
    global_batch: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    exit_code: int | None = None
    ended_by: str | None = None
    kind: str | None = None
    #: For kind ``unknown``: what the output's words point to (``failure_detected``'s
    #: ``probable_kind``), shown as "unknown (probably X)"; never a verdict.
    probable: str | None = None
    rung: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    new_phase: bool = False
    delay_s: float = 0.0
    resume_step: int | None = None
    last_step: int | None = None
    last_loss: float | None = None
    gpu_peak_bytes: int | None = None
    host_peak_bytes: int | None = None
    predicted: dict[str, float] = field(default_factory=dict)
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    remedies: list[str] = field(default_factory=list)
    hang: bool = False
    gpu_wait_s: float = 0.0
    lost_s: float = 0.0
    lost_exact: bool = True
    #: The in-run fit_probe ended this attempt to move to another config (a planned switch).
    probe_switch: bool = False

    @property
    def kind_words(self) -> str | None:
        """The kind as the report prints it: an unknown failure's probable kind beside it."""
        if self.kind == "unknown" and self.probable:
            return f"unknown (probably {self.probable})"
        return self.kind

    @property
    def duration_s(self) -> float | None:
        if self.start_s is None or self.end_s is None:
            return None
        return max(0.0, self.end_s - self.start_s)


@dataclass(slots=True)
class RunView:
    job: str | None = None
    run_id: str | None = None
    outcome: str = "unknown"
    reason: str | None = None
    start_s: float | None = None
    end_s: float | None = None
    attempts: list[AttemptView] = field(default_factory=list)
    initial_knobs: dict[str, Any] = field(default_factory=dict)
    #: The knobs of the newest attempt or decision (a decided relaunch not yet started).
    latest_knobs: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)
    initial_global_batch: int | None = None
    global_batch: int | None = None
    phases: list[tuple[int, float | None, str]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    host_limit_bytes: int | None = None
    #: How the host limit was enforced (``memory_limit_applied.how``: ``cgroup_v1``,
    #: ``cgroup_v2``, ``rlimit_as``); None: read from the job file, mechanism unknown. A
    #: cgroup limit counts resident memory, RLIMIT_AS address space: the chart must say which.
    host_limit_how: str | None = None
    gpu_total_bytes: int | None = None
    job_file: str | None = None
    #: Events this reader does not know, by name (shown, never a reason to fail).
    unknown_events: dict[str, int] = field(default_factory=dict)
    earlier_runs: int = 0
    #: The in-run fit_probe's switches and their cost (``fit_probe_cost``; None: not settled).
    probe_switches: int = 0
    probe_lost_s: float | None = None

    def points_by_attempt(self) -> dict[int, list[Point]]:
        """The points grouped by attempt, in time order (one pass, not one per attempt)."""
        out: dict[int, list[Point]] = {}
        for p in self.points:
            out.setdefault(p.attempt, []).append(p)
        return out

    @property
    def lost_s(self) -> float:
        return sum(a.lost_s for a in self.attempts)

    @property
    def lost_exact(self) -> bool:
        return all(a.lost_exact for a in self.attempts if a.lost_s)


# -- small lenient readers --------------------------------------------------------------------


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v: object) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def ts_seconds(ts: object) -> float | None:
    """An event's ``ts`` (ISO 8601 with offset) as seconds since the epoch."""
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None


def knob_words(name: str) -> str:
    spec = KNOB_SPECS.get(name)
    return _PROSE.get(name, spec.label if spec is not None else name)


def duration_words(s: float) -> str:
    """``45 s``, ``4 min``, ``2.5 h``: how long, for a human."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


# -- building the view ------------------------------------------------------------------------


def last_run(events: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """The events of the newest run in a log dir (a recovered run continues the one before
    it, so it belongs to it) and how many earlier runs the file holds."""
    starts = [
        i
        for i, ev in enumerate(events)
        if ev.get("event") == "run_started" and ev.get("recovered") is not True
    ]
    if not starts:
        return list(events), 0
    return list(events[starts[-1] :]), len(starts) - 1


def _attempt(view: RunView, ev: Mapping[str, Any]) -> AttemptView | None:
    n = _int(ev.get("attempt"))
    if n is None:
        return None
    for a in reversed(view.attempts):
        if a.number == n:
            return a
    a = AttemptView(number=n, phase=view.attempts[-1].phase if view.attempts else 1)
    view.attempts.append(a)
    return a


def _predictions(ev: Mapping[str, Any]) -> dict[str, float]:
    """Numeric fields that name a prediction (``predicted_gpu_peak_bytes``, ...): the planner's
    record is another module's, so it is read by name pattern, not by schema."""
    out: dict[str, float] = {}
    for k, v in ev.items():
        n = _num(v)
        if n is not None and "predict" in k:
            out[k] = n
        elif isinstance(v, Mapping) and "predict" in k:
            out.update({f"{k}.{kk}": float(vv) for kk, vv in v.items() if _num(vv) is not None})
    return out


def _on_run(view: RunView, name: str, ev: Mapping[str, Any], t: float | None) -> bool:
    """Run-level events; True when handled."""
    if name == "run_started":
        view.job = _str(ev.get("job"))
        view.run_id = _str(ev.get("run_id"))
        view.start_s = t
        view.initial_knobs = _dict(ev.get("knobs"))
        view.initial_global_batch = _int(ev.get("global_batch"))
        view.job_file = _str(ev.get("job_file"))
        view.outcome = "running"
        view.phases.append((1, t, "the job's configuration"))
    elif name in TERMINAL_EVENTS:
        view.outcome = TERMINAL_EVENTS[name]
        view.reason = _str(ev.get("reason"))
        view.end_s = t
        view.changes = _dict(ev.get("changes"))
        view.global_batch = _int(ev.get("global_batch"))
        gb0 = _int(ev.get("initial_global_batch"))
        view.initial_global_batch = gb0 if gb0 is not None else view.initial_global_batch
    elif name == "phase_started":
        phase = _int(ev.get("phase")) or len(view.phases) + 1
        view.phases.append((phase, t, _str(ev.get("reason")) or "new phase"))
    elif name == "env_facts":
        gpus = ev.get("gpus")
        totals = [
            _int(g.get("total_bytes") or g.get("memory_total_bytes"))
            for g in (gpus if isinstance(gpus, list) else [])
            if isinstance(g, Mapping)
        ]
        view.gpu_total_bytes = min((x for x in totals if x), default=view.gpu_total_bytes)
    else:
        return False
    return True


def _on_attempt_start(a: AttemptView, ev: Mapping[str, Any], t: float | None) -> None:
    a.start_s = t
    a.knobs = _dict(ev.get("knobs"))
    a.global_batch = _int(ev.get("global_batch"))
    a.phase = _int(ev.get("phase")) or a.phase
    a.remedies = [r for r in ev.get("remedies") or [] if isinstance(r, str)]


def _on_attempt_end(a: AttemptView, ev: Mapping[str, Any], t: float | None) -> None:
    a.end_s = t
    a.exit_code = _int(ev.get("exit_code"))
    a.ended_by = _str(ev.get("ended_by"))
    a.last_step = _int(ev.get("last_step"))
    a.last_loss = _num(ev.get("last_loss"))
    a.gpu_peak_bytes = _int(ev.get("gpu_mem_peak_bytes"))
    a.host_peak_bytes = _int(ev.get("host_rss_peak_bytes"))
    if a.start_s is None and t is not None:
        a.start_s = t - (_num(ev.get("duration_s")) or 0.0)


def _on_policy(a: AttemptView, ev: Mapping[str, Any]) -> None:
    a.rung = _str(ev.get("rung")) or "retry"
    a.changes = _dict(ev.get("changes"))
    a.new_phase = ev.get("new_phase") is True
    a.delay_s = _num(ev.get("delay_s")) or 0.0


def _on_event(view: RunView, ev: Mapping[str, Any], known: frozenset[str]) -> None:
    name = _str(ev.get("event")) or "?"
    t = ts_seconds(ev.get("ts"))
    if _on_run(view, name, ev, t):
        return
    a = _attempt(view, ev) if name not in ("state_changed",) else None
    if name not in known and name not in PLAN_EVENTS:
        view.unknown_events[name] = view.unknown_events.get(name, 0) + 1
    if a is None:
        return
    if name == "attempt_started":
        _on_attempt_start(a, ev, t)
        view.latest_knobs = a.knobs or view.latest_knobs
    elif name == "attempt_finished":
        _on_attempt_end(a, ev, t)
    elif name == "checkpoint_selected":
        a.resume_step = _int(ev.get("step"))
    elif name == "failure_detected":
        a.kind = _str(ev.get("kind"))
        a.probable = _str(ev.get("probable_kind"))
    elif name == "policy_applied":
        _on_policy(a, ev)
        view.latest_knobs = _dict(ev.get("knobs")) or view.latest_knobs
    elif name == "hang_detected":
        a.hang = True
    elif name == "fit_probe_switched":
        a.probe_switch = True
        view.probe_switches += 1
    elif name == "fit_probe_cost":
        view.probe_lost_s = _num(ev.get("lost_s"))
    elif name == "gpu_release_checked":
        a.gpu_wait_s += _num(ev.get("waited_s")) or 0.0
    elif name == "memory_limit_applied":
        view.host_limit_bytes = _int(ev.get("limit_bytes")) or view.host_limit_bytes
        view.host_limit_how = _str(ev.get("how"))
    elif name in PLAN_EVENTS or any("predict" in k for k in ev):
        a.predicted.update(_predictions(ev))
        # The planner knows the card: a GPU total there is the limit line of the chart.
        totals = [
            _int(v) for k, v in ev.items() if "gpu" in k and ("total" in k or "capacity" in k)
        ]
        view.gpu_total_bytes = max((t for t in totals if t), default=view.gpu_total_bytes)
    for k in ("tokens_per_s", "samples_per_s"):
        if _num(ev.get(k)) is not None:
            setattr(a, k, _num(ev.get(k)))


def build(
    events: Iterable[Mapping[str, Any]],
    beats: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
    *,
    known_events: Iterable[str] = (),
    host_limit_bytes: int | None = None,
) -> RunView:
    """The newest run of ``events`` (a log dir's ``events.jsonl``, parsed) with the heartbeat
    history of its attempts (``{attempt: [heartbeat dicts]}``, any rank order)."""
    evs, earlier = last_run([e for e in events if isinstance(e, Mapping)])
    view = RunView(earlier_runs=earlier, host_limit_bytes=host_limit_bytes)
    known = frozenset(known_events)
    for ev in evs:
        _on_event(view, ev, known)
    view.attempts.sort(key=lambda a: a.number)
    if view.global_batch is None and view.attempts:
        view.global_batch = view.attempts[-1].global_batch
    if not view.changes and view.attempts:
        first = view.initial_knobs or view.attempts[0].knobs
        last = view.latest_knobs or view.attempts[-1].knobs
        view.changes = {k: [first[k], v] for k, v in last.items() if k in first and first[k] != v}
    view.points = _points(view, beats or {})
    _rates(view)
    _lost(view)
    return view


def _points(view: RunView, beats: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[Point]:
    """Rank 0's losses and every rank's memory, one point per step; a step at or below the
    furthest step an earlier attempt of the same phase reached is marked replayed."""
    phase_of = {a.number: a.phase for a in view.attempts}
    furthest: dict[int, int] = {}
    out: list[Point] = []
    for n in sorted(beats):
        phase = phase_of.get(n, 1)
        seen_before = furthest.get(phase, -1)
        by_step: dict[int, Point] = {}
        for hb in beats[n]:
            step, t = _int(hb.get("global_step")), _num(hb.get("time_s"))
            if step is None or t is None:
                continue
            gpu = _int(hb.get("max_memory_reserved_bytes"))
            host = _int(hb.get("host_rss_bytes"))
            prev = by_step.get(step)
            loss = _num(hb.get("loss")) if hb.get("rank", 0) == 0 else None
            if prev is not None:
                loss = prev.loss if loss is None else loss
                gpu = max(x for x in (gpu, prev.gpu_bytes, 0) if x is not None) or None
                host = max(x for x in (host, prev.host_bytes, 0) if x is not None) or None
                t = min(t, prev.t_s)
            by_step[step] = Point(n, phase, t, step, loss, gpu, host, step <= seen_before)
        pts = sorted(by_step.values(), key=lambda p: (p.t_s, p.step))
        if pts:
            furthest[phase] = max(seen_before, *(p.step for p in pts))
        out.extend(pts)
    return out


def _rates(view: RunView) -> None:
    """Samples per second from the heartbeat history (steps x global batch over time),
    unless an event reported a rate itself; the peaks from heartbeats when the attempt's
    ``attempt_finished`` lacks them (a run still going, or one killed with dsguard)."""
    groups = view.points_by_attempt()
    for a in view.attempts:
        pts = groups.get(a.number, [])
        if a.gpu_peak_bytes is None:
            a.gpu_peak_bytes = max((p.gpu_bytes for p in pts if p.gpu_bytes), default=None)
        if a.host_peak_bytes is None:
            a.host_peak_bytes = max((p.host_bytes for p in pts if p.host_bytes), default=None)
        if a.samples_per_s is not None or len(pts) < 3 or not a.global_batch:
            continue
        # From the second point: the first includes start-up (model load, JIT builds).
        first, last = pts[1], pts[-1]
        if last.t_s > first.t_s and last.step > first.step:
            a.samples_per_s = (last.step - first.step) * a.global_batch / (last.t_s - first.t_s)
        max_len = _int(a.knobs.get("max_length"))
        if a.tokens_per_s is None and a.samples_per_s is not None and max_len:
            a.tokens_per_s = a.samples_per_s * max_len  # padded upper bound, labelled so


def _lost(view: RunView) -> None:
    groups = view.points_by_attempt()
    for i, a in enumerate(view.attempts):
        if a.duration_s is None:
            continue
        nxt = view.attempts[i + 1] if i + 1 < len(view.attempts) else None
        if nxt is None and view.outcome != "gave up":
            continue  # the last attempt's work is the result (or is still going)
        if a.probe_switch:
            continue  # a planned switch: its cost is the probe's (``fit_probe_cost``)
        keep = (nxt.resume_step if nxt is not None else a.resume_step) or 0
        if nxt is not None and nxt.phase != a.phase and nxt.resume_step is None:
            keep = 0
        pts = groups.get(a.number, [])
        end = a.end_s if a.end_s is not None else a.start_s
        assert end is not None and a.start_s is not None
        if not pts:
            a.lost_s, a.lost_exact = a.duration_s, keep == 0 or a.last_step is None
            continue
        reached = [p.t_s for p in pts if p.step >= keep] if keep else []
        since = min(reached) if reached else (a.start_s if keep == 0 else max(p.t_s for p in pts))
        a.lost_s = max(0.0, end - since)


# -- the words --------------------------------------------------------------------------------


def changes_words(changes: Mapping[str, Any]) -> str:
    parts = []
    for k, v in changes.items():
        if isinstance(v, (list, tuple)) and len(v) == 2:
            parts.append(f"{knob_words(k)} {v[0]} -> {v[1]}")
    return ", ".join(parts)


def _first_of_phase(view: RunView, a: AttemptView) -> bool:
    return not any(b.phase == a.phase and b.number < a.number for b in view.attempts)


def summary_line(view: RunView) -> str:
    """``succeeded after 3 attempts; micro 8 -> 2, accumulation 1 -> 4, global batch kept;
    4 min of training lost``. Says "global batch kept" only when the events show it."""
    n = len(view.attempts)
    att = f"{n} attempt{'s' if n != 1 else ''}"
    if view.outcome == "succeeded":
        head = f"succeeded after {att}" if n > 1 else "succeeded on the first attempt"
    elif view.outcome in ("gave up", "stopped"):
        why = f" ({view.reason})" if view.reason else ""
        head = f"{view.outcome} after {att}{why}"
    elif view.outcome == "running":
        head = f"no end recorded (still running, or dsguard was killed); {att} so far"
    else:
        head = "no run recorded"
    parts = [head]
    what = changes_words(view.changes)
    gb0, gb = view.initial_global_batch, view.global_batch
    if gb0 is not None and gb is not None:
        batch = "global batch kept" if gb0 == gb else f"global batch {gb0} -> {gb} (new phase)"
        what = f"{what}, {batch}" if what else f"no knob changed, {batch}"
    if what:
        parts.append(what)
    new_phases = [a.number for a in view.attempts if a.phase > 1 and _first_of_phase(view, a)]
    if new_phases:
        at = ", ".join(f"#{n}" for n in new_phases)
        parts.append(f"new phase from attempt {at} (not an exact resume)")
    if view.lost_s > 0 or n > 1 + view.probe_switches:
        bound = "" if view.lost_exact else "at most "
        parts.append(f"{bound}{duration_words(view.lost_s)} of training lost")
    if view.probe_switches:
        k = view.probe_switches
        cost = "cost not settled" if view.probe_lost_s is None else (
            f"{duration_words(view.probe_lost_s)} spent on them"
        )  # fmt: skip
        parts.append(f"{k} planned fit_probe switch{'es' if k != 1 else ''} ({cost})")
    return "; ".join(parts)


# -- terminal sparklines ----------------------------------------------------------------------

_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int = 40) -> str:
    """``values`` as one line of block characters, at most ``width`` wide (each character the
    mean of its share of the values); a missing value is a space."""
    if not values:
        return ""
    n = min(width, len(values))
    cells: list[float | None] = []
    for i in range(n):
        part = [
            v for v in values[i * len(values) // n : (i + 1) * len(values) // n] if v is not None
        ]
        cells.append(sum(part) / len(part) if part else None)
    real = [c for c in cells if c is not None]
    if not real:
        return " " * n
    lo, hi = min(real), max(real)
    top = len(_BLOCKS) - 1
    return "".join(
        " " if c is None else _BLOCKS[0 if hi == lo else round((c - lo) / (hi - lo) * top)]
        for c in cells
    )


def spark_rows(view: RunView, width: int = 40) -> list[tuple[str, str]]:
    """``[(label, line)]`` for the loss and the memory of a run's heartbeat history (the
    rows ``dsguard status`` and ``dsguard events`` print); none when there is no history."""
    pts = view.points
    rows: list[tuple[str, str]] = []
    loss = [p.loss for p in pts]
    real = [v for v in loss if v is not None]
    if real:
        rows.append(("loss", f"{sparkline(loss, width)}  {real[0]:.4g} -> {real[-1]:.4g}"))
    mems = (("GPU mem", [p.gpu_bytes for p in pts]), ("host mem", [p.host_bytes for p in pts]))
    for label, mem in mems:
        got = [m for m in mem if m]
        if got:
            line = sparkline([float(m) if m else None for m in mem], width)
            rows.append((label, f"{line}  peak {max(got) / (1 << 30):.2f} GiB"))
    if rows:
        steps = f"steps {pts[0].step}-{pts[-1].step}" if pts else ""
        attempts = len({p.attempt for p in pts})
        rows = [(k, f"{v}  ({steps}, {attempts} attempt(s))") for k, v in rows]
    return rows
