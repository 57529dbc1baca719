"""Checkpoint completeness, selection and quarantine, on real files built by hand (no torch).

The helpers write the same on-disk formats the trainer writes: safetensors (u64 LE header
length + JSON header + payload), torch.save archives (zip with ``<stem>/data.pkl`` and
``<stem>/data/0``), ``trainer_state.json`` and DeepSpeed ``latest`` + ``global_stepN/``.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Literal

import pytest

from dsguard.run.checkpoints import (
    QUARANTINE_DIRNAME,
    CheckpointVerdict,
    checkpoint_step,
    inspect_checkpoint,
    list_checkpoints,
    quarantine,
    select_checkpoint,
)

_ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}
Weights = Literal["safetensors", "sharded", "adapter", "bin", "none"]

# ---------------------------------------------------------------------------------------------
# Builders


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]] | None = None) -> None:
    """Write a valid safetensors file: 8-byte LE header length, JSON header, tensor bytes."""
    if tensors is None:
        tensors = {"linear.weight": ("F32", [4, 4]), "linear.bias": ("BF16", [4])}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8-byte alignment
    payload = bytes(i % 251 for i in range(offset))
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + payload)


def write_torch_file(path: Path, payload_bytes: int = 256) -> None:
    """Write a file laid out like torch.save's zip format (``<stem>/data.pkl`` etc.)."""
    stem = path.stem
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{stem}/data.pkl", pickle.dumps({"state": {}, "param_groups": []}))
        zf.writestr(f"{stem}/byteorder", b"little")
        zf.writestr(f"{stem}/data/0", bytes(i % 199 for i in range(payload_bytes)))
        zf.writestr(f"{stem}/version", b"3\n")


def write_legacy_torch_file(path: Path, protocol: int = 2) -> None:
    """Write the start of a pre-zip torch.save stream: pickled magic number, protocol version."""
    magic, version = 0x1950A86A20F9469CFC6C, 1001
    path.write_bytes(pickle.dumps(magic, protocol) + pickle.dumps(version, protocol) + b"\0" * 64)


def write_trainer_state(ckpt: Path, global_step: int) -> None:
    state = {"global_step": global_step, "max_steps": 1000, "save_steps": 100, "log_history": []}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))


def truncate(path: Path, nbytes: int) -> None:
    """Cut the last ``nbytes`` off a file, like a save killed mid-write."""
    os.truncate(path, path.stat().st_size - nbytes)


def ds_optim_name(rank: int, prefix: str = "bf16_") -> str:
    return f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def ds_model_name(rank: int, stage: int) -> str:
    if stage == 3:
        return f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
    return "mp_rank_00_model_states.pt"


