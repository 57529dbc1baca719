"""Issue 12, round 32: rules written from ``tune29`` (gathered as ``heldout30``), each from the
code that prints the message: device memory in Intel's TensorFlow plugin, MindSpore and
ROCm's hipified checks; Ray's memory monitor's detail; TensorFlow's restore op losing data;
icefall's optimizer on non-finite gradients; HCCL's notify timeout; two user errors pasted
without their exception; a bare ``SIGKILL`` line; accelerate's FSDP wrap policy. Each
positive case fails on the rules before round 32; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_ACC = "/home/u/.local/lib/python3.9/site-packages/accelerate"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ITEX's bfc_allocator.cc, at error level
        (
            "2024-01-02 10:00:00.1: E itex/core/devices/bfc_allocator.cc:101] Allocator ran out "
            "of memory trying to allocate 10529419660 Bytes (rounded to 10529419776 Bytes)",
            K.CUDA_OOM,
        ),
        # MindSpore's device memory pool
        (
            "RuntimeError: Malloc for kernel output failed, Memory isn't enough, "
            "node:Default/Cast-op446",
            K.CUDA_OOM,
        ),
        # ROCm's torch, c10's check hipified
        ("RuntimeError: HIP error: out of memory", K.CUDA_OOM),
        # Ray's memory monitor, the exception's detail without its first line
        (
            "Memory on the node (IP: 10.0.0.2, ID: 70) where the task (actor ID: 0d, "
            "name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was running was "
            "12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of 0.95. "
            "Ray killed this worker (ID: 79) because it was the most recently scheduled task",
            K.HOST_OOM,
        ),
        # TF's RestoreV2 kernel
        (
            "2023-08-02 16:43:09.854875: W tensorflow/core/framework/op_kernel.cc:1745] "
            "OP_REQUIRES failed at save_restore_v2_ops.cc:207 : DATA_LOSS: truncated block read",
            K.CHECKPOINT_ERROR,
        ),
        # icefall zipformer/optim.py
        (
            '    raise RuntimeError("Too many grads were not finite")\n'
            "RuntimeError: Too many grads were not finite",
            K.LOSS_DIVERGENCE,
        ),
        # a kernel not built for the GPU's architecture, on ROCm
        ("RuntimeError: HIP error: invalid device function", K.CUDA_FATAL),
        # HCCL's EI0002, alone on its line behind a Ray actor's prefix
        (
            "(train pid=8464) EI0002: [PID: 13075] 2025-06-25-10:45:23.586.187 The wait "
            "execution of the Notify register times out. Reason: The Notify register has not "
            "received the Notify record from remote rank: [unknown].",
            K.NCCL_ERROR,
        ),
        # TF's sparse_xent_op.cc, without its InvalidArgumentError
        (
            "logits and labels must have the same first dimension, got logits shape "
            "[32,271573] and labels shape [960]",
            K.USER_CODE_ERROR,
        ),
        # kohya-ss sd-scripts' loader, quoted by the reporter
        (
            "> model is not found as a file or in Hugging Face, perhaps file name is wrong? / "
            "指定したモデル名のファイル、またはHugging Faceのモデルが見つかりません。: "
            "/content/pretrained_model/AnyLoRA.safetensors",
            K.USER_CODE_ERROR,
        ),
        # a task manager's note of the kill, after the process's own output
        ("Memory: 13.779288\nbefore parameter optimization\n\nSIGKILL", K.HOST_OOM),
        # accelerate's FSDP plugin reading its wrap policy
        (
            f'  File "{_ACC}/accelerator.py", line 1211, in prepare_model\n'
            "    self.state.fsdp_plugin.set_auto_wrap_policy(model)\n"
            f'  File "{_ACC}/utils/dataclasses.py", line 846, in set_auto_wrap_policy\n'
            '    min_num_params = int(os.environ.get("FSDP_MIN_NUM_PARAMS", 0))\n'
            "ValueError: invalid literal for int() with base 10: '100000000.0'",
            K.DS_CONFIG_ERROR,
        ),
    ],
)
def test_round32_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_kernel_missing_for_the_architecture_is_not_retried_unchanged() -> None:
    """HIP's "invalid device function" is CUDA's "no kernel image" on ROCm: the build does not
    fit the GPU, and an unchanged relaunch meets the same missing kernel."""
    failure = classify_text("RuntimeError: HIP error: invalid device function\n", exit_code=1)
    assert failure is not None and failure.kind is K.CUDA_FATAL
    assert failure.retry_helps is False


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # ITEX's allocator at warning level is a retry that may go on
        (
            "W itex/core/devices/bfc_allocator.cc:101] Allocator ran out of memory trying to "
            "allocate 2.00GiB with freed_by_count=0.",
            K.CUDA_OOM,
        ),
        # Ray's memory report below its threshold is no kill
        (
            "Memory on the node (IP: 10.0.0.2) where the task was running was 5.1GB / 30.0GB "
            "(0.17): ray memory summary",
            K.HOST_OOM,
        ),
        # a TFRecord dataset's corrupt record is the data, not a checkpoint
        (
            "W tensorflow/core/framework/op_kernel.cc:1745] OP_REQUIRES failed at "
            "iterator_ops.cc:1000 : DATA_LOSS: corrupted record at 12",
            K.CHECKPOINT_ERROR,
        ),
        # a tip that names HIP errors is no fault
        ("If you see HIP errors, set AMD_SERIALIZE_KERNEL=3 and rerun", K.CUDA_FATAL),
        # the signal named inside a sentence is no kill
        ("the watchdog sends SIGKILL to a worker stuck for 30 min", K.HOST_OOM),
        # accelerate's plugin construction is every plugin's, not the wrap policy
        (
            f'  File "{_ACC}/utils/dataclasses.py", line 700, in __post_init__\n'
            "    self.sharding_strategy = ShardingStrategy(self.sharding_strategy)\n"
            "ValueError: 7 is not a valid ShardingStrategy",
            K.DS_CONFIG_ERROR,
        ),
    ],
)
def test_round32_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
