"""Real GPU output, read on CPU the way ``dsguard run`` reads it.

The logs in ``tests/data/device`` were printed by torch, DeepSpeed and NCCL on an H200
(see its README). The corpus holds what users pasted from older versions; these pin what the
current stack prints, so a classifier change that stops reading today's wording fails here:
a CUDA OOM must end the attempt at its line, a caught OOM must not, and each death must get the
kind an engineer would name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsguard.core.classify import FailureKind, StreamClassifier, classify, decode_exit
from dsguard.core.remedies import Remedy, failing_op, next_remedy
from dsguard.host.envfacts import EnvFacts, Toolkit

DATA = Path(__file__).parent / "data" / "device"
RUNS = json.loads((DATA / "h200-real-errors.json").read_text())


def _log(case: str) -> str:
    return (DATA / f"h200-{case.replace('_', '-')}.log").read_text(encoding="utf-8")


def _stream(text: str, chunk: int = 97) -> tuple[StreamClassifier, list[int]]:
    """Feed in small chunks as a pipe delivers them; the line numbers reported fatal *while
    feeding* (before close, i.e. before the process exited)."""
    sc = StreamClassifier()
    fatal: list[int] = []
    for i in range(0, len(text), chunk):
        fatal += [ev.line_no for ev in sc.feed(text[i : i + chunk]) if ev.fatal]
    sc.close()
    return sc, fatal


#: Cases whose kind a later labelling decision changed; the captured record keeps what the run
#: expected then. Issue 12, round 41: NCCL's "Duplicate GPU detected" (here the script's own
#: ``torch.cuda.set_device(0)`` on both ranks) is the launch's or the script's error, not a
#: failure between ranks, and an unchanged retry meets it again (tests/data/corpus/README.md).
_DECIDED_SINCE = {"nccl_duplicate_gpu_under_torchrun": "user_code_error"}


@pytest.mark.parametrize("run", RUNS, ids=[r["case"] for r in RUNS])
def test_each_real_gpu_failure_gets_the_kind_an_engineer_names(run: dict[str, object]) -> None:
    sc, _ = _stream(_log(str(run["case"])))
    failure = classify(sc.evidence, decode_exit(int(str(run["exit_code"]))), tail=sc.tail)
    got = None if failure is None else str(failure.kind)
    assert got == _DECIDED_SINCE.get(str(run["case"]), run["expect"]), failure


@pytest.mark.parametrize(
    "case", ["cuda_oom_past_the_card", "cuda_oom_under_fraction", "cuda_oom_expandable_segments"]
)
def test_a_real_cuda_oom_ends_the_attempt_at_its_line(case: str) -> None:
    text = _log(case)
    _, fatal = _stream(text)
    assert fatal, "no fatal line while the output streamed"
    line = text.splitlines()[fatal[0] - 1]  # line numbers count from 1
    assert "OutOfMemoryError: CUDA out of memory" in line
    # and on the GPU it was read before the process exited
    run = next(r for r in RUNS if r["case"] == case)
    assert run["fatal_before_exit_s"] is not None and run["fatal_before_exit_s"] > 0


def test_a_caught_and_skipped_real_oom_is_not_fatal() -> None:
    text = _log("cuda_oom_caught_and_skipped")
    assert "CUDA out of memory" in text  # the mention is there
    sc, fatal = _stream(text)
    assert fatal == []
    assert classify(sc.evidence, decode_exit(0), tail=sc.tail) is None


def test_the_fused_adam_arch_suffix_failure_is_healed_by_doing_without_the_op() -> None:
    """bench/gpu's build_failure on an H200: the op is named only by the builder's frame."""
    text = (DATA / "h200-fused-adam-arch-suffix.log").read_text(encoding="utf-8")
    sc, _ = _stream(text)
    failure = classify(sc.evidence, decode_exit(1), tail=sc.tail)
    assert failure is not None and failure.kind is FailureKind.DS_BUILD_ERROR
    lines = text.splitlines()
    assert failing_op(lines) == "fused_adam"
    facts = EnvFacts(
        python="/opt/torch/.venv/bin/python3", torch_version="2.11.0+cu130", torch_cuda="13.0",
        cuda_home="/usr/local/cuda",
        toolkits=(Toolkit("/usr/local/cuda", realpath="/usr/local/cuda-13.0", version="13.0"),),
    )  # fmt: skip
    ds = {
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
        "zero_optimization": {"stage": 2},
    }
    remedy = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(), facts, ds_config=ds)
    assert isinstance(remedy, Remedy) and remedy.name == "avoid_fused_adam"
