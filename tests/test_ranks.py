"""What an attempt's process environments say about its world size (run/ranks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from dsguard.run.ranks import free_port, nvidia_devices_present, observed_world_size


def _sleeper(**env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, **env}
    )


def test_rank_variables_of_real_processes_give_the_world_size() -> None:
    procs = [_sleeper(RANK=str(r), WORLD_SIZE="2") for r in range(2)]
    plain = _sleeper()
    try:
        seen = observed_world_size([psutil.Process(p.pid) for p in [*procs, plain]])
        assert seen is not None and seen[0] == 2 and "2 rank process(es)" in seen[1]
        assert observed_world_size([psutil.Process(plain.pid)]) is None
    finally:
        for p in [*procs, plain]:
            p.kill()
            p.wait()


def test_no_nvidia_device_nodes_means_cpu_only(tmp_path: Path) -> None:
    assert not nvidia_devices_present(tmp_path, tmp_path / "none")
    (tmp_path / "nvidiactl").touch()  # the control node alone is not a GPU
    assert not nvidia_devices_present(tmp_path, tmp_path / "none")
    (tmp_path / "nvidia0").touch()
    assert nvidia_devices_present(tmp_path, tmp_path / "none")


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
