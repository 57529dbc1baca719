"""Issue 12, round 7: rules written from ``tune5`` (gathered as ``heldout6``), each from the
source that prints the message (torch optim/serialization, Lightning, NCCL socket.cc, ROCm's
runtime, Windows, HTCondor/CRAB). Each positive case fails on the rules before round 7; the
near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text

K = FailureKind


def read_as(text: str) -> FailureKind | None:
    """The kind of the verdict on ``text`` ending an attempt with exit 1, or None for none
    (the near-miss tests of each round: a line must not be read as some kind)."""
    v = classify_text(text if text.endswith("\n") else text + "\n", exit_code=1)
    return None if v is None else v.kind


def kind(text: str) -> FailureKind:
    found = read_as(text)
    assert found is not None
    return found


LINES = [
    # torch optim/optimizer.py Optimizer.load_state_dict (and bitsandbytes' copy), in prose too
    (
        "ValueError: loaded state dict contains a parameter group that doesn't match the size "
        "of optimizer's group",
        K.CHECKPOINT_ERROR,
    ),
    (
        "it telled me “loaded state dict contains a parameter group that doesn't match the size "
        "of optimizer's group”.",
        K.CHECKPOINT_ERROR,
    ),
    ("ValueError: loaded state dict has a different number of parameter groups",
     K.CHECKPOINT_ERROR),
    # Lightning utilities/migration/utils.py _get_version on a plain torch state dict
    ("KeyError: 'pytorch-lightning_version'", K.CHECKPOINT_ERROR),
    # Lightning's restore message wrapped off its KeyError line (e-mail quoted)
    (
        "> 'Trying to restore training state but checkpoint contains only the model.",
        K.CHECKPOINT_ERROR,
    ),
    # torch serialization.py
    ("RuntimeError: Invalid magic number; corrupt file?", K.CHECKPOINT_ERROR),
    (
        "RuntimeError: Attempting to deserialize object on a CUDA device but "
        "torch.cuda.is_available() is False. If you are running on a CPU-only machine, please "
        "use torch.load with map_location=torch.device('cpu') to map your storages to the CPU.",
        K.CHECKPOINT_ERROR,
    ),
    # pre-1.0 torch THC, glued after a tqdm bar
    (
        "Valid epoch 1:   9%|██▍   | 1/11 [00:01<00:13,  1.33s/it]THCudaCheck FAIL "
        "file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
        K.CUDA_OOM,
    ),
    # Windows' commit limit (ERROR_COMMITMENT_LIMIT)
    (
        "(raylet) [2023-09-18 05:59:34,944 C 19680 8204] (raylet.exe) dlmalloc.cc:129:  Check "
        "failed: *handle != nullptr CreateFileMapping() failed. GetLastError() = 1455",
        K.HOST_OOM,
    ),
    (
        "OSError: [WinError 1455] The paging file is too small for this operation to complete. "
        'Error loading "C:\\venv\\torch\\lib\\cudnn_cnn_infer64_8.dll"',
        K.HOST_OOM,
    ),
    # ROCm's runtime on a GPU page fault
    (
        "Memory access fault by GPU node-1 (Agent handle: 0x56249bd69990) on address "
        "0x7f95aa9ff000. Reason: Page not present or supervisor privilege.",
        K.CUDA_FATAL,
    ),
    # NCCL socket.cc
    (
        "socketPollConnect: connect to 22.11.219.25<47479> returned Connection refused, exceeded "
        "error retry count after 35 attempts",
        K.NCCL_ERROR,
    ),
    # a grid's wall-clock kill, a hang-up and a full disk in words
    (
        "ERROR:RetryJob Not retrying job due to wall clock limit (job automatically killed on "
        "the worker node)",
        K.KILLED_EXTERNALLY,
    ),
    ("Despite nohup, mmlab still catches the SIGHUP signal and dies.", K.KILLED_EXTERNALLY),
    ("2017/03/16 13:50:06 bds: Received OS signal 'hangup'", K.KILLED_EXTERNALLY),
    ("The cache folder is 500gb (and now my disk space is full).", K.DISK_FULL),
]  # fmt: skip


@pytest.mark.parametrize(("line", "want"), LINES)
def test_round7_lines(line: str, want: FailureKind) -> None:
    assert kind(line) is want


def test_a_rich_frame_of_cpp_extension_without_its_function_names_a_build() -> None:
    """rich wraps " in <func>" off a long path's line; the excerpt is cut inside the box
    (microsoft/DeepSpeed, a ChatGLM run JIT-compiling cpu_adam)."""
    text = (
        "│ ❱ 1508 │   │   │   │   │   _write_ninja_file_and_build_library(                │\n"
        "│ /home/u/miniconda3/envs/py310/lib/python3.10/site-packages/torch/utils/cpp_extension.py:16 │\n"  # noqa: E501
        "│ 23 in _write_ninja_file_and_build_library                                      │\n"
        "│ ❱ 1623 │   _run_ninja_build(                                                   │\n"
    )
    assert kind(text) is K.DS_BUILD_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # a healthy config echo and a tip that name the same things
        "wall clock limit: 24:00:00, checkpoint every 30 min",
        "tip: run under nohup or tmux so that closing the terminal sends no SIGHUP",
        "disk space check: 420 GB free",
    ],
)
def test_round7_near_misses(line: str) -> None:
    v = classify_text(line + "\n", exit_code=1)
    assert v is not None and v.kind not in (K.KILLED_EXTERNALLY, K.DISK_FULL)


def test_prose_disk_full_never_outranks_a_specific_line() -> None:
    text = "my disk is full of checkpoints, but the run died with:\nKilled\n"
    assert kind(text) is K.HOST_OOM
