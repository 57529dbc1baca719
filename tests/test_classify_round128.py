"""Issue 12, round 128: a metrics table's rows read under its header's loss columns.

fastai's Recorder, skorch's PrintLog and xLearn's epoch table (aksnzhy/xlearn#316, in
``tune118``) print one row of numbers an epoch under a header of column names; a NaN or inf
under a loss column is the divergence, though no word on the row says "loss". Written from
xLearn's log, built to read any table of that shape (left- or right-aligned) rather than one
program's; every other corpus, mention and GPUAlert verdict stayed as it was. Each positive
case fails on the rules before round 128; the near misses (finite losses, a NaN under a column
that is not a loss, a row with words, a log line with keys, a sentence) pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


_FASTAI = "epoch     train_loss  valid_loss  accuracy  time    \n"
_SKORCH = (
    "  epoch    train_loss    valid_acc    valid_loss     dur\n"
    "-------  ------------  -----------  ------------  ------\n"
)


@pytest.mark.parametrize(
    "text",
    [
        _FASTAI + "0         0.693147    0.693147    0.500000  00:10     \n"
        "1         nan         nan         0.500000  00:10     ",
        _SKORCH + "      1        0.6931       0.5000        0.6931  0.1234\n"
        "      2           nan       0.5000           nan  0.1200",
        # aksnzhy/xlearn#316
        "[------------] Epoch      Train log_loss       Test log_loss            Test AUC     "
        "Time cost (sec)\n"
        "[   10%      ]     1                 nan                 nan            0.500000     "
        "          11.07",
    ],
)
def test_a_nan_under_a_tables_loss_column_is_divergence(text: str) -> None:
    assert kind(text) is K.LOSS_DIVERGENCE


@pytest.mark.parametrize(
    "text",
    [
        # finite losses; a NaN under a column that is not a loss (an AUC of one class)
        _FASTAI + "0         0.693147    0.693147    0.500000  00:10     ",
        "epoch     train_loss  valid_loss  valid_auc  time\n"
        "0         0.693147    0.693147    nan        00:10",
        # a row whose NaN is under no loss column, and a row with words in it
        _FASTAI + "0         0.693147    0.693147    nan       00:10",
        _FASTAI + "0         nan         nan         see above  00:10",
        # a log line with a key and value is not a header, nor is a sentence
        "step 10  loss: 0.5  lr: 1e-4\n10  nan  3",
        "the training loss  went down  nicely\n10  nan  3",
    ],
)
def test_a_table_without_a_nan_loss_is_not_divergence(text: str) -> None:
    assert read_as(text) is not K.LOSS_DIVERGENCE
