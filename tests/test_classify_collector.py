"""Issue 12, round 103: a log saved through a collector that puts a time before every line
(kubectl logs --timestamps, docker logs -t, moreutils ts, journalctl, a CI runner) reads as it
does without one, and such a time never turns a logger's report of a caught exception into a
line that ends an attempt (core/classify.py, _COLLECTOR_PREFIX and StreamClassifier._stamped).
The corpus-wide check is tests/test_corpus_classify.py's
test_every_verdict_holds_with_a_collector_time_on_every_line; before this change a time on
every line changed 5.6-6.8 % of the tuning splits' right verdicts, journald's prefix 10.3 %.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import Evidence, FailureKind, StreamClassifier
from tests.test_classify_round7 import kind

K = FailureKind

PREFIXES = [
    "2024-05-01T12:34:56.123456789Z ",  # kubectl logs --timestamps, docker logs -t
    "Nov 28 18:26:07 ",  # moreutils ts
    "Nov  3 18:26:07 gpu-node-3 python3[12345]: ",  # journalctl (short)
    "2026-11-28T18:26:07+0000 gpu-node-3 python3[12345]: ",  # journalctl -o short-iso
    "2024-05-01 12:34:56,123 ",  # a time with a space
    "[2024-05-01T12:34:56.123Z] ",  # a bracketed time (a CI runner's)
    "12:34:56 ",  # a clock time
]

# An excerpt that starts after its traceback's header (as most pasted ones do): its frames
# are read only when the time before each of them is peeled.
_RESUME = (
    '  File "train.py", line 88, in resume\n'
    "    optimizer.load_state_dict(ckpt['optimizer'])\n"
    "KeyError: 'optimizer'\n"
)


def _stamped(prefix: str, text: str) -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


def _evidence(text: str) -> list[Evidence]:
    sc = StreamClassifier()
    return [*sc.feed(text), *sc.close()]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_an_excerpt_with_a_collector_time_reads_as_without(prefix: str) -> None:
    assert kind(_RESUME) is K.CHECKPOINT_ERROR
    assert kind(_stamped(prefix, _RESUME)) is K.CHECKPOINT_ERROR


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_time_ahead_of_a_message_is_not_taken_for_a_host_and_program(prefix: str) -> None:
    """darknet's "CUDA Error: out of memory" after a time: "CUDA Error: " is the message's
    start, not journald's "host ident[pid]: "."""
    assert kind(prefix + "CUDA Error: out of memory\n") is K.CUDA_OOM


def test_the_kernel_oom_killer_read_back_from_the_journal() -> None:
    text = (
        "Nov 28 03:12:44 gpu-3 kernel: Out of memory: Killed process 4242 (python3) "
        "total-vm:81234567kB, anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB\n"
        "Nov 28 03:12:44 gpu-3 python3[4240]: Killed\n"
    )
    assert kind(text) is K.HOST_OOM


def test_a_time_before_a_program_time_is_peeled_too() -> None:
    """journald over a program's own logger: both times go."""
    prefix = "Nov 28 18:26:07 gpu-node-3 python3[12345]: 2025-10-27 18:45:39 "
    assert kind(_stamped(prefix, _RESUME)) is K.CHECKPOINT_ERROR


_OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)"


def test_a_logged_exception_after_a_time_never_ends_an_attempt() -> None:
    """A "%(asctime)s %(message)s" logger reporting a caught OOM while the loop retries: the
    evidence is kept (a run that then dies is an OOM), the attempt is not ended at the line."""
    found = _evidence(f"12:04:31 {_OOM}\n")
    assert [e.kind for e in found] == [K.CUDA_OOM]
    assert not found[0].fatal


def test_a_traceback_printed_after_times_still_ends_the_attempt() -> None:
    """A traceback whose header carries the time too was printed through that logger or
    collector whole: its exception line is the exception raised, as without the time."""
    tb = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "    loss.backward()\n"
        f"{_OOM}\n"
    )
    assert any(e.fatal for e in _evidence(tb))
    for prefix in PREFIXES:
        found = _evidence(_stamped(prefix, tb))
        assert any(e.fatal and e.kind is K.CUDA_OOM for e in found), prefix


def test_the_runtime_and_nccl_lines_stay_fatal_after_a_time() -> None:
    """NCCL's own WARN and the C++ runtime's lines are never a logger's echo."""
    line = (
        "[2025-09-24 16:15:28] node-132-026:2999605:3004403 [0] include/alloc.h:228 NCCL "
        "WARN Cuda failure 2 'out of memory'\n"
    )
    assert [(e.kind, e.fatal) for e in _evidence(line)] == [(K.CUDA_OOM, True)]


def test_a_tensorflow_log_time_is_not_a_collector_time() -> None:
    """TensorFlow's "2020-04-29 02:49:43.473975: W ..." is its own logging, read as before."""
    line = (
        "2020-04-29 02:49:43.473975: W tensorflow/core/framework/op_kernel.cc:1273] "
        "OP_REQUIRES failed at batch_matmul_op_impl.h:582 : Resource exhausted: OOM when "
        "allocating tensor with shape[57121,100,100] and type float on /job:localhost/"
        "replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    )
    assert kind(line) is K.CUDA_OOM