def make_checkpoint(
    root: Path,
    step: int,
    *,
    world_size: int = 1,
    ds_stage: int | None = None,
    ds_prefix: str = "bf16_",
    weights: Weights = "safetensors",
    rng: bool = True,
) -> Path:
    """Build ``root/checkpoint-{step}`` in HF Trainer's write order (trainer_state.json last).

    ``ds_stage`` None: plain HF (optimizer.pt, scheduler.pt). 2 or 3: HF + DeepSpeed
    (``global_step{step}/`` with per-rank shards named for that stage, ``latest``,
    ``zero_to_fp32.py``, HF scheduler.pt).
    """
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text('{"model_type": "toy"}')
    if weights == "safetensors":
        write_safetensors(ckpt / "model.safetensors")
    elif weights == "sharded":
        write_safetensors(ckpt / "model-00001-of-00002.safetensors", {"a.weight": ("F32", [8])})
        write_safetensors(ckpt / "model-00002-of-00002.safetensors", {"b.weight": ("F16", [8])})
        index = {
            "metadata": {"total_size": 48},
            "weight_map": {
                "a.weight": "model-00001-of-00002.safetensors",
                "b.weight": "model-00002-of-00002.safetensors",
            },
        }
        (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    elif weights == "adapter":
        write_safetensors(ckpt / "adapter_model.safetensors", {"lora_A.weight": ("F32", [2, 4])})
        (ckpt / "adapter_config.json").write_text('{"r": 2}')
    elif weights == "bin":
        write_torch_file(ckpt / "pytorch_model.bin")
    write_torch_file(ckpt / "training_args.bin")

    if ds_stage is None:
        write_torch_file(ckpt / "optimizer.pt", payload_bytes=1024)
    else:
        tag = ckpt / f"global_step{step}"
        tag.mkdir()
        for rank in range(world_size):
            write_torch_file(tag / ds_optim_name(rank, ds_prefix), payload_bytes=512)
            if ds_stage == 3 or rank == 0:
                write_torch_file(tag / ds_model_name(rank, ds_stage))
        (ckpt / "latest").write_text(f"global_step{step}")
        (ckpt / "zero_to_fp32.py").write_text("# recovery script\n")
    write_torch_file(ckpt / "scheduler.pt")

    if rng:
        if world_size == 1:
            write_torch_file(ckpt / "rng_state.pth")
        else:
            for rank in range(world_size):
                write_torch_file(ckpt / f"rng_state_{rank}.pth")
    write_trainer_state(ckpt, step)
    return ckpt


def assert_incomplete(verdict: CheckpointVerdict, *fragments: str) -> None:
    """The verdict is incomplete and some reason mentions every fragment."""
    assert not verdict.complete
    joined = "\n".join(verdict.reasons)
    for fragment in fragments:
        assert fragment in joined, f"{fragment!r} not in reasons: {verdict.reasons}"


# ---------------------------------------------------------------------------------------------
# Names and listing


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("checkpoint-0", 0),
        ("checkpoint-500", 500),
        ("checkpoint-010", 10),
        ("checkpoint-", None),
        ("checkpoint-5a", None),
        ("checkpoint-5.1", None),
        ("tmp-checkpoint-5", None),
        ("checkpoint_5", None),
        (QUARANTINE_DIRNAME, None),
    ],
)
def test_checkpoint_step_parses_only_checkpoint_n(name: str, expected: int | None) -> None:
    """checkpoint_step returns N only for names that are exactly checkpoint-<digits>."""
    assert checkpoint_step(Path("/out") / name) == expected


def test_list_checkpoints_orders_numerically_newest_first(tmp_path: Path) -> None:
    """checkpoint-10 sorts before checkpoint-9 (numeric, not lexicographic)."""
    for n in (9, 10, 2, 100):
        (tmp_path / f"checkpoint-{n}").mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "checkpoint-100",
        "checkpoint-10",
        "checkpoint-9",
        "checkpoint-2",
    ]


def test_list_checkpoints_ignores_files_other_names_and_quarantine(tmp_path: Path) -> None:
    """Only checkpoint-N directories are listed: files, other dirs and the quarantine are not."""
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-4").write_text("a file, not a checkpoint")
    (tmp_path / "tmp-checkpoint-5").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / QUARANTINE_DIRNAME / "checkpoint-7").mkdir(parents=True)
    assert list_checkpoints(tmp_path) == [tmp_path / "checkpoint-3"]


