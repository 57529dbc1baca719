"""The CLI surface: validate, plan, explain, events, quick start, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FAKE_TRAINER, RunResult, dsguard_cmd, write_job

OOM_LOG = "".join(
    [
        '[rank1]:   File "/home/u/train.py", line 10, in <module>\n',
        "[rank1]:     trainer.train()\n",
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 1 "
        "has a total capacity of 23.64 GiB of which 512.00 MiB is free.\n",
        "[rank0]:[E1122 02:11:09.123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600084 milliseconds before timing out.\n",
    ]
)


def test_validate_ok_prints_global_batch(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """validate: exit 0 and the global batch it will protect."""
    write_job(tmp_path, [], train={"micro_batch_size": 4, "gradient_accumulation_steps": 4})
    res = run_dsguard("validate", "job.yaml")
    assert res.code == 0, res.proc.stderr
    assert "global batch 16" in res.proc.stdout


def test_validate_reports_every_problem_and_exits_2(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """Two independent mistakes are both reported with their lines."""
    job = write_job(tmp_path, [], limits={"max_attempts": 0, "min_micro_batch_size": 16})
    res = run_dsguard("validate", "job.yaml")
    assert res.code == 2
    lines = job.read_text().splitlines()
    ma = next(i for i, line in enumerate(lines) if "max_attempts" in line) + 1
    assert f"job.yaml:{ma}: limits.max_attempts:" in res.proc.stderr
    assert "limits.min_micro_batch_size" in res.proc.stderr
    assert "nothing was launched" in res.proc.stderr


def test_plan_json_walks_the_ladder(tmp_path: Path, run_dsguard: Callable[..., RunResult]) -> None:
    """plan --json: every step keeps the global batch; micro_batch halves to the floor."""
    write_job(tmp_path, [], train={"micro_batch_size": 8, "gradient_accumulation_steps": 2})
    res = run_dsguard("plan", "job.yaml", "--json")
    assert res.code == 0, res.proc.stderr
    plan = json.loads(res.proc.stdout)
    oom = plan["cuda_oom"]
    assert [s["rung"] for s in oom] == [None, "micro_batch", "micro_batch", "micro_batch",
                                        "gradient_checkpointing"]  # fmt: skip
    assert {s["global_batch"] for s in oom} == {16}
    assert oom[3]["knobs"]["micro_batch_size"] == 1
    assert oom[3]["knobs"]["gradient_accumulation_steps"] == 16
    table = run_dsguard("plan", "job.yaml").proc.stdout
    assert "gradient_checkpointing" in table and "(start)" in table


def test_explain_json_on_rank_prefixed_log(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """explain --json: the OOM on rank 1 is the root cause, not the NCCL timeout after it."""
    (tmp_path / "crash.log").write_text(OOM_LOG)
    res = run_dsguard("explain", "crash.log", "--exit-code", "1", "--json")
    assert res.code == 0, res.proc.stderr
    out = json.loads(res.proc.stdout)
    assert out["kind"] == "cuda_oom"
    assert out["recoverable"] is True
    assert out["rank"] == 1
    assert any("CUDA out of memory" in line for line in out["evidence"])


@pytest.mark.parametrize(("code", "kind"), [(-9, "host_oom"), (137, "host_oom"),
                                            (247, "host_oom"), (0, None)])  # fmt: skip
def test_explain_decodes_sigkill_exit_codes(
    tmp_path: Path, run_dsguard: Callable[..., RunResult], code: int, kind: str | None
) -> None:
    """-9, 137 (shell) and 247 (DeepSpeed launcher) all mean SIGKILL, which a saved log cannot
    confirm or refute: a probable host OOM (the seeds' playbook); 0 means success."""
    (tmp_path / "quiet.log").write_text("step 10/100 loss=1.2\n")
    res = run_dsguard("explain", "quiet.log", "--exit-code", str(code), "--json")
    out = json.loads(res.proc.stdout)
    assert out["kind"] == kind
    if kind is not None:
        assert out["signal"] == 9
        assert out["verdict"].startswith("probable host_oom") and out["live_evidence"] is False


def test_explain_launcher_rank_kill_without_live_evidence(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """accelerate turns a rank's SIGKILL into exit 1 plus a CalledProcessError: explain reads
    the rank's -9 out of it, calls it a probable host OOM and says nothing confirmed it."""
    (tmp_path / "acc.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "/usr/bin/accelerate", line 8, in <module>\n'
        "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned "
        "non-zero exit status -9.\n"
    )
    res = run_dsguard("explain", "acc.log", "--exit-code", "1")
    assert res.code == 0, res.proc.stderr
    first = res.proc.stdout.splitlines()[0]
    assert first.startswith("verdict: probable host_oom: the launcher or shell reported")
    assert "-9" in first and "no live evidence" in first
    assert "killed rank's exit status (from the launcher's report): -9" in res.proc.stdout


def test_explain_argparse_rejection_hints_the_flag(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """An argparse rejection (exit 2) is the user's to fix, with the flag named."""
    (tmp_path / "arg.log").write_text(
        "usage: train.py [-h] model_id\n"
        "train.py: error: unrecognized arguments: --local_rank=0 --deepspeed ds.json\n"
    )
    out = json.loads(run_dsguard("explain", "arg.log", "--exit-code", "2", "--json").proc.stdout)
    assert out["kind"] == "user_code_error" and out["retry_helps"] is False
    assert "--local_rank --deepspeed" in out["hint"] and "null" in out["hint"]


def test_explain_missing_file_is_usage_error(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A file that cannot be read: exit 2 with the path in the message."""
    res = run_dsguard("explain", "nope.log")
    assert res.code == 2 and "nope.log" in res.proc.stderr


def test_events_filters_by_name_and_attempt(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """events --json --event X --attempt N prints only matching lines of a real run."""
    write_job(tmp_path, ["--scenario", "oom", "--oom_above", "4"])
    assert run_dsguard("run", "job.yaml", "--quiet").code == 0
    res = run_dsguard("events", "runs", "--json", "--event", "attempt_started", "--attempt", "2")
    lines = [json.loads(x) for x in res.proc.stdout.splitlines()]
    assert len(lines) == 1
    assert lines[0]["event"] == "attempt_started" and lines[0]["attempt"] == 2
    human = run_dsguard("events", "job.yaml").proc.stdout
    assert "SUCCEEDED after 2 attempt(s)" in human
    assert "global batch 8 kept" in human


def test_quick_start_without_job_file(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """`dsguard run -- python train.py --per_device_train_batch_size 8 ...` heals too."""
    res = run_dsguard(
        "run", "--quiet", "--name", "quick", "--log-dir", "qruns", "--", sys.executable,
        str(FAKE_TRAINER), "--per_device_train_batch_size", "8", "--output_dir", "out",
        "--trace", "trace.jsonl", "--scenario", "oom", "--oom_above", "4",
    )  # fmt: skip
    assert res.code == 0, res.proc.stderr
    events = [json.loads(x) for x in (tmp_path / "qruns" / "events.jsonl").read_text().splitlines()]
    applied = [e for e in events if e["event"] == "policy_applied"]
    assert applied[0]["changes"]["micro_batch_size"] == [8, 4]
    starts = [r for r in res.trace if r["event"] == "start"]
    # The flag dsguard parsed is passed once, by dsguard, with the new value.
    assert starts[1]["argv"].count("--per_device_train_batch_size") == 1
    assert starts[1]["micro"] == 4 and starts[1]["resume"].endswith("checkpoint-2")


def test_run_needs_a_job_or_command(run_dsguard: Callable[..., RunResult]) -> None:
    """No job file and no command: usage error, exit 2."""
    assert run_dsguard("run").code == 2


def test_supervisor_path_never_imports_torch() -> None:
    """Importing the CLI, loop, classifier and policies loads no torch/deepspeed/transformers."""
    code = (
        "import sys, dsguard.cli.main, dsguard.run.loop, dsguard.job.file, dsguard.job.quickstart, "
        "dsguard.core.ladder; "
        "print(sorted(m for m in ('torch', 'deepspeed', 'transformers', 'peft') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_validate_loads_only_what_it_needs(tmp_path: Path) -> None:
    """`dsguard validate` of a DeepSpeed job (parse, shape check, render, preflight) loads no
    pydantic and neither the classifier nor the remedies: those imports were most of its
    start-up time (bench P4, target 300 ms); the time itself is measured there, not here."""
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}')
    (tmp_path / "job.yaml").write_text(
        "name: t\nscript: train.py\ntrain: {micro_batch_size: 2}\ndeepspeed: {config: ds.json}\n"
    )
    code = (
        "import sys\n"
        "from dsguard.cli.main import main\n"
        "assert main(['validate', 'job.yaml']) == 0\n"
        "heavy = ('pydantic', 'dsguard.core.classify', 'dsguard.core.remedies', "
        "'dsguard.host.envfacts', 'torch')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "job.yaml: ok" in proc.stdout, proc.stderr
    assert "LOADED []" in proc.stdout


def test_status_of_a_finished_run(tmp_path: Path, run_dsguard: Callable[..., RunResult]) -> None:
    """status --json after a run: state succeeded, knobs, not running (exit 3)."""
    write_job(tmp_path, ["--scenario", "oom", "--oom_above", "4"])
    assert run_dsguard("run", "job.yaml", "--quiet").code == 0
    res = run_dsguard("status", "job.yaml", "--json")
    assert res.code == 3, res.proc.stderr
    d = json.loads(res.proc.stdout)
    assert d["state"] == "succeeded"
    assert d["knobs"]["micro_batch_size"] == 4
    assert run_dsguard("status", "nowhere", "--json").code == 4


def test_service_install_user_writes_unit_and_env(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """service install --user: unit + per-job env file under XDG_CONFIG_HOME, commands shown."""
    write_job(tmp_path, ["--scenario", "ok"])
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    proc = subprocess.run(
        dsguard_cmd("service", "install", "job.yaml", "--user"), cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    unit = tmp_path / "cfg" / "systemd" / "user" / "dsguard@.service"
    assert unit.is_file() and "Type=notify" in unit.read_text()
    assert "systemctl --user enable --now dsguard@fake" in proc.stdout


def test_events_follow_prints_new_events(tmp_path: Path) -> None:
    """events --follow shows events appended after it started, then stops on SIGINT."""
    write_job(tmp_path, ["--scenario", "ok"])
    # A suite started as a background job of a non-interactive shell inherits SIGINT ignored,
    # an ignored signal stays ignored across exec, and Python then installs no
    # KeyboardInterrupt handler: the follower would never see the Ctrl-C this test sends (a
    # clean-clone CI run started with `&` hung here). A Python-level handler is reset to the
    # default by exec, so the child starts with SIGINT as in a terminal.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        follower = subprocess.Popen(
            dsguard_cmd("events", "runs", "--follow", "--event", "run_succeeded"),
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if before is None else before)
    try:
        done = subprocess.run(
            dsguard_cmd("run", "job.yaml", "--quiet"), cwd=tmp_path, capture_output=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0
        time.sleep(1.0)
    finally:
        follower.send_signal(signal.SIGINT)
        out, _ = follower.communicate(timeout=10)
    assert follower.returncode == 0
    assert "SUCCEEDED after 1 attempt(s)" in out


def test_internal_error_exits_70(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dsguard bug is exit 70, not 1 (gave up): systemd restarts it and it recovers."""
    from dsguard.cli import main as cli

    def boom(_ns: object) -> int:
        raise RuntimeError("bug")

    monkeypatch.setattr(cli, "cmd_validate", boom)
    assert cli.main(["validate", "job.yaml"]) == 70


def _ds_job(tmp_path: Path, bucket: object) -> None:
    ds = tmp_path / "zero2.json"
    ds.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "zero_optimization": {"stage": 2, "reduce_bucket_size": bucket},
            }
        )
    )
    write_job(tmp_path, ["--scenario", "ok"], deepspeed={"config": str(ds)})


def test_preflight_fixes_a_fractional_bucket_and_logs_it(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A float bucket size DeepSpeed's pydantic would reject is rounded at launch, logged, and
    the rendered config carries the integer."""
    _ds_job(tmp_path, 15099494.4)
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    fixed = res.named("preflight_fixed")
    assert fixed and fixed[0]["fixes"][0]["new"] == 15099494
    rendered = json.loads(Path(res.named("attempt_started")[0]["deepspeed_config"]).read_text())
    assert rendered["zero_optimization"]["reduce_bucket_size"] == 15099494


def test_preflight_refuses_an_unusable_config_before_launch(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """A string bucket size: exit 2, the path and key named, no trainer started."""
    _ds_job(tmp_path, "lots")
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 2
    assert "reduce_bucket_size" in res.proc.stderr
    assert not (tmp_path / "trace.jsonl").exists()
    assert res.named("preflight_refused")
    assert run_dsguard("validate", "job.yaml").code == 2


def test_doctor_json_reports_the_training_environment(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """doctor --json: one row per check, python and torch among them, a status for each."""
    res = run_dsguard("doctor", "--json", timeout=300)
    assert res.code in (0, 1), res.proc.stderr
    report = json.loads(res.proc.stdout)
    names = {row["name"] for row in report["checks"]}
    assert {"python", "torch", "deepspeed", "/dev/shm"} <= names
    assert all(row["status"] in ("ok", "warn", "blocker", "unknown") for row in report["checks"])
    assert res.code == (1 if any(r["status"] == "blocker" for r in report["checks"]) else 0)


@pytest.mark.train
def test_validate_deep_accepts_the_demo(run_dsguard: Callable[..., RunResult]) -> None:
    """validate --deep renders attempt 1 and every rung and DeepSpeed's own classes accept them."""
    demo = Path(__file__).resolve().parents[1] / "configs" / "examples" / "tiny-cpu.yaml"
    res = run_dsguard("validate", str(demo), "--deep", timeout=300)
    assert res.code == 0, res.proc.stderr
    assert "accepts" in res.proc.stdout


def test_an_overridden_micro_batch_is_said_by_validate_and_logged_by_run(
    tmp_path: Path, run_dsguard: Callable[..., RunResult]
) -> None:
    """Issue 13.12: the DeepSpeed config's micro-batch 8 against train.micro_batch_size 4 was
    rewritten without a word; validate shows the fix and run logs it (preflight_fixed)."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 2}}))  # fmt: skip
    write_job(tmp_path, ["--scenario", "ok"], train={"micro_batch_size": 4},
              deepspeed={"config": str(ds)})  # fmt: skip
    res = run_dsguard("validate", "job.yaml")
    assert res.code == 0, res.proc.stderr
    assert f"{ds}: fixed at launch: train_micro_batch_size_per_gpu: 8 -> 4" in res.proc.stdout
    res = run_dsguard("run", "job.yaml", "--quiet")
    assert res.code == 0, res.proc.stderr
    fixes = [f for e in res.named("preflight_fixed") for f in e["fixes"]]
    assert {"path": "train_micro_batch_size_per_gpu", "old": 8, "new": 4} in [
        {k: f[k] for k in ("path", "old", "new")} for f in fixes
    ]
