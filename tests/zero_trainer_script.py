"""A tiny, deterministic HF Trainer + DeepSpeed run for the ZeRO transplant tests.

Run as a script in a fresh process (``python tests/zero_trainer_script.py ...``, a DeepSpeed
world of size 1 on whatever accelerator DeepSpeed detects, CPU + gloo in CI; or under
``torchrun`` for several ranks). It trains a small LLaMA-style causal LM built from a config
(random init from ``--init_seed``, fp32 unless ``--bf16``, no downloads) on fixed random token
sequences with HF's AdamW (two param groups: weight decay on / off) and either HF's linear
schedule or DeepSpeed's WarmupDecayLR (``--ds_scheduler``), and writes what the tests compare:

* ``--losses_out``: ``{"<global_step>": [micro-batch losses...]}`` at full float precision for
  every optimizer step this process ran (HF's logged losses are rounded, useless at 1e-6;
  under ``torchrun`` rank 0's micro-batches);
* ``--weights_out``: the engine's full fp32 master weights at the end of training
  (``safe_get_full_fp32_param``), i.e. what a consolidated checkpoint must reproduce.

``--transplant`` calls :func:`dsguard.integrations.zero.enable_zero_transplant` before the
Trainer exists, the way a training script opts in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

VOCAB = 256
SEQ_LEN = 16
N_SAMPLES = 64
MICRO = 2
ACCUM = 2


def tiny_llama_config(num_hidden_layers: int = 2) -> LlamaConfig:
    """The model every run and test uses (tests rebuild it to load consolidated weights)."""
    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )


class _TokenDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, VOCAB, (N_SAMPLES, SEQ_LEN), generator=g)

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _LossRecorder(Trainer):
    """Keeps every micro-batch loss (full precision), grouped by the optimizer step."""

    micro_losses: list[float]

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        out: Any = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss: Any = out[0] if return_outputs else out
        self.micro_losses.append(float(loss.detach().double().item()))
        return out


class _StepLosses(TrainerCallback):
    def __init__(self, trainer: _LossRecorder, out: Path | None) -> None:
        self.trainer = trainer
        self.out = out
        self.by_step: dict[str, list[float]] = {}

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.by_step[str(state.global_step)] = list(self.trainer.micro_losses)
        self.trainer.micro_losses.clear()
        if self.out is not None:
            self.out.write_text(json.dumps(self.by_step, indent=1))


def ds_config(stage: int, offload_optimizer: bool, ds_scheduler: bool = False) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        # No gathered 16-bit weights: the checkpoint then holds only ZeRO shards, the case
        # load_consolidated_weights must consolidate itself.
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": zero,
        "bf16": {"enabled": "auto"},
    }
    if ds_scheduler:
        # DeepSpeed owns the scheduler: it lives in the engine and its state in the model-states
        # file (HF writes no usable scheduler.pt for it).
        cfg["scheduler"] = {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": "auto",
                "warmup_num_steps": "auto",
                "total_num_steps": "auto",
            },
        }
    if offload_optimizer:
        # The HF-created torch AdamW is a client optimizer: DeepSpeed refuses offload with it
        # unless told not to force its own DeepSpeedCPUAdam.
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", type=Path, required=True)
    p.add_argument("--stage", type=int, choices=(1, 2, 3), required=True)
    p.add_argument("--offload_optimizer", action="store_true")
    p.add_argument("--max_steps", type=int, default=6)
    p.add_argument("--save_steps", type=int, default=3)
    p.add_argument("--resume_from_checkpoint", type=Path)
    p.add_argument("--transplant", action="store_true")
    p.add_argument("--freeze_embeddings", action="store_true", help="a frozen parameter")
    p.add_argument("--bf16", action="store_true", help="bf16 module, fp32 master weights")
    p.add_argument(
        "--ds_scheduler", action="store_true", help="DeepSpeed's WarmupDecayLR owns the LR"
    )
    p.add_argument(
        "--init_seed",
        type=int,
        default=0,
        help="model init; resumed runs use another one, so every tensor must come from the ckpt",
    )
    p.add_argument("--losses_out", type=Path)
    p.add_argument("--weights_out", type=Path)
    a = p.parse_args(argv)

    for k, v in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(k, v)

    if a.transplant:
        from dsguard.integrations.zero import enable_zero_transplant

        enable_zero_transplant()

    torch.manual_seed(a.init_seed)
    model = LlamaForCausalLM(tiny_llama_config())  # plain init, the same for every stage
    if a.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)

    args = TrainingArguments(
        output_dir=str(a.output_dir),
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUM,
        max_steps=a.max_steps,
        learning_rate=3e-3,
        weight_decay=0.1,  # two param groups (decay / no decay) with different settings
        lr_scheduler_type="linear",
        warmup_steps=2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=a.save_steps,
        save_total_limit=None,
        report_to=[],
        seed=42,
        dataloader_num_workers=0,
        deepspeed=ds_config(a.stage, a.offload_optimizer, a.ds_scheduler),
        # Under torchrun on CPU, accelerate sees the other ranks only with use_cpu (without it
        # HF counts a world of 1 and DeepSpeed's batch-size check fails); HF's bf16 on CPU
        # needs it too.
        use_cpu=int(os.environ.get("WORLD_SIZE", "1")) > 1 or a.bf16,
        disable_tqdm=True,
        bf16=a.bf16,
    )
    trainer = _LossRecorder(model=model, args=args, train_dataset=_TokenDataset())
    trainer.micro_losses = []
    # Under a multi-process launch only global rank 0 writes (its own micro-batches' losses).
    rank0 = int(os.environ.get("RANK", "0")) == 0
    trainer.add_callback(_StepLosses(trainer, a.losses_out if rank0 else None))
    resume = str(a.resume_from_checkpoint) if a.resume_from_checkpoint else None
    trainer.train(resume_from_checkpoint=resume)

    if a.weights_out is not None:
        # importlib: DeepSpeed ships no type information
        deepspeed: Any = importlib.import_module("deepspeed")
        safe_get_full_fp32_param = deepspeed.utils.safe_get_full_fp32_param
        engine: Any = trainer.model_wrapped
        full: dict[str, torch.Tensor] = {}
        for name, prm in engine.module.named_parameters():
            if prm.requires_grad:  # the optimizer's fp32 master
                full[name] = safe_get_full_fp32_param(prm).detach().cpu().clone()
            else:  # frozen: only the module holds it (partitioned under ZeRO-3)
                with deepspeed.zero.GatheredParameters([prm], enabled=hasattr(prm, "ds_id")):
                    full[name] = prm.detach().cpu().float().clone()
        if rank0:
            torch.save(full, a.weights_out)
    if torch.distributed.is_initialized():
        # An orderly teardown: leaving the process group to interpreter exit sometimes ends a
        # multi-rank ZeRO-3 run with "terminate called without an active exception" (SIGABRT).
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
