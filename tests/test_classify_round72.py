"""Issue 12, round 72: rules written from ``tune69`` (gathered as ``heldout70``), each from the
code that prints the message: Marian's CUDA_CHECK on a runtime error other than memory (round
64 read its out-of-memory), GPU PhysX's internal errors, and Kaldi's input stream on a path
that opens nothing. Each positive case fails on the rules before round 72; the near misses
pass before and after. Left as it reads: google-research/bert#57, TensorFlow's
"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for
.../bert_model.ckpt", labelled a user error (the README's placeholder path) and read as a
checkpoint error, which a missing checkpoint file also is.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[task 2025-01-21T16:30:37.188Z] [2025-01-21 16:30:37] Error: CUDA error 999 'unknown "
            "error' - /builds/worker/fetches/marian-source/src/tensors/gpu/algorithm.cu:54: "
            "cudaStreamSynchronize(0)",
            K.CUDA_FATAL,
        ),
        (
            "/buildAgent/work/99bede84aa0a52c2/source/gpunarrowphase/src/PxgNarrowphaseCore.cpp "
            "(2408) : internal error : memcpy failed fail!\n"
            "  700\n"
            "Segmentation fault (core dumped)",
            K.CUDA_FATAL,
        ),
        (
            "ERROR (nnet3-init[5.5.844~1-82fea]:Input():kaldi-io.cc:756) Error opening input "
            "stream exp/chain2/tdnn1a_sp/configs/lda.mat",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round72_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # Marian's out of memory stays a device OOM (round 64), not a CUDA fault
        (
            "Error: CUDA error 2 'out of memory' - src/tensors/gpu/device.cu:32: "
            "cudaMalloc(&data_, size)",
            K.CUDA_FATAL,
        ),
        # PhysX's warnings are no internal error
        (
            "/buildAgent/work/x/source/gpucommon/src/PxgCudaMemoryAllocator.cpp (59) : warning : "
            "Failed to allocate pinned memory.",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round72_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
