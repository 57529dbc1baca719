"""Issue 12, round 60: rules written from ``tune57`` (gathered as ``heldout58``): Colab's
copy of an IPython frame (its path a Markdown link) and Lightning's checkpoint migration,
transformers' load message wrapped before its class, Lua Torch's THRealloc, Megatron's
required checkpoint, HDF5 < 1.10's bad signature, mshadow's CUDA check, newer gRPC's held
port in its JSON tree, and FermiNet's NaN energy. Each positive case fails on the rules before
round 60; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_COLAB = (
    "KeyError                                  Traceback (most recent call last)\n"
    "[<ipython-input-6-f76a479c8023>](https://localhost:8080/#) in <module>\n"
    '----> 4 wrapper = wrapper.load_from_checkpoint("model.ckpt", config=config)\n'
    "\n"
    "[/usr/local/lib/python3.8/dist-packages/pytorch_lightning/utilities/migration/migration.py]"
    "(https://localhost:8080/#) in _migrate_loop_global_step_to_progress_tracking(checkpoint)\n"
    '---> 85     global_step = checkpoint["global_step"]\n'
    "\n"
    "KeyError: 'global_step'"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_COLAB, K.CHECKPOINT_ERROR),
        (
            "Unable to load weights from pytorch checkpoint file for './pretrained/pytorch_model-"
            "00002-of-00003.bin' at\n'./pretrained/pytorch_model-00002-of-00003.bin'. If you "
            "tried to load a PyTorch model from a TF 2.0 checkpoint,",
            K.CHECKPOINT_ERROR,
        ),
        (
            "> /torch/install/share/lua/5.1/nn/THNN.lua:109: $ Torch: not enough memory: you "
            "tried to reallocate 36GB. Buy new RAM! at /torch/pkg/torch/lib/TH/THGeneral.c:251",
            K.HOST_OOM,
        ),
        (">> '--exit-on-missing-checkpoint' set ... exiting. <<", K.CHECKPOINT_ERROR),
        (
            "IOError: Unable to open file (Unable to find a valid file signature)",
            K.CHECKPOINT_ERROR,
        ),
        (
            "[02:42:41] /mxnet/mshadow/mshadow/././././cuda/tensor_gpu-inl.cuh:110: Check failed: "
            "err == cudaSuccess (8 vs. 0) Name: MapPlanKernel ErrStr:invalid device function",
            K.CUDA_FATAL,
        ),
        (
            'E0410 01:06:16.743285006  880726 server_chttp2.cc:49]        {"created":"@17442","'
            'description":"No address added out of total 1 resolved","referenced_errors":[{"'
            'description":"Address already in use","errno":98,"os_error":"Address already in '
            'use","syscall":"bind"}]}',
            K.USER_CODE_ERROR,
        ),
        (
            "INFO:absl:Step 03455: nan E_h, variance=nan E_h^2, pmove=0.51",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round60_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # FermiNet's healthy step
        (
            "INFO:absl:Step 03454: -14.9189 E_h, variance=0.0443 E_h^2, pmove=0.51",
            K.LOSS_DIVERGENCE,
        ),
        # a Colab frame in the script's own module, not Lightning's migration
        (
            _COLAB.replace("pytorch_lightning/utilities/migration/migration.py", "mymodel/io.py"),
            K.CHECKPOINT_ERROR,
        ),
        # CUDA's out of memory (2) in mshadow's check is a device OOM, not a fault
        (
            "tensor_gpu-inl.cuh:110: Check failed: err == cudaSuccess (2 vs. 0) Name: "
            "MapPlanKernel ErrStr:out of memory",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round60_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
