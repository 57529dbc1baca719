"""Issue 12, round 54: rules written from ``tune51`` (gathered as ``heldout52``): torch's
DataLoader on a SIGKILLed worker in any case and spacing (as a reporter retyped it), icefall's
scale guard with its message on a line of its own, and an exception line behind a wrapper's
"Error: " tag. Each positive case fails on the rules before round 54; the near misses pass
before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("RuntimeError:Dataloader worker (pid 6479) is killed by signal:killed", K.HOST_OOM),
        (
            "RuntimeError:\n        grad_scale is too small, exiting: 1.4901161193847656e-08",
            K.LOSS_DIVERGENCE,
        ),
        (
            "Error: KeyError: 'ResNet is not in the model registry. Please check whether the "
            "value of `ResNet` is correct or it was registered as expected.'",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round54_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the guard's source line echoed in a traceback is not its message
        (
            "Traceback (most recent call last):\n"
            '  File "zipformer/train.py", line 1120, in train_one_epoch\n'
            '    raise RuntimeError(f"grad_scale is too small, exiting: {cur_grad_scale}")\n'
            "KeyError: 'supervisions'",
            K.LOSS_DIVERGENCE,
        ),
        # a wrapper's tag before words that name no exception
        ("Error: could not open the dataset index", K.USER_CODE_ERROR),
    ],
)
def test_round54_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
