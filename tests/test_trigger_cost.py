"""The trigger search's cost guard (core/classify.py, stage 1).

Every line of output goes through one regex, a trie of the triggers; sre tries it at each
position whose character starts some trigger, so a trigger with a new first character makes
every occurrence of that character a candidate. Measured: about 3.5 % of the search per new
non-ASCII first character (bench/RESULTS.md, round 18), and a new lower-case ASCII one cost
about 4 % of P3's feed in round 22 (``gent received ...``, caught by P3 and replaced by
``Agent received ...``). A trigger that needs a new first character belongs here only with a
P3 figure in bench/RESULTS.md.
"""

from __future__ import annotations

from dsguard.core.classify import _TRIGGERS

#: The first characters the triggers use (round 22).
# (the Cyrillic one is "\u0423", from "Убито": a Russian shell's "Killed")
FIRST_CHARACTERS = frozenset(".AEFKNSTWabceiknorsw") | {"ö", "\u0423", "│", "已"}


def test_no_trigger_adds_a_first_character_to_the_search() -> None:
    assert {t[0] for t in _TRIGGERS} == FIRST_CHARACTERS


def test_each_trigger_is_listed_once() -> None:
    """A second copy adds nothing to the trie and misleads whoever edits the list."""
    assert len(_TRIGGERS) == len(set(_TRIGGERS))
