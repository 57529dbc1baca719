"""Issue 12, round 80: rules written from ``tune77`` (gathered as ``heldout78``), each from the
code that prints the message: the JVM's OutOfMemoryError (DL4J's off-heap arrays; host memory,
which the device rule read as a CUDA OOM), CUDA's GPU core dump on a device exception,
cudaErrorInvalidDeviceFunction's text alone, NVCaffe's CHECK on an NCCL status, Ray's
RayTaskError wrapping a code mistake, and R's reticulate wrapping a Python exception. Each
positive case fails on the rules before round 80; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # deeplearning4j/deeplearning4j-examples#677
        (
            'Exception in thread "main" java.lang.OutOfMemoryError: Cannot allocate new '
            "FloatPointer(334938240): totalBytes = 5G, physicalBytes = 6G\n"
            "\tat org.bytedeco.javacpp.FloatPointer.<init>(FloatPointer.java:76)",
            K.HOST_OOM,
        ),
        # ... and the JVM heap itself
        ('Exception in thread "main" java.lang.OutOfMemoryError: Java heap space', K.HOST_OOM),
        # NovaSky-AI/SkyRL#428
        (
            "(AsyncVLLMInferenceEngine pid=127749) [08:52:36.868726] coredump: Detected an "
            "exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)\n"
            "(AsyncVLLMInferenceEngine pid=127749) [08:52:36.868733] coredump:   - Device: 0",
            K.CUDA_FATAL,
        ),
        # gnina/scripts#45
        (
            "Traceback (most recent call last):\n"
            '  File "train.py", line 499, in train_and_test_model\n'
            "    solver.step(test_interval)\n"
            "RuntimeError: invalid device function",
            K.CUDA_FATAL,
        ),
        # NVIDIA/caffe#457
        (
            "F0103 16:20:49.668439  6024 parallel.cpp:204] Check failed: result == ncclSuccess "
            "(13 vs. 0)  invalid data type\n"
            "*** Check failure stack trace: ***",
            K.NCCL_ERROR,
        ),
        # TideDra/lmm-r1#82
        (
            "ray.exceptions.RayTaskError(ZeroDivisionError): ray::PPOTrainer.fit() (pid=111331, "
            "ip=0.0.0.0, actor_id=3f2e3f20c069108222cc6eae02000000)",
            K.USER_CODE_ERROR,
        ),
        # rstudio/keras3#804, R's reprex output
        (
            "#> Error in py_call_impl(callable, dots$args, dots$keywords): RuntimeError: "
            "Evaluation error: arguments imply differing number of rows: 1, 0.",
            K.USER_CODE_ERROR,
        ),
        # rstudio/keras3#1450, glued to the echoed R call
        (
            "+   verbose = 2 + ) Error in py_call_impl(callable, call_args$unnamed, "
            "call_args$named) :    ValueError: You must call `compile()` before using the model.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round80_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a task's RuntimeError in the driver may be another process's failure echoed
        (
            "ray.exceptions.RayTaskError(RuntimeError): ray::Worker.step() (pid=42, ip=10.0.0.1)",
            K.USER_CODE_ERROR,
        ),
        # the core-dump setting echoed at start-up is no device exception
        ("export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1", K.CUDA_FATAL),
        # torch's own OutOfMemoryError stays a device OOM (its near miss kept)
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
            K.HOST_OOM,
        ),
    ],
)
def test_round80_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
