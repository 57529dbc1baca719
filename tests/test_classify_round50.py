"""Issue 12, round 50: rules written from ``tune47`` (gathered as ``heldout48``), each from the
code that prints the message: XLA's and TensorFlow's cuDNN version check (the installed
packages, a user error) and MXNet's host storage running out. Each positive case fails on the
rules before round 50; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # XLA (JAX) and TensorFlow's stream executor, older cuDNN installed than built against
        (
            "2023-05-29 05:39:19.492073: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:"
            "427] Loaded runtime CuDNN library: 8.5.0 but source was compiled with: 8.6.0.  "
            "CuDNN library needs to have matching major version and equal or higher minor "
            "version. If using a binary install, upgrade your CuDNN library.",
            K.USER_CODE_ERROR,
        ),
        (
            "2019-07-15 19:29:20.741248: E tensorflow/stream_executor/cuda/cuda_dnn.cc:363] "
            "Loaded runtime CuDNN library: 7.0.4 but source was compiled with: 7.1.4.  CuDNN "
            "library major and minor version needs to match or have higher minor version",
            K.USER_CODE_ERROR,
        ),
        # MXNet's host storage, raised as MXNetError
        (
            "mxnet.base.MXNetError: [01:35:45] src/storage/./cpu_device_storage.h:73: Failed "
            "to allocate CPU Memory",
            K.HOST_OOM,
        ),
    ],
)
def test_round50_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # MXNet's device storage is the GPU's memory, not the host's
        (
            "mxnet.base.MXNetError: [09:12:01] src/storage/./pooled_storage_manager.h:157: "
            "cudaMalloc failed: out of memory",
            K.HOST_OOM,
        ),
        # a CUDA fault after the version warning still explains the death
        (
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:363] Loaded runtime CuDNN library: "
            "7.0.4 but source was compiled with: 7.1.4.\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round50_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
