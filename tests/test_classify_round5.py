"""Issue 12, round 5: rules written from ``tune3`` (gathered as ``heldout4``) and three known
defects. Every message below is copied from the framework source that raises it or from a
public issue thread (cited per case); each test fails without the change it covers.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import (
    FailureKind,
    StreamClassifier,
    classify_text,
)
from tests.test_classify_frames import GPT_NEOX_1043, REDET_60

K = FailureKind


def kinds_of(text: str) -> list[FailureKind]:
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    return [ev.kind for ev in sc.evidence]


# -- interleaved tracebacks without rank prefixes (defect c) ---------------------------------


def interleave(a: str, b: str, *, lag: int) -> str:
    """Two ranks' tracebacks written into one stream line by line, ``b`` starting ``lag``
    lines after ``a``: what two unprefixed ranks print when both fail at once."""
    la, lb = a.splitlines(), b.splitlines()
    out: list[str] = la[:lag]
    rest_a = la[lag:]
    for i in range(max(len(rest_a), len(lb))):
        out += rest_a[i : i + 1] + lb[i : i + 1]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("lag", [0, 1, 3])
def test_interleaved_tracebacks_are_each_attributed_by_their_frames(lag: int) -> None:
    """Two ranks raise deepspeed.initialize's config assert (EleutherAI/gpt-neox#1043) at
    once, lines interleaved: both exception lines are config errors. Before, the first
    exception line took every frame with it and the second rank's came out the script's
    own error."""
    text = interleave(GPT_NEOX_1043, GPT_NEOX_1043, lag=lag)
    assert text.count("Traceback (most recent call last)") == 2
    assert kinds_of(text) == [K.DS_CONFIG_ERROR, K.DS_CONFIG_ERROR]


def test_a_second_header_before_the_exception_line_keeps_the_first_tracebacks_frames() -> None:
    """A second rank's header printed between the first rank's last frame and its exception
    line (csuhan/ReDet#60's torch.load of a corrupt file on both ranks): the first one's
    frames were dropped at that header, and its RuntimeError read as the script's error."""
    lines = REDET_60.splitlines()
    text = "\n".join([*lines[:-1], lines[0], lines[-1], *lines[1:]]) + "\n"
    assert kinds_of(text) == [K.CHECKPOINT_ERROR, K.CHECKPOINT_ERROR]


def test_a_traceback_cut_before_its_exception_line_still_lends_no_frames() -> None:
    """A header far below an unfinished traceback starts afresh: the old frames must not
    explain an unrelated exception printed later (the reach limit still holds)."""
    head = "\n".join(GPT_NEOX_1043.splitlines()[:-1])  # cut before its exception line
    filler = "\n".join(f"step {i} loss 1.0" for i in range(60))
    text = (
        head
        + "\n"
        + filler
        + "\nTraceback (most recent call last):\n"
        + '  File "train.py", line 3, in <module>\n    x = cfg["lr"]\nKeyError: \'lr\'\n'
    )
    assert K.USER_CODE_ERROR in kinds_of(text)
    assert K.DS_CONFIG_ERROR not in kinds_of(text)


# -- DeepSpeed config errors by their messages --------------------------------------------


DS_CONFIG_LINES = [
    # accelerate utils/dataclasses.py DeepSpeedPlugin (zjunlp/KnowLM#87)
    "ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",
    # accelerate utils/dataclasses.py, quoted in prose (shibing624/MedicalGPT#288)
    "是用zero2进行pt时，出现ValueError: `--mixed_precision` arg cannot be set to `bf16` when "  # noqa: RUF001
    "`fp16` is set in the DeepSpeed config file.",
    # accelerate utils/dataclasses.py fill_match
    "ValueError: `optimizer.params.lr` not found in kwargs. Please specify `optimizer.params.lr`"
    " without `auto` (set to correct value) in the DeepSpeed config file or pass it in kwargs.",
    # accelerate accelerator.py _prepare_deepspeed
    "ValueError: At least one of the dataloaders passed to `accelerate.prepare()` has `None` as "
    "batch size. Please set an integer value in `train_micro_batch_size_per_gpu` in the "
    "deepspeed config file or assign integer value to `AcceleratorState().deepspeed_plugin."
    "deepspeed_config['train_micro_batch_size_per_gpu']`.",
    # DeepSpeed runtime/config_utils.py
    "ValueError: Duplicate keys in DeepSpeed config: ['train_batch_size']",
    # transformers modeling_utils.py from_pretrained (hiyouga/LlamaFactory#199)
    "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with "
    "passing a `device_map`.",
    # ... its message half, split from its name by another rank's output
    # (ymcui/Chinese-LLaMA-Alpaca#465)
    ": DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
    "`device_map`.ValueError",
    # transformers integrations/accelerate.py (5.x)
    "ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.",
    # DeepSpeed runtime/config.py, engine.py; accelerate utils/dataclasses.py
    "ValueError: gradient_allreduce_op='sum' is not supported with ZeRO stage 3",
    "AssertionError: Native DeepSpeed MoE is not supported with ZeRO Stage 3. Use AutoEP or "
    "choose ZeRO stage 1/2.",
    "NotImplementedError: MS-AMP is not supported for ZeRO Stage 3. Please use ZeRO Stage 0, 1, "
    "or 2 instead.",
]


@pytest.mark.parametrize("line", DS_CONFIG_LINES, ids=[x[:50] for x in DS_CONFIG_LINES])
def test_deepspeed_config_messages(line: str) -> None:
    failure = classify_text(line + "\n", 1)
    assert failure is not None and failure.kind is K.DS_CONFIG_ERROR, failure


@pytest.mark.parametrize(
    "line",
    [
        # log lines that name the config are no failure (DeepSpeed's own start-up INFO lines)
        "[INFO] [config.py:1000:print] DeepSpeedEngine configuration: zero_enabled True",
        "Using the `WANDB_DISABLED` value in the DeepSpeed config file is deprecated",
        # deepspeed.initialize's assert names "deepspeed configs" but not where to fix them:
        # frame attribution, not this rule, decides it
        "AssertionError: Not sure how to proceed, we were given deepspeed configs in the "
        "deepspeed arguments and deepspeed.initialize() function call",
    ],
)
def test_lines_that_only_mention_the_deepspeed_config(line: str) -> None:
    assert K.DS_CONFIG_ERROR not in kinds_of(line + "\n")
