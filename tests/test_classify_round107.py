"""Issue 12, round 107: rules written from ``tune91`` (gathered as ``heldout92``, the first fresh
set whose once-score met the accuracy target: 76/80), each from the code that prints the
message: CUDA's "no kernel image is available for execution" cut at the line's end, torch <
0.4's ``load_state_dict`` raising the keys it missed as a KeyError, decord failing to open a
video file FFmpeg cannot read, and debugpy's "Exception has occurred" with the note it adds when
it pauses elsewhere. Each positive case fails on the rules before round 107; the near misses
pass before and after. They took ``tune91`` to 80/80.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # bitsandbytes-foundation/bitsandbytes#903: 8-bit AdamW on a GPU its DLL has no
        # kernels for, the line cut by the source
        ("epoch 1/1\nError no kernel image is available for execution", K.CUDA_FATAL),
        # kenshohara/3D-ResNets-PyTorch#5: a resume into a model of another depth
        (
            "KeyError: 'missing keys in state_dict: \"set([\\'module.layer2.0.downsample.1."
            "running_var\\', \\'module.layer3.0.downsample.1.running_var\\'])\"'",
            K.CHECKPOINT_ERROR,
        ),
        # open-mmlab/mmaction2#1415: a truncated Kinetics clip
        (
            "[mov,mp4,m4a,3gp,3g2,mj2 @ 0x56424560de40] moov atom not found\n"
            "[19:42:56] /github/workspace/src/video/video_reader.cc:83: ERROR opening: , "
            "Invalid data found when processing input",
            K.USER_CODE_ERROR,
        ),
        # NVIDIA/NeMo-Aligner#153: debugpy's pause, its note after the class
        (
            "Exception has occurred: RuntimeError       (note: full exception trace is shown "
            "but execution is paused at: _run_module_as_main)\n"
            "shape '[1]' is invalid for input of size 2",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round107_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the words inside a sentence that goes on are prose, not CUDA's text at a line's end
        (
            "Tip: the error no kernel image is available for execution usually means an old wheel",
            K.CUDA_FATAL,
        ),
        # decord opening a file fine logs nothing of the kind
        (
            "[19:42:56] /github/workspace/src/video/video_reader.cc:83: opened clip.mp4",
            K.USER_CODE_ERROR,
        ),
        # a debugger's other notices name no exception
        ("Exception has occurred: (note: execution is paused)", K.USER_CODE_ERROR),
    ],
)
def test_round107_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
