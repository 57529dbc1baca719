"""Issue 12, round 116: rules written from ``tune100`` (gathered as ``heldout101``, scored once
at 43/46): a shell's report of a killed job as a translation renders it, and a compiled
extension's undefined-symbol ImportError pasted as a Markdown list item. Each positive case
fails on the rules before round 116; the near misses pass before and after. They took
``tune100`` to 45/46; the one left is a label the corpus does not agree on (tiny-cuda-nn's pip
build read as ``ds_build_error``, as the corpus reads other packages' compiled-op builds,
labelled ``user_code_error`` by its helper; see the corpus README).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # yuxumin/PoinTr#37: host memory, the maintainer says (point clouds logged to
        # tensorboard during validation)
        ("./scripts/train.sh: row 8: 20954 was killed", K.HOST_OOM),
        # open-mmlab/OpenPCDet#217: an op built against another torch, as a list item
        (
            "- ImportError: ~/Github/OpenPCDet/pcdet/ops/pointnet2/pointnet2_batch/"
            "pointnet2_batch_cuda.cpython-37m-x86_64-linux-gnu.so: undefined symbol: "
            "_ZN3c105ErrorC1ENS_14SourceLocationERKSs",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round116_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a shell's report of another signal is no kill
        ("./scripts/train.sh: line 8: 20954 Terminated   python main.py", K.HOST_OOM),
        # prose about a row of a table
        ("the job in row 8 was killed by the scheduler", K.HOST_OOM),
        # a list of settings, and a list item naming an exception class without its message
        ("- loss: 0.5\n- KeyError handling: enabled", K.USER_CODE_ERROR),
        # DeepSpeed's own op's library: its build's after-effect, as a list item too
        (
            "- ImportError: /root/.cache/torch_extensions/py38_cu117/async_io/async_io.so: "
            "undefined symbol: _ZN21deepspeed_io_handle_t18_create_io_op_desc",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round116_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
