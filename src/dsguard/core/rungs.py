"""The ladder's rungs: pure functions ``Knobs -> Move | None``.

Each rung makes one kind of memory-saving change. ``None`` means the rung has nothing left to
give (at its floor, already applied, or inapplicable to this job), and the ladder moves on to
the next rung. No rung may change the global batch (micro x accumulation x world): the one
rung that touches the micro-batch compensates with accumulation exactly, and refuses when no
exact split exists above the floor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dsguard.job.knobs import MAX_BUCKET_DIVISOR, Knobs, Offload
from dsguard.job.model import ALL_RUNGS


@dataclass(frozen=True, slots=True)
class RungContext:
    """What a rung may consult besides the knobs (all from the job, fixed for the run)."""

    min_micro_batch_size: int
    min_max_length: int
    #: knob -> flag; a knob whose flag is None cannot reach the script, so its rung is inert.
    flags: Mapping[str, str | None]
    has_deepspeed: bool
    #: False when dsguard cannot redirect the script's output dir; moves that start a new
    #: phase are then refused rather than letting the new phase overwrite the old checkpoints.
    can_start_phase: bool
    #: The training process announced it can resume a checkpoint saved under another ZeRO
    #: stage exactly (fp32 weights, Adam moments and step transplanted into the new engine),
    #: so a stage change between ZeRO 1/2 and 3 is a plain resume, not a new phase.
    exact_zero_transfer: bool = False
    #: Knobs that reach the script by some route (flag, config-file key, dotlist, env, the
    #: DeepSpeed config; ``job.delivery.routes``). None = judge by ``flags`` alone (tests and
    #: older callers). A move that changes a knob outside this set is never made.
    delivered: frozenset[str] | None = None
    #: Knobs no move may change (``limits.fixed``).
    fixed: frozenset[str] = frozenset()
    #: The data is packed into ``max_length`` chunks (None: unknown): a max_length move then
    #: changes the dataset, so it is a new phase, not a resume.
    packing: bool | None = None
    #: The training runs on the CPU (a torch build without CUDA or ROCm): nothing is pinned
    #: for a GPU copy, so the pin_memory rung cannot free anything and is skipped.
    cpu_only: bool = False


def blocked(old: Knobs, new: Knobs, ctx: RungContext) -> tuple[str, ...]:
    """The knobs a move from ``old`` to ``new`` would change that it must not: fixed by
    ``limits.fixed``, or with no route to the script (the change would be logged and never
    happen)."""
    return tuple(
        k
        for k in old.diff(new)
        if k in ctx.fixed or (ctx.delivered is not None and k not in ctx.delivered)
    )


@dataclass(frozen=True, slots=True)
class Move:
    knobs: Knobs
    #: The move cannot resume the previous checkpoint exactly (ZeRO stage change, LoRA):
    #: the run continues as a logged new phase in a fresh output dir.
    new_phase: bool = False
    #: Human-readable consequences the user must know about (e.g. truncated sequences).
    caveats: tuple[str, ...] = ()


Rung = Callable[[Knobs, RungContext], Move | None]


def _flag_ok(ctx: RungContext, *knobs: str) -> bool:
    if ctx.delivered is not None:
        return all(k in ctx.delivered for k in knobs)
    return all(ctx.flags.get(k) is not None for k in knobs)


def micro_batch(k: Knobs, ctx: RungContext) -> Move | None:
    """Halve the micro-batch; multiply accumulation so micro x accum stays exactly equal.

    When halving does not divide the per-rank step batch (micro x accum), take the largest
    divisor below the half instead (micro 6, accum 1 -> 3 x 2; micro 5, accum 1 -> 1 x 5).
    A split that would change the global batch is never made.
    """
    if not _flag_ok(ctx, "micro_batch_size", "gradient_accumulation_steps"):
        return None
    per_rank = k.micro_batch_size * k.gradient_accumulation_steps
    upper = k.micro_batch_size // 2
    for micro in range(upper, ctx.min_micro_batch_size - 1, -1):
        if micro >= 1 and per_rank % micro == 0:
            return Move(
                k.replace(micro_batch_size=micro, gradient_accumulation_steps=per_rank // micro)
            )
    return None


def gradient_checkpointing(k: Knobs, ctx: RungContext) -> Move | None:
    """Recompute activations in backward: ~30% slower, exact resume, same data."""
    if k.gradient_checkpointing or not _flag_ok(ctx, "gradient_checkpointing"):
        return None
    return Move(k.replace(gradient_checkpointing=True))


def max_length(k: Knobs, ctx: RungContext) -> Move | None:
    """Halve the maximum sequence length down to the floor.

    Resumes at the same data position only with per-example truncation (no packing), and the
    model then sees less text per example: that is a change of training data, so the move
    carries a caveat the user will read in the event log.
    """
    if k.max_length is None or not _flag_ok(ctx, "max_length"):
        return None
    if k.max_length <= ctx.min_max_length:
        return None
    new = max(ctx.min_max_length, k.max_length // 2)
    if ctx.packing:
        # Packed data: the chunks themselves change (run_clm regroups the corpus into
        # block_size chunks), so the checkpoint's data position points into another dataset:
        # resuming would train some text twice and skip other text. Only a new phase is honest.
        if not ctx.can_start_phase:
            return None
        return Move(
            k.replace(max_length=new),
            new_phase=True,
            caveats=(
                f"packed data: max_length {k.max_length} -> {new} regroups the dataset into "
                f"{new}-token chunks; the data position cannot be resumed, so this is a new "
                "phase, and each optimizer step now holds half the tokens",
            ),
        )
    return Move(
        k.replace(max_length=new),
        caveats=(
            f"examples longer than {new} tokens are now truncated (was {k.max_length}); "
            "the data position is kept only if the script truncates per example (no packing)",
        ),
    )


def _stage_change(old: int, new: int, knobs: Knobs, ctx: RungContext) -> Move | None:
    """A move that changes the ZeRO stage: exact when the training process can transplant
    the optimizer state (stages 1-3), otherwise a new phase (a plain DeepSpeed resume dies
    with a bare AssertionError when the saved stage differs) or refused."""
    if ctx.exact_zero_transfer and old >= 1:
        return Move(
            knobs,
            caveats=(
                f"ZeRO-{old} -> ZeRO-{new}: the training process transplants the checkpoint's "
                "fp32 weights, Adam moments and step into the new engine (exact resume)",
            ),
        )
    if not ctx.can_start_phase:
        return None
    return Move(
        knobs,
        new_phase=True,
        caveats=(f"ZeRO-{old} checkpoints cannot be resumed under ZeRO-{new}",),
    )


def zero3(k: Knobs, ctx: RungContext) -> Move | None:
    """Shard parameters too (ZeRO-3)."""
    if not ctx.has_deepspeed or k.zero_stage is None or k.zero_stage >= 3:
        return None
    return _stage_change(k.zero_stage, 3, k.replace(zero_stage=3), ctx)


def offload_optimizer(k: Knobs, ctx: RungContext) -> Move | None:
    """Offload optimizer state to host memory; exact resume at the same ZeRO stage.

    Offload needs ZeRO >= 1; from stage 0 the move also switches to ZeRO-2, which changes the
    checkpoint format and therefore starts a new phase.
    """
    if not ctx.has_deepspeed or k.zero_stage is None or k.offload is not Offload.NONE:
        return None
    if k.zero_stage == 0:
        move = _stage_change(0, 2, k.replace(zero_stage=2, offload=Offload.OPTIMIZER), ctx)
        if move is None:
            return None
        return Move(
            move.knobs,
            new_phase=move.new_phase,
            caveats=("offload needs ZeRO >= 1: switched ZeRO-0 -> ZeRO-2", *move.caveats),
        )
    return Move(k.replace(offload=Offload.OPTIMIZER))


def offload_params(k: Knobs, ctx: RungContext) -> Move | None:
    """Offload parameters as well (needs ZeRO-3; from a lower stage this is a new phase)."""
    if not ctx.has_deepspeed or k.zero_stage is None or k.offload is Offload.ALL:
        return None
    if k.zero_stage < 3:
        move = _stage_change(k.zero_stage, 3, k.replace(zero_stage=3, offload=Offload.ALL), ctx)
        if move is None:
            return None
        return Move(
            move.knobs,
            new_phase=move.new_phase,
            caveats=(f"parameter offload needs ZeRO-3 (was ZeRO-{k.zero_stage})", *move.caveats),
        )
    return Move(k.replace(offload=Offload.ALL))


def lora(k: Knobs, ctx: RungContext) -> Move | None:
    """Train low-rank adapters instead of all weights: a different model, always a new phase."""
    if k.lora or not _flag_ok(ctx, "lora") or not ctx.can_start_phase:
        return None
    return Move(
        k.replace(lora=True),
        new_phase=True,
        caveats=("full fine-tuning replaced by LoRA adapters: a different set of trained weights",),
    )


def dataloader_workers(k: Knobs, ctx: RungContext) -> Move | None:
    """Halve DataLoader worker processes (each holds a copy of the dataset in host RAM)."""
    if k.dataloader_workers <= 0 or not _flag_ok(ctx, "dataloader_workers"):
        return None
    return Move(k.replace(dataloader_workers=k.dataloader_workers // 2))


def pin_memory(k: Knobs, ctx: RungContext) -> Move | None:
    """Stop pinning host batches (page-locked memory cannot be swapped or reclaimed)."""
    if not k.pin_memory or ctx.cpu_only or not _flag_ok(ctx, "pin_memory"):
        return None
    return Move(k.replace(pin_memory=False))


def ds_buckets(k: Knobs, ctx: RungContext) -> Move | None:
    """Halve DeepSpeed's buffers: the reduce and allgather buckets (ZeRO-1/2), the ZeRO-3
    prefetch bucket and live-parameter cap (rendered by ``core.render``).

    Exact: the buckets change when gradients are reduced and parameters gathered, not what
    is computed. Worth it when the failing allocation is a bucket (``tried to allocate
    200000000 bytes`` = a 5e7-element fp32 bucket, at every micro-batch): smaller batches
    cannot fix that. The floor is :data:`MAX_BUCKET_DIVISOR` (more, smaller collectives).
    """
    if not ctx.has_deepspeed or k.zero_stage is None:
        return None
    if k.ds_bucket_divisor * 2 > MAX_BUCKET_DIVISOR:
        return None
    return Move(k.replace(ds_bucket_divisor=k.ds_bucket_divisor * 2))


_FUNCTIONS: dict[str, Rung] = {
    fn.__name__: fn
    for fn in (
        micro_batch, gradient_checkpointing, max_length, zero3, offload_optimizer,
        offload_params, lora, dataloader_workers, pin_memory, ds_buckets,
    )
}  # fmt: skip
#: Rung name -> rung, keyed by the one list of names (``job.model.RungName``): a name with no
#: function of that name raises KeyError at import instead of at the first OOM.
RUNGS: dict[str, Rung] = {name: _FUNCTIONS[name] for name in ALL_RUNGS}


# -- why a rung is skipped (issue 12) ----------------------------------------------------------
# A rung that cannot change anything for this job is skipped, not spent on an attempt; the
# event log says why, so "dsguard did not lower the workers" is never a mystery.


def _flagless(ctx: RungContext, *knobs: str) -> str | None:
    missing = [k for k in knobs if ctx.flags.get(k) is None]
    return f"no flag passes {', '.join(missing)} to the script" if missing else None


def inert_reason(name: str, k: Knobs, ctx: RungContext) -> str:
    """Why rung ``name`` has nothing to give at ``k`` (call only when it returned None)."""
    reasons: dict[str, str | None] = {
        "pin_memory": (
            "pin_memory is already false" if not k.pin_memory
            else "a CPU-only run pins no memory" if ctx.cpu_only
            else _flagless(ctx, "pin_memory")
        ),
        "dataloader_workers": (
            "dataloader_workers is already 0" if k.dataloader_workers <= 0
            else _flagless(ctx, "dataloader_workers")
        ),
        "gradient_checkpointing": (
            "gradient_checkpointing is already on" if k.gradient_checkpointing
            else _flagless(ctx, "gradient_checkpointing")
        ),
        "micro_batch": _flagless(ctx, "micro_batch_size", "gradient_accumulation_steps")
        or (
            f"no exact split of micro {k.micro_batch_size} x accum "
            f"{k.gradient_accumulation_steps} at or above min_micro_batch_size "
            f"{ctx.min_micro_batch_size}"
        ),
        "max_length": (
            "max_length is not set" if k.max_length is None
            else _flagless(ctx, "max_length")
            or f"max_length {k.max_length} is at its floor {ctx.min_max_length}"
        ),
        "lora": (
            "LoRA is already on" if k.lora
            else _flagless(ctx, "lora") or "a new phase needs the script's output dir flag"
        ),
    }  # fmt: skip
    found = reasons.get(name)
    if found is not None:
        return found
    if not ctx.has_deepspeed or k.zero_stage is None:
        return "the job does not use DeepSpeed ZeRO"
    return f"nothing left to change at ZeRO-{k.zero_stage}, offload {k.offload}"
