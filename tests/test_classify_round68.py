"""Issue 12, round 68: rules written from ``tune65`` (gathered as ``heldout66``), each from the
code that prints the message: ColossalAI's launcher failing to reach a node over ssh, dash's
"not found" for a command, a wrapper's stream tag before each of its child's lines, libtpu's
executor loader missing a function (round 65's rule, for its other file), and
cudaErrorInvalidKernelImage's text. Each positive case fails on the rules before round 68; the
near misses pass before and after. Left unread: a bare "^C" at the end of a Colab cell (the
runtime's kill for RAM, or the user's Ctrl-C: the line does not say which).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_KERNEL_IMAGE = (
    "tensorflow.python.framework.errors_impl.InternalError: CUDA runtime implicit initialization "
    "on GPU:0 failed. Status: device kernel image is invalid"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Error: failed to run torchrun --nproc_per_node=2 --nnodes=2 --node_rank=1 "
            "--master_addr=192.168.1.11 --master_port=29508 pretrain.py on 192.168.1.12, is "
            "localhost: False, exception: not a valid RSA private key file",
            K.NCCL_ERROR,
        ),
        (
            "08/20/2024 19:04:44 - INFO - llamafactory.cli - Initializing distributed tasks at: "
            "10.188.240.13:2951\n"
            "/bin/sh: 1: torchrun: not found",
            K.USER_CODE_ERROR,
        ),
        (
            "Traceback (most recent call last):\n"
            '2023-09-04 08:11:57.459 [stderr   ]   File "/data/facechain/train_lora.py", line '
            "1015, in main\n"
            "2023-09-04 08:11:57.460 [stderr   ]     raise ValueError(\n"
            "2023-09-04 08:11:57.460 [stderr   ] ValueError: --caption_column' value 'text' needs "
            "to be one of: image",
            K.USER_CODE_ERROR,
        ),
        (
            "2021-07-18 05:15:21.807145: F external/org_tensorflow/tensorflow/core/tpu/"
            "tpu_executor_init_fns.inc:110] TpuTransferManager_ReadDynamicShapes not available "
            "in this library.\n"
            "Aborted (core dumped)",
            K.USER_CODE_ERROR,
        ),
        (_KERNEL_IMAGE, K.CUDA_FATAL),
    ],
)
def test_round68_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_an_invalid_kernel_image_is_not_retried() -> None:
    """A build without kernels for this GPU fails the same way on every attempt."""
    failure = classify_text(_KERNEL_IMAGE + "\n", exit_code=1)
    assert failure is not None and failure.kind is FailureKind.CUDA_FATAL
    assert failure.retry_helps is False


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the remote command ran and failed: its own output says why, not the network
        (
            "Error: failed to run torchrun train.py on 192.168.1.12, is localhost: False, "
            "exception: Encountered a bad command exit code!",
            K.NCCL_ERROR,
        ),
        (
            "Error: failed to run torchrun train.py on 127.0.0.1, is localhost: True, exception: x",
            K.NCCL_ERROR,
        ),
        # "not found" in a program's own message is no shell's
        ("[WARNING] optional plugin apex not found, using native amp", K.USER_CODE_ERROR),
        # a tagged stdout line that is no error
        ("2023-09-04 08:11:57.460 [stdout   ] epoch 3: loss 0.512", K.USER_CODE_ERROR),
    ],
)
def test_round68_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
