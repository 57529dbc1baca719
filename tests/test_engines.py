"""dsguard as the per-node agent of a multi-node torchrun: two dsguards (two "nodes" on this
host) each run torchrun, which joins one c10d rendezvous from the ``PET_*`` variables an engine
sets (Slurm's script, a Kubeflow PyTorchJob's env), so the workers see one world of 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from dsguard.job.knobs import Knobs
from dsguard.job.model import LauncherKind
from dsguard.run.launch import TORCHRUN_NNODES_ENV, build_command
from tests.conftest import dsguard_cmd
from tests.test_launch import make_job

WORKER = Path(__file__).parent / "data" / "engines" / "rank_worker.py"


def test_a_rendezvous_in_the_environment_replaces_standalone() -> None:
    job = make_job(launcher=LauncherKind.TORCHRUN, world_size=8)
    kw = {"run_id": "r", "attempt": 1, "ds_config": None, "resume_from": None,
          "output_dir": None}  # fmt: skip
    alone = build_command(job, Knobs(8), base_env={}, **kw)  # type: ignore[arg-type]
    assert "--standalone" in alone.argv and "--nproc_per_node=8" in alone.argv
    env = {TORCHRUN_NNODES_ENV: "2", "PET_NPROC_PER_NODE": "4", "PET_RDZV_ENDPOINT": "h0:29500"}
    multi = build_command(job, Knobs(8), base_env=env, **kw)  # type: ignore[arg-type]
    assert "--standalone" not in multi.argv
    assert not any(a.startswith("--nproc_per_node") for a in multi.argv)  # torchrun reads PET_
    assert multi.env["PET_RDZV_ENDPOINT"] == "h0:29500"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.e2e
def test_two_dsguard_agents_join_one_torchrun_rendezvous(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "ranks"
    out.mkdir()
    port = _free_port()
    procs = []
    for node in (0, 1):
        d = tmp_path / f"node{node}"
        d.mkdir()
        job = {
            "name": f"node{node}", "launcher": "torchrun", "script": str(WORKER),
            "args": ["--out", str(out)], "world_size": 2,
            "train": {"micro_batch_size": 1}, "log_dir": "runs",
        }  # fmt: skip
        (d / "job.yaml").write_text(yaml.safe_dump(job))
        env = dict(os.environ, PET_NNODES="2", PET_NPROC_PER_NODE="1", PET_RDZV_BACKEND="c10d",
                   PET_RDZV_ENDPOINT=f"127.0.0.1:{port}", PET_RDZV_ID="dsguard-test")  # fmt: skip
        argv = dsguard_cmd("run", "job.yaml", "--quiet")
        procs.append(subprocess.Popen(argv, cwd=d, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))  # fmt: skip
    outputs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ranks = {json.loads(f.read_text())["RANK"]: json.loads(f.read_text()) for f in out.iterdir()}
    assert set(ranks) == {"0", "1"} and {r["WORLD_SIZE"] for r in ranks.values()} == {"2"}
    assert {r["GROUP_RANK"] for r in ranks.values()} == {"0", "1"}  # one worker per node
    # each node's worker carries its own dsguard's run marker (the kill sweep finds it)
    assert len({r["DSGUARD_RUN_ID"] for r in ranks.values()}) == 2
