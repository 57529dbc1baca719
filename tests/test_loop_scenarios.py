"""The run loop against a scripted host: every path of a run, each in milliseconds.

Each scenario scripts the attempts (output lines, exits, heartbeats, checkpoints, GPU memory)
on a :class:`dsguard.testing.FakeHost`, runs the real :class:`Supervisor` on it, and checks
the event log, dsguard's exit code and the final state. Nothing sleeps and no process starts;
the real-process twins of these paths live in test_e2e_run.py and test_unattended.py.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsguard.job.file import load_job
from dsguard.job.model import Job
from dsguard.run.loop import Supervisor
from dsguard.run.sdnotify import Notifier
from dsguard.run.state import State, read_state, write_json_atomic
from dsguard.testing import Beat, FakeHost, Script
from tests.conftest import write_job

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
KEY_ERROR = "KeyError: 'labels'"

#: The fields the three terminal events share (run_stopped adds ``signal``).
TERMINAL_FIELDS = {
    "reason", "kind", "attempts", "knobs", "changes", "global_batch",
    "initial_global_batch", "phase", "duration_s", "tokens_per_step", "initial_tokens_per_step",
}  # fmt: skip
TERMINAL_EVENTS = ("run_succeeded", "run_gave_up", "run_stopped")
_ENVELOPE = {"ts", "event", "run_id", "attempt", "job"}


def oom_attempt(at_s: float = 3.0, line: str = OOM, **kw: Any) -> Script:
    """A rank prints a CUDA OOM; the other ranks sit in NCCL (the launcher never exits)."""
    return Script(lines=((1.0, "step 1"), (at_s, line)), exit_at_s=None, **kw)


def ok_attempt(**kw: Any) -> Script:
    return Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5, **kw)


@dataclass
class Outcome:
    code: int
    events: list[dict[str, Any]]
    state: State
    host: FakeHost

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    @property
    def names(self) -> list[str]:
        return [e["event"] for e in self.events]

    def terminal(self) -> dict[str, Any]:
        (ev,) = [e for e in self.events if e["event"] in TERMINAL_EVENTS]
        return ev


@dataclass
class Scenario:
    name: str
    scripts: list[Script]
    check: Callable[[Outcome], None]
    job: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    #: (fake time, signal): dsguard is asked to stop then.
    stop_at: tuple[float, int] | None = None
    prepare: Callable[[Path, Job], None] | None = None


def _ds_config(tmp_path: Path) -> str:
    """ZeRO-2 with an NVMe optimizer-offload block that lacks nvme_path: harmless while the
    knobs do not offload (the block is dropped), refused once a rung turns offload on."""
    path = tmp_path / "zero2.json"
    path.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}},
            }
        )
    )
    return str(path)


def _recorded_run(tmp_path: Path, job: Job) -> None:
    """A dsguard SIGKILLed at attempt 3 (rung micro 4 x 2) whose attempt lives on."""
    knobs = {**job.knobs.as_dict(), "micro_batch_size": 4, "gradient_accumulation_steps": 2}
    history = [
        {"attempt": n, "kind": "cuda_oom", "uptime_s": 5.0, "progressed": False} for n in (1, 2)
    ]
    write_json_atomic(
        job.log_dir / "state.json",
        {
            "state": "running", "run_id": "old-run", "pid": 999_999,
            "job_knobs": job.knobs.as_dict(),
            "ledger": {"knobs": knobs, "ckpt_dir": None, "positions": {"oom": 0},
                       "history": history, "attempt": 3},
            "current_attempt": {"run_id": "old-run", "attempt": 3, "sid": 31337,
                                "started_epoch_s": 1.0},
        },
    )  # fmt: skip


# -- checks ----------------------------------------------------------------------------------


def check_oom_ladder(o: Outcome) -> None:
    assert o.code == 0 and o.state.state == "succeeded"
    knobs = [(e["knobs"]["micro_batch_size"], e["knobs"]["gradient_accumulation_steps"])
             for e in o.named("attempt_started")]  # fmt: skip
    assert knobs == [(8, 1), (4, 2), (2, 4)]
    applied = o.named("policy_applied")
    assert [e["rung"] for e in applied] == ["micro_batch", "micro_batch"]
    assert all(e["global_batch_before"] == e["global_batch_after"] == 8 for e in applied)
    assert [e["kind"] for e in o.named("fatal_output_detected")] == ["cuda_oom", "cuda_oom"]
    done = o.terminal()
    assert done["event"] == "run_succeeded" and done["kind"] is None
    assert done["global_batch"] == done["initial_global_batch"] == 8
    assert done["attempts"] == 3
    assert done["changes"] == {"micro_batch_size": [8, 2], "gradient_accumulation_steps": [1, 4]}


def check_ladder_exhausted(o: Outcome) -> None:
    assert o.code == 1 and o.state.state == "gave_up"
    done = o.terminal()
    assert done["event"] == "run_gave_up" and done["kind"] == "cuda_oom"
    assert "exhausted" in done["reason"] and done["knobs"]["micro_batch_size"] == 2
    assert done["attempts"] == 3


def check_user_error(o: Outcome) -> None:
    assert o.code == 1
    done = o.terminal()
    assert done["kind"] == "user_code_error" and done["attempts"] == 1
    assert done["changes"] == {}
    assert not o.named("policy_applied")


def check_retry_budget(o: Outcome) -> None:
    assert o.code == 1
    assert len(o.named("attempt_started")) == 3
    done = o.terminal()
    assert done["kind"] == "nccl_error" and "retry budget 2" in done["reason"]


def check_deterministic_device_fault(o: Outcome) -> None:
    """A GPU fault an unchanged relaunch meets again (no GPU visible) ends the run after one
    attempt, naming where to look, instead of spending cuda_fatal's same-config retry."""
    assert o.code == 1 and len(o.named("attempt_started")) == 1
    done = o.terminal()
    assert done["kind"] == "cuda_fatal" and "unchanged retry meets the same fault" in done["reason"]
    assert "CUDA_VISIBLE_DEVICES" in done["reason"]


