"""Model shapes, memory estimates and the scenarios of the GPU proof (issue 7).

Everything here is plain Python (no torch), so the harness can generate and explain every job
on a machine without a GPU: ``python -m bench.gpu.configs --out DIR [--dry-run]`` writes the
run dir (one sub-dir per scenario: ``model.json`` for ``--model_config``, ``ds.json``,
``data.jsonl``, ``job.yaml``, ``estimate.json`` / ``estimate.md``) and prints the estimates.

**Scenarios.** Each one starts from a config that cannot fit under its cap and has a ladder
chosen so that the intended rung is the one that heals it:

==========================  =====  =====  ====================================================
scenario                    model  cap    start -> expected heal
==========================  =====  =====  ====================================================
``micro_batch``             1B     40 GB  8x1 seq 2048 -> 4x2 (2x4 if 4x2 is still too big)
``gradient_checkpointing``  1B     40 GB  8x1 seq 2048 -> same batch + checkpointing
``zero3``                   1B     40 GB  ZeRO-2 -> ZeRO-3 (exact transplant of a ZeRO-2
                                          checkpoint) -> ZeRO-3 + optimizer offload
``offload``                 3B     24 GB  ZeRO-2 (16 bytes/param = 48 GB) -> optimizer offload
                                          (DeepSpeed's Adam: real fused_adam and cpu_adam JIT
                                          builds on the GPU machine)
``lora``                    1B     40 GB  full fine-tune -> LoRA new phase from the
                                          consolidated weights of the last checkpoint
``build_failure``           1B     none   fused_adam build with a broken compiler on PATH ->
                                          the avoid-op remedy (DeepSpeed's ``torch_adam``)
==========================  =====  =====  ====================================================

Data: ``warmup_steps`` short examples first (training fits, a checkpoint is written at that
step), then examples of the full sequence length, read in order (``--train_sampling_strategy
sequential``): the OOM is a real one at the first long step, *after* a checkpoint, so the
heal resumes from it (exactly, for every rung but LoRA). Lengths are exact: the byte tokenizer
makes one token per ASCII character plus bos/eos, and long texts are cut at max_length.

**Memory model** (one GPU, so ZeRO shards nothing; bytes per parameter, bf16 mixed precision,
Psi parameters, T of them trainable):

* weights 2 Psi (bf16), gradients 2 T (bf16, the ZeRO gradient partition), fp32 master 4 T,
  Adam moments 8 T: the classic 16 bytes/param;
* ZeRO-2 optimizer step: the bf16 gradient partition is converted to an fp32 copy, +4 T (so
  ZeRO-2 peaks near 20 Psi); ZeRO-3 does it per sub-group (``sub_group_size``, 1e9 by
  default), +4 min(T, 1e9): on one GPU ZeRO-3 therefore saves almost nothing (sharding needs
  more ranks); the ``zero3`` scenario shows the exact stage transplant, offload heals it;
* optimizer offload: master, moments and fp32 gradients move to host memory (16 T bytes),
  the GPU keeps the bf16 weights and the reduce buckets;
* ZeRO-2 reduce buckets: 2 x ``reduce_bucket_size`` elements (2e8 here, as the repo's
  template), overlap_comm double-buffers them;
* activations per token and layer, HF LLaMA in bf16 with SDPA attention (saved for backward:
  two RMSNorms, each its fp32 input 4h, the normalised bf16 2h and the weighted output 2h;
  q and o after RoPE / the attention output / o_proj's contiguous input 6h, k and v 4kv; the
  MLP's gate, act, up and product 8i): ``22h + 4kv + 8i`` bytes; eager attention adds
  ``heads x seq x (4 + w)`` per token and layer (the probabilities, fp32 softmax output);
* gradient checkpointing: every layer keeps its input (2h per token and layer) plus one
  layer's activations during its recompute;
* logits: vocab x (2 + 4 + 4) bytes per token (bf16 logits, fp32 upcast for the loss, its
  fp32 gradient);
* +10 % on activations and 1 GiB for the allocator, cuBLAS workspace and fragmentation.

The estimate is a design tool (pick a start that surely fails, a heal that surely fits), not
a prediction to quote: the H200 run measures the real peaks (NVML and torch) next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

GIB = 1024**3
#: nvidia-smi's total on the lent H200 (KINDS.md, 143771 MiB). The run probes torch's own
#: total on the machine and computes the fraction from that; this is only for --dry-run/docs.
H200_TOTAL_BYTES = 143771 * 1024**2
#: dsguard.train.tokenizer.ByteTokenizer().vocab_size (256 bytes + 3 specials, rounded to 8).
TOKENIZER_VOCAB = 264
REDUCE_BUCKET = 200_000_000
ZERO3_SUB_GROUP = 1_000_000_000
LORA_R = 16
ALLOCATOR_OVERHEAD = GIB
ACTIVATION_SLACK = 1.10

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A LLaMA-style decoder (RMSNorm, RoPE, SwiGLU MLP, grouped-query attention)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int = 4096
    tie_embeddings: bool = False
    note: str = ""

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def params(self) -> int:
        h, i, kv = self.hidden, self.intermediate, self.kv_dim
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
        embed = self.vocab * h
        head = 0 if self.tie_embeddings else self.vocab * h
        return self.layers * per_layer + embed + head + h

    def lora_params(self, r: int = LORA_R) -> int:
        """PEFT LoRA on q/k/v/o (the reference trainer's default targets)."""
        h, kv = self.hidden, self.kv_dim
        per_layer = r * (h + h) + 2 * r * (h + kv) + r * (h + h)
        return self.layers * per_layer

    def hf_config(self) -> dict[str, Any]:
        """For ``--model_config``: the trainer adds pad/bos/eos ids and ``use_cache``."""
        return {
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "hidden_act": "silu",
            "initializer_range": 0.02,
            "tie_word_embeddings": self.tie_embeddings,
        }


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            "llama-1b", hidden=2048, intermediate=5632, layers=22, heads=32, kv_heads=4,
            vocab=32000, note="TinyLlama-1.1B's shape (GQA 32/4), 32k vocab, untied",
        ),
        ModelShape(
            "llama-3b", hidden=3072, intermediate=8192, layers=28, heads=24, kv_heads=8,
            vocab=32000, note="LLaMA-3.2-3B's body (GQA 24/8) with a 32k vocab, untied",
        ),
        # --dry-run (CPU, fp32). The preset "tiny" of dsguard.train: eager attention at 1024
        # tokens makes activations large at a trivial compute cost (a real host OOM cheaply).
        ModelShape(
            "dry-tiny", hidden=64, intermediate=176, layers=2, heads=4, kv_heads=4,
            vocab=TOKENIZER_VOCAB, max_positions=2048, note="dsguard.train's preset 'tiny'",
        ),
        # --dry-run lora: parameter-heavy (wide MLP), short sequences, so full fine-tuning's
        # optimizer state (not activations) is what does not fit and LoRA heals it.
        ModelShape(
            "dry-mlp", hidden=512, intermediate=16384, layers=4, heads=8, kv_heads=8,
            vocab=TOKENIZER_VOCAB, max_positions=2048,
            note="~105M parameters, mostly MLP: optimizer state dominates",
        ),
    )
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# memory estimate
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """The knobs of one attempt that matter for memory (and dsguard's ``train:`` section)."""

    micro: int
    accum: int
    seq: int
    zero: int = 2
    offload: str = "none"  # none | optimizer
    lora: bool = False
    gc: bool = False

    @property
    def per_rank_batch(self) -> int:
        return self.micro * self.accum

    def label(self) -> str:
        parts = [f"{self.micro}x{self.accum}", f"seq {self.seq}", f"ZeRO-{self.zero}"]
        if self.offload != "none":
            parts.append(f"offload {self.offload}")
        if self.gc:
            parts.append("grad-ckpt")
        if self.lora:
            parts.append("LoRA")
        return " ".join(parts)


