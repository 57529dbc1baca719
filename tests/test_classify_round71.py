"""Issue 12, round 71: rules written from ``tune68`` (gathered as ``heldout69``), each from the
code that prints the message: Keras's and torch.distributed.checkpoint's load-time shape and
layer-count checks, Orbax restoring onto other devices, TensorFlow's sparse cross-entropy on a
label past the classes, TF's batch-norm cuDNN launch failure (round 70's rule, with its space),
ArrayFire's device OOM, and torch elastic's report of a rank SIGBUS ended (weak host memory, as
a shell's "Bus error"). Each positive case fails on the rules before round 71; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_SIGBUS_TABLE = (
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2024-01-16_18:04:01\n"
    "  host      : lexun-1\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : -7 (pid: 16609)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 7 (SIGBUS) received by PID 16609\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ValueError: Layer count mismatch when loading weights from file. Model expected 24 "
            "layers, found 107 saved layers.",
            K.CHECKPOINT_ERROR,
        ),
        (
            "ValueError: Size mismatch between saved torch.Size([6561, 512]) and current: "
            "torch.Size([5533, 512]) for optimizer.state.module.embedding.word_embeddings.weight",
            K.CHECKPOINT_ERROR,
        ),
        (
            "E0318 17:45:05.166686 139645018964352 sharding.py:426] The available devices are "
            "different from the devices used to save the checkpoint.  Please restore checkpoint "
            "by passing new shardings for target devices.",
            K.CHECKPOINT_ERROR,
        ),
        (
            "2021-11-09 23:33:14.027593: W tensorflow/core/framework/op_kernel.cc:1767] "
            "OP_REQUIRES failed at sparse_xent_op.cc:90 : Invalid argument: Received a label "
            "value of 67 which is outside the valid range of [0, 1).  Label values: 0 0 67",
            K.USER_CODE_ERROR,
        ),
        (
            "> InternalError (see above for traceback): cuDNN launch failure : input shape "
            "([64,128,1,1])",
            K.CUDA_FATAL,
        ),
        (
            "terminate called after throwing an instance of 'af::exception'\n"
            "  what():  ArrayFire Exception (Device out of memory:101):",
            K.CUDA_OOM,
        ),
        (_SIGBUS_TABLE, K.HOST_OOM),
    ],
)
def test_round71_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_ranks_sigbus_never_outranks_the_scripts_error() -> None:
    """Weak evidence: a SIGBUS may be a truncated memory-mapped file or a hardware fault, so it
    explains only a death nothing else explains."""
    failure = classify_text(_SIGBUS_TABLE + "KeyError: 'input_ids'\n", exit_code=1)
    assert failure is not None and failure.kind is FailureKind.USER_CODE_ERROR


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the planner's other shape report, a save, is no load
        ("Size mismatch in the report: 512 vs 1024 saved for later", K.CHECKPOINT_ERROR),
        # a rank another signal ended is not read as memory
        ("  traceback : Signal 11 (SIGSEGV) received by PID 16609", K.HOST_OOM),
    ],
)
def test_round71_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
