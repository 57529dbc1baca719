"""Issue 12, round 70: rules written from ``tune67`` (gathered as ``heldout68``), each from the
code that prints the message: a CUDA kernel's assert with its line's head cut, the driver
refusing PTX from a newer toolchain, TensorFlow's cuDNN launch failure, the Faster R-CNN loss
terms of jwyang/faster-rcnn.pytorch's trainer gone NaN. Each positive case fails on the rules
before round 70; the near misses pass before and after. Left unread: TensorFlow's stream
executor refusing device allocations with nothing after them ("failed to allocate ... from
device: CUDA_ERROR_OUT_OF_MEMORY", TF's start-up grab of its memory fraction, which it retries
smaller and trains on; round 6 holds that it is no OOM, and no batch size changes that grab).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_PTX = (
    "2021-12-26 14:31:20.360912: E external/org_tensorflow/tensorflow/compiler/xla/pjrt/"
    "pjrt_stream_executor_client.cc:2086] Execution of replica 0 failed: INTERNAL: CustomCall "
    "failed: jaxlib/cuda_prng_kernels.cc:30: operation cudaGetLastError() failed: the provided "
    "PTX was compiled with an unsupported toolchain."
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "`ad: [47,0,0] Assertion `cur_target >= 0 && cur_target < n_classes` failed.\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 307, in train\n'
            "    losses = net(datum)\n",
            K.CUDA_FATAL,
        ),
        (_PTX, K.CUDA_FATAL),
        (
            "InternalError (see above for traceback): cuDNN launch failure : input shape("
            "[1,3,933,613]) filter shape([7,7,3,64])",
            K.CUDA_FATAL,
        ),
        (
            "iter 20/34468\uff1arpn_cls: nan, rpn_box: nan, rcnn_cls: nan, rcnn_box nan, "
            "metric nan",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round70_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_ptx_from_a_newer_toolchain_is_not_retried() -> None:
    failure = classify_text(_PTX + "\n", exit_code=1)
    assert failure is not None and failure.kind is FailureKind.CUDA_FATAL
    assert failure.retry_helps is False


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # glibc's host assert quotes its condition with "'", not a kernel's backquotes
        (
            "train: src/loader.c:42: load: Assertion `n > 0' failed.",
            K.CUDA_FATAL,
        ),
        # the loss terms with numbers
        (
            "iter 20/34468\uff1arpn_cls: 0.6931, rpn_box: 0.0123, rcnn_cls: 0.3, rcnn_box 0.1",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round70_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
