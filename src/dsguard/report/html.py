"""The report page: plain HTML with inline SVG charts drawn here (no script, no external
style sheet or font, no chart library), so it opens from a laptop's downloads folder with no
network and weighs little even for a long night."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime

from dsguard.core.summary import AttemptView, Point, RunView, changes_words, duration_words
from dsguard.core.summary import summary_line as make_summary
from dsguard.run.events import format_knobs

#: One colour per phase (cycled), and the marks every chart shares.
PHASE_COLOURS = ("#2f6fbf", "#c2410c", "#15803d", "#7e22ce", "#a16207")
FAIL, WAIT, LOST, REPLAY = "#b91c1c", "#9ca3af", "#fca5a5", "#f59e0b"
#: Points per loss series past which the curve is thinned (keeps the page small).
MAX_POINTS = 1500
W, PAD_L, PAD_R = 1180, 64, 16

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#111;
background:#fff}h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sum{font-size:17px;padding:10px 14px;border-left:6px solid #888;background:#f5f5f5}
.succeeded{border-color:#15803d}.gave_up{border-color:#b91c1c}.stopped{border-color:#a16207}
table{border-collapse:collapse;font-size:12px;width:100%}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f4f6}
td.w{min-width:180px}.muted{color:#666;font-size:12px}
svg{display:block;margin:4px 0}section{margin-bottom:40px}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB"


def _clock(t: float | None) -> str:
    return "?" if t is None else datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


class _Axis:
    """A linear map from data to pixels."""

    def __init__(self, lo: float, hi: float, px0: float, px1: float) -> None:
        self.lo, self.hi = lo, hi if hi > lo else lo + 1.0
        self.px0, self.px1 = px0, px1

    def __call__(self, v: float) -> float:
        return self.px0 + (v - self.lo) / (self.hi - self.lo) * (self.px1 - self.px0)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _time_axis(view: RunView, y: float, x: _Axis) -> str:
    """Minute (or hour) marks relative to the run's start along the bottom of a chart."""
    t0, t1 = x.lo, x.hi
    span = t1 - t0
    unit, name = (3600.0, "h") if span > 3 * 3600 else (60.0, "min") if span > 120 else (1.0, "s")
    out = []
    for v in _ticks(0.0, span / unit):
        px = x(t0 + v * unit)
        out.append(f'<line x1="{px:.1f}" y1="{y}" x2="{px:.1f}" y2="{y + 4}" stroke="#999"/>')
        out.append(f'<text x="{px:.1f}" y="{y + 15}" text-anchor="middle">{v:g} {name}</text>')
    return "".join(out)


def _span(view: RunView) -> tuple[float, float]:
    """The run's wall-time extent: every attempt, heartbeat and run boundary."""
    times: list[float] = [p.t_s for p in view.points]
    for a in view.attempts:
        times += [t for t in (a.start_s, a.end_s) if t is not None]
    times += [t for t in (view.start_s, view.end_s) if t is not None]
    if not times:
        return 0.0, 1.0
    lo = min(times)
    return lo, max(*times, lo + 1.0)


def _break_mark(a: AttemptView, px: float, rows: list[float]) -> str:
    """The red mark where an attempt broke, labelled with kind and rung on the first text
    row with room for it; with no room (a long night of short attempts) only the tooltip
    says it, rather than labels printed over each other."""
    label = f"{a.kind_words}{' (hang)' if a.hang else ''} -> {a.rung or 'give up'}"
    width = 6.2 * len(label)
    out = (
        f'<line x1="{px:.1f}" y1="22" x2="{px:.1f}" y2="48" stroke="{FAIL}" stroke-width="2">'
        f"<title>attempt {a.number}: {_e(label)}</title></line>"
    )
    left = px - width if px + width > W else px
    for r, y in enumerate((18, 8)):
        if left > rows[r] + 8:
            rows[r] = left + width
            anchor = "end" if left < px else "start"
            out += (
                f'<text x="{px:.1f}" y="{y}" text-anchor="{anchor}" style="fill:{FAIL}">'
                f"{_e(label)}</text>"
            )
            break
    return out


