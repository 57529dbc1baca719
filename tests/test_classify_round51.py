"""Issue 12, round 51: the rule written from ``tune48`` (gathered as ``heldout49``), from the
code that prints the message: Caffe's softmax loss pinned at -log(FLT_MIN) once the net has
diverged. The positive case fails on the rules before round 51; the near misses pass before
and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

_SOLVER = "I1230 00:05:42.707515 27153 solver.cpp:"


def test_caffes_loss_at_its_floor_is_a_divergence() -> None:
    text = (
        f"{_SOLVER}229] **Iteration 2400, loss = 4.88092**\n"
        f"{_SOLVER}229] **Iteration 2500, loss = 87.3365**\n"
        f"{_SOLVER}245]     Train net output #0: accuracy = 0\n"
        f"{_SOLVER}245]     Train net output #1: softmax_loss = 87.3365 (* 1 = 87.3365 loss)\n"
    )
    assert kind(text) is FailureKind.LOSS_DIVERGENCE


@pytest.mark.parametrize(
    "text",
    [
        # a loss that merely starts with the same digits
        f"{_SOLVER}229] Iteration 100, loss = 87.33",
        f"{_SOLVER}229] Iteration 100, loss = 87.33612",
    ],
)
def test_round51_near_misses(text: str) -> None:
    assert read_as(text) is not FailureKind.LOSS_DIVERGENCE
