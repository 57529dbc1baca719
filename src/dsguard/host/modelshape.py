"""Read a model's shape from its files (read-only): ``config.json`` and safetensors headers.

The estimator (:mod:`dsguard.core.estimate`) takes plain numbers; this is where they come
from. Nothing is imported from torch or transformers: ``config.json`` is JSON, and a
safetensors file starts with an 8-byte little-endian header length and a JSON header that
lists every tensor's shape (https://huggingface.co/docs/safetensors/index, "Format"), so the
parameter count costs a few kilobytes of reading, not a model load.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsguard.core.estimate import ModelShape
from dsguard.job.argv import flag_value

#: Flags of training scripts that name the model's directory or config file, most specific
#: first (HF examples, dsguard's reference trainer, common SFT scripts).
MODEL_FLAGS: tuple[str, ...] = (
    "--model_config",
    "--config_name",
    "--model_name_or_path",
    "--model_path",
    "--model",
)

#: Largest header read from a safetensors file (a corrupt length must not read gigabytes).
MAX_HEADER_BYTES = 100 * 2**20


def find_model_config(args: Sequence[str], workdir: Path) -> Path | None:
    """The ``config.json`` (or named config file) the job's arguments point at, if local."""
    for flag in MODEL_FLAGS:
        value = flag_value(args, flag)
        if not value:
            continue
        path = Path(value).expanduser()
        path = path if path.is_absolute() else workdir / path
        if path.is_dir() and (path / "config.json").is_file():
            return path / "config.json"
        if path.is_file() and path.suffix == ".json":
            return path
    return None


def _int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def shape_from_config(cfg: Mapping[str, Any], source: str = "") -> ModelShape | None:
    """A :class:`ModelShape` from HF config keys (GPT-2's ``n_embd``/``n_layer`` too), or
    None when a needed key is missing. Multimodal configs nest the language model under
    ``text_config``."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" not in cfg:
        cfg = {**cfg, **text}
    h = _int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head")
    vocab = _int(cfg, "vocab_size")
    if h is None or layers is None or heads is None or vocab is None:
        return None
    inter = _int(cfg, "intermediate_size", "n_inner", "ffn_dim") or 4 * h
    return ModelShape(
        hidden_size=h, num_layers=layers, num_heads=heads, intermediate_size=inter,
        vocab_size=vocab, num_kv_heads=_int(cfg, "num_key_value_heads"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position=_int(cfg, "max_position_embeddings", "n_positions"), source=source,
    )  # fmt: skip


def safetensors_params(model_dir: Path) -> int | None:
    """Total elements of every tensor in the directory's ``*.safetensors`` files (None when
    there are none or one cannot be read)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        try:
            with path.open("rb") as f:
                raw = f.read(8)
                if len(raw) != 8:
                    return None
                (size,) = struct.unpack("<Q", raw)
                if size > MAX_HEADER_BYTES:
                    return None
                header = json.loads(f.read(size))
        except (OSError, ValueError):
            return None
        for name, meta in header.items():
            if name == "__metadata__" or not isinstance(meta, dict):
                continue
            total += math.prod(int(d) for d in meta.get("shape", []))
    return total


def read_model_shape(args: Sequence[str], workdir: Path) -> tuple[ModelShape | None, str]:
    """The job's model shape and where it came from, or None and why not."""
    path = find_model_config(args, workdir)
    if path is None:
        return None, (
            "no local model config found in the job's arguments "
            f"({', '.join(MODEL_FLAGS)} naming a directory with config.json or a .json file)"
        )
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{path}: unreadable model config ({exc})"
    if not isinstance(cfg, dict):
        return None, f"{path}: not a JSON object"
    shape = shape_from_config(cfg, str(path))
    if shape is None:
        return None, f"{path}: lacks hidden_size / num_hidden_layers / heads / vocab_size"
    n = safetensors_params(path.parent)
    if n is not None:
        import dataclasses

        shape = dataclasses.replace(shape, n_params=n, source=f"{path} + safetensors headers")
    return shape, str(path)
