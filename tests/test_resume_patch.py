"""trainer_state.json patch for transformers <= 5.1 and heartbeat reading."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dsguard.protocol import Heartbeat, heartbeat_path
from dsguard.run.heartbeat import capabilities, read_heartbeats
from dsguard.run.resume import patch_train_batch_size


def _ckpt(tmp_path: Path, tbs: int) -> Path:
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(
        json.dumps({"global_step": 4, "train_batch_size": tbs}, indent=2)
    )
    old = 1_700_000_000
    os.utime(ckpt / "trainer_state.json", (old, old))
    os.utime(ckpt, (old, old))
    return ckpt


def test_patch_rewrites_train_batch_size_and_keeps_original(tmp_path: Path) -> None:
    """New micro-batch in the state; original kept as backup; mtimes unchanged (rotation)."""
    ckpt = _ckpt(tmp_path, 8)
    patch = patch_train_batch_size(ckpt, 4)
    assert patch is not None and (patch.old, patch.new) == (8, 4)
    assert json.loads((ckpt / "trainer_state.json").read_text())["train_batch_size"] == 4
    assert json.loads(patch.backup.read_text())["train_batch_size"] == 8
    assert (ckpt / "trainer_state.json").stat().st_mtime == 1_700_000_000
    assert ckpt.stat().st_mtime == 1_700_000_000
    # Patching again (4 -> 2) keeps the first backup: the trainer's own file.
    patch_train_batch_size(ckpt, 2)
    assert json.loads(patch.backup.read_text())["train_batch_size"] == 8


def test_patch_is_a_noop_when_equal(tmp_path: Path) -> None:
    """Same micro-batch: no write, no backup."""
    ckpt = _ckpt(tmp_path, 4)
    assert patch_train_batch_size(ckpt, 4) is None
    assert sorted(p.name for p in ckpt.iterdir()) == ["trainer_state.json"]


def test_heartbeats_of_other_attempts_and_garbage_are_ignored(tmp_path: Path) -> None:
    """Only this attempt's parseable files count; capabilities are those of every rank."""

    def hb(attempt: int, rank: int, caps: tuple[str, ...]) -> None:
        p = heartbeat_path(tmp_path, attempt, rank)
        p.write_text(json.dumps(Heartbeat(attempt, rank, 1, 0.0, "step", 3,
                                          capabilities=caps).as_dict()))  # fmt: skip

    hb(2, 0, ("heartbeat", "zero_transplant"))
    hb(2, 1, ("heartbeat",))
    hb(1, 0, ("heartbeat", "zero_transplant", "init_from"))
    (tmp_path / "attempt-2-rank-2.json").write_text("{not json")
    beats = read_heartbeats(tmp_path, 2)
    assert [b.rank for b in beats] == [0, 1]
    assert capabilities(beats) == frozenset({"heartbeat"})
    assert read_heartbeats(tmp_path / "missing", 2) == []
