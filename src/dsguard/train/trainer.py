"""The reference trainer: causal-LM fine-tuning on the real HF ``Trainer``.

Why it exists: dsguard's promises (a micro-batch/accumulation move keeps the sample order and
the loss curve; a lowered ``max_length`` keeps the data position; a stop request leaves a
complete checkpoint; a new phase starts from consolidated weights) must hold for real
training, and tests need a script that exercises exactly the HF / DeepSpeed / PEFT code
paths users run. It also is a known-good example of a dsguard-friendly script:

* every knob dsguard owns is a standard HF flag (``--per_device_train_batch_size``,
  ``--gradient_accumulation_steps``, ``--gradient_checkpointing``, ``--deepspeed``,
  ``--resume_from_checkpoint``, ...) plus ``--model_max_length`` and ``--lora_enable``;
* no downloads: a byte-level tokenizer, models from a local path or built from a config with
  seeded random init (``--model_preset tiny|small`` or ``--model_config file.json``), data
  from a local file or generated deterministically (``--generate_data N``);
* one text = one sample, truncated on its own, never packed (see :mod:`dsguard.train.data`);
* :class:`~dsguard.integrations.hf.DsguardCallback` always installed (heartbeats,
  save-and-stop, GPU memory cap); ``DSGUARD_INIT_FROM`` weights loaded before any LoRA wrap;
  the ZeRO-stage transplant enabled for DeepSpeed runs.

Test hooks (documented as such, harmless when unset):

* ``DSGUARD_SAMPLE_TRACE=path``: one JSON line per optimizer step with the sample ids it
  consumed (``{"global_step", "sample_ids", "loss", "micro", "accum", "rank"}``); with more
  than one rank each writes ``path.rank{R}``. Implementation: the collator carries a
  ``sample_id`` column, :class:`ReferenceTrainer` keeps it past ``remove_unused_columns``,
  pops it in ``compute_loss`` (so the model forward never sees it; works with any number of
  dataloader workers) and a callback writes the step's record in ``on_step_end``. ``loss`` is
  this rank's sum of ``training_step`` results over the step's micro-batches, i.e. exactly
  what HF logs as ``loss`` with ``--logging_steps 1`` on one rank.
* ``DSGUARD_FAULT``: injected failures with real messages (see :mod:`dsguard.train.faults`).

``DSGUARD_SKIP_BATCHES`` (set by dsguard after a divergence rollback, see ``protocol``): the
optimizer steps in those ranges train on nothing (no forward, no backward, the parameters and
optimizer moments untouched; under DeepSpeed a zero loss, whose backward the engine needs).
The steps still count, so the data position, the LR schedule and the checkpoint numbering go
on as planned; the trainer announces ``skip_batches``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import transformers
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    HfArgumentParser,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from dsguard import protocol
from dsguard.integrations.hf import DsguardCallback
from dsguard.train.data import (
    GENERATED_DATA_FILE,
    CausalLMCollator,
    TextDataset,
    generate_texts,
    load_texts,
    write_jsonl_atomic,
)
from dsguard.train.faults import FAULT_ENV, Fault, fire, parse_faults
from dsguard.train.tokenizer import ByteTokenizer

logger = logging.getLogger("dsguard.train")

SAMPLE_TRACE_ENV = "DSGUARD_SAMPLE_TRACE"

#: LLaMA-style shapes for ``--model_preset``; vocab and special ids come from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    # ~0.14 M parameters: seconds per step on one CPU core, for tests.
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
    },
    # ~3.3 M parameters: still CPU-friendly, with activations large enough for memory demos.
    "small": {
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
    },
}

#: Leaf-module names of attention projections across common architectures, in the order
#: they are looked for: LLaMA/Mistral/Qwen/OPT, BERT-like, GPT-2, GPT-NeoX/Falcon, MPT/Phi.
_ATTENTION_PROJECTIONS: tuple[tuple[str, ...], ...] = (
    ("q_proj", "k_proj", "v_proj", "o_proj"),
    ("query", "key", "value"),
    ("c_attn",),
    ("query_key_value",),
    ("Wqkv", "out_proj"),
    ("qkv_proj", "o_proj"),
)


# ---------------------------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------------------------


@dataclass
class ModelArguments:
    """Where the model comes from: a local checkpoint, or a config with seeded random init."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Local directory with config.json + weights (never downloaded)."},
    )
    model_config: str | None = field(
        default=None,
        metadata={"help": "JSON model config (model_type defaults to llama); random init."},
    )
    model_preset: str | None = field(
        default=None,
        metadata={"help": "Built-in LLaMA-style config, random init.", "choices": list(PRESETS)},
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={"help": "eager | sdpa | ... (default: transformers' choice)."},
    )


