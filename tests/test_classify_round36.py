"""Issue 12, round 36: rules written from ``tune33`` (gathered as ``heldout34``), each from the
code that prints the message: Caffe's snapshot write, restore and logged NaN loss (the last
pasted as a Markdown quote, which is not IPython's arrow), the linker under a JIT build, TF's
Saver.restore, Paddle's CUDA errors, ZeRO's double reduction, Caffe2's, torch_xla's and
HCCL's communication failures, torch < 1.9's held port, darknet's missing file, and torch's
distributed checkpoint loader. Each positive case fails on the rules before round 36; the
near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_TORCH = "/usr/lib/python3.8/site-packages/torch/distributed"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Caffe's solver log, quoted in Markdown ("> " then the line's own timestamp)
        (
            "> 1508138445  INFO: src/caffe/solver.cpp : line 218 : Iteration 0 (-0.38 iter/s, "
            "183.199s/1 iters), loss = nan\n"
            "> 1508138506  INFO: src/caffe/solver.cpp : line 218 : Iteration 1 (0.0164 iter/s, "
            "60.979s/1 iters), loss = nan",
            K.LOSS_DIVERGENCE,
        ),
        # gcc's driver after the linker failed
        (
            "/opt/conda/bin/ld: cannot find -lcuda: No such file or directory\n"
            "collect2: error: ld returned 1 exit status",
            K.DS_BUILD_ERROR,
        ),
        # Caffe util/io.cpp under Solver::Snapshot
        (
            "F0606 09:01:48.148102 23862 io.cpp:72] Check failed: "
            "proto.SerializeToOstream(&output)",
            K.DISK_FULL,
        ),
        # TF training/saver.py
        (
            "ValueError: The passed save_path is not a valid checkpoint: Data/checkpoint/gcn.ckpt",
            K.CHECKPOINT_ERROR,
        ),
        # Caffe net.cpp CopyTrainedLayersFrom
        (
            "F1215 13:01:28.729923 26988 net.cpp:774] Cannot copy param 0 weights from layer "
            "'conv4_3_norm_mbox_conf'; shape mismatch.  Source param shape is 63 512 3 3 "
            "(290304); target param shape is 6 512 3 3 (27648).",
            K.CHECKPOINT_ERROR,
        ),
        # Paddle 2.0's enforce on a CUDA error
        ("ExternalError:  Cuda error(719), unspecified launch failure.", K.CUDA_FATAL),
        # DeepSpeed runtime/zero/stage_1_and_2.py
        (
            "RuntimeError: The parameter 290 has already been reduced.             Gradient "
            "computed twice for this partition.             Multiple gradient reduction is "
            "currently not supported",
            K.DS_CONFIG_ERROR,
        ),
        # Caffe2's NCCL op, torch_xla's mesh service, HCCL's EI0006
        (
            "[E net_dag.cc:188] Exception from operator chain starting at '' (type "
            "'NCCLAllreduce'): caffe2::EnforceNotMet: [enforce fail at cuda_nccl_gpu.cc:24] "
            "status == ncclSuccess. 2 vs 0.  Error at: cuda_nccl_gpu.cc24: system error",
            K.NCCL_ERROR,
        ),
        (
            "Exception in device=TPU:3: tensorflow/compiler/xla/xla_client/mesh_service.cc:247 "
            ": Failed to meet rendezvous 'init': Socket closed (14)",
            K.NCCL_ERROR,
        ),
        (
            "EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank "
            "did not send the data in time. Please check the reason for the rank being stuck",
            K.NCCL_ERROR,
        ),
        # torch < 1.9's TCPStore on a held port, under the rendezvous' frames
        (
            f'  File "{_TORCH}/rendezvous.py", line 179, in _env_rendezvous_handler\n'
            "    store = TCPStore(master_addr, master_port, world_size, start_daemon, timeout)\n"
            "RuntimeError: Address already in use",
            K.USER_CODE_ERROR,
        ),
        # darknet's file_error(), in backticks
        (
            "`Couldn't open file: C:/Users/R/Documents/traindata/train.txt",
            K.USER_CODE_ERROR,
        ),
        # torch's distributed checkpoint loader
        (
            f'  File "{_TORCH}/checkpoint/state_dict_loader.py", line 250, in local_step\n'
            "    assert metadata is not None\n"
            "AssertionError",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round36_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # IPython's arrow still marks echoed source
        ("---> 12     raise RuntimeError('CUDA out of memory')", K.CUDA_OOM),
        # Paddle's CUDA error 2 is memory, not a fault
        ("ExternalError:  Cuda error(2), out of memory.", K.CUDA_FATAL),
        # a tool that recreates a file it could not open goes on
        ("Warning: couldn't open file cache.txt, recreating it", K.USER_CODE_ERROR),
        # the distributed checkpoint's save side is not a load
        (
            f'  File "{_TORCH}/checkpoint/state_dict_saver.py", line 120, in save\n'
            "    assert planner is not None\n"
            "AssertionError",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round36_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