def activation_bytes_per_token(
    m: ModelShape, cfg: TrainConfig, *, w: int, eager: bool
) -> dict[str, float]:
    h, i, kv = m.hidden, m.intermediate, m.kv_dim
    per_layer = (22 * h + 4 * kv + 8 * i) * (w / 2)
    if eager:
        per_layer += m.heads * cfg.seq * (4 + w)
    layers = m.layers * w * h + per_layer if cfg.gc else m.layers * per_layer
    logits = m.vocab * (w + 8)
    return {"layers": layers, "logits": float(logits), "total": layers + logits}


def estimate(
    m: ModelShape, cfg: TrainConfig, *, precision: str = "bf16", eager: bool = False
) -> dict[str, Any]:
    """Peak device bytes of one training attempt (see the module docstring for the model).

    ``precision`` is ``bf16`` (GPU, mixed precision) or ``fp32`` (the CPU dry run, where the
    "device" is host memory and the process's own address space comes on top).
    """
    w = 2 if precision == "bf16" else 4
    psi = m.params()
    t = m.lora_params() if cfg.lora else psi
    weights = w * psi + (w * t if cfg.lora else 0)
    grads = w * t
    master = 4 * t
    adam = 8 * t
    if cfg.zero >= 3:
        transient = 4 * min(t, ZERO3_SUB_GROUP)
        buckets = 2 * w * m.hidden * m.hidden  # reduce bucket + prefetch ("auto": ~h^2 each)
    else:
        transient = 4 * t if w != 4 else 0  # fp32 .to(fp32) is no copy
        buckets = 2 * w * min(REDUCE_BUCKET, t)
    host = 0
    if cfg.offload != "none":
        host = master + adam + 4 * t
        master = adam = transient = 0
        grads = min(grads, buckets)
    per_token = activation_bytes_per_token(m, cfg, w=w, eager=eager)
    tokens = cfg.micro * cfg.seq
    activations = int(tokens * per_token["total"] * ACTIVATION_SLACK)
    static = weights + grads + master + adam + buckets
    backward_peak = static + activations
    step_peak = static + transient
    overhead = ALLOCATOR_OVERHEAD if precision == "bf16" else 0
    peak = max(backward_peak, step_peak) + overhead
    return {
        "config": cfg.label(),
        "params": psi,
        "trainable": t,
        "weights": weights,
        "grads": grads,
        "fp32_master": master,
        "adam": adam,
        "buckets": buckets,
        "step_transient": transient,
        "activation_tokens": tokens,
        "activation_bytes_per_token": int(per_token["total"]),
        "activations": activations,
        "overhead": overhead,
        "backward_peak": backward_peak + overhead,
        "step_peak": step_peak + overhead,
        "peak": peak,
        "host_offload": host,
        "peak_at": "backward" if backward_peak >= step_peak else "optimizer step",
    }


