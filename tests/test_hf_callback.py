"""``DsguardCallback``: heartbeats, save-and-stop, GPU cap; unit tests and real Trainer runs.

Unit tests drive the callback's events directly with a real ``TrainerState`` / ``TrainerControl``
(milliseconds). The ``train`` ones run real training: an ordinary HF Trainer script in-process
(the one-line integration), the reference trainer in a child process, and two DeepSpeed ranks
under torchrun (the rank-consistent stop decision through an all-reduce).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState

from dsguard import protocol
from dsguard.integrations.hf import DsguardCallback
from dsguard.run.checkpoints import inspect_checkpoint
from tests.test_train_reference import ZERO2_CPU, argv, ok, read_trace, run_trainer, trainer_env


def guard_env(tmp: Path, extra: dict[str, str] | None = None, attempt: int = 3) -> dict[str, str]:
    env = {
        protocol.HEARTBEAT_DIR_ENV: str(tmp / "hb"),
        protocol.CONTROL_DIR_ENV: str(tmp / "ctl"),
        protocol.ATTEMPT_ENV: str(attempt),
        protocol.RUN_ID_ENV: "test-run",
    }
    env.update(extra or {})
    return env


def fake_args(tmp: Path, rank: int = 0) -> Any:
    return cast(
        Any, SimpleNamespace(process_index=rank, local_process_index=rank, output_dir=str(tmp))
    )


def read_beat(tmp: Path, attempt: int = 3, rank: int = 0) -> protocol.Heartbeat:
    path = protocol.heartbeat_path(tmp / "hb", attempt, rank)
    return protocol.decode_heartbeat(path.read_bytes())


def request_stop(tmp: Path, attempt: int = 3) -> Path:
    path = protocol.stop_request_path(tmp / "ctl", attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    return path


# -- unit tests ---------------------------------------------------------------------------------


def test_inert_without_heartbeat_dir(tmp_path: Path) -> None:
    env = guard_env(tmp_path)
    del env[protocol.HEARTBEAT_DIR_ENV]
    request_stop(tmp_path)
    cb = DsguardCallback(env=env)
    state, control = TrainerState(global_step=1, max_steps=4), TrainerControl()
    for event in ("on_train_begin", "on_step_end", "on_save", "on_train_end"):
        getattr(cb, event)(fake_args(tmp_path), state, control)
    assert not cb.enabled and not cb.stop_requested
    assert not control.should_save and not control.should_training_stop
    assert not (tmp_path / "hb").exists()


def test_heartbeats_follow_the_protocol(tmp_path: Path) -> None:
    cb = DsguardCallback(env=guard_env(tmp_path, {protocol.HEARTBEAT_EVERY_ENV: "2"}))
    args, control = fake_args(tmp_path), TrainerControl()
    state = TrainerState(global_step=0, max_steps=4, epoch=0.0)
    cb.on_train_begin(args, state, control)
    beat = read_beat(tmp_path)
    assert (beat.event, beat.global_step, beat.max_steps, beat.attempt) == ("train_begin", 0, 4, 3)
    assert beat.pid == os.getpid() and beat.rank == 0
    assert beat.host_rss_bytes is not None and beat.host_rss_bytes > 0
    assert beat.max_memory_allocated_bytes is None and beat.num_ooms is None  # no CUDA here
    assert beat.capabilities == ("heartbeat", "save_and_stop", "gpu_memory_fraction")

    cb.on_log(args, state, control, logs={"loss": 2.5, "learning_rate": 1e-3})
    state.global_step, state.epoch = 1, 0.25
    cb.on_step_end(args, state, control)
    assert read_beat(tmp_path).event == "train_begin"  # every 2 steps only
    state.global_step, state.epoch = 2, 0.5
    cb.on_step_end(args, state, control)
    beat = read_beat(tmp_path)
    assert (beat.event, beat.global_step, beat.loss, beat.epoch) == ("step", 2, 2.5, 0.5)
    cb.on_save(args, state, control)
    beat = read_beat(tmp_path)
    assert beat.event == "save"
    assert beat.last_checkpoint == str(tmp_path.resolve() / "checkpoint-2")
    cb.on_train_end(args, state, control)
    assert read_beat(tmp_path).event == "train_end"
    assert read_beat(tmp_path).last_checkpoint == beat.last_checkpoint
    names = sorted(p.name for p in (tmp_path / "hb").iterdir())
    assert names == ["attempt-3-rank-0.json", "attempt-3-rank-0.jsonl"]
    # The history (what ``dsguard report`` draws): one line per heartbeat written, in order.
    history = protocol.heartbeat_history_path(tmp_path / "hb", 3, 0).read_bytes().splitlines()
    beats = [protocol.decode_heartbeat(line) for line in history]
    assert [(b.event, b.global_step) for b in beats] == [
        ("train_begin", 0), ("step", 2), ("save", 2), ("train_end", 2)
    ]  # fmt: skip
    assert beats[1].loss == 2.5


def test_history_is_compact_and_thinned_on_other_ranks(tmp_path: Path) -> None:
    """Rank 0 appends every heartbeat (its loss is the curve); other ranks every 10th step
    heartbeat and every other event, so eight ranks do not write eight full histories."""
    counts = {}
    for rank in (0, 1):
        cb = DsguardCallback(env=guard_env(tmp_path, {"RANK": str(rank)}))
        args, control = fake_args(tmp_path, rank), TrainerControl()
        state = TrainerState(global_step=0, max_steps=25, epoch=0.0)
        cb.on_train_begin(args, state, control)
        for step in range(1, 26):
            state.global_step = step
            cb.on_step_end(args, state, control)
        cb.on_train_end(args, state, control)
        path = protocol.heartbeat_history_path(tmp_path / "hb", 3, rank)
        lines = [json.loads(x) for x in path.read_bytes().splitlines()]
        assert set(lines[0]) <= set(protocol.HISTORY_FIELDS)
        assert lines[0]["event"] == "train_begin" and lines[-1]["event"] == "train_end"
        counts[rank] = [x["global_step"] for x in lines]
    assert counts[0] == [0, *range(1, 26), 25]
    assert counts[1] == [0, 10, 20, 25]


def test_reference_trainer_announces_transplant_and_init_from(tmp_path: Path) -> None:
    cb = DsguardCallback(reference_trainer=True, extra_capabilities=["x"], env=guard_env(tmp_path))
    assert cb.capabilities == (
        "heartbeat",
        "save_and_stop",
        "gpu_memory_fraction",
        "zero_transplant",
        "init_from",
        "x",
    )


def test_stop_request_sets_save_and_stop_once(tmp_path: Path) -> None:
    cb = DsguardCallback(env=guard_env(tmp_path))
    args, control = fake_args(tmp_path), TrainerControl()
    state = TrainerState(global_step=1, max_steps=9)
    request_stop(tmp_path, attempt=2)  # another attempt's request: not ours
    cb.on_step_end(args, state, control)
    assert not control.should_training_stop and not cb.stop_requested
    request_stop(tmp_path)
    state.global_step = 2
    cb.on_step_end(args, state, control)
    assert control.should_save and control.should_training_stop and cb.stop_requested
    assert read_beat(tmp_path).event == "stop_requested"


def test_only_rank_zero_reads_the_request(tmp_path: Path) -> None:
    """Without a process group a non-zero rank never stops on its own (it would desync)."""
    env = guard_env(tmp_path, {"RANK": "1", "LOCAL_RANK": "1"})
    cb = DsguardCallback(env=env)
    request_stop(tmp_path)
    control = TrainerControl()
    cb.on_step_end(fake_args(tmp_path, rank=1), TrainerState(global_step=1), control)
    assert not control.should_training_stop
    assert read_beat(tmp_path, rank=1).rank == 1


def test_stop_checks_every_k_steps(tmp_path: Path) -> None:
    cb = DsguardCallback(stop_check_every=3, env=guard_env(tmp_path))
    request_stop(tmp_path)
    control = TrainerControl()
    for step in (1, 2):
        cb.on_step_end(fake_args(tmp_path), TrainerState(global_step=step), control)
        assert not control.should_training_stop
    cb.on_step_end(fake_args(tmp_path), TrainerState(global_step=3), control)
    assert control.should_training_stop


def test_heartbeat_failure_is_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "hb").write_text("a file where the heartbeat dir should be")
    cb = DsguardCallback(env=guard_env(tmp_path))
    caplog.set_level(logging.WARNING, logger="dsguard.integrations.hf")
    for step in range(1, 4):
        cb.on_step_end(fake_args(tmp_path), TrainerState(global_step=step), TrainerControl())
    cb.on_train_end(fake_args(tmp_path), TrainerState(global_step=3), TrainerControl())
    failures = [r for r in caplog.records if "heartbeat write failed" in r.getMessage()]
    assert len(failures) == 1


def test_gpu_memory_fraction_is_validated_and_needs_cuda(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    caplog.set_level(logging.WARNING, logger="dsguard.integrations.hf")
    DsguardCallback(env=guard_env(tmp_path, {protocol.GPU_MEMORY_FRACTION_ENV: "1.5"}))
    assert any("want 0 < f <= 1" in r.getMessage() for r in caplog.records)
    cb = DsguardCallback(env=guard_env(tmp_path, {protocol.GPU_MEMORY_FRACTION_ENV: "0.5"}))
    assert cb._gpu_fraction == 0.5
    assert cb._gpu_fraction_applied == torch.cuda.is_available()


# -- real training ------------------------------------------------------------------------------


@pytest.mark.train
def test_one_line_integration_in_a_plain_trainer_script_stops_mid_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any HF Trainer script: ``trainer.add_callback(DsguardCallback())``; a request arriving
    while training runs stops it at the next step with a complete checkpoint."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from dsguard.train.data import CausalLMCollator, TextDataset, generate_texts
    from dsguard.train.tokenizer import ByteTokenizer
    from dsguard.train.trainer import ModelArguments, build_model

    for key, value in guard_env(tmp_path).items():
        monkeypatch.setenv(key, value)

    class RequestAtStep2(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 2:
                request_stop(tmp_path)  # what the supervisor does, mid-run

    tok = ByteTokenizer()
    trainer = Trainer(
        model=build_model(ModelArguments(model_preset="tiny"), tok, seed=0),
        args=TrainingArguments(
            output_dir=str(tmp_path / "out"),
            per_device_train_batch_size=4,
            max_steps=10,
            save_strategy="no",
            logging_steps=1,
            report_to="none",
            disable_tqdm=True,
            dataloader_pin_memory=False,
            remove_unused_columns=False,
        ),
        train_dataset=TextDataset(generate_texts(40, max_chars=100), tok, 64),
        data_collator=lambda features: {
            k: v
            for k, v in CausalLMCollator(tok.pad_token_id)(features).items()
            if k != "sample_id"
        },
        callbacks=[RequestAtStep2()],
    )
    guard = DsguardCallback()
    trainer.add_callback(guard)
    trainer.train()
    assert guard.stop_requested and trainer.state.global_step == 2
    ckpt = tmp_path / "out" / "checkpoint-2"
    assert inspect_checkpoint(ckpt, world_size=1).complete  # saved although save_strategy="no"
    beat = read_beat(tmp_path)
    assert (beat.event, beat.global_step, beat.max_steps) == ("train_end", 2, 10)
    assert beat.last_checkpoint == str(ckpt.resolve()) and beat.loss is not None


@pytest.mark.train
def test_reference_trainer_heartbeats(tmp_path: Path) -> None:
    ok(run_trainer(tmp_path, *argv(max_steps=4), **guard_env(tmp_path)))
    beat = read_beat(tmp_path)
    assert (beat.event, beat.global_step, beat.max_steps) == ("train_end", 4, 4)
    assert beat.loss is not None and beat.epoch == pytest.approx(0.8)
    assert beat.last_checkpoint == str((tmp_path / "out" / "checkpoint-4").resolve())
    assert {"zero_transplant", "init_from", "save_and_stop"} <= set(beat.capabilities)


@pytest.mark.train
def test_stop_request_saves_a_complete_checkpoint_and_exits_0(tmp_path: Path) -> None:
    request_stop(tmp_path)
    proc = ok(run_trainer(tmp_path, *argv(save_steps=100), **guard_env(tmp_path)))
    assert "stopped on request global_step=1/8" in proc.stdout
    ckpt = tmp_path / "out" / "checkpoint-1"
    assert inspect_checkpoint(ckpt, world_size=1).complete
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["global_step"] == 1 < state["max_steps"]
    assert not (tmp_path / "out" / "model.safetensors").exists()  # no "final" model
    assert read_beat(tmp_path).last_checkpoint == str(ckpt.resolve())


@pytest.mark.train
def test_two_deepspeed_ranks_agree_on_the_stop_step(tmp_path: Path) -> None:
    """Only rank 0 reads the request; the all-reduced flag stops both ranks at the same step
    (with heartbeat/stop checks every 2 steps: step 2), so the collective save completes."""
    request_stop(tmp_path)
    env = trainer_env(
        **guard_env(tmp_path, {protocol.HEARTBEAT_EVERY_ENV: "2"}),
        DSGUARD_SAMPLE_TRACE=str(tmp_path / "trace.jsonl"),
        OMP_NUM_THREADS="1",
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--standalone", "-m", "dsguard.train"]
    cmd += argv(per_device_train_batch_size=4, deepspeed=ZERO2_CPU)
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "stopped on request global_step=2/8" in proc.stdout and "world=2" in proc.stdout
    ckpt = tmp_path / "out" / "checkpoint-2"
    verdict = inspect_checkpoint(ckpt, world_size=2)
    assert verdict.complete and verdict.zero_stage_hint == 2
    for rank in (0, 1):
        beat = read_beat(tmp_path, rank=rank)
        assert (beat.rank, beat.event, beat.global_step) == (rank, "train_end", 2)
    ranks = [read_trace(tmp_path / f"trace.jsonl.rank{r}") for r in (0, 1)]
    assert [[r["global_step"] for r in t] for t in ranks] == [[1, 2], [1, 2]]
    ids = [i for t in ranks for r in t for i in r["sample_ids"]]
    assert len(ids) == len(set(ids)) == 16  # global batch 8 per step, split across ranks
