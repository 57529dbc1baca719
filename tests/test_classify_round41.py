"""Issue 12, round 41: rules written from ``tune38`` (gathered as ``heldout39``), each from the
code that prints the message: TF's check on a GPU kernel launch, Horovod's NCCL op failure,
NCCL's "Duplicate GPU detected" (now a user error whose NCCL failure is its consequence, with
a hint), torch's distributed-checkpoint reader, torch.load's short read logged alone, and the
pytracking-style trackers' NaN check. Each positive case fails on the rules before round 41;
the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_DUPLICATE = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version "
    "2.21.5\n"
    "3: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "3: Last error:\n"
    "3: Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 3000\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TF's TF_CHECK_OK on a kernel launch
        (
            "```Non-OK-status: GpuLaunchKernel (FillPhiloxRandomKernelLaunch <Distribution>, "
            "num_blocks, block_size, 0, d.stream (), gen, data, size, dist) status: Internal: "
            "out of memory```",
            K.CUDA_OOM,
        ),
        # Horovod's NCCLContext::ErrorCheck, cut by the paste
        (
            "[1,1]<stderr>:UnknownError (see above for traceback): ncclAllReduce failed: "
            "unhandled cuda",
            K.NCCL_ERROR,
        ),
        # NCCL's duplicate device: the user error, not the NCCL failure it causes
        (_DUPLICATE, K.USER_CODE_ERROR),
        (
            "qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU detected : rank 6 and "
            "rank 4 both on CUDA device 31000\n"
            "qgpu2018:59522:59993 [0] NCCL INFO init.cc:1358 -> 5",
            K.USER_CODE_ERROR,
        ),
        # torch.distributed.checkpoint's filesystem reader
        (
            "AssertionError: req MetadataIndex(fqn='model.model.embed_tokens.weight', "
            "offset=torch.Size([0, 0]), index=0) mismatch sizes torch.Size([1571]) vs "
            "torch.Size([1571, 3072]",
            K.CHECKPOINT_ERROR,
        ),
        # torch.load's short read logged by a trainer at critical level
        (
            "[2022-07-01 10:00:00,000][saicinpainting][CRITICAL] - Training failed due to "
            "unexpected EOF, expected 4658175 more bytes. The file might be corrupted.",
            K.CHECKPOINT_ERROR,
        ),
        # the pytracking-style actor's NaN check
        (
            '    raise ValueError("Network outputs is NAN! Stop Training")\n'
            "ValueError: Network outputs is NAN! Stop Training",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round41_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_duplicate_gpu_names_the_fix_and_is_not_retried() -> None:
    failure = classify_text(_DUPLICATE, exit_code=1)
    assert failure is not None and failure.kind is FailureKind.USER_CODE_ERROR
    assert failure.retry_helps is False
    assert failure.hint is not None and "one GPU" in failure.hint


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # an op's other status through the same check is not memory
        (
            "Non-OK-status: GpuLaunchKernel(SomeKernel, blocks, threads, 0, d.stream()) "
            "status: Internal: invalid configuration argument",
            K.CUDA_OOM,
        ),
        # NCCL's invalid usage without the duplicate device stays a communication failure
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details)",
            K.USER_CODE_ERROR,
        ),
        # a tracker's validation that logs a NaN metric and goes on
        ("[val] epoch 3: IoU=nan (no valid boxes), continuing", K.LOSS_DIVERGENCE),
    ],
)
def test_round41_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_a_held_port_explains_the_communication_failure_after_it() -> None:
    """The held port is one of the launch's errors NCCL and c10d then report as their own
    (``_EXPLAINS_COMM_FAILURE``, with the duplicate GPU): another rank's store error after it is
    its consequence, so the verdict stays the user error with its hint."""
    text = (
        "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 "
        "- Address already in use).\n"
        "[rank1]: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for "
        "clients. 1/2 clients joined.\n"
    )
    failure = classify_text(text, exit_code=1)
    assert failure is not None and failure.kind is FailureKind.USER_CODE_ERROR
    assert failure.hint is not None and "port" in failure.hint
