"""Peak memory of one training rank, from the model's shape and the knobs (pure arithmetic).

dsguard used to find a config that fits by failing: every failed attempt of a real job costs a
model load and a DeepSpeed start. This module predicts, before anything is launched, how much
memory one rank needs for a given :class:`~dsguard.job.knobs.Knobs`, split into parameters /
gradients / optimizer state / activations / DeepSpeed buffers, on the accelerator and in host
memory (offload, CPU training). The plan (:mod:`dsguard.core.plan`) ranks the ladder's
reachable configs by it; calibration scales it by what the heartbeats measured.

Sources of the formulas (all public):

* Model states, mixed-precision Adam: 2 bytes fp16/bf16 weights + 2 bytes gradients + 12
  bytes fp32 master weights, momentum and variance = 16 bytes per parameter; ZeRO-1 shards the
  12, ZeRO-2 the gradients too, ZeRO-3 the weights too. Rajbhandari et al. 2020, "ZeRO:
  Memory Optimizations Toward Training Trillion Parameter Models" (arXiv:1910.02054), section
  3.1 and Figure 1; DeepSpeed's own ``estimate_zero2_model_states_mem_needs``
  (``deepspeed/runtime/zero/stage_1_and_2.py``) and ``estimate_zero3_model_states_mem_needs``
  (``deepspeed/runtime/zero/stage3.py``), which count 2 + 18/N bytes per parameter (their 18
  adds 4 bytes of fp32 gradient partition during the step).
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv:2205.05198), equation (1): ``s*b*h*(34 + 5*a*s/h)`` bytes per
  layer for a GPT layer in 16-bit. The ``5*a*s/h`` term is the materialised attention
  matrix (scores, softmax, dropout mask); memory-efficient attention (FlashAttention, torch
  SDPA) does not keep it (Dao et al. 2022, arXiv:2205.14135). LLaMA-style layers differ from
  GPT's (RMSNorm, gated SiLU MLP of width ``intermediate_size``, grouped K/V heads, no
  dropout), so the per-tensor terms are written out below for that layer; full activation
  checkpointing keeps only each layer's input plus one layer's activations during the
  recompute (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost",
  arXiv:1604.06174).
* DeepSpeed buffers: ``reduce_bucket_size`` / ``allgather_bucket_size`` (ZeRO-1/2),
  ``stage3_prefetch_bucket_size`` / ``stage3_max_live_parameters`` (ZeRO-3) are element
  counts (DeepSpeed's config documentation, https://www.deepspeed.ai/docs/config-json/); the
  gradient bucket holds gradients in the training dtype, so 5e7 elements are 200 MB in fp32.

These are estimates: allocator fragmentation, the CUDA context, NCCL buffers and framework
temporaries are not modelled term by term; :class:`Estimate` carries a ``scale`` that the run
loop calibrates on measured peaks, and the plan keeps a safety margin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dsguard.job.knobs import Knobs, Offload

Device = Literal["gpu", "cpu"]

#: DeepSpeed's default of each buffer key (elements) when the config does not set it
#: (``deepspeed/runtime/zero/config.py``: reduce/allgather 5e8, prefetch 5e7, live 1e9); the
#: one home of these numbers (``core.render`` shrinks from them too).
DS_BUCKET_DEFAULTS: dict[str, int] = {
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
}
#: The config keys of the four buffers, in :class:`DsBuffers` field order.
BUCKET_KEYS: tuple[str, ...] = tuple(DS_BUCKET_DEFAULTS)

#: Host memory of the training process that no term below accounts for: the interpreter,
#: torch's and DeepSpeed's libraries, the tokenizer and the dataset, as peak *virtual* memory
#: (what RLIMIT_AS limits). 1 GiB is the intercept of P5's measured VmPeaks (dsguard's
#: reference trainer, fp32 ZeRO-2 on CPU, ``bench/p5_results.json``: peak = intercept + a
#: slope per sample, the estimate's buckets and model states taken off); calibration
#: replaces the whole estimate's scale with the run's own ratio after an attempt.
HOST_RUNTIME_BYTES = 2**30

#: Sequence length assumed when the job does not say (``train.max_length`` unset): the plan
#: says it assumed it.
DEFAULT_SEQ_LEN = 2048

#: Attention projections LoRA adapts by default (q, k, v, o), per layer.
LORA_TARGETS_PER_LAYER = 4


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the estimator needs of a decoder-only transformer (HF ``config.json`` keys)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    num_kv_heads: int | None = None
    tied_embeddings: bool = False
    #: Parameter count from the weights themselves (safetensors headers); None: from shape.
    n_params: int | None = None
    max_position: int | None = None
    #: Where the shape came from (shown by ``dsguard plan``).
    source: str = ""

    @property
    def kv_hidden(self) -> int:
        kv = self.num_kv_heads or self.num_heads
        return self.hidden_size * kv // max(1, self.num_heads)

    def layer_params(self) -> int:
        """Weights of one LLaMA-style layer: q/o (h*h each), k/v (h*h_kv each), gated MLP
        (3*h*I), two RMSNorm scales."""
        h, i = self.hidden_size, self.intermediate_size
        return 2 * h * h + 2 * h * self.kv_hidden + 3 * h * i + 2 * h

    def param_count(self) -> int:
        if self.n_params is not None:
            return self.n_params
        emb = self.vocab_size * self.hidden_size
        heads = 1 if self.tied_embeddings else 2
        return self.num_layers * self.layer_params() + heads * emb + self.hidden_size

    def largest_layer_params(self) -> int:
        """DeepSpeed's ``largest_layer_params``: the biggest single module ZeRO-3 gathers."""
        return max(self.layer_params(), self.vocab_size * self.hidden_size)


