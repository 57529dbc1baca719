"""Issue 12, round 28: rules written from ``tune25`` (gathered as ``heldout26``), each from the
code that prints the message: TensorFlow 1.x refusing a checkpoint's temporary file, dmlc's
short file write, the kubelet's local-storage evictions, TensorFlow's table reader under a
restore, FSDP's wrap policy naming no layer of the model, and ROCm's missing code object.
Each positive case fails on the rules before round 28; the near misses pass before and after.
(Left as read: TensorStore's "Error opening "zarr" driver", which Orbax's restore raises but
a zarr dataset read raises too; a checkpoint verdict sets the resumed checkpoint aside.)
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TF 1.x's IOError with the file alone, a tensor bundle's temporary data file
        (
            "W tensorflow/core/framework/op_kernel.cc:1158] Resource exhausted: "
            "/data/run3/model.ckpt-5000.data-00000-of-00001.tempstate8412993412398413",
            K.DISK_FULL,
        ),
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: /data/run3/"
            "model.ckpt-5000.index.tempstate1429981357266390263",
            K.DISK_FULL,
        ),
        # dmlc-core's FileStream, as XGBoost raises it
        (
            "xgboost.core.XGBoostError: [09:12:01] /workspace/dmlc-core/src/io/local_filesys.cc:"
            "40: Check failed: std::fwrite(ptr, 1, size, fp_) == size (2031616 vs. 4194304) : "
            "FileStream.Write incomplete",
            K.DISK_FULL,
        ),
        # the kubelet's other eviction wordings (pkg/kubelet/eviction/helpers.go)
        (
            "  Warning  Evicted  3m  kubelet  Container trainer exceeded its local ephemeral "
            'storage limit "20Gi".',
            K.DISK_FULL,
        ),
        (
            "Message: The node was low on resource: ephemeral-storage. Threshold quantity: "
            "10Gi, available: 9812Ki. Container trainer was using 180Gi, request is 0.",
            K.DISK_FULL,
        ),
        # TF's table reader on a checkpoint cut short, through its reader's own message
        (
            "tensorflow.python.framework.errors_impl.DataLossError: Unable to open table file "
            "./ckpt/model.ckpt-100: Data loss: file is too short to be an sstable: perhaps "
            "your file is in a different file format and you need to use a different restore "
            "operator?",
            K.CHECKPOINT_ERROR,
        ),
        # FSDP's wrap policy in verl (utils/fsdp_utils.py)
        (
            '  File "/opt/verl/verl/utils/fsdp_utils.py", line 95, in get_fsdp_wrap_policy\n'
            '    raise Exception("Could not find the transformer layer class to wrap in the '
            'model.")\n'
            "Exception: Could not find the transformer layer class to wrap in the model.",
            K.DS_CONFIG_ERROR,
        ),
        # ROCm's newer wording of a missing code object
        (
            '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\n'
            "Aborted (core dumped)",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round28_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_gpu_without_a_code_object_is_not_retried_unchanged() -> None:
    """No code object for the GPU recurs on every launch, as "no kernel image" does."""
    v = classify_text("hipErrorNoBinaryForGpu: Coudn't find binary for current devices!\n", 1)
    assert v is not None and v.kind is K.CUDA_FATAL and not v.retry_helps


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # TensorFlow's allocation OOM says "Resource exhausted" too, with no temporary file
        (
            "W tensorflow/core/framework/op_kernel.cc:1158] Resource exhausted: OOM when "
            "allocating tensor with shape[64,3,224,224] and type float on /job:localhost/"
            "replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            K.DISK_FULL,
        ),
        # a pod spec's request is no eviction
        ('    resources:\n      requests:\n        ephemeral-storage: "50Gi"\n', K.DISK_FULL),
        # a TFRecord cut short is the data, not a checkpoint
        (
            "tensorflow.python.framework.errors_impl.DataLossError: truncated record at "
            "37748736' failed with Read less bytes than requested",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round28_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
