"""The training knobs dsguard owns and changes between attempts (pure, no I/O).

The invariant the whole ladder protects is the *global batch*:
``micro_batch_size * gradient_accumulation_steps * world_size``. A move that changes it
silently changes the optimisation problem (step -> sample mapping, LR schedule, epochs), so
the policy layer refuses such moves or marks them as a logged new phase.

:class:`Knobs` is the one definition of the knobs: each field carries a :class:`KnobSpec`
(its job-file bounds, its HF Trainer flag, its console label), and every other list of knob
names (the job file's ``train:``/``flags:`` keys, the quick-start parser, launch's flag
mapping, ``dsguard plan``'s columns) is derived from it. Hand-written copies drifted apart:
a knob added in one place and not another is silently ignored by the job file or never
reaches the script.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal


class Offload(StrEnum):
    """DeepSpeed CPU offload level. ``all`` = optimizer + parameters (needs ZeRO-3)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    ALL = "all"


#: The job file's ``train.offload`` choices (derived: the enum is the one list).
OFFLOAD_NAMES: tuple[str, ...] = tuple(o.value for o in Offload)

KnobKind = Literal["int", "bool", "offload"]

#: Upper bounds of the ``int`` knobs. No real run comes near them; they exist because an
#: unbounded value is accepted today and fails far from the job file: ``micro_batch_size:
#: 1e30`` written as an integer becomes a global batch no DeepSpeed int field, C ``int``
#: flag parser or ``trainer_state.json`` patch can hold, and the run dies minutes later (or
#: dsguard crashes computing with it) instead of the job file naming the line.
#: Micro-batch and accumulation: 2**20 samples per rank per step (a million).
MAX_BATCH = 2**20
#: Sequence length: 2**24 tokens (16 M, far past any released context window).
MAX_LENGTH = 2**24
#: DataLoader worker processes per rank: each is a process; 1024 is already a fork bomb.
MAX_WORKERS = 1024
#: The ``ds_buckets`` rung's floor: buckets 64x smaller than configured. DeepSpeed's default
#: 5e8-element bucket becomes ~8 M elements; smaller ones only add communication calls.
MAX_BUCKET_DIVISOR = 64


@dataclass(frozen=True, slots=True)
class KnobSpec:
    """What the rest of dsguard needs to know about one knob besides its value."""

    #: How the job file and the quick-start parser check a value.
    kind: KnobKind
    #: Short column label for ``dsguard plan``.
    label: str
    #: Bounds of an ``int`` knob in the job file (inclusive).
    minimum: int | None = None
    maximum: int | None = None
    #: The HF Trainer flag (the job contract's default; ``flags:`` overrides it). ``None``:
    #: the knob reaches DeepSpeed through the rendered config instead (ZeRO stage, offload).
    flag: str | None = None
    #: Passed on every attempt, not only once set or changed: the global-batch invariant
    #: depends on the script seeing exactly dsguard's micro-batch and accumulation.
    always_passed: bool = False


def _knob(default: Any = dataclasses.MISSING, **spec: Any) -> Any:
    # Typed Any so `micro_batch_size: int = _knob(...)` type-checks, like dataclasses.field.
    return dataclasses.field(default=default, metadata={"knob": KnobSpec(**spec)})


