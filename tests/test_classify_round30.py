"""Issue 12, round 30: rules written from ``tune27`` (gathered as ``heldout28``), each from the
code that prints the message: TensorFlow 1.x's GPU allocator failing for good, accelerate's
newer wording of a wrap class missing from the model, transformers' ZeRO-3 check pasted
without its exception name, and a library's checkpoint module failing to load what was
saved. Each positive case fails on the rules before round 30; the near misses pass before and
after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # bfc_allocator.cc, TF 1.x, the summary before the op's ResourceExhaustedError
        (
            "2019-03-01 10:00:00.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:267] "
            "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.53GiB.  Current "
            "allocation summary follows.",
            K.CUDA_OOM,
        ),
        # accelerate utils/dataclasses.py, the class named
        (
            "ValueError: Could not find the transformer layer class LlamaDecoderLayer in the "
            "model.",
            K.DS_CONFIG_ERROR,
        ),
        # transformers modeling_utils.py, its message alone on a logger's line
        (
            "2024-05-02 11:03:14 | ERROR | DeepSpeed Zero-3 is not compatible with "
            "`low_cpu_mem_usage=True` or with passing a `device_map`.",
            K.DS_CONFIG_ERROR,
        ),
        # a library's checkpoint module: MMEngine's loader, a project's resume helper
        (
            '  File "/opt/lib/python3.10/site-packages/mmengine/runner/checkpoint.py", line '
            "347, in load_from_local\n"
            "    raise FileNotFoundError(f'{filename} can not be found.')\n"
            "FileNotFoundError: work_dirs/rtm/epoch_12.pth can not be found.",
            K.CHECKPOINT_ERROR,
        ),
        (
            '  File "/work/proj/src/trainer/checkpoint_utils.py", line 88, in '
            "resume_from_checkpoint\n"
            "    step = state['global_step']\n"
            "KeyError: 'global_step'",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round30_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the allocator's retry that goes on
        (
            "W tensorflow/core/common_runtime/bfc_allocator.cc:211] Allocator (GPU_0_bfc) ran "
            "out of memory trying to allocate 2.19GiB with freed_by_count=0. The caller "
            "indicates that this is not a failure, but may mean that there could be "
            "performance gains if more memory were available.",
            K.CUDA_OOM,
        ),
        # two packages' versions in a checkpoint loader (kohya-ss/sd-scripts#1524)
        (
            '[rank0]:   File "/env/lib/python3.11/site-packages/accelerate/checkpointing.py", '
            "line 208, in load_accelerator_state\n"
            "[rank0]:     load_model(model, input_model_file, device=str(map_location))\n"
            "[rank0]: TypeError: load_model() got an unexpected keyword argument 'device'",
            K.CHECKPOINT_ERROR,
        ),
        # a checkpoint module's save side is not a load
        (
            '  File "/work/proj/src/trainer/checkpoint_utils.py", line 40, in save_checkpoint\n'
            "    raise ValueError(f'unknown format {fmt}')\n"
            "ValueError: unknown format tar",
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round30_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
