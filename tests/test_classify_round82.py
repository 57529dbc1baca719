"""Issue 12, round 82: rules written from ``tune78`` (gathered as ``heldout79``), each from the
code that prints the message: TensorFlow's table reader on a checkpoint of another format,
TensorFlow's error classes carrying a cuDNN status, XGBoost's GPU allocator, CatBoost's CUDA
check, and Marian's option parser. Each positive case fails on the rules before round 82; the
near misses pass before and after. Left as it read then: jayparks/tf-seq2seq#11, TensorFlow
1.x's "Resource exhausted: OOM when allocating tensor with shape[500,15000]" with the device cut
off the paste, as CharlesShang/TFFRCNN#68 in round 77; both read as device OOMs since round 85
(the BFC allocator's map before them, tests/test_classify_round85.py).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # balancap/SSD-Tensorflow#241
        (
            "> `Could not open ./checkpoints/VGG_VOC0712_SSD_300x300_ft_iter_120000.ckpt.data-"
            "00000-of-00001: Data loss: not an sstable (bad magic number): perhaps your file is "
            "in a different file format and you need to use a different restore operator?\n`",
            K.CHECKPOINT_ERROR,
        ),
        # Arturus/kaggle-web-traffic#35
        (
            "tensorflow.python.framework.errors_impl.UnknownError: CUDNN_STATUS_EXECUTION_FAILED\n"
            "in tensorflow/stream_executor/cuda/cuda_dnn.cc(918): 'cudnnSetDropoutDescriptor( "
            "handle.get(), cudnn.handle(), dropout, state_memory.opaque())'",
            K.CUDA_FATAL,
        ),
        # dmlc/xgboost#8292
        (
            "ml.dmlc.xgboost4j.java.XGBoostError: [22:22:41] /workspace/src/tree/"
            "updater_gpu_hist.cu:712: Exception in gpu_hist: [22:22:41] /workspace/src/common/"
            "device_helpers.cuh:428: Memory allocation error on worker 3: Caching allocator\n"
            "- Free memory: 224067584\n"
            "- Requested memory: 878511352",
            K.CUDA_OOM,
        ),
        # catboost/catboost#2251
        (
            "(class TCatBoostException) C:/Go Agent/pipelines/catboost.git/catboost/cuda/"
            "cuda_util/sort.cpp:166: CUDA error 9: invalid configuration argument",
            K.CUDA_FATAL,
        ),
        # ... its code 2
        (
            "(class TCatBoostException) catboost/cuda/cuda_lib/memory_pool/stack_like_memory_"
            "pool.h:293: CUDA error 2: out of memory",
            K.CUDA_OOM,
        ),
        # marian-nmt/marian#411
        (
            "[2023-04-18 02:00:09] Error: Not implemented\n"
            "[2023-04-18 02:00:09] Error: Aborted from static To marian::fastopt_helpers::"
            "Convert<To, std::__cxx11::basic_string<char> >::apply(const string&) [with To = "
            "int; std::string = std::__cxx11::basic_string<char>] in /home/u/marian/src/common/fa",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round82_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # CatBoost's out-of-memory code is no CUDA fault
        ("catboost/cuda/cuda_lib/x.h:293: CUDA error 2: out of memory", K.CUDA_FATAL),
        # XGBoost's host-side allocation words differ; a CPU worker is no device OOM
        (
            "xgboost.core.XGBoostError: [10:01:02] ../src/c_api/c_api.cc:12: std::bad_alloc",
            K.CUDA_OOM,
        ),
    ],
)
def test_round82_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
