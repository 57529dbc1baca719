"""Issue 12, round 15: rules written from ``tune12`` (gathered as ``heldout13``), each from the
code that prints the message (glibc's assert() taken for a compiler's diagnostic, trainers
that stop on a non-finite loss, a script's print(loss) of NaN, TensorFlow's restore of a
checkpoint that lacks a variable, Windows' and SageMaker's words for a full disk). Each
positive case fails on the rules before round 15; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind


def test_an_assert_in_a_function_named_error_is_not_a_compiler_error() -> None:
    """glibc prints ``prog: file:line: function: Assertion `expr' failed.``; darknet's
    ``error()`` asserts after a CUDA error, so its line reads like gcc's ``file.c:293: error:``
    (pjreddie/darknet#1523). The CUDA error before it is the cause."""
    text = (
        "CUDA status Error: file: ./src/blas_kernels.cu : () : line: 656 : build time: Mar 28 "
        "2019 - 12:25:54\n"
        "CUDA Error: no kernel image is available for execution on the device\n"
        "darknet: ./src/utils.c:293: error: Assertion `0' failed.\n"
        "Aborted (core dumped)\n"
    )
    assert kind(text) is K.CUDA_FATAL
    assert K.DS_BUILD_ERROR not in {ev.kind for ev in evidence_of(text)}


@pytest.mark.parametrize(
    "line",
    [
        "csrc/adam/cpu_adam.cpp:12:10: error: 'omp.h' file not found",
        "/usr/include/c10/util/C++17.h:16:2: error: #error \"You're trying to build PyTorch "
        'with a too old version of GCC."',
    ],
)
def test_a_compilers_error_diagnostic_is_still_a_build_error(line: str) -> None:
    assert kind(line + "\n") is K.DS_BUILD_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # yolov5 train.py, glued after a tqdm bar (ultralytics/yolov5#673)
        "    16/999     7.38G   0.03433   0.01034   0.01147   0.05613       130       800:  85%|"
        "████▌ | 23/27 [00:15<00:02,  1.66it/s]WARNING: non-finite loss, ending training  "
        "tensor([nan, nan, nan, nan], device='cuda:0')",
        "WARNING: non-finite loss, ending training  tensor([inf, 0.0123, 0.0456, inf])",
        # SpeechBrain Brain.check_loss_isfinite (speechbrain#1462)
        "ValueError: Loss is not finite and patience is exhausted. To debug, wrap `fit()` with "
        "autograd's `detect_anomaly()`, e.g.",
    ],
)
def test_a_trainer_stopping_on_a_non_finite_loss_is_divergence(line: str) -> None:
    assert kind(line + "\n") is K.LOSS_DIVERGENCE


def test_speechbrain_skipping_one_batch_is_not_divergence() -> None:
    line = "speechbrain.core - Patience not yet exhausted, ignoring this batch.\n"
    assert not evidence_of(line)


def test_printed_nan_losses_are_weak_divergence() -> None:
    """A notebook's print(loss) per step (lich99/ChatGLM-finetune-LoRA#32): NaN from the
    second step on. What the scalar is the line does not say: weak evidence."""
    text = "tensor(3.2207, device='cuda:0')\n" + "tensor(nan, device='cuda:0')\n" * 4
    assert kind(text) is K.LOSS_DIVERGENCE
    evs = evidence_of(text)
    assert evs and all(ev.weak for ev in evs)


@pytest.mark.parametrize(
    "line",
    [
        "tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)",
        "tensor(nan)",
        "  tensor(nan, dtype=torch.float16)",
    ],
)
def test_the_nan_scalar_repr_in_its_other_shapes(line: str) -> None:
    evs = evidence_of(line + "\n")
    assert [ev.kind for ev in evs] == [K.LOSS_DIVERGENCE] and evs[0].weak


@pytest.mark.parametrize(
    "line",
    [
        "tensor(0.6931, device='cuda:0')",
        "tensor([nan, 1.0])",  # a vector with one NaN: a metric not computed yet
        "mean IoU: tensor(nan)",  # a named metric, not a bare print
        "tensor(nan, device='cuda:0') is skipped",
    ],
)
def test_other_printed_tensors_are_not_divergence(line: str) -> None:
    assert K.LOSS_DIVERGENCE not in {ev.kind for ev in evidence_of(line + "\n")}


def test_printed_nan_does_not_hide_a_real_failure() -> None:
    text = (
        "tensor(nan, device='cuda:0')\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert kind(text) is K.CUDA_OOM


def test_tensorflow_restore_of_a_checkpoint_missing_a_variable() -> None:
    """TF 1.x Saver.restore (THUNLP-MT/L2Copy4APE#3): the wrapper's words, then the original
    error on a line of its own, which no trigger reached before."""
    text = (
        "NotFoundError (see above for traceback): Restoring from checkpoint failed. This is "
        "most likely due to a Variable name or other graph key that is missing from the "
        "checkpoint. Please ensure that you have not altered the graph expected based on the "
        "checkpoint. Original error:\n"
        "\n"
        "Key create_train_op/loss/replica not found in checkpoint\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR
    assert kind("Key encoder/layer_0/kernel not found in checkpoint\n") is K.CHECKPOINT_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # TensorFlow's tf.data cache on Windows (deezer/spleeter#480)
        "(0) Unknown: Failed to WriteFile: cache/training_0.data-00000-of-00001.tempstate1288 : "
        "There is not enough space on the disk.",
        # SageMaker's failure reason (huggingface/blog#114)
        "UnexpectedStatusException: Error for Training job huggingface-pytorch-training-2021-05"
        "-31-01-39-31-463: Failed. Reason: ClientError: Artifact upload failed:Insufficient "
        "disk space",
    ],
)
def test_windows_and_sagemaker_words_for_a_full_disk(line: str) -> None:
    assert kind(line + "\n") is K.DISK_FULL


def test_not_enough_space_for_something_else_is_not_the_disk() -> None:
    line = "Warning: There is not enough space on the screen to draw the progress bar.\n"
    assert K.DISK_FULL not in {ev.kind for ev in evidence_of(line)}