def check_max_attempts(o: Outcome) -> None:
    assert o.code == 1
    done = o.terminal()
    assert "max_attempts (2)" in done["reason"] and done["attempts"] == 2


def check_preflight_later_rung(o: Outcome) -> None:
    assert o.code == 1 and o.state.state == "gave_up"
    assert len(o.named("attempt_started")) == 1
    assert o.named("preflight_refused")
    done = o.terminal()
    assert "nvme_path" in done["reason"] and done["attempts"] == 1
    assert done["knobs"]["offload"] == "optimizer"


def check_spawn_failure(o: Outcome) -> None:
    assert o.code == 1
    assert o.named("attempt_not_started") and not o.named("attempt_started")
    done = o.terminal()
    assert "cannot start" in done["reason"] and done["attempts"] == 0


def check_gpu_held(o: Outcome) -> None:
    assert o.code == 1
    assert len(o.named("attempt_started")) == 1
    (checked,) = o.named("gpu_release_checked")
    assert checked["status"] == "held"
    done = o.terminal()
    assert "still held" in done["reason"]
    # The decided rung is already in the ledger: the knobs are the ones it would relaunch with.
    assert done["knobs"]["micro_batch_size"] == 4


def check_recovery(o: Outcome) -> None:
    assert o.code == 0
    (rec,) = o.named("run_recovered")
    assert rec["leftover_pids"] == [31337] and rec["attempts_so_far"] == 3
    assert o.host.release_waits[0] == [31337]
    (started,) = o.named("attempt_started")
    assert started["attempt"] == 4 and started["knobs"]["micro_batch_size"] == 4
    done = o.terminal()
    assert done["attempts"] == 4 and done["global_batch"] == 8


