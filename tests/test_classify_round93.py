"""Issue 12, round 93: rules written from ``tune84`` (gathered as ``heldout85``), each from the
code that prints the message: Theano's device allocation through CNMeM (read as host memory
once, for its MemoryError class) and cuRAND's, Paddle's DataLoader losing its workers, CUDA's
illegal instruction, LightGBM's and Paddle v1's sockets between the job's processes, XGBoost's
evaluation log going NaN, and LightGBM's Log::Fatal read as the script's error when no rule
names the cause. Each positive case fails on the rules before round 93; the near misses pass
before and after.

Left as it reads: ray-project/ray#41608, XGBoost's "Opening .../checkpoint_000019/model.json
failed" resuming a Ray Train run, labelled a checkpoint error, a user error: XGBoost's file
stream says the same of any path it cannot open, a model the user named as much as a
checkpoint.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # keras-team/keras#3439
        (
            "model.fit(X,Y, batch_size = 16)\n"
            "MemoryError: Error allocating 52428800 bytes of device memory "
            "(CNMEM_STATUS_OUT_OF_MEMORY).",
            K.CUDA_OOM,
        ),
        # explosion/spaCy#3397
        ("`CURANDError: CURAND_STATUS_ALLOCATION_FAILED`", K.CUDA_OOM),
        # PaddlePaddle/Paddle#41508
        (
            '  File "/usr/local/lib/python3.7/site-packages/paddle/fluid/dataloader/'
            'dataloader_iter.py", line 498, in _get_data\n'
            '    "pids: {}".format(len(failed_workers), pids))\n'
            "RuntimeError: DataLoader 1 workers exit unexpectedly, pids: 3348",
            K.HOST_OOM,
        ),
        # AlexeyAB/darknet#8656
        (
            "CUDA status Error: file: ./src/blas_kernels.cu : () : line: 741 : build time: Sep  1 "
            "2022 - 20:13:02\n"
            "\n"
            " CUDA Error: an illegal instruction was encountered\n"
            "Darknet error location: ./src/dark_cuda.c, check_error, line #69\n"
            "CUDA Error: an illegal instruction was encountered: Resource temporarily unavailable",
            K.CUDA_FATAL,
        ),
        # lightgbm-org/LightGBM#4116
        (
            "[LightGBM] [Info] Connected to rank 0\n"
            "[LightGBM] [Fatal] Socket recv error, code: 54\n"
            "distributed.worker - WARNING - Compute Failed\n"
            "Function:  _train_part",
            K.NCCL_ERROR,
        ),
        # PaddlePaddle/Paddle#6499
        (
            "Tue Dec 12 11:28:32 2017[1,8]<stderr>:F1212 11:28:32.289374 51417 LightNetwork.cpp"
            ":397] Check failed: error >= 0 ERROR connecting to 10.74.177.49: Connection refused "
            "[111]\n"
            "Tue Dec 12 11:28:32 2017[1,8]<stderr>:*** Check failure stack trace: ***",
            K.NCCL_ERROR,
        ),
        # dmlc/xgboost#2048
        (
            "[7]\teval-mae:1.25918e+33\ttrain-mae:1.25918e+33\n"
            "[8]\teval-mae:inf\ttrain-mae:inf\n"
            "[9]\teval-mae:inf\ttrain-mae:inf\n"
            "[10]\teval-mae:nan\ttrain-mae:nan",
            K.LOSS_DIVERGENCE,
        ),
        # lightgbm-org/LightGBM#5200
        (
            "[LightGBM] [Fatal] Reducing `min_data_in_leaf` with `feature_pre_filter=true` may "
            "cause unexpected behaviour for features that were pre-filtered by the larger "
            "`min_data_in_leaf`.\n"
            "You need to set `feature_pre_filter=false` to dynamically change the "
            "`min_data_in_leaf`.\n"
            "Error in doTryCatch(return(expr), name, parentenv, handler) :",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round93_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a validation set of one class gives XGBoost an undefined AUC, no divergence
        ("[10]\teval-auc:nan\ttrain-auc:0.91234", K.LOSS_DIVERGENCE),
        # the CPU's illegal instruction (SIGILL) is no CUDA fault
        ("Illegal instruction (core dumped)", K.CUDA_FATAL),
        # LightGBM's info lines are no failure
        (
            "[LightGBM] [Info] Total Bins 1535\n[LightGBM] [Warning] No further splits",
            K.USER_CODE_ERROR,
        ),
        # a host allocation by Theano is not made a device OOM by the CNMeM rule
        (
            "MemoryError: Unable to allocate 2.00 GiB for an array with shape (512, 1048576)",
            K.CUDA_OOM,
        ),
    ],
)
def test_round93_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
