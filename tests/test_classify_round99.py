"""Issue 12, round 99: rules written from ``tune87`` (gathered as ``heldout88``), each from the
code that prints the message: h5py creating a file in a folder that does not exist, and
gin-config binding a name no module registered. Each positive case fails on the rules before
round 99; the near misses pass before and after.

Left as they read: the other 33 misses of ``tune87``, each a log cut before the line that
names its cause. Their helpers' reports list 31 (the corpus README has them); two more are of
the same sort, shibing624/MedicalGPT#275 (only CUDA's asynchronous-error advice after a
device-side assert) and google-research/bert#879 (only a BFC allocator's dump). What is left of
each is frames, an allocator's dump, that advice or start-up lines, none of which names a
cause by itself: a BFC dump also comes with an allocation TensorFlow says is not a failure, and
CUDA's advice follows every CUDA error, its out-of-memory included. The probable kind names
the right kind for 14 of the 33. One reads as a wrong kind: deepspeedai/DeepSpeed#1211, an
IPython traceback whose header names RuntimeError and whose message and inner frames are cut
(labelled a checkpoint error by its title), is the script's error by that class.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # wzjialang/Automatic-modulation-recognition-based-on-deep-learning#1: the exception
        # line after the reporter's words
        (
            "training :Epoch 00001: val_loss improved from inf to 3.49180, saving model to "
            "weights/ResNet.h5\n"
            "then error ocurr: OSError: Unable to create file (unable to open file: name = "
            "'weights/ResNet.h5', errno = 2, error message = 'No such file or directory', "
            "flags = 13, o_flags = 302)",
            K.USER_CODE_ERROR,
        ),
        # google-research/text-to-text-transfer-transformer#1036: gin's message and its file,
        # the ValueError's class line cut
        (
            "No configurable matching 'get_sentencepiece_model_path'.\n"
            '  In file "/content/drive/MyDrive/pretrained_models-11B-operative_config.gin", '
            "line 64\n"
            "    get_sentencepiece_model_path.mixture_or_task_name = %MIXTURE_NAME",
            K.USER_CODE_ERROR,
        ),
        # gin's other binding error (config.py), in the same shape
        (
            "Configurable 'AudioClassifier' doesn't have a parameter named 'encoder'.\n"
            '  In file "example/configs/common.gin", line 22',
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round99_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the same h5py failure on a full disk is the disk's
        (
            "OSError: Unable to create file (unable to open file: name = 'ckpt/model.h5', "
            "errno = 28, error message = 'No space left on device', flags = 13, o_flags = 242)",
            K.USER_CODE_ERROR,
        ),
        # gin's word in prose about configuration
        ("All knobs are configurable matching the paper's settings.", K.USER_CODE_ERROR),
    ],
)
def test_round99_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
