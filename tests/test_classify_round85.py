"""Issue 12, round 85: rules written from ``tune80`` (gathered as ``heldout81``), each from the
code that prints the message: TensorFlow's BFC allocator map before an OOM line that names no
device, TensorFlow's grouped root errors ("  (0) Internal: ..."), torch's Windows shared file
mapping on the commit limit, TensorFlow's Windows file system on a path it cannot create, and a
shell's kill report inside Markdown emphasis. Each positive case fails on the rules before
round 85; the near misses pass before and after.

The BFC rule also reads four tuning logs no rule had read (TFFRCNN#68 and tf-seq2seq#11, left
``unknown`` in rounds 77 and 82 because the device was cut off the paste; gpt-2-simple#189 and
PoseCNN#79): TensorFlow's host allocator is a BFC one only when TF_CPU_ALLOCATOR_USE_BFC asks,
so the map names the GPU's allocator.
"""

from __future__ import annotations

import random

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify import random_split, stream
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_MAP = (
    "2017-11-13 10:31:59.958296: W tensorflow/core/common_runtime/bfc_allocator.cc:277] "
    + "*" * 93
    + "xxxxxxx\n"
)
_TF1_OOM = (
    "2017-11-13 10:31:59.958338: W tensorflow/core/framework/op_kernel.cc:1192] Resource "
    "exhausted: OOM when allocating tensor with shape[15,8,183,183]\n"
)
_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/tensorflow/bin/t2t-trainer", line 96, in <module>\n'
    "    tf.app.run()\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # tensorflow/tensor2tensor#413: the map, the OOM line, a traceback cut by the paste
        (_MAP + _TF1_OOM + _TRACEBACK, K.CUDA_OOM),
        # ... the log ending on the OOM line (read when the stream closes)
        (_MAP + _TF1_OOM, K.CUDA_OOM),
        # keras-team/keras-io#709: TF 2.x's wording, the map at another line of the allocator
        (
            "2021-11-16 11:34:36.221632: W tensorflow/core/common_runtime/bfc_allocator.cc:468] "
            + "*" * 90
            + "x********x\n"
            "2021-11-16 11:34:36.221746: W tensorflow/core/framework/op_kernel.cc:1680] Resource "
            "exhausted: failed to allocate memory\n" + _TRACEBACK,
            K.CUDA_OOM,
        ),
        # tensorflow/tensor2tensor#1866
        (
            "tensorflow.python.framework.errors_impl.InternalError: 2 root error(s) found.\n"
            "  (0) Internal: Dst tensor is not initialized.\n"
            "\t [[node transformer/parallel_3_5/transformer/body/ffn/layer_norm/sub ]]\n"
            "  (1) Internal: Dst tensor is not initialized.\n"
            "0 successful operations.\n",
            K.CUDA_OOM,
        ),
        # Arturus/kaggle-web-traffic#37
        (
            "UnknownError: 2 root error(s) found.\n"
            "  (0) Unknown: CUDNN_STATUS_EXECUTION_FAILED\n"
            "in tensorflow/stream_executor/cuda/cuda_dnn.cc(953): 'cudnnSetDropoutDescriptor( "
            "handle.get(), cudnn.handle(), dropout, state_memory.opaque(), seed)'\n",
            K.CUDA_FATAL,
        ),
        # ultralytics/ultralytics#14645
        (
            "RuntimeError: Couldn't open shared file mapping: <torch_28076_1033928186_0>, error "
            "code: <1455>",
            K.HOST_OOM,
        ),
        # magenta/magenta#439
        (
            "INFO:tensorflow:global_step/sec: 0\n"
            "trainthemodel.sh: **line 6: 13536 Killed** melody_rnn_train --config=attention_rnn "
            "--run_dir=/tmp/melody_rnn/logdir/run1 --num_training_steps=20000_",
            K.HOST_OOM,
        ),
        # DeepLabCut/DeepLabCut#175
        (
            "Failed to create a NewWriteableFile: D:\\[...]\\dlc-models\\iteration-0\\train\\"
            "snapshot-100.data-00000-of-00001.tempstate15672210206235734816 : The system cannot "
            "find the path specified.\n"
            "; No such process",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round85_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a map far above the OOM line says nothing of its device
        (_MAP + "INFO:tensorflow:step 1\n" * 5 + _TF1_OOM, K.CUDA_OOM),
        # the failed op's placement after the OOM line names the host: that wins over the map
        (
            _MAP + _TF1_OOM + "\t [[Node: sub_2518 = Sub[T=DT_FLOAT, "
            '_device="/job:localhost/replica:0/task:0/cpu:0"](a, b)]]\n',
            K.CUDA_OOM,
        ),
        # the OOM line alone still names no device
        (_TF1_OOM, K.CUDA_OOM),
        # a root error TensorFlow raised for some other reason is no OOM
        (
            "InternalError: 2 root error(s) found.\n"
            "  (0) Internal: Blas GEMM launch failed : a.shape=(32, 64), b.shape=(64, 10)\n",
            K.CUDA_OOM,
        ),
        # a table row that reads like a status name is no exception
        ("  Unknown: 3\n  Internal: 0\n", K.USER_CODE_ERROR),
        # another Windows error on the same shared mapping is not the commit limit
        (
            "RuntimeError: Couldn't open shared file mapping: <torch_1_2_0>, error code: <5>",
            K.HOST_OOM,
        ),
        # Windows' words for a full disk are no path problem
        (
            "Failed to create a NewWriteableFile: D:\\run\\model.ckpt.tempstate1 : There is not "
            "enough space on the disk.\n; No space left on device",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round85_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_the_bfc_map_is_read_whatever_the_chunking() -> None:
    """The map, the OOM line and the lines after it split anywhere: the same evidence."""
    text = _MAP + _TF1_OOM + _TRACEBACK
    whole = stream([text])
    assert [e.kind for e in whole[0]].count(K.CUDA_OOM) == 1
    assert stream(list(text)) == whole
    rng = random.Random(85)
    for _ in range(5):
        assert stream(random_split(text, rng)) == whole


def test_a_host_allocators_dump_ends_in_a_map_that_names_no_gpu() -> None:
    """The same map after a pinned or MKL host allocator's report: not the GPU's."""
    for name in ("cuda_host_bfc", "mklcpu"):
        text = (
            "2018-01-01 10:00:00.000: W tensorflow/core/common_runtime/bfc_allocator.cc:273] "
            f"Allocator ({name}) ran out of memory trying to allocate 1.2GiB.  Current "
            "allocation summary follows.\n"
            "2018-01-01 10:00:00.000: I tensorflow/core/common_runtime/bfc_allocator.cc:627] "
            "Bin (256): \tTotal Chunks: 1, Chunks in use: 1. 256B allocated for chunks.\n"
            + _MAP
            + _TF1_OOM
        )
        assert read_as(text) is not K.CUDA_OOM, name
