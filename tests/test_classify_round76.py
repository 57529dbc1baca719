"""Issue 12, round 76: rules written from ``tune73`` (gathered as ``heldout74``), each from the
code that prints the message: accelerate refusing two models under one DeepSpeed engine,
libgpuarray's and DyNet's device allocations, UCX's InfiniBand transport giving up on a peer,
Cython's argument check and Chainer's type check, Caffe's text prototxt parser, cudaErrorLaunch
Failure glued to the next glog line, and a pasted JSON file's NaN (a line the echoed-source
test used to drop). Each positive case fails on the rules before round 76; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ShivamShrirao/diffusers#241
        (
            "You can't use same `Accelerator()` instance with multiple models when using DeepSpeed",
            K.DS_CONFIG_ERROR,
        ),
        # HF Trainer's trainer_state.json as pasted (TencentGameMate/chinese_speech_pretrain#22)
        (
            "    {\n"
            '      "epoch": 12.66,\n'
            '      "eval_loss": NaN,\n'
            '      "eval_wer": 0.9999660072064722,\n'
            '      "step": 1000\n'
            "    },\n"
            "    {\n"
            '      "epoch": 18.99,\n'
            '      "eval_loss": NaN,\n'
            '      "step": 1500\n'
            "    },",
            K.LOSS_DIVERGENCE,
        ),
        # Theano/Theano#6342
        (
            '  File "pygpu/gpuarray.pyx", line 280, in pygpu.gpuarray.array_empty '
            "(pygpu/gpuarray.c:5620)\n"
            "pygpu.gpuarray.GpuArrayException: b'out of memory'",
            K.CUDA_OOM,
        ),
        # conala-corpus/conala-baseline#4 (xnmt on DyNet)
        (
            "CUDA failure in cudaMalloc(&ptr, n)\n"
            "out of memory\n"
            "\n"
            "Memory pool info for each devices:\n"
            "Device GPU:0 - FOR Memory 560MB, BACK Memory 528MB, PARAM Memory 240MB, SCRATCH "
            "Memory 128MB.\n"
            "CUDA is unable to allocate enough GPU memory on GPU:0, at current stage only 6 MB "
            "out of 2004 MB is free. Note due t",
            K.CUDA_OOM,
        ),
        # horovod/horovod#1390
        (
            "[ksgpu-v-051:51920:0:52950] ib_mlx5_log.c:139  Transport retry count exceeded on "
            "mlx5_0:1/RoCE (synd 0x15 vend 0x85 hw_synd 0/0)\n"
            "==== backtrace (tid:  52950) ====",
            K.NCCL_ERROR,
        ),
        # mitmul/ssai#2
        (
            "[libprotobuf ERROR google/protobuf/text_format.cc:274] Error parsing text-format "
            'caffe.NetParameter: 53:27: Message type "caffe.LayerParameter" has no field named '
            '"patch_transformer_param".\n'
            "F1013 02:18:28.542604 15748 upgrade_proto.cpp:928] Check failed: "
            "ReadProtoFromTextFile(param_file, param) Failed to parse NetParameter file: "
            "train_test.prototxt",
            K.USER_CODE_ERROR,
        ),
        # facebookarchive/caffe2#1936, glog lines run together
        (
            "> F0628 19:13:22.730959  3624 context_gpu.h:107] Check failed: error == cudaSuccess "
            "unspecified launch failureF0628 19:13:22.730976  3635 context_gpu.h:107] Check "
            "failed: error == cudaSuccess unspecified launch failureF0",
            K.CUDA_FATAL,
        ),
        # dhgrs/chainer-WaveGlow#6, the exception line cut off the paste
        (
            "Exception in main training loop: Argument 'x' has incorrect type (expected "
            "cupy.core.core.ndarray, got Variable)\n"
            "Traceback (most recent call last):\n"
            '  File "/x/chainer/training/trainer.py", line 316, in run\n'
            "    update()",
            K.USER_CODE_ERROR,
        ),
        # Bartzi/see#65
        (
            "Exception in main training loop:\n"
            "Invalid operation is performed in: Concat (Forward)\n"
            "\n"
            "Expect: in_types.size > 0\n"
            "Actual: 0 <= 0\n"
            "Traceback (most recent call last):\n"
            '  File "/x/chainer/training/trainer.py", line 315, in run\n'
            "    update()",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round76_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # DyNet prints its pools on any CUDA failure: the pool table alone names no OOM
        (
            "Memory pool info for each devices:\n"
            "Device GPU:0 - FOR Memory 560MB, BACK Memory 528MB, PARAM Memory 240MB, SCRATCH "
            "Memory 128MB.",
            K.CUDA_OOM,
        ),
        # protobuf's size warning while Caffe reads a large model is no configuration error
        (
            "[libprotobuf WARNING google/protobuf/io/coded_stream.cc:537] Reading dangerously "
            "large protocol message.  If the message turns out to be larger than 2147483647 "
            "bytes, parsing will be halted for security reasons.",
            K.USER_CODE_ERROR,
        ),
        # a pasted JSON file's finite losses are no divergence
        (
            '      "eval_loss": 0.4123,\n      "loss": 1.0234,\n      "step": 500',
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round76_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
