"""Issue 12, round 101: rules written from ``tune88`` (gathered as ``heldout89``), each from the
code that prints the message: XGBoost's older ``dh::safe_cuda`` on a device allocation (a
thrust ``system_error`` whose text puts CUDA's words after the source's place), and an
exception line in Markdown bold whose markers a reporter doubled. Each positive case fails on
the rules before round 101; the near misses pass before and after.

Left as it reads: facebookresearch/detectron2#1831, a Panoptic FPN whose losses grow from
21,944 to 319,373 in two iterations (labelled a divergence), stays ``unknown``: the excerpt ends
before detectron2's "FloatingPointError: Loss became infinite or NaN", and a large finite loss
names no failure by itself.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # dmlc/xgboost#2019: the GPU updater, its one line as pasted
        (
            "CUDA error: build/xgboost/src/xgboost/plugin/updater_gpu/src/device_helpers.cuh"
            "(386): out of memory",
            K.CUDA_OOM,
        ),
        # the same wrapper in a .cu file, thrust's what() without a prefix
        (
            "terminate called after throwing an instance of 'thrust::system::system_error'\n"
            "  what():  src/kernels.cu(112): out of memory",
            K.CUDA_OOM,
        ),
        # open-mmlab/mmdetection#5974: the registry's KeyError, in doubled bold
        (
            "    raise type(e)(f'{obj_cls.__name__}: {e}')\n"
            "****KeyError: \"MaskRCNN: 'RefineRoIHead is not in the models registry'\"****",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round101_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the wrapper's other CUDA errors are no OOM
        (
            "CUDA error: build/xgboost/src/common/device_helpers.cuh(386): an illegal memory "
            "access was encountered",
            K.CUDA_OOM,
        ),
        # a source file's place before the words in prose about a host allocation
        ("main.cpp(42): out of memory while reading the dataset", K.CUDA_OOM),
        # a Markdown list item that names an exception in a changelog
        ("* KeyError: raised for unknown keys since 2.1", K.USER_CODE_ERROR),
    ],
)
def test_round101_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
