"""Offline inputs for transformers' ``run_clm.py``: a tiny GPT-2 config, a locally trained
tokenizer and a generated text file, so the example runs with ``HF_HUB_OFFLINE=1`` and
``HF_DATASETS_OFFLINE=1`` (this machine cannot reach the Hub).

``run_clm.py --config_name DIR --tokenizer_name DIR`` builds the model from ``DIR/config.json``
with random weights (``AutoModelForCausalLM.from_config``) and loads the tokenizer from
``DIR/tokenizer.json`` (a ``PreTrainedTokenizerFast``); ``--train_file X.txt`` goes through
``datasets``' packaged ``text`` builder, which needs no download.

Also: ``python -m bench.runclm_assets DIR`` writes them (to try run_clm by hand).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

#: A GPT-2 small enough that one optimizer step takes a second on 2 CPU cores, so the
#: activations of any micro-batch are a few MB: under a host limit, what fails is
#: DeepSpeed's buffers, as in the issue's run_clm report.
GPT2_CONFIG: dict[str, object] = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "vocab_size": 512,
    "n_positions": 256,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 2,
    "n_inner": 256,
    "activation_function": "gelu_new",
    "bos_token_id": 0,
    "eos_token_id": 0,
    "tie_word_embeddings": True,
}
#: The shape as dsguard's planner reads it (``--config_name DIR`` -> ``DIR/config.json``).
BLOCK_SIZE = 128
WORDS = 400
LINES = 1500


def _words(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(WORDS)]


def write_text(path: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    vocab = _words(rng)
    lines = (" ".join(rng.choice(vocab) for _ in range(rng.randint(8, 30))) for _ in range(LINES))
    path.write_text("\n".join(lines) + "\n")


def write_tokenizer(model_dir: Path, text: Path) -> None:
    """A byte-level BPE trained on ``text`` and saved as ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(str(GPT2_CONFIG["vocab_size"])),
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(text)], trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=int(str(GPT2_CONFIG["n_positions"])),
    )
    fast.save_pretrained(str(model_dir))


def build(root: Path) -> tuple[Path, Path]:
    """``root/model`` (config.json + tokenizer) and ``root/train.txt``; reused when present."""
    model_dir, text = root / "model", root / "train.txt"
    if (model_dir / "config.json").is_file() and text.is_file():
        return model_dir, text
    model_dir.mkdir(parents=True, exist_ok=True)
    write_text(text)
    write_tokenizer(model_dir, text)
    (model_dir / "config.json").write_text(json.dumps(GPT2_CONFIG, indent=2))
    return model_dir, text


if __name__ == "__main__":
    m, t = build(Path(sys.argv[1]))
    print(m, t)