def timeline_svg(view: RunView) -> str:
    """Attempts as bars (colour: phase; red tail: time no later attempt kept), grey gaps for
    backoff and GPU-release waits, the failure kind and rung at each break, phase marks."""
    h = 96
    t0, t1 = _span(view)
    x = _Axis(t0, t1, PAD_L, W - PAD_R)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img">']
    out.append('<text x="4" y="38">attempts</text><text x="4" y="62">phase</text>')
    rows = [-1e9, -1e9]  # right edge of the last failure label on each of two text rows
    for i, a in enumerate(view.attempts):
        if a.start_s is None:
            continue
        end = a.end_s if a.end_s is not None else t1
        x0, x1 = x(a.start_s), max(x(end), x(a.start_s) + 2)
        colour = PHASE_COLOURS[(a.phase - 1) % len(PHASE_COLOURS)]
        out.append(
            f'<rect x="{x0:.1f}" y="26" width="{x1 - x0:.1f}" height="18" fill="{colour}">'
            f"<title>attempt {a.number}: {_e(format_knobs(a.knobs))}</title></rect>"
        )
        if a.lost_s > 0 and a.end_s is not None:
            lx = max(x0, x(a.end_s - a.lost_s))
            out.append(
                f'<rect x="{lx:.1f}" y="40" width="{x1 - lx:.1f}" height="4" fill="{LOST}">'
                f"<title>{duration_words(a.lost_s)} lost</title></rect>"
            )
        if x1 - x0 >= 8 * len(str(a.number)) + 12:
            out.append(f'<text x="{x0 + 3:.1f}" y="39" style="fill:#fff">#{a.number}</text>')
        nxt = view.attempts[i + 1] if i + 1 < len(view.attempts) else None
        if nxt is not None and nxt.start_s is not None and nxt.start_s > end:
            out.append(
                f'<rect x="{x1:.1f}" y="30" width="{x(nxt.start_s) - x1:.1f}" height="10" '
                f'fill="{WAIT}"><title>wait {nxt.start_s - end:.1f} s (backoff '
                f"{a.delay_s:g} s, GPU release {a.gpu_wait_s:.1f} s)</title></rect>"
            )
        if a.kind:
            out.append(_break_mark(a, x1, rows))
    for phase, t, reason in view.phases:
        if t is None:
            continue
        colour = PHASE_COLOURS[(phase - 1) % len(PHASE_COLOURS)]
        px = x(t)
        out.append(
            f'<rect x="{px:.1f}" y="52" width="3" height="14" fill="{colour}">'
            f'<title>{_e(reason)}</title></rect><text x="{px + 6:.1f}" y="63">'
            f"phase {phase}</text>"
        )
    out.append(f'<line x1="{PAD_L}" y1="72" x2="{W - PAD_R}" y2="72" stroke="#999"/>')
    out.append(_time_axis(view, 72, x))
    out.append("</svg>")
    return "".join(out)


def _thin(points: Sequence[Point]) -> list[Point]:
    if len(points) <= MAX_POINTS:
        return list(points)
    k = math.ceil(len(points) / MAX_POINTS)
    return [p for i, p in enumerate(points) if i % k == 0 or i == len(points) - 1]


def _series(points: Sequence[Point], x: _Axis, y: _Axis, colour: str, dashed: bool) -> str:
    pts = [p for p in points if p.loss is not None and math.isfinite(p.loss)]
    if not pts:
        return ""
    coords = " ".join(f"{x(p.t_s):.1f},{y(p.loss):.1f}" for p in pts if p.loss is not None)
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    out = f'<polyline fill="none" stroke="{colour}" stroke-width="1.6"{dash} points="{coords}"/>'
    if len(pts) == 1:
        p = pts[0]
        out += f'<circle cx="{x(p.t_s):.1f}" cy="{y(p.loss or 0):.1f}" r="3" fill="{colour}"/>'
    return out