# ---------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    purpose: str
    model: str
    start: TrainConfig
    ladder: tuple[str, ...]
    #: The configs the ladder is expected to walk through after ``start`` (for the estimate
    #: table; the run records what really happened).
    expected: tuple[TrainConfig, ...]
    #: Rungs the scenario exists to exercise (the summary checks they were applied).
    intended: tuple[str, ...]
    #: GPU: cap in GiB (resources.gpu_memory_fraction); None = the whole card.
    cap_gib: float | None = None
    #: Dry run: resources.host_memory_limit (RLIMIT_AS) instead of the GPU cap.
    host_limit: str | None = None
    #: torch_opt: HF's torch AdamW (no JIT op); ds_adam: DeepSpeed's AdamW block
    #: (FusedAdam on the GPU, DeepSpeedCPUAdam under offload: JIT-built ops).
    optimizer: str = "torch_opt"
    warmup_steps: int = 4
    short_tokens: int = 128
    long_steps: int = 3
    build_failure: bool = False
    #: Dry run only, where a host-memory limit cannot make the rung heal (ZeRO stages and
    #: offload move nothing off the host): the trainer's documented test fault, a real-format
    #: CUDA OOM raised at a step. Reported as injected.
    fault: str | None = None
    eager: bool = False
    precision: str = "bf16"
    pin_memory: bool = True
    notes: tuple[str, ...] = field(default=())

    @property
    def max_steps(self) -> int:
        return self.warmup_steps + self.long_steps

    @property
    def save_steps(self) -> int:
        # One checkpoint (at the end of the warm-up); saves after it would be past max_steps.
        return self.warmup_steps if self.warmup_steps else self.max_steps + 1

    def all_configs(self) -> tuple[TrainConfig, ...]:
        return (self.start, *self.expected)


