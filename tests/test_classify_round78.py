"""Issue 12, round 78: rules written from ``tune75`` (gathered as ``heldout76``), each from the
code that prints the message: torch.distributed.checkpoint's CheckpointException, TensorFlow's
stream executor logging a cuDNN kernel that failed, and YARN's preemption of a container. Each
positive case fails on the rules before round 78; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_DCP_RAISE = (
    "Traceback (most recent call last):\n"
    '  File "/x/torch/distributed/_shard/checkpoint/utils.py", line 162, in reduce_scatter\n'
    "    raise result\n"
    "torch.distributed._shard.checkpoint.api.CheckpointException: CheckpointException "
    "ranks:dict_keys([0, 1, 2, 3])\n"
    "Traceback (most recent call last): (RANK 0)\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an FSDP resume from a sharded checkpoint (pytorch/pytorch#86483)
        (
            _DCP_RAISE + '  File "/x/torch/distributed/_shard/checkpoint/utils.py", line 140, in '
            "reduce_scatter\n    local_data = map_fun()",
            K.CHECKPOINT_ERROR,
        ),
        # eriklindernoren/Keras-GAN#179
        (
            "2019-08-16 15:14:30.784869: E tensorflow/stream_executor/cuda/cuda_dnn.cc:82] "
            "CUDNN_STATUS_EXECUTION_FAILED\n"
            "in tensorflow/stream_executor/cuda/cuda_dnn.cc(2804): "
            "'cudnnBatchNormalizationForwardTraining( cudnn.handle(), mode, &one, &zero)'",
            K.CUDA_FATAL,
        ),
        # ShifuML/shifu#592
        (
            "2019-03-05 18:06:00 INFO  AMRMCallbackHandler:143 - ContainerID = "
            "container_e76_1551221575769_208432_01_000132, state = COMPLETE, exitStatus = -102\n"
            "2019-03-05 18:06:00 ERROR AMRMCallbackHandler:147 - Container preempted by "
            "scheduler",
            K.KILLED_EXTERNALLY,
        ),
    ],
)
def test_round78_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_full_disk_inside_a_checkpoint_exception_is_still_a_full_disk() -> None:
    """The wrapper names the step; a rank's ENOSPC inside it names the cause."""
    text = (
        _DCP_RAISE + '  File "/x/torch/distributed/checkpoint/filesystem.py", line 390, in '
        "write_data\n"
        "    stream.write(data)\n"
        "OSError: [Errno 28] No space left on device"
    )
    assert kind(text) is K.DISK_FULL


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a cuDNN call refused for its arguments is the graph's, not a device fault
        (
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:82] CUDNN_STATUS_BAD_PARAM\n"
            "in tensorflow/stream_executor/cuda/cuda_dnn.cc(1796): "
            "'cudnnSetTensorNdDescriptor(handle_.get(), elem_type, nd, dims.data())'",
            K.CUDA_FATAL,
        ),
        # YARN's container finishing normally is no preemption
        (
            "2019-03-05 18:06:00 INFO  AMRMCallbackHandler:143 - ContainerID = "
            "container_e76_1551221575769_208432_01_000132, state = COMPLETE, exitStatus = 0",
            K.KILLED_EXTERNALLY,
        ),
    ],
)
def test_round78_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
