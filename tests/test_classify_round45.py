"""Issue 12, round 45: rules written from ``tune42`` (gathered as ``heldout43``), each from the
code that prints the message: the suggestions that end Ray's memory-monitor kill messages,
DeepSpeed's transformer kernels on a failed cuBLAS GEMM, torch's clip_grad_norm_ warning on a
non-finite norm (weak: healthy fp16 runs print it), and torch's DataLoader on a worker that
SIGTERM ended (weak: a probable host OOM only when nothing else explains the death). Weak
evidence no longer explains a stall the supervisor ended. Each positive case fails on the
rules before round 45; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, StreamClassifier, classify_saved, decode_exit
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_CLIP_WARNING = (
    "/usr/lib/python3.8/site-packages/stable_baselines3/ppo/ppo.py:251: FutureWarning: "
    "Non-finite norm encountered in torch.nn.utils.clip_grad_norm_; continuing anyway. Note "
    "that the default behavior will change in a future release to error out if a non-finite "
    "total norm is encountered. At that point, setting error_if_nonfinite=false will be "
    "required to retain the old behavior.\n"
    "  th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)\n"
)
_WORKER_TERM = "RuntimeError: DataLoader worker (pid 8102) is killed by signal: Terminated.\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Ray's memory monitor, the paste starting at its suggestions
        (
            "Refer to the documentation on how to address the out of memory issue: "
            "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. "
            "Consider provisioning more memory on this node or reducing task parallelism by "
            "requesting more CPUs per task.",
            K.HOST_OOM,
        ),
        # DeepSpeed's cuBLAS wrapper before 2021, behind Open MPI's output tag
        ("[1,290]<stderr>:!!!! kernel execution error.\n" * 3, K.CUDA_FATAL),
        # ... and since, with the GEMM's shape and cuBLAS's status (13: execution failed)
        ("!!!! kernel execution error. (m: 1024, n: 4096, k: 1024, error: 13) ", K.CUDA_FATAL),
        # torch's clip_grad_norm_ warning, and nothing else before the death
        (_CLIP_WARNING + "-----------------------------------------", K.LOSS_DIVERGENCE),
        # a DataLoader worker SIGTERM ended, the run's one line
        (_WORKER_TERM, K.HOST_OOM),
    ],
)
def test_round45_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def _stalled(text: str) -> FailureKind | None:
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    failure = classify_saved(sc.evidence, decode_exit(-9), hang=True)
    return None if failure is None else failure.kind


@pytest.mark.parametrize("text", [_CLIP_WARNING, _WORKER_TERM])
def test_weak_evidence_does_not_explain_a_stall_the_supervisor_ended(text: str) -> None:
    """A healthy fp16 run logs its skipped overflow steps, and dsguard's own stop of a stalled
    attempt ends its DataLoader workers with SIGTERM: neither explains the stall."""
    assert _stalled(text) is FailureKind.HANG


def test_the_clip_warning_in_a_healthy_run_is_no_failure() -> None:
    """yolov5's AMP training prints it at an overflow step and trains on to exit 0."""
    sc = StreamClassifier()
    sc.feed(_CLIP_WARNING + "      1/99      16.9G     0.0418    0.05699    0.01384\n")
    sc.close()
    assert not any(ev.fatal for ev in sc.evidence)
    assert classify_saved(sc.evidence, decode_exit(0)) is None


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # cuBLAS's status 3 is an allocation that failed, not a fault
        ("!!!! kernel execution error. (m: 1024, n: 4096, k: 1024, error: 3) ", K.CUDA_FATAL),
        # the script's own exception after an overflow step's warning is the script's error
        (
            _CLIP_WARNING + "Traceback (most recent call last):\n"
            '  File "train.py", line 40, in <module>\n'
            "    batch = data['image']\n"
            "KeyError: 'image'",
            K.LOSS_DIVERGENCE,
        ),
        # workers SIGTERM'd with the whole job at its time limit: the scheduler's stop
        (
            _WORKER_TERM + "slurmstepd: error: *** JOB 4242 ON gpu01 CANCELLED AT "
            "2024-05-01T03:00:01 DUE TO TIME LIMIT ***",
            K.HOST_OOM,
        ),
        # the kernel's OOM killer never sends SIGTERM to the main process itself
        ("Terminated", K.HOST_OOM),
    ],
)
def test_round45_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
