"""Turn (job, knobs, resume point) into one attempt's argv and environment.

Pure: no process is started here and nothing is written (the run loop writes the rendered
config to ``log_dir``). argv is always a list: no shell ever parses user arguments.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dsguard.job.knobs import ALWAYS_PASSED_KNOBS, FLAG_KNOBS, Knobs, Offload
from dsguard.job.model import CheckpointLayout, Job, LauncherKind
from dsguard.protocol import (
    ATTEMPT_ENV,
    CONTROL_DIR_ENV,
    CONTROL_SUBDIR,
    GPU_MEMORY_FRACTION_ENV,
    HEARTBEAT_DIR_ENV,
    HEARTBEAT_SUBDIR,
    INIT_FROM_ENV,
    LOG_DIR_ENV,
    RUN_ID_ENV,
    SKIP_BATCHES_ENV,
)

__all__ = ["Command", "build_command", "knob_args"]

if TYPE_CHECKING:
    # Imported where used: the remedies pull in the classifier's and envfacts' regex tables,
    # ~70 ms that `dsguard validate` (which only renders the DeepSpeed config) must not pay.
    from dsguard.core.remedies import Remedy

# RUN_ID_ENV/ATTEMPT_ENV are the marker every process of an attempt inherits. It survives
# re-parenting and new sessions (torchrun starts each worker in its own session), so the kill
# sweep can find exactly the processes dsguard started, and nothing else.


def _render_value(value: object) -> str:
    # HfArgumentParser takes booleans as `--flag true|false`; a bare flag could not turn one off.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def knob_args(job: Job, knobs: Knobs) -> list[str]:
    """Flags for the knobs the script must see.

    The micro-batch and accumulation are always passed (the global-batch invariant depends on
    them); other knobs only when the user set them or dsguard changed them, so a script that
    lacks, say, ``--dataloader_num_workers`` is not broken by a default it never asked for.
    """
    out: list[str] = []
    for name in FLAG_KNOBS:
        flag = job.flags.get(name)
        value = getattr(knobs, name)
        if flag is None or value is None:
            continue
        changed = value != getattr(job.knobs, name)
        if name in ALWAYS_PASSED_KNOBS or name in job.explicit_knobs or changed:
            out += [flag, _render_value(value)]
    return out


def _dotlist_args(job: Job, knobs: Knobs, args: Sequence[str]) -> list[str]:
    """``args`` with each dotlist-mapped knob set as ``key=value`` (Hydra, OmegaConf,
    LLaMA-Factory, torchtune overrides): an existing ``key=``/``+key=``/``++key=`` item gets
    the attempt's value in place (its prefix kept), otherwise ``key=value`` is appended."""
    out = list(args)
    for knob, key in job.delivery.dotlist.items():
        value = getattr(knobs, knob)
        if value is None:
            continue
        bare = key.lstrip("+")
        text = _render_value(value.value if isinstance(value, Offload) else value)
        for i, arg in enumerate(out):
            name, eq, _ = arg.partition("=")
            if eq and name.lstrip("+") == bare:
                out[i] = f"{name}={text}"
                break
        else:
            out.append(f"{key}={text}")
    return out


def _knob_env(job: Job, knobs: Knobs) -> dict[str, str]:
    """The environment variables of env-mapped knobs (``knobs_env:``)."""
    out: dict[str, str] = {}
    for knob, var in job.delivery.env.items():
        value = getattr(knobs, knob)
        if value is not None:
            out[var] = _render_value(value.value if isinstance(value, Offload) else value)
    return out


def _names(workdir: Path, arg: str, path: Path) -> bool:
    """Whether the argument ``arg`` names ``path`` (relative to the workdir, like the job
    file's check: normalised, symlinks kept)."""
    return Path(os.path.normpath(workdir / Path(arg).expanduser())) == path


def _replace_flag(args: Sequence[str], flag: str, value: str) -> list[str]:
    out = list(args)
    for i, a in enumerate(out):
        if a == flag and i + 1 < len(out):
            out[i + 1] = value
        elif a.startswith(flag + "="):
            out[i] = f"{flag}={value}"
    return out


#: Set by a cluster engine (or the job's env) when torchrun must join a multi-node
#: rendezvous: torchrun reads every option from ``PET_<OPTION>`` (torch.distributed.run), so
#: dsguard then drops ``--standalone``, which would override the rendezvous with a local one.
TORCHRUN_NNODES_ENV = "PET_NNODES"


