"""Issue 12, round 13: rules written from ``tune10`` (gathered as ``heldout11``), each from the
code that prints the message (Caffe2's CUDA_ENFORCE, the TPU runtime's HBM allocator through
XLA, a CUDA error string cut by a pasted log's wrap, HDF5 on a file that is not HDF5, TH's
short disk write, DyNet's gradient check, torch.utils.tensorboard refusing a config value).
Each positive case fails on the rules before round 13; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind

_CAFFE2 = (
    "Traceback (most recent call last):\n"
    '  File "tools/train_net.py", line 128, in <module>\n'
    "    main()\n"
    '  File "/usr/local/lib/python2.7/dist-packages/caffe2/python/workspace.py", line 178, in '
    "CallWithExceptionIntercept\n"
    "    return func(*args, **kwargs)\n"
    "RuntimeError: [enforce fail at {src}] error == cudaSuccess. {code} vs 0. Error at: "
    "/home/u/pytorch/caffe2/core/{src}: {msg}\n"
)


def test_caffe2_cuda_enforce_out_of_memory_is_a_cuda_oom_at_line_time() -> None:
    """Caffe2's CUDA_ENFORCE prints c10's enforce form "error == cudaSuccess. 2 vs 0": error 2
    is cudaErrorMemoryAllocation. Round 12 read the RuntimeError as the script's own error."""
    text = _CAFFE2.format(src="event_gpu.cc:17", code=2, msg="out of memory")
    assert kind(text) is K.CUDA_OOM
    oom = [ev for ev in evidence_of(text) if ev.kind is K.CUDA_OOM]
    assert oom and oom[0].fatal


def test_caffe2_cuda_enforce_other_errors_are_cuda_fatal() -> None:
    text = _CAFFE2.format(
        src="context_gpu.cu:343", code=77, msg="an illegal memory access was encountered"
    )
    assert kind(text) is K.CUDA_FATAL
    # 2 must be the whole code: 20 (cudaErrorAlreadyMapped... any other number) is not an OOM
    assert kind(_CAFFE2.format(src="x.cc:1", code=20, msg="other")) is K.CUDA_FATAL


@pytest.mark.parametrize(
    "line",
    [
        # pytorch/xla's XRT client logging the TPU runtime's status
        "2022-04-04 00:27:49.642414: E tensorflow/compiler/xla/xla_client/xla_util.cc:88]   "
        "OP_REQUIRES failed at tpu_execute_op.cc:266 : RESOURCE_EXHAUSTED: Attempting to "
        "reserve 6.48G at the bottom of memory. That was not possible. There are 6.78G free, 0B "
        "reserved, and 3.33G reservable.",
        # the PJRT client, raised
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: "
        "Attempting to allocate 129.50M. That was not possible. There are 78.17M free.; "
        "(0x0x0_HBM0)",
        # older TF spelling of the status, behind a host and rank prefix
        "2020-10-22 02:48:58 10.128.0.33 [3]   (1) Resource exhausted: Attempting to allocate "
        "180.59M. That was not possible. There are 142.58M free.; (0x3x0_HBM1)",
    ],
)
def test_tpu_hbm_exhaustion_is_device_memory(line: str) -> None:
    """A TPU's HBM is the accelerator's memory: the device-memory rungs are the ones that
    help (a maintainer's answer in pytorch/xla: a smaller batch)."""
    assert kind(line + "\n") is K.CUDA_OOM


def test_an_allocation_notice_without_the_failure_is_nothing() -> None:
    assert not evidence_of("Attempting to allocate 1.20G for the KV cache\n")
    assert not evidence_of("INFO Attempting to reserve 2 GPUs for the trial\n")


def test_cuda_error_string_cut_by_a_pasted_wrap_is_a_cuda_oom() -> None:
    """MXNet's pooled storage manager ("cudaMalloc failed: out of memory"), wrapped mid-word
    by the reporter's terminal: the rest of "failed: out of memory" starts the next line."""
    text = (
        "terminate called after throwing an instance of 'dmlc::Error'\n"
        "  what():  [10:44:35] src/storage/./pooled_storage_manager.h:107: cudaMalloc fail\n"
        "ed: out of memory\n"
    )
    assert kind(text) is K.CUDA_OOM
    for rest in ("iled: out of memory", "led: out of memory", "d: out of memory"):
        assert kind(f"x\n{rest}\n") is K.CUDA_OOM, rest