@dataclass(frozen=True, slots=True)
class DsBuffers:
    """DeepSpeed's communication/gather buffer sizes, in elements (see module docstring)."""

    reduce_bucket: int = DS_BUCKET_DEFAULTS["reduce_bucket_size"]
    allgather_bucket: int = DS_BUCKET_DEFAULTS["allgather_bucket_size"]
    prefetch_bucket: int = DS_BUCKET_DEFAULTS["stage3_prefetch_bucket_size"]
    max_live: int = DS_BUCKET_DEFAULTS["stage3_max_live_parameters"]
    #: ``overlap_comm``: DeepSpeed double-buffers the gradient bucket (ZeRO-1/2
    #: ``ipg_buffer`` holds two of them) to overlap the reduction with the backward.
    overlap_comm: bool = False


def ds_buffers(config: Mapping[str, Any] | None, hidden_size: int | None = None) -> DsBuffers:
    """The buffer sizes a rendered DeepSpeed config asks for.

    ``"auto"`` is what the HF Trainer fills in from the model: ``hidden_size**2`` for the
    reduce bucket and ``0.9 * hidden_size**2`` for the ZeRO-3 prefetch bucket
    (``transformers/integrations/deepspeed.py``, ``trainer_config_finalize``); unknown
    hidden size: DeepSpeed's default (an over-estimate, never an under-estimate).
    """
    zero = (config or {}).get("zero_optimization") or {}
    overlap = zero.get("overlap_comm") is True
    auto = {
        "reduce_bucket_size": hidden_size * hidden_size if hidden_size else None,
        "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size)
        if hidden_size
        else None,
    }
    values: list[int] = []
    for key, default in DS_BUCKET_DEFAULTS.items():
        raw = zero.get(key)
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw > 0:
            values.append(int(raw))
        elif raw == "auto" and auto.get(key) is not None:
            values.append(int(auto[key] or default))
        else:
            values.append(default)
    reduce, allgather, prefetch, live = values
    return DsBuffers(reduce, allgather, prefetch, live, overlap_comm=overlap)


