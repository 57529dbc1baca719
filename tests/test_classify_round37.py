"""Issue 12, round 37: rules written from ``tune34`` (gathered as ``heldout35``), each from the
code that prints the message: TF 1.x's Eigen allocator for a GPU kernel, XLA's NCCL calls and
NCCL's socket layer pasted without its WARN tag, DeepSpeed's install.sh, and wandb refusing to
start without an API key. Each positive case fails on the rules before round 37; the near
misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_XLA = (
    "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: "
    "run time error: custom call 'xla.gpu.all_reduce' failed: "
    "external/xla/xla/service/gpu/nccl_utils.cc:305: NCCL operation "
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TF 1.x common_runtime/gpu/gpu_device.cc, under a session run
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Ran out of GPU "
            "memory when allocating 1294336000 bytes for\n"
            "\t [[{{node softmax_cross_entropy_with_logits}} = SoftmaxCrossEntropyWithLogits"
            '[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/device:GPU:0"](a, b)]]',
            K.CUDA_OOM,
        ),
        # ... and its LOG(FATAL) where no op context is there to take the status
        (
            "F tensorflow/core/common_runtime/gpu/gpu_device.cc:201] EigenAllocator for GPU ran "
            "out of memory when allocating 8388608. See error logs for more detailed info.",
            K.CUDA_OOM,
        ),
        # XLA's XLA_NCCL_STATUS on a communicator that never formed
        (
            _XLA + "ncclGroupEnd() failed: invalid usage (run with NCCL_DEBUG=WARN for details). "
            "Last NCCL warning(error) log entry (may be unrelated) ''.",
            K.NCCL_ERROR,
        ),
        (
            _XLA + "ncclCommInitRank(&comm, nranks, id, rank) failed: internal error - please "
            "report this issue to the NCCL developers. Last NCCL warning(error) log entry (may "
            "be unrelated) 'Attribute busid of node nic not found'.; current tracing scope: "
            "all-reduce-start",
            K.NCCL_ERROR,
        ),
        # NCCL misc/socket.cc socketStartConnect, its WARN text pasted alone
        (
            "socketStartConnect: Connect to 10.45.234.83<47527> failed : Software caused "
            "connection abort",
            K.NCCL_ERROR,
        ),
        # DeepSpeed's install.sh ERR trap after setup.py failed
        (
            "error: can't copy 'deepspeed/ops/csrc': doesn't exist or not a regular file\n"
            "Error on line 155\n"
            "Fail to install deepspeed\n"
            "[jw@cn05 deepspeed]$",
            K.DS_BUILD_ERROR,
        ),
        # wandb's login refused without a terminal, its log line before the traceback
        (
            "wandb: ERROR api_key not configured (no-tty). call wandb.login(key=[your_api_key])\n"
            "Traceback (most recent call last):\n"
            '  File "/content/train.py", line 169, in <module>\n'
            "    trainer.train()",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round37_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # TF's "0 bytes" is an op's fault on an empty tensor, not memory running out
        (
            "ResourceExhaustedError: Ran out of GPU memory when allocating 0 bytes for\n"
            "\t [[Node: loss/SparseSoftmaxCrossEntropyWithLogits = "
            'SparseSoftmaxCrossEntropyWithLogits[_device="/job:localhost/replica:0/task:0/'
            'device:GPU:0"](a, b)]]',
            K.CUDA_OOM,
        ),
        # NCCL's retry at start-up, a peer not listening yet, goes on
        (
            "NCCL INFO socketStartConnect: connect to 10.0.0.2<43211> returned ECONNREFUSED, "
            "retrying (1/34) after sleep for 100 msec",
            K.NCCL_ERROR,
        ),
        # a user's own note that an install failed earlier, not the installer's line
        ("I got 'Fail to install deepspeed' yesterday, so I used pip instead", K.DS_BUILD_ERROR),
        # wandb told to stay offline goes on: no key is asked for
        (
            "wandb: Tracking run with wandb version 0.15.12\nwandb: W&B syncing is set to "
            "`offline` in this directory.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round37_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
