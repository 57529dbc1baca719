"""Issue 12, round 44: rules written from ``tune41`` (gathered as ``heldout42``), each from the
code that prints the message: torch's DataLoader on a SIGBUS worker (wrapped onto its own
line), MXNet 0.x's GPU pool, rdma-core's mlx5 error completion and c10d's watchdog exception
by its source location, Paddle's NaN/Inf check, mmcv's checkpoint loader in a cut Jupyter
traceback, JAX's unfiltered-traceback wrapper, and InfiniBand async events that report no
fault. Each positive case fails on the rules before round 44; the near misses pass before and
after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, StreamClassifier, classify_saved, decode_exit
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_MMCV = "~/.local/lib/python3.8/site-packages/mmcv/runner/checkpoint.py"
_IB = "gpu1:5021:5386 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # torch csrc/DataLoader.cpp's SIGBUS sentence, wrapped by the reporter
        (
            "DataLoader worker (pid 270071) is killed by signal:\n"
            "Bus error. It is possible that dataloader's workers are out of shared memory.\n"
            "Please try to raise your shared memory limit.",
            K.HOST_OOM,
        ),
        # MXNet 0.x's GPU pooled storage
        (
            "[19:03:47] /home/u/mxnet/dmlc-core/include/dmlc/./logging.h:235: [19:03:47] "
            "src/storage/./pooled_storage_manager.h:62: Memory allocation failed.",
            K.CUDA_OOM,
        ),
        # rdma-core's mlx5 provider under NCCL's IB transport, behind Ray's actor prefix
        (
            "(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion with "
            "error:",
            K.NCCL_ERROR,
        ),
        # c10d's watchdog exception by its source location, its message cut
        (
            "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:618 (most recent call first):\n"
            "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96",
            K.NCCL_ERROR,
        ),
        # Paddle's FLAGS_check_nan_inf, ahead of the launch failure it leaves
        (
            "[1,0]<stdout>:Error: /paddle/paddle/fluid/framework/details/nan_inf_utils_detail."
            "cu:105 Assertion `false` failed. ===ERROR: in [op=divide] [tensor=] find nan or "
            "inf===\n"
            "[1,0]<stdout>:  what():  transform: failed to synchronize: cudaErrorLaunchFailure: "
            "unspecified launch failure",
            K.LOSS_DIVERGENCE,
        ),
        # a Jupyter traceback cut inside mmcv's checkpoint loader
        (
            "EOFError                                  Traceback (most recent call last)\n"
            "/tmp/ipykernel_60391/991485170.py in <module>\n"
            "----> 1 train_detector(model, datasets[0], cfg, distributed=False)\n\n"
            f"{_MMCV} in load_checkpoint(model, filename, map_location, strict, logger)\n"
            "--> 617     checkpoint = _load_checkpoint(filename, map_location, logger)\n\n"
            f"{_MMCV} in _load_checkpoint(filename, map_location, logger)",
            K.CHECKPOINT_ERROR,
        ),
        # JAX's unfiltered traceback wrapping the script's own error
        (
            "UnfilteredStackTrace: jax._src.errors.ConcretizationTypeError: Abstract tracer "
            "value encountered where",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round44_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_hang_after_ib_reregistration_events_is_a_hang() -> None:
    """A subnet manager re-registering the port is no fault: the run that fell silent after it
    (deepspeedai/DeepSpeedExamples#310) is the hang the supervisor saw, not an NCCL error."""
    text = (
        "gpu1:5028:5378 [7] NCCL INFO comm 0x443814b0 rank 7 nranks 8 cudaDev 7 - Init "
        "COMPLETE\n" + _IB + "client reregistration\n" + _IB + "client reregistr\n"
    )
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    assert sc.evidence == ()
    failure = classify_saved(sc.evidence, decode_exit(None), hang=True)
    assert failure is not None and failure.kind is FailureKind.HANG


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a fault the port reports is still a communication failure
        (_IB + "port error", K.USER_CODE_ERROR),
        # a worker killed by another signal says nothing of shared memory
        (
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault.",
            K.HOST_OOM,
        ),
        # the script's own mmcv checkpoint save is not a load
        (
            "Traceback (most recent call last):\n"
            f'  File "{_MMCV}", line 700, in save_checkpoint\n'
            "    torch.save(checkpoint, f)\n"
            "RuntimeError: Parent directory /work_dirs does not exist.",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round44_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
