"""Issue 12, round 57: rules written from ``tune54`` (gathered as ``heldout55``): c10d's
TCPStore without libuv, Caffe's unwritable snapshot prefix, t5x's old checkpoint format,
Theano's CudaNdarray and Jittor's device memory check, CNTK's cuDNN allocation failure (a line
without "Error"), stable-baselines' NaN actions, icefall's step scaled to zero (weak), and a
shell's Killed pasted from its PID on. Each positive case fails on the rules before round 57;
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
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/'
            'static_tcp_rendezvous.py", line 67, in next_rendezvous\n'
            "    self._store = TCPStore(  # type: ignore[call-arg]\n"
            "RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
            K.USER_CODE_ERROR,
        ),
        (
            "F0804 17:09:36.119524  6990 solver.cpp:438] Cannot write to snapshot prefix "
            "'models/train'.  Make sure that the directory exists and is writeable.",
            K.USER_CODE_ERROR,
        ),
        (
            "ValueError: Checkpoint versions earlier than 2 are not supported. Got version: 0",
            K.CHECKPOINT_ERROR,
        ),
        ("RuntimeError: CudaNdarray_ZEROS: allocation failed.", K.CUDA_OOM),
        (
            "GPU memory is overflow, please reduce your batch_size or data size!\n"
            "Total: 23.65GB Used: 47.36GB",
            K.CUDA_OOM,
        ),
        (
            "About to throw exception 'cuDNN failure 2: CUDNN_STATUS_ALLOC_FAILED ; GPU=0 ; "
            "hostname=PTNUWCL5099642 ; expr=finder(calgo, algoPerf)'",
            K.CUDA_OOM,
        ),
        (
            "ValueError: found nan in actions.\nOriginated from the RL model, Last given value "
            "was:",
            K.LOSS_DIVERGENCE,
        ),
        (
            "2025-03-23 10:22:40,442 WARNING [optim.py:385] Scaling gradients by 0.0, "
            "model_norm_threshold=911.5296020507812",
            K.LOSS_DIVERGENCE,
        ),
        (
            "71885 Killed                  PYTHONPATH=$PYTHONPATH:. python -m kauldron.main "
            "--cfg=finetuning/pod_config_minload.py",
            K.HOST_OOM,
        ),
    ],
)
def test_round57_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a step clipped, not zeroed: ScaledAdam's usual warning
        (
            "2025-03-23 10:22:38,995 WARNING [optim.py:385] Scaling gradients by 0.53, "
            "model_norm_threshold=911.5296020507812",
            K.LOSS_DIVERGENCE,
        ),
        # NaN observations come from the environment, not the policy
        (
            "ValueError: found nan in observations.\nOriginated from the environment "
            "observation (at reset)",
            K.LOSS_DIVERGENCE,
        ),
        # a count next to "Killed" in a game's log is no shell's report
        ("3 Killed by the enemy", K.HOST_OOM),
        # Caffe's parameter dump names the prefix without failing
        ('snapshot_prefix: "models/train"', K.USER_CODE_ERROR),
    ],
)
def test_round57_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
