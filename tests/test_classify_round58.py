"""Issue 12, round 58: rules written from ``tune55`` (gathered as ``heldout56``): vLLM's NCCL
library that will not load, Horovod's exit status 137, Theano's device allocation pasted with
its parentheses turned to "< >", TF's failing restore node (indented with a tab), TF 1.x's
"(see above for traceback)" exception lines, a loss array with NaN in it and an abbreviated
perplexity, and cudaErrorLaunchTimeout. Each positive case fails on the rules before round 58;
the near misses pass before and after.
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
            "(VllmWorker rank=3 pid=44710) ERROR 08-20 09:48:31 [pynccl_wrapper.py:229] Failed "
            "to load NCCL library from /root/work/nccl/build/lib/libnccl.so.2.21.5. It is "
            "expected if you are not running on NVIDIA/AMD GPUs.",
            K.USER_CODE_ERROR,
        ),
        ("Process 0 exit with status code 137.", K.HOST_OOM),
        (
            "Error allocating 411041792 bytes of device memory < out of memory >. Driver report "
            "169512960 bytes free and 2147483648 bytes total",
            K.CUDA_OOM,
        ),
        (
            "INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework."
            "errors_impl.InvalidArgumentError'>, Assign requires shapes of both tensors to match."
            " lhs shape= [3,3,256,24] rhs shape= [3,3,256,84]\n"
            "\t [[Node: save_1/Assign_13 = Assign[T=DT_FLOAT, use_locking=true, "
            "validate_shape=true](ssd_300_vgg/block11_box/conv_cls/weights, "
            "save_1/RestoreV2_13)]]",
            K.CHECKPOINT_ERROR,
        ),
        (
            "InvalidArgumentError (see above for traceback): Not enough time for target "
            "transition sequence (required: 64, available: 39)0You can turn this error into a "
            "warning by using the flag ignore_longer_outputs_than_inputs",
            K.USER_CODE_ERROR,
        ),
        (
            "Pass 0, batch 500, loss [     nan 9.211133      nan      nan      nan      nan "
            "9.210888      nan]",
            K.LOSS_DIVERGENCE,
        ),
        ("Pass 0, test samples: 42, test avg ppl: nan", K.LOSS_DIVERGENCE),
        (
            "CUDA error at /jittor/src/mem/allocator/cuda_dual_allocator.h:97 code=702("
            'cudaErrorLaunchTimeout) "cudaLaunchHostFunc(0, &to_free_allocation, 0)"',
            K.CUDA_FATAL,
        ),
    ],
)
def test_round58_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a healthy loss array
        ("Pass 0, batch 400, loss [ 9.351679   9.2102585  9.151485 ]", K.LOSS_DIVERGENCE),
        # a process that exited 0
        ("Process 0 exit with status code 0.", K.HOST_OOM),
        # the Saver's write side is not a checkpoint that fails to load
        (
            "\t [[Node: save/SaveV2 = SaveV2[dtypes=[DT_FLOAT]](save/Const, save/SaveV2/"
            "tensor_names)]]",
            K.CHECKPOINT_ERROR,
        ),
        # a variable named "nancy_loss" is no NaN
        ("loss [0.25 0.5] nancy_loss [0.1]", K.LOSS_DIVERGENCE),
    ],
)
def test_round58_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