@dataclass(frozen=True, slots=True)
class Regime:
    """What the estimate depends on besides the knobs (fixed for a run)."""

    device: Device
    world_size: int = 1
    #: Bytes of one element in the training compute dtype: 2 (bf16/fp16 mixed precision) or
    #: 4 (fp32, e.g. CPU training).
    dtype_bytes: int = 2
    #: Memory-efficient attention (sdpa/flash): no s*s attention matrix is kept.
    efficient_attention: bool = True
    uses_deepspeed: bool = True
    lora_rank: int = 8
    #: The DeepSpeed buffers at ``ds_bucket_divisor`` 1 (the job's own config).
    buffers: DsBuffers = field(default_factory=DsBuffers)
    #: Host memory outside the modelled terms (see :data:`HOST_RUNTIME_BYTES`).
    host_runtime_bytes: int = HOST_RUNTIME_BYTES


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Bytes per category on one device (the accelerator, or host memory)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    buffers: int = 0
    runtime: int = 0

    @property
    def total(self) -> int:
        return (
            self.params + self.grads + self.optimizer + self.activations + self.buffers
            + self.runtime
        )  # fmt: skip

    def as_dict(self) -> dict[str, int]:
        return {
            "params_bytes": self.params, "grads_bytes": self.grads,
            "optimizer_bytes": self.optimizer, "activations_bytes": self.activations,
            "buffers_bytes": self.buffers, "runtime_bytes": self.runtime,
            "total_bytes": self.total,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted peak of one rank: on the accelerator (None when training on CPU) and in
    host memory, each already multiplied by ``scale`` in :attr:`peak_bytes`."""

    gpu: Breakdown | None
    host: Breakdown
    seq_len: int
    seq_len_assumed: bool
    scale: float = 1.0

    @property
    def gpu_peak_bytes(self) -> int | None:
        return None if self.gpu is None else int(self.gpu.total * self.scale)

    @property
    def host_peak_bytes(self) -> int:
        return int(self.host.total * self.scale)

    @property
    def peak_bytes(self) -> int:
        """The peak on the device that limits the job (the GPU, or host memory on CPU)."""
        gpu = self.gpu_peak_bytes
        return self.host_peak_bytes if gpu is None else gpu


def activation_bytes_per_layer(
    shape: ModelShape, micro: int, seq: int, dtype_bytes: int, efficient_attention: bool
) -> int:
    """Activations one LLaMA-style layer keeps for backward (Korthikanti et al. 2022, eq. 1,
    re-derived for HF's LLaMA layer: RMSNorm, RoPE, gated SiLU MLP, grouped K/V, no dropout).

    Per token, in 16-bit units (scaled by ``dtype_bytes / 2``): each of the two RMSNorms keeps
    its fp32 input (4h), the normalised 2h and the weighted output 2h; q and o after RoPE,
    the attention output and o_proj's contiguous input 6h; k and v ``4*h_kv``; the MLP's
    gate, activation, up and product ``8*I``: ``22h + 4*h_kv + 8*I`` bytes. Eager attention
    adds the probabilities in fp32 and in the compute dtype, ``a*s*(4 + e)`` per token;
    memory-efficient attention keeps only the log-sum-exp (4 bytes per head and token).
    """
    h, i = shape.hidden_size, shape.intermediate_size
    tokens = micro * seq
    linear = tokens * (22 * h + 4 * shape.kv_hidden + 8 * i) * dtype_bytes // 2
    if efficient_attention:
        core = 4 * micro * shape.num_heads * seq
    else:
        core = (4 + dtype_bytes) * micro * shape.num_heads * seq * seq
    return linear + core


def _activations(shape: ModelShape, k: Knobs, seq: int, r: Regime) -> int:
    per_layer = activation_bytes_per_layer(
        shape, k.micro_batch_size, seq, r.dtype_bytes, r.efficient_attention
    )
    tokens = k.micro_batch_size * seq
    layer_input = r.dtype_bytes * tokens * shape.hidden_size
    if k.gradient_checkpointing:
        # Each layer's input is kept; one layer's activations exist during its recompute,
        # and its backward then allocates the gradient of the eager attention matrix (fp32,
        # as large as the probabilities) while they are alive.
        layers = shape.num_layers * layer_input + per_layer
        if not r.efficient_attention:
            layers += 4 * k.micro_batch_size * shape.num_heads * seq * seq
    else:
        layers = shape.num_layers * per_layer
    # Logits in the compute dtype, their fp32 upcast for the loss, and its gradient.
    logits = tokens * shape.vocab_size * (r.dtype_bytes + 4 + 4)
    return layers + layer_input + logits


def _model_states(shape: ModelShape, k: Knobs, r: Regime) -> tuple[int, int, int, int]:
    """(weights, gradients, optimizer, trainable params) bytes of one rank before offload.

    Mixed precision (2-byte dtype): 2P + 2P + 12P (fp32 master, Adam m and v). fp32: 4P +
    4P + 8P, plus DeepSpeed's fp32 flat partition copy (4P) under ZeRO >= 1."""
    p = shape.param_count()
    trainable = p
    if k.lora:
        trainable = (
            shape.num_layers * LORA_TARGETS_PER_LAYER * r.lora_rank * (2 * shape.hidden_size)
        )
    n = max(1, r.world_size)
    stage = (k.zero_stage or 0) if r.uses_deepspeed else 0
    e = r.dtype_bytes
    weights = e * p
    grads = e * trainable
    fp32_copy = 4 * trainable if e == 2 or stage >= 1 else 0
    opt = 8 * trainable + fp32_copy
    if stage >= 1:
        opt //= n
    if stage >= 2:
        grads //= n
    if stage >= 3:
        weights //= n
    return weights, grads, opt, trainable


def _buffers(shape: ModelShape, k: Knobs, r: Regime) -> tuple[int, int]:
    """(backward-time, step-time) DeepSpeed buffer bytes, ``ds_bucket_divisor`` applied.

    Backward holds the gradient reduce bucket; ZeRO-3 also the prefetched and live gathered
    parameters (capped at the model). The step holds the allgather bucket (ZeRO-1/2) and,
    in mixed precision, an fp32 copy of the gradient partition (DeepSpeed's "4 bytes of
    grads_32bit")."""
    if not r.uses_deepspeed or k.zero_stage is None:
        return 0, 0
    div = max(1, k.ds_bucket_divisor)
    b = r.buffers
    e = r.dtype_bytes
    p = shape.param_count()
    reduce = e * (b.reduce_bucket // div) * (2 if b.overlap_comm else 1)
    if k.zero_stage >= 3:
        live = min(b.max_live // div + b.prefetch_bucket // div, p)
        gathered = e * max(live, shape.largest_layer_params())
        return reduce + gathered, gathered
    step = e * min(b.allgather_bucket // div, p)
    return reduce, step


def estimate(shape: ModelShape, knobs: Knobs, regime: Regime, *, scale: float = 1.0) -> Estimate:
    """Predicted peak memory of one rank for ``knobs`` (see the module docstring).

    The peak is the larger of the end of the forward pass (model states + activations +
    the backward's buckets) and the optimizer step (model states + the step's buffers);
    offloaded states move from the accelerator to host memory.
    """
    seq = knobs.max_length or shape.max_position or DEFAULT_SEQ_LEN
    assumed = knobs.max_length is None
    weights, grads, opt, trainable = _model_states(shape, knobs, regime)
    acts = _activations(shape, knobs, seq, regime)
    back_buf, step_buf = _buffers(shape, knobs, regime)
    if regime.dtype_bytes == 2 and regime.uses_deepspeed and (knobs.zero_stage or 0) >= 1:
        # The step's fp32 gradient partition (DeepSpeed's "4 bytes of grads_32bit"), on the
        # device that runs the optimizer.
        step_buf += (
            0 if knobs.offload is not Offload.NONE else 4 * trainable // max(1, regime.world_size)
        )
    host_w = host_g = host_o = 0
    if regime.uses_deepspeed and knobs.offload is not Offload.NONE:
        # The optimizer's fp32 states and gradient partition live in host memory
        # (DeepSpeed's cpu_offload: P * max(4N, 16) bytes per node).
        host_o, opt = opt, 0
        host_g = 4 * trainable // max(1, regime.world_size)
        if knobs.offload is Offload.ALL:
            host_w, weights = weights, 0
    # peak = states + max(acts + backward buffers, step buffers)
    buffers = max(back_buf, step_buf - acts)
    dev = Breakdown(weights, grads, opt, acts, buffers)
    if regime.device == "cpu":
        host = Breakdown(
            weights + host_w, grads + host_g, opt + host_o, acts, buffers,
            regime.host_runtime_bytes,
        )  # fmt: skip
        return Estimate(None, host, seq, assumed, scale)
    host = Breakdown(host_w, host_g, host_o, 0, 0, regime.host_runtime_bytes)
    return Estimate(dev, host, seq, assumed, scale)