def check_stop_in_backoff(o: Outcome) -> None:
    assert o.code == 128 + signal.SIGTERM and o.state.state == "stopped"
    assert len(o.named("attempt_started")) == 1
    assert o.named("policy_applied")[0]["delay_s"] == 30.0
    done = o.terminal()
    assert done["signal"] == signal.SIGTERM and done["kind"] is None and done["attempts"] == 1
    states = [e["to_state"] for e in o.named("state_changed")]
    assert states[-2:] == ["backoff", "stopped"]


def check_stop_in_attempt(o: Outcome) -> None:
    assert o.code == 128 + signal.SIGINT and o.state.state == "stopped"
    assert o.host.stop_requests, "the trainer announced save_and_stop: it is asked first"
    (saved,) = o.named("stop_save_finished")
    assert saved["exited"] is True and saved["exit_code"] == 0
    (fin,) = o.named("attempt_finished")
    assert fin["ended_by"] == "stop"
    done = o.terminal()
    assert done["event"] == "run_stopped" and done["signal"] == signal.SIGINT
    assert not o.named("failure_detected")


def check_race_fatal_then_exit_0(o: Outcome) -> None:
    """Ended for an OOM line, exited 0 in the grace: the OOM stands (a legal ending -> backoff)."""
    assert o.code == 0
    first = o.named("attempt_finished")[0]
    assert first["ended_by"] == "fatal" and first["exit_code"] == 0
    assert o.named("failure_detected")[0]["kind"] == "cuda_oom"
    moves = [(e["from_state"], e["to_state"]) for e in o.named("state_changed")]
    assert ("ending", "backoff") in moves and ("ending", "succeeded") not in moves
    assert o.terminal()["attempts"] == 2


def check_race_exit_0_first(o: Outcome) -> None:
    """The launcher had exited 0 before dsguard sent anything: it succeeded."""
    assert o.code == 0
    assert not o.named("fatal_output_detected") and not o.named("failure_detected")
    (fin,) = o.named("attempt_finished")
    assert fin["ended_by"] == "exit" and fin["exit_code"] == 0
    assert o.terminal()["attempts"] == 1


def check_hang(o: Outcome) -> None:
    assert o.code == 0
    (hang,) = o.named("hang_detected")
    assert hang["silent_s"] > 30
    assert o.named("failure_detected")[0]["kind"] == "hang"
    assert not o.named("hang_suspected")


def check_busy_not_hang(o: Outcome) -> None:
    assert o.code == 0
    assert len(o.named("hang_suspected")) == 1 and not o.named("hang_detected")
    assert len(o.named("attempt_started")) == 1


def check_unconfirmed_kill(o: Outcome) -> None:
    """A bare -9 nothing explains: unknown, and answered like a host OOM (issue 12)."""
    assert o.code == 0
    failure = o.named("failure_detected")[0]
    assert failure["kind"] == "host_oom" and failure["host_oom_confirmed"] is None
    assert o.named("sigkill_judged")[0]["outcome"] == "unknown"
    assert o.named("policy_applied")[0]["rung"] == "micro_batch"


def check_confirmed_kill(o: Outcome) -> None:
    assert o.code == 0
    failure = o.named("failure_detected")[0]
    assert failure["kind"] == "host_oom" and failure["host_oom_confirmed"] is True
    assert "cgroup oom_kill counter +1" in failure["host_oom_evidence"]
    assert any("kernel log" in x for x in failure["host_oom_evidence"])
    assert o.named("policy_applied")[0]["rung"] == "micro_batch"


def check_new_phase(o: Outcome) -> None:
    assert o.code == 0
    (phase,) = o.named("phase_started")
    assert phase["phase"] == 2 and phase["output_dir"].endswith("out/dsguard-phase-2")
    assert o.named("attempt_started")[1]["output_dir"] == phase["output_dir"]
    done = o.terminal()
    assert done["phase"] == 2 and done["changes"] == {"lora": [False, True]}