def loss_svg(view: RunView) -> str:
    """Loss over wall time, one line per attempt in its phase's colour; steps an earlier
    attempt already trained (replayed after a resume) dashed in amber."""
    pts = [p for p in view.points if p.loss is not None and math.isfinite(p.loss)]
    if not pts:
        return (
            '<p class="muted">No loss figures: the trainer wrote no heartbeat history '
            "(dsguard's HF callback writes it to heartbeat/attempt-N-rank-R.jsonl).</p>"
        )
    h, top, bottom = 260, 12, 222
    t0, t1 = _span(view)
    x = _Axis(t0, t1, PAD_L, W - PAD_R)
    losses = [p.loss for p in pts if p.loss is not None]
    y = _Axis(min(losses), max(losses), bottom, top)
    groups: dict[int, list[Point]] = {}
    for p in pts:
        groups.setdefault(p.attempt, []).append(p)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img">']
    for v in _ticks(y.lo, y.hi):
        out.append(
            f'<line x1="{PAD_L}" y1="{y(v):.1f}" x2="{W - PAD_R}" y2="{y(v):.1f}" '
            f'stroke="#eee"/><text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" '
            f'text-anchor="end">{v:g}</text>'
        )
    for a in view.attempts:
        mine = _thin(groups.get(a.number, []))
        colour = PHASE_COLOURS[(a.phase - 1) % len(PHASE_COLOURS)]
        replay = [p for p in mine if p.replayed]
        fresh = [p for p in mine if not p.replayed]
        if replay and fresh:
            fresh = [replay[-1], *fresh]  # joined, so the line does not break at the seam
        out.append(_series(replay, x, y, REPLAY, True))
        out.append(_series(fresh, x, y, colour, False))
        if mine:
            first = mine[0]
            out.append(
                f'<text x="{x(first.t_s) + 3:.1f}" y="{top + 10}">#{a.number} '
                f"from step {first.step}</text>"
            )
    out.append(f'<line x1="{PAD_L}" y1="{bottom}" x2="{W - PAD_R}" y2="{bottom}" stroke="#999"/>')
    out.append(_time_axis(view, bottom, x))
    out.append(
        f'<text x="{PAD_L}" y="{h - 4}">loss (rank 0) over time; '
        f'<tspan style="fill:{REPLAY}">dashed amber: steps trained a second time after a '
        "resume</tspan></text></svg>"
    )
    return "".join(out)


