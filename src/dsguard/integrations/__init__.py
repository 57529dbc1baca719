"""Code that runs *inside* the training process (torch, transformers, DeepSpeed).

Why a separate package: the supervisor must never import torch, so everything that does lives
here and is imported only by training scripts, e.g. ``from dsguard.integrations.hf import
DsguardCallback``. This ``__init__`` deliberately imports nothing.
"""

from __future__ import annotations
