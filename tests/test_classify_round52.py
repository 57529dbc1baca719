"""Issue 12, round 52: rules written from ``tune49`` (gathered as ``heldout50``), each from the
code that prints the message: Paddle 1.x's legacy GPU allocator finding no chunk, and
torch.distributed asked for a backend its build lacks (a user error, read ahead of the frames
of init_process_group). Each positive case fails on the rules before round 52; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_C10D = "D:\\Anaconda3\\envs\\mmcv\\lib\\site-packages\\torch\\distributed\\distributed_c10d.py"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Paddle 1.x's legacy allocator
        (
            "W0413 13:19:50.571779 16109 legacy_allocator.cc:191] Cannot allocate "
            "196.000000MB in GPU 0, available 1.214539GB\n"
            "W0413 13:19:50.571794 16109 legacy_allocator.cc:194] total 11996954624",
            K.CUDA_OOM,
        ),
        # the Windows build of torch, launched with the NCCL backend
        (
            "Traceback (most recent call last):\n"
            f'  File "{_C10D}", line 531, in init_process_group\n'
            "    timeout=timeout)\n"
            f'  File "{_C10D}", line 625, in _new_process_group_helper\n'
            '    raise RuntimeError("Distributed package doesn\'t have NCCL "\n'
            "RuntimeError: Distributed package doesn't have NCCL built in",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round52_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the system allocator's first chunk too large for what is free: a smaller may fit
        (
            "W0413 13:19:50.571400 16109 system_allocator.cc:122] Cannot malloc 9999.6 MB GPU "
            "memory. Please shrink FLAGS_fraction_of_gpu_memory_to_use environment variable to "
            "a lower value. Current value is 0.92",
            K.CUDA_OOM,
        ),
        # NCCL's own failure at init is still a communication failure
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:219, unhandled system error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.14.3",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round52_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
