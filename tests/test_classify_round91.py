"""Issue 12, round 91: rules written from ``tune83`` (gathered as ``heldout84``), each from the
code that prints the message: a traceback a padding terminal put on one line, TensorFlow's
restore op by any name and its checkpoint state naming files that are gone, a C++ program ended
by an uncaught logic error, CMake giving up on an extension's build, and Tacotron-2's guard on
an exploding loss. Each positive case fails on the rules before round 91; the near misses pass
before and after.

Left as they read: ArjunaCluster/ArjunaUsers#48, srun's "task 0: Killed" with "Force Terminated
StepId=120.0", labelled a host OOM by the corpus's rule for a bare kill, stays ``unknown``
(srun's task kill is as often a time limit whose CANCELLED line was not pasted, the choice of
round 6); PaddlePaddle/Paddle#18232, a SIGSEGV whose stack runs through ncclCommInitAll,
labelled an NCCL error, stays ``unknown``: the signal's line does not say where it struck, and
reading the glog stack below it is a rule for a later round.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # zaiweizhang/H3DNet#21: a whole traceback on one padded line
        (
            "   net.load_state_dict(new_state_dict['module.model_state_dict'])"
            + " " * 60
            + 'File "/usr/local/lib/python3.6/dist-packages/torch/nn/modules/module.py", line '
            "845, in load_state_dict" + " " * 40 + 'self.__class__.__name__, "\\n\\t".join('
            "error_msgs)))" + " " * 30 + "RuntimeError: Error(s) in loading state_dict for "
            'DataParallel:        Missing key(s) in state_dict: "module.backbone_net1.sa1.'
            'mlp_module.layer0.conv.weight"',
            K.CHECKPOINT_ERROR,
        ),
        # google-research/bert#487
        (
            "OutOfRangeError (see above for traceback): Read less bytes than requested\n"
            '\t [[{{node checkpoint_initializer_120}} = RestoreV2[dtypes=[DT_FLOAT], _device="'
            '/job:localhost/replica:0/task:0/device:CPU:0"](checkpoint_initializer/prefix, '
            "checkpoint_initializer_120/tensor_names, checkpoint_initializer/shape_and_slices)]]",
            K.CHECKPOINT_ERROR,
        ),
        # Masao-Taketani/FOTS_OCR#7
        (
            "ERROR:tensorflow:Couldn't match files for checkpoint [my checkpoint path]/model.ckpt-"
            "20041\n"
            "E1126 14:28:09.314913 139785224988480 checkpoint_management.py:346] Couldn't match "
            "files for checkpoint [my checkpoint path]/model.ckpt-20041\n"
            "...\n"
            'File "train.py", line 216, in main\n'
            "    saver.restore(sess, ckpt)\n"
            '  File "[python path]/lib/python3.7/site-packages/tensorflow_core/python/training/'
            'saver.py", line 1277, in restore\n'
            '    raise ValueError("Can\'t load save_path when it is None.")\n'
            "ValueError: Can't load save_path when it is None.",
            K.CHECKPOINT_ERROR,
        ),
        # openai/train-procgen#4
        (
            "terminate called after throwing an instance of 'std::out_of_range'\n"
            "  what():  map::at\n"
            "=   EXIT CODE: 134\n"
            "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Aborted (signal 6)",
            K.USER_CODE_ERROR,
        ),
        # horovod/horovod#2462
        (
            "  -- Configuring incomplete, errors occurred!\n"
            "  Traceback (most recent call last):\n"
            '    File "/tmp/pip-install-x/horovod/setup.py", line 211, in <module>',
            K.DS_BUILD_ERROR,
        ),
        # JasonWei512/Tacotron-2-Chinese#20
        (
            "Loss exploded to 378655.87500 at step 67464\n"
            "Exiting due to exception: Loss exploded\n"
            "TypeError: exceptions must derive from BaseException",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round91_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a statement that calls a function named like an error is source, not an exception
        ("    handle_error(ctx)  # report it", K.USER_CODE_ERROR),
        # TensorFlow's save op writes; its failure is not a restore's
        (
            '\t [[{{node save/SaveV2}} = SaveV2[dtypes=[DT_FLOAT], _device="/job:localhost/'
            'replica:0/task:0/device:CPU:0"](save/Const, save/SaveV2/tensor_names)]]',
            K.CHECKPOINT_ERROR,
        ),
        # a runtime_error's what() says what failed; the class alone is no code mistake
        (
            "terminate called after throwing an instance of 'std::runtime_error'\n"
            "  what():  NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled "
            "system error, NCCL version 2.7.8",
            K.USER_CODE_ERROR,
        ),
        # CMake finishing its configuration is no failure
        ("  -- Configuring done\n  -- Generating done", K.DS_BUILD_ERROR),
        # a loss that went down is no explosion
        ("Step 67464: loss went from 3.2 to 1.1, no exploded gradients", K.LOSS_DIVERGENCE),
    ],
)
def test_round91_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
