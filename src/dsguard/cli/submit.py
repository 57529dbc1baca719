"""``dsguard submit --slurm JOB.yaml``: write (and submit) an sbatch script that runs dsguard
inside the allocation (see :mod:`dsguard.cluster.slurm` for what the script does and why)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsguard.errors import JobFileError
from dsguard.exitcodes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # imported where used: every dsguard command builds this parser
    from dsguard.cluster.slurm import SlurmSpec
    from dsguard.job.model import Job

#: The directory, next to the checkpoints on the shared filesystem, holding the script, the
#: derived job file(s), Slurm's output and dsguard's log dir(s): a requeued job on any node
#: finds its ladder state there.
SLURM_SUBDIR = ".dsguard-slurm"


def slurm_dir_of(job: Job) -> Path:
    if job.checkpoints is not None:
        return job.checkpoints.dir / SLURM_SUBDIR
    return job.log_dir.with_name(f"{job.log_dir.name}-slurm")


def write_files(job: Job, spec: SlurmSpec, dsguard_bin: str) -> Path:
    """Write the derived job file(s) and the script; return the script's path.

    Raises:
        JobFileError: a derived job file is invalid (a dsguard bug, or a path unusable).
    """
    from dsguard.cluster.slurm import render_script
    from dsguard.job.file import load_job
    from dsguard.queue.derive import derive, dump, read_raw
    from dsguard.run.safefs import make_private_dir, write_atomic

    out_dir = slurm_dir_of(job)
    make_private_dir(out_dir)
    assert job.source is not None
    raw = read_raw(job.source)
    files: list[Path] = []
    for k in range(spec.nodes):
        doc = derive(raw, job)
        # Slurm chooses the devices (CUDA_VISIBLE_DEVICES in the allocation): indices from
        # the job file would name GPUs outside it.
        doc.pop("gpus", None)
        env = dict(doc.get("env") or {})
        env.pop("CUDA_VISIBLE_DEVICES", None)
        doc["env"] = env
        doc["world_size"] = (
            spec.nodes * (spec.gpus_per_node or 1) if spec.nodes > 1 else (job.world_size)
        )
        single = spec.nodes == 1
        doc["log_dir"] = str(out_dir / ("log" if single else f"log-node-{k}"))
        path = out_dir / ("job.yaml" if single else f"node-{k}.yaml")
        write_atomic(path, dump(doc).encode())
        load_job(path, writable=True)
        files.append(path)
    script = out_dir / f"{job.name}.sbatch"
    # The job file's exit_codes: reach the script through the derived job file, which
    # dsguard run reads; the script must read the same numbers.
    text = render_script(spec, files, dsguard_bin=dsguard_bin, out_dir=out_dir,
                         gave_up_code=job.exit_codes.gave_up,
                         succeeded_code=job.exit_codes.succeeded)  # fmt: skip
    write_atomic(script, text.encode(), mode=0o700)
    return script


def cmd_submit(ns: argparse.Namespace) -> int:
    from dsguard.cli.service import default_dsguard_bin
    from dsguard.cluster.slurm import SlurmSpec
    from dsguard.job.file import load_job
    from dsguard.job.model import LauncherKind

    if not ns.slurm:
        print("dsguard submit: say which engine (--slurm)", file=sys.stderr)
        return EXIT_USAGE
    try:
        job = load_job(Path(ns.job))
    except JobFileError as err:
        for p in err.problems:
            print(str(p), file=sys.stderr)
        return EXIT_USAGE
    spec = SlurmSpec(name=job.name, nodes=ns.nodes, gpus_per_node=ns.gpus_per_node,
                     time=ns.time, partition=ns.partition, signal_s=ns.signal_s,
                     extra=tuple(ns.sbatch or ()))  # fmt: skip
    problems = spec.problems()
    if spec.nodes > 1 and job.launcher is not LauncherKind.TORCHRUN:
        problems.append("--nodes > 1 needs launcher: torchrun (one dsguard per node joins a "
                        "torchrun rendezvous; see docs/engines.md)")  # fmt: skip
    binary = default_dsguard_bin()
    if binary is None:
        problems.append("cannot find the dsguard executable")
    if problems:
        for text in problems:
            print(f"dsguard submit: {text}", file=sys.stderr)
        return EXIT_USAGE
    assert binary is not None
    try:
        script = write_files(job, spec, str(binary.absolute()))
    except JobFileError as err:
        for p in err.problems:
            print(str(p), file=sys.stderr)
        return EXIT_USAGE
    if ns.dry_run:
        print(f"# {script} (not submitted: --dry-run)")
        print(script.read_text(), end="")
        return EXIT_OK
    return _sbatch(script)


def _sbatch(script: Path) -> int:
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        print(f"dsguard submit: no sbatch on PATH; the script is {script}", file=sys.stderr)
        return EXIT_USAGE
    res = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True,
                         check=False, timeout=120)  # fmt: skip
    if res.returncode != 0:
        print(f"dsguard submit: sbatch failed: {res.stderr.strip()}", file=sys.stderr)
        return EXIT_USAGE
    print(f"submitted {script} as Slurm job {res.stdout.strip().split(';')[0]}")
    return EXIT_OK


def add_parser(sub: Any) -> None:
    s = sub.add_parser("submit", help="run a job inside a cluster engine (Slurm)")
    s.add_argument("job", metavar="JOB.yaml")
    s.add_argument("--slurm", action="store_true", help="write and submit an sbatch script")
    s.add_argument("--nodes", type=int, default=1)
    s.add_argument("--gpus-per-node", type=int)
    s.add_argument("--time", help="time limit (sbatch --time)")
    s.add_argument("--partition")
    s.add_argument("--signal-s", type=int, default=300,
                   help="SIGTERM this long before the time limit (default 300 s)")  # fmt: skip
    s.add_argument("--sbatch", action="append", metavar="OPTION",
                   help="extra #SBATCH option, e.g. --sbatch=--account=x (repeatable)")  # fmt: skip
    s.add_argument("--dry-run", action="store_true", help="write the script, do not submit")
    s.set_defaults(func=cmd_submit)
