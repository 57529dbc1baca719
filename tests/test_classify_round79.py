"""Issue 12, round 79: rules written from ``tune76`` (gathered as ``heldout77``), each from the
code that prints the message: Paddle's optimizer restoring a state without one of its
accumulators, and safetensors' writer on a path that does not exist or may not be written.
Each positive case fails on the rules before round 79; the near misses pass before and after.
Left as it reads: derrian-distro/LoRA_Easy_Training_Scripts#170, sd-scripts' "RuntimeError:
NaN detected in latents: <image>" while caching latents with an fp16 VAE, labelled a divergence
and read as the script's own error: the check names an image, its remedy a setting
(--no_half_vae), and no training step has run.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # PaddlePaddle/Paddle#38065
        (
            "AssertionError: Optimizer set error, conv2d_2.w_0_velocity_0 should in state dict",
            K.CHECKPOINT_ERROR,
        ),
        # Comfy-Org/ComfyUI#8531 (Korean Windows: "the specified path cannot be found")
        (
            "!!! Exception during processing !!! Error while serializing: IoError(Os { code: 3, "
            'kind: NotFound, message: "지정된 경로를 찾을 수 없습니다." })',
            K.USER_CODE_ERROR,
        ),
        # ... and a folder the user may not write
        (
            "!!! Exception during processing !!! Error while serializing: IoError(Os { code: 5, "
            'kind: PermissionDenied, message: "Access is denied." })',
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round79_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a full disk under safetensors' writer stays a full disk
        (
            "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, "
            'kind: StorageFull, message: "No space left on device" })',
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round79_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
