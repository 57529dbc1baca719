"""Issue 12, round 62: rules written from ``tune59`` (gathered as ``heldout60``): a DeepSpeed
op's library by name or by a DeepSpeed symbol it lacks, PhysX's GPU allocator, Caffe's solver
state restore (another net's history, a file that is not there), a killed job as dash prints
it, and Paddle's paddle.load by its frames. Each positive case fails on the rules before round
62; the near misses pass before and after. Left unread: Caffe's failed snapshot write into a
folder that does not exist (the same check fails on a full disk, as the corpus reads it), and
torch.distributions' "normal expects all elements of std >= 0.0" without a frame to say whose
std it was.
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
            "ImportError: /.../async_io.so: undefined symbol: _ZN21deepspeed_io_handle_t18_"
            "create_io_op_descEbRKN2at6TensorEiPKcbl",
            K.DS_BUILD_ERROR,
        ),
        (
            "PxgCudaDeviceMemoryAllocator fail to allocate memory 339738624 bytes!! Result = 2",
            K.CUDA_OOM,
        ),
        (
            "F0519 19:16:09.551967 23277 sgd_solver.cpp:316] Check failed: state.history_size() "
            "== history_.size() (0 vs. 14) Incorrect length of history blobs.",
            K.CHECKPOINT_ERROR,
        ),
        (
            "Check failed: fd != -1 (-1 vs. -1) File not found: numbers_iter.solverstate",
            K.CHECKPOINT_ERROR,
        ),
        (
            "./train.sh:  60: 11880 killed              PYTHONPATH=`pwd`/models/research python3 "
            "./models/research/object_detection/model_main.py",
            K.HOST_OOM,
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "C:\\envs\\paddle\\lib\\site-packages\\paddle\\framework\\io.py", line '
            "610, in _load_selected_rows\n"
            "    _seek = core.load_selected_rows(temp_sr, file_name)\n"
            "ValueError: (InvalidArgument) Only version 0 SelectedRows is supported.",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round62_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # an .so of the script's own that lacks one of its own symbols is no DeepSpeed op
        ("ImportError: /home/u/ext/my_op.so: undefined symbol: _Z6my_funcv", K.DS_BUILD_ERROR),
        # a Caffe weights file (not a solver state) missing is read elsewhere, not as this
        ("Check failed: fd != -1 (-1 vs. -1) File not found: model.prototxt", K.CHECKPOINT_ERROR),
        # Paddle's save side in the same module is a write, not a load
        (
            "Traceback (most recent call last):\n"
            '  File "/envs/paddle/lib/site-packages/paddle/framework/io.py", line 700, in save\n'
            "    f.write(x)\n"
            "ValueError: bad value",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round62_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
