"""P3's classifier cost, old against new in one process: ``python -m bench.p3_ab REV``.

P3 (``bench/p3_classifier.py``) times the whole pump in wall-clock seconds, one run per
revision, and on a shared VM whose speed swings between runs (the bare pipe read alone moved
between 11.6 and 27.8 million lines/s in one sitting of round 102) a few per cent of classifier
cost drowns in that swing. This loads ``src/dsguard/core/classify.py`` as it was at ``REV`` (by
``git show``) next to the working tree's, feeds both the same synthetic log (``bench/logsynth``,
in P3's 1 MiB reads) in alternating trials, and compares CPU seconds (``process_time``), so a
slow spell falls on both sides. Both must report every line and every OOM line of the log.
Only ``classify.py`` is swapped: the modules it imports are the working tree's.
"""

from __future__ import annotations

import argparse
import codecs
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import dsguard.core.classify as current
from bench.common import REPO_ROOT
from bench.logsynth import Synth, synth
from bench.p3_classifier import _READ_BYTES

CLASSIFY = "src/dsguard/core/classify.py"


def load_classify(path: Path, name: str = "dsguard_classify_ab") -> ModuleType:
    """``classify.py`` at ``path`` as a module of its own (its imports resolve as usual)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _texts(s: Synth) -> list[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks = [s.data[i : i + _READ_BYTES] for i in range(0, len(s.data), _READ_BYTES)]
    return [decoder.decode(c) for c in chunks] + [decoder.decode(b"", final=True)]


def _trial(module: Any, texts: list[str], s: Synth) -> float:
    """Lines per CPU second for one pass; the pass must see every line and OOM line."""
    classifier = module.StreamClassifier()
    fatal = 0
    c0 = time.process_time()
    for text in texts:
        fatal += sum(ev.fatal for ev in classifier.feed(text))
    fatal += sum(ev.fatal for ev in classifier.close())
    cpu_s = time.process_time() - c0
    if classifier.lines_seen != s.lines or fatal != s.oom_lines:
        raise RuntimeError(f"{module.__name__}: {classifier.lines_seen} lines, {fatal} fatal")
    return s.lines / cpu_s


def compare(old: ModuleType, new: ModuleType, *, lines: int, trials: int) -> dict[str, Any]:
    """Alternating trials (old, new, then new, old, ...): per side the lines per CPU second
    of each trial and their median, and new's median against old's."""
    s = synth(lines, seed=1)
    texts = _texts(s)
    runs: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(trials):
        order = (("old", old), ("new", new)) if i % 2 == 0 else (("new", new), ("old", old))
        for side, module in order:
            runs[side].append(_trial(module, texts, s))
    old_median = statistics.median(runs["old"])
    new_median = statistics.median(runs["new"])
    return {
        "lines": s.lines,
        "trials": trials,
        "old_lines_per_cpu_s": runs["old"],
        "new_lines_per_cpu_s": runs["new"],
        "old_median": old_median,
        "new_median": new_median,
        "new_vs_old_pct": 100.0 * (new_median / old_median - 1.0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.p3_ab", description=__doc__)
    parser.add_argument("rev", help="the revision whose classify.py is 'old' (e.g. a commit)")
    parser.add_argument("--lines", type=int, default=250_000)
    parser.add_argument("--trials", type=int, default=12)
    args = parser.parse_args(argv)
    source = subprocess.run(
        ["git", "show", f"{args.rev}:{CLASSIFY}"],
        cwd=REPO_ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dsguard-p3ab-") as d:
        path = Path(d) / "classify_old.py"
        path.write_text(source, encoding="utf-8")
        res = compare(load_classify(path), current, lines=args.lines, trials=args.trials)
    for side in ("old", "new"):
        runs = ", ".join(f"{x:,.0f}" for x in res[f"{side}_lines_per_cpu_s"])
        print(f"{side}: {runs} (median {res[f'{side}_median']:,.0f} lines per CPU second)")
    print(f"new against old: {res['new_vs_old_pct']:+.1f}% ({res['lines']:,} lines a trial)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