def check_quarantine(o: Outcome) -> None:
    assert o.code == 0
    (q,) = o.named("checkpoint_quarantined")
    assert q["path"].endswith("checkpoint-4") and q["step"] == 4
    selected = o.named("checkpoint_selected")
    assert selected[0]["path"].endswith("checkpoint-2") and selected[0]["step"] == 2
    assert o.named("attempt_started")[0]["resume_from"].endswith("checkpoint-2")
    assert [p.name for p in o.host.quarantined] == ["checkpoint-4"]


def check_stop_during_quarantine(o: Outcome) -> None:
    """A stop request arriving while thousands of bad checkpoints are set aside is honoured
    between two moves: no attempt is launched after it, and the rest stay where they are."""
    assert o.code == 128 + signal.SIGTERM and o.state.state == "stopped"
    assert not o.named("attempt_started") and not o.host.attempts
    moved = len(o.host.quarantined)
    assert 0 < moved < 3000 and len(o.named("checkpoint_quarantined")) == moved
    done = o.terminal()
    assert done["signal"] == signal.SIGTERM and done["attempts"] == 0


def check_stop_during_gpu_release_wait(o: Outcome) -> None:
    """A stop arriving while the next attempt waits for the last one's GPU memory: the run
    stops there, the relaunch never happens."""
    assert o.code == 128 + signal.SIGTERM and o.state.state == "stopped"
    assert len(o.named("attempt_started")) == 1 and len(o.host.attempts) == 1
    assert o.terminal()["attempts"] == 1


