"""Issue 12, round 66: rules written from ``tune62`` (gathered as ``heldout63``): MXNet's
NDArray loader by its frames (its MXNetError raised through base.py's check_call, which now
passes an exception through), and a traceback's exception line behind a Markdown quote
marker, which ends the open traceback as the unquoted line would. Each positive case fails on
the rules before round 66; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_MX_LOAD = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/mx-maskrcnn/rcnn/utils/load_model.py", line 15, in load_checkpoint\n'
    "    save_dict = mx.nd.load('%s-%04d.params' % (prefix, epoch))\n"
    '  File "./incubator-mxnet/python/mxnet/ndarray/utils.py", line 174, in load\n'
    "    ctypes.byref(names)))\n"
    '  File "./incubator-mxnet/python/mxnet/base.py", line 146, in check_call\n'
    "    raise MXNetError(py_str(_LIB.MXGetLastError()))\n"
)
_FAIL_TO_OPEN = (
    "mxnet.base.MXNetError: [19:27:16] src/io/local_filesys.cc:166: Check failed: allow_null  "
    'LocalFileSystem: fail to open "model/res50-fpn/cityscape/alternate/rpn1-0000.params"\n'
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_MX_LOAD + _FAIL_TO_OPEN, K.CHECKPOINT_ERROR),
        # the reporter's quoted paste: first and last lines behind "> ", a blank line between
        ("> " + _MX_LOAD.split("\n", 1)[1] + "\n> " + _FAIL_TO_OPEN, K.CHECKPOINT_ERROR),
    ],
)
def test_round66_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # MXNet's other calls through check_call (an operator's shape check) are no load
        (
            "Traceback (most recent call last):\n"
            '  File "/envs/mx/lib/python3.6/site-packages/mxnet/ndarray/ndarray.py", line 189, '
            "in __repr__\n"
            "    return '\\n%s\\n<%s %s @%s>' % (str(self.asnumpy()),\n"
            '  File "/envs/mx/lib/python3.6/site-packages/mxnet/base.py", line 253, in check_call\n'
            "    raise MXNetError(py_str(_LIB.MXGetLastError()))\n"
            "mxnet.base.MXNetError: [10:01:02] src/operator/nn/convolution.cc:152: Check failed: "
            "dshp.ndim() == 4U (3 vs. 4)",
            K.CHECKPOINT_ERROR,
        ),
        # a quoted exception line with no traceback open stays the weak reading it was
        ("> KeyError: 'model_state'", K.CHECKPOINT_ERROR),
    ],
)
def test_round66_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
