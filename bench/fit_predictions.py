"""GPU-side predictions of dsguard's estimator for ``bench/gpu``'s LLaMA-style 1B/3B configs.

Pure arithmetic, runs on CPU: for every config of every GPU scenario (start and expected heals)
it prints, side by side,

* dsguard's estimate (``dsguard.core.estimate``: model states, activations, DeepSpeed
  buffers; ``peak``) and its first-fit choice under the scenario's cap
  (``dsguard.core.fit.plan_fit``, the scenario's own ladder, 10 % margin);
* ``bench/gpu/configs.py``'s own design estimate (issue 7; +10 % activations, +1 GiB);
* DeepSpeed's ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_
  mem_needs`` (model states only, called with the parameter counts: they are pure arithmetic
  and run on the CPU accelerator), and dsguard's model-state part for the same config.

Ready to be checked against measured peaks on a GPU (``bench/gpu/run.py`` records
``max_memory_reserved`` per attempt). Run: ``python -m bench.fit_predictions [--markdown]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Sequence
from typing import Any

from bench.gpu import configs as gpu
from dsguard.core.estimate import DsBuffers, ModelShape, Regime, estimate
from dsguard.core.fit import FitInputs, plan_fit
from dsguard.core.rungs import RungContext
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload

GIB = 2**30


def shape_of(m: gpu.ModelShape) -> ModelShape:
    return ModelShape(
        hidden_size=m.hidden, num_layers=m.layers, num_heads=m.heads,
        intermediate_size=m.intermediate, vocab_size=m.vocab, num_kv_heads=m.kv_heads,
        tied_embeddings=m.tie_embeddings, max_position=m.max_positions, source=m.name,
    )  # fmt: skip


def knobs_of(c: gpu.TrainConfig) -> Knobs:
    return Knobs(
        c.micro, c.accum, max_length=c.seq, zero_stage=c.zero,
        offload=Offload(c.offload), lora=c.lora, gradient_checkpointing=c.gc,
    )  # fmt: skip


def regime_of(sc: gpu.Scenario) -> Regime:
    """bench/gpu's jobs: one GPU, bf16, SDPA attention, reduce bucket 2e8 (its template)."""
    return Regime(
        "gpu",
        world_size=1,
        dtype_bytes=2,
        efficient_attention=not sc.eager,
        lora_rank=gpu.LORA_R,
        buffers=DsBuffers(
            gpu.REDUCE_BUCKET, gpu.REDUCE_BUCKET, 50_000_000, 1_000_000_000, overlap_comm=True
        ),
    )


def deepspeed_states(params: int, largest_layer: int, c: gpu.TrainConfig) -> int | None:
    """DeepSpeed's own model-state estimate for one GPU (None: DeepSpeed not importable)."""
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import (
                estimate_zero2_model_states_mem_needs,
            )
    except Exception:
        return None
    offload = c.offload != "none"
    if c.zero >= 3:
        _, gpu_mem, _ = estimate_zero3_model_states_mem_needs(
            params, largest_layer, 1, 1, cpu_offload=offload, cpu_offload_params=False,
            zero_init=True,
        )  # fmt: skip
    else:
        _, gpu_mem = estimate_zero2_model_states_mem_needs(params, 1, 1, cpu_offload=offload)
    return int(gpu_mem)


def rows() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ctx = RungContext(1, 256, dict(DEFAULT_FLAGS), has_deepspeed=True, can_start_phase=True,
                      exact_zero_transfer=True)  # fmt: skip
    for sc in gpu.GPU_SCENARIOS.values():
        if sc.model not in ("llama-1b", "llama-3b") or sc.build_failure:
            continue
        m = gpu.MODELS[sc.model]
        shape = shape_of(m)
        regime = regime_of(sc)
        cap = int(sc.cap_gib * GIB) if sc.cap_gib else None
        for i, c in enumerate(sc.all_configs()):
            k = knobs_of(c)
            est = estimate(shape, k, regime)
            assert est.gpu is not None
            states = est.gpu.params + est.gpu.grads + est.gpu.optimizer
            theirs = gpu.estimate(m, c, eager=sc.eager)
            row: dict[str, Any] = {
                "scenario": sc.name, "model": sc.model, "role": "start" if i == 0 else "heal",
                "config": c.label(), "params": shape.param_count(),
                "dsguard_peak": est.peak_bytes, "dsguard_states": states,
                "dsguard_activations": est.gpu.activations,
                "bench_gpu_peak": theirs["peak"],
                "deepspeed_states": None if c.lora else deepspeed_states(
                    shape.param_count(), shape.largest_layer_params(), c),
                "cap": cap, "fits": None if cap is None else est.peak_bytes <= 0.9 * cap,
            }  # fmt: skip
            if i == 0 and cap is not None and not c.lora:
                plan = plan_fit(k, ctx, FitInputs(shape, regime, cap, rungs=sc.ladder))
                chosen = plan.chosen
                row["first_fit"] = plan.note if chosen is None else (
                    f"{', '.join(chosen.path)} ({chosen.estimate.peak_bytes / GIB:.1f} GiB)"
                )  # fmt: skip
                row["first_fit_note"] = plan.note
            out.append(row)
    return out


