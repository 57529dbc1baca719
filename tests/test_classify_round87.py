"""Issue 12, round 87: rules written from ``tune81`` (gathered as ``heldout82``), each from the
code that prints the message: torch 1.x's NCCL watchdog read from the head of a line a terminal
wrapped, XLA's NCCL thunks on a failed NCCL call, and a shell's "Killed" written over a progress
line. Each positive case fails on the rules before round 87; the near misses pass before and
after. Left as it reads: google-deepmind/searchless_chess#9, JAX's pytree "Dict key mismatch;
expected keys: [...]" restoring a checkpoint into a model whose module names differ, labelled a
checkpoint error, a user error: the paste keeps only the exception line, and the same words
come from any two mismatched trees (jax.tree.map over two dicts), not only from a restore.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ultralytics/ultralytics#12905, wrapped at the terminal's width
        (
            "RuntimeError: [Rank 1] Caught collective operation timeout: WorkNCCL(SeqNum=6, "
            "OpType=ALLREDUCE, TensorShape=[1], Tim\n"
            "eout(ms)=10800000) ran for 10800863 milliseconds before timing out.\n"
            "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1311 closing "
            "signal SIGTERM\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: "
            "1 (pid: 1312) of binary: /home/u/anaconda3/envs/dm/bin/python",
            K.NCCL_ERROR,
        ),
        # google-research/t5x#864, wrapped inside "un/handled"
        (
            "2022-10-23 01:07:26.771566: E external/org_tensorflow/tensorflow/compiler/xla/pjrt/"
            "pjrt_stream_executor_client.cc:2153] Ex\n"
            "ecution of replica 1 failed: INTERNAL: external/org_tensorflow/tensorflow/compiler/"
            "xla/service/gpu/nccl_all_reduce_thunk.c\n"
            "c:70: NCCL operation ncclAllReduce(send_buffer, recv_buffer, element_count, dtype, "
            "reduce_op, comm, gpu_stream) failed: un\n"
            "handled cuda error\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/t5x/t5x/train.py", line 757, in <module>\n'
            "    gin_utils.run(main)",
            K.NCCL_ERROR,
        ),
        # facebookresearch/dlrm#4
        (
            "Training data\n"
            "Total number of batches 263115\n"
            "Killedg in train batch: 127687 / 263115",
            K.HOST_OOM,
        ),
    ],
)
def test_round87_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # XLA's own loader message (an install that cannot find NCCL) is no NCCL failure
        (
            "external/xla/xla/service/gpu/nccl_utils.cc:133: NCCL operation ncclGetUniqueId(&id) "
            "failed: Unable to load NCCL library. Multi-GPU collectives will not work.;",
            K.NCCL_ERROR,
        ),
        # dask's exception class and a sentence are no shell's kill report
        (
            "distributed.scheduler.KilledWorker: ('train-0', <WorkerState 'tcp://10.0.0.2:1', "
            "status: closed>)",
            K.HOST_OOM,
        ),
        ("Killed the stale tensorboard before the run started", K.HOST_OOM),
        # a collective that finished is no timeout
        ("[Rank 0] WorkNCCL(SeqNum=6, OpType=ALLREDUCE) completed in 3 ms", K.NCCL_ERROR),
    ],
)
def test_round87_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
