"""Issue 12, round 49: rules written from ``tune46`` (gathered as ``heldout47``), each from the
code that prints the message: MindSpore's device memory pool, a NaN loss under a statistic's
path (rllab's and rlpyt's tabular logger) or named for its function (GluonCV's CrossEntropy,
SmoothL1), and NCCL's connect retries on a refused peer (weak: a healthy start-up prints them,
and they never outrank the script's own error). Each positive case fails on the rules before
round 49; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_RETRY = (
    "pytorch-fairseq-worker-0:16:63 [0] NCCL INFO Call to connect returned Connection refused, "
    "retrying\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # MindSpore's dynamic memory pool on an Ascend NPU
        (
            "[ERROR] PRE_ACT(145615,fffbdf67f120,python):2025-01-12-09:48:13.703.514 [mindspore/"
            "ccsrc/backend/common/mem_reuse/mem_dynamic_allocator.cc:392] "
            "AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 24725382656 plus "
            "TotalUsedByEventMemStatistics : 0 and plus alloc size : 100555779072 is more than "
            "total mem size : 61079552000.",
            K.CUDA_OOM,
        ),
        # rlpyt's tabular logger, each statistic of the loss NaN
        (
            "2020-12-08 21:40:45.483178  | model_loss/Average              nan\n"
            "2020-12-08 21:40:45.483241  | model_loss/Std                  nan",
            K.LOSS_DIVERGENCE,
        ),
        # GluonCV's SSD script, its losses named for their functions
        (
            "INFO:root:[Epoch 0][Batch 1], Speed: 10.102 samples/sec, CrossEntropy=nan, "
            "SmoothL1=nan\n"
            "INFO:root:[Epoch 0][Batch 2], Speed: 10.230 samples/sec, CrossEntropy=nan, "
            "SmoothL1=nan",
            K.LOSS_DIVERGENCE,
        ),
        # NCCL's connect retries, and nothing else before the death
        (_RETRY * 3, K.NCCL_ERROR),
    ],
)
def test_round49_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a finite loss under a statistic's path, and a counter of NaN batches
        ("model_loss/Average              2.731", K.LOSS_DIVERGENCE),
        ("loss/nan_batches: 0, CrossEntropy=2.31", K.LOSS_DIVERGENCE),
        # a peer that was not listening yet, then the script's own error
        (
            _RETRY + "Traceback (most recent call last):\n"
            '  File "train.py", line 40, in <module>\n'
            "    batch = data['image']\n"
            "KeyError: 'image'",
            K.NCCL_ERROR,
        ),
    ],
)
def test_round49_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
