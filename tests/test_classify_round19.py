"""Issue 12, round 19: rules written from ``tune16`` (gathered as ``heldout17``), each from the
code that prints the message: newer XLA's out-of-memory wording, Paddle's DataLoader failing to
map its shared memory, and argparse's rejection quoted without its program prefix. Each
positive case fails on the rules before round 19; the near misses pass before and after.
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
        # jaxlib through XLA's allocator (google-research/multinerf#99)
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
            "56932566736 bytes.",
            K.CUDA_OOM,
        ),
        # Paddle's mmap_allocator.cc in a DataLoader worker (PaddlePaddle/Paddle3D#326)
        (
            "RuntimeError: (Unavailable) Memory map failed when create shared memory.",
            K.HOST_OOM,
        ),
        # argparse's message quoted alone (microsoft/mattergen#180)
        (
            "`unrecognized arguments: hydra.run.dir=/out/singlerun/2025-01-01/00-00-00, "
            "hydra.job.name=train_ddp_process_1`",
            K.USER_CODE_ERROR,
        ),
        ("unrecognized arguments: --local-rank=1", K.USER_CODE_ERROR),
    ],
)
def test_round19_messages(line: str, expected: FailureKind) -> None:
    assert kind(line + "\n") is expected


def test_the_xla_oom_exception_ends_the_attempt_at_its_line() -> None:
    """The exception line itself on a rank is fatal, as every raised device OOM is."""
    line = (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
        "56932566736 bytes.\n"
    )
    assert any(ev.fatal and ev.kind is K.CUDA_OOM for ev in evidence_of(line))


@pytest.mark.parametrize(
    "line",
    [
        # the words inside a sentence: a tip, not argparse
        "Tip: if you see unrecognized arguments: --local-rank, upgrade the launcher",
        "INFO: ignoring unrecognized arguments: none",
    ],
)
def test_unrecognized_arguments_inside_a_sentence_is_not_a_user_error(line: str) -> None:
    assert K.USER_CODE_ERROR not in {ev.kind for ev in evidence_of(line + "\n")}
