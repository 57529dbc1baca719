"""Issue 12, round 67: rules written from ``tune63`` and ``tune64`` (gathered as ``heldout64``
and ``heldout65``, the two halves of one gathering), each from the code that prints the
message: CUDA's "unspecified launch failure" in checks that lack "CUDA error:", DeePMD-kit's
OOM, Lua's own allocation failure, Caffe's weights reader and layer registry, a glog CHECK on
an NCCL call, and three NaN reports (the Theano-era loops' "NaN detected", MXNet's Monitor,
nolearn's epoch table). Each positive case fails on the rules before round 67; the near misses
pass before and after. Left unread: Lua Torch's File.lua "read error: read N blocks instead of
M" (torch.load reads datasets saved as .t7 as well as models; which one failed is not on the
line).
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
            "> F0628 15:21:28.669647 1910 context_gpu.h:107] Check failed: error == cudaSuccess "
            "unspecified launch failure",
            K.CUDA_FATAL,
        ),
        ("RuntimeError:cuda error:unspecified launch failure", K.CUDA_FATAL),
        (
            "2021-08-31 08:43:31.755090: W tensorflow/core/framework/op_kernel.cc:1767] "
            "OP_REQUIRES failed at custom_op.cc:12 : Resource exhausted: Operation received an "
            "exception: DeePMD-kit OOM: CUDA Assert, in file /tmp/source/op/custom_op.cc:12",
            K.CUDA_OOM,
        ),
        (
            "/home/u/torch/install/bin/luajit: /home/u/torch/install/share/lua/5.1/threads/"
            "threads.lua:183: [thread 4 callback] not enough memory",
            K.HOST_OOM,
        ),
        ("PANIC: unprotected error in call to Lua API (not enough memory)", K.HOST_OOM),
        (
            "F0831 11:56:43.668262 24302 upgrade_proto.cpp:630] Check failed: "
            "ReadProtoFromBinaryFile(param_file, param) Failed to parse NetParameter file: "
            "/home/u/models/bvlc_reference_caffenet.caffemodel",
            K.CHECKPOINT_ERROR,
        ),
        (
            "F0415 14:59:21.779479  4246 layer_factory.hpp:81] Check failed: registry.count(type) "
            "== 1 (0 vs. 1) Unknown layer type: ImageLabelmapData (known types: AbsVal, Accuracy)",
            K.USER_CODE_ERROR,
        ),
        (
            "F1125 15:44:39.266677 200102 nccl_helper.h:62] Check failed: dynload::ncclGroupEnd() "
            "== ncclSuccess (1 vs. 0)",
            K.NCCL_ERROR,
        ),
        (
            "Epoch  0 Update  1 Cost  527.620910645 PD  0.000997066497803 UD  0.72459602356\n"
            "NaN detected",
            K.LOSS_DIVERGENCE,
        ),
        (
            "INFO:root:Batch:       5 softmax_backward_data          nan\n"
            "INFO:root:Batch:       5 hidden-recept-5_backward_weight nan",
            K.LOSS_DIVERGENCE,
        ),
        (
            " Epoch  |  Train loss  |  Valid loss  |  Train / Val  |  Valid acc  |  Dur\n"
            "     1  |         nan  |         nan  |          nan  |     45.05%  |  0.7s\n"
            "     2  |         nan  |         nan  |          nan  |     46.47%  |  0.6s",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round67_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # Caffe's text reader on a prototxt is the net's config, not trained weights
        (
            "F0831 11:56:43.668262 24302 upgrade_proto.cpp:79] Check failed: "
            "ReadProtoFromTextFile(param_file, param) Failed to parse NetParameter file: "
            "models/train_val.prototxt",
            K.CHECKPOINT_ERROR,
        ),
        # a Monitor row with a number, and a table row whose valid loss is a number
        ("INFO:root:Batch:       5 softmax_output                 0.946593", K.LOSS_DIVERGENCE),
        ("     1  |         nan  |     0.6931  |          nan  |     45.05%", K.LOSS_DIVERGENCE),
        # prose that says a check found NaNs is not the loop's own line
        ("We print 'NaN detected' when the cost is NaN", K.LOSS_DIVERGENCE),
        # a Lua script's own message about memory, not the interpreter's error
        ("luajit: note: enough memory for 4 threads", K.HOST_OOM),
    ],
)
def test_round67_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
