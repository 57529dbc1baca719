"""``dsguard plan --fit JOB [--json]``: predicted peak of every reachable config, and the pick."""

from __future__ import annotations

from typing import Any

from dsguard.core.fit import Candidate, FitPlan
from dsguard.job.knobs import KNOB_SPECS, format_knob


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def path_text(path: tuple[str, ...]) -> str:
    """``micro_batch x2, ds_buckets x3`` (runs of one rung counted)."""
    if not path:
        return "(start)"
    parts: list[str] = []
    for name in path:
        if parts and parts[-1].split(" x")[0] == name:
            head, _, count = parts[-1].partition(" x")
            parts[-1] = f"{head} x{int(count or 1) + 1}"
        else:
            parts.append(name)
    return ", ".join(parts)


def candidate_dict(c: Candidate) -> dict[str, Any]:
    est = c.estimate
    return {
        "knobs": c.knobs.as_dict(),
        "path": list(c.path),
        "fits": c.fits,
        "peak_bytes": est.peak_bytes,
        "gpu_peak_bytes": est.gpu_peak_bytes,
        "host_peak_bytes": est.host_peak_bytes,
        "gpu": None if est.gpu is None else est.gpu.as_dict(),
        "host": est.host.as_dict(),
        "relative_step_time": round(c.step_time, 3),
        "seq_len": est.seq_len,
        "seq_len_assumed": est.seq_len_assumed,
    }


def plan_dict(plan: FitPlan) -> dict[str, Any]:
    return {
        "device": plan.device,
        "available_bytes": plan.available_bytes,
        "margin": plan.margin,
        "model": None if plan.shape is None else {
            "source": plan.shape.source, "params": plan.shape.param_count(),
            "hidden_size": plan.shape.hidden_size, "num_layers": plan.shape.num_layers,
        },
        "start": plan.start.as_dict(),
        "chosen": None if plan.chosen is None else candidate_dict(plan.chosen),
        "source": plan.source,
        "note": plan.note,
        "candidates": [candidate_dict(c) for c in plan.candidates],
    }  # fmt: skip


#: Knobs a first fit can change (the other columns would be constant).
_COLUMNS = ("micro_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
            "zero_stage", "offload", "ds_bucket_divisor")  # fmt: skip


def plan_lines(plan: FitPlan, limit: int = 40) -> list[str]:
    """The human table: fitting configs first by step time, then the rest by peak."""
    lines: list[str] = []
    if plan.shape is None:
        return [f"first fit: {plan.note}; nothing is changed"]
    lines.append(
        f"model: {plan.shape.param_count() / 1e6:.1f} M parameters ({plan.shape.source}); "
        f"device {plan.device}; available {_gib(plan.available_bytes)} GiB, margin "
        f"{plan.margin:.0%}"
    )
    head = ["fit", "peak_GiB", "time", *(KNOB_SPECS[k].label for k in _COLUMNS), "path"]
    ordered = sorted(
        plan.candidates,
        key=lambda c: (not c.fits, c.step_time if c.fits else c.estimate.peak_bytes),
    )
    rows = [
        [
            "yes" if c.fits else "no", _gib(c.estimate.peak_bytes), f"{c.step_time:.2f}",
            *(format_knob(c.knobs.as_dict()[k]) for k in _COLUMNS),
            path_text(c.path),
        ]
        for c in ordered[:limit]
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    for row in [head, *rows]:
        cells = "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=False))
        lines.append(f"{cells}  {row[-1]}")
    if len(ordered) > limit:
        lines.append(f"... {len(ordered) - limit} more (--json lists all)")
    chosen = plan.chosen
    if chosen is None:
        lines.append(f"first fit: {plan.note}")
    else:
        lines.append(
            f"first fit ({plan.source}): {path_text(chosen.path)} -> peak "
            f"{_gib(chosen.estimate.peak_bytes)} GiB, step time x{chosen.step_time:.2f}"
        )
    return lines
