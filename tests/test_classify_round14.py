"""Issue 12, round 14: rules written from ``tune11`` (gathered as ``heldout12``), each from the
code that prints the message (a frame header with the rest of a flattened paste glued on,
DeepSpeed's ZeRO-Offload refusing a client optimizer, its runner's ssh reachability check,
NCCL's shared-memory transport on a small /dev/shm, the loss-scale floor retyped in lower case,
torch's zip writer and the cpu_adam after-effect pasted alone). Each positive case fails on the
rules before round 14; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind

_FLAT = (
    'File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line '
    "1906, in broadcast 10: work = default_pg.broadcast([tensor], opts) 10: "
    "torch.distributed.DistBackendError: NCCL error in: /opt/conda/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1331, unhandled system error (run with NCCL_DEBUG=INFO for details), "
    "NCCL version 2.18.5 10: ncclSystemError: System call (e.g. socket, malloc) or external "
    "library call failed or device error. 10: Last error: 10: socketStartConnect: Connect to "
    "127.0.0.1<45069> failed : Software caused connection abort"
)


def test_a_flattened_paste_after_a_frame_header_is_read() -> None:
    """A paste that lost its line ends puts the whole traceback on the first frame's line;
    round 13 noted the frame and read nothing else."""
    assert kind(_FLAT) is K.NCCL_ERROR


def test_a_cuda_oom_glued_after_a_frame_is_a_cuda_oom() -> None:
    text = (
        'File "train.py", line 88, in train_step     loss.backward() '
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert kind(text) is K.CUDA_OOM


@pytest.mark.parametrize(
    "line",
    [
        '  File "/w/train.py", line 12, in <module>',
        '  File "/w/train.py", line 12, in <module>   ',
        '  File "/w/oom_tips.py", line 3, in main',
    ],
)
def test_a_frame_header_alone_has_nothing_glued(line: str) -> None:
    from dsguard.core.frames import frame_header  # (round 14's; here, so that the rest of
    # this file runs against the rules before it)

    header = frame_header(line)
    assert header is not None and header[1] == ""
    assert not evidence_of(line + "\n")


def test_glued_text_without_a_failure_is_nothing() -> None:
    """Only what a rule names counts: a source line glued on is not evidence."""
    line = '  File "/w/train.py", line 12, in step  x = model(batch)  # may run out of memory\n'
    assert not [ev for ev in evidence_of(line) if ev.kind is K.CUDA_OOM]


@pytest.mark.parametrize(
    "text",
    [
        # Lightning's rich console, hard-wrapped at 80 columns (Lightning#17603)
        "ZeRORuntimeException: You are using ZeRO-Offload with a client provided\n"
        "optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases will yield\n"
        "poor performance. Please either use deepspeed.ops.adam.DeepSpeedCPUAdam or set\n",
        # whole, under its module path (LMFlow#693)
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a "
        "client provided optimizer (<class 'transformers.optimization.AdamW'>) which in most "
        "cases will yield poor performance.\n",
    ],
)
def test_zero_offload_refusing_a_client_optimizer_is_a_config_error(text: str) -> None:
    assert kind(text) is K.DS_CONFIG_ERROR


def test_other_zero_runtime_exceptions_keep_their_own_kind() -> None:
    """The same class raised on a resume at another data-parallel size is a checkpoint's."""
    text = (
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a "
        "DP world size of 8 but the current world size is 4.\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_deepspeed_runner_host_not_reachable_is_connectivity() -> None:
    text = (
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/launcher/runner.py", line '
        "368, in main\n"
        "    raise RuntimeError(\n"
        "RuntimeError: Using hostfile at /etc/hostfile but host=ft-67ea-main-0.ft-67ea was not "
        "reachable via ssh. If you are running with a single node please remove /etc/hostfile "
        "or setup passwordless ssh.\n"
    )
    assert kind(text) is K.NCCL_ERROR


def test_deepspeed_runner_without_a_hostfile_is_nothing() -> None:
    line = (
        "[2024-01-01 00:00:00,000] [WARNING] [runner.py:202:fetch_hostfile] Unable to find "
        "hostfile, will proceed with training with local resources only.\n"
    )
    assert not evidence_of(line)


def test_nccl_shared_memory_on_a_small_dev_shm_is_nccl_not_the_disk() -> None:
    """NCCL's SHM transport in a container with docker's 64 MB /dev/shm (NVIDIA/nccl#290):
    the fix is --shm-size or NCCL_SHM_DISABLE=1, never the checkpoint disk."""
    text = (
        "gpu2:2144:2556 [2] NCCL INFO Ring 00 : 2[3d000] -> 3[3e000] via direct shared memory\n"
        "gpu2:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No "
        "space left on device\n"
        "gpu2:2143:2561 [1] NCCL INFO include/shm.h:41 -> 2\n"
    )
    assert kind(text) is K.NCCL_ERROR
    assert K.DISK_FULL not in {ev.kind for ev in evidence_of(text)}


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 28] No space left on device",
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed "
        "writing file data/2: file write failed; No space left on device",
        "NCCL INFO saving the topology dump failed: No space left on device",
    ],
)
def test_no_space_left_elsewhere_stays_a_full_disk(line: str) -> None:
    assert kind(line + "\n") is K.DISK_FULL


@pytest.mark.parametrize(
    "line",
    [
        # retyped in lower case by a reporter (TinyLLaVA_Factory#107)
        "exception: current loss scale already at minimum - cannot decrease scale anymore. "
        "exiting run",
        # DeepSpeed's own casing (fp16/loss_scaler.py)
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run.",
    ],
)
def test_loss_scale_floor_in_any_case_is_divergence(line: str) -> None:
    assert kind(line + "\n") is K.LOSS_DIVERGENCE


def test_zip_writer_short_write_with_its_prefix_mistyped_is_a_full_disk() -> None:
    line = "enforce fail at inline_container.cc_595] . unexpected pos 1457862912 vs 1457862800\n"
    assert kind(line) is K.DISK_FULL


def test_cpu_adam_after_effect_pasted_alone_is_a_build_error() -> None:
    """The after-effect of a cpu_adam op that never built, pasted without its class name
    (axolotl#138): weak evidence, the death's explanation when nothing else is."""
    line = "` 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`\n"
    assert kind(line) is K.DS_BUILD_ERROR
    evs = evidence_of(line)
    assert evs and all(ev.weak for ev in evs)


def test_cpu_adam_after_effect_does_not_hide_a_real_failure() -> None:
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
        "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f>\n"
        " 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'\n"
    )
    assert kind(text) is K.CUDA_OOM