def _gpu_scenarios() -> dict[str, Scenario]:
    b1 = TrainConfig(micro=8, accum=1, seq=2048)
    # zero3 / lora: full fine-tuning (~17.6 GB of state + buffers) must not fit, ZeRO-3 +
    # offload (~2.2 GB weights) and LoRA (~2.3 GB) must: activations near the middle of that
    # window (22.5 .. 39.5 GB of activations by this model), ~31 GB: 4 x 3072 tokens.
    win = TrainConfig(micro=4, accum=1, seq=3072)
    return {
        s.name: s
        for s in (
            Scenario(
                "micro_batch", "CUDA OOM at the first long step -> micro-batch halved, "
                "accumulation doubled, global batch 8 kept, exact resume",
                "llama-1b", b1, ("micro_batch",),
                (replace(b1, micro=4, accum=2), replace(b1, micro=2, accum=4)),
                ("micro_batch",), cap_gib=40,
            ),
            Scenario(
                "gradient_checkpointing", "CUDA OOM -> gradient checkpointing at the same "
                "batch (exact resume)", "llama-1b", b1,
                ("gradient_checkpointing", "micro_batch"), (replace(b1, gc=True),),
                ("gradient_checkpointing",), cap_gib=40,
            ),
            Scenario(
                "zero3", "CUDA OOM under ZeRO-2 -> ZeRO-3 resumed exactly from the ZeRO-2 "
                "checkpoint (universal conversion + transplant; on one GPU it frees almost "
                "nothing, so it fails again) -> ZeRO-3 + optimizer offload fits",
                "llama-1b", win, ("zero3", "offload_optimizer"),
                (replace(win, zero=3), replace(win, zero=3, offload="optimizer")),
                ("zero3", "offload_optimizer"), cap_gib=40,
            ),
            Scenario(
                "offload", "3B under 24 GB: ZeRO-2 state alone (~48 GB) cannot fit -> "
                "optimizer offload (DeepSpeed's AdamW: fused_adam then cpu_adam JIT-built "
                "on this machine)", "llama-3b", TrainConfig(micro=2, accum=2, seq=1024),
                ("offload_optimizer",),
                (TrainConfig(micro=2, accum=2, seq=1024, offload="optimizer"),),
                ("offload_optimizer",), cap_gib=24, optimizer="ds_adam", warmup_steps=0,
                long_steps=4, pin_memory=False,
                notes=("the OOM comes at DeepSpeed's initialize (no checkpoint yet), so the "
                       "offload attempt starts fresh", "offload pin_memory false: 48 GB of "
                       "pinned host memory in a microVM is a risk this proof does not need"),
            ),
            Scenario(
                "lora", "full fine-tune OOM -> LoRA as a new phase, started from the "
                "consolidated weights of the warm-up checkpoint", "llama-1b", win, ("lora",),
                (replace(win, lora=True),), ("lora",), cap_gib=40,
                notes=("the new phase restarts its step count and the data from sample 0 "
                       "(short warm-up examples first)",),
            ),
            Scenario(
                "build_failure", "fused_adam JIT build with a broken C/C++ compiler first on "
                "PATH (gcc's 'cannot execute cc1plus') and a fresh TORCH_EXTENSIONS_DIR -> "
                "ds_build_error -> avoid_fused_adam (torch_adam) -> trains",
                "llama-1b", TrainConfig(micro=2, accum=1, seq=512), (), (), (),
                optimizer="ds_adam", warmup_steps=0, long_steps=3, build_failure=True,
            ),
        )
    }  # fmt: skip


