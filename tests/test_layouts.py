"""Checkpoint layouts beyond HF's checkpoint-N: real DeepSpeed tags, accelerate save_state,
Lightning, DCP and NeMo's unfinished markers (run/layouts.py)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dsguard.job.model import CheckpointLayout
from dsguard.run import layouts
from dsguard.run.checkpoints import QUARANTINE_DIRNAME, quarantine
from dsguard.run.ranks import free_port

HERE = Path(__file__).parent
DS_LOOP = HERE / "ds_loop_script.py"
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 1},
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "torch_adam": True}},
}


def _rendezvous() -> dict[str, str]:
    return dict(
        os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()), PYTHONUNBUFFERED="1",
    )  # fmt: skip


def run_ds_loop(work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The plain DeepSpeed loop in ``work`` (one process, CPU, rendezvous variables set)."""
    (work / "ds.json").write_text(json.dumps(DS_CONFIG))
    return subprocess.run(
        [sys.executable, str(DS_LOOP), "--deepspeed", "ds.json", "--out", "out", *extra],
        cwd=work, env=_rendezvous(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ds_saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real DeepSpeed run: tags global_step2, 4, 6 and latest -> global_step6."""
    work = tmp_path_factory.mktemp("ds")
    proc = run_ds_loop(work, "--steps", "6", "--save_every", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return work


@pytest.fixture
def ds_work(ds_saved: Path, tmp_path: Path) -> Path:
    work = tmp_path / "w"
    shutil.copytree(ds_saved, work)
    (work / "record.jsonl").unlink(missing_ok=True)
    return work


def _truncate(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(size // 2)


def test_real_deepspeed_tags_are_detected_and_the_newest_chosen(ds_work: Path) -> None:
    out = ds_work / "out"
    assert layouts.detect_layout(out)[0] is CheckpointLayout.DEEPSPEED
    sel = layouts.select(out, CheckpointLayout.AUTO, world_size=1)
    assert sel.layout == "deepspeed"
    assert sel.chosen is not None and sel.chosen.path.name == "global_step6"
    assert sel.chosen.step == 6 and sel.rejected == ()


def test_truncated_shard_is_rejected_and_latest_repointed_so_deepspeed_loads_step4(
    ds_work: Path,
) -> None:
    """The whole promise on real files: a torn newest tag is set aside, ``latest`` names the
    newest complete one, and DeepSpeed's own load_checkpoint lands there."""
    out = ds_work / "out"
    _truncate(out / "global_step6" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    sel = layouts.select(out, CheckpointLayout.DEEPSPEED, world_size=1)
    assert [v.path.name for v in sel.rejected] == ["global_step6"]
    assert "not a valid zip" in " ".join(sel.rejected[0].reasons)
    assert sel.chosen is not None and sel.chosen.path.name == "global_step4"
    moved = quarantine(sel.rejected[0].path, out)
    assert (
        moved.parent.name == QUARANTINE_DIRNAME and (moved / "mp_rank_00_model_states.pt").exists()
    )
    change = layouts.point_latest(out, "global_step4")
    assert change is not None and (change.previous, change.tag) == ("global_step6", "global_step4")
    assert (out / "latest").read_text() == "global_step4"
    assert layouts.point_latest(out, "global_step4") is None  # already right: no write
    proc = run_ds_loop(ds_work, "--steps", "6", "--save_every", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads((ds_work / "record.jsonl").read_text().splitlines()[0])
    assert (rec["loaded"], rec["start_step"]) == ("global_step4", 4)


def test_tag_saved_at_another_world_size_or_missing_a_rank_is_incomplete(ds_work: Path) -> None:
    out = ds_work / "out"
    sel = layouts.select(out, CheckpointLayout.DEEPSPEED, world_size=2)
    assert sel.chosen is None and len(sel.rejected) == 3
    assert "world size is 2" in " ".join(sel.rejected[0].reasons)
    # Rank 1's optimizer shard of a 2-rank save is missing: a gap the grid check sees.
    tag = out / "global_step6"
    shutil.copy(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                tag / "zero_pp_rank_2_mp_rank_00_optim_states.pt")  # fmt: skip
    verdict = layouts.inspect_candidate(tag, 6, CheckpointLayout.DEEPSPEED, None)
    assert not verdict.complete and "rank(s) [1]" in " ".join(verdict.reasons)


def test_no_complete_tag_moves_latest_aside_and_keeps_its_value(ds_work: Path) -> None:
    out = ds_work / "out"
    change = layouts.point_latest(out, None)
    assert change is not None and change.previous == "global_step6" and change.tag is None
    assert change.moved_to is not None and change.moved_to.read_text() == "global_step6"
    assert not (out / "latest").exists()


def test_latest_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "global_step1").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (out / "latest").symlink_to(victim)
    change = layouts.point_latest(out, "global_step1")
    assert change is not None and change.previous is None
    assert victim.read_text() == "keep" and not (out / "latest").is_symlink()
    assert (out / "latest").read_text() == "global_step1"


# -- accelerate, Lightning, DCP, NeMo markers (files shaped as the frameworks write them) --


def _torch_zip(path: Path) -> None:
    """A file torch.save would write: a zip with ``<name>/data.pkl`` (zipfile is enough for
    the completeness check, which never unpickles)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")


def _safetensors(path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)


def _accelerate_state(d: Path, ranks: int = 1) -> None:
    d.mkdir(parents=True)
    _safetensors(d / "model.safetensors")
    for name in ("optimizer.bin", "scheduler.bin", "sampler.bin"):
        _torch_zip(d / name)
    for r in range(ranks):
        _torch_zip(d / f"random_states_{r}.pkl")


def test_accelerate_automatic_naming_picks_newest_complete(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _accelerate_state(root / "checkpoints" / "checkpoint_0", ranks=2)
    _accelerate_state(root / "checkpoints" / "checkpoint_1", ranks=2)
    (root / "checkpoints" / "checkpoint_1" / "random_states_1.pkl").unlink()  # rank 1 died
    _accelerate_state(root / "checkpoints" / "checkpoint_2", ranks=2)
    _truncate(root / "checkpoints" / "checkpoint_2" / "optimizer.bin")
    (root / "checkpoints" / "checkpoint_3").mkdir()  # died before its first file
    assert layouts.detect_layout(root)[0] is CheckpointLayout.ACCELERATE
    sel = layouts.select(root, CheckpointLayout.AUTO, world_size=2)
    assert sel.layout == "accelerate"
    assert [v.path.name for v in sel.rejected] == ["checkpoint_3", "checkpoint_2", "checkpoint_1"]
    reasons = [" ".join(v.reasons) for v in sel.rejected]
    assert "no model weights" in reasons[0]
    assert "optimizer.bin is not a valid zip" in reasons[1]
    assert "random_states_1.pkl missing" in reasons[2]
    assert sel.chosen is not None and sel.chosen.path.name == "checkpoint_0"


def test_accelerate_user_named_dirs_and_a_nemo_marker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _accelerate_state(out / "step_10")
    _accelerate_state(out / "step_20")
    (out / "step_20-unfinished").touch()  # NeMo-style marker: the save was still running
    sel = layouts.select(out, CheckpointLayout.ACCELERATE, world_size=1)
    assert [v.path.name for v in sel.rejected] == ["step_20"]
    assert "step_20-unfinished present" in sel.rejected[0].reasons[0]
    assert sel.chosen is not None and sel.chosen.path.name == "step_10"


def test_lightning_ckpt_files_newest_first_and_torn_one_rejected(tmp_path: Path) -> None:
    d = tmp_path / "ckpts"
    d.mkdir()
    for i, name in enumerate(("epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt", "last.ckpt")):
        _torch_zip(d / name)
        os.utime(d / name, (1000 + i, 1000 + i))
    _truncate(d / "last.ckpt")
    (d / "epoch=0-step=20-unfinished").touch()
    sel = layouts.select(d, CheckpointLayout.AUTO, world_size=1)
    assert sel.layout == "lightning"
    assert [v.path.name for v in sel.rejected] == ["last.ckpt", "epoch=0-step=20.ckpt"]
    assert sel.chosen is not None and sel.chosen.path.name == "epoch=0-step=10.ckpt"
    assert sel.chosen.step == 10


def test_dcp_dir_without_metadata_is_incomplete(tmp_path: Path) -> None:
    d = tmp_path / "checkpoint"
    for step, meta in ((100, True), (200, False)):
        s = d / f"step-{step}"
        s.mkdir(parents=True)
        (s / "__0_0.distcp").write_bytes(b"x")
        if meta:
            (s / ".metadata").write_bytes(b"meta")
    assert layouts.detect_layout(d)[0] is CheckpointLayout.DCP
    sel = layouts.select(d, CheckpointLayout.AUTO, world_size=1)
    assert [v.path.name for v in sel.rejected] == ["step-200"]
    assert sel.chosen is not None and sel.chosen.path.name == "step-100"


def test_hf_dirs_still_detected_as_hf(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-3").mkdir()
    assert layouts.detect_layout(tmp_path)[0] is CheckpointLayout.HF
    assert layouts.detect_layout(tmp_path / "missing")[0] is CheckpointLayout.HF
