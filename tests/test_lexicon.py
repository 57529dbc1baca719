"""The probable kind of an unknown failure (core/lexicon.py): built from the tuning splits
only, reproducible, withheld when unclear, reported and never acted on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench import lexicon as builder
from bench.p_classify import CORPUS, TUNING_SETS, Case, corpus_cases, judge_case
from dsguard.core import lexicon, lexicon_table
from dsguard.core.classify import FailureKind, StreamClassifier, classify_text, decode_exit
from dsguard.testing import Script
from tests.test_loop_scenarios import Outcome, Scenario, run_scenario

# A tuning-set log no rule names (nnabla's allocator report and its CUDA function list): the
# rules say unknown, the words say cuda_oom.
NNABLA = CORPUS / "failures/cuda_oom/nnabla-failed-to-allocate-again-forward-54.log"


def test_the_committed_table_is_a_fresh_build_of_the_tuning_splits() -> None:
    assert (builder.TABLE.read_text(encoding="utf-8")) == builder.fresh(), (
        "src/dsguard/core/lexicon_table.py is stale: run `python -m bench.lexicon`"
    )


def _case(name: str, label: str, text: str, group: str) -> Case:
    return Case(name, label, text, None, group)


def test_the_build_reads_only_tuning_splits_and_words_from_three_repositories() -> None:
    tuning = [_case(f"t{i}", "disk_full", f"quotawords{i % 2} everywhere", TUNING_SETS[0])
              for i in range(6)]  # fmt: skip
    tuning += [_case(f"u{i}", "hang", "stalled forever", TUNING_SETS[-1]) for i in range(3)]
    held = [_case(f"h{i}", "hang", "heldoutword stalled", "heldout") for i in range(5)]
    cases = [replace(c, repo=f"repo{i % 3}") for i, c in enumerate(tuning + held)]
    docs, table = builder.build(cases)
    assert docs == {"disk_full": 6, "hang": 3}  # no held-out log counted
    assert "heldoutword" not in table
    # "quotawords0" is in logs t0, t2, t4: repos 0, 2, 1 -> kept; "everywhere" likewise.
    assert table["quotawords0"] == {"disk_full": 3}
    assert table["stalled"] == {"hang": 3}


def test_unclear_or_wordless_text_gets_no_guess() -> None:
    assert lexicon.guess("") is None
    assert lexicon.guess("zzzz qqqq 12345") is None  # no vocabulary word
    # One word shared by many kinds does not clear the margin.
    assert lexicon.guess("error") is None


def test_a_guess_names_its_kind_margin_and_words() -> None:
    g = lexicon.guess(NNABLA.read_text(encoding="utf-8"))
    assert g is not None and g.kind == "cuda_oom"
    assert g.margin >= lexicon.MIN_MARGIN
    assert g.words and all(w in lexicon.tokens(NNABLA.read_text()) for w in g.words)


def test_the_words_reported_are_vocabulary_never_the_outputs_own_tokens() -> None:
    """The event log gets ``probable_words``: only words of the public corpus's vocabulary,
    so a secret the script printed next to them is never among them."""
    secret = "hf_zq8SecretTokenValue91 api_key_xyzzy"
    g = lexicon.guess(NNABLA.read_text(encoding="utf-8") + "\n" + secret + "\n")
    assert g is not None and g.words
    assert set(g.words) <= set(lexicon_table.DF)
    assert not any("zq8" in w or "xyzzy" in w for w in g.words)


def test_tokens_keep_identifiers_whole_and_drop_stop_words() -> None:
    toks = lexicon.tokens("The optimizer.load_state_dict() raised OutOfMemoryError in it")
    assert {"load_state_dict", "outofmemoryerror", "optimizer", "raised"} <= toks
    assert not toks & {"the", "in", "it"}


def test_only_an_unknown_verdict_carries_a_probable_kind() -> None:
    unknown = classify_text(NNABLA.read_text(encoding="utf-8"), 1)
    assert unknown is not None and unknown.kind is FailureKind.UNKNOWN
    assert unknown.probable is FailureKind.CUDA_OOM and unknown.probable_words
    oom = classify_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", 1
    )
    assert oom is not None and oom.kind is FailureKind.CUDA_OOM
    assert oom.probable is None and oom.probable_words == ()


def test_the_stream_tail_is_the_last_16_kib_whatever_the_chunking() -> None:
    text = "".join(f"line {i} of a long healthy output\n" for i in range(5000))
    whole, pieces = StreamClassifier(), StreamClassifier()
    whole.feed(text)
    for i in range(0, len(text), 997):
        pieces.feed(text[i : i + 997])
    assert whole.tail == pieces.tail == text[-16384:]
    short = StreamClassifier()
    short.feed("only this")
    assert short.tail == "only this"


def test_the_scorer_reads_the_probable_kind_only_for_unknown_verdicts() -> None:
    case = _case("nnabla", "cuda_oom", NNABLA.read_text(encoding="utf-8"), "tune")
    v = judge_case(case)
    assert v.kind == "unknown" and v.reading(with_probable=False) == "unknown"
    assert v.reading(with_probable=True) == "cuda_oom"
    assert decode_exit(None).raw is None  # the scorer judges corpus logs without an exit


def test_every_tuning_log_still_gets_its_rule_verdict_unchanged() -> None:
    """The probable kind never replaces a verdict the rules gave."""
    for case in corpus_cases():
        if case.group in TUNING_SETS:
            v = judge_case(case)
            assert v.probable is None or v.kind == "unknown", case.name


def _check_unknown_is_retried_unchanged(o: Outcome) -> None:
    (failure,) = o.named("failure_detected")
    assert failure["kind"] == "unknown"
    assert failure["probable_kind"] == "cuda_oom" and failure["probable_words"]
    # Acted on as unknown: one unchanged retry, no rung, no knob changed.
    assert not [e for e in o.named("policy_applied") if e.get("rung")]
    knobs = [e["knobs"] for e in o.named("attempt_started")]
    assert len(knobs) == 2 and knobs[0] == knobs[1]
    assert o.code == 0 and o.state.state == "succeeded"


def test_the_loop_reports_the_probable_kind_and_acts_on_unknown(tmp_path: Path) -> None:
    lines = NNABLA.read_text(encoding="utf-8").splitlines()
    dies = Script(lines=tuple((1.0 + i * 0.01, ln) for i, ln in enumerate(lines)),
                  exit_at_s=3.0, exit_code=1)  # fmt: skip
    ok = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5)
    sc = Scenario("unknown_with_probable", [dies, ok], _check_unknown_is_retried_unchanged)
    _check_unknown_is_retried_unchanged(run_scenario(tmp_path, sc))
