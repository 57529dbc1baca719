"""Issue 12, round 26: rules written from ``tune23`` (gathered as ``heldout24``), each from the
code that prints the message: DeepSpeed's check of the optimizer's name, c10d's socket error
wrapped in a reporter's Markdown, Paddle's older cuDNN error wording, JAX's debug_nans check,
and VS Code's debugger's "Exception has occurred". Each positive case fails on the rules
before round 26; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # engine.py _do_sanity_check (deepspeedai/DeepSpeed#2610)
        ("AssertionError: FusedAdam is not a supported DeepSpeed Optimizer", K.DS_CONFIG_ERROR),
        # c10d's store barrier losing its peer, the line in bold (deepspeedai/DeepSpeed#2973)
        (
            '  File "/opt/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", '
            "line 318, in _store_based_barrier\n"
            "    store.add(store_key, 1)\n"
            "**RuntimeError: Connection reset by peer**\n"
            "[2023-03-08 23:09:10,901] [INFO] [launch.py:318:sigkill_handler] Killing "
            "subprocess 15884",
            K.NCCL_ERROR,
        ),
        # Paddle 2.1 (PaddlePaddle/Paddle#35039)
        (
            "OSError: (External)  Cudnn error, CUDNN_STATUS_EXECUTION_FAILED  (at "
            "/paddle/paddle/fluid/operators/conv_cudnn_op.cu:731)",
            K.CUDA_FATAL,
        ),
        # JAX's debug_nans, as a notebook renders the error (jax-ml/jax#19595)
        (
            "{\n"
            '\t"name": "FloatingPointError",\n'
            '\t"message": "invalid value (nan) encountered in jit(compiled_train_step). '
            "Because jax_config.debug_nans.value and/or config.jax_debug_infs is set, the "
            'de-optimized function was called",',
            K.LOSS_DIVERGENCE,
        ),
        # VS Code's debugger (sarafridov/plenoxels#2)
        (
            "Exception has occurred: TypeError\n"
            "**mul got incompatible shapes for broadcasting: (800, 800, 1, 1536), (800, 1, 800, "
            "3)**.\n"
            '  File "/plenoxels/plenoptimize.py", line 479, in <module>\n'
            "    main()",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round26_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the debugger showing a CUDA OOM: the OOM, not the script's error
        (
            "Exception has occurred: OutOfMemoryError\n"
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; "
            "6.52 GiB already allocated)\n",
            K.USER_CODE_ERROR,
        ),
        # a connection error with more said after it is not c10d's bare strerror
        (
            "RuntimeError: Connection reset by peer, retrying the download in 5 s\n",
            K.NCCL_ERROR,
        ),
        # numpy's warning is no NaN check that stops training
        (
            "/opt/lib/python3.10/site-packages/numpy/core/_methods.py:192: RuntimeWarning: "
            "invalid value encountered in divide\n",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round26_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