#: VmPeak of the reference trainer measured for ``bench/gpu``'s dry run (its configs.py: torch
#: 2.13 CPU, DeepSpeed 0.19.8, 2026-11-22): (model, config) -> GiB.
DRY_MEASURED_GIB: dict[tuple[str, gpu.TrainConfig], float] = {
    ("dry-tiny", gpu.TrainConfig(micro=8, accum=1, seq=2048)): 4.82,
    ("dry-tiny", gpu.TrainConfig(micro=4, accum=2, seq=2048)): 3.65,
    ("dry-tiny", gpu.TrainConfig(micro=8, accum=1, seq=2048, gc=True)): 4.30,
    ("dry-mlp", gpu.TrainConfig(micro=2, accum=1, seq=64)): 4.55,
    ("dry-mlp", gpu.TrainConfig(micro=2, accum=1, seq=64, lora=True)): 3.01,
}


def dry_rows() -> list[dict[str, Any]]:
    """dsguard's CPU (host, fp32, eager) estimate against those measured peaks."""
    out: list[dict[str, Any]] = []
    for (model, c), measured in DRY_MEASURED_GIB.items():
        regime = Regime(
            "cpu", dtype_bytes=4, efficient_attention=model != "dry-tiny", lora_rank=gpu.LORA_R,
            buffers=DsBuffers(
                gpu.REDUCE_BUCKET, gpu.REDUCE_BUCKET, 50_000_000, 1_000_000_000, overlap_comm=True
            ),
        )  # fmt: skip
        est = estimate(shape_of(gpu.MODELS[model]), knobs_of(c), regime)
        predicted = est.host_peak_bytes / GIB
        out.append({
            "model": model, "config": c.label(), "measured_gib": measured,
            "predicted_gib": round(predicted, 2),
            "error_pct": round(100 * (predicted - measured) / measured, 1),
        })  # fmt: skip
    return out


def _g(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def markdown(data: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | model | config | cap GiB | dsguard peak | of which states / activations "
        "| bench/gpu estimate | DeepSpeed states | dsguard fits | first fit from the start |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in data:
        fits = "-" if r["fits"] is None else "yes" if r["fits"] else "no"
        lines.append(
            f"| {r['scenario']} | {r['model']} | {r['role']}: {r['config']} | {_g(r['cap'])} "
            f"| {_g(r['dsguard_peak'])} | {_g(r['dsguard_states'])} / "
            f"{_g(r['dsguard_activations'])} | {_g(r['bench_gpu_peak'])} "
            f"| {_g(r['deepspeed_states'])} | {fits} "
            f"| {r.get('first_fit') or r.get('first_fit_note', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    ns = parser.parse_args(argv)
    data = rows()
    dry = dry_rows()
    if not ns.markdown:
        sys.stdout.write(json.dumps({"gpu": data, "cpu_measured": dry}, indent=2) + "\n")
        return 0
    sys.stdout.write(markdown(data) + "\n")
    sys.stdout.write("| model (CPU, fp32) | config | measured VmPeak GiB | dsguard GiB | error |\n")
    sys.stdout.write("|---|---|---:|---:|---:|\n")
    for r in dry:
        sys.stdout.write(
            f"| {r['model']} | {r['config']} | {r['measured_gib']:.2f} | "
            f"{r['predicted_gib']:.2f} | {r['error_pct']:+.1f} % |\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
