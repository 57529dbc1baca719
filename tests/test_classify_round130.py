"""Issue 12, round 130: rules written from ``tune122`` and ``tune123`` (gathered as
``heldout123`` and ``heldout124``, scored once at 51/53 and 57/69), each from the code that
prints the message: errno 12 whatever its strerror, the kernel OOM killer's victim line
without its reason, the bare "KL" key of OpenAI baselines' logger table gone NaN, faceswap's
NaN protection, a training loop's own ``Exception("NaN encountered")``, AmpliGraph's "Loss is
inf", OmegaConf's missing mandatory value and ConfigArgParse refusing a config file's list.
Each positive case fails on the rules before round 130; the near misses pass before and
after.

Left unread in the two sets: a TensorFlow OOM that names no device (two logs: the corpus's
deliberate gap), NumPy 2's warning about modules built for NumPy 1 (torch prints it and
trains on, so it cannot name a later death), a loss column printed with no header, a NaN only
in a debug print of a tensor cut mid-line, and a training loop's own crash banner before a
tensor dump.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # vicariousinc/science_rcn#9: ENOMEM from os.fork(), its strerror cut by the paste
        (
            '  File "/usr/lib64/python2.7/multiprocessing/forking.py", line 121, in __init__\n'
            "    self.pid = os.fork()\n"
            "OSError: [Errno 12] Can",
            K.HOST_OOM,
        ),
        # ... and in the machine's own language
        ("OSError: [Errno 12] 无法分配内存", K.HOST_OOM),
        # seomoz/word2gauss#24: the OOM killer's victim line as the reporter copied it
        (
            "Killed process 30311 (python) total-vm:87803176kB, anon-rss:64515860kB, file-rss:80kB",
            K.HOST_OOM,
        ),
        # ... and a 2.6.32-era kernel's variant, the uid after the pid
        (
            "Killed process 4121, UID 1000, (python) total-vm:61207900kB, anon-rss:59983124kB, "
            "file-rss:1048kB",
            K.HOST_OOM,
        ),
        # openai/baselines#127: ACKTR's logger table, the KL between updates gone NaN
        (
            "Iteration 3027\nkl just right!\n\n| EVAfter   | 0.98     |\n"
            "| EpRewMean | -8.92    |\n| KL        | nan      |",
            K.LOSS_DIVERGENCE,
        ),
        # deepfakes/faceswap#1499: its NaN protection ending the training
        (
            "09/20/2025 00:27:25 CRITICAL Error caught! Exiting...\n"
            "09/20/2025 00:27:25 ERROR    Caught exception in thread: '_training'\n"
            "09/20/2025 00:27:25 ERROR    A NaN was detected and you have NaN protection "
            "enabled. Training has been terminated.",
            K.LOSS_DIVERGENCE,
        ),
        # jasonkyuyim/se3_diffusion#23: the training loop's own guard
        (
            "Error executing job with overrides: []\nTraceback (most recent call last):\n"
            "  ...\nException: NaN encountered",
            K.LOSS_DIVERGENCE,
        ),
        # Accenture/AmpliGraph#164: its check on each batch's loss, an infinite one
        (
            "Average Loss:   0.621298:   at 7/300 epochs\n"
            "ERROR - Loss is inf. Please change the hyperparameters.",
            K.LOSS_DIVERGENCE,
        ),
        # huggingface/lerobot#404: OmegaConf's "???" key read (VS Code's debugger shows the
        # message with the key, the chained exception's line keeps the template)
        (
            "Exception has occurred: MissingMandatoryValue\n"
            "Missing mandatory value: training.save_freq\n"
            "    full_key: training.save_freq\n"
            "    object_type=dict\n"
            "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: $FULL_KEY",
            K.USER_CODE_ERROR,
        ),
        # ACEsuit/mace#887: ConfigArgParse on a YAML list for a one-value flag
        (
            "mace_run_train: error: train_file can't be set to a list "
            "'['../data/a-train.xyz', '../data/iso.extxyz']' unless its action type is changed "
            "to 'append' or nargs is set to '*', '+', or > 1",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round130_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # errno 122 is a disk quota, not memory
        ("OSError: [Errno 122] Disk quota exceeded", K.HOST_OOM),
        # a process a user or a tool killed, with no OOM killer's memory figures
        ("Killed process 4121 (python)", K.HOST_OOM),
        # a finite KL, and a KL weight (a setting, not the divergence)
        ("| KL        | 0.00148  |", K.LOSS_DIVERGENCE),
        ("kl_weight: nan", K.LOSS_DIVERGENCE),
        # faceswap's setting described, not triggered
        ("Nan Protection: True", K.LOSS_DIVERGENCE),
        # a NaN met in data, in another sentence, and a finite loss checked
        ("ValueError: NaN encountered in column 'age' of train.csv", K.LOSS_DIVERGENCE),
        ("ERROR - Loss is 0.6213. Please change the hyperparameters.", K.LOSS_DIVERGENCE),
        # an OmegaConf key that is set, and a list a flag accepts
        ("training.save_freq: 10000 (mandatory value set)", K.USER_CODE_ERROR),
        ("train_file is set to a list of 3 files", K.USER_CODE_ERROR),
    ],
)  # fmt: skip
def test_round130_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
