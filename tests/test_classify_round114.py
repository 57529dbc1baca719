"""Issue 12, round 114: rules written from ``tune98`` and ``tune99`` (gathered as ``heldout99``
and ``heldout100``, scored once at 66/74 and 89/93), each from the code that prints the
message: pointnet2_ops' CUDA check, a device-side assert cut before "Assertion", NCCL 2.4-2.7's
error-return trace from its .cu sources, Paddle's enforce on an NCCL call, TensorFlow Saver's
advice pasted without its head, an ultralytics row with one loss column NaN, and a loss logged
as its named parts. Each positive case fails on the rules before round 114; the near misses
pass before and after. They took ``tune98`` to 74/74 and ``tune99`` to 92/93 (the one left is
a TensorFlow OOM line that names no device, which is not guessed).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_FPS = (
    "void furthest_point_sampling_kernel_wrapper(int, int, int, const float*, float*, int*) at "
    "L:228 in pointnet2_ops/_ext-src/src/sampling_gpu.cu"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Strawberry-Eat-Mango/PCT_Pytorch#23: pointnet2_ops built without the GPU's arch
        (
            "Use SGD\nCUDA kernel failed : invalid device function\n"
            + _FPS
            + "\n段错误 (核心已转储)",
            K.CUDA_FATAL,
        ),
        # erikwijmans/Pointnet2_PyTorch#121: glued to Lightning's progress bar
        (
            "Validation sanity check: 0it [00:00, ?it/s]CUDA kernel failed : invalid device "
            "function\n" + _FPS,
            K.CUDA_FATAL,
        ),
        # luost26/diffusion-point-cloud#12: a copy of the check that raises the code (700)
        (
            "Traceback (most recent call last):\n"
            '  File "match_cost.py", line 22, in forward\n'
            "    cost = MatchCost(seta, setb, match)\n"
            "RuntimeError: CUDA kernel failed : 700",
            K.CUDA_FATAL,
        ),
        # the same check on cudaErrorMemoryAllocation, by its code
        ("RuntimeError: CUDA kernel failed : 2", K.CUDA_OOM),
        # EvolvingLMMs-Lab/Otter#216: a device-side assert cut before "Assertion"
        (
            "&& t < n_classes` failed.\n"
            "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: "
            "block: [0,",
            K.CUDA_FATAL,
        ),
        # pytorch/pytorch#40273: NCCL 2.4's init failing on a container's sysfs
        (
            "XXX:430:2237 [0] include/topo.h:27 NCCL WARN Could not find real path of "
            "/sys/class/pci_bus/0000:02/../../0000:02:00.0\n"
            "XXX:430:2237 [0] NCCL INFO init.cu:864 -> 2\n"
            "XXX:430:2237 [0] NCCL INFO misc/group.cu:69 -> 2 [Async thread]",
            K.NCCL_ERROR,
        ),
        # PaddlePaddle/PaddleSeg#939: Paddle's enforce on the broadcast's NCCL call
        (
            "OSError: (External)  Nccl error, invalid data type, detail: Resource temporarily "
            "unavailable\nPlease try one of the following solutions:\n"
            "1. export NCCL_SHM_DISABLE=1;",
            K.NCCL_ERROR,
        ),
        # fengju514/Face-Pose-Net#40: Saver.restore's message without its head
        (
            "This is most likely due to a mismatch between the current graph and the graph from "
            "the checkpoint. Please ensure that you have not altered the graph expected based on "
            "the checkpoint.",
            K.CHECKPOINT_ERROR,
        ),
        # ultralytics/ultralytics#4733: the segmentation loss NaN, the box losses finite
        (
            "      Epoch    GPU_mem   box_loss   seg_loss   cls_loss   dfl_loss  Instances       "
            "Size\n    120/500        34G     0.6445        nan     0.3872     0.8728        123  "
            "     1024: 100%|##########| 1377/1377 [05:44<00:00,  4.",
            K.LOSS_DIVERGENCE,
        ),
        # wizyoung/YOLOv3_TensorFlow#75: the NaN loss, then the script's own guard
        (
            "Epoch: 6, global_step: 900 | loss: total: nan, xy: 3.49, wh: 566.76, conf: nan, "
            "class: nan | Last batch: rec: 0.000, prec: 0.000 | lr: 3e-05\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 160, in <module>\n'
            "    'Gradient exploded! Please train again and you may need modify some "
            "parameters.')\n"
            "ArithmeticError: Gradient exploded! Please train again and you may need modify some "
            "parameters.",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round114_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # the check's out of memory is no fatal CUDA error
        ("CUDA kernel failed : out of memory\n" + _FPS, K.CUDA_FATAL),
        # NCCL's trace of another return code (5, ncclInvalidUsage: the caller's misuse)
        ("XXX:430:2237 [0] NCCL INFO init.cu:864 -> 5", K.NCCL_ERROR),
        # a healthy ultralytics row, and a validation row whose mask metrics are not computed
        (
            "     12/300      3.51G     0.9123     1.2345     1.0011         32        640: 100%|"
            "##########| 120/120 [00:30<00:00,  3.9it/s]",
            K.LOSS_DIVERGENCE,
        ),
        (
            "                   all       1375      50347      0.965      0.953      0.984      "
            "0.883        nan        nan        nan        nan",
            K.LOSS_DIVERGENCE,
        ),
        # a loss's parts all finite
        (
            "Epoch: 6 | loss: total: 12.31, xy: 3.49, wh: 5.67, conf: 2.01, class: 1.14",
            K.LOSS_DIVERGENCE,
        ),
        # Paddle's other external errors are not NCCL's
        (
            "OSError: (External)  CUDA error(700), an illegal memory access was encountered.",
            K.NCCL_ERROR,
        ),
    ],
)
def test_round114_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
