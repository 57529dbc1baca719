"""Scripts that run in the *training* environment (``job.python``), never imported there.

The supervisor never imports torch or deepspeed: the training environment may be another
interpreter, another venv, or broken. Each probe here is a standalone script run by path with
``job.python``; it uses only the standard library plus whatever it is probing (imported inside
``try``), and writes its findings as JSON to the file named by its last argument (the
protocol of :mod:`dsguard.host.probe`, the one place that runs them). Anything it prints
(DeepSpeed prints op-builder warnings to stdout) is only diagnostics.

dsguard itself may import these modules for their pure helpers (e.g. the allocator-config
parser), so the training side and the supervisor parse the same way.
"""

from __future__ import annotations

from pathlib import Path

PROBE_DIR = Path(__file__).resolve().parent
ENV_PROBE = PROBE_DIR / "env_probe.py"
TORCH_FACTS_PROBE = PROBE_DIR / "torch_facts.py"
DS_CONFIG_PROBE = PROBE_DIR / "ds_config_probe.py"
