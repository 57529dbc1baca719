"""Verdicts on logs pasted in another form: ``python -m bench.p_pasted [--form F]``.

A log copied out of an issue, a forum or a terminal can carry the copy's form on every line: a
console that hard-wraps at 80 columns (``wrap80``: every longer line cut there, mid-word), a
Markdown or forum code block indented by four spaces (``indent4``), a Markdown quote
(``quote``: "> " before every line). Every failure log of the corpus's tuning splits and of
GPUAlert's set (not the held-out sets, whose verdicts are not read, nor the hangs, which a
saved log cannot show: the supervisor's own timer names them) is put in that form and read
three ways: as it stands (``classify_text``), in the form and read as it stands, and in the
form and read as ``dsguard explain`` reads a paste (``read_saved_text``: the form undone when
the first reading names no kind or only the script's own error). Prints each count of right
verdicts, and the wrong kinds the undone reading named where the plain one had named another.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable

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


def _each_line(prefix: str, blank: str) -> Callable[[str], str]:
    return lambda text: "\n".join(prefix + line if line else blank for line in text.split("\n"))


FORMS: dict[str, Callable[[str], str]] = {
    "wrap80": lambda text: hard_wrap(text, 80),
    "indent4": _each_line("    ", ""),
    "quote": _each_line("> ", ">"),
}


def _kind(text: str, case: Case, *, undo: bool) -> str:
    if undo:
        failure = read_saved_text(text, case.exit_code)[0]
    else:
        failure = classify_text(text, case.exit_code)
    return "success" if failure is None else failure.kind.value


def run(form: str, *, every: int = 1) -> dict[str, object]:
    """The counts for one form over every ``every``-th log (1: all of them)."""
    put = FORMS[form]
    cases = [
        c
        for c in [*corpus_cases(), *gpualert_cases()]
        if c.group not in HELDOUT_SETS and c.group != "mention" and c.label != "hang"
    ][::every]
    as_is = plain = undone = 0
    new_wrong: Counter[tuple[str, str]] = Counter()
    for case in cases:
        text = put(case.text)
        before = _kind(text, case, undo=False)
        after = _kind(text, case, undo=True)
        as_is += _kind(case.text, case, undo=False) == case.label
        plain += before == case.label
        undone += after == case.label
        if after not in (case.label, before):
            new_wrong[(case.label, after)] += 1
    return {
        "form": form,
        "logs": len(cases),
        "right_as_is": as_is,
        "right_in_the_form": plain,
        "right_in_the_form_undone": undone,
        "wrong_kinds_the_undone_reading_named": dict(new_wrong),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.p_pasted", description=__doc__)
    parser.add_argument("--form", choices=sorted(FORMS), action="append")
    for form in parser.parse_args(argv).form or sorted(FORMS):
        for key, value in run(form).items():
            print(f"{key}: {value}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