def test_the_first_half_of_a_wrapped_cuda_error_is_not_enough() -> None:
    """cudaMalloc fails with other errors too (a sticky illegal access): the line that names
    no error is not an OOM, nor is a line that merely goes on after "out of memory"."""
    assert K.CUDA_OOM not in {
        ev.kind for ev in evidence_of("  what():  pooled_storage_manager.h:107: cudaMalloc fail\n")
    }
    assert K.CUDA_OOM not in {
        ev.kind for ev in evidence_of("used: out of memory budget, 3 of 4 shards kept\n")
    }


@pytest.mark.parametrize(
    "line",
    [
        "IOError:` Unable to open file (file signature not found)",  # as pasted (keras-yolo3)
        "OSError: Unable to open file (file signature not found)",
        "OSError: Unable to synchronously open file (file signature not found)",
    ],
)
def test_hdf5_file_that_is_not_hdf5_is_a_checkpoint_error(line: str) -> None:
    """h5py loading weights from a save that was interrupted (the maintainer's diagnosis)."""
    text = (
        '  File "/usr/lib/python3/dist-packages/keras/engine/topology.py", line 2647, in '
        "load_weights\n"
        "    with h5py.File(filepath, mode='r') as f:\n"
        f"{line}\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_hdf5_missing_file_is_not_a_checkpoint_error() -> None:
    """A path that does not exist is the job's own setting, not a broken checkpoint."""
    text = (
        "OSError: Unable to open file (unable to open file: name = 'weights.h5', errno = 2, "
        "error message = 'No such file or directory', flags = 0, o_flags = 0)\n"
    )
    assert kind(text) is not K.CHECKPOINT_ERROR


def test_th_short_disk_write_is_a_full_disk() -> None:
    """Lua Torch7's THDiskFile during torch.save: a short write, ENOSPC in practice (the same
    inference as PytorchStreamWriter's "file write failed")."""
    text = (
        "write error: wrote 2854962 blocks instead of 3211264 at "
        "/home/u/torch/pkg/torch/lib/TH/THDiskFile.c:331\n"
        "stack traceback:\n"
        "\t[C]: in function 'write'\n"
    )
    assert kind(text) is K.DISK_FULL


def test_th_short_read_is_not_a_full_disk() -> None:
    text = "read error: read 0 blocks instead of 1 at /home/u/torch/lib/TH/THDiskFile.c:288\n"
    assert kind(text) is not K.DISK_FULL


@pytest.mark.parametrize("value", ["-nan", "nan", "inf", "-inf"])
def test_dynet_bad_gradient_is_divergence(value: str) -> None:
    text = (
        '  File "_dynet.pyx", line 5733, in _dynet.Trainer.update\n'
        f"RuntimeError: Magnitude of gradient is bad: {value}\n"
    )
    assert kind(text) is K.LOSS_DIVERGENCE


def test_a_finite_gradient_magnitude_is_not_divergence() -> None:
    assert not evidence_of("Magnitude of gradient is bad: 1e+30\n")


@pytest.mark.parametrize(
    "line",
    [
        "value should be one of int, float, str, bool, or torch.Tensor",  # logged, no class
        # (already the user's error before round 13, as any ValueError: a guard)
        "ValueError: value should be one of int, float, str, bool, or torch.Tensor",
    ],
)
def test_tensorboard_refusing_a_config_value_is_the_users_error(line: str) -> None:
    text = (
        "2024-09-04 23:45:31,639 [INFO] (helpers.training.trainer) Loading our accelerator...\n"
        f"{line}\n"
        "Traceback (most recent call last):\n"
        '  File "/w/venv/lib/python3.10/site-packages/accelerate/tracking.py", line 79, in '
        "execute_on_main_process\n"
    )
    failure = classify_text(text, exit_code=1)
    assert failure is not None
    assert failure.kind is K.USER_CODE_ERROR
    assert failure.retry_helps is False
