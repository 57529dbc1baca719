"""Issue 12, round 97: ``tune86`` (gathered as ``heldout87``) gave no rule. Its one miss,
fizyr/keras-retinanet#1462, is Keras's "Your input ran out of data; interrupting training"
(``DataHandler.catch_stop_iteration`` in tensorflow/python/keras/engine/data_adapter.py, a
``logging.warning``; Keras 3's ``epoch_iterator.py`` warns it as a ``UserWarning``), labelled a
user error. ``fit`` returns after it and the script goes on (in the thread the run evaluates and
saves its snapshot after it; public Keras 3 runs finish the epoch after it, and scripts filter
it as harmless), so it names no cause of a death. These near misses hold that reading: the
warning alone is no verdict, and a run that printed it and then died of an OOM is read as that
OOM.
"""

from __future__ import annotations

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import read_as

K = FailureKind

# fizyr/keras-retinanet#1462: the warning glued to Keras's progress bar, as TF 2.3 printed it
_TF2_WARNING = (
    "97/10000 [..............................] - ETA: 1:08:14 - loss: 3.3150 - "
    "regression_loss: 2.4165 - classification_loss: 0.8985WARNING:tensorflow:Your input ran "
    "out of data; interrupting training. Make sure that your dataset or generator can generate "
    "at least `steps_per_epoch * epochs` batches (in this case, 500000 batches). You may need "
    "to use the repeat() function when building your dataset."
)
# Keras 3's wording, through Python's warnings module
_KERAS3_WARNING = (
    "/env/lib/python3.11/site-packages/keras/src/trainers/epoch_iterator.py:151: UserWarning: "
    "Your input ran out of data; interrupting training. Make sure that your dataset or "
    "generator can generate at least `steps_per_epoch * epochs` batches. You may need to use "
    "the `.repeat()` function when building your dataset.\n"
    "  self._interrupted_warning()"
)


def test_the_warning_names_no_user_error() -> None:
    assert read_as(_TF2_WARNING) is not K.USER_CODE_ERROR
    assert read_as(_KERAS3_WARNING) is not K.USER_CODE_ERROR


def test_a_run_that_printed_it_ends_well() -> None:
    assert classify_text(_TF2_WARNING + "\n", exit_code=0) is None


def test_a_later_oom_is_what_the_run_died_of() -> None:
    oom = (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[64,512,512] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
    )
    assert read_as(_KERAS3_WARNING + "\n" + oom) is K.CUDA_OOM
