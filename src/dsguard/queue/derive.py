"""The job file the queue hands to ``dsguard run``: the user's, with the queue's changes.

The child is a normal ``dsguard run FILE``, so whatever the queue decides (a matrix value, a
name, the GPUs it handed out) must be in a job file. The derived file lives in the queue
dir, so every path the original resolved against its own directory is written absolute
(``workdir``, ``python``, ``deepspeed.config``, ``log_dir``, ``checkpoints.dir``); the
rest (``script``, ``args``) resolves against ``workdir`` exactly as before.

``--matrix key=v1,v2`` makes one job per value, named ``NAME-VALUE``; the value reaches the
training script as ``--key VALUE`` in ``args`` (an existing ``--key`` value, or
``--key=...``, is replaced; otherwise the pair is appended), and each job gets its own
checkpoint/output dir (``CHECKPOINT_DIR/VALUE``, the output flag in ``args`` rewritten to
match) and log dir (``LOG_DIR-VALUE``): two ablations writing ``checkpoint-N`` into one
directory would resume from each other's weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dsguard.job.model import Job

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(value: str) -> str:
    """``value`` as a job-name suffix and directory name (the job-name alphabet)."""
    out = _UNSAFE.sub("-", value).strip("-.")
    return out or "x"


@dataclass(frozen=True, slots=True)
class Matrix:
    key: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Matrix:
        """``key=v1,v2``; raises ValueError with the reason."""
        key, sep, rest = text.partition("=")
        key = key.strip().lstrip("-")
        values = tuple(v.strip() for v in rest.split(",") if v.strip())
        if not sep or not key or not values:
            raise ValueError(f"--matrix {text!r}: write KEY=V1,V2,...")
        if len({slug(v) for v in values}) != len(values):
            raise ValueError(f"--matrix {text!r}: two values give the same job name")
        return cls(key, values)


def set_arg(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag`` set to ``value``: replaced where present (``--f v`` or
    ``--f=v``), appended otherwise."""
    out = list(args)
    for i, a in enumerate(out):
        if a == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if a.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return [*out, flag, value]


def read_raw(path: Path) -> dict[str, Any]:
    """The job file's YAML mapping (already validated by ``load_job``)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    return data


def derive(
    raw: dict[str, Any], job: Job, *, name: str | None = None, matrix: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The derived job document (see the module doc); ``raw`` is not changed."""
    out: dict[str, Any] = {k: v for k, v in raw.items()}
    out["name"] = name or job.name
    out["workdir"] = str(job.workdir)
    out["python"] = job.python
    if job.deepspeed is not None:
        out["deepspeed"] = {**raw.get("deepspeed", {}), "config": str(job.deepspeed.config_path)}
    log_dir = job.log_dir
    args = [str(a) for a in raw.get("args") or []]
    if matrix is not None:
        key, value = matrix
        args = set_arg(args, f"--{key}", value)
        log_dir = log_dir.with_name(f"{log_dir.name}-{slug(value)}")
        if job.checkpoints is not None:
            ckpt = job.checkpoints.dir / slug(value)
            out["checkpoints"] = {**raw.get("checkpoints", {}), "dir": str(ckpt)}
            if job.checkpoints.output_flag is not None:
                args = set_arg(args, job.checkpoints.output_flag, str(ckpt))
    if args or "args" in raw:
        out["args"] = args
    out["log_dir"] = str(log_dir)
    return out


def with_gpus(doc: dict[str, Any], gpus: tuple[int, ...] | None) -> dict[str, Any]:
    """``doc`` with the GPUs the queue handed out: ``gpus:`` (which the launch turns into
    ``CUDA_VISIBLE_DEVICES``, or the DeepSpeed launcher's ``--include localhost:i,j``), and
    without a ``world_size``/``CUDA_VISIBLE_DEVICES`` that would contradict it."""
    if gpus is None:
        return doc
    out = dict(doc)
    out["gpus"] = list(gpus)
    out.pop("world_size", None)
    env = dict(out.get("env") or {})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if env or "env" in out:
        out["env"] = env
    return out


def dump(doc: dict[str, Any]) -> str:
    head = "# Written by `dsguard queue`: the job file dsguard run is given. Do not edit.\n"
    return head + yaml.safe_dump(doc, sort_keys=False)