def _bars(
    title: str,
    rows: list[tuple[str, float | None, float | None]],
    limit: float | None,
    limit_name: str,
) -> str:
    """Horizontal bars per attempt (peak), a diamond for the prediction, a red limit line."""
    vals = [v for _, a, b in rows for v in (a, b) if v is not None]
    if not vals:
        return f'<p class="muted">{_e(title)}: no figures recorded.</p>'
    hi = max([*vals, limit or 0.0]) * 1.08
    row_h, h = 20, 30 + 20 * len(rows)
    x = _Axis(0.0, hi, PAD_L + 40, W - PAD_R - 110)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img">',
        f'<text x="4" y="14" style="font-weight:600">{_e(title)}</text>',
    ]
    for i, (name, peak, pred) in enumerate(rows):
        yy = 22 + i * row_h
        out.append(f'<text x="4" y="{yy + 12}">{_e(name)}</text>')
        label = [] if peak is None else [_gib(peak)]
        if peak is not None:
            out.append(
                f'<rect x="{x.px0}" y="{yy}" width="{x(peak) - x.px0:.1f}" height="14" '
                f'fill="#60a5fa"/>'
            )
        if pred is not None:
            px = x(pred)
            label.append(f"predicted {_gib(pred)}")
            out.append(
                f'<path d="M{px:.1f},{yy - 1} l5,8 l-5,8 l-5,-8z" fill="#111">'
                f"<title>predicted {_gib(pred)}</title></path>"
            )
        # An attempt killed before its first heartbeat (the demo's kernel OOM kill during
        # start-up) has neither a measured peak nor, with the fit off, a prediction.
        right = max((x(v) for v in (peak, pred) if v is not None), default=x.px0)
        text = ", ".join(label) or "not measured (ended before its first heartbeat)"
        out.append(f'<text x="{right + 8:.1f}" y="{yy + 12}">{_e(text)}</text>')
    if limit:
        px = x(limit)
        end = px > W - 320  # the label would run off the page: put it left of the line
        out.append(
            f'<line x1="{px:.1f}" y1="18" x2="{px:.1f}" y2="{h - 4}" stroke="{FAIL}" '
            f'stroke-width="2"/><text x="{px - 4 if end else px + 4:.1f}" y="14" '
            f'style="fill:{FAIL}" text-anchor="{"end" if end else "start"}">'
            f"{_e(limit_name)} {_gib(limit)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _predicted(a: AttemptView, which: str) -> float | None:
    hits = [v for k, v in a.predicted.items() if which in k and "bytes" in k]
    return max(hits) if hits else None


def memory_svg(view: RunView) -> str:
    gpu = [(f"#{a.number}", _f(a.gpu_peak_bytes), _predicted(a, "gpu")) for a in view.attempts]
    host = [(f"#{a.number}", _f(a.host_peak_bytes), _predicted(a, "host")) for a in view.attempts]
    return _bars(
        "peak GPU memory per attempt (reserved, max over ranks)",
        gpu,
        _f(view.gpu_total_bytes),
        "GPU total",
    ) + _bars(
        "peak host memory per attempt (RSS)",
        host,
        _f(view.host_limit_bytes),
        _HOST_LIMIT_LABEL.get(view.host_limit_how or "", "limit (resources.host_memory_limit)"),
    )


#: What the host limit line means, by how it was enforced (``memory_limit_applied.how``).
_HOST_LIMIT_LABEL = {
    "cgroup_v1": "limit (memory cgroup: resident memory)",
    "cgroup_v2": "limit (memory cgroup: resident memory)",
    "rlimit_as": "limit (RLIMIT_AS: address space, not RSS)",
}


def _f(v: int | None) -> float | None:
    return None if v is None else float(v)


def _last(a: AttemptView) -> str:
    if a.last_step is None:
        return "-"
    return f"{a.last_step}" + ("" if a.last_loss is None else f" ({a.last_loss:.4g})")


def _rate(a: AttemptView) -> str:
    if a.samples_per_s is None:
        return "-"
    tokens = "" if a.tokens_per_s is None else f" ({a.tokens_per_s:,.0f})"
    return f"{a.samples_per_s:.3g}{tokens}"


def attempts_table(view: RunView) -> str:
    head = ("#", "phase", "start", "duration", "knobs", "changed before it", "resumed at",
            "end", "failure", "next move", "last step (loss)", "lost",
            "samples/s (tokens/s)")  # fmt: skip
    rows = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    prev: AttemptView | None = None
    for a in view.attempts:
        changed = changes_words(prev.changes) if prev is not None else "(the job's knobs)"
        if prev is not None and prev.new_phase:
            changed += " [new phase]"
        end = "" if a.ended_by in (None, "exit") else f"{a.ended_by}, "
        end += "running" if a.end_s is None else f"exit {a.exit_code}"
        move = "" if not a.kind else (a.rung or "give up")
        if a.probe_switch and not a.kind:
            move = "fit_probe switch (planned)"
        if a.delay_s:
            move += f", wait {a.delay_s:g} s"
        cells = (
            a.number, a.phase, _clock(a.start_s),
            "-" if a.duration_s is None else duration_words(a.duration_s),
            format_knobs(a.knobs) + (f"; global batch {a.global_batch}" if a.global_batch else ""),
            changed or "-", "fresh" if a.resume_step is None else f"step {a.resume_step}",
            end, a.kind_words or "-", move or "-", _last(a),
            duration_words(a.lost_s) if a.lost_s else "-", _rate(a),
        )  # fmt: skip
        rows.append("<tr>" + "".join(
            f'<td class="w">{_e(c)}</td>' if i in (4, 5) else f"<td>{_e(c)}</td>"
            for i, c in enumerate(cells)
        ) + "</tr>")  # fmt: skip
        prev = a
    rows.append("</table>")
    return "".join(rows)


def section(view: RunView, title: str) -> str:
    line = make_summary(view)
    css = view.outcome.replace(" ", "_")
    notes = []
    if view.unknown_events:
        names = ", ".join(f"{k} x{v}" for k, v in sorted(view.unknown_events.items()))
        notes.append(f"Events this dsguard does not know (shown nowhere else): {names}.")
    if view.earlier_runs:
        notes.append(f"The log dir also holds {view.earlier_runs} earlier run(s), not shown.")
    if any(a.tokens_per_s for a in view.attempts):
        notes.append(
            "tokens/s from heartbeats is samples/s x max_length: an upper bound "
            "(padding counted), unless the trainer reported it."
        )
    if not view.lost_exact:
        notes.append(
            "Without heartbeat history a failed attempt's whole duration is counted "
            "as lost (an upper bound)."
        )
    return "".join((
        f"<section><h1>{_e(title)}</h1>",
        f'<p class="muted">run {_e(view.run_id)}; started {_clock(view.start_s)} UTC'
        + (f"; ended {_clock(view.end_s)} UTC" if view.end_s else "") + "</p>",
        f'<p class="sum {css}">{_e(line)}</p>',
        f"<p>{_e(view.reason)}</p>" if view.reason else "",
        "<h2>Timeline</h2>", timeline_svg(view), "<h2>Attempts</h2>", attempts_table(view),
        "<h2>Loss</h2>", loss_svg(view), "<h2>Memory</h2>", memory_svg(view),
        "".join(f'<p class="muted">{_e(n)}</p>' for n in notes), "</section>",
    ))  # fmt: skip


def page(views: Sequence[tuple[str, RunView]], *, title: str = "dsguard report") -> str:
    """The whole page: one section per (title, run)."""
    body = "".join(section(v, t) for t, v in views) or "<p>No runs.</p>"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>{body}</body></html>\n"
    )
