"""DeepSpeed config rendering and argv/env building (pure)."""

from __future__ import annotations

from pathlib import Path

from dsguard.core.render import launcher_problems, render_deepspeed_config
from dsguard.job.knobs import DEFAULT_FLAGS, Knobs, Offload
from dsguard.job.model import CheckpointLayout, CheckpointSpec, DeepSpeedSpec, Job, LauncherKind
from dsguard.run.launch import Command, build_command, knob_args

BASE = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 500000000},
    "bf16": {"enabled": "auto"},
}


def make_job(**over: object) -> Job:
    fields: dict[str, object] = {
        "name": "j", "source": Path("/w/job.yaml"), "workdir": Path("/w"),
        "launcher": LauncherKind.PYTHON, "script": Path("/w/train.py"), "module": None,
        "args": ("--output_dir", "/w/out"), "python": "/usr/bin/python3", "gpus": None,
        "world_size": 1, "env": {"A": "1"}, "knobs": Knobs(8, 1, max_length=2048, zero_stage=2),
        "explicit_knobs": frozenset({"micro_batch_size", "max_length"}), "flags": DEFAULT_FLAGS,
        "deepspeed": DeepSpeedSpec(Path("/w/ds.json"), BASE), "checkpoints": CheckpointSpec(
            Path("/w/out")), "log_dir": Path("/w/runs"),
    }  # fmt: skip
    fields.update(over)
    return Job(**fields)  # type: ignore[arg-type]


def test_render_follows_stage_and_offload_and_keeps_auto() -> None:
    """ZeRO-3 + offload all: stage set, both offload blocks, auto batch keys untouched."""
    cfg = render_deepspeed_config(BASE, Knobs(4, 2, zero_stage=3, offload=Offload.ALL), 1)
    zero = cfg["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert zero["reduce_bucket_size"] == 500000000
    assert cfg["train_micro_batch_size_per_gpu"] == "auto"
    # HF creates a torch optimizer (no "optimizer" block): DeepSpeed needs this under offload.
    assert cfg["zero_force_ds_cpu_optimizer"] is False
    assert BASE["zero_optimization"] == {  # the base is not mutated
        "stage": 2,
        "overlap_comm": True,
        "reduce_bucket_size": 500000000,
    }


def test_render_rewrites_numeric_batch_keys_to_the_knobs() -> None:
    """Explicit numbers must match micro/accum/world or HF raises and plain DS mis-trains."""
    base = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
            "train_batch_size": 32, "zero_optimization": {"stage": 2}}  # fmt: skip
    cfg = render_deepspeed_config(base, Knobs(2, 4, zero_stage=2), 4)
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"],
            cfg["train_batch_size"]) == (2, 4, 32)  # fmt: skip


def test_render_turns_a_device_none_template_into_a_real_offload() -> None:
    """A template block {"device": "none"} is DeepSpeed's "no offload": the knob must win."""
    base = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}
    cfg = render_deepspeed_config(base, Knobs(1, zero_stage=2, offload=Offload.OPTIMIZER), 1)
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def test_render_removes_offload_when_knob_is_none() -> None:
    """offload none drops both blocks (a base config's offload is reflected in the knobs)."""
    base = {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}
    cfg = render_deepspeed_config(base, Knobs(1, zero_stage=3), 1)
    assert "offload_param" not in cfg["zero_optimization"]
    kept = render_deepspeed_config(base, Knobs(1, zero_stage=3, offload=Offload.ALL), 1)
    assert kept["zero_optimization"]["offload_param"]["device"] == "nvme"


def test_knob_args_pass_explicit_and_changed_knobs_only() -> None:
    """micro/accum always; max_length (explicit) yes; workers (default, unchanged) no."""
    job = make_job()
    args = knob_args(job, job.knobs)
    assert args == ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                    "--model_max_length", "2048"]  # fmt: skip
    changed = knob_args(job, job.knobs.replace(gradient_checkpointing=True, pin_memory=False))
    assert "--gradient_checkpointing" in changed
    assert changed[changed.index("--gradient_checkpointing") + 1] == "true"
    assert changed[changed.index("--dataloader_pin_memory") + 1] == "false"


def test_build_command_python_with_resume_ds_and_marker() -> None:
    """argv is a list: launcher, args, knob flags, --deepspeed, explicit resume path."""
    job = make_job()
    cmd = build_command(
        job, job.knobs, run_id="R1", attempt=3, base_env={"PATH": "/bin"},
        ds_config=Path("/w/runs/attempt-3.deepspeed.json"),
        resume_from=Path("/w/out/checkpoint-4"), output_dir=None,
    )  # fmt: skip
    assert cmd.argv[:2] == ["/usr/bin/python3", "/w/train.py"]
    assert cmd.argv[-4:] == ["--deepspeed", "/w/runs/attempt-3.deepspeed.json",
                             "--resume_from_checkpoint", "/w/out/checkpoint-4"]  # fmt: skip
    assert cmd.env["DSGUARD_RUN_ID"] == "R1" and cmd.env["DSGUARD_ATTEMPT"] == "3"
    assert cmd.env["A"] == "1" and cmd.env["PATH"] == "/bin"
    assert cmd.env["PYTHONUNBUFFERED"] == "1"
    assert cmd.cwd == Path("/w")


