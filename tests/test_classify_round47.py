"""Issue 12, round 47: the rule written from ``tune44`` (gathered as ``heldout45``), from the
code that prints the message: TensorFlow placing an op that its build or device has no kernel
for, pasted without its exception class. (Round 46 wrote none: ``tune43``'s two misses are
said at its floor.) The positive case fails on the rules before round 47; the near misses
pass before and after.
"""

from __future__ import annotations

from dsguard.core.classify import FailureKind, StreamClassifier, classify_saved, decode_exit
from tests.test_classify_round7 import kind, read_as

_NO_KERNEL = (
    "No OpKernel was registered to support Op 'NcclAllReduce' used by {{node NcclAllReduce}} "
    'with these attrs: [reduction="sum", shared_name="c1", T=DT_FLOAT, num_devices=2]\n'
    "Registered devices: [CPU, GPU, XLA_CPU, XLA_GPU]\n"
    "Registered kernels:\n"
    "  <no registered kernels>\n"
)


def test_an_op_without_a_kernel_is_the_jobs_environment() -> None:
    """The Windows build of TF has no NCCL: MirroredStrategy's default all-reduce cannot run
    there (tensorflow/tensorflow#44281); relaunching unchanged meets it again."""
    assert kind(_NO_KERNEL) is FailureKind.USER_CODE_ERROR


def test_a_cuda_fault_before_it_still_explains_the_death() -> None:
    text = (
        "E tensorflow/stream_executor/cuda/cuda_event.cc:29] Error polling for event status: "
        "failed to query event: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was "
        "encountered\n" + _NO_KERNEL
    )
    assert read_as(text) is not FailureKind.USER_CODE_ERROR


def test_a_run_that_logs_it_and_exits_0_succeeded() -> None:
    sc = StreamClassifier()
    sc.feed("W op placement fell back to CPU: " + _NO_KERNEL)
    sc.close()
    assert not any(ev.fatal for ev in sc.evidence)
    assert classify_saved(sc.evidence, decode_exit(0)) is None