def test_list_checkpoints_missing_or_empty_dir_is_empty(tmp_path: Path) -> None:
    """A missing or empty output dir means no checkpoints yet, not an error."""
    assert list_checkpoints(tmp_path / "nope") == []
    assert list_checkpoints(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Complete checkpoints


def test_complete_plain_hf_checkpoint(tmp_path: Path) -> None:
    """A plain HF checkpoint (safetensors, optimizer, scheduler, rng, trainer_state) is complete."""
    ckpt = make_checkpoint(tmp_path, 40)
    v = inspect_checkpoint(ckpt, world_size=1)
    assert v.complete, v.reasons
    assert v.reasons == ()
    assert v.warnings == ()
    assert v.step == 40
    assert v.path == ckpt
    assert v.zero_stage_hint is None


@pytest.mark.parametrize("weights", ["sharded", "adapter", "bin"])
def test_complete_with_other_weight_formats(tmp_path: Path, weights: Weights) -> None:
    """Sharded safetensors, PEFT adapter and pytorch_model.bin all count as model weights."""
    v = inspect_checkpoint(make_checkpoint(tmp_path, 5, weights=weights))
    assert v.complete, v.reasons


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("prefix", ["bf16_", "fp16_", ""])
def test_complete_deepspeed_two_ranks(tmp_path: Path, stage: int, prefix: str) -> None:
    """HF+DeepSpeed ZeRO-2/3 with 2 ranks is complete and its stage is read off the file names."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=stage, ds_prefix=prefix)
    for ws in (2, None):
        v = inspect_checkpoint(ckpt, world_size=ws)
        assert v.complete, v.reasons
        assert v.zero_stage_hint == stage
        assert v.warnings == ()


def test_zero3_without_gathered_weights_is_complete(tmp_path: Path) -> None:
    """ZeRO-3 without a 16-bit gather has no top-level weights; the tag dir stands in for them."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3, weights="none")
    v = inspect_checkpoint(ckpt, world_size=2)
    assert v.complete, v.reasons
    assert v.zero_stage_hint == 3


def test_size_bytes_counts_every_file(tmp_path: Path) -> None:
    """size_bytes is the total size of all files, including those in the DeepSpeed tag dir."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3)
    expected = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    assert inspect_checkpoint(ckpt).size_bytes == expected


# ---------------------------------------------------------------------------------------------
# trainer_state.json and the JIT sentinel


def test_missing_trainer_state_is_incomplete(tmp_path: Path) -> None:
    """trainer_state.json is written last, so without it the save did not finish."""
    ckpt = make_checkpoint(tmp_path, 40)
    (ckpt / "trainer_state.json").unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "trainer_state.json missing")


def test_trainer_state_global_step_mismatch_is_incomplete(tmp_path: Path) -> None:
    """A global_step other than N (stale state in a reused dir) makes the checkpoint incomplete."""
    ckpt = make_checkpoint(tmp_path, 40)
    write_trainer_state(ckpt, 30)
    assert_incomplete(inspect_checkpoint(ckpt), "global_step=30, expected 40")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"global_step": 40, "log_hist', "not valid JSON"),
        ("", "not valid JSON"),
        ("[40]", "not a JSON object"),
        ("{}", "no integer global_step"),
        ('{"global_step": "40"}', "no integer global_step"),
        ('{"global_step": true}', "no integer global_step"),
    ],
)
def test_bad_trainer_state_is_incomplete(tmp_path: Path, content: str, fragment: str) -> None:
    """Unparseable, non-object or step-less trainer_state.json makes the checkpoint incomplete."""
    ckpt = make_checkpoint(tmp_path, 40)
    (ckpt / "trainer_state.json").write_text(content)
    assert_incomplete(inspect_checkpoint(ckpt), "trainer_state.json", fragment)


def test_jit_incomplete_sentinel_is_incomplete(tmp_path: Path) -> None:
    """checkpoint-is-incomplete.txt (transformers >= 5 JIT save) marks an unfinished save."""
    ckpt = make_checkpoint(tmp_path, 40)
    (ckpt / "checkpoint-is-incomplete.txt").write_text("")
    assert_incomplete(inspect_checkpoint(ckpt), "checkpoint-is-incomplete.txt")


# ---------------------------------------------------------------------------------------------
# Weights


def test_safetensors_truncated_by_4_bytes_is_incomplete(tmp_path: Path) -> None:
    """A model.safetensors 4 bytes shorter than its header describes is caught."""
    ckpt = make_checkpoint(tmp_path, 40)
    truncate(ckpt / "model.safetensors", 4)
    assert_incomplete(inspect_checkpoint(ckpt), "model.safetensors truncated")


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        ("keep_4_bytes", "shorter than its 8-byte header length"),
        ("cut_header", "exceeds file size"),
        ("append", "header describes"),
        ("garbage_header", "header is not valid JSON"),
    ],
)
def test_damaged_safetensors_is_incomplete(tmp_path: Path, damage: str, fragment: str) -> None:
    """Short files, cut headers, trailing bytes and non-JSON headers all fail the header check."""
    ckpt = make_checkpoint(tmp_path, 40)
    st = ckpt / "model.safetensors"
    data = st.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    if damage == "keep_4_bytes":
        st.write_bytes(data[:4])
    elif damage == "cut_header":
        st.write_bytes(data[: 8 + n // 2])
    elif damage == "append":
        st.write_bytes(data + b"\x00")
    else:
        st.write_bytes(data[:8] + b"\xff" * n + data[8 + n :])
    assert_incomplete(inspect_checkpoint(ckpt), "model.safetensors", fragment)


def test_sharded_index_with_missing_shard_is_incomplete(tmp_path: Path) -> None:
    """Every shard listed in model.safetensors.index.json must exist."""
    ckpt = make_checkpoint(tmp_path, 40, weights="sharded")
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "missing shard model-00002-of-00002.safetensors")


def test_sharded_index_with_truncated_shard_is_incomplete(tmp_path: Path) -> None:
    """Every shard listed in the index passes the safetensors size check."""
    ckpt = make_checkpoint(tmp_path, 40, weights="sharded")
    truncate(ckpt / "model-00001-of-00002.safetensors", 1)
    assert_incomplete(inspect_checkpoint(ckpt), "model-00001-of-00002.safetensors truncated")


def test_no_weights_is_incomplete(tmp_path: Path) -> None:
    """A non-DeepSpeed checkpoint with no weights file at all is incomplete."""
    ckpt = make_checkpoint(tmp_path, 40, weights="none")
    assert_incomplete(inspect_checkpoint(ckpt), "no model weights")


# ---------------------------------------------------------------------------------------------
# Optimizer / scheduler (non-DeepSpeed)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_truncated_torch_state_is_incomplete(tmp_path: Path, name: str) -> None:
    """A truncated optimizer.pt / scheduler.pt has no zip central directory and is caught."""
    ckpt = make_checkpoint(tmp_path, 40)
    truncate(ckpt / name, 10)
    assert_incomplete(inspect_checkpoint(ckpt), f"{name} is not a valid zip")


def test_non_zip_non_legacy_file_is_incomplete(tmp_path: Path) -> None:
    """A .pt that is neither zip nor legacy torch (e.g. zeros after a crash) is rejected."""
    ckpt = make_checkpoint(tmp_path, 40)
    (ckpt / "optimizer.pt").write_bytes(b"\0" * 4096)
    assert_incomplete(inspect_checkpoint(ckpt), "optimizer.pt is not a valid zip")


def test_zip_without_data_pkl_is_incomplete(tmp_path: Path) -> None:
    """A valid zip that is not a torch.save archive (no data.pkl) is rejected."""
    ckpt = make_checkpoint(tmp_path, 40)
    with zipfile.ZipFile(ckpt / "optimizer.pt", "w") as zf:
        zf.writestr("readme.txt", "not torch")
    assert_incomplete(inspect_checkpoint(ckpt), "optimizer.pt is a zip without data.pkl")


def test_save_only_model_checkpoint_is_incomplete(tmp_path: Path) -> None:
    """Without optimizer.pt (save_only_model) a non-DeepSpeed checkpoint cannot resume training."""
    ckpt = make_checkpoint(tmp_path, 40)
    (ckpt / "optimizer.pt").unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "no optimizer state")


@pytest.mark.parametrize("protocol", [2, 4])
def test_legacy_torch_format_passes_with_warning(tmp_path: Path, protocol: int) -> None:
    """Pre-zip torch.save files cannot be checked cheaply: accepted, but with a warning."""
    ckpt = make_checkpoint(tmp_path, 40)
    write_legacy_torch_file(ckpt / "optimizer.pt", protocol)
    v = inspect_checkpoint(ckpt)
    assert v.complete, v.reasons
    assert any("optimizer.pt uses the legacy" in w for w in v.warnings)


# ---------------------------------------------------------------------------------------------
# DeepSpeed


def test_deepspeed_latest_missing_is_incomplete(tmp_path: Path) -> None:
    """A global_step dir without `latest` means rank 0 died before finishing its save."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    (ckpt / "latest").unlink()
    v = inspect_checkpoint(ckpt, world_size=2)
    assert_incomplete(v, "'latest' missing")
    assert v.zero_stage_hint is None


def test_deepspeed_latest_naming_missing_tag_is_incomplete(tmp_path: Path) -> None:
    """`latest` must name an existing tag dir."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3)
    (ckpt / "latest").write_text("global_step200\n")
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "global_step200/, which does not")


@pytest.mark.parametrize("content", ["", "\n", "../elsewhere"])
def test_deepspeed_latest_invalid_tag_is_incomplete(tmp_path: Path, content: str) -> None:
    """An empty `latest` or one naming a path outside the checkpoint is rejected."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3)
    (ckpt / "latest").write_text(content)
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "invalid tag")


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_missing_rank_shard_is_incomplete(tmp_path: Path, stage: int) -> None:
    """A missing optimizer shard of rank 1 is caught when world_size is given."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=stage)
    (ckpt / "global_step100" / ds_optim_name(1)).unlink()
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "shards for 1 ranks, world size is 2")


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_missing_last_rank_found_without_world_size(tmp_path: Path, stage: int) -> None:
    """Without world_size, a missing top-rank shard shows up against the other per-rank files."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=stage)
    (ckpt / "global_step100" / ds_optim_name(1)).unlink()
    assert not inspect_checkpoint(ckpt).complete


