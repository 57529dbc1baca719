"""Make a checkpoint resume under the new knobs exactly as the user's global batch demands.

transformers <= 5.1 restores ``train_batch_size`` from the checkpoint's trainer_state.json on
resume and silently ignores the new ``--per_device_train_batch_size`` (transformers#43708,
fixed in 5.2): after "micro 8 -> 4, accumulation 1 -> 2" the job would really run micro 8 x
accumulation 2, OOM again and double the global batch. Rewriting that one key to the new
per-device micro-batch is exact on every version (>= 5.2 only reads it for
auto_find_batch_size). The original value goes into the event log and a one-time backup
file next to it, so nothing about the checkpoint is lost. Everything is done through one
``O_NOFOLLOW`` descriptor of the checkpoint dir (see :mod:`dsguard.run.safefs`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dsguard.run.safefs import create_at, open_dir, replace_at

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

    Returns None when nothing needed changing (or the file has no such key), and when the
    checkpoint dir or the file is a symlink, a loop or not a regular file: the patch never
    writes, and never leaves a backup, outside the checkpoint dir (``checkpoint-N`` linking
    to another tree would make dsguard, often root, rewrite a file it does not own).
    :func:`dsguard.run.checkpoints.inspect_checkpoint` reports such checkpoints incomplete,
    so the run loop does not pick them to begin with.

    The patched file keeps its mode, owner and timestamps, and so does the directory: the
    trainer may run as another user than dsguard, and HF's rotation orders by mtime.

    Raises:
        OSError: the backup or the new file could not be written (the original is intact).
    """
    try:
        dfd = open_dir(ckpt, owner=False)
    except OSError:
        return None
    try:
        return _patch_at(dfd, ckpt, micro_batch_size)
    finally:
        os.close(dfd)


def _patch_at(dfd: int, ckpt: Path, micro_batch_size: int) -> StatePatch | None:
    try:
        file_st = os.stat(TRAINER_STATE, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(file_st.st_mode):
            return None
        fd = os.open(TRAINER_STATE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
        state = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(state, dict) or "train_batch_size" not in state:
        return None
    old = state["train_batch_size"]
    if old == micro_batch_size:
        return None
    dir_st = os.fstat(dfd)
    path = ckpt / TRAINER_STATE
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    # Keep the file as the trainer wrote it, once; a name already taken (even by a link) is
    # left alone.
    create_at(dfd, backup.name, raw, keep=file_st)
    state["train_batch_size"] = micro_batch_size
    data = (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()
    replace_at(dfd, TRAINER_STATE, data, keep=file_st)
    # HF's rotate_checkpoints orders by mtime: a patched old checkpoint must not start
    # looking like the newest one, so both timestamps are put back afterwards.
    os.utime(TRAINER_STATE, ns=(file_st.st_atime_ns, file_st.st_mtime_ns), dir_fd=dfd,
             follow_symlinks=False)  # fmt: skip
    os.utime(dfd, ns=(dir_st.st_atime_ns, dir_st.st_mtime_ns))
    return StatePatch(path, "train_batch_size", old, micro_batch_size, backup)
