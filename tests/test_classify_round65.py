"""Issue 12, round 65: rules written from ``tune61`` (gathered as ``heldout62``), each from the
code that prints the message: CUDA's invalid device ordinal (now a user error of the launch,
with a hint, whose peers' NCCL failures are its consequence), TensorFlow's GPU copy without a
destination buffer, TF's collective executor past a peer's deadline, CuPy's NCCL binding (also
re-raised by Ray), and libtpu's loader missing a function. Each positive case fails on the rules
before round 65; the near misses pass before and after. Left unread: a SIGBUS whose backtrace
lies in libnccl (NCCL's /dev/shm segment; telling it from a DataLoader's needs the frames
below the signal line), TensorFlow's OOM whose device the paste cut, and a project's own
checkpoint loader raising KeyError.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_ORDINAL = (
    "RuntimeError: cuda runtime error (10) : invalid device ordinal at /pytorch/torch/csrc/cuda/"
    "Module.cpp:33\n"
    "THCudaCheck FAIL file=/pytorch/torch/csrc/cuda/Module.cpp line=33 error=10 : invalid device "
    "ordinal\n"
    "Traceback (most recent call last):\n"
    '  File "tools/train.py", line 98, in main\n'
    "    torch.cuda.set_device(args.local_rank)\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_ORDINAL, K.USER_CODE_ERROR),
        ("RuntimeError: CUDA error: invalid device ordinal", K.USER_CODE_ERROR),
        ("InternalError (see above for traceback): Dst tensor is not initialized.", K.CUDA_OOM),
        (
            "tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor "
            "from /job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/"
            "device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized.",
            K.CUDA_OOM,
        ),
        (
            "2023-05-25 11:10:57.934361: E tensorflow/core/common_runtime/base_collective_executor"
            ".cc:249] BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded\n"
            "Additional GRPC error information from remote target /job:worker/replica:0/task:0:\n",
            K.NCCL_ERROR,
        ),
        (
            "jax._src.traceback_util.UnfilteredStackTrace: ray.exceptions.RayTaskError(NcclError): "
            "ray::MeshHostWorker.init_p2p_communicator() (pid=16322, ip=10.0.0.4, repr=<alpa."
            "device_mesh.MeshHostWorker object at 0x7f9ab240f460>)",
            K.NCCL_ERROR,
        ),
        (
            "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_INTERNAL_ERROR: internal error",
            K.NCCL_ERROR,
        ),
        (
            "2022-02-23 17:35:25.749201: F external/org_tensorflow/tensorflow/core/tpu/"
            "tpu_library_init_fns.inc:104] TpuEmbeddingEngine_WriteParameters not available in "
            "this library.\n"
            "Aborted (core dumped)",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round65_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_missing_device_names_the_fix_and_is_not_retried() -> None:
    failure = classify_text(_ORDINAL, exit_code=1)
    assert failure is not None and failure.kind is FailureKind.USER_CODE_ERROR
    assert failure.retry_helps is False
    assert failure.hint is not None and "not visible" in failure.hint


def test_a_missing_device_explains_the_peers_nccl_failure() -> None:
    """The rank on a GPU that is not there is one of the launch's errors (with the held port and
    the duplicate GPU) whose peers' NCCL failures are its consequence."""
    text = (
        "[rank3]: RuntimeError: CUDA error: invalid device ordinal\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        "c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL "
        "version 2.21.5\n"
    )
    failure = classify_text(text, exit_code=1)
    assert failure is not None and failure.kind is FailureKind.USER_CODE_ERROR


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # another CUDA error through the same checks stays a CUDA fault
        ("RuntimeError: CUDA error: an illegal instruction was encountered", K.USER_CODE_ERROR),
        # a copy's other check in the same helper is no OOM
        ("InternalError: Src tensor is not initialized.", K.CUDA_OOM),
        # the executor's abort at an input pipeline's end is no network failure
        (
            "W tensorflow/core/common_runtime/base_collective_executor.cc:217] "
            "BaseCollectiveExecutor::StartAbort Out of range: End of sequence",
            K.NCCL_ERROR,
        ),
        # an older loader's error-level note, which goes on
        (
            "E tensorflow/core/tpu/tpu_api_dlsym_initializer.cc:80] "
            "TpuCompile_CreateCompilationCacheKey not available in this library.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round65_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