def test_zero3_optimizer_shards_must_match_model_state_shards(tmp_path: Path) -> None:
    """Under ZeRO-3 the per-rank model-state files reveal a missing top-rank optimizer shard."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3, rng=False)
    (ckpt / "global_step100" / ds_optim_name(1)).unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "model-state and optimizer shards cover different")


def test_deepspeed_gap_in_rank_shards_is_incomplete(tmp_path: Path) -> None:
    """Shards must be numbered 0..k-1 without gaps."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=3, ds_stage=2)
    (ckpt / "global_step100" / ds_optim_name(1)).unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "optimizer shard missing for rank(s) [1]")


def test_deepspeed_zero3_missing_model_states_shard_is_incomplete(tmp_path: Path) -> None:
    """Under ZeRO-3 every rank's model-states file must be there too."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3)
    (ckpt / "global_step100" / ds_model_name(1, 3)).unlink()
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "ZeRO-3 model-state")


def test_deepspeed_no_model_states_is_incomplete(tmp_path: Path) -> None:
    """A tag dir without any *model_states.pt cannot be loaded."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    (ckpt / "global_step100" / ds_model_name(0, 2)).unlink()
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "no *model_states.pt")


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_truncated_shard_is_incomplete(tmp_path: Path, stage: int) -> None:
    """Every .pt in the tag dir must be a valid zip; a truncated shard is caught."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=stage)
    truncate(ckpt / "global_step100" / ds_optim_name(1), 100)
    assert_incomplete(
        inspect_checkpoint(ckpt, world_size=2),
        f"global_step100/{ds_optim_name(1)} is not a valid zip",
    )


def test_deepspeed_shard_count_must_match_world_size(tmp_path: Path) -> None:
    """A 2-rank checkpoint is not complete for a 4-rank resume (ZeRO cannot reshard)."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    assert_incomplete(inspect_checkpoint(ckpt, world_size=4), "world size is 4")


