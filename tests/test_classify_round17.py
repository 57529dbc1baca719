"""Issue 12, round 17: rules written from ``tune14`` (gathered as ``heldout15``), each from the
code that prints the message: NCCL's shared-memory segment line pasted alone, Megatron-LM's
checkpoint loader exiting on a missing key, an older DeepSpeed's batch-size assert, Paddle's
launcher reporting a SIGKILLed worker, and TensorFlow's ResourceExhaustedError, which is never
the script's own error. Each positive case fails on the rules before round 17; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # NCCL misc/shmutils.cc without its "NCCL WARN" prefix (WangRongsheng/XrayGLM#83)
        (
            "Error while creating shared memory segment /dev/shm/nccl-CsYXMW (size 9637888)\n"
            "Traceback (most recent call last):\n"
            '  File "finetune.py", line 194, in <module>\n'
            "    model, optimizer, _, _ = deepspeed.initialize(\n",
            K.NCCL_ERROR,
        ),
        # Megatron-LM checkpointing.py and SwissArmyTransformer's copy (SAT#137)
        (
            "Unable to load optimizer from checkpoint /ckpt/iter_0000075/mp_rank_00/"
            "model_optim_rng.pt. Specify --no-load-optim or --finetune to prevent attempting to "
            "load the optimizer state, exiting ...\n",
            K.CHECKPOINT_ERROR,
        ),
        (
            "[2023-09-25 15:53:27,994] [INFO] [RANK 0] Unable to load optimizer from checkpoint "
            "<ckpt_path>, exiting. Specify --no-load-rng or --finetune to prevent attempting to "
            "load the random state.\n",
            K.CHECKPOINT_ERROR,
        ),
        # DeepSpeed before the key was renamed (EleutherAI/gpt-neox#115's vendored copy)
        (
            "AssertionError: Either train_batch_size or micro_batch_per_gpu needs to be provided\n",
            K.DS_CONFIG_ERROR,
        ),
        # paddle.distributed.launch's Container.__str__ (PaddlePaddle/PaddleOCR#11773): a
        # SIGKILL with nothing else, the seeds' host OOM
        (
            "LAUNCH ERROR 2024-03-10 00:35:50,216 Container failed !!!\n"
            "Container rank 0 status failed cmd ['/home/u/.conda/envs/p/bin/python', '-u', "
            "'tools/train.py', '-c', 'rec.yml'] code -9 log ./debug/workerlog.0\n",
            K.HOST_OOM,
        ),
        # TensorFlow's OOM that names no tensor, its device on the op's line below
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate "
            "memory\n"
            '\t [[node add_1 (defined at train.py:9) _device="/job:localhost/replica:0/task:0/'
            'device:GPU:0"]]\n',
            K.CUDA_OOM,
        ),
    ],
)
def test_round17_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_tensorflow_resource_exhaustion_naming_no_device_is_not_a_user_error() -> None:
    """An IPython traceback of TF's OOM whose lines name no device (minimaxir/gpt-2-simple#282):
    the device is not guessed, but it is never the script's own error (which would give up on
    a memory failure): ``unknown``, with its probable kind for the user."""
    text = (
        "ResourceExhaustedError                    Traceback (most recent call last)\n"
        "/usr/local/lib/python3.7/dist-packages/tensorflow/python/client/session.py in "
        "_do_call(self, fn, *args)\n"
        "ResourceExhaustedError: failed to allocate memory\n"
        "\t [[{{node model/h18/ln_2/add_1}}]]\n"
        "Hint: If you want to see a list of allocated tensors when OOM happens, add "
        "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n"
    )
    assert kind(text) is K.UNKNOWN
    assert K.USER_CODE_ERROR not in {ev.kind for ev in evidence_of(text)}


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # another program's shared memory, not NCCL's
        ("Error while creating shared memory segment!\n", K.NCCL_ERROR),
        # Paddle's launcher reporting an ordinary failure (exit 1) or an abort: not a SIGKILL
        (
            "Container rank 0 status failed cmd ['python', 'train.py'] code 1 log "
            "./log/workerlog.0\n",
            K.HOST_OOM,
        ),
        (
            "Container rank 1 status failed cmd ['python', 'train.py'] code -6 log "
            "./log/workerlog.1\n",
            K.HOST_OOM,
        ),
    ],
)
def test_round17_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_an_ordinary_exception_in_an_ipython_traceback_is_still_the_users() -> None:
    text = (
        "KeyError                                  Traceback (most recent call last)\n"
        "<ipython-input-3-1b2c> in <module>\n"
        "KeyError: 'label'\n"
    )
    assert kind(text) is K.USER_CODE_ERROR
