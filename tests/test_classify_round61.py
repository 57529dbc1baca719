"""Issue 12, round 61: rules written from ``tune58`` (gathered as ``heldout59``): torch's
"Weights only load failed" on its own line (a trigger), gRPC's held port by its JSON
"os_error" whatever the errno (macOS's 48), a CPU-only MXNet asked for a GPU, a job platform's
"killed by OOM Killer" and xargs' report of a child a signal ended. Each positive case fails on
the rules before round 61; the near misses pass before and after. DyNet's "dynet is out of
memory, try increasing with --dynet-mem" is left unread: its pool's size is a flag, and the
line does not say which device.
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
            "could not load the checkpoint\n\nWeights only load failed. This file can still be "
            "loaded, to do so you have two options, do those steps only if you trust the source",
            K.CHECKPOINT_ERROR,
        ),
        (
            'E0512 14:47:28.171308000 140735128658688 server_chttp2.c:159] {"description":"No '
            'address added out of total 1 resolved","referenced_errors":[{"description":"OS '
            'Error","errno":48,"os_error":"Address already in use","syscall":"bind"}]}',
            K.USER_CODE_ERROR,
        ),
        (
            "[06:58:53] src/storage/storage.cc:113: Compile with USE_CUDA=1 to enable GPU usage",
            K.USER_CODE_ERROR,
        ),
        (
            'The job has been killed by "OOM Killer", please check your job\'s memory usage.',
            K.HOST_OOM,
        ),
        ("xargs: /worker/venv/bin/python: terminated by signal 9", K.HOST_OOM),
    ],
)
def test_round61_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a bind that failed for another reason
        (
            '{"description":"OS Error","errno":13,"os_error":"Permission denied","syscall":"bind"}',
            K.USER_CODE_ERROR,
        ),
        # xargs' child ended by SIGTERM is no OOM kill
        ("xargs: /worker/venv/bin/python: terminated by signal 15", K.HOST_OOM),
        # a tip about the OOM killer is no kill
        ("Tip: if the OOM killer stops your job, lower the batch size", K.HOST_OOM),
    ],
)
def test_round61_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
