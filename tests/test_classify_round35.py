"""Issue 12, round 35: rules written from ``tune32`` (gathered as ``heldout33``), each from the
code that prints the message: MXNet's and Paddle Fluid's device-memory checks, ONNX Runtime's
cuDNN failures, FSDP flattening mixed frozen and trainable parameters, and DeepSpeed's setup
without torch, read inside pip's indented subprocess output (a logger's level tag there opens
a message, not a source line). Each positive case fails on the rules before round 35; the
near misses and the guard pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_PIP_NO_TORCH = (  # pip's own box characters, as it prints them
    "  × Getting requirements to build wheel did not run successfully.\n"  # noqa: RUF001
    "  │ exit code: 1\n"
    "  ╰─> [20 lines of output]\n"
    "      [WARNING] Unable to import torch, pre-compiling ops will be disabled. Please visit "
    "https://pytorch.org/ to see how to properly install torch on your system.\n"
    "      DS_BUILD_OPS=1\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # MXNet mxnet_op.h's CUDA_CALL, cudaErrorMemoryAllocation
        (
            "mxnet.base.MXNetError: [17:13:00] src/operator/nn/./../mxnet_op.h:576: Check "
            "failed: err == cudaSuccess (2 vs. 0) Name: mxnet_generic_kernel ErrStr:out of "
            "memory",
            K.CUDA_OOM,
        ),
        # Paddle Fluid platform/gpu_info.cc GpuMaxChunkSize
        (
            "paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, "
            "10513462067 > 1369702144",
            K.CUDA_OOM,
        ),
        # ONNX Runtime cuda_call.cc
        (
            "2022-08-13 11:42:42.261057647 [E:onnxruntime:log, cuda_call.cc:118 CudaCall] "
            "CUDNN failure 8: CUDNN_STATUS_EXECUTION_FAILED ; GPU=0 ; hostname=h ; "
            "expr=cudnnConvolutionForward(...);",
            K.CUDA_FATAL,
        ),
        # torch distributed/fsdp/flat_param.py _init_flat_param
        ("ValueError: `FlatParameter` requires uniform `requires_grad`", K.DS_CONFIG_ERROR),
        # DeepSpeed's setup.py without torch, inside pip's subprocess output
        (_PIP_NO_TORCH, K.DS_BUILD_ERROR),
    ],
)
def test_round35_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_the_warning_alone_is_no_failure() -> None:
    """Without DS_BUILD_OPS=1 the install goes on: at exit 0 nothing failed."""
    assert classify_text(_PIP_NO_TORCH, exit_code=0) is None


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # MXNet's check with another CUDA error is a fault, not memory
        (
            "mxnet.base.MXNetError: [17:13:00] src/storage/./pooled_storage_manager.h:108: "
            "Check failed: err == cudaSuccess (4 vs. 0) : unspecified launch failure",
            K.CUDA_OOM,
        ),
        # ONNX Runtime's cuDNN allocation failure is memory
        (
            "[E:onnxruntime:log, cuda_call.cc:118 CudaCall] CUDNN failure 4: "
            "CUDNN_STATUS_ALLOC_FAILED ; GPU=0",
            K.CUDA_FATAL,
        ),
        # an indented list comprehension is still source, not a message
        (
            "    [p.grad.zero_() for p in model.parameters() if p.grad is not None]",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round35_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