def test_deepspeed_mixed_stage_files_are_incomplete(tmp_path: Path) -> None:
    """Leftover ZeRO-2 model states next to ZeRO-3 shards (reused dir) make the stage ambiguous."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=3)
    write_torch_file(ckpt / "global_step100" / "mp_rank_00_model_states.pt")
    v = inspect_checkpoint(ckpt, world_size=2)
    assert_incomplete(v, "mixes ZeRO-3 and ZeRO<=2")
    assert v.zero_stage_hint is None


def test_deepspeed_mixed_precision_prefixes_are_incomplete(tmp_path: Path) -> None:
    """bf16_ and unprefixed optimizer shards side by side mean stale files from another run."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    write_torch_file(ckpt / "global_step100" / ds_optim_name(0, prefix=""))
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "mixes optimizer shard precisions")


def test_deepspeed_tag_mismatch_and_missing_script_only_warn(tmp_path: Path) -> None:
    """A tag not named global_step{N}, extra tag dirs and no zero_to_fp32.py only warn."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    (ckpt / "global_step100").rename(ckpt / "custom_tag")
    (ckpt / "latest").write_text("custom_tag")
    (ckpt / "global_step90").mkdir()
    (ckpt / "zero_to_fp32.py").unlink()
    v = inspect_checkpoint(ckpt, world_size=2)
    assert v.complete, v.reasons
    assert v.zero_stage_hint == 2
    joined = "\n".join(v.warnings)
    assert "does not match checkpoint step 100" in joined
    assert "global_step90" in joined
    assert "zero_to_fp32.py" in joined


# ---------------------------------------------------------------------------------------------
# RNG state


def test_missing_rank_rng_state_is_incomplete(tmp_path: Path) -> None:
    """With world_size 2, rng_state_1.pth must exist (ranks write it without a barrier)."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    (ckpt / "rng_state_1.pth").unlink()
    assert_incomplete(inspect_checkpoint(ckpt, world_size=2), "rng_state_1.pth missing")


