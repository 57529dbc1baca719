"""Issue 12, round 69: rules written from ``tune66`` (gathered as ``heldout67``), each from the
code that prints the message: GPT-NeoX's overflow monitor giving up on fp16, voluptuous
rejecting a script's config, a C or C++ trainer's own assert(), and Paddle's DataLoader
mapping a worker's shared memory back. Each positive case fails on the rules before round 69;
the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Traceback (most recent call last):\n"
            '  File "~/gpt-neox/megatron/utils.py", line 353, in check\n'
            "    raise Exception(\n"
            "Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.",
            K.LOSS_DIVERGENCE,
        ),
        (
            "voluptuous.error.MultipleInvalid: extra keys not allowed @ data['settings']\n"
            "subprocess.CalledProcessError: Command '['python', 'train_db.py']' returned non-zero "
            "exit status 1.",
            K.USER_CODE_ERROR,
        ),
        (
            "train_gpt2cu: llmc/dataloader.h:186: void dataloader_init(DataLoader*, const char*, "
            "size_t, size_t, int, int, int): Assertion `shard_ntok >= (int64_t) (num_processes * "
            "B * T + 1)' failed.\n"
            "[149-130-218-240:10948] *** Process received signal ***\n"
            "[149-130-218-240:10948] Signal: Aborted (6)",
            K.USER_CODE_ERROR,
        ),
        (
            "ERROR:root:DataLoader reader thread failed((Unavailable) Memory map failed when "
            "rebuild shared memory.",
            K.HOST_OOM,
        ),
    ],
)
def test_round69_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # glibc's own invariant (its sources print as "../nptl/..."): not the trainer's check
        (
            "python: ../nptl/pthread_mutex_lock.c:81: __pthread_mutex_lock: Assertion "
            "`mutex->__data.__owner == 0' failed.",
            K.USER_CODE_ERROR,
        ),
        # a skipped step logged by the same monitor's run is no divergence by itself
        (
            "[2022-01-01] iteration 100 | skipped iterations: 1 | loss scale: 65536.0",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round69_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
