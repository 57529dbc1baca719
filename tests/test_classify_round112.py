"""Issue 12, round 112: rules written from ``tune95`` (gathered as ``heldout96``, scored once at
39/42), each from the code that prints the message: torch's caching-allocator message
lower-cased by a paste, pre-1.0 torch's THCudaCheck wrapped after its file, and Google Colab's
notice of a runtime that used all its RAM. Each positive case fails on the rules before round
112; the near misses pass before and after. They took ``tune95`` to 42/42.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # mozilla/TTS#149: a 940MX at batch size 32
        (
            "**`**`cuda out of memory. tried to allocate 78.88 mib (gpu 0; 3.95 gib total "
            "capacity; 2.99 gib already allocated; 74.44 mib free; 557.82 mib cached)`**`**",
            K.CUDA_OOM,
        ),
        # NVIDIA/tacotron2#39: the check wrapped after its file, then a DataLoader's teardown
        (
            "Train loss 107 0.993192 Grad Norm 0.723081 11.45s/it\n"
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu\n"
            "line=58 error=2 : out of memory\n"
            "Exception ignored in: <bound method _DataLoaderIter.__del__ of "
            "<torch.utils.data.dataloader._DataLoaderIter object at 0x7f4070db6da0>>",
            K.CUDA_OOM,
        ),
        # PV-Lab/FTCP#8: the whole dataset at batch 256 on a Colab VM
        (
            "> Your session crashed after using all available RAM. If you are interested in "
            "access to high-RAM runtimes, you may want to check out [Colab Pro]"
            "(https://colab.research.google.com/signup/pricing)",
            K.HOST_OOM,
        ),
    ],
)
def test_round112_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a tip in lower case quotes no allocator's numbers
        ("tip: if you see 'cuda out of memory', lower the batch size and try again", K.CUDA_OOM),
        # THCudaCheck's other errors, wrapped the same way, are no OOM
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp\n"
            "line=70 error=30 : unknown error\n",
            K.CUDA_OOM,
        ),
        # a notebook's RAM gauge is no crash
        ("Colab: 12.7 GB of available RAM, 3.1 GB used", K.HOST_OOM),
    ],
)
def test_round112_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
