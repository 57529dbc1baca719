"""End to end: the real CLI supervises real child processes through failures and healing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import RunResult, dsguard_cmd, write_job

pytestmark = pytest.mark.e2e


def _steps(trace: list[dict[str, object]]) -> dict[object, object]:
    """optimizer step -> sample ids it consumed (the last attempt that ran the step wins)."""
    return {r["step"]: r["sample_ids"] for r in trace if r["event"] == "step"}


def test_oom_heals_to_micro_2_keeping_global_batch(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """OOM at micro 8 that fits at micro 2: succeeds at accum x4, same global batch, resumed."""
    write_job(tmp_path, ["--scenario", "oom", "--oom_above", "2", "--fail_at_step", "3"])
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr

    starts = [r for r in res.trace if r["event"] == "start"]
    assert [(s["micro"], s["accum"]) for s in starts] == [(8, 1), (4, 2), (2, 4)]
    # Attempts 2 and 3 resume from the checkpoint attempt 1 wrote at step 2.
    assert starts[0]["resume"] is None
    assert starts[1]["resume"] == str(tmp_path / "out" / "checkpoint-2")
    assert starts[2]["start_step"] == 2

    applied = res.named("policy_applied")
    assert [e["rung"] for e in applied] == ["micro_batch", "micro_batch"]
    assert all(e["global_batch_before"] == e["global_batch_after"] == 8 for e in applied)
    assert applied[0]["changes"] == {
        "micro_batch_size": [8, 4],
        "gradient_accumulation_steps": [1, 2],
    }
    assert all(e["new_phase"] is False for e in applied)

    # transformers <= 5.1 would restore micro 8 from trainer_state.json: patched, recorded.
    patched = res.named("checkpoint_patched")
    assert [(p["old"], p["new"]) for p in patched] == [(8, 4), (4, 2)]

    # Same samples per optimizer step as an uninterrupted run at micro 8 x accum 1.
    assert _steps(res.trace) == {s: [(s - 1) * 8, s * 8 - 1] for s in range(1, 7)}

    # The OOMing attempts hang after the traceback (like ranks stuck in NCCL): dsguard ended
    # them from the output line, not from an exit.
    fatal = res.named("fatal_output_detected")
    assert len(fatal) == 2 and fatal[0]["kind"] == "cuda_oom"
    failures = res.named("failure_detected")
    assert [f["kind"] for f in failures] == ["cuda_oom", "cuda_oom"]
    succeeded = res.named("run_succeeded")
    assert succeeded and succeeded[0]["global_batch"] == succeeded[0]["initial_global_batch"] == 8


def test_every_event_line_has_the_required_keys(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """Each line parses and carries ts, event, run_id, attempt; run-level order is sane."""
    write_job(tmp_path, ["--scenario", "oom", "--oom_above", "4"])
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    raw = (tmp_path / "runs" / "events.jsonl").read_text()
    assert raw.endswith("\n")
    for ev in res.events:
        assert {"ts", "event", "run_id", "attempt"} <= ev.keys()
    names = [e["event"] for e in res.events]
    assert names[0] == "state_changed" or names[0] == "run_started"
    assert names[-1] in ("run_succeeded", "state_changed")
    started = res.named("attempt_started")
    assert [e["attempt"] for e in started] == [1, 2]
    assert started[0]["global_batch"] == 8 and started[0]["knobs"]["micro_batch_size"] == 8
    finished = res.named("attempt_finished")
    assert all(isinstance(e["duration_s"], float) for e in finished)


def test_user_code_error_gives_up_after_one_attempt(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A KeyError in the script is not recoverable: one attempt, exit 1, clear reason."""
    write_job(tmp_path, ["--scenario", "user_error"])
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 1
    assert len(res.named("attempt_started")) == 1
    gave_up = res.named("run_gave_up")
    assert gave_up and gave_up[0]["kind"] == "user_code_error"
    assert "KeyError" in " ".join(res.named("failure_detected")[0]["evidence"])


def test_ladder_exhausted_gives_up(tmp_path: Path, run_dsguard: Callable[..., RunResult]) -> None:
    """Always OOM, ladder = micro_batch only, floor 2: 8 -> 4 -> 2 then run_gave_up, exit 1."""
    write_job(
        tmp_path,
        ["--scenario", "oom", "--oom_above", "0", "--oom_then", "exit"],
        ladder={"oom": ["micro_batch"]},
        limits={"min_micro_batch_size": 2},
    )
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 1
    starts = [r for r in res.trace if r["event"] == "start"]
    assert [s["micro"] for s in starts] == [8, 4, 2]
    gave_up = res.named("run_gave_up")
    assert len(gave_up) == 1
    assert "exhausted" in gave_up[0]["reason"] and "micro_batch" in gave_up[0]["reason"]
    assert gave_up[0]["knobs"]["micro_batch_size"] == 2


