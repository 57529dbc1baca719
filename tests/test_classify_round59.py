"""Issue 12, round 59: rules written from ``tune56`` (gathered as ``heldout57``):
scikit-neuralnetwork's divergence guard, TF 1.14+'s "[[node save/Assign_N (defined at ...)
]]" under a restore's error, and MXNet built without its distributed key-value store. Each
positive case fails on the rules before round 59; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("RuntimeError: Training diverged and returned NaN.", K.LOSS_DIVERGENCE),
        (
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: Assign requires "
            "shapes of both tensors to match. lhs shape= [13] rhs shape= [150]\n"
            "         [[node save/Assign_382 (defined at /home/u/ICNet-tensorflow/network.py:79) "
            "]]",
            K.CHECKPOINT_ERROR,
        ),
        (
            "[08:41:20] /mxnet/dmlc-core/include/dmlc/./logging.h:300: [08:41:20] "
            "src/kvstore/kvstore.cc:37: compile with USE_DIST_KVSTORE=1 to use dist_sync",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round59_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # an op outside the Saver's restore graph failing its shape check is the script's
        (
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: Assign requires "
            "shapes of both tensors to match. lhs shape= [13] rhs shape= [150]\n"
            "         [[node Assign_3 (defined at train.py:79) ]]",
            K.CHECKPOINT_ERROR,
        ),
        # a trainer that reports it recovered is no divergence
        (
            "INFO: training diverged once and was restarted from the last good state",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round59_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
