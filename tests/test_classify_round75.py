"""Issue 12, round 75: rules written from ``tune72`` (gathered as ``heldout73``), each from the
code that prints the message: DDP's reducer on a gradient hook fired twice or a parameter left
out of the loss, pasted without its ``RuntimeError:``, and TensorStore (Orbax's array reader)
on a checkpoint whose array metadata is missing. Each positive case fails on the rules before
round 75; the near misses pass before and after. Left as it reads: google-research/timesfm#95,
"msgpack.exceptions.ExtraData: unpack(b) received extra data." on loading a Flax checkpoint,
labelled a checkpoint error and read as ``unknown``: msgpack's words alone do not say what was
being unpacked.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # QLoRA with gradient checkpointing under DDP, the message in inline backticks
        # (artidoro/qlora#223)
        (
            "`Expected to mark a variable ready only once. This error is caused by one of the "
            "following reasons: 1) Use of a module parameter outside the `forward` function.\n"
            "Parameter at index 559 has been marked as ready twice. This means that multiple "
            "autograd engine  hooks have fired for this particular parameter during this "
            "iteration.`",
            K.USER_CODE_ERROR,
        ),
        # ... and the reducer's other message, parameters that took no part in the loss
        (
            "Expected to have finished reduction in the prior iteration before starting a new "
            "one. This error indicates that your module has parameters that were not used in "
            "producing loss.",
            K.USER_CODE_ERROR,
        ),
        # Orbax restoring an OCDBT save as a per-array one (google/orbax#924)
        (
            'ValueError: NOT_FOUND: Error opening "zarr" driver: Metadata at local file '
            '"/home/u/orbax-test/a/.zarray" does not exist [tensorstore_spec=\'{"driver":'
            '"zarr","kvstore":{"driver":"file","path":"/home/u/orbax-test/a/"}}\']',
            K.CHECKPOINT_ERROR,
        ),
    ],
)
def test_round75_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # DDP's warning on a healthy run is no error of the script's
        (
            "[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in DDP "
            "constructor, but did not find any unused parameters in the forward pass.",
            K.USER_CODE_ERROR,
        ),
        # msgpack's words alone say nothing of what was unpacked (left unknown)
        ("msgpack.exceptions.ExtraData: unpack(b) received extra data.", K.CHECKPOINT_ERROR),
    ],
)
def test_round75_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