def test_truncated_newest_checkpoint_is_quarantined(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """checkpoint-4's weights are 4 bytes short: moved aside (not deleted), resume from 2."""
    write_job(tmp_path, ["--scenario", "truncate_ckpt", "--truncate_at_step", "4"])
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    quarantined = res.named("checkpoint_quarantined")
    assert len(quarantined) == 1
    assert quarantined[0]["path"] == str(tmp_path / "out" / "checkpoint-4")
    moved = Path(quarantined[0]["moved_to"])
    assert moved.parent == tmp_path / "out" / ".dsguard-quarantine"
    assert (moved / "model.safetensors").exists()  # kept, never deleted
    starts = [r for r in res.trace if r["event"] == "start"]
    assert starts[1]["resume"] == str(tmp_path / "out" / "checkpoint-2")
    selected = [e for e in res.named("checkpoint_selected") if e["attempt"] == 2]
    assert selected[0]["step"] == 2


def test_bad_job_file_exits_2_and_launches_nothing(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A typo'd key: FILE:LINE: field: message on stderr, exit 2, no trace, no log dir."""
    job = write_job(tmp_path, ["--scenario", "ok"])
    text = job.read_text().replace("micro_batch_size:", "micro_batch_sise:")
    job.write_text(text)
    res = run_dsguard("run", "job.yaml")
    assert res.code == 2
    line_no = text.splitlines().index("  micro_batch_sise: 8") + 1
    assert f"job.yaml:{line_no}: train.micro_batch_sise:" in res.proc.stderr
    assert not (tmp_path / "trace.jsonl").exists()
    assert not (tmp_path / "runs").exists()


def test_flooding_child_never_blocks(tmp_path: Path, run_dsguard: Callable[..., RunResult]) -> None:
    """40 MB of output in one burst: the run completes and the attempt log has every byte."""
    write_job(tmp_path, ["--scenario", "ok", "--flood_mb", "40"])
    res = run_dsguard("run", "job.yaml", "--quiet", timeout=120)
    assert res.code == 0, res.proc.stderr
    log = tmp_path / "runs" / "attempt-1.log"
    assert log.stat().st_size >= 40 * 10000 * 100
    assert res.named("attempt_finished")[0]["output_bytes"] == log.stat().st_size


def test_attempt_tree_is_ended_but_strangers_survive(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """On OOM every process of the attempt dies (also one in its own session); others live."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        write_job(
            tmp_path,
            ["--scenario", "oom,children", "--oom_above", "4"],
        )
        res = run_dsguard("run", "job.yaml", "--quiet")
        assert res.code == 0, res.proc.stderr
        ended = [e for e in res.named("attempt_ended") if e["attempt"] == 1]
        assert ended, res.events
        assert ended[0]["survivor_pids"] == []
        assert len(ended[0]["terminated_pids"]) >= 3  # trainer + 2 helpers
        for pid in ended[0]["terminated_pids"]:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_unexplained_sigkill_walks_the_host_oom_ladder(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A real SIGKILL nothing explains (the trainer kills itself: no OOM counter rise, no
    memory pressure, no known sender) is judged unknown and answered like a host OOM
    (host_oom_confirmed null), as a careful engineer would; the smaller batch then fits."""
    write_job(
        tmp_path, ["--scenario", "sigkill", "--fail_attempts", "1"],
        ladder={"host_oom": ["micro_batch"]},
    )  # fmt: skip
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    (judged,) = res.named("sigkill_judged")
    assert judged["outcome"] == "unknown" and judged["host_oom"] is True
    failure = res.named("failure_detected")[0]
    assert failure["kind"] == "host_oom" and failure["host_oom_confirmed"] is None
    applied = res.named("policy_applied")
    assert len(applied) == 1 and applied[0]["rung"] == "micro_batch"
    finished = res.named("attempt_finished")
    assert finished[0]["exit_code"] == -9 and finished[0]["signal"] == 9


def _first_step_trainer_pid(workdir: Path) -> int:
    """Wait until the fake trainer has done a step; its pid."""
    trace = workdir / "trace.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "step" not in (
        trace.read_text() if trace.exists() else ""
    ):
        time.sleep(0.05)
    return int(json.loads(trace.read_text().splitlines()[0])["pid"])


def test_sigterm_stops_run_with_143_and_no_child_left(tmp_path: Path) -> None:
    """SIGTERM to dsguard: the trainer is ended, run_stopped logged, exit 143."""
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "100000", "--step_s", "0.05"])
    proc = subprocess.Popen(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    trainer_pid = _first_step_trainer_pid(tmp_path)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == "zombie"
    res = RunResult(subprocess.CompletedProcess([], 143, "", ""), tmp_path)
    assert res.named("run_stopped")[0]["signal"] == signal.SIGTERM


def test_real_host_memory_limit_walks_host_oom_ladder(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """resources.host_memory_limit is a real kernel limit: micro 8 x 48 MiB fails, 4 fits.

    Where dsguard can make a memory cgroup (root on cgroup v1 here) the kernel's OOM killer
    SIGKILLs the trainer and the cgroup's counter confirms it; elsewhere RLIMIT_AS makes the
    allocation raise MemoryError. Both are host_oom."""
    write_job(
        tmp_path,
        ["--scenario", "ok", "--alloc_mb_per_sample", "48"],
        resources={"host_memory_limit": "320MiB"},
        train={"micro_batch_size": 8, "gradient_accumulation_steps": 1, "pin_memory": False},
    )
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    failures = res.named("failure_detected")
    assert [f["kind"] for f in failures] == ["host_oom"]
    (limit,) = res.named("memory_limit_applied")[:1]
    if limit["how"] == "rlimit_as":
        assert "MemoryError" in " ".join(failures[0]["evidence"])
    else:
        assert failures[0]["exit_code"] == -9 and failures[0]["host_oom_confirmed"] is True
        assert "cgroup oom_kill counter +1" in failures[0]["host_oom_evidence"]
    applied = res.named("policy_applied")
    assert [a["rung"] for a in applied] == ["micro_batch"]
    assert applied[0]["global_batch_before"] == applied[0]["global_batch_after"] == 8
    argv = res.named("attempt_started")[0]["argv"]
    assert "dsguard.run.exec_shim" in argv and "--as-bytes" in argv


def test_launcher_gets_sigterm_when_dsguard_is_killed(tmp_path: Path) -> None:
    """Parent-death signal: SIGKILL of dsguard ends the training process it started."""
    write_job(tmp_path, ["--scenario", "ok", "--max_steps", "100000", "--step_s", "0.05"])
    proc = subprocess.Popen(
        dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    trainer_pid = _first_step_trainer_pid(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(trainer_pid):
        if psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(trainer_pid) or (
        psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE
    )


def test_stage_change_without_transplant_is_a_lossy_new_phase(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A trainer that does not announce zero_transplant: the zero3 rung is a logged new phase
    in its own output dir, starting from the initial model (no init_from), and completes."""
    ds = tmp_path / "zero2.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    write_job(
        tmp_path,
        ["--scenario", "oom", "--oom_above", "0", "--fail_attempts", "1", "--oom_then", "exit"],
        deepspeed={"config": str(ds)},
        ladder={"oom": ["zero3"]},
    )
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    applied = res.named("policy_applied")
    assert applied[0]["rung"] == "zero3" and applied[0]["new_phase"] is True
    phase = res.named("phase_started")[0]
    assert phase["init_from"] is None and "initial model" in phase["reason"]
    starts = [r for r in res.trace if r["event"] == "start"]
    assert starts[1]["output_dir"] == str(tmp_path / "out" / "dsguard-phase-2")
    assert starts[1]["resume"] is None
    assert (tmp_path / "out" / "checkpoint-2").exists()  # phase 1 kept


def test_cpu_adam_build_failure_is_healed_by_avoiding_the_op(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """ds_build_error on cpu_adam: env facts gathered, remedy avoid_cpu_adam (DeepSpeed's own
    torch_adam switch, same optimizer hyper-parameters), the next attempt's rendered config
    carries it, and the run completes."""
    ds = tmp_path / "zero2.json"
    ds.write_text(
        '{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",'
        ' "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},'
        ' "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}'
    )
    write_job(tmp_path, ["--scenario", "build_error"], deepspeed={"config": str(ds)})
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    assert [f["kind"] for f in res.named("failure_detected")] == ["ds_build_error"]
    assert res.named("env_facts")
    applied = res.named("remedy_applied")
    assert len(applied) == 1 and applied[0]["remedy"] == "avoid_cpu_adam"
    second = res.named("attempt_started")[1]
    assert second["remedies"] == ["avoid_cpu_adam"]
    rendered = json.loads(Path(second["deepspeed_config"]).read_text())
    assert rendered["optimizer"]["params"]["torch_adam"] is True
    assert rendered["optimizer"]["params"]["lr"] == 1e-4


def test_unhealable_build_failure_gives_up_naming_op_and_error(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """No optimizer block to switch (cpu_adam requested otherwise): give up naming the op and
    the first compiler error line."""
    write_job(tmp_path, ["--scenario", "build_error"])
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 1
    reason = res.named("run_gave_up")[0]["reason"]
    assert "cpu_adam" in reason and "omp.h" in reason