def test_missing_rank_rng_state_found_without_world_size(tmp_path: Path) -> None:
    """Without world_size, RNG files for fewer ranks than the DeepSpeed shards are caught."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=2, ds_stage=2)
    (ckpt / "rng_state_1.pth").unlink()
    assert_incomplete(inspect_checkpoint(ckpt), "rng_state_*.pth files cover 1")


def test_truncated_rng_state_is_incomplete(tmp_path: Path) -> None:
    """Present RNG files must be valid zips."""
    ckpt = make_checkpoint(tmp_path, 40)
    truncate(ckpt / "rng_state.pth", 5)
    assert_incomplete(inspect_checkpoint(ckpt), "rng_state.pth is not a valid zip")


@pytest.mark.parametrize("world_size", [None, 1, 2])
def test_no_rng_state_is_complete_with_warning(tmp_path: Path, world_size: int | None) -> None:
    """No RNG file at all still resumes (HF only logs an info), so it is only a warning."""
    ckpt = make_checkpoint(tmp_path, 100, world_size=world_size or 1, rng=False)
    v = inspect_checkpoint(ckpt, world_size=world_size)
    assert v.complete, v.reasons
    assert any("no RNG state" in w for w in v.warnings)


# ---------------------------------------------------------------------------------------------
# Misc inspect behaviour


def test_inspect_rejects_non_checkpoint_names_and_bad_world_size(tmp_path: Path) -> None:
    """inspect_checkpoint raises ValueError for a non checkpoint-N name or world_size < 1."""
    with pytest.raises(ValueError, match="not a checkpoint-N"):
        inspect_checkpoint(tmp_path / "final_model")
    with pytest.raises(ValueError, match="world_size"):
        inspect_checkpoint(make_checkpoint(tmp_path, 1), world_size=0)


def test_inspect_missing_dir_is_incomplete(tmp_path: Path) -> None:
    """A checkpoint dir that vanished is reported incomplete, not raised."""
    v = inspect_checkpoint(tmp_path / "checkpoint-5")
    assert_incomplete(v, "missing")
    assert v.size_bytes == 0


def test_verdict_complete_iff_no_reasons(tmp_path: Path) -> None:
    """A CheckpointVerdict cannot be complete with reasons, nor incomplete without any."""
    with pytest.raises(ValueError, match="complete"):
        CheckpointVerdict(tmp_path, 1, complete=True, reasons=("x",), size_bytes=0)
    with pytest.raises(ValueError, match="complete"):
        CheckpointVerdict(tmp_path, 1, complete=False, reasons=(), size_bytes=0)


# ---------------------------------------------------------------------------------------------
# Selection


def test_select_picks_newest_complete_and_rejects_only_newer(tmp_path: Path) -> None:
    """The newest complete checkpoint is chosen; only incomplete ones newer than it are rejected."""
    make_checkpoint(tmp_path, 10)
    old_bad = make_checkpoint(tmp_path, 20)
    (old_bad / "trainer_state.json").unlink()
    make_checkpoint(tmp_path, 30)
    newer_bad = make_checkpoint(tmp_path, 40)
    truncate(newer_bad / "optimizer.pt", 3)
    newest_bad = make_checkpoint(tmp_path, 50)
    (newest_bad / "trainer_state.json").unlink()

    sel = select_checkpoint(tmp_path)
    assert sel.chosen is not None
    assert sel.chosen.path == tmp_path / "checkpoint-30"
    assert [v.step for v in sel.rejected] == [50, 40]
    assert all(not v.complete and v.reasons for v in sel.rejected)


def test_select_orders_numerically(tmp_path: Path) -> None:
    """checkpoint-10 is preferred over checkpoint-9 when both are complete."""
    make_checkpoint(tmp_path, 9)
    make_checkpoint(tmp_path, 10)
    sel = select_checkpoint(tmp_path)
    assert sel.chosen is not None
    assert sel.chosen.step == 10
    assert sel.rejected == ()


def test_select_passes_world_size(tmp_path: Path) -> None:
    """world_size reaches the checks: a 2-rank checkpoint is skipped for a 4-rank resume."""
    make_checkpoint(tmp_path, 100, world_size=4, ds_stage=3)
    make_checkpoint(tmp_path, 200, world_size=2, ds_stage=3)
    sel = select_checkpoint(tmp_path, world_size=4)
    assert sel.chosen is not None
    assert sel.chosen.step == 100
    assert [v.step for v in sel.rejected] == [200]


def test_select_with_nothing_complete_rejects_all(tmp_path: Path) -> None:
    """With no complete checkpoint, chosen is None and every incomplete one is rejected."""
    for step in (1, 2):
        (make_checkpoint(tmp_path, step) / "trainer_state.json").unlink()
    sel = select_checkpoint(tmp_path)
    assert sel.chosen is None
    assert [v.step for v in sel.rejected] == [2, 1]


def test_select_empty_or_missing_dir_starts_fresh(tmp_path: Path) -> None:
    """An empty or missing output dir selects nothing and rejects nothing."""
    for d in (tmp_path, tmp_path / "missing"):
        sel = select_checkpoint(d)
        assert sel.chosen is None
        assert sel.rejected == ()


# ---------------------------------------------------------------------------------------------
# Quarantine


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_quarantine_moves_without_deleting(tmp_path: Path) -> None:
    """quarantine moves the dir into .dsguard-quarantine with every file's contents intact."""
    ckpt = make_checkpoint(tmp_path, 50, world_size=2, ds_stage=3)
    before = _snapshot(ckpt)
    dest = quarantine(ckpt, tmp_path)
    assert dest == tmp_path / QUARANTINE_DIRNAME / "checkpoint-50"
    assert not ckpt.exists()
    assert _snapshot(dest) == before
    assert list_checkpoints(tmp_path) == []