def test_build_command_new_phase_redirects_output_dir() -> None:
    """A new phase writes to its own dir: the --output_dir value is replaced."""
    job = make_job()
    cmd = build_command(
        job, job.knobs, run_id="R", attempt=1, base_env={}, ds_config=None, resume_from=None,
        output_dir=Path("/w/out/dsguard-phase-2"),
    )  # fmt: skip
    i = cmd.argv.index("--output_dir")
    assert cmd.argv[i + 1] == "/w/out/dsguard-phase-2"
    assert "--resume_from_checkpoint" not in cmd.argv


def test_launcher_prefixes() -> None:
    """deepspeed --include for gpus; torchrun/accelerate nproc = world; CUDA_VISIBLE_DEVICES."""
    ds = build_command(
        make_job(launcher=LauncherKind.DEEPSPEED, gpus=(0, 2), world_size=2), Knobs(8),
        run_id="R", attempt=1, base_env={}, ds_config=None, resume_from=None, output_dir=None,
    )  # fmt: skip
    assert "--include" in ds.argv and "localhost:0,2" in ds.argv
    assert "CUDA_VISIBLE_DEVICES" not in ds.env
    tr = build_command(
        make_job(launcher=LauncherKind.TORCHRUN, gpus=(1,), world_size=1), Knobs(8),
        run_id="R", attempt=1, base_env={}, ds_config=None, resume_from=None, output_dir=None,
    )  # fmt: skip
    assert tr.argv[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc_per_node=1" in tr.argv and tr.env["CUDA_VISIBLE_DEVICES"] == "1"
    acc = build_command(
        make_job(launcher=LauncherKind.ACCELERATE, world_size=2, module="pkg.train",
                 script=None),
        Knobs(8), run_id="R", attempt=1, base_env={}, ds_config=None, resume_from=None,
        output_dir=None,
    )  # fmt: skip
    # Without --multi_gpu accelerate's simple_launcher starts one process (issue 14).
    assert acc.argv[1:6] == [
        "-m", "accelerate.commands.launch", "--num_processes=2", "--multi_gpu", "-m",
    ]  # fmt: skip
    assert acc.argv[6] == "pkg.train"


# -- issue 14: launchers that run what they claim, resume delivery per layout ---------------


def _cmd(job: Job, **kw: object) -> Command:
    return build_command(
        job, job.knobs, run_id="R", attempt=1, base_env={"RANK": "7"}, ds_config=None,
        resume_from=kw.pop("resume_from", None), output_dir=None, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_python_with_deepspeed_gets_a_one_process_rendezvous() -> None:
    """Without rank variables deepspeed.init_distributed goes to MPI discovery and dies on
    `No module named 'mpi4py'` (tests/test_e2e_layouts.py runs the real thing)."""
    env = _cmd(make_job(), master_port=29611).env
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
    }  # fmt: skip
    assert env["MASTER_PORT"] == "29611"
    # The job's own environment wins; no DeepSpeed section, no rendezvous.
    own = _cmd(make_job(env={"MASTER_PORT": "1234"}), master_port=29611).env
    assert own["MASTER_PORT"] == "1234" and own["WORLD_SIZE"] == "1"
    plain = _cmd(make_job(deepspeed=None), master_port=29611).env
    assert "WORLD_SIZE" not in plain and plain["RANK"] == "7"


def test_accelerate_several_ranks_on_a_cpu_host_and_gpu_ids() -> None:
    job = make_job(launcher=LauncherKind.ACCELERATE, world_size=2, deepspeed=None)
    cpu = _cmd(job, cpu_only=True)
    assert "--multi_gpu" in cpu.argv and cpu.env["ACCELERATE_USE_CPU"] == "true"
    gpu = _cmd(make_job(launcher=LauncherKind.ACCELERATE, world_size=2, gpus=(4, 5)))
    assert "--gpu_ids=4,5" in gpu.argv and "ACCELERATE_USE_CPU" not in gpu.env
    one = _cmd(make_job(launcher=LauncherKind.ACCELERATE, world_size=1), cpu_only=True)
    assert "--multi_gpu" not in one.argv and "ACCELERATE_USE_CPU" not in one.env


def test_resume_flag_only_where_the_layout_takes_it() -> None:
    ckpt = Path("/w/out/global_step4")
    job = make_job()
    assert "--resume_from_checkpoint" in _cmd(job, resume_from=ckpt).argv
    ds = _cmd(job, resume_from=ckpt, layout=CheckpointLayout.DEEPSPEED).argv
    assert "--resume_from_checkpoint" not in ds  # the script follows `latest` itself
    own = make_job(checkpoints=CheckpointSpec(Path("/w/out"), resume_flag="--resume_from",
                                              resume_flag_explicit=True))  # fmt: skip
    argv = _cmd(own, resume_from=ckpt, layout=CheckpointLayout.ACCELERATE).argv
    assert argv[-2:] == ["--resume_from", str(ckpt)]


def test_python_launcher_with_several_ranks_is_refused_with_the_fix() -> None:
    (problem,) = launcher_problems(make_job(world_size=2))
    assert "launcher: deepspeed" in problem.message and problem.path == "launcher"
    assert launcher_problems(make_job(world_size=2, launcher=LauncherKind.DEEPSPEED)) == []
    assert launcher_problems(make_job(world_size=1)) == []
