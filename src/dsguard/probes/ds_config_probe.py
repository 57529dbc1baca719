"""``dsguard validate --deep``'s probe: validate DeepSpeed configs with DeepSpeed's own classes.

Run as ``JOB_PYTHON ds_config_probe.py IN.json OUT.json`` in the training environment.
``IN.json`` is ``{"configs": [{"config": {...}, "world_size": N}, ...]}``; ``OUT.json`` gets
``{"deepspeed_version": ..., "results": [{"errors": [{"path", "message", "kind"}]}, ...]}``,
or ``{"error": ...}`` when DeepSpeed cannot be imported. Several configs share one import
(importing deepspeed costs seconds).

``deepspeed.runtime.config.DeepSpeedConfig(dict)`` parses every section (the ZeRO section
through the pydantic ``DeepSpeedZeroConfig``, so a bucket size of ``"lots"`` or ``15099494.4``
is the same ``ValidationError`` the real run would raise) and checks the batch arithmetic. It
asks ``deepspeed.comm`` for the world size and, with no process group, falls back to 1, which
would fail the ``train_batch_size == micro * accumulation * world_size`` assertion of any
multi-rank config. The probe therefore answers those two calls itself for the duration of the
check (the config module's ``dist`` attribute); no process group is created and nothing is
initialised. Syntax stays Python 3.8-compatible.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import sys
from typing import Any

#: Where a sub-config's pydantic errors live in the JSON config.
MODEL_PATHS = {
    "DeepSpeedZeroConfig": "zero_optimization",
    "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
    "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer",
    "DeepSpeedFP16Config": "fp16",
    "DeepSpeedBF16Config": "bf16",
    "DeepSpeedActivationCheckpointingConfig": "activation_checkpointing",
    "DeepSpeedCommsConfig": "comms_logger",
}


class _FixedWorld:
    """Stands in for ``deepspeed.comm`` inside ``DeepSpeedConfig.__init__`` only."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def get_rank(self) -> int:
        return 0

    def get_world_size(self, *args: Any, **kwargs: Any) -> int:
        return self.world_size


def describe(exc: BaseException) -> list[dict[str, str]]:
    """One entry per thing DeepSpeed refused; pydantic errors keep their location."""
    errors_fn = getattr(exc, "errors", None)
    title = getattr(exc, "title", None)
    if callable(errors_fn) and isinstance(title, str):
        prefix = MODEL_PATHS.get(title, title)
        out = []
        for err in errors_fn():
            loc = ".".join(str(part) for part in err.get("loc", ()))
            path = f"{prefix}.{loc}" if loc else prefix
            message = str(err.get("msg", ""))
            if "input" in err:
                message += f" (got {err['input']!r})"
            out.append({"path": path, "message": message, "kind": str(err.get("type", ""))})
        return out
    return [{"path": "", "message": f"{type(exc).__name__}: {exc}", "kind": type(exc).__name__}]


def validate(dsc: Any, config: dict[str, Any], world_size: int) -> list[dict[str, str]]:
    patched = hasattr(dsc, "dist")
    real = getattr(dsc, "dist", None)
    cfg = copy.deepcopy(config)
    if not patched and world_size > 1 and isinstance(cfg.get("train_batch_size"), int):
        # A DeepSpeed without the attribute: check the same arithmetic at world size 1.
        cfg["train_batch_size"] //= world_size
    try:
        if patched:
            dsc.dist = _FixedWorld(world_size)
        dsc.DeepSpeedConfig(cfg)
    except Exception as exc:
        return describe(exc)
    finally:
        if patched:
            dsc.dist = real
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: ds_config_probe.py IN.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[1]) as fh:
        request = json.load(fh)
    out: dict[str, Any] = {}
    # DeepSpeed prints to stdout; keep it out of anything that parses ours.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            ds = importlib.import_module("deepspeed")
            dsc = importlib.import_module("deepspeed.runtime.config")
        except BaseException as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        else:
            out["deepspeed_version"] = str(getattr(ds, "__version__", "?"))
            out["results"] = [
                {"errors": validate(dsc, item["config"], int(item.get("world_size", 1)))}
                for item in request["configs"]
            ]
    tmp = argv[2] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, default=repr)
    os.replace(tmp, argv[2])
    return 0


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
