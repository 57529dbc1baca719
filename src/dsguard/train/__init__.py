"""The reference trainer: ``python -m dsguard.train``.

A small but real causal-LM fine-tuning script on the HF ``Trainer`` (optionally DeepSpeed and
PEFT LoRA) that speaks dsguard's contract natively: HF flag names for every knob, the
:class:`~dsguard.integrations.hf.DsguardCallback` always installed, ``DSGUARD_INIT_FROM`` and
exact ZeRO-stage transplant. It exists so the supervisor's claims (the OOM ladder keeps the
sample order and the loss curve; a lowered ``max_length`` keeps the data position) can be
tested end to end on real training rather than on a scripted stand-in, and so users have a
known-good script to compare their own against.

This package imports torch only in :mod:`dsguard.train.trainer` and below; importing
``dsguard.train`` itself stays light (the supervisor never needs it).
"""

from __future__ import annotations

__all__: list[str] = []