@dataclass
class DataArguments:
    """Training text and its per-example truncation."""

    data_path: str | None = field(
        default=None,
        metadata={"help": "Local .jsonl (a 'text' field per line) or text file (a line each)."},
    )
    generate_data: int = field(
        default=0,
        metadata={"help": "Without --data_path: synthesise N deterministic examples."},
    )
    generate_max_chars: int = field(
        default=512, metadata={"help": "Longest generated example, in characters."}
    )
    generate_seed: int = field(default=1234, metadata={"help": "Seed of the generated text."})
    model_max_length: int = field(
        default=512,
        metadata={"help": "Per-example truncation in tokens; never packs, so it may change."},
    )


@dataclass
class LoraArguments:
    """PEFT LoRA on the attention projections (or the modules you name)."""

    lora_enable: bool = field(default=False, metadata={"help": "Train LoRA adapters only."})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: str | None = field(
        default=None,
        metadata={"help": "Comma-separated module names (default: the q/k/v/o projections)."},
    )


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------


def _config_from(margs: ModelArguments, tokenizer: ByteTokenizer) -> Any:
    if margs.model_config:
        raw = json.loads(Path(margs.model_config).read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"{margs.model_config}: expected a JSON object")
        model_type = str(raw.pop("model_type", "llama"))
    else:
        assert margs.model_preset is not None
        raw, model_type = dict(PRESETS[margs.model_preset]), "llama"
    raw.setdefault("vocab_size", tokenizer.vocab_size)
    if int(raw["vocab_size"]) < tokenizer.vocab_size:
        raise ValueError(
            f"vocab_size {raw['vocab_size']} < the byte tokenizer's {tokenizer.vocab_size}"
        )
    raw.update(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_cache=False,
    )
    return AutoConfig.for_model(model_type, **raw)


def build_model(margs: ModelArguments, tokenizer: ByteTokenizer, seed: int) -> PreTrainedModel:
    """A local pretrained model, or a config with random init seeded by ``seed``.

    Seeding right before construction makes two runs (and every phase of one run) start
    from bit-identical weights, which the exactness tests and ``new phase`` rungs rely on.
    """
    sources = [margs.model_name_or_path, margs.model_config, margs.model_preset]
    if sum(s is not None for s in sources) != 1:
        raise ValueError("give exactly one of --model_name_or_path, --model_config, --model_preset")
    kwargs: dict[str, Any] = {}
    if margs.attn_implementation:
        kwargs["attn_implementation"] = margs.attn_implementation
    if margs.model_name_or_path:
        path = Path(margs.model_name_or_path)
        if not path.is_dir():
            raise ValueError(f"--model_name_or_path {path}: not a local directory (no downloads)")
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kwargs)
    else:
        config = _config_from(margs, tokenizer)
        transformers.set_seed(seed)
        model = AutoModelForCausalLM.from_config(config, **kwargs)  # type: ignore[no-untyped-call]
    model.config.use_cache = False  # no KV cache while training (and required with checkpointing)
    assert isinstance(model, PreTrainedModel)
    return model


def default_lora_targets(model: nn.Module) -> list[str]:
    """The model's attention projection names, found by inspecting its Linear leaves."""
    leaves = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }
    for group in _ATTENTION_PROJECTIONS:
        found = [n for n in group if n in leaves]
        if found:
            return found
    raise ValueError(
        f"no attention projections found among {sorted(leaves)}; pass --lora_target_modules"
    )


def apply_lora(model: PreTrainedModel, largs: LoraArguments, gradient_checkpointing: bool) -> Any:
    from peft import LoraConfig, TaskType, get_peft_model

    if largs.lora_target_modules:
        targets = [t.strip() for t in largs.lora_target_modules.split(",") if t.strip()]
    else:
        targets = default_lora_targets(model)
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=largs.lora_r,
        lora_alpha=largs.lora_alpha,
        lora_dropout=largs.lora_dropout,
        target_modules=targets,
    )
    if gradient_checkpointing:
        # Frozen embeddings produce no grad-requiring input, which reentrant checkpointing
        # needs to backpropagate into the adapters.
        model.enable_input_require_grads()  # type: ignore[no-untyped-call]
    peft_model = get_peft_model(model, config)
    logger.info("LoRA on %s (r=%d)", targets, largs.lora_r)
    return peft_model


