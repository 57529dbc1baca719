"""Issue 12, round 22: rules written from ``tune19`` (gathered as ``heldout20``, away from LLM
fine-tuning), each from the code that prints the message: Azure ML's full disk, Keras's and
Orbax's checkpoint loaders, torch.distributions' NaN check, icefall's fp16 guard, a W&B sweep
stopping its run, gloo's and Horovod's rendezvous failures, Paddle's cuDNN error, Hydra's
refused override and the interpreter's ``python -m`` failure. Each positive case fails on the
rules before round 22; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Azure ML's job monitor (FGA-DIKU/BONSAI#77)
        (
            "Disk full while running job. Please consider reducing amount of data accessed, or "
            "upgrading VM SKU. Total space: 402073 MB, available space: 7781 MB (under "
            "AZ_BATCH_NODE_ROOT_DIR).",
            K.DISK_FULL,
        ),
        # Keras engine/saving.py (kbardool/Keras-frcnn#26)
        (
            '  File "keras/engine/saving.py", line 1149, in load_weights_from_hdf5_group_by_name\n'
            "    str(weight_values[i].shape) + '.')\n"
            'ValueError: Layer #177 (named "rpn_conv1"), weight <tf.Variable '
            "'rpn_conv1/kernel:0' shape=(3, 3, 512, 512) dtype=float32_ref> has shape (3, 3, "
            "512, 512), but the saved weight has shape (512, 1024, 3, 3).",
            K.CHECKPOINT_ERROR,
        ),
        (
            "ValueError: You are trying to load a weight file containing 13 layers into a model "
            "with 14 layers.",
            K.CHECKPOINT_ERROR,
        ),
        # Orbax's type handlers (cgarciae/ciclo#12)
        (
            "FileNotFoundError: File not found: ss_model/checkpoint_-0.19/.zarray. In many "
            "cases, this results from copying a checkpoint without using the `-a` flag.",
            K.CHECKPOINT_ERROR,
        ),
        # torch.distributions' Real() check, failed only by NaN (IDSIA/hhmarl_2D#15)
        (
            "ValueError: Expected parameter logits (Tensor of shape (280, 13)) of distribution "
            "Categorical(logits: torch.Size([280, 13])) to satisfy the constraint "
            "IndependentConstraint(Real(), 1), but found invalid values:\n"
            "tensor([[nan, nan, nan,  ..., nan, nan, nan]], grad_fn=<SubBackward0>)",
            K.LOSS_DIVERGENCE,
        ),
        (
            "ValueError: Expected parameter loc (Tensor of shape (64, 2)) of distribution "
            "Normal(loc: torch.Size([64, 2]), scale: torch.Size([64, 2])) to satisfy the "
            "constraint Real(), but found invalid values:",
            K.LOSS_DIVERGENCE,
        ),
        # icefall's fp16 guard (k2-fsa/icefall#1463)
        (
            "2024-01-14 01:03:00,826 WARNING [train.py:1057] (2/4) Grad scale is small: "
            "1.2924697071141057e-26\n"
            "2024-01-14 01:03:00,826 INFO [checkpoint.py:75] (2/4) Saving checkpoint to "
            "zipformer/exp-causal/2500/bad-model-2.pt",
            K.LOSS_DIVERGENCE,
        ),
        (
            "RuntimeError: grad_scale is too small, exiting: 8.673617379884035e-19",
            K.LOSS_DIVERGENCE,
        ),
        # wandb_agent (wandb/wandb#698)
        (
            "2019-12-04 12:48:10,657 - wandb.wandb_agent - INFO - Agent received command: stop\n"
            "2019-12-04 12:48:10,657 - wandb.wandb_agent - INFO - Stop: oe72ewxg",
            K.KILLED_EXTERNALLY,
        ),
        # gloo's transport through Horovod's http_store (horovod/horovod#2015)
        (
            "[1]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
            "[1]<stderr>:  what():  [horovod/common/gloo/http_store.cc:53] "
            "[horovod/common/gloo/http_store.cc:53] Wait timeout for key(s): 0\n"
            "[1]<stderr>:*** Received signal 6 ***",
            K.NCCL_ERROR,
        ),
        # Horovod's driver service (ray-project/ray#15300)
        (
            "Exception: Timed out waiting for tasks to start. Please check connectivity between "
            "servers. You may need to increase the --start-timeout parameter if you have too "
            "many servers. Timeout after 30 seconds.",
            K.NCCL_ERROR,
        ),
        # Paddle's enforce (yeyupiaoling/PPASR#75)
        (
            "OSError: (External) CUDNN error(8), CUDNN_STATUS_EXECUTION_FAILED.\n"
            "  [Hint: 'CUDNN_STATUS_EXECUTION_FAILED'.  The GPU program failed to execute.]\n"
            "  [operator < conv2d > error]",
            K.CUDA_FATAL,
        ),
        # Hydra/OmegaConf refusing an override, quoted as Markdown (lazaratan/dyn-gfn#8)
        (
            "> Could not override 'trainer.gpus'.\n"
            "> To append to your config use +trainer.gpus=0\n"
            "> Key 'gpus' is not in struct\n"
            ">     full_key: trainer.gpus",
            K.USER_CODE_ERROR,
        ),
        # the interpreter's `python -m` failure (clvrai/skill-chaining#4)
        (
            "Invalid MIT-MAGIC-COOKIE-1 key/usr/bin/python3: No module named run\n"
            "/usr/bin/python3: No module named run",
            K.USER_CODE_ERROR,
        ),
        ("python3: No module named train_lora", K.USER_CODE_ERROR),
    ],
)
def test_round22_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a constraint other than Real() fails for finite values too (a user's bad input)
        (
            "ValueError: Expected parameter probs (Tensor of shape (4, 3)) of distribution "
            "Categorical(probs: torch.Size([4, 3])) to satisfy the constraint Simplex(), but "
            "found invalid values:\n",
            K.LOSS_DIVERGENCE,
        ),
        # icefall's warning at a scale a healthy fp16 run passes through
        ("WARNING [train.py:1057] (0/4) Grad scale is small: 0.0078125\n", K.LOSS_DIVERGENCE),
        # W&B's other commands
        ("wandb.wandb_agent - INFO - Agent received command: run\n", K.KILLED_EXTERNALLY),
        # the words in a sentence, not the interpreter's line
        (
            "Warning: No module named 'apex' found, using torch.cuda.amp instead\n",
            K.USER_CODE_ERROR,
        ),
        ("INFO could not override default dtype for this device\n", K.USER_CODE_ERROR),
    ],
)
def test_round22_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