def _launcher_prefix(job: Job, env: Mapping[str, str] | None = None) -> list[str]:
    target = ["-m", job.module] if job.module is not None else [str(job.script)]
    py = job.python
    if job.launcher is LauncherKind.PYTHON:
        return [py, *target]
    if job.launcher is LauncherKind.DEEPSPEED:
        ds_bin = Path(py).parent / "deepspeed"
        head = [str(ds_bin)] if ds_bin.is_file() else [py, "-m", "deepspeed.launcher.runner"]
        if job.gpus is not None:
            head += ["--include", "localhost:" + ",".join(str(g) for g in job.gpus)]
        else:
            head += ["--num_gpus", str(job.world_size)]
        if job.module is not None:
            return [*head, "--module", job.module]
        return [*head, str(job.script)]
    if job.launcher is LauncherKind.TORCHRUN and env is not None and TORCHRUN_NNODES_ENV in env:
        nproc = [] if "PET_NPROC_PER_NODE" in env else [f"--nproc_per_node={job.world_size}"]
        return [py, "-m", "torch.distributed.run", *nproc, *target]
    if job.launcher is LauncherKind.TORCHRUN:
        return [
            py, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={job.world_size}", *target,
        ]  # fmt: skip
    # accelerate (flags read in accelerate 1.15's commands/launch.py). Without --multi_gpu,
    # `launch_command` takes `simple_launcher`, which starts ONE process whatever
    # --num_processes says; --multi_gpu goes through torch.distributed.run, which starts
    # world_size ranks (on a CPU-only host too, see _accelerate_env). There is no
    # --multi_cpu flag in that version.
    head = [py, "-m", "accelerate.commands.launch", f"--num_processes={job.world_size}"]
    if job.world_size > 1:
        head.append("--multi_gpu")
    if job.gpus is not None:
        head.append("--gpu_ids=" + ",".join(str(g) for g in job.gpus))
    return [*head, *target]


#: The rendezvous of a one-process DeepSpeed run started without a launcher. Without these,
#: ``deepspeed.init_distributed`` falls back to MPI discovery (``mpi_discovery`` in
#: deepspeed/comm/comm.py) and dies with ``No module named 'mpi4py'``.
def _one_process_rendezvous(master_port: int) -> dict[str, str]:
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
    }


def _launcher_env(job: Job, *, master_port: int | None, cpu_only: bool) -> dict[str, str]:
    """Environment the launcher needs to run what the job claims (job.env wins)."""
    out: dict[str, str] = {}
    if job.launcher is LauncherKind.PYTHON and job.deepspeed is not None and master_port:
        out.update(_one_process_rendezvous(master_port))
    if job.launcher is LauncherKind.ACCELERATE and job.world_size > 1 and cpu_only:
        # accelerate's PartialState picks MULTI_CPU (gloo) only when told the run is on the
        # CPU (state.py `_prepare_backend`); otherwise each torchrun rank thinks it is
        # alone (DistributedType.NO, num_processes 1) and no gradient is averaged.
        out["ACCELERATE_USE_CPU"] = "true"
    return {k: v for k, v in out.items() if k not in job.env}


@dataclass(frozen=True, slots=True)
class Command:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def _knob_route_args(job: Job, knobs: Knobs, args: list[str], knobs_file: Path | None) -> list[str]:
    """``args`` with the knobs that travel in them: the per-attempt copy of the script's own
    config file in place of the user's (``knobs_file.arg``, or the positional item that
    names it), and the ``key=value`` dotlist items."""
    kf = job.delivery.file
    if knobs_file is not None and kf is not None:
        if kf.arg is not None:
            args = _replace_flag(args, kf.arg, str(knobs_file))
        else:  # a positional argument: the item that names the user's file
            args = [
                str(knobs_file) if a[:1] != "-" and _names(job.workdir, a, kf.path) else a
                for a in args
            ]
    return _dotlist_args(job, knobs, args)


def _shim_prefix(
    job: Job, supervisor_python: str, supervisor_pid: int | None, memory_cgroup: Path | None
) -> list[str]:
    """dsguard's exec shim in front of the launcher, when the attempt needs one: the
    parent-death signal, the memory cgroup to join before exec, RLIMIT_AS ([] otherwise)."""
    if supervisor_pid is None and job.resources.host_memory_limit_bytes is None:
        return []
    shim = [supervisor_python, "-m", "dsguard.run.exec_shim"]
    if supervisor_pid is not None:
        shim += ["--parent", str(supervisor_pid)]
    if memory_cgroup is not None:
        shim += ["--cgroup", str(memory_cgroup)]
    if job.resources.host_memory_limit_bytes is not None:
        shim += ["--as-bytes", str(job.resources.host_memory_limit_bytes)]
    return [*shim, "--"]


