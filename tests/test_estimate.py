"""core.estimate: per-rank peak memory from the model shape and the knobs (pure arithmetic)."""

from __future__ import annotations

import pytest

from dsguard.core.estimate import (
    DS_BUCKET_DEFAULTS,
    DsBuffers,
    ModelShape,
    Regime,
    activation_bytes_per_layer,
    ds_buffers,
    estimate,
)
from dsguard.core.render import render_deepspeed_config
from dsguard.job.knobs import Knobs, Offload

#: TinyLlama-1.1B's config.json (public: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T).
TINYLLAMA = ModelShape(
    hidden_size=2048, num_layers=22, num_heads=32, intermediate_size=5632, vocab_size=32000,
    num_kv_heads=4, tied_embeddings=False, max_position=2048,
)  # fmt: skip
GPU = Regime("gpu", world_size=1, dtype_bytes=2, buffers=DsBuffers(0, 0, 0, 0))


def test_parameter_count_of_a_known_model() -> None:
    """TinyLlama-1.1B has 1,100,048,384 parameters (its safetensors index); the shape gives
    the same count."""
    assert TINYLLAMA.param_count() == 1_100_048_384


def test_mixed_precision_adam_is_16_bytes_per_parameter_without_zero() -> None:
    """ZeRO paper, section 3.1: 2 + 2 + 12 bytes per parameter."""
    p = TINYLLAMA.param_count()
    est = estimate(TINYLLAMA, Knobs(1, max_length=16, zero_stage=0), GPU)
    assert est.gpu is not None
    assert (est.gpu.params, est.gpu.grads, est.gpu.optimizer) == (2 * p, 2 * p, 12 * p)