SCENARIOS = [
    # Activation OOMs shrink with the micro-batch (2 GiB at 8, 1 GiB at 4): the same size
    # at three micro-batches would say the batch is not the problem (core.evidence).
    Scenario("oom_ladder_walk_keeps_global_batch",
             [oom_attempt(), oom_attempt(line=OOM.replace("2.00", "1.00")), ok_attempt()],
             check_oom_ladder),
    Scenario("ladder_exhausted", [oom_attempt()] * 3, check_ladder_exhausted,
             job={"ladder": {"oom": ["micro_batch"]}, "limits": {"min_micro_batch_size": 2}}),
    Scenario("user_error_gives_up_at_once",
             [Script(lines=((1.0, "Traceback (most recent call last):"), (1.1, KEY_ERROR)),
                     exit_code=1, exit_at_s=1.5)], check_user_error),
    Scenario("retry_budget_spent",
             [Script(lines=((1.0, "torch.distributed.DistBackendError: NCCL error in: x.cpp:1,"
                                  " unhandled system error"),), exit_code=1, exit_at_s=2.0)] * 3,
             check_retry_budget),
    Scenario("no_visible_gpu_is_not_retried",
             [Script(lines=((1.0, "RuntimeError: No CUDA GPUs are available"),), exit_code=1,
                     exit_at_s=1.5)] * 2,
             check_deterministic_device_fault),
    Scenario("max_attempts_reached", [oom_attempt()] * 2, check_max_attempts,
             job={"limits": {"max_attempts": 2}}),
    Scenario("preflight_refuses_a_later_rung", [oom_attempt()], check_preflight_later_rung,
             job={"ladder": {"oom": ["offload_optimizer"]},
                  "train": {"zero_stage": 2, "offload": "none"},
                  "deepspeed": "DS"}),
    Scenario("spawn_failure", [Script(spawn_error="No such file or directory")],
             check_spawn_failure),
    Scenario("gpu_memory_never_released", [oom_attempt(gpu="held")], check_gpu_held),
    Scenario("recovery_after_supervisor_crash", [ok_attempt()], check_recovery,
             host={"leftovers": {3: (31337,)}}, prepare=_recorded_run),
    Scenario("stop_during_backoff",
             [Script(exit_code=1, exit_at_s=2.0), ok_attempt()], check_stop_in_backoff,
             job={"limits": {"backoff_s": [30, 60]}}, stop_at=(10.0, signal.SIGTERM)),
    Scenario("stop_during_attempt",
             [Script(exit_at_s=None, save_on_stop_s=3.0,
                     heartbeats=(Beat(1.0, 1, capabilities=("save_and_stop",)),))],
             check_stop_in_attempt, stop_at=(5.0, signal.SIGINT)),
    Scenario("race_fatal_line_then_exit_0_during_grace",
             [Script(lines=((5.0, OOM),), exit_at_s=5.5), ok_attempt()],
             check_race_fatal_then_exit_0),
    Scenario("race_exit_0_before_any_signal",
             [Script(lines=((5.0, OOM),), exit_at_s=5.0)], check_race_exit_0_first),
    Scenario("hang_no_output_no_heartbeat_gpu_idle",
             [Script(lines=((1.0, "step 1"),), exit_at_s=None, gpu_busy_until_s=0.0),
              ok_attempt()], check_hang, job={"limits": {"hang_timeout_s": 30}}),
    Scenario("silent_but_busy_gpu_is_not_a_hang",
             [Script(lines=((1.0, "eval starts"), (100.0, "eval done")), exit_at_s=101.0,
                     gpu_busy_until_s=200.0)], check_busy_not_hang,
             job={"limits": {"hang_timeout_s": 30}}),
    Scenario("unconfirmed_sigkill_walks_the_host_oom_ladder",
             [Script(exit_code=-9, exit_at_s=3.0), ok_attempt()], check_unconfirmed_kill,
             job={"ladder": {"host_oom": ["micro_batch"]}}),
    Scenario("confirmed_sigkill_walks_the_host_oom_ladder",
             [Script(exit_code=-9, exit_at_s=3.0, oom_kills=1, kernel_oom=True), ok_attempt()],
             check_confirmed_kill, job={"ladder": {"host_oom": ["micro_batch"]}}),
    Scenario("new_phase_lora", [oom_attempt(), ok_attempt()], check_new_phase,
             job={"ladder": {"oom": ["lora"]}, "flags": {"lora": "--use_lora"}}),
    Scenario("quarantined_newest_checkpoint", [ok_attempt()], check_quarantine,
             host={"checkpoints": {2: True, 4: False}}),
    Scenario("stop_during_checkpoint_quarantine", [ok_attempt()], check_stop_during_quarantine,
             host={"checkpoints": dict.fromkeys(range(1, 3001), False), "quarantine_s": 0.01},
             stop_at=(5.0, signal.SIGTERM)),
    Scenario("stop_during_gpu_release_wait",
             [Script(exit_code=1, exit_at_s=2.0), ok_attempt()],
             check_stop_during_gpu_release_wait, stop_at=(2.2, signal.SIGTERM)),
]  # fmt: skip


# -- issue 14: the world size dsguard computes against the ranks that really run ----------


def check_world_mismatch(o: Outcome) -> None:
    (ev,) = o.named("world_size_mismatch")
    assert (ev["expected_world_size"], ev["observed_world_size"]) == (2, 1)
    assert ev["global_batch"] is None and "16 for 2 rank(s)" in ev["reason"]
    assert o.code == 0 and o.terminal()["global_batch"] is None  # never claimed kept


def check_world_silent_tree(o: Outcome) -> None:
    (ev,) = o.named("world_size_mismatch")
    assert ev["observed_world_size"] == 1 and "no process of the attempt" in ev["source"]


def check_world_matches(o: Outcome) -> None:
    assert not o.named("world_size_mismatch")
    assert o.terminal()["global_batch"] == 16


_LONG = Script(lines=((1.0, "step 1"), (25.0, "done")), exit_at_s=30.0)
SCENARIOS += [
    Scenario("world_size_mismatch_one_rank_seen", [ok_attempt()], check_world_mismatch,
             job={"launcher": "torchrun", "world_size": 2},
             host={"world_seen": (1, "WORLD_SIZE=1 in the environment of 1 rank process(es)")}),
    Scenario("world_size_mismatch_no_rank_variables", [_LONG], check_world_silent_tree,
             job={"launcher": "accelerate", "world_size": 2}),
    Scenario("world_size_matches", [_LONG], check_world_matches,
             job={"launcher": "torchrun", "world_size": 2},
             host={"world_seen": (2, "WORLD_SIZE=2 in the environment of 2 rank process(es)")}),
]  # fmt: skip


