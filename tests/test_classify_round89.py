"""Issue 12, round 89: rules written from ``tune82`` (gathered as ``heldout83``), each from the
code that prints the message: OpenCV's host allocator (read as a device OOM once, for the class
name it reports), torch <= 1.7's distribution check on a NaN mean, OpenNMT-py's report line and
char-rnn's guard on a diverging loss, datasets 4 on a script-built dataset, bash's status of a
pipeline's killed command, and two runtimes' uncaught errors (Lua's, Marian's ABORT) read as
Python's exception lines are. Each positive case fails on the rules before round 89; the near
misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ultralytics/yolov5#10276
        (
            "cv2.error: OpenCV(4.6.0) /io/opencv/modules/core/src/alloc.cpp:73: error: "
            "(-4:Insufficient memory) Failed to allocate 4672512 bytes in function "
            "'OutOfMemoryError'",
            K.HOST_OOM,
        ),
        # philtabor/Youtube-Code-Repository#36
        (
            '  File "C:\\Users\\u\\anaconda3\\lib\\site-packages\\torch\\distributions\\'
            'distribution.py", line 53, in __init__\n'
            '    raise ValueError("The parameter {} has invalid values".format(param))\n'
            "ValueError: The parameter loc has invalid values`",
            K.LOSS_DIVERGENCE,
        ),
        # OpenNMT/OpenNMT-py#1072
        (
            "[2018-11-26 15:02:57,162 INFO] Step 5600/50000; acc:  47.14; ppl:  9.83; xent: 2.29; "
            "lr: 0.00069; 1065/1591 tok/s;  20926 sec\n"
            "[2018-11-26 15:06:01,481 INFO] Step 5650/50000; acc:   0.19; ppl:   nan; xent:  nan; "
            "lr: 0.00070; 1928/2310 tok/s;  21110 sec",
            K.LOSS_DIVERGENCE,
        ),
        # karpathy/char-rnn#169
        ("Loss is exploding, aborting", K.LOSS_DIVERGENCE),
        # NVIDIA-NeMo/Speech#14596
        (
            "[2025-08-28 05:01:24,467][datasets.load][ERROR] - `trust_remote_code` is not "
            "supported anymore.\n"
            "Please check that the Hugging Face dataset 'mozilla-foundation/common_voice_17_0' "
            "isn't based on a loading script and remove `trust_remote_code`.",
            K.USER_CODE_ERROR,
        ),
        # kaldi-asr/kaldi#4502
        (
            'bash:line1: 34853 Broken pipe      ali-to-post "ark:gunzip -c exp/tri3/2.mdl ark:-\n'
            "                34856                       | weight-silence-post 0.0 1 ark:-\n"
            "               34858 Killed              | gmm-acc-mllt --rand-prune=4.0",
            K.HOST_OOM,
        ),
        # macournoyer/neuralconvo#28
        (
            "-- Epoch 1 / 50\n"
            "torch/install/bin/luajit: ...o/torch/install/share/lua/5.1/rnn/SequencerCriterion"
            ".lua:42: expecting target table\n"
            "stack traceback:\n"
            "\t[C]: in function 'assert'\n"
            "\t./seq2seq.lua:74: in function 'train'",
            K.USER_CODE_ERROR,
        ),
        # marian-nmt/marian#229
        (
            "[2018-12-02 16:15:35] Error: Swap requires at least two graphs\n"
            "[2018-12-02 16:15:35] Error: Aborted from virtual void marian::DefaultCommunicator::"
            "swapParams(const std::vector<std::shared_ptr<marian::TensorBase> >&) const in "
            "/home/u/marian/src/training/communicator.h:206",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round89_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # CUDA's own wording stays the device's
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", K.HOST_OOM),
        # a scale (positive) fails at zero too: no divergence from the name alone
        ("ValueError: The parameter scale has invalid values", K.LOSS_DIVERGENCE),
        # a finite perplexity is a healthy report
        ("Step 5600/50000; acc:  47.14; ppl:  9.83; xent: 2.29; lr: 0.00069", K.LOSS_DIVERGENCE),
        # Torch's reader short of its blocks stays unread (tests/test_classify_round67.py)
        (
            "/root/torch/install/bin/luajit: /root/torch/install/share/lua/5.1/torch/File.lua:259:"
            " read error: read 0 blocks instead of 1 at /root/torch/pkg/torch/lib/TH/THDiskFile.c"
            ":340",
            K.USER_CODE_ERROR,
        ),
        # a Lua CUDA OOM in the same form is the device's, not the script's
        (
            "/home/u/torch/install/bin/luajit: /home/u/torch/install/share/lua/5.1/nn/utils.lua:"
            "11: cuda runtime error (2) : out of memory at /tmp/luarocks_cutorch-scm-1/cutorch/"
            "lib/THC/generic/THCStorage.cu:66",
            K.USER_CODE_ERROR,
        ),
        # Marian's CUDA OOM before its ABORT is the device's
        (
            "[2019-01-01 10:00:00] Error: CUDA error 2 'out of memory' - /marian/src/tensors/gpu/"
            "device.cu:32: cudaMalloc(&data_, size)\n"
            "[2019-01-01 10:00:00] Error: Aborted from virtual void marian::gpu::Device::reserve("
            "size_t) in /marian/src/tensors/gpu/device.cu:32",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round89_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