@pytest.mark.parametrize("world", [1, 2, 8])
def test_zero_stages_shard_what_the_paper_says(world: int) -> None:
    p = TINYLLAMA.param_count()
    r = Regime("gpu", world_size=world, dtype_bytes=2, buffers=DsBuffers(0, 0, 0, 0))
    got = {}
    for stage in (1, 2, 3):
        g = estimate(TINYLLAMA, Knobs(1, max_length=16, zero_stage=stage), r).gpu
        assert g is not None
        got[stage] = (g.params, g.grads, g.optimizer)
    assert got[1] == (2 * p, 2 * p, 12 * p // world)
    assert got[2] == (2 * p, 2 * p // world, 12 * p // world)
    assert got[3] == (2 * p // world, 2 * p // world, 12 * p // world)


def test_zero2_step_peak_matches_deepspeeds_own_formula() -> None:
    """DeepSpeed's estimate_zero2_model_states_mem_needs (no offload): 2P + 18P/N on the GPU
    (stage_1_and_2.py); the estimate's step peak with empty buckets and no activations is the
    same number (activations are tiny here: one token)."""
    p = TINYLLAMA.param_count()
    for world in (1, 4):
        r = Regime("gpu", world_size=world, dtype_bytes=2, buffers=DsBuffers(0, 0, 0, 0))
        est = estimate(TINYLLAMA, Knobs(1, max_length=1, zero_stage=2), r)
        assert est.gpu is not None
        ds = 2 * p + int(18 * p / world)
        assert est.gpu.total == pytest.approx(ds, rel=0.01)


def test_activations_follow_korthikanti_for_a_gpt_shaped_layer() -> None:
    """Eager attention keeps the s*s matrix: the per-layer bytes grow with s**2, memory-
    efficient attention only linearly."""
    shape = ModelShape(1024, 1, 16, 4096, 1000)
    eager = [activation_bytes_per_layer(shape, 1, s, 2, False) for s in (512, 1024)]
    flash = [activation_bytes_per_layer(shape, 1, s, 2, True) for s in (512, 1024)]
    assert flash[1] == pytest.approx(2 * flash[0], rel=0.01)
    assert eager[1] > 2.5 * eager[0]
    # The quadratic term: a * s**2 * b * (4 + 2) bytes (fp32 softmax + its 16-bit copy).
    assert eager[1] - flash[1] == pytest.approx(16 * 1024 * 1024 * 6, rel=0.01)


def test_micro_batch_scales_activations_and_checkpointing_cuts_them() -> None:
    k = Knobs(8, max_length=2048, zero_stage=2)
    a8 = estimate(TINYLLAMA, k, GPU).gpu
    a4 = estimate(TINYLLAMA, k.replace(micro_batch_size=4), GPU).gpu
    gc = estimate(TINYLLAMA, k.replace(gradient_checkpointing=True), GPU).gpu
    assert a8 is not None and a4 is not None and gc is not None
    assert a8.activations == pytest.approx(2 * a4.activations, rel=0.01)
    assert gc.activations < a8.activations / 3
    assert gc.params == a8.params  # model states do not move


def test_offload_moves_optimizer_then_weights_to_host() -> None:
    k = Knobs(1, max_length=128, zero_stage=3)
    none = estimate(TINYLLAMA, k, GPU)
    opt = estimate(TINYLLAMA, k.replace(offload=Offload.OPTIMIZER), GPU)
    every = estimate(TINYLLAMA, k.replace(offload=Offload.ALL), GPU)
    assert none.gpu is not None and opt.gpu is not None and every.gpu is not None
    assert opt.gpu.optimizer == 0 and opt.host.optimizer == none.gpu.optimizer
    assert every.gpu.params == 0 and every.host.params == none.gpu.params
    assert none.peak_bytes > opt.peak_bytes > every.peak_bytes
    assert every.host_peak_bytes > opt.host_peak_bytes > none.host_peak_bytes


def test_lora_keeps_weights_and_drops_optimizer_state() -> None:
    k = Knobs(1, max_length=128, zero_stage=0)
    full = estimate(TINYLLAMA, k, GPU).gpu
    lora = estimate(TINYLLAMA, k.replace(lora=True), GPU).gpu
    assert full is not None and lora is not None
    assert lora.params == full.params
    assert lora.optimizer < full.optimizer / 100


def test_cpu_training_is_all_host_memory_with_the_runtime() -> None:
    r = Regime("cpu", dtype_bytes=4, buffers=DsBuffers(50_000_000, 50_000_000))
    est = estimate(TINYLLAMA, Knobs(1, max_length=128, zero_stage=2), r)
    assert est.gpu is None
    assert est.peak_bytes == est.host_peak_bytes == est.host.total
    assert est.host.runtime == r.host_runtime_bytes
    # fp32: 4 bytes weights + 4 gradients + 8 Adam + DeepSpeed's 4-byte flat copy.
    p = TINYLLAMA.param_count()
    assert est.host.params + est.host.grads + est.host.optimizer == 20 * p


def test_the_reduce_bucket_is_the_200_mb_allocation_in_fp32() -> None:
    """5e7 elements x 4 bytes = the `you tried to allocate 200000000 bytes` of run_clm."""
    small = ModelShape(64, 1, 4, 128, 100)
    r = Regime("cpu", dtype_bytes=4, buffers=DsBuffers(50_000_000, 0), host_runtime_bytes=0)
    est = estimate(small, Knobs(1, max_length=8, zero_stage=2), r)
    assert est.host.buffers == 200_000_000
    halved = estimate(small, Knobs(1, max_length=8, zero_stage=2, ds_bucket_divisor=2), r)
    assert halved.host.buffers == 100_000_000


def test_ds_buffers_reads_the_config_its_auto_and_defaults() -> None:
    cfg = {"zero_optimization": {"reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": "auto"}}
    b = ds_buffers(cfg, hidden_size=1000)
    assert b.reduce_bucket == 50_000_000
    assert b.prefetch_bucket == 900_000  # HF's auto: 0.9 * hidden**2
    assert b.allgather_bucket == DS_BUCKET_DEFAULTS["allgather_bucket_size"]
    assert ds_buffers(None) == DsBuffers()


def test_render_divides_every_buffer_by_the_knob() -> None:
    base = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7,
                                  "allgather_bucket_size": "auto"}}  # fmt: skip
    cfg = render_deepspeed_config(base, Knobs(4, zero_stage=2, ds_bucket_divisor=4), 1)
    zero = cfg["zero_optimization"]
    assert zero["reduce_bucket_size"] == 12_500_000
    assert zero["allgather_bucket_size"] == "auto"  # left to HF (hidden**2 already)
    assert zero["stage3_prefetch_bucket_size"] == 50_000_000 // 4
    assert zero["stage3_max_live_parameters"] == 1_000_000_000 // 4
    same = render_deepspeed_config(base, Knobs(4, zero_stage=2), 1)
    assert same["zero_optimization"] == {**base["zero_optimization"], "stage": 2}
