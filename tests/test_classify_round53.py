"""Issue 12, round 53: the rule written from ``tune50`` (gathered as ``heldout51``), from the
code that prints the message: icefall's scan of its most pessimistic batches, which logs its
own sentence before it re-raises the CUDA OOM (a paste cut between the two). The positive case
fails on the rules before round 53; the near miss passes before and after.
"""

from __future__ import annotations

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

_LOG = "2024-12-19 16:58:57,481 ERROR [train.py:1345] "


def test_icefalls_oom_scan_names_a_device_oom() -> None:
    text = (
        f"{_LOG}Your GPU ran out of memory with the current max_duration setting. We "
        "recommend decreasing max_duration and trying again.\n"
        "Failing criterion: single_longest_cut (=162.26) ...\n"
        "2024-12-19 16:58:57,482 INFO [train.py:1304] Saving batch to zipformer/exp/batch.pt\n"
    )
    assert kind(text) is FailureKind.CUDA_OOM


def test_the_scan_starting_is_no_oom() -> None:
    """icefall announces the scan on every healthy start."""
    text = (
        "2024-12-19 16:44:26,604 INFO [train.py:1326] Sanity check -- see if any of the "
        "batches in epoch 1 would cause OOM.\n"
    )
    assert read_as(text) is not FailureKind.CUDA_OOM
