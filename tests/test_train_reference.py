"""The reference trainer (``python -m dsguard.train``) on real HF Trainer / DeepSpeed, on CPU.

What these tests pin down is what the supervisor's ladder relies on: a micro-batch move that
keeps the global batch (8x1 -> 4x2) and a resume from the checkpoint before the failure see the
same samples at every optimizer step and the same losses (within float rounding), with and
without DeepSpeed ZeRO-2; lowering ``--model_max_length`` on resume keeps the data position;
checkpoints are complete by dsguard's own validator. Slow ones (real training in a child
process, seconds each) are marked ``train``.

Loss tolerance: ``rel 1e-5``. A micro-batch of 4 run twice and accumulated gives the same
gradient as one micro-batch of 8 only up to fp32 rounding (different matmul shapes and
summation order, gradients added in two parts); Adam then propagates those ~1e-7 relative
differences into the weights. Measured on this CPU over 5 resumed steps: at most 2.3e-7
relative (1.2e-6 absolute on losses near 5), identical sample ids, and bit-identical losses
before the resume point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from dsguard.run.checkpoints import inspect_checkpoint
from dsguard.train.data import (
    CausalLMCollator,
    TextDataset,
    generate_texts,
)
from dsguard.train.faults import Fault, parse_faults
from dsguard.train.tokenizer import ByteTokenizer

REPO = Path(__file__).resolve().parents[1]
ZERO2_CPU = REPO / "configs" / "deepspeed" / "zero2-cpu.json"
LOSS_RTOL = 1e-5
#: One run is ~10-20 s here; the first DeepSpeed run may JIT-build its shm op (~1 min).
RUN_TIMEOUT_S = 280

#: 40 samples, global batch 8: 5 steps per epoch, so 8 steps cross an epoch boundary.
BASE: dict[str, object] = {
    "model_preset": "tiny",
    "generate_data": 40,
    "model_max_length": 128,
    "max_steps": 8,
    "save_steps": 3,
    "logging_steps": 1,
    "learning_rate": 1e-3,
    "seed": 7,
    "disable_tqdm": "true",
    "report_to": "none",
    "dataloader_pin_memory": "false",
    "output_dir": "out",
    "per_device_train_batch_size": 8,
}


def argv(**overrides: object) -> list[str]:
    """``BASE`` with overrides as HF flags; an override of None drops the flag."""
    merged = {**BASE, **overrides}
    return [part for k, v in merged.items() if v is not None for part in (f"--{k}", str(v))]


def trainer_env(**extra: str) -> dict[str, str]:
    """The parent's environment minus anything dsguard or a launcher may have set."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSGUARD_") and k not in drop}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    env.update(extra)
    return env


def run_trainer(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m dsguard.train ARGS`` in ``cwd``; ``env`` adds DSGUARD_* variables."""
    return subprocess.run(
        [sys.executable, "-m", "dsguard.train", *args],
        cwd=cwd,
        env=trainer_env(**env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def read_trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_step(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Last record per step (a step re-run after a resume replaces the failed attempt's)."""
    return {int(r["global_step"]): r for r in records}


def assert_complete(ckpt: Path, *, deepspeed: bool, world_size: int = 1) -> None:
    verdict = inspect_checkpoint(ckpt, world_size=world_size)
    assert verdict.complete, verdict.reasons
    names = {p.name for p in ckpt.iterdir()}
    assert {"trainer_state.json", "config.json", "scheduler.pt"} <= names
    assert "model.safetensors" in names or "adapter_model.safetensors" in names
    step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    assert ckpt.name == f"checkpoint-{step}"
    if world_size == 1:
        assert "rng_state.pth" in names
    else:
        assert {f"rng_state_{r}.pth" for r in range(world_size)} <= names
    if deepspeed:
        tag = (ckpt / "latest").read_text().strip()
        assert tag == f"global_step{step}"
        shards = {p.name for p in (ckpt / tag).iterdir()}
        assert "mp_rank_00_model_states.pt" in shards
        assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(world_size)} <= shards
        assert verdict.zero_stage_hint == 2
    else:
        assert "optimizer.pt" in names


@dataclass
class Reference:
    """One uninterrupted run at micro 8 x accumulation 1."""

    out: Path
    trace: dict[int, dict[str, Any]]
    proc: subprocess.CompletedProcess[str]
    extra: dict[str, object]

    @property
    def deepspeed(self) -> bool:
        return "deepspeed" in self.extra


