"""Choose the next memory move by what the failure says, not by list position (pure).

The fixed ladder halves the micro-batch first whatever failed. But an OOM message says how
big the failing allocation was and how much memory was free; when that allocation is one of
DeepSpeed's buffers (``you tried to allocate 200000000 bytes`` = a 5e7-element fp32 reduce
bucket), and the same size fails at every micro-batch, the buffer is the problem and no
micro-batch will fit. Seen with transformers' ``run_clm`` under a host limit; DeepSpeed's
users list ``reduce_bucket_size`` and ``stage3_max_live_parameters`` as OOM levers
(https://www.deepspeed.ai/docs/config-json/, "ZeRO optimizations").

On a default ladder (the job file did not spell its order out), :func:`choose_move`:

1. parses the OOM figures (:func:`parse_oom`);
2. takes ``ds_buckets`` first when the failing allocation is a configured buffer's size at
   two micro-batches, or any one size failed at three;
3. prefers moves that keep training exact over ``max_length`` and LoRA, which change what is
   learned;
4. with an estimator, skips moves predicted to save nothing, and takes the cheapest move
   (relative step time, :func:`dsguard.core.fit.relative_step_time`) predicted to save at
   least the shortfall (failing allocation minus free memory); else the one that saves most.

An explicit ``ladder:`` is walked as written (``core.ladder.walk``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dsguard.core.fit import LEARNING_RUNGS, relative_step_time
from dsguard.core.rungs import RUNGS, Move, RungContext, blocked
from dsguard.job.knobs import Knobs

_UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([\d.]+)\s*(B|KiB|MiB|GiB|TiB)"
#: torch's CUDA caching allocator, every version since 1.x ("Tried to allocate 20.00 MiB").
_TRIED = re.compile(r"Tried to allocate " + _SIZE)
#: torch's DefaultCPUAllocator ("you tried to allocate 200000000 bytes").
_TRIED_CPU = re.compile(r"you tried to allocate (\d+) bytes")
#: torch < 2.2: "(GPU 0; 15.78 GiB total capacity; 14.50 GiB already allocated; 10.19 MiB
#: free; 14.71 GiB reserved in total by PyTorch)".
_OLD = re.compile(
    _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE + r" free; "
    + _SIZE + r" reserved in total"
)  # fmt: skip
#: torch >= 2.2: "GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. ... Of
#: the allocated memory 75.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by
#: PyTorch but unallocated."
_NEW_TOTAL = re.compile(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_NEW_ALLOC = re.compile(r"allocated memory " + _SIZE + r" is allocated by PyTorch, and " + _SIZE)

#: Rungs whose memory effect the estimator does not model (host-side DataLoader memory):
#: kept in ladder order, before modelled moves, on the host-OOM ladder.
UNMODELLED_RUNGS = frozenset({"dataloader_workers", "pin_memory"})

#: Two allocation sizes within this fraction are "the same allocation".
SAME_SIZE = 0.02
#: Micro-batches at which the same allocation must have failed before the batch is ruled
#: out (the run_clm case: 200000000 bytes at 8, at 4 and at 2). Two is not enough: a scripted
#: or coincidental repeat at one halving would send the ladder off the micro-batch too early.
SAME_SIZE_REPEATS = 3


def _bytes(value: str, unit: str) -> int:
    return int(float(value) * _UNIT[unit])


@dataclass(frozen=True, slots=True)
class OomFigures:
    """The numbers an OOM message carries (each None when it does not say)."""

    tried_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None


def parse_oom(lines: Iterable[str]) -> OomFigures | None:
    """The figures of the first OOM message among ``lines``, or None when none has any."""
    for line in lines:
        tried = total = free = allocated = reserved = None
        if m := _TRIED.search(line):
            tried = _bytes(*m.groups())
        elif m := _TRIED_CPU.search(line):
            tried = int(m.group(1))
        if m := _OLD.search(line):
            g = m.groups()
            total, allocated = _bytes(g[0], g[1]), _bytes(g[2], g[3])
            free, reserved = _bytes(g[4], g[5]), _bytes(g[6], g[7])
        if m := _NEW_TOTAL.search(line):
            total, free = _bytes(*m.groups()[:2]), _bytes(*m.groups()[2:])
        if m := _NEW_ALLOC.search(line):
            allocated = _bytes(*m.groups()[:2])
            reserved = allocated + _bytes(*m.groups()[2:])
        if tried is not None or total is not None:
            return OomFigures(tried, total, free, allocated, reserved)
    return None


@dataclass(frozen=True, slots=True)
class MoveEvidence:
    """What the loop knows about the failed attempt besides its kind and knobs."""

    figures: OomFigures | None = None
    #: (micro-batch, failing allocation bytes) of this run's earlier memory failures.
    earlier: tuple[tuple[int, int], ...] = ()
    #: Bytes of each DeepSpeed buffer at the failed attempt's knobs (bucket elements times
    #: the element size; 2- and 4-byte elements are both checked by the caller's list).
    bucket_bytes: tuple[int, ...] = ()
    #: Predicted peak bytes of a config (the calibrated estimator), or None: no model shape.
    predict: Callable[[Knobs], int] | None = None
    device: str = "gpu"
    #: (micro-batch, bucket divisor, failing allocation bytes) of this run's earlier memory
    #: failures: whether bucket halvings changed the failing allocation (:func:`buckets_futile`).
    halvings: tuple[tuple[int, int, int], ...] = ()


def _same(a: int, b: int) -> bool:
    return abs(a - b) <= SAME_SIZE * max(a, b)


def buffer_bound(knobs: Knobs, ev: MoveEvidence) -> str | None:
    """Why the failing allocation looks like a buffer, not activations (or None).

    A bucket-sized allocation that failed at two micro-batches (the run_clm case), or any
    allocation that failed at three. A bucket-sized allocation seen once proves little (the
    bucket may just have been the last allocation before activations filled memory): the
    prediction-based choice weighs it instead (the move must save the failing allocation).
    """
    tried = ev.figures.tried_bytes if ev.figures is not None else None
    if tried is None:
        return None
    micros = sorted(
        {m for m, size in ev.earlier if m != knobs.micro_batch_size and _same(tried, size)},
        reverse=True,
    )
    at = ", ".join(str(m) for m in (*micros, knobs.micro_batch_size))
    bucket = any(size > 0 and _same(tried, size) for size in ev.bucket_bytes)
    if bucket and micros:
        return (
            f"the failing allocation ({tried} bytes) is a DeepSpeed buffer's size, at "
            f"micro-batches {at}"
        )
    if len(micros) >= SAME_SIZE_REPEATS - 1 and knobs.ds_bucket_divisor == 1:
        # Once the buckets were shrunk (divisor > 1) and the same size still fails without
        # being a bucket's size, it scales with neither the batch nor the buffers: shrinking
        # the buffers again cannot free it (a live run halved them 6 times at micro 1).
        return (
            f"the same {tried}-byte allocation failed at micro-batches {at}: it does not "
            "scale with the batch"
        )
    return None


def buckets_futile(knobs: Knobs, ev: MoveEvidence) -> str | None:
    """Why halving the buckets again cannot help (or None): the failing allocation is not a
    buffer's size now, and an earlier failure at this micro-batch with larger buckets failed
    on the same size, so the halvings since did not change it.

    Without this the chooser kept halving when ``ds_buckets`` was the only useful rung left
    and the failing size alternated between two values that are no bucket's (live P5 L1:
    33554432 and 30607488 bytes, buckets halved down to /64 over 6 attempts): the size never
    repeated back to back, so the stop for a repeated size (:func:`buffer_bound`) never
    fired. Now the third failure at one micro-batch ends it."""
    tried = ev.figures.tried_bytes if ev.figures is not None else None
    div = knobs.ds_bucket_divisor
    if tried is None or div == 1:
        return None
    if any(size > 0 and _same(tried, size) for size in ev.bucket_bytes):
        return None  # the buffer itself failed: smaller buffers do change it
    before = sorted(
        d for m, d, size in ev.halvings
        if m == knobs.micro_batch_size and d < div and _same(tried, size)
    )  # fmt: skip
    if not before:
        return None
    return (
        f"the failing allocation ({tried} bytes) is no DeepSpeed buffer's size and failed "
        f"already with buckets /{before[0]} at micro-batch {knobs.micro_batch_size}: "
        f"halving the buckets (now /{div}) did not change it"
    )


@dataclass(frozen=True, slots=True)
class Choice:
    index: int
    move: Move
    why: str
    #: Rungs that could move but were passed over, with the reason.
    skipped: tuple[str, ...] = ()


def choose_move(
    rungs: Sequence[str], knobs: Knobs, ctx: RungContext, ev: MoveEvidence
) -> Choice | None:
    """The next move on a default ladder (see the module docstring); None: exhausted. A move
    that would change a knob fixed by ``limits.fixed`` or with no route to the script is
    never chosen, as on an explicit ladder (``core.ladder.walk``): it would be logged as made
    and the next attempt would run the same config (before, a bucket-bound failure took
    ``ds_buckets`` even where ``limits.fixed`` held the buckets or they had no route)."""
    moves = [
        (i, name, m)
        for i, name in enumerate(rungs)
        if (m := RUNGS[name](knobs, ctx)) and not blocked(knobs, m.knobs, ctx)
    ]
    if not moves:
        return None
    skipped: list[str] = []
    futile = buckets_futile(knobs, ev)
    if futile is not None:
        skipped.append(f"ds_buckets: {futile}")
        moves = [x for x in moves if x[1] != "ds_buckets"]
        if not moves:
            return None
    bound = buffer_bound(knobs, ev)
    if bound is not None:
        for i, name, m in moves:
            if name == "ds_buckets":
                return Choice(i, m, bound, ())
        skipped.append(f"micro_batch: {bound}")
        moves = [x for x in moves if x[1] != "micro_batch"] or moves
    for i, name, m in moves:
        if name in UNMODELLED_RUNGS:
            return Choice(i, m, "host-side memory first (ladder order)", tuple(skipped))
    if ev.predict is not None:
        predict = ev.predict
        now = predict(knobs)
        saving = {name: now - predict(m.knobs) for _, name, m in moves}
        useful = [x for x in moves if saving[x[1]] > 0]
        skipped += [f"{x[1]}: predicted to save nothing" for x in moves if x not in useful]
        if useful:
            return _by_prediction(_exact_first(useful, skipped), saving, knobs, ev, skipped)
    i, name, m = _exact_first(moves, skipped)[0]
    why = "ladder order" + ("" if ev.predict else " (no model shape to predict with)")
    return Choice(i, m, why, tuple(skipped))


def _exact_first(
    moves: list[tuple[int, str, Move]], skipped: list[str]
) -> list[tuple[int, str, Move]]:
    """Moves that keep training exact, when there are any; the others noted as skipped."""
    exact = [x for x in moves if x[1] not in LEARNING_RUNGS]
    if not exact:
        return moves
    skipped += [f"{x[1]}: changes what is learned" for x in moves if x not in exact]
    return exact


def _by_prediction(
    moves: list[tuple[int, str, Move]],
    saving: dict[str, int],
    knobs: Knobs,
    ev: MoveEvidence,
    skipped: list[str],
) -> Choice:
    """The cheapest move predicted to save the shortfall, else the one that saves most."""
    fig = ev.figures
    need = 0
    if fig is not None and fig.tried_bytes is not None:
        need = fig.tried_bytes - (fig.free_bytes or 0)
    enough = [x for x in moves if saving[x[1]] >= need]
    if enough:
        i, name, m = min(
            enough, key=lambda x: (relative_step_time(knobs, x[2].knobs, ev.device), x[0])
        )
        why = f"cheapest move predicted to save >= {need} bytes (saves {saving[name]})"
        return Choice(i, m, why, tuple(skipped))
    i, name, m = max(moves, key=lambda x: (saving[x[1]], -x[0]))
    return Choice(i, m, f"largest predicted saving ({saving[name]} bytes)", tuple(skipped))
