"""Issue 12, round 29: rules written from ``tune26`` (gathered as ``heldout27``), each from the
code that prints the message: Ray < 2's memory monitor (a host OOM the device rule took, the
set's ladder imprecision when it was scored once), DeepSpeed's untested-ZeRO-optimizer check,
its zero_to_fp32.py (by message, and by the copy each checkpoint directory carries), fairseq's
checkpoint loading, a CI service's job time limit, the CUDA driver refusing in Rust's cudarc
and at torch's init, and Triton's PTX codegen on a GPU too old for the kernel. Each positive
case fails on the rules before round 29; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ray/memory_monitor.py (Ray 0.8-1.x), on another node
        (
            "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node "
            "ip-172-31-5-10 is used (58.4 / 61.45 GB). The top 10 memory consumers are:",
            K.HOST_OOM,
        ),
        # DeepSpeed's engine with an optimizer ZeRO has not been tested with
        (
            "AssertionError: You are using an untested ZeRO Optimizer. Please add "
            '<"zero_allow_untested_optimizer": true> in the configuration file to use it.',
            K.DS_CONFIG_ERROR,
        ),
        # zero_to_fp32.py, the copy in a checkpoint directory, another of its raises
        (
            "Traceback (most recent call last):\n"
            '  File "/ckpt/run7/zero_to_fp32.py", line 590, in <module>\n'
            "    convert_zero_checkpoint_to_fp32_state_dict(args.checkpoint_dir, "
            "args.output_file)\n"
            '  File "/ckpt/run7/zero_to_fp32.py", line 141, in parse_optim_states\n'
            '    raise ValueError(f"unknown zero stage {zero_stage}")\n'
            "ValueError: unknown zero stage 4",
            K.CHECKPOINT_ERROR,
        ),
        (
            "ValueError: consumed 6738415616 numels out of 6738415680 - something is wrong",
            K.CHECKPOINT_ERROR,
        ),
        # fairseq: by message, and a KeyError inside its checkpoint loader
        (
            "Exception: Cannot load model parameters from checkpoint /ckpt/checkpoint_last.pt; "
            "please ensure that the architectures match.",
            K.CHECKPOINT_ERROR,
        ),
        (
            '  File "/opt/fairseq/fairseq/checkpoint_utils.py", line 339, in '
            "load_checkpoint_to_cpu\n"
            "    state = _upgrade_state_dict(state)\n"
            "KeyError: 'cfg'",
            K.CHECKPOINT_ERROR,
        ),
        # GitHub Actions' job time limit on the step that drives a training job
        (
            "##[error]The job running on runner GitHub Actions 3 has exceeded the maximum "
            "execution time of 360 minutes.",
            K.KILLED_EXTERNALLY,
        ),
        # cudarc (Rust) and torch's CUDA init
        (
            "thread 'main' panicked at src/main.rs:42:10:\n"
            "called `Result::unwrap()` on an `Err` value: DriverError(CUDA_ERROR_INVALID_PTX, "
            '"a PTX JIT compilation failed")',
            K.CUDA_FATAL,
        ),
        (
            "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
            K.CUDA_FATAL,
        ),
        # Triton's JIT on a GPU without fp8 conversions
        (
            "RuntimeError: Internal Triton PTX codegen error:\n"
            "ptxas /tmp/tmpq1w2e3.ptx, line 88; error   : Feature 'cvt.e4m3x2.f32' requires "
            ".target sm_89 or higher\n"
            "ptxas fatal   : Ptx assembly aborted due to errors",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round29_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_kernel_the_gpu_cannot_build_is_not_retried_unchanged() -> None:
    """Triton's codegen fails the same way on every launch on this GPU."""
    v = classify_text("RuntimeError: Internal Triton PTX codegen error:\n", exit_code=1)
    assert v is not None and v.kind is K.CUDA_FATAL and not v.retry_helps


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # cudarc's out-of-memory is a device OOM, not a fault
        (
            "called `Result::unwrap()` on an `Err` value: DriverError(CUDA_ERROR_OUT_OF_MEMORY,"
            ' "out of memory")',
            K.CUDA_FATAL,
        ),
        # torch's own OOM class keeps its device reading
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
            "23.65 GiB total capacity)",
            K.HOST_OOM,
        ),
        # a CI job that finished is no time limit
        ("The job running on runner GitHub Actions 3 completed successfully.", K.KILLED_EXTERNALLY),
    ],
)
def test_round29_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
