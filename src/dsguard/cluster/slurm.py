"""The sbatch script in which dsguard is the entrypoint (``dsguard submit --slurm``).

What Slurm gives and what it does not (see https://slurm.schedmd.com/sbatch.html):

* ``--requeue`` makes a job eligible to be requeued after a node failure or a preemption;
  a job that reaches its **time limit is not requeued** by Slurm. So the script asks for a
  warning signal before the limit (``--signal=B:TERM@N``: SIGTERM to the batch shell only,
  N seconds early), forwards it to dsguard, which asks the training process to save and
  stops the attempt in order (exit 143), and then requeues itself with ``scontrol requeue``.
  A dsguard that gave up is not requeued: the same job would fail the same way.
* bash runs a trap only once the foreground command returns, so dsguard runs in the
  background and the shell ``wait``\\ s for it (a foreground dsguard would never hear the
  warning until the limit's SIGKILL).
* ``--open-mode=append``: a requeued job appends to its output file instead of truncating
  the first run's.
* The ladder state lives on the shared filesystem next to the checkpoints (``log_dir`` under
  the checkpoint dir), so the requeued job, on whatever node, finds its ``state.json`` and
  continues at its rung. ``SLURM_RESTART_COUNT`` (how many times the job was requeued) is
  logged at every start and exported as ``DSGUARD_SLURM_RESTART_COUNT``.

Multi-node: one dsguard per node (``srun --ntasks-per-node=1``), each running torchrun with
the rendezvous that torchrun reads from ``PET_*`` variables (torchrun's own option names,
``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_RDZV_BACKEND``, ``PET_RDZV_ENDPOINT``,
``PET_RDZV_ID``), the endpoint being the first host of ``scontrol show hostnames
$SLURM_JOB_NODELIST``; ``--kill-on-bad-exit=1`` ends every node's tasks when one node's
dsguard ends with an error. Each node's dsguard has its own log dir (``node-K``): two
supervisors never share a lock or an event log.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: Default warning before the time limit: enough for a large checkpoint save.
DEFAULT_SIGNAL_S = 300
#: torchrun rendezvous port on the first node (multi-node).
RDZV_PORT = 29500
_TIME = re.compile(r"^(\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")


@dataclass(frozen=True, slots=True)
class SlurmSpec:
    name: str
    nodes: int = 1
    gpus_per_node: int | None = None
    time: str | None = None
    partition: str | None = None
    signal_s: int = DEFAULT_SIGNAL_S
    #: Extra ``#SBATCH`` options, verbatim (``--account=x``).
    extra: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.nodes < 1:
            out.append("--nodes must be at least 1")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            out.append("--gpus-per-node must not be negative")
        if self.time is not None and not _TIME.match(self.time):
            out.append(f"--time {self.time!r}: use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
        if self.signal_s < 1 or self.signal_s > 65535:
            out.append("--signal-s must be between 1 and 65535 (sbatch's limit)")
        return out


def _directives(spec: SlurmSpec, out_dir: Path) -> list[str]:
    lines = [
        f"#SBATCH --job-name={spec.name}",
        f"#SBATCH --nodes={spec.nodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.time:
        lines.append(f"#SBATCH --time={spec.time}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    lines += [
        f"#SBATCH --signal=B:TERM@{spec.signal_s}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={out_dir}/slurm-%j.out",
        *(f"#SBATCH {x}" for x in spec.extra),
    ]
    return lines


def render_script(
    spec: SlurmSpec, job_files: Sequence[Path], *, dsguard_bin: str, out_dir: Path,
    gave_up_code: int, succeeded_code: int = 0,
) -> str:  # fmt: skip
    """The batch script. ``job_files``: one per node (node K runs ``job_files[K]``)."""
    q = shlex.quote
    if spec.nodes == 1:
        command = f"{q(dsguard_bin)} run --quiet {q(str(job_files[0]))} &"
        rdzv: list[str] = []
    else:
        pattern = str(job_files[0].parent / "node-")
        inner = f'exec {q(dsguard_bin)} run --quiet {q(pattern)}"$SLURM_NODEID".yaml'
        command = f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {q(inner)} &"
        rdzv = [
            'hosts=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
            'export PET_NNODES="$SLURM_JOB_NUM_NODES"',
            f"export PET_NPROC_PER_NODE={spec.gpus_per_node or 1}",
            f'export PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT="${{hosts[0]}}:{RDZV_PORT}"',
            'export PET_RDZV_ID="$SLURM_JOB_ID"',
        ]  # fmt: skip
    body = [
        "#!/bin/bash",
        "# Written by `dsguard submit --slurm`: dsguard supervises the job inside this",
        "# allocation, heals it, and requeues it before the time limit (see docs/engines.md).",
        *_directives(spec, out_dir),
        "set -u",
        "restarts=${SLURM_RESTART_COUNT:-0}",
        'echo "dsguard-slurm: job ${SLURM_JOB_ID} starts on $(hostname),'
        ' SLURM_RESTART_COUNT=${restarts}"',
        "export DSGUARD_SLURM_RESTART_COUNT=$restarts",
        *rdzv,
        "warned=0",
        "on_term() {",
        '  warned=1; echo "dsguard-slurm: SIGTERM (time limit near, or preempted): save and stop"',
        '  kill -TERM "$child" 2>/dev/null',
        "}",
        "trap on_term TERM",
        command,
        "child=$!",
        "# wait returns early when the trap runs; wait again until dsguard has really exited.",
        'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
        'echo "dsguard-slurm: dsguard exited $rc"',
        f'if [ "$warned" = 1 ] && [ "$rc" != {succeeded_code} ] &&'
        f' [ "$rc" != {gave_up_code} ]; then',
        '  echo "dsguard-slurm: requeued; the next start continues at the same rung"',
        '  scontrol requeue "$SLURM_JOB_ID" || true',
        "fi",
        'exit "$rc"',
    ]
    return "\n".join(body) + "\n"
