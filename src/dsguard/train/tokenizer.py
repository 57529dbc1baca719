"""A byte-level tokenizer that needs no download and no vocabulary file.

Why: the reference trainer must run on machines with no hub access (CI, air-gapped clusters)
and start from a config with random weights, so it cannot fetch a tokenizer. UTF-8 bytes are a
complete, lossless vocabulary for any text; three special ids follow them. Pure Python, no
torch, so it can be unit-tested and reused anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_FILE = "dsguard_tokenizer.json"


class ByteTokenizer:
    """ids 0..255 are the UTF-8 bytes; then ``pad``, ``bos``, ``eos``.

    ``vocab_size`` is rounded up to a multiple of 8 (unused ids at the end) because embedding
    tables with such sizes use faster kernels on GPUs; the extra rows are never indexed.
    """

    NUM_BYTES = 256

    def __init__(self) -> None:
        self.pad_token_id = self.NUM_BYTES
        self.bos_token_id = self.NUM_BYTES + 1
        self.eos_token_id = self.NUM_BYTES + 2
        self.vocab_size = (self.NUM_BYTES + 3 + 7) // 8 * 8

    def encode(self, text: str, *, max_length: int | None = None) -> list[int]:
        """``[bos] + bytes + [eos]``, cut to ``max_length`` ids (per example, never packed).

        A cut keeps the first ``max_length`` ids (the eos is lost, as with HF
        ``truncation=True``): the example keeps its identity and position in the dataset.
        """
        ids = [self.bos_token_id, *text.encode("utf-8"), self.eos_token_id]
        if max_length is not None:
            if max_length < 2:
                raise ValueError(f"max_length must be >= 2, got {max_length}")
            ids = ids[:max_length]
        return ids

    def decode(self, ids: list[int]) -> str:
        """Inverse of :meth:`encode` for the byte ids; special ids are dropped."""
        data = bytes(i for i in ids if 0 <= i < self.NUM_BYTES)
        return data.decode("utf-8", errors="replace")

    def save_pretrained(self, directory: str | Path) -> None:
        """Write a small description next to the model so a checkpoint says how it was fed."""
        path = Path(directory) / TOKENIZER_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "type": "dsguard.byte_level",
                    "vocab_size": self.vocab_size,
                    "pad_token_id": self.pad_token_id,
                    "bos_token_id": self.bos_token_id,
                    "eos_token_id": self.eos_token_id,
                },
                indent=2,
            )
            + "\n"
        )
