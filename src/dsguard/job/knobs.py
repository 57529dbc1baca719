"""The training knobs dsguard owns and changes between attempts (pure, no I/O).

The invariant the whole ladder protects is the *global batch*:
``micro_batch_size * gradient_accumulation_steps * world_size``. A move that changes it
silently changes the optimisation problem (step -> sample mapping, LR schedule, epochs), so
the policy layer refuses such moves or marks them as a logged new phase.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Offload(StrEnum):
    """DeepSpeed CPU offload level. ``all`` = optimizer + parameters (needs ZeRO-3)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    ALL = "all"


#: Knob names in the order they appear in events and tables.
KNOB_NAMES: tuple[str, ...] = (
    "micro_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "zero_stage",
    "offload",
    "lora",
    "gradient_checkpointing",
    "dataloader_workers",
    "pin_memory",
)

#: Knobs that reach the script as command-line flags (zero_stage/offload go through the
#: rendered DeepSpeed config instead).
FLAG_KNOBS: tuple[str, ...] = (
    "micro_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "lora",
    "gradient_checkpointing",
    "dataloader_workers",
    "pin_memory",
)

#: HF Trainer flag names (the job contract's defaults); ``flags:`` in the job overrides them.
DEFAULT_FLAGS: dict[str, str | None] = {
    "micro_batch_size": "--per_device_train_batch_size",
    "gradient_accumulation_steps": "--gradient_accumulation_steps",
    "max_length": "--model_max_length",
    "lora": "--lora_enable",
    "gradient_checkpointing": "--gradient_checkpointing",
    "dataloader_workers": "--dataloader_num_workers",
    "pin_memory": "--dataloader_pin_memory",
}


@dataclass(frozen=True, slots=True)
class Knobs:
    """One attempt's knob values.

    ``max_length`` is ``None`` when the job does not tell dsguard the sequence length (the
    max_length rung is then inapplicable); ``zero_stage`` is ``None`` when the job has no
    DeepSpeed config (the ZeRO/offload rungs are then inapplicable).
    """

    micro_batch_size: int
    gradient_accumulation_steps: int = 1
    max_length: int | None = None
    zero_stage: int | None = None
    offload: Offload = Offload.NONE
    lora: bool = False
    gradient_checkpointing: bool = False
    dataloader_workers: int = 0
    pin_memory: bool = True

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
