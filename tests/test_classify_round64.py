"""Issue 12, round 64: rules written from ``tune60`` (gathered as ``heldout61``): Marian's
CUDA_CHECK and the common gpuAssert helper reporting cudaErrorMemoryAllocation, and bash's
job-status line with its status padded from the PID. Each positive case fails on the rules
before round 64; the near misses pass before and after.
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
            "[2019-04-15 08:34:14] Error: CUDA error 2 'out of memory' - /data/home/mt/tools/"
            "marian/src/tensors/gpu/device.cu:32: cudaMalloc(&data_, size)\n"
            "[2019-04-15 08:34:14] Error: Aborted from virtual void marian::gpu::Device::"
            "reserve(size_t) in /data/home/mt/tools/marian/src/tensors/gpu/device.cu:32",
            K.CUDA_OOM,
        ),
        (
            "terminate called after throwing an instance of 'util::Exception'\n"
            "  what():  marian-dev/src/kernels/cuda_helpers.h:13 in void gpuAssert(cudaError_t,"
            " const char*, int, bool) threw util::Exception.\n"
            "GPUassert: out of memory marian-dev/src/tensors/device_gpu.cu 32\n"
            "Aborted (core dumped)",
            K.CUDA_OOM,
        ),
        (
            "bash: line 1:  227304  Killed  (gmm-latgen-faster  --max-active=7000 --beam=11.0)",
            K.HOST_OOM,
        ),
    ],
)
def test_round64_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the same formats with another runtime error are no OOM
        (
            "Error: CUDA error 700 'an illegal memory access was encountered' - src/tensors/"
            "gpu/device.cu:32: cudaMalloc(&data_, size)",
            K.CUDA_OOM,
        ),
        ("GPUassert: invalid device ordinal kernels/main.cu 88", K.CUDA_OOM),
        # a script's own line that says something was killed is not the shell's status
        ("run.sh: line 12: note: the previous job was Killed by the user", K.HOST_OOM),
    ],
)
def test_round64_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
