"""How each knob reaches the training script, and the per-attempt copy of its config file.

A knob dsguard changes but cannot deliver is worse than no knob at all: the event log would
say "micro-batch 8 -> 4" while the script, reading its own ``config.json``, kept training
with 8. So every knob has one *route* (a flag, a key in the script's own config file, a
``key=value`` dotlist argument, an environment variable, or the rendered DeepSpeed config),
and a rung that would change a knob with no route is left out of the ladder
(:func:`dsguard.core.ladder.walk`) and named by ``dsguard validate``.

Pure apart from :func:`read_knobs_file` (the job layer reads the user's files at load time,
like the DeepSpeed config); the per-attempt copy is rendered to bytes here and written by the
run loop through :mod:`dsguard.run.safefs`.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import math
import re
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from dsguard.job.knobs import KNOB_NAMES, Knobs
from dsguard.job.model import DeepSpeedSpec, Job, KnobsFile, KnobsFileFormat

__all__ = [
    "DS_CONFIG_KNOBS",
    "RUNG_KNOBS",
    "dotted_get",
    "dotted_set",
    "knobs_file_format",
    "read_knobs_file",
    "render_knobs_file",
    "routes",
    "tokens_per_step",
    "undeliverable_rungs",
]

#: A dotted key: ``training.batch_size``; a Hydra ``+``/``++`` prefix is allowed on dotlists.
DOTTED_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")

#: Knobs the rendered DeepSpeed config carries to a script that reads them from there
#: (``deepspeed.initialize(config=...)``): its batch keys and its ZeRO block.
DS_CONFIG_KNOBS: frozenset[str] = frozenset(
    {
        "micro_batch_size",
        "gradient_accumulation_steps",
        "zero_stage",
        "offload",
        "ds_bucket_divisor",
    }
)

#: The knobs each rung may change (``core.rungs``): a rung is left out when one of them has
#: no route or is fixed by ``limits.fixed``. Checked against the rung functions by a test.
RUNG_KNOBS: dict[str, tuple[str, ...]] = {
    "micro_batch": ("micro_batch_size", "gradient_accumulation_steps"),
    "gradient_checkpointing": ("gradient_checkpointing",),
    "max_length": ("max_length",),
    "zero3": ("zero_stage",),
    "offload_optimizer": ("offload",),
    "offload_params": ("offload",),
    "lora": ("lora",),
    "dataloader_workers": ("dataloader_workers",),
    "pin_memory": ("pin_memory",),
    "ds_buckets": ("ds_bucket_divisor",),
}

_SUFFIXES: dict[str, KnobsFileFormat] = {
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
}


def knobs_file_format(path: Path) -> KnobsFileFormat | None:
    return _SUFFIXES.get(path.suffix.lower())


def read_knobs_file(path: Path) -> tuple[KnobsFileFormat | None, dict[str, Any] | None, str | None]:
    """``(format, content, None)`` or ``(format, None, what is wrong)``."""
    fmt = knobs_file_format(path)
    if fmt is None:
        return (
            None,
            None,
            (
                f"{path}: unknown config format {path.suffix!r}; dsguard reads .json, .yaml, .yml "
                "and .toml"
            ),
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return fmt, None, f"knobs file not found: {path} (resolved against workdir)"
    except (OSError, UnicodeDecodeError) as exc:
        return fmt, None, f"cannot read {path}: {exc}"
    try:
        if fmt == "json":
            data: object = json.loads(text)
        elif fmt == "toml":
            data = tomllib.loads(text)
        else:
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:  # JSONDecodeError and TOMLDecodeError too
        return fmt, None, f"{path} is not valid {fmt.upper()}: {exc}"
    if not isinstance(data, dict):
        return fmt, None, f"{path} must hold a mapping at the top, not {type(data).__name__}"
    return fmt, data, None


_MISSING = object()


def dotted_get(data: Mapping[str, Any], key: str) -> Any:
    """The value at ``a.b.c``, or ``None`` when any part is missing."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def dotted_set(data: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with ``a.b.c`` set to ``value``; missing mappings are created.

    Raises:
        ValueError: a part of the path exists and is not a mapping (``training: 4`` and the
            key ``training.batch_size``): overwriting it would destroy the user's setting.
    """
    out: dict[str, Any] = copy.deepcopy(dict(data))
    node = out
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part, _MISSING)
        if child is _MISSING:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ValueError(f"{where} is {type(child).__name__}, not a mapping")
        node = child
    node[parts[-1]] = value
    return out


def _plain(value: object) -> object:
    return value.value if isinstance(value, StrEnum) else value


def render_knobs_file(kf: KnobsFile, knobs: Knobs) -> bytes:
    """The per-attempt copy of the script's config file: the user's content with each mapped
    knob set at its key. A knob whose value is None (``max_length`` unknown) is left as the
    file has it."""
    data: dict[str, Any] = dict(kf.base)
    for knob, key in kf.keys.items():
        value = getattr(knobs, knob)
        if value is not None:
            data = dotted_set(data, key, _plain(value))
    if kf.fmt == "json":
        return (json.dumps(data, indent=2) + "\n").encode()
    if kf.fmt == "toml":
        return _toml_dumps(data).encode()
    return yaml.safe_dump(data, sort_keys=False).encode()


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    raise ValueError(f"cannot write {type(value).__name__} as TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_dumps(data: Mapping[str, Any], prefix: str = "") -> str:
    """TOML text of ``data`` (stdlib ``tomllib`` only reads; a writer of ~40 lines spares a
    dependency). Scalars first, then sub-tables as ``[a.b]`` and arrays of tables as
    ``[[a.b]]``, so ``tomllib.loads`` gives ``data`` back."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, list[Any]]] = []
    for key, value in data.items():
        name = f"{prefix}{_toml_key(key)}"
        if isinstance(value, Mapping):
            tables.append((name, value))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            arrays.append((name, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for name, table in tables:
        out += f"\n[{name}]\n" + _toml_dumps(table, name + ".")
    for name, items in arrays:
        for item in items:
            out += f"\n[[{name}]]\n" + _toml_dumps(item, name + ".")
    return out


def routes(job: Job) -> dict[str, str | None]:
    """knob -> how it reaches the script (a short phrase for messages), or None: no route.

    Order: the knobs file, a dotlist argument, the environment, a flag, the rendered DeepSpeed
    config (micro-batch, accumulation, ZeRO stage, offload).
    """
    out: dict[str, str | None] = {}
    d = job.delivery
    for knob in KNOB_NAMES:
        if d.file is not None and knob in d.file.keys:
            out[knob] = f"{d.file.path.name}: {d.file.keys[knob]}"
        elif knob in d.dotlist:
            out[knob] = f"argument {d.dotlist[knob]}=VALUE"
        elif knob in d.env:
            out[knob] = f"environment {d.env[knob]}"
        elif job.flags.get(knob) is not None:
            out[knob] = f"flag {job.flags[knob]}"
        elif job.deepspeed is not None and knob in DS_CONFIG_KNOBS and _config_is_read(job, knob):
            out[knob] = "the rendered DeepSpeed config"
        else:
            out[knob] = None
    return out


def _config_is_read(job: Job, knob: str) -> bool:
    """Whether the script takes ``knob`` from the DeepSpeed config. ZeRO stage, offload and
    the buckets always (the HF Trainer fills only ``"auto"`` values and passes the ZeRO block
    on as written; before, an HF job lost its ``ds_buckets`` rung, and run_clm under a host
    limit could only halve the micro-batch while the 200 MB reduce bucket kept failing); the
    batch keys only for a plain DeepSpeed script: the HF Trainer (its config flag is
    ``--deepspeed``, :class:`DeepSpeedSpec`'s default) takes them from its own arguments and
    raises when the config disagrees."""
    if knob in ("zero_stage", "offload", "ds_bucket_divisor"):
        return True
    assert job.deepspeed is not None
    return job.deepspeed.flag != _HF_DEEPSPEED_FLAG


_HF_DEEPSPEED_FLAG = next(f.default for f in dataclasses.fields(DeepSpeedSpec) if f.name == "flag")


def ds_config_delivers(job: Job, knob: str) -> bool:
    """Whether ``knob`` reaches the script only through the rendered DeepSpeed config (no
    flag, file key, dotlist or env), so the config must state it as a number."""
    return routes(job)[knob] == "the rendered DeepSpeed config"


def undeliverable_rungs(job: Job) -> dict[str, tuple[str, ...]]:
    """Rung (of either ladder) -> the knobs it would change that have no route or are fixed."""
    route = routes(job)
    fixed = set(job.limits.fixed)
    out: dict[str, tuple[str, ...]] = {}
    # Without a DeepSpeed config the ZeRO rungs are inapplicable, not undeliverable: they
    # have nothing to change, so there is no delivery to report on them.
    inert = {"zero_stage", "offload", "ds_bucket_divisor"} if job.deepspeed is None else set()
    for rung in dict.fromkeys((*job.ladder.oom, *job.ladder.host_oom)):
        bad = tuple(
            k
            for k in RUNG_KNOBS.get(rung, ())
            if k in fixed or (route[k] is None and k not in inert)
        )
        if bad:
            out[rung] = bad
    return out


def tokens_per_step(knobs: Knobs, world_size: int) -> int | None:
    """Tokens per optimizer step (micro x accumulation x world x max_length), None when the
    sequence length is not known. With packing it is exact; with per-example truncation it is
    the most a step can hold. Either way a move that changes it changes the optimisation
    problem even when the global batch in samples is kept."""
    if knobs.max_length is None:
        return None
    return knobs.global_batch(world_size) * knobs.max_length
