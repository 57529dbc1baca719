"""Issue 12, round 105: rules written from ``tune90`` (gathered as ``heldout91``), each from the
code that prints the message: TensorFlow's OOM line with its first letter lost by a paste, the
failing op's device on a node line an 80-column paste wrapped (and a _Recv node's
``recv_device``, which is where a tensor goes, not where the op ran), the restore op's "Data
loss: Unable to open table file" cut before its cause, XLA's missing libdevice, an exception
line in Markdown italics, and bash's job notice with a space before its colon. Each positive
case fails on the rules before round 105; the near misses pass before and after; two readings
the old rules got wrong are tested apart. They took ``tune90`` from 45/51 (its once-score) to
51/51 and its one imprecise ``host_oom`` verdict (a device OOM read as host memory, by a _Recv
node's ``recv_device``) to the device's.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_CONV_OOM = (
    "> ResourceExhaustedError (see above for traceback): OOM when allocating tensor with "
    "shape[1,32,4001,6001]\n"
    '>          [[Node: Conv2D_1 = Conv2D[T=DT_FLOAT, data_format="NHWC", padding="SAME", '
    "strides=[1, 2, 2, 1], use_cudnn_on_gpu=true, _device=\n"
    '> "/job:localhost/replica:0/task:0/gpu:0"](Relu, Variable_3/read)]]\n'
    '>          [[Node: add_37/_99 = _Recv[client_terminated=false, recv_device="/job:localhost/'
    'replica:0/task:0/cpu:0", send_device="/job:loca\n'
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # fizyr/keras-maskrcnn#40: the paste lost the line's first letter
        (
            "OM when allocating tensor with shape[100,256,28,28] and type float on /job:"
            "localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            K.CUDA_OOM,
        ),
        # lengstrom/fast-style-transfer#9: the op's device wrapped onto the next line, a
        # _Recv node's recv_device on cpu:0 after it
        (_CONV_OOM, K.CUDA_OOM),
        # Mayankgg01/Gensyn-ai-Rl-Swarm_Guide#19: bash's notice, a space before its colon
        (
            "./run_rl_swarm.sh: line 155 : 1126 Killed :9 python -m hivemind_exp.gsm8k."
            'train_single_gpu --hf_token "$HUGGINGFACE_ACCESS_TOKEN"',
            K.HOST_OOM,
        ),
        # asanakoy/deeppose_tf#12: the restore op's line, cut in the checkpoint's path
        (
            "2017-11-10 17:42:08.970095: W tensorflow/core/framework/op_kernel.cc:1192] Data "
            "loss: Unable to open table file out/lsp_al",
            K.CHECKPOINT_ERROR,
        ),
        # PaddlePaddle/PaddleOCR#8888: the traceback in Markdown italics
        (
            "_Traceback (most recent call last):\n"
            '  File "tools/train.py", line 199, in <module>\n'
            "    config, device, logger, vdl_writer = program.preprocess(is_train=True)\n"
            '  File "tools/program.py", line 639, in preprocess\n'
            "    alg = config['Architecture']['algorithm']_\n"
            "_KeyError: 'algorithm'_",
            K.USER_CODE_ERROR,
        ),
        # talmolab/sleap#1485: XLA without the CUDA toolkit's libdevice
        (
            "2023-09-14 08:17:09.019604: W tensorflow/core/framework/op_kernel.cc:1830] "
            "OP_REQUIRES failed at xla_ops.cc:446 : INTERNAL: libdevice not found at "
            "./libdevice.10.bc",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round105_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a job that finished, not one that was killed
        ("./run.sh: line 155 : 1126 Done python train.py", K.HOST_OOM),
        # XLA finding libdevice is a healthy start-up line
        (
            "I tensorflow/compiler/xla/service/gpu/llvm_gpu_backend/gpu_backend_lib.cc:326] "
            "libdevice found at /usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round105_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a _Recv node's recv_device alone is not where the failing op ran
        (
            "ResourceExhaustedError: OOM when allocating tensor with shape[1,32,4001,6001]\n"
            '  [[Node: add_37/_99 = _Recv[client_terminated=false, recv_device="/job:'
            'localhost/replica:0/task:0/cpu:0", send_device="/job:localhost/replica:0/'
            'task:0/gpu:0"]()]]',
            K.HOST_OOM,
        ),
        # a word that ends in "OM" before the same words is no OOM
        ("BOOM when allocating tensor on /job:localhost/replica:0/task:0/device:GPU:0", K.CUDA_OOM),
    ],
)
def test_round105_readings_that_changed(text: str, not_expected: FailureKind) -> None:
    """Two readings the rules before round 105 got wrong and these do not: a _Recv node's
    ``recv_device`` was taken for the failing op's (a host OOM), and "OOM when allocating"
    was found inside a longer word."""
    assert read_as(text) is not not_expected
