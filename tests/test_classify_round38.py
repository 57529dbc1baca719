"""Issue 12, round 38: rules written from ``tune35`` (gathered as ``heldout36``), each from the
code that prints the message: torch's allocator text without its first words, FlashInfer's
CUDA checks, a JIT-built op's missing library, LLaMA-Factory's launch check, TensorFlow's
collectives losing a peer, c10d's held port raised as a DistNetworkError, a shell's "Killed"
in Markdown backticks, and a rank prefix whose number the reporter replaced. Each positive case
fails on the rules before round 38; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_TF = "2019-05-19 15:08:13.136034: "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # torch's allocator text pasted from its second sentence on, both wordings
        (
            "Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already "
            "allocated; 24.56 MiB free; 86.00 MiB reserved in total by PyTorch)",
            K.CUDA_OOM,
        ),
        (
            "Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which "
            "6.62 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB memory "
            "in use.",
            K.CUDA_OOM,
        ),
        # FlashInfer's FLASHINFER_CUDA_CALL on a fault
        (
            "CUDA Error: misaligned address (716) /code/include/attention/prefill.cuh: line 1918 "
            "at function cudaLaunchKernel((void*)kernel, nblks, nthrs, args, smem_size, stream)",
            K.CUDA_FATAL,
        ),
        # a JIT-built op's library missing from torch's extensions cache
        (
            "> ERROR:openfold3.projects.runner:Failed for query_id(s) ubiquitin: /home/u/.cache/"
            "torch_extensions/py313_cu128/evoformer_attn/evoformer_attn.so: cannot open shared "
            "object file: No such file or directory.",
            K.DS_BUILD_ERROR,
        ),
        # LLaMA-Factory hparams/parser.py
        (
            '    raise ValueError("Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.")\n'
            "ValueError: Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.",
            K.DS_CONFIG_ERROR,
        ),
        # TensorFlow's collective executor and ring algorithm on a lost peer
        (
            _TF + "E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce "
            "with Unavailable: Socket closed\n" + _TF + "W tensorflow/core/common_runtime/"
            "base_collective_executor.cc:203] BaseCollectiveExecutor::StartAbort Unavailable: "
            "Socket closed",
            K.NCCL_ERROR,
        ),
        # c10d's server socket on a held port, raised as a DistNetworkError
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. The server socket has failed to bind to [::]:29500 (errno: "
            "98 - Address already in use).",
            K.USER_CODE_ERROR,
        ),
        # a shell's "Killed" at the end of a multi-line inline-code span
        (
            "`Global seed set to 0\nUsing Device 0\n...\nKilled`",
            K.HOST_OOM,
        ),
        # torch's rank prefix with its number replaced by the reporter
        (
            "[rankx]: ValueError: Cannot use chat template functions because "
            "tokenizer.chat_template is not set and no template argument was passed!",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round38_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # an engine's own sizing line, not torch's allocator
        ("Tried to allocate 2.00 GiB for the KV cache; 10.52 GiB free", K.CUDA_OOM),
        # an input pipeline's end, printed by healthy Keras runs at every epoch's end
        (
            _TF + "W tensorflow/core/common_runtime/base_collective_executor.cc:216] "
            "BaseCollectiveExecutor::StartAbort Out of range: End of sequence\n"
            "\t [[{{node IteratorGetNext}}]]",
            K.NCCL_ERROR,
        ),
        # c10d's store that lost its peer is still a communication failure
        (
            "torch.distributed.DistNetworkError: Connection reset by peer",
            K.USER_CODE_ERROR,
        ),
        # a counter in backticks, not a shell's notice
        ("`Killed processes: 0`", K.HOST_OOM),
        # a library that is not a JIT build's
        (
            "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
            K.DS_BUILD_ERROR,
        ),
    ],
)
def test_round38_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