def _dry_scenarios() -> dict[str, Scenario]:
    """CPU, fp32, tiny models, real RLIMIT_AS limits (measured peaks in the comments)."""
    t = TrainConfig(micro=8, accum=1, seq=2048)
    z = TrainConfig(micro=2, accum=4, seq=256)
    common: dict[str, Any] = {
        "precision": "fp32", "eager": True, "warmup_steps": 2, "short_tokens": 32,
        "long_steps": 2, "pin_memory": False,
    }  # fmt: skip
    return {
        s.name: s
        for s in (
            Scenario(
                "micro_batch", "host OOM (RLIMIT_AS) at the first long step -> micro 8x1 -> "
                "4x2, exact resume", "dry-tiny", t, ("micro_batch",),
                (replace(t, micro=4, accum=2),), ("micro_batch",), host_limit=DRY_LIMIT_TINY,
                **common,
            ),
            Scenario(
                "gradient_checkpointing", "host OOM -> gradient checkpointing",
                "dry-tiny", t, ("gradient_checkpointing", "micro_batch"),
                (replace(t, gc=True),), ("gradient_checkpointing",),
                host_limit=DRY_LIMIT_TINY_GC, **common,
            ),
            Scenario(
                "zero3", "injected CUDA OOM (attempts 1 and 2) -> ZeRO-3 (exact transplant "
                "of the ZeRO-2 checkpoint) -> ZeRO-3 + optimizer offload, as on the GPU",
                "dry-tiny", z, ("zero3", "offload_optimizer"),
                (replace(z, zero=3), replace(z, zero=3, offload="optimizer")),
                ("zero3", "offload_optimizer"),
                fault="oom:at_step=3:attempt=1,oom:at_step=3:attempt=2", **common,
            ),
            Scenario(
                "offload", "injected CUDA OOM -> optimizer offload at the same stage",
                "dry-tiny", z, ("offload_optimizer",), (replace(z, offload="optimizer"),),
                ("offload_optimizer",), fault="oom:at_step=3:attempt=1", **common,
            ),
            Scenario(
                "lora", "host OOM (RLIMIT_AS): full fine-tuning's optimizer state does not "
                "fit -> LoRA new phase", "dry-mlp", TrainConfig(micro=2, accum=1, seq=64),
                ("lora",), (TrainConfig(micro=2, accum=1, seq=64, lora=True),), ("lora",),
                host_limit=DRY_LIMIT_MLP, precision="fp32", warmup_steps=0, long_steps=3,
                pin_memory=False,
            ),
            Scenario(
                "build_failure", "fused_adam JIT build with a broken compiler -> avoid op",
                "dry-tiny", TrainConfig(micro=2, accum=1, seq=64), (), (), (),
                optimizer="ds_adam", build_failure=True, precision="fp32", warmup_steps=0,
                long_steps=2, pin_memory=False,
            ),
        )
    }  # fmt: skip


# RLIMIT_AS limits of the dry run, between peaks measured here (VmPeak of the trainer process,
# `python -m bench.gpu.probe`, torch 2.13 CPU, DeepSpeed 0.19.8, 2026-11-22): dry-tiny, eager,
# 2048 tokens: micro 8 4.82 GiB, micro 4 (x2) 3.65 GiB, micro 8 + checkpointing 4.30 GiB;
# dry-mlp, 2 x 64 tokens: full fine-tuning 4.55 GiB, LoRA 3.01 GiB.
DRY_LIMIT_TINY = "4.2GiB"
DRY_LIMIT_TINY_GC = "4.55GiB"
DRY_LIMIT_MLP = "3.8GiB"

GPU_SCENARIOS: dict[str, Scenario] = _gpu_scenarios()
DRY_SCENARIOS: dict[str, Scenario] = _dry_scenarios()
SCENARIO_ORDER: tuple[str, ...] = (
    "micro_batch", "gradient_checkpointing", "build_failure", "zero3", "lora", "offload",
)  # fmt: skip
#: What a plain --dry-run runs (the rest are available with --scenarios).
DRY_DEFAULT: tuple[str, ...] = ("micro_batch", "lora", "build_failure")


# -- the throughput sweep ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sweep:
    """Candidate configs at one (model, cap, seq, global batch): which fit, and how fast."""

    model: str
    seq: int
    candidates: tuple[TrainConfig, ...]
    cap_gib: float | None = None
    host_limit: str | None = None
    steps: int = 6
    precision: str = "bf16"
    eager: bool = False
    #: Scenarios whose final config is compared with the sweep's best.
    compare: tuple[str, ...] = ("micro_batch", "gradient_checkpointing")


def gpu_sweep() -> Sweep:
    s = 2048
    return Sweep(
        "llama-1b", s,
        (TrainConfig(4, 2, s), TrainConfig(2, 4, s), TrainConfig(1, 8, s),
         TrainConfig(8, 1, s, gc=True), TrainConfig(4, 2, s, gc=True)),
        cap_gib=40,
    )  # fmt: skip