def test_quarantine_same_name_twice_gets_suffix(tmp_path: Path) -> None:
    """A second quarantine of the same name gets .1, then .2; earlier copies are untouched."""
    dests = []
    for marker in ("first", "second", "third"):
        ckpt = tmp_path / "checkpoint-50"
        ckpt.mkdir()
        (ckpt / "marker").write_text(marker)
        dests.append(quarantine(ckpt, tmp_path))
    qdir = tmp_path / QUARANTINE_DIRNAME
    assert dests == [qdir / "checkpoint-50", qdir / "checkpoint-50.1", qdir / "checkpoint-50.2"]
    assert [(d / "marker").read_text() for d in dests] == ["first", "second", "third"]


def test_quarantine_then_select_falls_back(tmp_path: Path) -> None:
    """After quarantining the rejected ones, selection sees only the good checkpoint."""
    make_checkpoint(tmp_path, 10)
    (make_checkpoint(tmp_path, 20) / "latest").write_text("global_step20")
    sel = select_checkpoint(tmp_path)
    for v in sel.rejected:
        quarantine(v.path, tmp_path)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-10"]
    again = select_checkpoint(tmp_path)
    assert again.chosen is not None
    assert again.chosen.step == 10
    assert again.rejected == ()
    assert (tmp_path / QUARANTINE_DIRNAME / "checkpoint-20" / "trainer_state.json").is_file()


def test_quarantine_refuses_paths_outside_ckpt_dir(tmp_path: Path) -> None:
    """Only direct children of ckpt_dir (same FS) can be quarantined, never the quarantine."""
    other = tmp_path / "other"
    other.mkdir()
    ckpt = make_checkpoint(other, 5)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match="not directly inside"):
        quarantine(ckpt, out)
    assert ckpt.is_dir()
    (out / QUARANTINE_DIRNAME).mkdir()
    with pytest.raises(ValueError, match="quarantine directory itself"):
        quarantine(out / QUARANTINE_DIRNAME, out)
    with pytest.raises(FileNotFoundError):
        quarantine(out / "checkpoint-9", out)
