"""Issue 12, round 34: rules written from ``tune31`` (gathered as ``heldout32``), each from the
code that prints the message: Paddle's loss printed as a list and its kernel-side asserts,
c10d's client-socket timeout as a glog line, JAX's coordination-service RPCs, OneFlow's RDMA
transport, and verl's FSDP wrap policy (also under a frame header the excerpt cut inside its
path). Each positive case fails on the rules before round 34; the near misses pass before
and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_PADDLE_ASSERT = (
    "Error: /paddle/paddle/phi/kernels/gpu/cross_entropy_kernel.cu:1008 Assertion `false` "
    "failed. The value of label expected >= 0 and < 7, or == -100, but got 10. Please check "
    "label value."
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Paddle's logger printing the loss as a one-element array
        (
            "2022-12-08 17:57:32,672-INFO: Total iter: 10, epoch: 0, batch: 10, loss: [nan]\n"
            "2022-12-08 17:57:33,992-INFO: Total iter: 20, epoch: 0, batch: 20, loss: [nan]",
            K.LOSS_DIVERGENCE,
        ),
        # Paddle's PADDLE_ENFORCE inside a CUDA kernel
        (_PADDLE_ASSERT, K.CUDA_FATAL),
        # torch >= 2.4's c10d client socket, a glog line
        (
            "[E108 20:04:34.467642512 socket.cpp:957] [c10d] The client socket has timed out "
            "after 900s while trying to connect to (33.145.124.128, 29500).",
            K.NCCL_ERROR,
        ),
        # a gRPC error's detail naming JAX's coordination service call
        (
            "DEADLINE_EXCEEDED: Deadline Exceeded\nRPC: /tensorflow.CoordinationService/"
            "RegisterTask",
            K.NCCL_ERROR,
        ),
        # OneFlow's ibverbs transport's CHECK
        (
            "libi40iw-i40iw_ucreate_cq: failed to create CQ\n"
            "F20230523 19:20:03.780495 441071 ibverbs_comm_network.cpp:136] Check failed: cq_ "
            ": Invalid argument [22]",
            K.NCCL_ERROR,
        ),
        # verl's wrap policy, under a frame header cut inside its path
        (
            'EasyR1/verl/utils/fsdp_utils.py", line 66, in get_fsdp_wrap_policy\n'
            '    raise Exception(f"Cannot find {module} in pretrained model.")\n'
            "Exception: Cannot find Qwen2VLDecoderLayer in pretrained model.",
            K.DS_CONFIG_ERROR,
        ),
        (
            '  File "/opt/verl/verl/utils/fsdp_utils.py", line 66, in get_fsdp_wrap_policy\n'
            '    raise Exception(f"Cannot find {module} in pretrained model.")\n'
            "Exception: Cannot find LlamaDecoderLayer in pretrained model.",
            K.DS_CONFIG_ERROR,
        ),
    ],
)
def test_round34_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_kernel_side_assert_is_not_retried_unchanged() -> None:
    """A label out of range recurs at the same data: no unchanged retry."""
    failure = classify_text(_PADDLE_ASSERT + "\n", exit_code=1)
    assert failure is not None and failure.kind is K.CUDA_FATAL
    assert failure.retry_helps is False


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a loss logged as an array of numbers
        ("Total iter: 10, epoch: 0, batch: 10, loss: [2.304512]", K.LOSS_DIVERGENCE),
        # a host-side assert in a .cu file's host code (glibc's format) is no kernel's
        ("train_ops.cu:42: void setup(): Assertion `n > 0' failed.", K.CUDA_FATAL),
        # the coordination service starting is no failure
        (
            "I0101 coordination_service_agent.cc:300] Coordination agent has successfully "
            "connected.",
            K.NCCL_ERROR,
        ),
        # prose naming a file and a line is no frame
        ('see the code in train.py", line 3, in main', K.DS_CONFIG_ERROR),
    ],
)
def test_round34_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
