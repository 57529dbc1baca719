"""Issue 12, round 9: rules written from ``tune6`` (gathered as ``heldout7``), each from the
code that prints the message (XLA, Ray's raylet, pip, the CUDA driver and runtime APIs,
Caffe's glog CHECK, pre-1.0 torch's THC, pdsh and ssh, argparse, click, torch's
load_state_dict, accelerate). Each positive case fails on the rules before round 9; the near
misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind

K = FailureKind


LINES = [
    # older XLA's status spelling, whole and wrapped after "Out" by an 80-column paste
    (
        "2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/"
        "local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of memory "
        "while trying to allocate 5520758552 bytes.",
        K.CUDA_OOM,
    ),
    (
        "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/"
        "python/local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out\n"
        "of memory while trying to allocate 5520758552 bytes.",
        K.CUDA_OOM,
    ),
    # Ray's raylet: its memory monitor killed workers for host RAM
    (
        "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 "
        "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due "
        "to other reasons at node (ID: 351e40, IP: 10.95.143.76) over the last time period.",
        K.HOST_OOM,
    ),
    # pip building DeepSpeed from source
    ("  Building wheel for deepspeed (setup.py) ... error", K.DS_BUILD_ERROR),
    ("    Running setup.py install for deepspeed ... error", K.DS_BUILD_ERROR),
    ("Failed to build deepspeed", K.DS_BUILD_ERROR),
    ("ERROR: Failed building wheel for deepspeed", K.DS_BUILD_ERROR),
    # the sticky CUDA errors by enum name, and the numbered check formats
    (
        "2018-01-25 08:26:42.262115: E tensorflow/stream_executor/cuda/cuda_driver.cc:1124] "
        "could not synchronize on CUDA stream: CUDA_ERROR_ILLEGAL_ADDRESS :: No stack trace "
        "available",
        K.CUDA_FATAL,
    ),
    ("failed to launch kernel: cudaErrorLaunchFailure", K.CUDA_FATAL),
    (
        "F0327 14:22:53.845574  4828 math_functions.hpp:179] Check failed: error == "
        "cudaSuccess (74 vs. 0)  misaligned address",
        K.CUDA_FATAL,
    ),
    (
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCTensorCopy.cu line=84 error=74 : "
        "misaligned address",
        K.CUDA_FATAL,
    ),
    # a multi-node launch that cannot reach its workers over ssh
    ("pdsh@6dca91c32bfd: 172.17.0.2: ssh exited with exit code 255", K.NCCL_ERROR),
    ("172.17.0.3: mchorse@172.17.0.3: Permission denied (publickey,password).", K.NCCL_ERROR),
    # argparse's rejection under a hyphenated program name (peeled like a host prefix)
    (
        "fairseq-train: error: argument --arch/-a: invalid choice: 'transformer_mass_base' "
        "(choose from 'transformer', 'transformer_iwslt_de_en'",
        K.USER_CODE_ERROR,
    ),
    # click's usage errors (exit 2)
    ("Usage: tune [OPTIONS] COMMAND [ARGS]...\nTry 'tune --help' for help.\n\n"
     "Error: No such command 'run'.", K.USER_CODE_ERROR),
    ("Error: No such option: --lr", K.USER_CODE_ERROR),
    ("Error: Invalid value for '--config': Path 'x.yaml' does not exist.", K.USER_CODE_ERROR),
    ("Error: Missing option '--model'.", K.USER_CODE_ERROR),
    # load_state_dict's per-parameter detail wrapped after "for" by a paste
    (
        "        size mismatch for\n"
        "lora_unet_input_blocks_7_1_transformer_blocks_3_attn2_to_out_0.lora_down.weight:\n"
        "copying a\nparam with shape torch.Size([8, 1280]) from checkpoint, the shape in\n"
        "current model is torch.Size([16, 1280]).",
        K.CHECKPOINT_ERROR,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "want"), LINES)
def test_round9_lines(line: str, want: FailureKind) -> None:
    assert kind(line) is want


def test_a_generic_error_raised_reading_the_deepspeed_config_is_a_config_error() -> None:
    """accelerate reads ``deepspeed_config["fp16"]`` from a config its own ``accelerate
    config`` wrote without that section (accelerate#1271): the config's missing key is the
    cause, whichever library's line read it."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 10, in <module>\n'
        "    accelerator = Accelerator()\n"
        '  File "/v/site-packages/accelerate/accelerator.py", line 240, in mixed_precision\n'
        '    if self.state.deepspeed_plugin.deepspeed_config["fp16"]["enabled"]:\n'
        "KeyError: 'fp16'\n"
    )
    assert kind(text) is K.DS_CONFIG_ERROR


def test_the_same_error_on_another_dict_stays_the_scripts() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 10, in <module>\n'
        '    lr = config["optimizer"]["lr"]\n'
        "KeyError: 'optimizer'\n"
    )
    assert kind(text) is K.USER_CODE_ERROR


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # the out-of-memory code in the same formats stays a CUDA OOM
        ("Check failed: error == cudaSuccess (2 vs. 0)  out of memory", K.CUDA_OOM),
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 "
            "error=2 : out of memory",
            K.CUDA_OOM,
        ),
        ("Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY", K.CUDA_OOM),
    ],
)
def test_round9_oom_codes_stay_ooms(line: str, want: FailureKind) -> None:
    assert kind(line) is want


@pytest.mark.parametrize(
    "line",
    [
        # a successful build and an ssh that worked name the same things
        "  Building wheel for deepspeed (setup.py) ... done",
        "Successfully built deepspeed",
        "pdsh@node0: node1: ssh exited with exit code 0",
        # click's other messages and an unrelated "No such ..."
        "Error: No such file or container: abc",
        # a raylet line about workers that crashed for other reasons only
        "(raylet) 0 Workers (tasks / actors) crashed due to other reasons at node",
    ],
)
def test_round9_near_misses(line: str) -> None:
    v = classify_text(line + "\n", exit_code=1)
    assert v is not None
    assert v.kind not in (K.DS_BUILD_ERROR, K.NCCL_ERROR, K.HOST_OOM, K.USER_CODE_ERROR)
