"""Issue 12, round 77: rules written from ``tune74`` (gathered as ``heldout75``), each from the
code that prints the message: darknet's check_error inside its layer table (a line the
echoed-source test used to drop), Marian's "Cost nan" update lines and its fp16 cost scaler at
its floor, tiny-cuda-nn's cudaMalloc check, OpenCL's device allocation failure, and LightGBM's
GPU learner without an OpenCL device. Each positive case fails on the rules before round 77;
the near misses pass before and after. Left as it read then: CharlesShang/TFFRCNN#68, TensorFlow
1.x's "Resource exhausted: OOM when allocating tensor with shape[25088,4096]" with the device
cut off the paste, labelled a device OOM; read as one since round 85 (the BFC allocator's map
before it, tests/test_classify_round85.py).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # pjreddie/darknet#904
        (
            "layer     filters    size              input                output\n"
            "    0 conv     32  3 x 3 / 1   416 x 416 x   3   ->   416 x 416 x  32  0.299 BFLOPs\n"
            "    3 CUDA Error: out of memory\n"
            "darknet: ./src/cuda.c:36: check_error: Assertion `0' failed.",
            K.CUDA_OOM,
        ),
        # marian-nmt/marian-dev#699
        (
            "[2020-09-05 20:22:42] Ep. 1 : Up. 300 : Sen. 137,255 : Cost nan : Time 17.18s : nan "
            "words/s : gNorm 41172.8250\n"
            "[2020-09-05 20:22:59] Ep. 1 : Up. 400 : Sen. 184,785 : Cost nan : Time 17.13s : nan "
            "words/s : gNorm 40407.7559",
            K.LOSS_DIVERGENCE,
        ),
        # marian-nmt/marian#386
        (
            "  [2022-05-09 06:55:01] NaN/Inf percentage 0.70 in 10 gradient updates, but "
            "cost-scaling factor 7.62939e-06 is already at minimum",
            K.LOSS_DIVERGENCE,
        ),
        # NVlabs/instant-ngp#182
        (
            "21:39:09 ERROR    Uncaught exception: Could not allocate memory: E:\\ngp\\"
            "dependencies\\tiny-cuda-nn\\include\\tiny-cuda-nn/gpu_memory.h:109 "
            "cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memory",
            K.CUDA_OOM,
        ),
        # lightgbm-org/LightGBM#4480
        (
            "terminate called after throwing an instance of "
            "'boost::wrapexcept<boost::compute::opencl_error>'\n"
            "  what():  Memory Object Allocation Failure",
            K.CUDA_OOM,
        ),
        # lightgbm-org/LightGBM#532
        (
            "[LightGBM] [Info] This is the GPU trainer!!\nMet Exceptions:\nNo OpenCL device found",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round77_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # Marian's finite cost is training going on
        (
            "[2022-05-09 06:50:57] Ep. 8 : Up. 537000 : Sen. 98,569,133 : Cost 2.46588373 : "
            "Time 111.03s : 191311.12 words/s : gNorm 4.6161",
            K.LOSS_DIVERGENCE,
        ),
        # Marian lowering its cost-scaling factor is the scaler at work, not at its floor
        (
            "[2022-05-09 06:40:01] NaN/Inf percentage 0.70 in 10 gradient updates, reducing "
            "cost-scaling factor to 7.62939e-06",
            K.LOSS_DIVERGENCE,
        ),
        # an IPython-numbered source line is still echoed code
        (
            "----> 3 model.fit(x, y)\n      4 print('done')\nValueError: bad input",
            K.CUDA_OOM,
        ),
    ],
)
def test_round77_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
