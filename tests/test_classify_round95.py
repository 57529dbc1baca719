"""Issue 12, round 95: rules written from ``tune85`` (gathered as ``heldout86``), each from the
code that prints the message: R's reticulate error with the Python exception on the line after
R's words, and a loss printed as ``loss=inf``. Each positive case fails on the rules before
round 95; the near misses pass before and after.

Left as it reads: BVLC/caffe#1086, Caffe's "Check failed: fd != -1 (-1 vs. -1) File not found"
under ReadProtoFromBinaryFile after "Restoring previous solver status from ...caffemodel",
labelled a checkpoint error, stays ``unknown``: the same check fails for a mean file or any
binary prototxt, and the restore is named only on an info line before it.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # rstudio/keras3#1042
        (
            "Error in py_call_impl(callable, dots$args, dots$keywords) :\n"
            "  RuntimeError: Evaluation error: invalid argument type.\n"
            "\n"
            "Detailed traceback:\n"
            '  File "/home/u/.local/share/r-miniconda/envs/r-reticulate/lib/python3.6/'
            'site-packages/tensorflow/python/keras/engine/training.py", line 830, in fit',
            K.USER_CODE_ERROR,
        ),
        # mozilla/DeepSpeech#238
        (
            "2016-11-25 17:41:55 STARTING Epoch 0009\n"
            "2016-11-25 17:41:55 Training model...\n"
            "2016-11-25 18:29:38 Training loss=inf avg_cer=0.377731130 WER: 0.828431",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round95_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # an indented exception line after anything but R's head stays unread as before
        (
            "Loading the model\n  RuntimeError: Evaluation error: invalid argument type.",
            K.USER_CODE_ERROR,
        ),
        # R's head with a memory error on the next line is no code mistake
        (
            "Error in py_call_impl(callable, dots$args, dots$keywords) :\n"
            "  ResourceExhaustedError: OOM when allocating tensor with shape[64,512,512] and type "
            "float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            K.USER_CODE_ERROR,
        ),
        # a key named like a loss holding an information string
        ("Training loss=info verbosity=2", K.LOSS_DIVERGENCE),
    ],
)
def test_round95_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
