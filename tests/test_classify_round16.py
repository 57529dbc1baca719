"""Issue 12, round 16: rules written from ``tune13`` (gathered as ``heldout14``), each from the
code that prints the message: TensorFlow's checkpoint reader finding a shard's checksum wrong,
and PaddleOCR's metric format, which pads a NaN loss with its fill character. Each positive
case fails on the rules before round 16; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind


@pytest.mark.parametrize(
    "text",
    [
        # tf.estimator on a parameter server: the message on the line after the error's
        # header (tensorflow/tensorflow#39033)
        "tensorflow.python.framework.errors_impl.DataLossError: From /job:ps/replica:0/task:3:\n"
        "Checksum does not match: stored 3880206044 vs. calculated on the restored bytes "
        "1782481297\n"
        "\t [[{{node checkpoint_initializer_53}}]]\n",
        # TF 1.x's one-line summary after the graph's traceback
        "DataLossError (see above for traceback): Checksum does not match: stored 1214729159 vs. "
        "calculated on the restored bytes 4272926173\n",
        "2019-05-02 10:11:12.345: W tensorflow/core/framework/op_kernel.cc:1401] OP_REQUIRES "
        "failed at save_restore_v2_ops.cc:184 : Data loss: Checksum does not match: stored "
        "3858684078 vs. calculated on the restored bytes 2123116135\n",
    ],
)
def test_a_checkpoint_shard_whose_checksum_fails_is_a_checkpoint_error(text: str) -> None:
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_corrupt_data_record_is_not_a_checkpoint_error() -> None:
    """TF's record reader raises the same DataLossError for a bad *data* file: not a
    checkpoint, and nothing a resume from another checkpoint mends."""
    text = (
        "tensorflow.python.framework.errors_impl.DataLossError: corrupted record at 1073741824\n"
        "\t [[{{node IteratorGetNext}}]]\n"
    )
    assert kind(text) is not K.CHECKPOINT_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # PaddleOCR tools/program.py logs every metric as '{}: {:x<6f}' (PaddleOCR#10042)
        "[2023/05/26 21:49:05] ppocr INFO: epoch: [1/2000], global_step: 174, lr: 0.000013, acc: "
        "0.000000, norm_edit_dis: 0.000000, loss: nanxxx, avg_reader_cost: 0.01411 s, ips: "
        "1703.52077 samples/s",
        "[2024/01/02 03:04:05] ppocr INFO: epoch: [3/500], global_step: 90, lr: 0.001000, "
        "loss_ctc: nanxxx, loss: nanxxx, batch_cost: 0.3 s",
        "[2024/01/02 03:04:05] ppdet INFO: epoch: [0] iter: 20, loss: infxxx, eta: 1:00:00",
    ],
)
def test_a_nan_loss_padded_by_paddles_metric_format_is_divergence(line: str) -> None:
    assert kind(line + "\n") is K.LOSS_DIVERGENCE
    # and a run that logged it at two steps and exited 0 did not succeed (one line alone may
    # be a mention: see classify.diverged_lines)
    v = classify_text(line + "\n" + line + "\n", exit_code=0)
    assert v is not None and v.kind is K.LOSS_DIVERGENCE


@pytest.mark.parametrize(
    "line",
    [
        # a finite loss in the same format, and another metric NaN (not the loss)
        "[2023/05/26 21:49:05] ppocr INFO: epoch: [1/2000], global_step: 174, loss: 0.512300, "
        "acc: nanxxx, norm_edit_dis: 0.000000",
        "[2023/05/26 21:49:05] ppocr INFO: epoch: [1/2000], loss: 7.250000, avg_reader_cost: "
        "0.01411 s",
        # a word that merely starts with "nan"
        "loss: nanoscale_embedding restored",
    ],
)
def test_padded_finite_losses_and_other_metrics_are_not_divergence(line: str) -> None:
    assert K.LOSS_DIVERGENCE not in {ev.kind for ev in evidence_of(line + "\n")}
