"""Issue 12, round 55: rules written from ``tune52`` (gathered as ``heldout53``): a Ray
worker's line read behind the driver's "(<name> pid=<pid>, ip=<address>) " prefix and without
its log-deduplication suffix, and rdma-core's mlx5 error completion where its "mlx5: " starts
the line. Each positive case fails on the rules before round 55; the near misses pass before
and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, StreamClassifier
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "(MegatronPolicyWorker pid=1480888, ip=172.28.127.67) TypeError: Llama31ModelProvider"
            ".__init__() got an unexpected keyword argument 'pipeline_model_parallel_split_rank' "
            "[repeated 43x across cluster]",
            K.USER_CODE_ERROR,
        ),
        ("(pid=4242) ModuleNotFoundError: No module named 'flash_attn'", K.USER_CODE_ERROR),
        (
            "(RayTrainWorker pid=75123) AttributeError: 'NoneType' object has no attribute "
            "'shape' [repeated 3x across cluster] (Ray deduplicates logs by default. Set "
            "RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master"
            "/ray-observability/user-guides/configure-logging.html#log-deduplication for more "
            "options.)",
            K.USER_CODE_ERROR,
        ),
        ("mlx5: node-3: got completion with error:", K.NCCL_ERROR),
        ("mlx5: host_unknown: got completion with error:", K.NCCL_ERROR),
    ],
)
def test_round55_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_ray_workers_raised_oom_ends_the_attempt_at_its_line() -> None:
    """The worker's own exception line is the OOM raised on some rank: fatal when read (before
    round 55 the prefix hid that it starts the line, and only the exit ended the attempt)."""
    sc = StreamClassifier()
    line = (
        "(RayWorkerWrapper pid=394716, ip=10.65.144.3) torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB\n"
    )
    fatal = [ev for ev in sc.feed(line) if ev.fatal]
    assert [ev.kind for ev in fatal] == [K.CUDA_OOM]


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # behind Ray's prefix a library's RuntimeError is as often another process's echo
        (
            "(RayWorkerWrapper pid=1070) RuntimeError: the actor died unexpectedly before "
            "finishing this task",
            K.USER_CODE_ERROR,
        ),
        # a worker's log line that mentions an exception does not start with one
        (
            "(RayTrainWorker pid=75123) INFO 05-16 retrying after TypeError: bad batch "
            "[repeated 14x across cluster]",
            K.USER_CODE_ERROR,
        ),
        # an mlx5 line that is not the provider's error completion
        ("mlx5: node-3: got 12 completions with no error", K.NCCL_ERROR),
    ],
)
def test_round55_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