def _reference(tmp: Path, **extra: object) -> Reference:
    trace = tmp / "trace.jsonl"
    proc = ok(run_trainer(tmp, *argv(**extra), DSGUARD_SAMPLE_TRACE=str(trace)))
    return Reference(tmp / "out", by_step(read_trace(trace)), proc, extra)


@pytest.fixture(scope="module")
def plain_ref(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return _reference(tmp_path_factory.mktemp("plain_ref"))


@pytest.fixture(scope="module")
def zero2_ref(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return _reference(tmp_path_factory.mktemp("zero2_ref"), deepspeed=ZERO2_CPU)


# -- fast unit tests ----------------------------------------------------------------------------


def test_byte_tokenizer_truncates_per_example_and_round_trips() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("héllo")
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert len(ids) == len("héllo".encode()) + 2
    assert tok.decode(ids) == "héllo"
    assert tok.encode("héllo", max_length=4) == ids[:4]
    assert tok.vocab_size % 8 == 0 and tok.vocab_size > tok.eos_token_id
    with pytest.raises(ValueError, match="max_length"):
        tok.encode("x", max_length=1)


def test_collator_right_pads_and_masks_labels() -> None:
    tok = ByteTokenizer()
    collate = CausalLMCollator(tok.pad_token_id)
    batch = collate([{"input_ids": [1, 2, 3], "sample_id": 5}, {"input_ids": [4], "sample_id": 9}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, tok.pad_token_id, tok.pad_token_id]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[1, 2, 3], [4, -100, -100]]
    assert batch["sample_id"].tolist() == [5, 9]
    padded = CausalLMCollator(tok.pad_token_id, pad_to_multiple_of=4)([{"input_ids": [1]}])
    assert padded["input_ids"].shape == (1, 4) and "sample_id" not in padded


def test_dataset_length_and_order_do_not_depend_on_max_length() -> None:
    texts = generate_texts(30, max_chars=300)
    assert texts == generate_texts(30, max_chars=300)
    assert texts != generate_texts(30, max_chars=300, seed=99)
    assert all(16 <= len(t) <= 300 for t in texts)
    tok = ByteTokenizer()
    long, short = TextDataset(texts, tok, 512), TextDataset(texts, tok, 32)
    assert len(long) == len(short) == 30
    for i in range(30):
        assert long[i]["sample_id"] == short[i]["sample_id"] == i
        assert short[i]["input_ids"] == long[i]["input_ids"][:32]


def test_fault_spec_parsing_and_conditions() -> None:
    (oom,) = parse_faults("oom:micro_above=4:at_step=4")
    assert oom == Fault(kind="oom", at_step=4, micro_above=4)
    assert not oom.due(step=3, micro=8, max_length=None, rank=0, attempt=None)
    assert oom.due(step=4, micro=8, max_length=None, rank=0, attempt=None)
    assert oom.due(step=9, micro=8, max_length=None, rank=0, attempt=None)
    assert not oom.due(step=4, micro=4, max_length=None, rank=0, attempt=None)
    kill, hang = parse_faults("sigkill:at_step=2:attempt=1:rank=1, hang")
    assert kill.due(step=2, micro=1, max_length=None, rank=1, attempt=1)
    assert not kill.due(step=2, micro=1, max_length=None, rank=0, attempt=1)
    assert not kill.due(step=2, micro=1, max_length=None, rank=1, attempt=2)
    assert hang.due(step=1, micro=1, max_length=None, rank=0, attempt=None)
    (trunc,) = parse_faults("host_oom:max_length_above=64")
    assert trunc.due(step=1, micro=1, max_length=128, rank=0, attempt=None)
    assert not trunc.due(step=1, micro=1, max_length=64, rank=0, attempt=None)
    assert parse_faults("") == ()
    for bad in ("boom", "oom:micro_above", "oom:micro_above=x", "oom:colour=3"):
        with pytest.raises(ValueError, match="DSGUARD_FAULT"):
            parse_faults(bad)


def test_default_lora_targets_are_the_attention_projections() -> None:
    from dsguard.train.trainer import ModelArguments, build_model, default_lora_targets

    model = build_model(ModelArguments(model_preset="tiny"), ByteTokenizer(), seed=1)
    assert default_lora_targets(model) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    again = build_model(ModelArguments(model_preset="tiny"), ByteTokenizer(), seed=1)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert a.equal(b), name  # seeded random init: runs and phases start identical


# -- real training ------------------------------------------------------------------------------


@pytest.mark.train
def test_plain_run_writes_complete_checkpoints_and_final_model(plain_ref: Reference) -> None:
    out = plain_ref.out
    assert "dsguard.train: finished global_step=8/8" in plain_ref.proc.stdout
    for step in (3, 6, 8):
        assert_complete(out / f"checkpoint-{step}", deepspeed=False)
    assert {"model.safetensors", "config.json", "dsguard_tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    trace = plain_ref.trace
    assert sorted(trace) == list(range(1, 9))
    assert all(r["micro"] == 8 and r["accum"] == 1 for r in trace.values())
    epoch0 = [i for s in range(1, 6) for i in trace[s]["sample_ids"]]
    assert sorted(epoch0) == list(range(40))  # one epoch = every sample exactly once
    assert trace[8]["loss"] < trace[1]["loss"]


@pytest.mark.train
def test_deepspeed_zero2_run_writes_complete_checkpoints(zero2_ref: Reference) -> None:
    assert "deepspeed=True" in zero2_ref.proc.stdout
    for step in (3, 6, 8):
        assert_complete(zero2_ref.out / f"checkpoint-{step}", deepspeed=True)
    assert (zero2_ref.out / "model.safetensors").is_file()
    assert sorted(zero2_ref.trace) == list(range(1, 9))


@pytest.fixture(params=["plain", "zero2"])
def reference(request: pytest.FixtureRequest) -> Reference:
    ref = request.getfixturevalue(f"{request.param}_ref")
    assert isinstance(ref, Reference)
    return ref


@pytest.mark.train
def test_ladder_move_8x1_to_4x2_resumes_exactly(reference: Reference, tmp_path: Path) -> None:
    """Micro 8 OOMs at step 4 (after checkpoint-3); resumed at 4x2 it replays the same run."""
    env = {"DSGUARD_SAMPLE_TRACE": str(tmp_path / "trace.jsonl")}
    env["DSGUARD_FAULT"] = "oom:micro_above=4:at_step=4"
    first = run_trainer(tmp_path, *argv(**reference.extra), **env)
    assert first.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in first.stderr
    ckpt = tmp_path / "out" / "checkpoint-3"
    assert_complete(ckpt, deepspeed=reference.deepspeed)
    assert not (tmp_path / "out" / "checkpoint-4").exists()

    resume = argv(
        **reference.extra,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        resume_from_checkpoint=ckpt,
    )
    ok(run_trainer(tmp_path, *resume, **env))
    got = by_step(read_trace(tmp_path / "trace.jsonl"))
    assert sorted(got) == list(range(1, 9))
    for step in range(1, 9):
        want, have = reference.trace[step], got[step]
        assert have["sample_ids"] == want["sample_ids"], step
        assert (have["micro"], have["accum"]) == ((8, 1) if step <= 3 else (4, 2))
        if step <= 3:
            assert have["loss"] == want["loss"], step  # same config, same seed: bit-identical
        else:
            assert have["loss"] == pytest.approx(want["loss"], rel=LOSS_RTOL), step
    assert_complete(tmp_path / "out" / "checkpoint-8", deepspeed=reference.deepspeed)


@pytest.mark.train
def test_lower_max_length_on_resume_keeps_sample_ids(plain_ref: Reference, tmp_path: Path) -> None:
    """The max_length rung: per-example truncation keeps the dataset's length and order."""
    env = {"DSGUARD_SAMPLE_TRACE": str(tmp_path / "trace.jsonl")}
    env["DSGUARD_FAULT"] = "oom:max_length_above=64:at_step=4"
    first = run_trainer(tmp_path, *argv(), **env)
    assert first.returncode == 1 and "CUDA out of memory" in first.stderr
    ckpt = tmp_path / "out" / "checkpoint-3"
    ok(run_trainer(tmp_path, *argv(model_max_length=64, resume_from_checkpoint=ckpt), **env))
    got = by_step(read_trace(tmp_path / "trace.jsonl"))
    assert sorted(got) == list(range(1, 9))
    for step in range(1, 9):
        assert got[step]["sample_ids"] == plain_ref.trace[step]["sample_ids"], step
    assert [got[s]["loss"] for s in (1, 2, 3)] == [plain_ref.trace[s]["loss"] for s in (1, 2, 3)]


@pytest.mark.train
def test_init_from_loads_weights_before_lora(plain_ref: Reference, tmp_path: Path) -> None:
    """DSGUARD_INIT_FROM == starting from that checkpoint's weights; LoRA wraps them after."""
    ckpt = plain_ref.out / "checkpoint-3"
    common: dict[str, object] = {"max_steps": 1, "lora_enable": "true"}
    init = run_trainer(
        tmp_path,
        *argv(**common, output_dir="init"),
        DSGUARD_INIT_FROM=str(ckpt),
        DSGUARD_SAMPLE_TRACE=str(tmp_path / "init.jsonl"),
    )
    assert "lora=True" in ok(init).stdout
    local = run_trainer(
        tmp_path,
        *argv(**common, output_dir="local", model_preset=None, model_name_or_path=ckpt),
        DSGUARD_SAMPLE_TRACE=str(tmp_path / "local.jsonl"),
    )
    assert "lora=True" in ok(local).stdout
    from_init = read_trace(tmp_path / "init.jsonl")[0]
    from_local = read_trace(tmp_path / "local.jsonl")[0]
    assert from_init["sample_ids"] == from_local["sample_ids"] == plain_ref.trace[1]["sample_ids"]
    assert from_init["loss"] == pytest.approx(from_local["loss"], rel=1e-6)
    assert from_init["loss"] < plain_ref.trace[1]["loss"] - 0.05  # trained, not random, weights
    final = {p.name for p in (tmp_path / "init").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= final
    adapter = json.loads((tmp_path / "init" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]


@pytest.mark.train
def test_sigkill_fault_fires_after_the_checkpoint_and_only_in_its_attempt(tmp_path: Path) -> None:
    fault = "sigkill:at_step=2:attempt=1"
    killed = run_trainer(tmp_path, *argv(save_steps=1), DSGUARD_FAULT=fault, DSGUARD_ATTEMPT="1")
    assert killed.returncode == -signal.SIGKILL
    assert_complete(tmp_path / "out" / "checkpoint-1", deepspeed=False)
    assert not (tmp_path / "out" / "checkpoint-2").exists()
    resumed = run_trainer(
        tmp_path,
        *argv(save_steps=1, max_steps=2, resume_from_checkpoint="true"),
        DSGUARD_FAULT=fault,
        DSGUARD_ATTEMPT="2",
    )
    assert "global_step=2/2" in ok(resumed).stdout


@pytest.mark.train
def test_zero3_starts_from_the_same_weights_and_honours_init_from(
    zero2_ref: Reference, tmp_path: Path
) -> None:
    """Random init is built outside ``zero.Init``, so a ZeRO-3 run (a new phase of the ladder)
    starts where ZeRO-2 did, and ``DSGUARD_INIT_FROM`` can load full weights before wrapping."""
    config = json.loads(ZERO2_CPU.read_text())
    config["zero_optimization"] = {"stage": 3}
    zero3 = tmp_path / "zero3-cpu.json"
    zero3.write_text(json.dumps(config))
    fresh = run_trainer(
        tmp_path,
        *argv(deepspeed=zero3, max_steps=1, output_dir="fresh"),
        DSGUARD_SAMPLE_TRACE=str(tmp_path / "fresh.jsonl"),
    )
    ok(fresh)
    (step1,) = read_trace(tmp_path / "fresh.jsonl")
    assert step1["sample_ids"] == zero2_ref.trace[1]["sample_ids"]
    assert step1["loss"] == pytest.approx(zero2_ref.trace[1]["loss"], rel=1e-6)
    init = run_trainer(
        tmp_path,
        *argv(deepspeed=zero3, max_steps=1, output_dir="init"),
        DSGUARD_SAMPLE_TRACE=str(tmp_path / "init.jsonl"),
        DSGUARD_INIT_FROM=str(zero2_ref.out / "checkpoint-3"),
    )
    ok(init)
    (from_ckpt,) = read_trace(tmp_path / "init.jsonl")
    assert from_ckpt["loss"] < step1["loss"] - 0.05
