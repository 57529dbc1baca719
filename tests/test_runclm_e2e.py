"""transformers' own run_clm.py under dsguard, offline: the job ``dsguard init`` writes for
``deepspeed run_clm.py ...``, a host limit (RLIMIT_AS) under which DeepSpeed's 200 MB reduce
bucket is what fails (``you tried to allocate 200000000 bytes``), and a ``ds_buckets`` move
through the rendered DeepSpeed config heals it (the route an HF Trainer job lacked before).

run_clm.py is third-party and not committed (``bench/p5_runclm.py``, ``RUN_CLM``): the test
skips without it, or without ``datasets``/``evaluate``. Two short attempts (~25 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("deepspeed")
pytest.importorskip("datasets")
pytest.importorskip("evaluate")

from bench import p5_runclm
from bench.runclm_assets import build
from tests.conftest import dsguard_cmd

pytestmark = [pytest.mark.train, pytest.mark.e2e]


def test_run_clm_bucket_failure_is_healed_by_ds_buckets(tmp_path: Path) -> None:
    if not p5_runclm.RUN_CLM.is_file():
        pytest.skip(f"{p5_runclm.RUN_CLM} is missing (transformers' run_clm.py, not committed)")
    assets = tmp_path / "assets"
    build(assets)
    p5_runclm.write_ds_config(assets / "ds.json")
    base, check = p5_runclm.init_job(tmp_path / "init", assets)
    assert check["ok"], check
    work = tmp_path / "run"
    work.mkdir()
    job_path = p5_runclm.variant_job(base, "fixed", work)
    job = yaml.safe_load(job_path.read_text())
    job["ladder"] = {"host_oom": ["ds_buckets"]}  # straight to the move under test
    job_path.write_text(yaml.safe_dump(job, sort_keys=False))
    env = {**os.environ, **p5_runclm.ENV, "DSGUARD_STORE": str(tmp_path / "store.sqlite")}
    proc = subprocess.run([*dsguard_cmd("run", str(job_path), "--quiet", "--no-fit")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=240,
                          check=False)  # fmt: skip
    events = [json.loads(ln) for ln in (work / "runs" / "events.jsonl").read_text().splitlines()]
    names = [e["event"] for e in events]
    failure = next(e for e in events if e["event"] == "failure_detected")
    assert failure["kind"] == "host_oom", proc.stdout[-2000:]
    assert "200000000 bytes" in str(failure.get("evidence")), failure
    policy = next(e for e in events if e["event"] == "policy_applied")
    assert policy["rung"] == "ds_buckets" and policy["changes"]["ds_bucket_divisor"] == [1, 2]
    rendered = json.loads((work / "runs" / "attempt-2.deepspeed.json").read_text())
    assert rendered["zero_optimization"]["reduce_bucket_size"] == p5_runclm.BUCKET // 2
    assert names.count("attempt_started") == 2 and "run_succeeded" in names, proc.stdout[-2000:]
    assert proc.returncode == 0
