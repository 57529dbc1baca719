"""Issue 12, round 39: rules written from ``tune36`` (gathered as ``heldout37``), each from the
code that prints the message: vLLM's sleep-mode allocator (and a reporter's retyping of it),
Paddle 1.x's enforce on a cuDNN status, huggingface_hub's disk check before a download, and
litgpt's check of a checkpoint directory. Each positive case fails on the rules before round
39; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_HUB = "/usr/local/lib/python3.11/dist-packages/huggingface_hub/file_download.py:1006: "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # vLLM csrc/cumem_allocator.cpp, as printed and as a reporter retyped it
        ("Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: 62", K.CUDA_OOM),
        ("Cuda Error: out of memory at /workspave/scrc/cumem_allocator.cpp: 62", K.CUDA_OOM),
        # Paddle 1.x's enforce raising the cuDNN status itself
        (
            '  File "/usr/local/lib/python3.5/dist-packages/paddle/fluid/executor.py", line 472, '
            "in run\n"
            "    self.executor.run(program.desc, scope, 0, True, True)\n"
            "paddle.fluid.core.EnforceNotMet: CUDNN_STATUS_EXECUTION_FAILED at "
            "[/paddle/paddle/fluid/operators/conv_cudnn_op.cu.cc:230]",
            K.CUDA_FATAL,
        ),
        # huggingface_hub's check before it downloads a shard
        (
            _HUB + "UserWarning: Not enough free disk space to download the file. The expected "
            "file size is: 1611.40 MB. The target location /root/.cache/huggingface/hub only "
            "has 0.00 MB free disk space.\n  warnings.warn(",
            K.DISK_FULL,
        ),
        # litgpt utils.py check_valid_checkpoint_dir
        (
            "--checkpoint_dir '/root/litgpt/checkpoints/lit-llama3' is missing the files: "
            "['model_config.yaml'].\n"
            "Find download instructions at https://github.com/Lightning-AI/litgpt/blob/main/"
            "tutorials",
            K.USER_CODE_ERROR,
        ),
        (
            "checkpoint_dir '/data/ckpt/phi-2' is not a checkpoint directory.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round39_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a kernel's own fault through the same allocator is not memory running out
        (
            "CUDA Error: invalid argument at /workspace/csrc/cumem_allocator.cpp:62",
            K.CUDA_OOM,
        ),
        # Paddle's enforce on a cuDNN status that is an allocation stays a device OOM
        (
            "paddle.fluid.core.EnforceNotMet: CUDNN_STATUS_ALLOC_FAILED at "
            "[/paddle/paddle/fluid/platform/cudnn_helper.h:120]",
            K.CUDA_FATAL,
        ),
        # the hub's download that fits goes on; a size report alone is not a full disk
        ("Downloading shards: 100%|██████████| 2/2 [00:41<00:00, 20.6s/it]", K.DISK_FULL),
        # the script's own flag echo, not litgpt's check
        ("Namespace(checkpoint_dir='checkpoints/lit-llama3', lr=0.0003)", K.USER_CODE_ERROR),
        # transformers logs this on every read of an unset pad_token, in healthy runs too: no
        # rule reads it
        (
            "ERROR - transformers.tokenization_utils -   Using pad_token, but it is not set yet.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round39_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