def dry_sweep() -> Sweep:
    s = 2048
    return Sweep(
        "dry-tiny", s, (TrainConfig(4, 2, s), TrainConfig(8, 1, s, gc=True)),
        host_limit=DRY_LIMIT_TINY, steps=3, precision="fp32", eager=True,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------


def deepspeed_config(optimizer: str, *, pin_memory: bool = True) -> dict[str, Any]:
    """ZeRO-2 base (dsguard renders the stage/offload of each attempt from it)."""
    cfg: dict[str, Any] = {
        "bf16": {"enabled": "auto"},
        "zero_optimization": {
            "stage": 2,
            "offload_optimizer": {"device": "none", "pin_memory": pin_memory},
            "allgather_partitions": True,
            "allgather_bucket_size": REDUCE_BUCKET,
            "overlap_comm": True,
            "reduce_scatter": True,
            "reduce_bucket_size": REDUCE_BUCKET,
            "contiguous_gradients": True,
            # read only under ZeRO-3 (the zero3 rung): the final save_model writes 16-bit
            # weights instead of a second full DeepSpeed checkpoint
            "stage3_gather_16bit_weights_on_model_save": True,
        },
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }
    if optimizer == "ds_adam":
        cfg["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    else:
        cfg["zero_allow_untested_optimizer"] = True
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


_WORDS = [
    "the", "model", "learns", "to", "predict", "next", "byte", "from", "context", "while",
    "training", "loss", "goes", "down", "checkpoint", "resume", "batch", "gradient", "memory",
    "shard", "optimizer", "step", "rank", "stage", "offload", "adapter",
]  # fmt: skip


def _text(rng: random.Random, index: int, chars: int) -> str:
    parts = [f"example {index}:"]
    n = len(parts[0])
    while n < chars:
        word = rng.choice(_WORDS) if rng.random() > 0.3 else f"{rng.randint(0, 99)}"
        parts.append(word)
        n += len(word) + 1
    return " ".join(parts)[:chars]


def write_data(path: Path, sc: Scenario, cfg: TrainConfig) -> list[int]:
    """Short examples for the warm-up steps, then full-length ones; returns token counts.

    Tokens per example = min(len(text) + 2, max_length) (ASCII bytes + bos + eos).
    """
    rng = random.Random(f"dsguard-gpu-bench:{sc.name}")
    per_step = cfg.per_rank_batch
    n_short = sc.warmup_steps * per_step
    n_long = sc.long_steps * per_step
    texts = [_text(rng, k, max(8, sc.short_tokens - 2)) for k in range(n_short)]
    texts += [_text(rng, n_short + k, cfg.seq + 64) for k in range(n_long)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return [min(len(t) + 2, cfg.seq) for t in texts]


def trainer_args(sc: Scenario, *, output_dir: str = "outputs", save: bool = True) -> list[str]:
    """The reference trainer's flags dsguard does not own."""
    saving = ["--save_strategy", "steps", "--save_steps", str(sc.save_steps)]
    args = [
        "--model_config", "model.json",
        "--data_path", "data.jsonl",
        "--train_sampling_strategy", "sequential",
        "--max_steps", str(sc.max_steps),
        # No warm-up checkpoint to make: no saving at all (HF would also write a full
        # checkpoint at the last step, GBs on the GPU, on top of the final model).
        *(saving if save and sc.warmup_steps else ["--save_strategy", "no"]),
        "--save_total_limit", "1",
        "--logging_steps", "1",
        "--learning_rate", "1e-4", "--lr_scheduler_type", "constant", "--warmup_steps", "0",
        "--seed", "7",
        "--report_to", "none", "--disable_tqdm", "true",
        "--output_dir", output_dir,
    ]  # fmt: skip
    if sc.precision == "bf16":
        args += ["--bf16", "true", "--attn_implementation", "sdpa"]
    if sc.eager:
        args += ["--attn_implementation", "eager"]
    return args


def cap_fraction(cap_gib: float, total_bytes: int) -> float:
    return round(min(1.0, cap_gib * GIB / total_bytes), 6)


def job_spec(
    sc: Scenario, workdir: Path, *, dry: bool, gpu_total_bytes: int, python: str,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    cfg = sc.start
    env = {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "DSGUARD_SAMPLE_TRACE": str(workdir / "trace.jsonl"),
        "DSGUARD_HEARTBEAT_EVERY": "1",
    }
    if dry:
        env.update(OMP_NUM_THREADS="2", MALLOC_ARENA_MAX="2")
    if sc.fault:
        env["DSGUARD_FAULT"] = sc.fault
    env.update(extra_env or {})
    train: dict[str, Any] = {
        "micro_batch_size": cfg.micro,
        "gradient_accumulation_steps": cfg.accum,
        "max_length": cfg.seq,
        "zero_stage": cfg.zero,
        "offload": cfg.offload,
        "lora": cfg.lora,
        "gradient_checkpointing": cfg.gc,
        "dataloader_workers": 0,
        "pin_memory": sc.pin_memory,
    }
    # The rungs go into the ladder of the failure the cap produces: a CUDA OOM on the GPU, a
    # host OOM under RLIMIT_AS on the CPU (an injected fault is a CUDA OOM on both).
    ladder_key = "host_oom" if dry and sc.host_limit else "oom"
    spec: dict[str, Any] = {
        "name": f"gpu-bench-{sc.name}".replace("_", "-"),
        "launcher": "python",
        "module": "dsguard.train",
        "python": python,
        "args": trainer_args(sc),
        "env": env,
        "train": train,
        "flags": {"max_length": "--model_max_length", "lora": "--lora_enable"},
        "deepspeed": {"config": "ds.json"},
        "checkpoints": {"dir": "outputs"},
        "ladder": {ladder_key: list(sc.ladder)},
        "limits": {
            "backoff_s": [0, 0],
            "max_attempts": 6,
            "fatal_grace_s": 2,
            "min_max_length": 64,
            "hang_timeout_s": 900,
            # the harness's deadline stops dsguard with SIGTERM: no save, a short grace
            "stop_save_timeout_s": 0,
            "stop_grace_s": 10,
        },
        "log_dir": "runs",
    }
    if ladder_key == "host_oom":
        spec["ladder"]["oom"] = []
    resources: dict[str, Any] = {}
    if dry and sc.host_limit:
        # The dry run's limits were tuned as address-space (RLIMIT_AS) budgets.
        resources["host_memory_limit"] = sc.host_limit
        resources["host_memory_via"] = "rlimit_as"
    if not dry and sc.cap_gib:
        resources["gpu_memory_fraction"] = cap_fraction(sc.cap_gib, gpu_total_bytes)
    if resources:
        spec["resources"] = resources
    return spec


def estimates_for(sc: Scenario, *, gpu_total_bytes: int) -> dict[str, Any]:
    m = MODELS[sc.model]
    cap = None if sc.cap_gib is None else sc.cap_gib * GIB
    rows = []
    for k, cfg in enumerate(sc.all_configs()):
        e = estimate(m, cfg, precision=sc.precision, eager=sc.eager)
        e["role"] = "start" if k == 0 else f"expected #{k}"
        if cap is not None:
            e["cap"] = int(cap)
            e["fits"] = e["peak"] <= cap
            e["margin"] = int(cap - e["peak"])
        rows.append(e)
    out: dict[str, Any] = {
        "scenario": sc.name,
        "model": sc.model,
        "params": m.params(),
        "precision": sc.precision,
        "cap_gib": sc.cap_gib,
        "host_limit": sc.host_limit,
        "gpu_total_bytes": gpu_total_bytes,
        "rows": rows,
    }
    if cap is not None:
        out["cap_fraction"] = cap_fraction(sc.cap_gib or 0, gpu_total_bytes)
    return out


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _g(n: float) -> str:
    return f"{n / 1e9:.1f}"


def estimate_markdown(est: dict[str, Any]) -> str:
    cap = est.get("cap_gib")
    head = (
        f"### {est['scenario']}: {est['model']} ({_params(est['params'])} params, "
        f"{est['precision']})"
        + (f", cap {cap} GiB = {cap * GIB / 1e9:.1f} GB" if cap else "")
        + (f", host limit {est['host_limit']}" if est.get("host_limit") else "")
    )
    lines = [
        head,
        "",
        "| role | config | weights | grads | master+Adam | step +fp32 grad | activations "
        "| peak (GB) | fits | margin (GB) | host (offload) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in est["rows"]:
        fits = "-" if "fits" not in r else ("yes" if r["fits"] else "**no**")
        margin = "-" if "margin" not in r else _g(r["margin"])
        lines.append(
            f"| {r['role']} | {r['config']} | {_g(r['weights'])} | {_g(r['grads'])} | "
            f"{_g(r['fp32_master'] + r['adam'])} | {_g(r['step_transient'])} | "
            f"{_g(r['activations'])} ({r['activation_tokens']} tok x "
            f"{r['activation_bytes_per_token'] / 1e6:.2f} MB) | {_g(r['peak'])} "
            f"({r['peak_at']}) | {fits} | {margin} | {_g(r['host_offload'])} |"
        )
    if est["precision"] == "fp32":
        lines += ["", "(CPU: host bytes; the process's own address space, ~2.5-3 GiB of "
                  "libraries and arenas, comes on top of these for RLIMIT_AS)"]  # fmt: skip
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Materialized:
    scenario: Scenario
    dir: Path
    job: Path
    tokens: list[int]
    estimate: dict[str, Any]


def materialize(
    sc: Scenario, root: Path, *, dry: bool, gpu_total_bytes: int = H200_TOTAL_BYTES,
    python: str | None = None, extra_env: dict[str, str] | None = None,
) -> Materialized:  # fmt: skip
    """Write one scenario's files under ``root/<name>`` (an existing dir is replaced)."""
    d = root / sc.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    m = MODELS[sc.model]
    (d / "model.json").write_text(json.dumps(m.hf_config(), indent=1) + "\n")
    (d / "ds.json").write_text(
        json.dumps(deepspeed_config(sc.optimizer, pin_memory=sc.pin_memory), indent=1) + "\n"
    )
    tokens = write_data(d / "data.jsonl", sc, sc.start)
    spec = job_spec(
        sc, d, dry=dry, gpu_total_bytes=gpu_total_bytes, python=python or sys.executable,
        extra_env=extra_env,
    )  # fmt: skip
    header = f"# {sc.name}: {sc.purpose}\n# generated by bench/gpu/configs.py\n"
    job = d / "job.yaml"
    job.write_text(header + yaml.safe_dump(spec, sort_keys=False, width=100))
    est = estimates_for(sc, gpu_total_bytes=gpu_total_bytes)
    est["scenario_def"] = _jsonable(asdict(sc))
    (d / "estimate.json").write_text(json.dumps(est, indent=1) + "\n")
    (d / "estimate.md").write_text(estimate_markdown(est))
    return Materialized(sc, d, job, tokens, est)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def scenarios(dry: bool) -> dict[str, Scenario]:
    return DRY_SCENARIOS if dry else GPU_SCENARIOS


_OVERRIDABLE = {"micro": int, "accum": int, "seq": int, "cap_gib": float, "long_steps": int}


def override(sc: Scenario, spec: str) -> Scenario:
    """``micro=5,seq=3072,cap_gib=40``: the start config (and the expected ones, for the
    estimate) with these values; for a GPU session that saw a start fit or a heal not fit."""
    knobs: dict[str, int] = {}
    top: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, _, value = item.partition("=")
        if key not in _OVERRIDABLE:
            raise ValueError(f"{item!r}: can set {', '.join(_OVERRIDABLE)}")
        if key in ("micro", "accum", "seq"):
            knobs[key] = int(value)
        else:
            top[key] = _OVERRIDABLE[key](value)

    def moved(cfg: TrainConfig, start: bool = False) -> TrainConfig:
        micro = knobs.get("micro", cfg.micro)
        if not start and "micro" in knobs:  # expected configs keep their ratio to the start
            micro = max(1, cfg.micro * knobs["micro"] // sc.start.micro)
        return replace(
            cfg, micro=micro, accum=knobs.get("accum", cfg.accum), seq=knobs.get("seq", cfg.seq)
        )

    return replace(
        sc, start=moved(sc.start, start=True), expected=tuple(moved(e) for e in sc.expected),
        notes=(*sc.notes, f"overridden: {spec}"), **top,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu.configs", description=__doc__)
    p.add_argument("--out", type=Path, help="write the run dir here (else only print)")
    p.add_argument("--dry-run", action="store_true", help="the CPU variants")
    p.add_argument("--scenarios", nargs="*", default=None)
    p.add_argument("--models", action="store_true", help="print the model JSONs")
    a = p.parse_args(argv)
    table = scenarios(a.dry_run)
    names = a.scenarios or [n for n in SCENARIO_ORDER if n in table]
    if a.models:
        for m in MODELS.values():
            print(f"# {m.name}: {m.params() / 1e9:.3f} B params ({m.note})")
            print(json.dumps(m.hf_config(), indent=1))
    for name in names:
        sc = table[name]
        if a.out is not None:
            mat = materialize(sc, a.out, dry=a.dry_run, python=os.environ.get("PYTHON"))
            print(f"wrote {mat.job}")
            print(estimate_markdown(mat.estimate))
        else:
            print(estimate_markdown(estimates_for(sc, gpu_total_bytes=H200_TOTAL_BYTES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
