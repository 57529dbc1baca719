"""bench/p3_ab.py: the same-process A/B of the classifier's cost (a benchmark tool; its
figures are in bench/RESULTS.md, never asserted here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import dsguard.core.classify as current
from bench import p3_ab
from bench.logsynth import synth


def test_the_working_trees_classify_loads_as_a_module_of_its_own() -> None:
    path = Path(current.__file__)
    other = p3_ab.load_classify(path, name="dsguard_classify_ab_test")
    assert other is not current
    assert other.StreamClassifier is not current.StreamClassifier
    res = p3_ab.compare(other, current, lines=3000, trials=2)
    assert len(res["old_lines_per_cpu_s"]) == len(res["new_lines_per_cpu_s"]) == 2
    assert res["old_median"] > 0 and res["new_median"] > 0
    assert res["lines"] == synth(3000, seed=1).lines


class _Blind:
    """A classifier that reads nothing: its speed must not be reported."""

    lines_seen = 0

    def feed(self, text: str) -> list[Any]:
        return []

    def close(self) -> list[Any]:
        return []


def test_a_classifier_that_misses_the_log_is_refused() -> None:
    blind = SimpleNamespace(StreamClassifier=_Blind, __name__="blind")
    with pytest.raises(RuntimeError, match="blind"):
        p3_ab.compare(blind, current, lines=3000, trials=1)  # type: ignore[arg-type]
