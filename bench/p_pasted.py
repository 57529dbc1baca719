"""Verdicts on pasted logs a terminal hard-wrapped: ``python -m bench.p_pasted [--width N]``.

A log copied from a terminal or console that wraps at its width (Windows' console: 80 columns)
has every longer line cut there, mid-word. Every failure log of the corpus's tuning splits and
of GPUAlert's set (not the held-out sets, whose verdicts are not read, nor the hangs, which a
saved log cannot show: the supervisor's own timer names them) is wrapped so and read three
ways: as it stands (``classify_text``), wrapped and read as it stands, and wrapped and read as
``dsguard explain`` reads a paste (``read_saved_text``: its cut lines joined when it looks
hard-wrapped and the first reading names no kind or only the script's own error). Prints each
count of right verdicts, and the wrong kinds the joined reading named where the wrapped one
had named another.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from bench.p_classify import HELDOUT_SETS, Case, corpus_cases, gpualert_cases
from dsguard.core.classify import classify_text, read_saved_text


def hard_wrap(text: str, width: int) -> str:
    """``text`` as a terminal ``width`` columns wide shows it: each longer line cut there."""
    out: list[str] = []
    for line in text.split("\n"):
        rest = line
        while len(rest) > width:
            out.append(rest[:width])
            rest = rest[width:]
        out.append(rest)
    return "\n".join(out)


def _kind(text: str, case: Case, *, unwrap: bool) -> str:
    if unwrap:
        failure = read_saved_text(text, case.exit_code)[0]
    else:
        failure = classify_text(text, case.exit_code)
    return "success" if failure is None else failure.kind.value


def run(width: int) -> dict[str, object]:
    cases = [
        c
        for c in [*corpus_cases(), *gpualert_cases()]
        if c.group not in HELDOUT_SETS and c.group != "mention" and c.label != "hang"
    ]
    as_is = wrapped = joined = 0
    new_wrong: Counter[tuple[str, str]] = Counter()
    for case in cases:
        text = hard_wrap(case.text, width)
        before = _kind(text, case, unwrap=False)
        after = _kind(text, case, unwrap=True)
        as_is += _kind(case.text, case, unwrap=False) == case.label
        wrapped += before == case.label
        joined += after == case.label
        if after not in (case.label, before):
            new_wrong[(case.label, after)] += 1
    return {
        "width": width,
        "logs": len(cases),
        "right_as_is": as_is,
        "right_wrapped": wrapped,
        "right_wrapped_joined": joined,
        "wrong_kinds_the_joined_reading_named": dict(new_wrong),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.p_pasted", description=__doc__)
    parser.add_argument("--width", type=int, default=80)
    result = run(parser.parse_args(argv).width)
    for key, value in result.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
