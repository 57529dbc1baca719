"""Data for the reference trainer: local text files or generated text, one example per sample.

The design constraint is resume exactness under the ladder. HF Trainer stores only
``global_step`` in a checkpoint and recomputes the data position from the dataset's *length
and order* (docs/resuming.md, sections 2 and 3.3). So:

* one text = one sample, truncated on its own (:class:`TextDataset`), never packed or
  concatenated: lowering ``--model_max_length`` on resume changes what each sample contains,
  not which sample sits at which index;
* generated data depend only on ``(count, max_chars, seed)``, never on the run's knobs, and
  are regenerated identically by every attempt, rank and phase;
* each sample carries its index as ``sample_id`` through the collator, so tests can check
  which samples each optimizer step consumed (the trainer pops it before the forward).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from dsguard.train.tokenizer import ByteTokenizer

GENERATED_DATA_FILE = "dsguard-data.jsonl"

_WORDS = [
    "the",
    "a",
    "model",
    "learns",
    "to",
    "predict",
    "next",
    "byte",
    "from",
    "context",
    "while",
    "training",
    "loss",
    "goes",
    "down",
    "checkpoint",
    "resume",
    "batch",
    "gradient",
    "memory",
    "shard",
    "optimizer",
    "step",
    "rank",
    "stage",
    "offload",
    "adapter",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "and",
    "then",
    "sleeps",
    "under",
    "warm",
    "sun",
    "near",
    "river",
    "bank",
]


def generate_texts(count: int, *, max_chars: int = 512, seed: int = 1234) -> list[str]:
    """``count`` deterministic examples of varied length (16..``max_chars`` characters).

    A mix of word salad and small arithmetic facts, so a tiny model's loss visibly falls and
    lengths vary enough for padding and truncation to matter. Depends only on the arguments.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if max_chars < 16:
        raise ValueError(f"max_chars must be >= 16, got {max_chars}")
    rng = random.Random(f"dsguard-data:{seed}")
    texts: list[str] = []
    for i in range(count):
        target = rng.randint(16, max_chars)
        parts = [f"example {i}:"]
        length = len(parts[0])
        while length < target:
            if rng.random() < 0.3:
                a, b = rng.randint(0, 99), rng.randint(0, 99)
                part = f"{a} + {b} = {a + b}."
            else:
                part = rng.choice(_WORDS)
            parts.append(part)
            length += len(part) + 1
        texts.append(" ".join(parts)[:target])
    return texts


def write_jsonl_atomic(path: Path, texts: Sequence[str]) -> None:
    """Write ``{"text": ...}`` lines via temp file + rename, so concurrent ranks (which all
    write the same content) and readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_texts(path: Path) -> list[str]:
    """Examples from a local ``.jsonl`` (one object with a ``"text"`` field per line) or any
    other text file (one example per non-empty line)."""
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        if path.suffix == ".jsonl":
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise ValueError(f"{path}:{line_no}: expected an object with a 'text' string")
                texts.append(record["text"])
        else:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    if not texts:
        raise ValueError(f"{path}: no examples")
    return texts


class TextDataset(Dataset[dict[str, Any]]):
    """Map-style dataset: sample ``i`` is text ``i`` tokenised and truncated on its own.

    Tokenisation is lazy (per ``__getitem__``), so the dataset's length and order are fixed
    by the texts alone, whatever ``max_length`` is.
    """

    def __init__(
        self, texts: Sequence[str], tokenizer: ByteTokenizer, max_length: int | None
    ) -> None:
        self.texts = list(texts)
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        ids = self.tokenizer.encode(self.texts[index], max_length=self.max_length)
        return {"input_ids": ids, "sample_id": index}


class CausalLMCollator:
    """Right-pads a micro-batch to its longest example; labels are the ids, -100 on padding.

    Right padding keeps every real token's position and causal context identical whatever
    the micro-batch holds, so splitting a batch of 8 into two of 4 changes the loss only by
    float rounding. ``sample_id`` travels as a tensor column (dataloader workers welcome).
    """

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            longest = (longest + m - 1) // m * m
        input_ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(features), longest), dtype=torch.long)
        labels = torch.full((len(features), longest), -100, dtype=torch.long)
        for row, feature in enumerate(features):
            ids = torch.tensor(feature["input_ids"], dtype=torch.long)
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
            labels[row, : len(ids)] = ids
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if "sample_id" in features[0]:
            batch["sample_id"] = torch.tensor([int(f["sample_id"]) for f in features])
        return batch