@dataclass(frozen=True, slots=True)
class Knobs:
    """One attempt's knob values.

    ``max_length`` is ``None`` when the job does not tell dsguard the sequence length (the
    max_length rung is then inapplicable); ``zero_stage`` is ``None`` when the job has no
    DeepSpeed config (the ZeRO/offload rungs are then inapplicable). Field order is the order
    of events and tables.
    """

    micro_batch_size: int = _knob(
        kind="int", label="micro", minimum=1, maximum=MAX_BATCH,
        flag="--per_device_train_batch_size", always_passed=True,
    )  # fmt: skip
    gradient_accumulation_steps: int = _knob(
        1, kind="int", label="accum", minimum=1, maximum=MAX_BATCH,
        flag="--gradient_accumulation_steps", always_passed=True,
    )  # fmt: skip
    max_length: int | None = _knob(
        None, kind="int", label="max_len", minimum=1, maximum=MAX_LENGTH,
        flag="--model_max_length",
    )  # fmt: skip
    zero_stage: int | None = _knob(None, kind="int", label="zero", minimum=0, maximum=3)
    # A StrEnum member is immutable; ruff cannot tell from the annotation.
    offload: Offload = _knob(Offload.NONE, kind="offload", label="offload")  # noqa: RUF009
    lora: bool = _knob(False, kind="bool", label="lora", flag="--lora_enable")
    gradient_checkpointing: bool = _knob(
        False, kind="bool", label="gc", flag="--gradient_checkpointing"
    )
    dataloader_workers: int = _knob(
        0, kind="int", label="workers", minimum=0, maximum=MAX_WORKERS,
        flag="--dataloader_num_workers",
    )  # fmt: skip
    pin_memory: bool = _knob(True, kind="bool", label="pin", flag="--dataloader_pin_memory")
    #: DeepSpeed's buffer sizes (reduce/allgather buckets, ZeRO-3 prefetch bucket and live
    #: parameters) are the job's config's divided by this (the ``ds_buckets`` rung doubles
    #: it). Reaches DeepSpeed through the rendered config, never as a flag.
    ds_bucket_divisor: int = _knob(
        1, kind="int", label="buckets", minimum=1, maximum=MAX_BUCKET_DIVISOR,
    )  # fmt: skip

    def global_batch(self, world_size: int) -> int:
        """Samples per optimizer step across all ranks: the invariant of the ladder."""
        return self.micro_batch_size * self.gradient_accumulation_steps * world_size

    def replace(self, **changes: Any) -> Knobs:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (enums as their string values)."""
        out: dict[str, Any] = {}
        for name in KNOB_NAMES:
            value = getattr(self, name)
            out[name] = value.value if isinstance(value, StrEnum) else value
        return out

    def diff(self, new: Knobs) -> dict[str, list[Any]]:
        """``{knob: [old, new]}`` for every knob that differs; the ``changes`` of an event."""
        old_d, new_d = self.as_dict(), new.as_dict()
        return {k: [old_d[k], new_d[k]] for k in KNOB_NAMES if old_d[k] != new_d[k]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Knobs:
        """Inverse of :meth:`as_dict` (used when reloading ``state.json``)."""
        values = {k: data[k] for k in KNOB_NAMES if k in data}
        if "offload" in values:
            values["offload"] = Offload(values["offload"])
        return cls(**values)


#: Every knob's spec, in field order: the one table the lists below are derived from.
KNOB_SPECS: dict[str, KnobSpec] = {f.name: f.metadata["knob"] for f in dataclasses.fields(Knobs)}
#: Knobs a job must give (no default value): the job file's required ``train:`` keys.
REQUIRED_KNOBS: frozenset[str] = frozenset(
    f.name for f in dataclasses.fields(Knobs) if f.default is dataclasses.MISSING
)
#: Knob names in the order they appear in events and tables.
KNOB_NAMES: tuple[str, ...] = tuple(KNOB_SPECS)
#: Knobs that reach the script as command-line flags (zero_stage/offload go through the
#: rendered DeepSpeed config instead).
FLAG_KNOBS: tuple[str, ...] = tuple(n for n, s in KNOB_SPECS.items() if s.flag is not None)
#: HF Trainer flag names (the job contract's defaults); ``flags:`` in the job overrides them.
DEFAULT_FLAGS: dict[str, str | None] = {n: KNOB_SPECS[n].flag for n in FLAG_KNOBS}
#: Knobs passed on every attempt (see :attr:`KnobSpec.always_passed`).
ALWAYS_PASSED_KNOBS: frozenset[str] = frozenset(n for n, s in KNOB_SPECS.items() if s.always_passed)
BOOL_KNOBS: frozenset[str] = frozenset(n for n, s in KNOB_SPECS.items() if s.kind == "bool")
#: Smallest valid value of each ``int`` knob (the job file and the quick-start parser).
INT_KNOB_MINIMUM: dict[str, int] = {
    n: s.minimum for n, s in KNOB_SPECS.items() if s.kind == "int" and s.minimum is not None
}
#: Largest valid value of each ``int`` knob (the job file and the quick-start parser).
INT_KNOB_MAXIMUM: dict[str, int] = {
    n: s.maximum for n, s in KNOB_SPECS.items() if s.kind == "int" and s.maximum is not None
}


def format_knob(value: object) -> str:
    """One knob value as a table cell: booleans on/off, unset ``-``, enums their value."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "-"
    return value.value if isinstance(value, StrEnum) else str(value)
