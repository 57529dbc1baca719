"""Make a checkpoint resume under the new knobs exactly as the user's global batch demands.

transformers <= 5.1 restores ``train_batch_size`` from the checkpoint's trainer_state.json on
resume and silently ignores the new ``--per_device_train_batch_size`` (transformers#43708,
fixed in 5.2): after "micro 8 -> 4, accumulation 1 -> 2" the job would really run micro 8 x
accumulation 2, OOM again and double the global batch. Rewriting that one key to the new
per-device micro-batch is exact on every version (>= 5.2 only reads it for
auto_find_batch_size). The original value goes into the event log and a one-time backup
file next to it, so nothing about the checkpoint is lost.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dsguard.run.state import write_json_atomic

TRAINER_STATE = "trainer_state.json"
BACKUP_SUFFIX = ".dsguard-orig"


@dataclass(frozen=True, slots=True)
class StatePatch:
    path: Path
    key: str
    old: object
    new: object
    backup: Path


def patch_train_batch_size(ckpt: Path, micro_batch_size: int) -> StatePatch | None:
    """Set ``train_batch_size`` in ``ckpt/trainer_state.json`` to the new micro-batch.

    Returns None when nothing needed changing (or the file has no such key).
    """
    path = ckpt / TRAINER_STATE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or "train_batch_size" not in state:
        return None
    old = state["train_batch_size"]
    if old == micro_batch_size:
        return None
    # HF's rotate_checkpoints orders by mtime: a patched old checkpoint must not start
    # looking like the newest one, so both timestamps are put back afterwards.
    file_st, dir_st = os.stat(path), os.stat(ckpt)
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not backup.exists():  # keep the file as the trainer wrote it, once
        shutil.copy2(path, backup)
    state["train_batch_size"] = micro_batch_size
    write_json_atomic(path, state)
    os.utime(path, ns=(file_st.st_atime_ns, file_st.st_mtime_ns))
    os.utime(ckpt, ns=(dir_st.st_atime_ns, dir_st.st_mtime_ns))
    return StatePatch(path, "train_batch_size", old, micro_batch_size, backup)
