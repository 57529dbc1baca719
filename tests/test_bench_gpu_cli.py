"""bench/gpu/run.py's command line: an empty ``--scenarios`` is refused (it once meant every
scenario, and an H200 call meant for the sweep alone spent its device time on them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_an_empty_scenario_list_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu.run", "--dry-run", "--scenarios", "--sweep",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--sweep-only" in proc.stderr
    assert not out.exists()
