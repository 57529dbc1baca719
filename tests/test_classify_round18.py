"""Issue 12, round 18: rules written from ``tune15`` (gathered as ``heldout16``), each from the
code that prints the message: HF datasets' own free-space check, Triton's CUDA errors, the
distributed checkpoint's missing key, Paddle's DataLoader worker killed, and TRL's per-batch
log-probabilities gone NaN (bash's localized "command not found" is left alone: see the
trigger list in core/classify.py). Each positive case fails
on the rules before round 18 but one, Triton's illegal memory access, which an older rule
already read (kept beside the new Triton rule as a guard); the near misses pass before and
after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # datasets builder.download_and_prepare (zai-org/ChatGLM-6B#1305)
        ("OSError: Not enough disk space. Needed: Unknown size (", K.DISK_FULL),
        (
            "OSError: Not enough disk space. Needed: 1.62 GiB (download: 500.00 MiB, generated: "
            "1.12 GiB, post-processed: Unknown size)",
            K.DISK_FULL,
        ),
        # Triton's launcher (facebookresearch/blt#102)
        ("[rank0]: RuntimeError: Triton Error [CUDA]: device-side assert triggered", K.CUDA_FATAL),
        (
            "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
            K.CUDA_FATAL,
        ),
        # torch.distributed.checkpoint's load planner (pytorch/torchtitan#961)
        (
            "[rank0]:[rank0]: RuntimeError: Missing key in checkpoint state_dict: "
            "model.layers.0.attention.wq.weight.",
            K.CHECKPOINT_ERROR,
        ),
        # Paddle's DataLoader (PaddlePaddle/PaddleDetection#7252)
        (
            "SystemError: (Fatal) DataLoader process (pid 1104) exited is killed by signal: "
            "Killed. (at /paddle/paddle/fluid/imperative/data_loader.cc:181)",
            K.HOST_OOM,
        ),
        # TRL's DPO in fp16 (huggingface/trl#1199): the loss reads 0.0, the log-probs are NaN
        (
            "{'loss': 0.0, 'learning_rate': 6.666666666666667e-05, 'rewards/chosen': nan, "
            "'rewards/rejected': nan, 'logps/rejected': nan, 'logps/chosen': nan}",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round18_messages(line: str, expected: FailureKind) -> None:
    assert kind(line + "\n") is expected


@pytest.mark.parametrize(
    ("line", "not_expected"),
    [
        # Triton's out-of-memory is not a faulted context
        ("RuntimeError: Triton Error [CUDA]: out of memory", K.CUDA_FATAL),
        # a GRPO reward function that returned None is logged as nan; the model is fine
        (
            "{'loss': 0.012, 'rewards/accuracy_reward/mean': nan, 'reward_std': 0.0}",
            K.LOSS_DIVERGENCE,
        ),
        ("{'loss': 0.6931, 'logps/chosen': -103.93, 'logits/rejected': -111.6}", K.LOSS_DIVERGENCE),
    ],
)
def test_round18_near_misses(line: str, not_expected: FailureKind) -> None:
    assert not_expected not in {ev.kind for ev in evidence_of(line + "\n")}
