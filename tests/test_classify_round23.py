"""Issue 12, round 23: rules written from ``tune20`` (gathered as ``heldout21``), each from the
code that prints the message: the CUDA driver API's out-of-memory as torch_memory_saver
reports it, ninja's failed edge cut before its ".o", torch elastic naming the signal it got,
TensorFlow's NaN histogram, an inf loss on a step's log line, torch.distributed.checkpoint's
rejected save plan, and HF datasets failing to parse a data file. Each positive case fails on
the rules before round 23; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # torch_memory_saver under slime (THUDM/slime#274)
        (
            "Error Log:`[torch_memory_saver.cpp] CUresult error: 2 (out of memory) "
            "file=csrc/utils.h func=cu_mem_create line=187`",
            K.CUDA_OOM,
        ),
        # ninja's failed edge, the paste cut inside its path (fundamentalvision/Deformable-DETR#10)
        (
            "Allowing ninja to set a default number of workers... (overridable by setting the "
            "environment variable MAX_JOBS=N)\n"
            "[1/3] :/home1/hli/cuda10.2/bin/nvcc -DWITH_CUDA -I/w/models/ops/src\n"
            "FAILED: /w/Deformable-DETR/models/ops/build/temp.linux-x86_64-3.7/w/Deformab",
            K.DS_BUILD_ERROR,
        ),
        # torch elastic's agent (pytorch/pytorch#114097)
        (
            "W0823 16:54:02.337000 139733055988160 torch/distributed/elastic/agent/server/"
            "api.py:688] Received Signals.SIGTERM death signal, shutting down workers\n"
            "W0823 16:54:02.337000 139733055988160 torch/distributed/elastic/multiprocessing/"
            "api.py:857] Sending process 6236 closing signal SIGTERM",
            K.KILLED_EXTERNALLY,
        ),
        # TensorFlow's HistogramSummary (vanhuyz/CycleGAN-TensorFlow#68)
        (
            "InvalidArgumentError (see above for traceback): **Nan in summary histogram for: "
            "D_X/fake**\n"
            "\t [[Node: D_X/fake = HistogramSummary[T=DT_FLOAT]]]",
            K.LOSS_DIVERGENCE,
        ),
        # DeepSpeed-Chat's PPO step line (deepspeedai/DeepSpeedExamples#444)
        (
            "epoch: 0|step: 3183|ppo_ep: 1|act_loss: 30.921875|cri_loss: 30.515625|"
            "unsuper_loss: 0.0\n"
            "epoch: 0|step: 3184|ppo_ep: 1|act_loss: inf|cri_loss: inf|unsuper_loss: 0.0\n"
            "average reward score: -6.359375",
            K.LOSS_DIVERGENCE,
        ),
        # torch.distributed.checkpoint's default planner (axolotl-ai-cloud/axolotl#2548)
        (
            '[rank0]:     raise ValueError("Failed to validate global plan")\n'
            "[rank0]: ValueError: Failed to validate global plan",
            K.CHECKPOINT_ERROR,
        ),
        # HF datasets' json builder (Lightning-Universe/lightning-transformers#191)
        (
            "[2021-08-19 18:10:48,456][datasets.packaged_modules.json.json][ERROR] - Failed to "
            "read file '/mnt/nfs/lt-v100/train.json' with error <class "
            "'pyarrow.lib.ArrowInvalid'>: JSON parse error: Missing a name for object member. "
            "in row 2372\n"
            "Error executing job with overrides: ['task=nlp/text_classification']",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round23_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a tracker's initial best value on a step line is not a diverged loss
        ("step: 0 | best_val_loss: inf | lr: 1e-4\n", K.LOSS_DIVERGENCE),
        ("step 12 min_loss=inf\n", K.LOSS_DIVERGENCE),
        # an inf loss with no step on its line is left to the existing rules
        ("act_loss: inf|cri_loss: inf\n", K.LOSS_DIVERGENCE),
        # pytest's and gtest's failure lines are not ninja's
        ("FAILED tests/test_build.py::test_ops - AssertionError\n", K.DS_BUILD_ERROR),
        ("[  FAILED  ] OpsTest.Build (12 ms)\n", K.DS_BUILD_ERROR),
    ],
)
def test_round23_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