def run_scenario(tmp_path: Path, sc: Scenario) -> Outcome:
    sections = dict(sc.job)
    if sections.get("deepspeed") == "DS":
        sections["deepspeed"] = {"config": _ds_config(tmp_path)}
    write_job(tmp_path, [], **sections)
    job = load_job(tmp_path / "job.yaml")
    job.log_dir.mkdir(parents=True, exist_ok=True)
    if sc.prepare is not None:
        sc.prepare(tmp_path, job)
    assert job.checkpoints is not None
    host = FakeHost(sc.scripts, ckpt_dir=job.checkpoints.dir, **sc.host)
    sup = Supervisor(job, host=host, base_env={}, notifier=Notifier({}))
    if sc.stop_at is not None:
        at, signum = sc.stop_at
        host.at(at, lambda: sup.request_stop(signum))
    code = sup.run()
    lines = (job.log_dir / "events.jsonl").read_text().splitlines()
    return Outcome(code, [json.loads(x) for x in lines], read_state(job.log_dir / "state.json"),
                   host)  # fmt: skip


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(tmp_path: Path, sc: Scenario) -> None:
    t0 = time.perf_counter()
    out = run_scenario(tmp_path, sc)
    sc.check(out)
    # The one finish path: exactly one terminal event, with the shared fields, last but for
    # the transition it announces, and the final state matches it.
    done = out.terminal()
    extra = {"signal"} if done["event"] == "run_stopped" else set()
    assert set(done) - _ENVELOPE == TERMINAL_FIELDS | extra
    assert isinstance(done["duration_s"], float) and isinstance(done["attempts"], int)
    assert out.names[-2:] == [done["event"], "state_changed"]
    assert out.state.state == done["event"].removeprefix("run_")
    assert time.perf_counter() - t0 < 1.0, "a scenario must not wait on real time"


def test_there_are_enough_scenarios() -> None:
    assert len(SCENARIOS) >= 15


@pytest.mark.parametrize("previous", ["succeeded", "discarded"])
def test_a_new_run_in_a_used_log_dir_never_reuses_an_attempt_number(
    tmp_path: Path, previous: str
) -> None:
    """A re-run of a finished job, or a run whose state.json was discarded, starts after the
    highest attempt number the log dir holds: its output never lands in an older run's
    ``attempt-N.log``, and ``run_started`` says which number comes first."""
    write_job(tmp_path, [])
    job = load_job(tmp_path / "job.yaml")
    assert job.checkpoints is not None
    host = FakeHost([ok_attempt()], ckpt_dir=job.checkpoints.dir)
    assert Supervisor(job, host=host, base_env={}, notifier=Notifier({})).run() == 0
    log1 = (job.log_dir / "attempt-1.log").read_bytes()
    if previous == "discarded":
        (job.log_dir / "state.json").write_text("{ torn")
    host = FakeHost([ok_attempt()], ckpt_dir=job.checkpoints.dir)
    assert Supervisor(job, host=host, base_env={}, notifier=Notifier({})).run() == 0
    assert (job.log_dir / "attempt-1.log").read_bytes() == log1
    events = [json.loads(x) for x in (job.log_dir / "events.jsonl").read_text().splitlines()]
    second = [e for e in events if e["event"] == "run_started"][1]
    assert second["first_attempt"] == 2
    started = [e for e in events if e["run_id"] == second["run_id"]]
    assert [e["attempt"] for e in started if e["event"] == "attempt_started"] == [2]
    done = [e for e in started if e["event"] == "run_succeeded"]
    assert done[0]["attempts"] == 1
    assert (job.log_dir / "attempt-2.log").read_bytes() == b"step 1\ndone\n"
