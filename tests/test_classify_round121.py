"""Issue 12, round 121: rules written from ``tune108`` and ``tune109`` (gathered as
``heldout109`` and ``heldout110``, scored once at 68/71 and 44/51), each from the code that
prints the message: PyKEEN's and faceswap's own words for a device OOM, Thrust's temporary
allocator failing on the device, graphvite's CUDA check without its colon, a kernel OOM-killer
line as a reporter transcribed it, darknet's iteration line whose number reads as a rank
prefix, a grad norm named for its part of the model, a loss line naming its splits, Chainer's
report of a cuDNN status, and GPU PhysX refusing to launch a kernel. Each positive case fails
on the rules before round 121; the near misses pass before and after. Nothing is left in the
two sets: both read 100 % after these rules.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # pykeen/pykeen#576: the slice search's MemoryError, which PyKEEN raises on a GPU only
        (
            "    raise MemoryError(\"The current model can't be trained on this hardware with "
            'these parameters.")\n'
            "MemoryError: The current model can't be trained on this hardware with these "
            "parameters.",
            K.CUDA_OOM,
        ),
        # deepfakes/faceswap#899: the trainer's ERROR line (no "rror" in "ERROR")
        (
            "10/08/2019 22:53:01 MainProcess     MainThread      cli             execute_script"
            "            ERROR    You do not have enough GPU memory available to train the "
            "selected model at the selected settings. You can try a number of things:",
            K.CUDA_OOM,
        ),
        # NVIDIA/MinkowskiEngine#331: Thrust's bad_alloc through pybind11, cut by the excerpt
        (
            '  File "MinkowskiEngine/MinkowskiConvolution.py", line 84, in forward\n'
            "    coordinate_manager._manager,\n"
            "MemoryError: std::bad_alloc: temporary_buff",
            K.CUDA_OOM,
        ),
        # DeepGraphLearning/graphvite#108: glog CHECK on graphvite's CUDA check
        (
            "Check failed: error == cudaSuccess CUDA error out of memory at /home/conda/"
            "feedstock_root/build_artifacts/graphvite/work/include/base/memory.h:131\n"
            "*** Check failure stack trace: ***",
            K.CUDA_OOM,
        ),
        # city-super/Scaffold-GS#104: the kernel's line as transcribed
        (
            "Kill reason:\nOut of memory:Killed process 217423\uff08python\uff09"
            "total-vm:112518872kB\uff0c"
            "  anon-rs:30204444kB\uff0cfile-rss:kB",
            K.HOST_OOM,
        ),
        # jwchoi384/Gaussian_YOLOv3#62: darknet's line, "1033: " read as a rank prefix
        (
            "1032: 50.673481, 9003.041992 avg, 0.000100 rate, 2.374657 seconds, 33024 images\n"
            "1033: -nan, -nan avg, 0.000100 rate, 2.386819 seconds, 33056 images\n"
            "1035: nan, -nan avg, 0.000100 rate, 2.369323 seconds, 33120 images\nResizing",
            K.LOSS_DIVERGENCE,
        ),
        # danijar/dreamer#58: " / "-joined metrics, the world model's grad norm NaN
        (
            "[5000] expl_amount 0.0 / model_grad_norm nan / value_grad_norm 40.3 / "
            "actor_grad_norm 0.3 / image_loss 11650.7",
            K.LOSS_DIVERGENCE,
        ),
        # funcwj/uPIT-for-speech-separation#5: the epoch's loss line by split
        (
            "2020-02-15 00:00:31,027 [trainer.py:150 - INFO ] Loss(time/mini-batch) - Epoch  1:"
            " train = nan(1581.14s/2500) | dev = nan(152.82s/625)",
            K.LOSS_DIVERGENCE,
        ),
        # jsk-ros-pkg/jsk_recognition#2506: Chainer's trainer on CuPy's cuDNN error
        (
            "Exception in main training loop: CUDNN_STATUS_EXECUTION_FAILED\n"
            "Traceback (most recent call last):\n"
            '  File "chainer/training/trainer.py", line 316, in run\n    update()',
            K.CUDA_FATAL,
        ),
        # Hellod035/LeggedLab#31: Isaac Lab's PhysX log
        (
            "2025-07-03 08:02:38 [25,857ms] [Error] [omni.physx.plugin] PhysX error: GPU "
            "updateFrictionPatches fail to launch kernel!!\n"
            ", FILE /builds/omniverse/physics/physx/source/gpunarrowphase/src/"
            "PxgNarrowphaseCore.cpp, LINE 7261",
            K.CUDA_FATAL,
        ),
        # ... and a kernel that says "fail to launch!!"
        (
            "[Error] [omni.physx.plugin] PhysX error: GPU convexCoreConvexNphase_Kernel fail to "
            "launch!!",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round121_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a MemoryError of the host is still the host's; a std::bad_alloc without Thrust's
        # temporary allocator too
        ("MemoryError: Unable to allocate 3.2 GiB for an array", K.CUDA_OOM),
        ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  "
         "std::bad_alloc", K.CUDA_OOM),
        # faceswap's advice with enough memory is nothing; a CUDA error of another kind
        ("INFO     You have enough GPU memory available to train this model", K.CUDA_OOM),
        ("Check failed: error == cudaSuccess CUDA error invalid argument at memory.h:131",
         K.CUDA_OOM),
        # a max grad norm set to infinity (no clipping) is a setting; a finite grad norm
        ("max_grad_norm: inf", K.LOSS_DIVERGENCE),
        ("[5000] model_grad_norm 40.3 / value_grad_norm 12.1", K.LOSS_DIVERGENCE),
        # a loss line whose training split is finite; darknet's finite line
        ("Loss(time/mini-batch) - Epoch  2: train = 12.3041(1581.14s/2500)", K.LOSS_DIVERGENCE),
        ("1031: 32.407806, 9997.750000 avg, 0.000100 rate, 2.301689 seconds", K.LOSS_DIVERGENCE),
        # PhysX's start-up line and a launch that went well
        ("[omni.physx.plugin] PhysX GPU kernels launched", K.CUDA_FATAL),
    ],
)  # fmt: skip
def test_round121_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
