"""Issue 12, round 56: rules written from ``tune53`` (gathered as ``heldout54``): Theano's and
MegEngine's device allocators, plain pickle on a torch.save file and MXNet's parameter reader,
darknet's NaN running loss and icefall's scale-guard note, gRPC's server on a held port, a
shell's SIGBUS report (weak host memory), and glog's SIGTERM report set aside where a rank's
SIGKILL explains it. Each positive case fails on the rules before round 56; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_GLOG_SIGTERM = (
    '*** Aborted at 1520509287 (unix time) try "date -d @1520509287" if you are using GNU date'
    " ***\n"
    "PC: @     0x7fc0d60a9414 __pthread_cond_wait\n"
    "*** SIGTERM (@0x7d100008c74) received by PID 35967 (TID 0x7fc0d7fa7a40) from PID 35956; "
    "stack trace: ***\n"
    "    @     0x7fc0d795849b caffe::MPIComm::WaitAll()\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "MemoryError: Error allocating 147865600 bytes of device memory (out of memory).",
            K.CUDA_OOM,
        ),
        (
            "RuntimeError: out of memory while requesting 68719476736 bytes; you can try setting "
            "MGB_CUDA_RESERVE_MEMORY to reserve all memory. If there are dynamic variables, you "
            "can also try enabling graph option `enable_grad_var_static_reshape`",
            K.CUDA_OOM,
        ),
        (
            "_pickle.UnpicklingError: A load persistent id instruction was encountered,\n"
            "but no persistent_load function was specified.",
            K.CHECKPOINT_ERROR,
        ),
        (
            "mxnet.base.MXNetError: [14:36:59] src/ndarray/ndarray.cc:593: Check failed: "
            "fi->Read(data) Invalid NDArray file format",
            K.CHECKPOINT_ERROR,
        ),
        (
            " 74: -nan, -nan avg loss, 0.000100 rate, 39.074849 seconds, 1776 images",
            K.LOSS_DIVERGENCE,
        ),
        (
            "        ========================= NOTE =========================\n"
            "        If you see this error, it means that the gradient scale is too small.",
            K.LOSS_DIVERGENCE,
        ),
        (
            "E0727 11:38:35.762428930   22857 tcp_server_posix.c:284]     bind addr=[::]:2223: "
            "Address already in use",
            K.USER_CODE_ERROR,
        ),
        ("Bus error (core dumped)", K.HOST_OOM),
        ("./train.sh: line 5:  4242 Bus error (core dumped) python train.py", K.HOST_OOM),
        (
            _GLOG_SIGTERM + "mpirun noticed that process rank 4 with PID 0 on node node7427 "
            "exited on signal 9 (Killed).",
            K.HOST_OOM,
        ),
    ],
)
def test_round56_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # darknet's healthy line, and one NaN step whose running average is still finite
        (" 74: 2.345, 2.501 avg loss, 0.001 rate, 3.1 seconds, 1776 images", K.LOSS_DIVERGENCE),
        # a bind that failed for another reason is not a port another process holds
        (
            "E0727 11:38:35.76 22857 tcp_server_posix.c:284] bind addr=[::]:80: Permission denied",
            K.USER_CODE_ERROR,
        ),
        # a count of bus errors in a hardware report is no process's death, nor a setting
        ("PCIe Bus errors: 0", K.HOST_OOM),
        ("Bus error handling: enabled", K.HOST_OOM),
        # device memory that was allocated is no failure
        ("Allocated 147865600 bytes of device memory for the model", K.CUDA_OOM),
    ],
)
def test_round56_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_a_glog_sigterm_alone_is_still_a_stop_from_outside() -> None:
    """Without a rank's SIGKILL in the output, the handler's SIGTERM names an external stop."""
    assert kind(_GLOG_SIGTERM) is K.KILLED_EXTERNALLY