# ---------------------------------------------------------------------------------------------
# trainer
# ---------------------------------------------------------------------------------------------


class ReferenceTrainer(Trainer):
    """HF ``Trainer`` plus the sample trace and fault injection (both off unless asked)."""

    def __init__(
        self,
        *args: Any,
        sample_trace: Path | None = None,
        faults: Sequence[Fault] = (),
        max_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sample_trace = sample_trace
        self.faults = tuple(faults)
        self.max_length = max_length
        self.attempt = int(os.environ.get(protocol.ATTEMPT_ENV, "0") or 0)
        #: Optimizer steps whose batches are skipped after a divergence rollback.
        self.skip_ranges = protocol.parse_skip_batches(
            os.environ.get(protocol.SKIP_BATCHES_ENV, "")
        )
        self._skip_said: set[int] = set()
        self._pending_ids: list[int] = []
        self._pending_loss = 0.0
        self.add_callback(_SampleTraceCallback(self))

    def _set_signature_columns_if_needed(self) -> None:
        # Keep ``sample_id`` past ``remove_unused_columns``; compute_loss pops it.
        super()._set_signature_columns_if_needed()
        if self._signature_columns is not None and "sample_id" not in self._signature_columns:
            self._signature_columns.append("sample_id")

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor | Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        sample_ids = inputs.pop("sample_id", None)
        if model.training:
            self._maybe_fail()
            if sample_ids is not None:
                self._pending_ids.extend(int(i) for i in sample_ids.tolist())
        out = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        factor = self._loss_factor() if model.training else None
        if factor is None:
            return out
        if isinstance(out, tuple):
            return (out[0] * factor, *out[1:])
        return out * factor

    def _loss_factor(self) -> float | None:
        """NaN for the ``nan`` fault (a diverged run), 0 for a step whose batches are skipped
        under DeepSpeed (its engine must see a backward; the gradients are then zero, though
        Adam's momentum still moves the weights a little); None: leave the loss alone."""
        step = int(self.state.global_step) + 1
        if self.is_deepspeed_enabled and protocol.skipped(step, self.skip_ranges):
            return 0.0
        for fault in self.faults:
            if fault.kind == "nan" and fault.due(
                step=step, micro=int(self.args.per_device_train_batch_size),
                max_length=self.max_length, rank=int(self.args.process_index),
                attempt=self.attempt,
            ):  # fmt: skip
                return float("nan")
        return None

    def training_step(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor | Any],
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        step = int(self.state.global_step) + 1
        if protocol.skipped(step, self.skip_ranges):
            if step not in self._skip_said:
                self._skip_said.add(step)
                logger.warning("dsguard: skipping the batches of step %d (%s)", step,
                               protocol.SKIP_BATCHES_ENV)  # fmt: skip
            if not self.is_deepspeed_enabled:
                # No forward, no backward: every gradient stays None, and torch's optimizers
                # leave a parameter without a gradient untouched (moments included).
                inputs.pop("sample_id", None)
                return torch.zeros((), device=self.args.device)
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.sample_trace is not None:
            self._pending_loss += float(loss.item())
        return loss

    def _maybe_fail(self) -> None:
        """At the start of optimizer step ``global_step + 1``: after the last checkpoint."""
        if not self.faults:
            return
        step = int(self.state.global_step) + 1
        for fault in self.faults:
            if fault.kind != "nan" and fault.due(
                step=step,
                micro=int(self.args.per_device_train_batch_size),
                max_length=self.max_length,
                rank=int(self.args.process_index),
                attempt=self.attempt,
            ):
                logger.warning("%s: injecting %s at step %d", FAULT_ENV, fault, step)
                sys.stderr.flush()
                fire(fault)

    def flush_trace(self, global_step: int) -> None:
        ids, loss = self._pending_ids, self._pending_loss
        self._pending_ids, self._pending_loss = [], 0.0
        if self.sample_trace is None:
            return
        record = {
            "global_step": global_step,
            "sample_ids": ids,
            "loss": loss,
            "micro": int(self.args.per_device_train_batch_size),
            "accum": int(self.args.gradient_accumulation_steps),
            "rank": int(self.args.process_index),
        }
        with self.sample_trace.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def reset_trace(self) -> None:
        self._pending_ids, self._pending_loss = [], 0.0


class _SampleTraceCallback(TrainerCallback):
    """Writes the step's trace record once the optimizer step is done."""

    def __init__(self, trainer: ReferenceTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.trainer.reset_trace()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.trainer.flush_trace(int(state.global_step))


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _single_process_dist_env(argv: Sequence[str]) -> None:
    """``python -m dsguard.train --deepspeed cfg`` without a launcher: DeepSpeed still needs
    a process group, and without RANK/WORLD_SIZE it falls back to MPI discovery (which fails
    without mpi4py). Provide a one-rank rendezvous on a free local port."""
    if not any(a == "--deepspeed" or a.startswith("--deepspeed=") for a in argv):
        return
    if "WORLD_SIZE" in os.environ or "RANK" in os.environ:
        return
    os.environ.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )


def _fix_cpu_deepspeed_world(targs: TrainingArguments) -> None:
    """Multi-rank DeepSpeed without CUDA: make accelerate's state agree with the process group.

    accelerate's backend detection knows no CPU backend for DeepSpeed, so on a CPU-only host
    ``PartialState`` records one process even though DeepSpeed has initialised a gloo group
    of WORLD_SIZE ranks; HF then computes ``train_batch_size`` for one rank and DeepSpeed's
    batch assertion fails. Copy the real world into the shared state (no-op elsewhere).
    """
    import torch.distributed as dist
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if not targs.deepspeed or torch.cuda.is_available():
        return
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return
    shared = PartialState._shared_state
    if shared.get("distributed_type") != DistributedType.DEEPSPEED:
        return
    if shared.get("num_processes") == dist.get_world_size():
        return
    shared["num_processes"] = dist.get_world_size()
    shared["process_index"] = dist.get_rank()
    shared["local_process_index"] = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    shared["backend"] = str(dist.get_backend())
    # TrainingArguments filled the DeepSpeed config's "auto" batch keys for one rank in
    # __post_init__; redo it for the real world size (as Trainer does for HP sweeps).
    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    targs.hf_deepspeed_config = HfTrainerDeepSpeedConfig(targs.deepspeed)  # type: ignore[no-untyped-call]
    targs.hf_deepspeed_config.trainer_config_process(targs)  # type: ignore[no-untyped-call]
    targs.deepspeed_plugin = DeepSpeedPlugin(hf_ds_config=targs.hf_deepspeed_config)


def _resume_arg(value: str | None) -> str | bool | None:
    if value is None or value == "":
        return None
    if value.lower() in ("true", "yes", "1"):
        return True  # the newest checkpoint-N in output_dir (no completeness check!)
    if value.lower() in ("false", "no", "0"):
        return None
    return value


def _zero_available() -> bool:
    """Whether the transplant / init-from code ships with this install (announced only then)."""
    return importlib.util.find_spec("dsguard.integrations.zero") is not None


def _zero_module() -> Any:
    """``dsguard.integrations.zero`` (imported lazily: it pulls in DeepSpeed), or None."""
    try:
        from dsguard.integrations import zero
    except ImportError as exc:
        logger.warning("dsguard.integrations.zero unavailable (%s)", exc)
        return None
    return zero


@contextlib.contextmanager
def _without_zero3_init() -> Iterator[None]:
    """Build the model as a plain module even when the DeepSpeed config is ZeRO-3.

    Under ZeRO-3 transformers constructs models inside ``deepspeed.zero.Init`` (partitioned
    at birth), which draws random init differently: a preset would start from other weights
    than under ZeRO 0-2, and ``DSGUARD_INIT_FROM`` could not load full weights into it.
    DeepSpeed partitions the plain model at ``initialize`` instead. The price is one full
    copy of the model per rank in host memory, fine for what random-init or re-initialised
    models are used for here (tests, demos, new phases of modest models).
    """
    from transformers.integrations import deepspeed as hf_ds

    if not hf_ds.is_deepspeed_zero3_enabled():  # type: ignore[no-untyped-call]
        yield
        return
    ref = hf_ds._hf_deepspeed_config_weak_ref
    config_obj = ref() if ref is not None else None
    hf_ds.unset_hf_deepspeed_config()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if config_obj is not None:
            hf_ds.set_hf_deepspeed_config(config_obj)


def load_texts_for(dargs: DataArguments, output_dir: Path, is_main: bool) -> list[str]:
    if dargs.data_path:
        return load_texts(Path(dargs.data_path))
    if dargs.generate_data > 0:
        texts = generate_texts(
            dargs.generate_data, max_chars=dargs.generate_max_chars, seed=dargs.generate_seed
        )
        if is_main:  # for the record; every rank regenerates the same texts in memory
            write_jsonl_atomic(output_dir / GENERATED_DATA_FILE, texts)
        return texts
    raise ValueError("give --data_path or --generate_data N")


def main(argv: Sequence[str] | None = None) -> int:
    """Train; 0 when training finished or stopped on request (with a checkpoint).

    Failures propagate as the exceptions training raised (a traceback and exit status 1), which
    is what dsguard's classifier reads. The final model is written only when training reached
    ``max_steps``: after a save-and-stop the newest ``checkpoint-N`` is the state to resume.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    _single_process_dist_env(argv)
    parser = HfArgumentParser(
        cast(Any, (ModelArguments, DataArguments, LoraArguments, TrainingArguments))
    )
    margs, dargs, largs, targs = parser.parse_args_into_dataclasses(args=argv)
    assert isinstance(margs, ModelArguments)
    assert isinstance(dargs, DataArguments)
    assert isinstance(largs, LoraArguments)
    assert isinstance(targs, TrainingArguments)
    _fix_cpu_deepspeed_world(targs)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if targs.process_index == 0 else logging.WARNING,
    )
    started = time.monotonic()
    faults = parse_faults(os.environ.get(FAULT_ENV, ""))
    # First, so the GPU memory cap is in place before anything is allocated on the device.
    guard = DsguardCallback(
        reference_trainer=_zero_available(), extra_capabilities=[protocol.CAP_SKIP_BATCHES]
    )

    tokenizer = ByteTokenizer()
    output_dir = Path(targs.output_dir or "trainer_output")
    texts = load_texts_for(dargs, output_dir, targs.process_index == 0)
    init_from = os.environ.get(protocol.INIT_FROM_ENV, "").strip()
    plain = init_from or not margs.model_name_or_path
    with _without_zero3_init() if plain else contextlib.nullcontext():
        model = build_model(margs, tokenizer, targs.seed)
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and dargs.model_max_length > int(max_pos):
        raise ValueError(
            f"--model_max_length {dargs.model_max_length} > max_position_embeddings {max_pos}"
        )

    zero = _zero_module() if (init_from or targs.deepspeed) else None
    if init_from:
        if zero is None:
            raise RuntimeError(
                f"{protocol.INIT_FROM_ENV} is set but dsguard.integrations.zero cannot be imported"
            )
        logger.info("initialising weights from %s", init_from)
        zero.load_consolidated_weights(model, Path(init_from))  # before any LoRA wrap
    if zero is not None and targs.deepspeed:
        zero.enable_zero_transplant()

    train_model: Any = model
    if largs.lora_enable:
        # Adapters start identical whatever the base weights' source (preset, local model,
        # DSGUARD_INIT_FROM), so every phase of a run and every rerun agree.
        transformers.set_seed(targs.seed)
        train_model = apply_lora(model, largs, bool(targs.gradient_checkpointing))

    trace_env = os.environ.get(SAMPLE_TRACE_ENV, "").strip()
    sample_trace: Path | None = None
    if trace_env:
        sample_trace = Path(trace_env)
        if targs.world_size > 1:
            sample_trace = sample_trace.with_name(f"{sample_trace.name}.rank{targs.process_index}")
        sample_trace.parent.mkdir(parents=True, exist_ok=True)

    dataset = TextDataset(texts, tokenizer, dargs.model_max_length)
    trainer = ReferenceTrainer(
        model=train_model,
        args=targs,
        train_dataset=dataset,
        data_collator=CausalLMCollator(tokenizer.pad_token_id),
        callbacks=[guard],
        sample_trace=sample_trace,
        faults=faults,
        max_length=dargs.model_max_length,
    )
    result = trainer.train(resume_from_checkpoint=_resume_arg(targs.resume_from_checkpoint))
    state = trainer.state
    finished = not guard.stop_requested and state.global_step >= state.max_steps
    how = "finished" if finished else "stopped on request" if guard.stop_requested else "stopped"
    if finished:
        trainer.save_model()
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(output_dir)
    if trainer.is_world_process_zero():
        print(
            f"dsguard.train: {how} "
            f"global_step={state.global_step}/{state.max_steps} "
            f"train_loss={result.training_loss:.6f} "
            f"micro={targs.per_device_train_batch_size} "
            f"accum={targs.gradient_accumulation_steps} world={targs.world_size} "
            f"max_length={dargs.model_max_length} lora={largs.lora_enable} "
            f"deepspeed={bool(targs.deepspeed)} time_s={time.monotonic() - started:.1f} "
            f"output_dir={output_dir}",
            flush=True,
        )
    return 0
