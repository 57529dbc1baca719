"""Issue 12, round 74: rules written from ``tune71`` (gathered as ``heldout72``), each from the
code that prints the message: Python 2's ``CalledProcessError`` with a signal's negative
status in a cloud log entry, SmoothedValue's "inf (inf)" meter, TensorFlow's Example parser
on records that do not fit the feature spec, and TensorFlow's Env on a path no file system
serves. Each positive case fails on the rules before round 74; the near misses pass before
and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cloud ML Engine's runner (Python 2.7) logging its trainer's SIGKILL in a Stackdriver
        # entry, no exception line (tensorflow/tensorflow#18984)
        (
            '  levelname:  "ERROR"\n'
            "  message:  \"Command '['python', '-m', u'trainer_1_4.task', u'--num-epochs', "
            "u'1']' returned non-zero exit status -9\"\n"
            '  pathname:  "/runcloudml.py"',
            K.HOST_OOM,
        ),
        # DINOv2's metric logger, the KoLeo term inf from the first logged step
        # (facebookresearch/dinov2#143)
        (
            "I20250119 10:05:11 90 dinov2 helpers.py:102] Training  [     40/5000000]  eta: 221 "
            "days, 20:36:05  lr: 0.0000 (0.0000)  total_loss: inf (inf)  "
            "dino_local_crops_loss: 10.5020 (10.5017)  koleo_loss: inf (inf)\n"
            "I20250119 10:05:26 90 dinov2 helpers.py:102] Training  [     50/5000000]  eta: 195 "
            "days, 10:45:44  lr: 0.0000 (0.0000)  total_loss: inf (inf)  "
            "dino_local_crops_loss: 10.5010 (10.5016)  koleo_loss: inf (inf)",
            K.LOSS_DIVERGENCE,
        ),
        # TPUEstimator's infeed on TFRecords without the feature the input_fn parses
        # (google-research/electra#102)
        (
            "ERROR:tensorflow:Error recorded from infeed: From /job:worker/replica:0/task:0:\n"
            "{{function_node __inference_tf_data_experimental_map_and_batch_<lambda>_69}} Key: "
            "segment_ids.  Can't parse serialized Example.\n"
            "\t [[{{node ParseSingleExample/ParseSingleExample}}]]",
            K.USER_CODE_ERROR,
        ),
        # ... and the later wording, example name and index around the key
        (
            "Name: <unknown>, Key: image/encoded, Index: 0.  Can't parse serialized Example.",
            K.USER_CODE_ERROR,
        ),
        # a Colab TPU's checkpoint save to a local directory (google-research/language#54)
        (
            "File system scheme '[local]' not implemented (file: "
            "'bert_model_output/model.ckpt-0_temp_f8abfc6da61c4125b70d95ab7b73ced3')\n"
            "\t [[node save/SaveV2 (defined at "
            "tensorflow-1.15.2/python3.6/tensorflow_core/python/framework/ops.py:1748) ]]",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round74_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a status that is no signal is no kill
        (
            "  message:  \"Command '['python', '-m', 'trainer.task']' returned non-zero exit "
            'status 1"',
            K.HOST_OOM,
        ),
        # a tracker's initial best value, and a meter whose running average alone is inf
        # (one inf step long ago, the loss finite now), are no divergence
        ("best_loss: inf  epoch: 0", K.LOSS_DIVERGENCE),
        (
            "Epoch: [3]  [ 100/1251]  eta: 0:10:02  lr: 0.000400  loss: 6.8812 (inf)  "
            "time: 0.5100  data: 0.0003  max mem: 10213",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round74_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
