"""Issue 12, round 110: rules written from ``tune93`` (gathered as ``heldout94``, scored once at
51/63), each from the code that prints the message: TensorFlow's and T5X's checks of a
checkpoint against the model restoring it, Paddle's Windows host allocator, a Paddle kernel
header's device-side assert, DDP's reducer explanation without its head, a DeepSpeed loss scale
reduced to 0, SwissArmyTransformer's NaN step guard, TensorFlow's failed device allocation before
an unexplained death (never over a SIGKILL), Horovod's shutdown on the ranks a failed one took
down, and a job platform's time in CJK brackets. Each positive case fails on the rules before
round 110; the near misses pass before and after. They took ``tune93`` to 63/63.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

# horovod/horovod#552: one rank's device allocation fails, the others see Horovod shut down
_HOROVOD = (
    "E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 512.00M "
    "(536870912 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    "AbortedError (see above for traceback): Horovod has been shut down. This was caused by an "
    "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor "
    "after one of the ranks finished execution.\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # google-research/text-to-text-transfer-transformer#899: a base-size config on a
        # bigger checkpoint
        (
            "ValueError: Shape of variable decoder/block_000/layer_000/SelfAttention/k:0 ((512, "
            "512)) doesn't match with shape of tensor decoder/block_000/layer_000/SelfAttention/k "
            "([1024, 4096]) from checkpoint reader.",
            K.CHECKPOINT_ERROR,
        ),
        # google-research/t5x#1067: an old run's checkpoint left in the model dir
        (
            "ValueError: Shape of `state/param_states/decoder/decoder_norm/scale/v` in checkpoint "
            "(2048,) does not match expected (768,).",
            K.CHECKPOINT_ERROR,
        ),
        # DeepRec-AI/DeepRec#955: a warm start from a checkpoint without the embedding
        (
            "ValueError: Tensor input_layer/userid_embedding/embedding_weights is not found in "
            "/xxx/checkpoint",
            K.CHECKPOINT_ERROR,
        ),
        # thomas-yanxin/Garbage-test#4: Paddle on Windows out of host memory
        (
            "ResourceExhaustedError: Fail to alloc memory of 524288000 size.\n"
            "      [Hint: p should not be null.] (at ..\\paddle\\fluid\\memory\\allocation\\"
            "system_allocator.cc:75)",
            K.HOST_OOM,
        ),
        # PaddlePaddle/PaddleX#1614: a negative scatter index, asserted on the device
        (
            "Error: ../paddle/phi/kernels/funcs/scatter.cu.h:66 Assertion `scatter_i >= 0` "
            "failed. The index is out of bounds, please check whether the dimensions of index "
            "and input meet the requirements.",
            K.CUDA_FATAL,
        ),
        # pengxiao-song/LaWGPT#148: DDP's explanation pasted without its RuntimeError
        (
            "This error is caused by one of the following reasons: 1) Use of a module parameter "
            "outside the `forward` function. Please make sure model parameters are not shared "
            "across multiple concurrent forward-backward passes.",
            K.USER_CODE_ERROR,
        ),
        # ymcui/Chinese-LLaMA-Alpaca#319: the fp16 scale reaches 0
        (
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 0",
            K.LOSS_DIVERGENCE,
        ),
        ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 0, reduc",
         K.LOSS_DIVERGENCE),
        # THUDM/SwissArmyTransformer#161: every step skipped
        (
            "Skipping backward and optimizer step for nan or inf in forwarding metrics/loss!",
            K.LOSS_DIVERGENCE,
        ),
        (_HOROVOD, K.CUDA_OOM),
        # deepspeedai/DeepSpeedExamples#625: a job platform's time before each line
        (
            "【2023-07-09 22:14:41】RuntimeError: element 0 of tensors does not require grad and "
            "does not have a grad_fn\n【2023-07-09 22:14:41】 main()",
            K.USER_CODE_ERROR,
        ),
    ],
)  # fmt: skip
def test_round110_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a shape check of the script's own tensors names no checkpoint
        ("ValueError: Shape of `logits` does not match expected (8, 10)", K.CHECKPOINT_ERROR),
        # Paddle's GPU allocator words its failure otherwise; the host rule is not it
        ("ResourceExhaustedError: Fail to alloc memory of 524288000 size on GPU 0", K.HOST_OOM),
        # a healthy scale reduction is no collapse
        ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to "
         "32768", K.LOSS_DIVERGENCE),
        # a Horovod shutdown the script itself caused is not another rank's
        ("AbortedError: Horovod is shutting down at user request", K.CUDA_OOM),
    ],
)  # fmt: skip
def test_round110_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_horovods_shutdown_alone_is_not_the_scripts_error() -> None:
    """The ranks a failed one took down say only that: without the failed rank's own output,
    nothing names a kind."""
    text = _HOROVOD.split("\n", 1)[1]
    assert read_as(text) is not K.USER_CODE_ERROR


def test_tensorflows_failed_allocation_never_explains_a_sigkill() -> None:
    """At start-up TensorFlow retries a failed device allocation with less and goes on; a
    SIGKILL after it (the kernel's OOM killer) is the host's, not the device's."""
    text = _HOROVOD.split("\n", 1)[0] + "\nKilled\n"
    v = classify_text(text, exit_code=-9)
    assert v is not None and v.kind is K.HOST_OOM


def test_a_tensorflow_retry_before_the_scripts_own_error_is_not_an_oom() -> None:
    """No user error is ever taken for an OOM: the script's traceback outranks the retry."""
    text = (
        _HOROVOD.split("\n", 1)[0]
        + "\nTraceback (most recent call last):\n"
        + ("  File \"train.py\", line 3, in <module>\nKeyError: 'labels'\n")
    )
    assert kind(text) is K.USER_CODE_ERROR