def build_command(
    job: Job,
    knobs: Knobs,
    *,
    run_id: str,
    attempt: int,
    base_env: Mapping[str, str],
    ds_config: Path | None,
    resume_from: Path | None,
    output_dir: Path | None,
    init_from: Path | None = None,
    knobs_file: Path | None = None,
    supervisor_python: str = sys.executable,
    supervisor_pid: int | None = None,
    remedies: Sequence[Remedy] = (),
    layout: CheckpointLayout = CheckpointLayout.HF,
    master_port: int | None = None,
    cpu_only: bool = False,
    memory_cgroup: Path | None = None,
    skip_batches: str | None = None,
) -> Command:
    """argv, environment and cwd of one attempt.

    Args:
        base_env: the environment to start from (dsguard's own, passed in for testability).
        ds_config: the rendered DeepSpeed config of this attempt, if the job uses DeepSpeed.
        resume_from: explicit checkpoint path (never "latest": HF would pick an unvalidated one).
        output_dir: when set, replaces the value of the job's output flag (a new phase).
        init_from: checkpoint whose consolidated weights a new phase starts from (honoured by
            training code that announces the ``init_from`` capability).
        knobs_file: this attempt's copy of the script's own config file (``knobs_file:``);
            it replaces the value of ``knobs_file.arg`` in args.
        supervisor_python: interpreter for dsguard's own exec shim.
        supervisor_pid: when set, the shim makes the launcher receive SIGTERM if this
            process dies (parent-death signal).
        remedies: environment remedies applied so far (flags here, env below; their config
            patch goes into the rendered DeepSpeed config).
        layout: the layout of ``resume_from``: it decides whether a resume flag carries it
            (a raw DeepSpeed loop resumes itself from ``latest``).
        master_port: the port of a one-process DeepSpeed rendezvous (``launcher: python``).
        cpu_only: the host has no GPU (accelerate then runs its ranks on the CPU).
        memory_cgroup: the attempt's memory cgroup (``run/memlimit``): the shim joins it
            before exec; RLIMIT_AS is passed as well, the shim's fallback if joining fails.
        skip_batches: ``DSGUARD_SKIP_BATCHES`` after a divergence rollback (``protocol``).
    """
    from dsguard.core.remedies import merged_env, remedy_args

    args = remedy_args(job.args, remedies)
    ckpt = job.checkpoints
    if output_dir is not None and ckpt is not None and ckpt.output_flag is not None:
        args = _replace_flag(args, ckpt.output_flag, str(output_dir))
    args = _knob_route_args(job, knobs, args, knobs_file)
    argv = _launcher_prefix(job, {**base_env, **job.env}) + args + knob_args(job, knobs)
    if job.deepspeed is not None and job.deepspeed.flag is not None and ds_config is not None:
        argv += [job.deepspeed.flag, str(ds_config)]
    resume_flag = ckpt.resume_flag_for(layout) if ckpt is not None else None
    if resume_from is not None and resume_flag is not None:
        argv += [resume_flag, str(resume_from)]
    argv = _shim_prefix(job, supervisor_python, supervisor_pid, memory_cgroup) + argv

    env = dict(base_env)
    env.update(job.env)
    env.update(_launcher_env(job, master_port=master_port, cpu_only=cpu_only))
    env.update(merged_env(remedies))  # after job.env: a remedy's CUDA_HOME beats the job's
    env.update(_knob_env(job, knobs))
    env[RUN_ID_ENV] = run_id
    env[ATTEMPT_ENV] = str(attempt)
    env[LOG_DIR_ENV] = str(job.log_dir)
    env[HEARTBEAT_DIR_ENV] = str(job.log_dir / HEARTBEAT_SUBDIR)
    env[CONTROL_DIR_ENV] = str(job.log_dir / CONTROL_SUBDIR)
    # Without this, a Python child block-buffers its output when it is a pipe, and a CUDA OOM
    # traceback could sit in the buffer while the other ranks hang in NCCL.
    env.setdefault("PYTHONUNBUFFERED", "1")
    if job.resources.gpu_memory_fraction is not None:
        # Only an environment variable: DsguardCallback (integrations/hf.py) reads it in each
        # rank and calls torch.cuda.set_per_process_memory_fraction on that rank's GPU; a
        # script without the callback runs uncapped. Deliberately not injected into
        # PYTORCH_CUDA_ALLOC_CONF: an option the installed torch does not know aborts CUDA
        # initialisation for the whole job.
        env[GPU_MEMORY_FRACTION_ENV] = str(job.resources.gpu_memory_fraction)
    if skip_batches:
        env[SKIP_BATCHES_ENV] = skip_batches
    else:
        env.pop(SKIP_BATCHES_ENV, None)
    if init_from is not None:
        env[INIT_FROM_ENV] = str(init_from)
    else:
        env.pop(INIT_FROM_ENV, None)
    if job.gpus is not None and job.launcher is not LauncherKind.DEEPSPEED:
        # The DeepSpeed runner selects devices with --include and rewrites this variable.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
    return Command(argv=argv, env=env, cwd=job.workdir)
