"""Issue 12: the classifier against real logs, targets computed from the corpus itself.

``tests/data/corpus`` holds real failure excerpts from public issue threads, labelled by root
cause and split ``tune`` / ``heldout`` by a sha1 rule (see its README), plus harmless
mentions. The scoring is ``bench/p_classify.py`` (also ``python -m bench.run classify``); these
tests hold the figures it reports to the issue's targets. Nothing is hard-coded: adding a log
to the corpus changes what is checked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import pytest

from bench.p_classify import (
    HELDOUT_SETS,
    LADDER_KINDS,
    TUNING_SETS,
    Score,
    corpus_cases,
    false_kills,
    gpualert_cases,
    score,
)

CASES = corpus_cases()
#: Every split of the corpus: the tuning sets, then the held-out sets (see its README). The
#: splits whose misses may be shown by name are the tuning ones; a held-out split's misses
#: stay unnamed, even in a failing assertion's message.
TUNING = TUNING_SETS
HELDOUT = HELDOUT_SETS
SPLITS = TUNING + HELDOUT


def _score(group: str) -> Score:
    cases = [c for c in CASES if c.group == group]
    assert cases, group
    return score(cases)


def test_corpus_is_real_and_split() -> None:
    """At least 2800 labelled failures in 12 kinds and 45 mentions, every split used: the
    tuning splits ``tune``, ``tune2``, ``tune3`` to ``tune93``, ``tune95``, ``tune98`` to
    ``tune100``, ``tune103``, ``tune104``, ``tune108``, ``tune109``, ``tune112``,
    ``tune114``, ``tune118``, ``tune119``, ``tune122`` and ``tune123`` (each ``tuneN`` the
    held-out ``heldout(N+1)`` until it was scored once and became a tuning set:
    ``tune3``-``tune5`` in rounds 5-7, ``tuneN`` for N >= 6 in a later round, which the corpus
    README's section of each set names), the held-out ``heldout``, ``heldout2``, ``heldout3``,
    ``heldout95``, ``heldout97``, ``heldout98``, ``heldout102``, ``heldout103``,
    ``heldout106``, ``heldout107``, ``heldout108``, ``heldout111``, ``heldout112``,
    ``heldout114``, ``heldout116``, ``heldout117``, ``heldout118``, ``heldout121``,
    ``heldout122``, ``heldout125`` and ``heldout126``."""
    failures = [c for c in CASES if c.group != "mention"]
    assert len(failures) >= 6346
    assert len({c.label for c in failures}) == 12
    assert len([c for c in CASES if c.group == "mention"]) >= 45
    assert {c.group for c in failures} == set(SPLITS)


def test_zero_false_kills_on_harmless_mentions() -> None:
    """No mention is ended while streaming, none is a failure at exit 0."""
    assert false_kills([c for c in CASES if c.group == "mention"]) == []


#: Sets on which a ladder kind is below 0.98. heldout10 (round 11's rules) took a PyCUDA
#: cuda_oom for a host_oom when it was scored once; as tune9, round 12's rules read that error
#: right. heldout13 (round 14's rules, scored once) took a darknet CUDA error for a build error
#: (3 of 4 right); as tune12, round 15's rules read it right. heldout15 (round 16's rules,
#: scored once) took a log labelled disk_full for a host_oom (6 of 7 right); read as tune14 in
#: round 17, the verdict was the corpus's convention (/dev/shm exhausted by DataLoader workers
#: is host memory) and the label was not, so the label was corrected. heldout27 (round 28's
#: rules, scored once) took a host OOM for a cuda_oom (8 of 9 right): Ray < 2's memory monitor
#: raising "RayOutOfMemoryError: More than 95% of the memory on node ... is used", whose class
#: name the device rule's "OutOfMemoryError" matched; as tune26, round 29's rules read it as
#: host memory. heldout31 (round 32's rules, scored once) took a log labelled nccl_error for a
#: host_oom (6 of 7 right): oneCCL over libfabric, whose provider's "fails with ret: -12,
#: strerror: Cannot allocate memory" the host rule's strerror(ENOMEM) matched; as tune30,
#: round 33's rules read it as the communication failure it is. heldout54 (round 55's rules,
#: scored once) took a log labelled cuda_oom for a host_oom (5 of 6 right): Theano's
#: "MemoryError: Error allocating N bytes of device memory (out of memory)", whose class the
#: host rule read; as tune53, round 56's rules read it as device memory. heldout78 (round
#: 79's rules, scored once) took two logs labelled host_oom for cuda_oom (3 of 5 right): the
#: JVM's "java.lang.OutOfMemoryError: Cannot allocate new FloatPointer(...)" (DL4J), whose
#: class the device rule's "OutOfMemoryError" matched; as tune77, round 80's rules read it as
#: host memory. heldout83 (round 87's rules, scored once) took a log labelled host_oom for a
#: cuda_oom (4 of 5 right): OpenCV's "(-4:Insufficient memory) Failed to allocate N bytes in
#: function 'OutOfMemoryError'", whose function name the device rule's "OutOfMemoryError"
#: matched; as tune82, round 89's rules read it as host memory. heldout85 (round 91's rules,
#: scored once) took a log labelled cuda_oom for a host_oom (2 of 3 right): Theano's
#: "MemoryError: Error allocating N bytes of device memory (CNMEM_STATUS_OUT_OF_MEMORY).", whose
#: class the host rule read (the device rule knew the runtime's text, not CNMeM's); as tune84,
#: round 93's rules read it as device memory. heldout91 (round 103's rules, scored once) took a
#: log labelled cuda_oom for a host_oom (3 of 4 right): a TensorFlow OOM whose node line named
#: a _Recv node's recv_device on the CPU, the failing op's own device wrapped onto the next line
#: by a paste; as tune90, round 105's rules read the op's device. heldout101 (round 114's
#: rules, scored once) took a log labelled user_code_error for a ds_build_error (0 of 1 right):
#: "nvcc fatal : Unsupported gpu architecture 'compute_89'" in pip's build of tiny-cuda-nn,
#: which its helper labelled an environment error while the corpus labels other packages'
#: compiled-op builds ds_build_error (apex, exllamav2, MultiScaleDeformableAttention, quanto,
#: syncbn, Megatron's fused kernels: the "compiled op's build" rule of round 23). The labels
#: disagree; the rule follows the corpus, and as tune100 the log stays read so. heldout109 and
#: heldout110 (round 120, rules at b39b147, scored once) each took a log labelled cuda_oom for
#: a host_oom (3 of 4 and 1 of 2 right): PyKEEN's "MemoryError: The current model can't be
#: trained on this hardware", raised only after its GPU-only batch search, and Thrust's
#: "MemoryError: std::bad_alloc: temporary_buffer::allocate" from MinkowskiEngine, whose
#: classes the host rule read; as tune108 and tune109, round 121's rules read both as device
#: memory.
_IMPRECISE: dict[str, str] = {
    "tune100": "a build the corpus's other labels call ds_build_error, labelled a user error",
}


def _groups(groups: Sequence[str], known: dict[str, str]) -> list[Any]:
    """``groups`` as test parameters, each in ``known`` a strict xfail with its reason: a
    held-out set's shortfall is recorded, not read, until the set becomes a tuning set."""
    return [
        pytest.param(g, marks=pytest.mark.xfail(strict=True, reason=known[g])) if g in known else g
        for g in groups
    ]


@pytest.mark.parametrize("group", _groups(SPLITS, _IMPRECISE))
def test_ladder_kinds_are_precise(group: str) -> None:
    """cuda_oom, host_oom and ds_build_error change the training: precision >= 0.98."""
    s = _score(group)
    for kind in LADDER_KINDS:
        p = s.precision(kind)
        assert p is None or p >= 0.98, (kind, p, s.misses if group in TUNING else "withheld")


@pytest.mark.parametrize("group", SPLITS)
def test_no_user_error_is_taken_for_an_oom(group: str) -> None:
    assert _score(group).user_as_oom() == 0


def test_heldout_accuracy_floor() -> None:
    """The level reached without tuning on heldout (91.9% when last changed): no regression."""
    assert _score("heldout").accuracy >= 0.91


def test_heldout2_accuracy_floor() -> None:
    """heldout2 (79 logs gathered after the rules, never used to write them): 83.5% with the
    classifier before the framework-format rules, 91.1% after; no regression below that."""
    assert _score("heldout2").accuracy >= 0.91


def test_heldout3_accuracy_floor() -> None:
    """heldout3 (93 logs gathered under the stricter protocol while rules were being changed in
    another branch, never used to write them; 15 more from threads that tune2 also drew from were
    moved to tune2): 84.9% on the rules current when it was gathered and after the tune2 rules,
    87.1% after the frames (round 4), 89.2% after round 5's rules; no regression below
    that."""
    assert _score("heldout3").accuracy >= 0.89


#: Each tuning set's floor: (accuracy, most ``unknown`` verdicts), at or just under what the
#: rules score on it now, so that no later rule breaks what an earlier one fixed. Above each
#: entry, its record: its once-score as a held-out set, the round that made it a tuning set,
#: what is left and why.
_TUNING_FLOORS: dict[str, tuple[float, int]] = {
    # tune3 (120 logs gathered as heldout4, scored once then: 82.5%, unknown 12.5%; a tuning set
    # since round 5): 98.3% (unknown 0.8%) after the rules written from it; a tuning set's figure,
    # held so that no later rule breaks what it fixed.
    "tune3": (0.98, 1),
    # tune6 (101 logs gathered as heldout7 in round 8 by two helpers that never read the rules,
    # after the rules and the lexicon were frozen at a9ae35d): 84/101 = 83.2% (unknown 14.9%) on the
    # rules, scored once, its record as a held-out set; a tuning set since round 9, whose rules took
    # it to 96/101 = 95.0% (unknown 4.0%), and round 16's to 97/101 = 96.0% (unknown 3.0%:
    # PaddleOCR's padded NaN loss).
    "tune6": (0.96, 3),
    # tune7 (99 logs gathered as heldout8 in round 9 by four helpers that never read the rules,
    # after the rules were frozen at f409888): 85/99 = 85.9% (unknown 10.1%), scored once, its
    # record as a held-out set; a tuning set since round 10, whose rules took it to 95/99 = 96.0%
    # (unknown 2.0%), and round 11's to 96/99 = 97.0% (unknown 1.0%).
    "tune7": (0.969, 1),
    # tune8 (69 logs gathered as heldout9 in round 10 by four helpers that never read the rules,
    # after the rules were frozen at e4792a7): 65/69 = 94.2% (unknown 5.8%), scored once, its record
    # as a held-out set; a tuning set since round 11, whose rules took it to 68/69 = 98.6% (unknown
    # 1.4%).
    "tune8": (0.985, 1),
    # tune9 (69 logs gathered as heldout10 in round 11 by six helpers that never read the rules,
    # after the rules were frozen at e02441e): 66/69 = 95.7% (unknown 2.9%), scored once, its record
    # as a held-out set; a tuning set since round 12, whose rules took it to 69/69.
    "tune9": (1.0, 0),
    # tune10 (75 logs gathered as heldout11 in round 12 by five helpers that never read the rules,
    # after the rules were frozen at 81d4bec): 67/75 = 89.3% (unknown 6.7%), scored once, its record
    # as a held-out set (its ladder kinds all precise, 1.00); a tuning set since round 13, whose
    # rules took it to 74/75 = 98.7% (unknown 0).
    "tune10": (0.986, 0),
    # tune11 (69 logs gathered as heldout12 in round 13 by five helpers that never read the rules;
    # the rules were frozen at e803833 before the set was merged or read): 61/69 = 88.4% (unknown
    # 5.8%), scored once, its record as a held-out set (its ladder kinds all precise, 1.00); a
    # tuning set since round 14, whose rules took it to 69/69.
    "tune11": (1.0, 0),
    # tune12 (66 logs gathered as heldout13 in round 14 by five helpers that never read the rules;
    # the rules were frozen at 04ffe5d before the set was merged or read): 58/66 = 87.9% (unknown
    # 7.6%), scored once, its record as a held-out set (ds_build_error precision 3/4); a tuning set
    # since round 15, whose rules took it to 65/66; 66/66 since round 85 (a TensorFlow BFC
    # allocator's map before an OOM line that names no device: the GPU's allocator).
    "tune12": (1.0, 0),
    # tune13 (55 logs gathered as heldout14 in round 15 by five helpers that never read the rules;
    # the rules were frozen at a31e9be before the set was merged or read): 53/55 = 96.4% (unknown
    # 1.8%), scored once, its record as a held-out set; a tuning set since round 16, whose rules
    # took it to 55/55.
    "tune13": (1.0, 0),
    # tune14 (49 logs gathered as heldout15 in round 16 by five helpers that never read the rules;
    # the rules were frozen at 5d13f2b before the set was merged or read): 43/49 = 87.8% (unknown
    # 6.1%), scored once, its record as a held-out set (host_oom precision 6/7); a tuning set since
    # round 17, whose rules took it to 47/49, and 48/49 with one label corrected (a /dev/shm
    # exhaustion gathered as disk_full, the corpus's host_oom; corpus README). The one left is
    # TensorFlow's OOM that names no device: ``unknown``, not guessed.
    "tune14": (0.979, 1),
    # tune15 (42 logs gathered as heldout16 in round 17 by five helpers that never read the rules;
    # the rules were frozen at a2b501c before the set was merged or read): 36/42 = 85.7% (unknown
    # 4.8%), scored once, its record as a held-out set; a tuning set since round 18, whose rules
    # took it to 41/42 (zh_CN bash's "command not found" stays ``unknown``: a trigger for it would
    # slow every line's search, core/classify.py).
    "tune15": (0.976, 1),
    # tune16 (49 logs gathered as heldout17 in round 18 by five helpers that never read the rules;
    # the rules were frozen at 99cdf89 before the set was merged or read): 46/49 = 93.9% (unknown
    # 2.0%), scored once, its record as a held-out set; a tuning set since round 19, whose rules
    # took it to 49/49.
    "tune16": (1.0, 0),
    # tune17 (44 logs gathered as heldout18 in round 19 by five helpers that never read the rules;
    # the rules were frozen at 1de5054 before the set was merged or read): 40/44 = 90.9% (unknown
    # 6.8%), scored once, its record as a held-out set; a tuning set since round 20, whose rules
    # took it to 44/44.
    "tune17": (1.0, 0),
    # tune18 (48 logs gathered as heldout19 in round 20 by five helpers that never read the rules;
    # the rules were frozen at 05421d0 before the set was merged or read): 41/48 = 85.4% (unknown
    # 8.3%), scored once, its record as a held-out set; a tuning set since round 21, whose rules
    # took it to 47/48. The one left is an echoed ``assert ..., "zero stage {} requires an
    # optimizer"`` source line whose AssertionError was not pasted: ``unknown`` (a source line is
    # not read as a message).
    "tune18": (0.979, 1),
    # tune19 (50 logs gathered as heldout20 in round 21 by five helpers that never read the rules,
    # pointed away from LLM fine-tuning; the rules were frozen at 102255f before the set was merged
    # or read): 37/50 = 74.0% (unknown 18.0%), scored once, its record as a held-out set; a tuning
    # set since round 22, whose rules took it to 49/50. The one left is a GAN's progress bar whose
    # losses read ``DF=nan, G=nan``: ``unknown`` (a NaN in a progress bar's postfix is left unnamed:
    # the live loop stops a run on two NaN lines, and a bar redraws a metric that has no value yet
    # as nan).
    "tune19": (0.98, 1),
    # tune20 (45 logs gathered as heldout21 in round 22 by five helpers that never read the rules;
    # the rules were frozen at 484b6de before the set was merged or read): 37/45 = 82.2% (unknown
    # 15.6%), scored once, its record as a held-out set; a tuning set since round 23, whose rules
    # took it to 44/45. The one left is a flattened one-line paste of a DeepSpeed ZeRO resume ("key
    # exp_avg saved torch.Size([15013760]) parameter shape ..."), a message whose source was not
    # found, so no rule was written for it: ``unknown``.
    "tune20": (0.977, 1),
    # tune21 (46 logs gathered as heldout22 in round 23 by five helpers that never read the rules;
    # the rules were frozen at af6d196 before the set was merged or read): 39/46 = 84.8% (unknown
    # 13.0%), scored once, its record as a held-out set; a tuning set since round 24, whose rules
    # took it to 46/46.
    "tune21": (1.0, 0),
    # tune22 (33 logs gathered as heldout23 in round 24 by five helpers that never read the rules;
    # the rules were frozen at eda2719 before the set was merged or read): 29/33 = 87.9% (unknown
    # 9.1%), scored once, its record as a held-out set; a tuning set since round 25, whose rules
    # took it to 33/33.
    "tune22": (1.0, 0),
    # tune23 (50 logs gathered as heldout24 in round 25 by five helpers that never read the rules;
    # the rules were frozen at 18e4ec8 before the set was merged or read): 44/50 = 88.0% (unknown
    # 6.0%), scored once, its record as a held-out set; a tuning set since round 26, whose rules
    # took it to 49/50. The one left is Colab's runtime log of a notebook kernel restarted after
    # tcmalloc's "large alloc" warning: Jupyter's "KernelRestarter: restarting kernel" follows any
    # kernel death, so it is left ``unknown`` rather than read as a host OOM.
    "tune23": (0.98, 1),
    # tune24 (56 logs gathered as heldout25 in round 26 by five helpers that never read the rules;
    # the rules were frozen at 8482860 before the set was merged or read): 39/56 = 69.6% (unknown
    # 16.1%), scored once, its record as a held-out set; a tuning set since round 27, whose rules
    # took it to 51/56. Left: a MoE assertion ("4 is not divisible by 8") printed apart from the
    # traceback that would place it in DeepSpeed; Ray's "node ... marked dead because the
    # detector has missed too many heartbeats" (a crash, an OOM or a preemption alike); a
    # timm summary.csv whose rows turn nan (a CSV row says no metric's name); SimpleTuner's
    # "[ERROR] Cannot find config file" (one tool's log line); and TensorFlow's start-up
    # "failed to allocate ... CUDA_ERROR_OUT_OF_MEMORY", no evidence since round 6.
    "tune24": (0.91, 4),
    # tune25 (53 logs gathered as heldout26 in round 27 by five helpers that never read the rules;
    # the rules were frozen at f732094 before the set was merged or read): 45/53 = 84.9% (unknown
    # 9.4%), scored once, its record as a held-out set; a tuning set since round 28, whose rules
    # took it to 52/53. The one left: TensorStore's "Error opening "zarr" driver" under an Orbax
    # restore, pasted as one line; a zarr dataset read raises the same words, and a checkpoint
    # verdict sets the resumed checkpoint aside, so it stays the script's error.
    "tune25": (0.98, 0),
    # tune26 (55 logs gathered as heldout27 in round 28 by five helpers that never read the rules;
    # the rules were frozen at c764ae6 before the set was merged or read): 47/55 = 85.5% (unknown
    # 7.3%), scored once, its record as a held-out set; a tuning set since round 29, whose rules
    # took it to 55/55.
    "tune26": (1.0, 0),
    # tune27 (53 logs gathered as heldout28 in round 29 by five helpers that never read the rules;
    # the rules were frozen at 8bbb2a2 before the set was merged or read): 49/53 = 92.5% (unknown
    # 3.8%), scored once, its record as a held-out set; a tuning set since round 30, whose rules
    # took it to 53/53.
    "tune27": (1.0, 0),
    # tune28 (56 logs gathered as heldout29 in round 30 by five helpers that never read the rules;
    # the rules were frozen at 6a43d02 before the set was merged or read): 45/56 = 80.4% (unknown
    # 3.6%), scored once, its record as a held-out set; a tuning set since round 31, whose rules
    # took it to 56/56 (two labels corrected: a held rendezvous port is the job's error).
    "tune28": (1.0, 0),
    # tune29 (57 logs gathered as heldout30 in round 31 by eight helpers that never read the
    # rules; the rules were frozen at da28b91 before the set was merged or read): 45/57 = 78.9%
    # (unknown 12.3%), scored once, its record as a held-out set; a tuning set since round 32,
    # whose rules took it to 56/57. The one left: "RayTaskError(OutOfMemoryError)" with no
    # message, which a task's own torch.OutOfMemoryError (device memory) prints the same as
    # Ray's memory monitor (host memory), so no rule names one of them.
    "tune29": (0.982, 1),
    # tune30 (54 logs gathered as heldout31 with heldout30 in round 31, kept unread until round
    # 32's rules were frozen at 2dba6b3): 47/54 = 87.0% (unknown 7.4%), scored once, its record
    # as a held-out set (host_oom precision 6/7); a tuning set since round 33, whose rules took
    # it to 53/54. The one left: Keras' model.load_weights() failing in numpy's transpose
    # ("ValueError: axes don't match array") with the frames between hidden by Keras'
    # traceback filter, so nothing but the script's own call says a checkpoint was read.
    "tune30": (0.981, 0),
    # tune31 (45 logs gathered as heldout32 in round 32, kept unread until round 33's rules
    # were frozen at ad81cfd): 38/45 = 84.4% (unknown 13.3%), scored once, its record as a
    # held-out set; a tuning set since round 34, whose rules took it to 44/45; 45/45 since
    # round 85 (TensorFlow's "OOM when allocating tensor with shape[...]" cut before it names a
    # device, after a BFC allocator's map: the GPU's allocator).
    "tune31": (1.0, 0),
    # tune32 (43 logs gathered as heldout33 with heldout32 in round 32, kept unread until round
    # 34's rules were frozen at c966ec7): 38/43 = 88.4% (unknown 7.0%), scored once, its record
    # as a held-out set; a tuning set since round 35, whose rules took it to 43/43.
    "tune32": (1.0, 0),
    # tune33 (73 logs gathered as heldout34 in round 35 by five helpers that never read the
    # rules; the rules were frozen at c55e008 before the set was merged or read): 56/73 = 76.7%
    # (unknown 15.1%), scored once, its record as a held-out set; a tuning set since round 36,
    # whose rules took it to 68/73. Left: Colab's "tcmalloc: large alloc" then a Ctrl-C, Ray's
    # "The worker may have exceeded K8s pod memory limits" (its own "may"), a bare "-9" a
    # script printed, a Lightning resume's "'ZeroOptimizer' object has no attribute 'state'",
    # and a distributed-checkpoint traceback whose lines a terminal ran together.
    "tune33": (0.931, 3),
    # tune34 (25 logs gathered as heldout35 in round 36 by two helpers that never read the
    # rules; the rules were frozen at a94ff21 before the set was merged or read): 18/25 = 72.0%
    # (unknown 20.0%), scored once, its record as a held-out set; a tuning set since round 37,
    # whose rules took it to 24/25. The one left: Flax's "ScopeParamShapeError: Inconsistent
    # shapes between value and initializer" on a restored checkpoint, read as the script's
    # error: Flax raises it for any params that do not fit the module, an input of another
    # width at apply() as well as a checkpoint of another model.
    "tune34": (0.96, 0),
    # tune35 (55 logs gathered as heldout36 in round 37 by six helpers that never read the
    # rules; the rules were frozen at e6334ef before the set was merged or read): 47/55 = 85.5%
    # (unknown 10.9%), scored once, its record as a held-out set; a tuning set since round 38,
    # whose rules took it to 55/55.
    "tune35": (1.0, 0),
    # tune36 (56 logs, the half of round 37's gathering kept staged and unread until round
    # 38's rules were frozen at 1a726a2): 50/56 = 89.3% (unknown 8.9%), scored once, its record
    # as a held-out set; a tuning set since round 39, whose rules took it to 54/56. Left: a
    # "RayTaskError(OutOfMemoryError)" cut before the message (Ray's own host OOM and torch's
    # device OOM print the same), and a collate traceback cut before its exception below
    # transformers' "Using pad_token, but it is not set yet." (logged on every read of an
    # unset pad_token, healthy runs too).
    "tune36": (0.964, 2),
    # tune37 (55 logs gathered as heldout38 in round 38 by six helpers that never read the
    # rules, kept staged and unread until round 39's rules were frozen at dcb0f13): 50/55 =
    # 90.9% (unknown 3.6%), scored once, its record as a held-out set; a tuning set since round
    # 40, whose rules took it to 53/55, and round 41's to 54/55 (NCCL's "Duplicate GPU
    # detected" decided a user error, see the corpus README). Left: a hang whose last line is
    # NCCL's "message truncated" WARN (a mismatched collective, read as a communication
    # failure).
    "tune37": (0.981, 0),
    # tune38 (48 logs, the half of round 38's gathering kept staged and unread until round 40's
    # rules were frozen at 9d05e73): 41/48 = 85.4% (unknown 8.3%), scored once, its record as a
    # held-out set; a tuning set since round 41, whose rules took it to 47/48. Left: c10d's
    # "[c10d] waitForInput: socket ... timed out after 300000ms" on a weight sync, a peer that
    # never answered: tune32 has the same line in a run labelled a hang, so no rule reads it.
    "tune38": (0.979, 1),
    # tune39 (36 logs gathered as heldout40 in round 39 by four helpers that never read the
    # rules, kept staged and unread until round 41's rules were frozen at 262ffd9): 36/36,
    # unknown 0, scored once, its record as a held-out set and the issue's targets met; a
    # tuning set since round 42, with no miss to write a rule from.
    "tune39": (1.0, 0),
    # tune40 (29 logs, the half of round 39's gathering kept staged and unread until round 42,
    # scored on the rules frozen at 262ffd9): 29/29, unknown 0, scored once, its record as a
    # held-out set and the issue's targets met; a tuning set since round 43, with no miss to
    # write a rule from.
    "tune40": (1.0, 0),
    # tune41 (31 logs gathered as heldout42 in round 42 by two helpers that never read the
    # rules, scored once on the rules frozen at 262ffd9): 23/31 = 74.2% (unknown 16.1%), its
    # record as a held-out set; a tuning set since round 44, whose rules took it to 31/31
    # (written after the session's search budget was spent: no fresh set has scored them).
    "tune41": (1.0, 0),
    # tune42 (33 logs gathered as heldout43 in round 45 by four helpers that never read the
    # rules, the odd half of their staged lines; scored once on the rules frozen at ceffc56):
    # 28/33 = 84.8% (unknown 9.1%), its record as a held-out set; a tuning set since round 45,
    # whose rules took it to 32/33. Left: mujocolab/mjlab#291, torch.normal's "normal expects
    # all elements of std >= 0.0" raised through the script's own wrapper, which a script's
    # negative std raises too (frames.py reads it only from torch.distributions' sample).
    "tune42": (0.969, 0),
    # tune43 (29 logs, the half of round 45's gathering kept staged and unread until round
    # 45's rules were frozen at c6ef653, then scored once on them): 27/29 = 93.1% (unknown
    # 6.9%), its record as a held-out set; a tuning set since round 46, which wrote no rule
    # from its two misses: mindspore-lab/mindyolo#402, a loss that grows a thousandfold under
    # fp16 overflow warnings without turning NaN (no rule reads a loss value's size), and
    # Oneflow-Inc/oneflow#6746, OneFlow's internal graph CHECK "Cannot find input_arg_name",
    # which the script's placement failed here and a framework bug fails as well.
    "tune43": (0.931, 2),
    # tune44 (32 logs gathered as heldout45 in round 46 by four helpers that never read the
    # rules, the odd half of their staged lines; scored once on the rules frozen at c6ef653):
    # 31/32 = 96.9% (unknown 3.1%), its record as a held-out set; a tuning set since round 47,
    # whose rule took it to 32/32.
    "tune44": (1.0, 0),
    # tune45 (33 logs, the half of round 46's gathering kept staged and unread until round
    # 47's rules were frozen at d7c813b, then scored once on them): 32/33 = 97.0% (unknown
    # 3.0%), its record as a held-out set; a tuning set since round 48, which wrote no rule
    # from its miss: PaddlePaddle/Paddle#15689, PaddleCloud's job page ("Usermain Fail
    # usermain timeout", its 10-hour limit) as a maintainer quoted it, a platform's stage
    # trace and not output a supervised process prints.
    "tune45": (0.969, 1),
    # tune46 (30 logs gathered as heldout47 in round 47 by four helpers that never read the
    # rules, the odd half of their staged lines; scored once on the rules frozen at d7c813b):
    # 26/30 = 86.7% (unknown 13.3%), its record as a held-out set; a tuning set since round 49,
    # whose rules took it to 30/30.
    "tune46": (1.0, 0),
    # tune47 (28 logs, the half of round 47's gathering kept staged and unread until round
    # 49's rules were frozen at 565d368, then scored once on them): 23/28 = 82.1% (unknown
    # 10.7%), its record as a held-out set; a tuning set since round 50, whose rules took it
    # to 25/28. Left: PaddlePaddle/Paddle#5203, legacy Paddle's parameter-server bind CHECK
    # ("ERROR on binding <ip>"), whose cause the thread never confirmed (a held port, or an
    # address not on the host), and two NVIDIA-NeMo/Speech logs labelled checkpoint errors
    # that read as the script's own (#10480, a KeyError 'model' in a conversion script's
    # loader; #8463, OmegaConf's "Key 'speaker_model_cfg' is not in struct" on restore),
    # the labels themselves arguable.
    "tune47": (0.892, 2),
    # tune48 (28 logs gathered as heldout49 in round 49 by four helpers that never read the
    # rules, the odd half of their staged lines; scored once on the rules frozen at fc0446f):
    # 27/28 = 96.4% (unknown 3.6%), its record as a held-out set; a tuning set since round 51,
    # whose rule took it to 28/28.
    "tune48": (1.0, 0),
    # tune49 (29 logs, the half of round 49's gathering kept staged and unread until round
    # 51's rules were frozen at 50195e5, then scored once on them): 27/29 = 93.1% (unknown
    # 3.4%), its record as a held-out set; a tuning set since round 52, whose rules took it to
    # 29/29.
    "tune49": (1.0, 0),
    # tune50 (26 logs gathered as heldout51 in round 51 by four helpers that never read the
    # rules, the odd half of their staged lines; scored once on the rules frozen at d3d8412):
    # 25/26 = 96.2% (unknown 3.8%), its record as a held-out set; a tuning set since round 53,
    # whose rule took it to 26/26.
    "tune50": (1.0, 0),
    # tune51 (26 logs, the half of round 51's gathering kept staged and unread until round
    # 53's rules were frozen at ee583a6, then scored once on them): 22/26 = 84.6% (unknown
    # 11.5%), its record as a held-out set; a tuning set since round 54, whose rules took it
    # to 25/26. Left: isaac-sim/IsaacLab#2539, the reporter's own print of a policy's std gone
    # NaN ("std = tensor([[nan, nan, ..."), its exception cut by the excerpt.
    "tune51": (0.961, 1),
    # tune52 (18 logs gathered by two helpers on the last look-ups of round 53's session,
    # merged and scored once on round 54's rules, 0f5740b): 16/18 = 88.9% (unknown 11.1%), its
    # record as a held-out set; a tuning set since round 55, whose rule took it to 17/18.
    # Left: PaddlePaddle/PaddleDetection#3326, a loss grown to 5e30 that the excerpt never
    # shows turning NaN (a loss that only grows is not read as divergence).
    "tune52": (0.944, 1),
    # tune53 (49 logs, the odd half of round 56's gathering, scored once as heldout54 on round
    # 55's rules, c64d069): 40/49 = 81.6% (unknown 8.2%), its record as a held-out set; a
    # tuning set since round 56, whose rules took it to 49/49.
    "tune53": (1.0, 0),
    # tune54 (43 logs, the even half of round 56's gathering, kept staged and unread until
    # round 56's rules were frozen at 86292c0, then scored once on them): 34/43 = 79.1%
    # (unknown 9.3%), its record as a held-out set; a tuning set since round 57, whose rules
    # took it to 43/43.
    "tune54": (1.0, 0),
    # tune55 (50 logs, the odd half of round 58's gathering, kept staged and unread until
    # round 57's rules were frozen at 9b3845c, then scored once on them): 42/50 = 84.0%
    # (unknown 16.0%), its record as a held-out set; a tuning set since round 58, whose rules
    # took it to 49/50. Left: Morizeyao/GPT2-Chinese#123, tcmalloc's large-allocation reports
    # and a "^c" the reporter annotated by hand (no line says what ended the run).
    "tune55": (0.98, 1),
    # tune56 (49 logs, the even half of round 58's gathering, kept staged and unread until
    # round 58's rules were frozen at 5dd4a48, then scored once on them): 46/49 = 93.9%
    # (unknown 2.0%), its record as a held-out set; a tuning set since round 59, whose rules
    # took it to 49/49.
    "tune56": (1.0, 0),
    # tune57 (49 logs, the odd half of round 60's gathering, kept staged and unread until
    # round 59's rules were frozen at c2e3ed9, then scored once on them): 41/49 = 83.7%
    # (unknown 12.2%), its record as a held-out set; a tuning set since round 60, whose rules
    # took it to 49/49.
    "tune57": (1.0, 0),
    # tune58 (46 logs, the even half of round 60's gathering, kept staged and unread until
    # round 60's rules were frozen at e46e341, then scored once on them): 41/46 = 89.1%
    # (unknown 10.9%), its record as a held-out set; a tuning set since round 61, whose rules
    # took it to 45/46. Left: clab/dynet#132, "dynet is out of memory, try increasing with
    # --dynet-mem" (a pool sized by a flag, on a device the line does not name).
    "tune58": (0.978, 1),
    # tune59 (42 logs, one set gathered by four helpers while rounds 60's and 61's rules were
    # written, merged after they froze at e003d06 and scored once on them): 34/42 = 81.0%
    # (unknown 9.5%), its record as a held-out set; a tuning set since round 62, whose rules
    # took it to 40/42. Left: martinkersner/train-CRF-RNN#53, Caffe's snapshot write failing
    # into a folder that does not exist (read as a full disk, the check's other cause), and
    # zitongbai/legged_lab#15, torch.normal's std check with no frame to say whose std it was.
    "tune59": (0.952, 0),
    # tune60 (11 logs gathered by two helpers on a session's last look-ups while round 62's
    # rules were written, merged after they froze at e2281d9 and scored once on them): 8/11 =
    # 72.7% (unknown 27.3%), its record as a held-out set; a tuning set since round 64, whose
    # rules took it to 11/11.
    "tune60": (1.0, 0),
    # tune61 (37 logs, the odd half of h65a-d's staged lines, gathered by eight helpers while
    # round 64's rules were written, merged after they froze at 2379a60 and scored once on
    # them): 29/37 = 78.4% (unknown 13.5%), its record as a held-out set; a tuning set since
    # round 65, whose rules took it to 34/37. Left: msr-fiddle/pipedream#76 (a SIGBUS whose
    # backtrace lies in libnccl), qqwweee/keras-yolo3#199 (TF's OOM, its device cut by the
    # paste) and deepinsight/insightface#1808 (a project's own loader raising KeyError).
    "tune61": (0.918, 2),
    # tune62 (35 logs, the even half of h65a-d's staged lines, kept staged and unread until
    # round 65's rules were frozen at aae20a0, then scored once on them): 34/35 = 97.1%
    # (unknown 0), both of the issue's targets met (its twin half, tune61, fed those rules;
    # heldout64, without a twin, read 35/43 on them); a tuning set since round 66, whose
    # rules took it to 35/35.
    "tune62": (1.0, 0),
    # tune63 (43 logs, the odd half of h65e-h's staged lines, scored once on round 65's rules,
    # aae20a0, as heldout63 was, for a set without a twin among the tuning splits): 35/43 =
    # 81.4% (unknown 18.6%), its record as a held-out set; a tuning set since round 67, whose
    # rules took it to 42/43. Left: torch/torch7#1105, File.lua's "read error: read N blocks
    # instead of M" (torch.load reads .t7 datasets as well as models).
    "tune63": (0.976, 1),
    # tune64 (40 logs, the even half of h65e-h's staged lines, kept staged and unread until
    # round 66's rules were frozen at 7694a50, its twin half still held out, then scored once
    # on them): 33/40 = 82.5% (unknown 17.5%), its record as a held-out set; a tuning set since
    # round 67, whose rules took it to 39/40. Left: nagadomi/waifu2x#373, File.lua's "read 0
    # blocks instead of 1", as tune63's.
    "tune64": (0.975, 1),
    # tune65 (35 logs, the odd half of h67a-d's staged lines, gathered while round 67's rules
    # were written, merged after they froze at f0d15b4 and scored once on them): 29/35 = 82.9%
    # (unknown 14.3%), its record as a held-out set; a tuning set since round 68, whose rules
    # took it to 34/35. Left: TheLastBen/fast-stable-diffusion#678, a bare "^C" at the end of
    # a Colab cell (the runtime's kill for RAM, or the user's Ctrl-C).
    "tune65": (0.971, 1),
    # tune66 (32 logs, the even half of h67a-d's staged lines, kept staged and unread until
    # round 68's rules were frozen at 179e158, then scored once on them): 28/32 = 87.5%
    # (unknown 9.4%), its record as a held-out set; a tuning set since round 69, whose rules
    # took it to 32/32.
    "tune66": (1.0, 0),
    # tune67 (30 logs, the odd half of h69a-d's staged lines, gathered while rounds 68's and
    # 69's rules were written, merged after round 69's froze at 5ce17bf and scored once on
    # them): 25/30 = 83.3% (unknown 13.3%), its record as a held-out set; a tuning set since
    # round 70, whose rules took it to 29/30. Left: tkuanlun350/3DUnet-Tensorflow-Brats18#25,
    # TF's refused start-up allocations alone (round 6: no OOM, no batch size changes them).
    "tune67": (0.966, 1),
    # tune68 (27 logs, the even half of h69a-d's staged lines, kept staged and unread until
    # round 70's rules were frozen at 69c2e0d, then scored once on them): 20/27 = 74.1%
    # (unknown 18.5%), its record as a held-out set; a tuning set since round 71, whose rules
    # took it to 27/27.
    "tune68": (1.0, 0),
    # tune69 (29 logs gathered by three helpers while round 71's rules were written, merged
    # after they froze at 48d8569 and scored once on them): 25/29 = 86.2% (unknown 10.3%), its
    # record as a held-out set; a tuning set since round 72, whose rules took it to 28/29.
    # Left as it reads: google-research/bert#57, a placeholder init_checkpoint path labelled a
    # user error and read as a checkpoint error.
    "tune69": (0.965, 0),
    # tune70 (12 logs gathered by two helpers on round 73's last look-ups, merged after round
    # 72's rules froze at 71c3b49 and scored once on them): 12/12 (unknown 0), its record as a
    # held-out set; a tuning set since round 74, with nothing to write from.
    "tune70": (1.0, 0),
    # tune71 (40 logs, one pair of round 74's eight helpers, not split, merged after the rules
    # froze at 2ae13e7 and scored once on them): 36/40 = 90.0% (unknown 10.0%), its record as a
    # held-out set; a tuning set since round 74, whose rules took it to 40/40.
    "tune71": (1.0, 0),
    # tune72 (27 logs, one pair of round 74's eight helpers, not split, kept staged and unread
    # until round 74's rules froze at 7b2b271, then scored once on them): 24/27 = 88.9%
    # (unknown 7.4%), its record as a held-out set; a tuning set since round 75, whose rules
    # took it to 26/27. Left as it reads: google-research/timesfm#95, msgpack's "ExtraData" on
    # a Flax checkpoint, labelled a checkpoint error and read as unknown.
    "tune72": (0.962, 1),
    # tune73 (40 logs, one pair of round 74's eight helpers, not split, kept staged and unread
    # until round 75's rules froze at ad02b5a, then scored once on them): 31/40 = 77.5%
    # (unknown 20.0%), its record as a held-out set; a tuning set since round 76, whose rules
    # took it to 40/40.
    "tune73": (1.0, 0),
    # tune74 (38 logs, the last pair of round 74's eight helpers, not split, kept staged and
    # unread until round 76's rules froze at 8a2704b, then scored once on them): 31/38 = 81.6%
    # (unknown 18.4%), its record as a held-out set; a tuning set since round 77, whose rules
    # took it to 37/38; 38/38 since round 85 (CharlesShang/TFFRCNN#68, TF 1.x's "Resource
    # exhausted: OOM when allocating tensor" with its device cut off, after a BFC map).
    "tune74": (1.0, 0),
    # tune75 (27 logs, one pair of round 77's six helpers, not split, kept staged and unread
    # until round 77's rules froze at 8c423ca, then scored once on them): 24/27 = 88.9%
    # (unknown 7.4%), its record as a held-out set; a tuning set since round 78, whose rules
    # took it to 27/27.
    "tune75": (1.0, 0),
    # tune76 (32 logs, one pair of round 77's six helpers, not split, kept staged and unread
    # until round 78's rules froze at 3865b6b, then scored once on them): 29/32 = 90.6%
    # (unknown 3.1%), its record as a held-out set; a tuning set since round 79, whose rules
    # took it to 31/32. Left as it reads: derrian-distro/LoRA_Easy_Training_Scripts#170,
    # sd-scripts' "NaN detected in latents" while caching, labelled a divergence, a user error.
    "tune76": (0.968, 0),
    # tune77 (29 logs, the last pair of round 77's six helpers, not split, kept staged and
    # unread until round 79's rules froze at b7c5444, then scored once on them): 21/29 = 72.4%
    # (unknown 17.2%), its record as a held-out set; a tuning set since round 80, whose rules
    # took it to 29/29 (its two host OOMs, read as device OOMs once, read as host memory).
    "tune77": (1.0, 0),
    # tune78 (31 logs gathered by four helpers while round 80's rules were written, merged
    # after they froze at 516c753 and scored once on them): 25/31 = 80.6% (unknown 12.9%), its
    # record as a held-out set; a tuning set since round 82, whose rules took it to 30/31;
    # 31/31 since round 85 (jayparks/tf-seq2seq#11, TF 1.x's OOM with its device cut, after a
    # BFC map).
    "tune78": (1.0, 0),
    # tune79 (7 logs gathered by two helpers on the last session's last look-ups while round
    # 82's rules were written, merged after they froze at f20887a and scored once on them):
    # 7/7 (unknown 0), its record as a held-out set; a tuning set since round 84 (nothing to
    # write from it).
    "tune79": (1.0, 0),
    # tune80 (42 logs, two of round 84's eight helpers, not split, scored once on the rules of
    # the session's start, 653fd9a): 35/42 = 83.3% (unknown 9.5%), its record as a held-out
    # set; a tuning set since round 85, whose rules took it to 42/42.
    "tune80": (1.0, 0),
    # tune81 (34 logs, two of round 84's eight helpers, not split, kept staged and unread
    # until round 85's rules froze at 53fc41d, then scored once on them): 30/34 = 88.2%
    # (unknown 5.9%), its record as a held-out set; a tuning set since round 87, whose rules
    # took it to 33/34. Left as it reads: google-deepmind/searchless_chess#9, JAX's pytree
    # "Dict key mismatch" on a restore, labelled a checkpoint error, a user error.
    "tune81": (0.97, 0),
    # tune82 (41 logs, two of round 84's eight helpers, not split, kept staged and unread
    # until round 87's rules froze at 1846d02, then scored once on them): 33/41 = 80.5%
    # (unknown 14.6%), its record as a held-out set; a tuning set since round 89, whose rules
    # took it to 41/41 (its host OOM, read as a device OOM once, read as host memory).
    "tune82": (1.0, 0),
    # tune83 (36 logs, the last two of round 84's eight helpers, not split, kept staged and
    # unread until round 89's rules froze at 5cbaf06, then scored once on them): 28/36 = 77.8%
    # (unknown 13.9%), its record as a held-out set; a tuning set since round 91, whose rules
    # took it to 34/36. Left as they read (unknown): ArjunaCluster/ArjunaUsers#48, srun's
    # "task 0: Killed", and PaddlePaddle/Paddle#18232, a SIGSEGV in ncclCommInitAll.
    "tune83": (0.944, 2),
    # tune84 (33 logs, two of round 91's four helpers, not split, gathered while round 91's
    # rules were written, merged after they froze at 7702163 and scored once on them): 24/33 =
    # 72.7% (unknown 15.2%), its record as a held-out set; a tuning set since round 93, whose
    # rules took it to 32/33 (its device OOM, read as host memory once, read as the device's).
    # Left as it reads: ray-project/ray#41608, XGBoost's "Opening .../model.json failed" on a
    # resume, labelled a checkpoint error, a user error.
    "tune84": (0.969, 0),
    # tune85 (21 logs, the other two of round 91's four helpers, not split, kept staged and
    # unread until round 93's rules froze at 9185a8e, then scored once on them): 18/21 = 85.7%
    # (unknown 14.3%), its record as a held-out set; a tuning set since round 95, whose rules
    # took it to 20/21. Left as it reads: BVLC/caffe#1086, Caffe's "File not found" under
    # ReadProtoFromBinaryFile on a resume, labelled a checkpoint error, unknown.
    "tune85": (0.952, 1),
    # tune86 (14 logs, two helpers on the last look-ups of round 89's sitting, not split,
    # gathered while round 93 and 95's rules were written, merged after they froze at c0684b6
    # and scored once on them): 13/14 = 92.9% (unknown 7.1%), its record as a held-out set; a
    # tuning set since round 97, which wrote no rule from it. Left as it reads:
    # fizyr/keras-retinanet#1462, Keras's "Your input ran out of data; interrupting training",
    # labelled a user error, unknown (tests/test_classify_round97.py says why).
    "tune86": (0.928, 1),
    # tune87 (92 logs, two of four helpers in round 97's sitting, not split, merged after round
    # 97's change froze at 25091b0 and scored once on it): 57/92 = 62.0% (unknown 37.0%), its
    # record as a held-out set; 32 of its logs are cut before the line that names the cause
    # (the corpus README lists them), 1 of them right. A tuning set since round 99, whose
    # rules took it to 59/92; the other 33 misses are logs cut before that line
    # (tests/test_classify_round99.py).
    "tune87": (0.641, 32),
    # tune88 (58 logs, the other two of round 97's four helpers, not split, kept staged and
    # unread until round 99's rules froze at c34cf87, then scored once on them): 55/58 = 94.8%
    # (unknown 3.4%), its record as a held-out set; a tuning set since round 101, whose rules
    # took it to 57/58. Left as it reads: facebookresearch/detectron2#1831, losses growing
    # large but finite, cut before detectron2's FloatingPointError, unknown.
    "tune88": (0.982, 1),
    # tune89 (77 logs, two helpers on round 97's last look-ups, not split, merged after round
    # 101's rules froze at 68282fa and scored once on them): 52/77 = 67.5% (unknown 22.1%), its
    # record as a held-out set; 11 of its logs are cut before the line that names the cause
    # (the corpus README lists them). A tuning set since round 103, whose rules took it to
    # 56/77 (unknown 14); tests/test_classify_round103.py names the misses left as they read.
    "tune89": (0.727, 14),
    # tune90 (51 logs, two of round 103's four helpers, not split, merged after round 103's
    # rules and the collector-time change froze at 855ec9d and scored once on them): 45/51 =
    # 88.2% (unknown 9.8%; host_oom precision 3/4), its record as a held-out set. A tuning set
    # since round 105, whose rules took it to 51/51 (tests/test_classify_round105.py).
    "tune90": (1.0, 0),
    # tune91 (80 logs, the other two of round 103's four helpers, not split, merged after round
    # 103's rules and the collector-time change froze at 855ec9d and scored once on them):
    # 76/80 = 95.0% (unknown 3.8%), its record as a held-out set, the first fresh set to meet
    # the accuracy target. A tuning set since round 107, whose rules took it to 80/80
    # (tests/test_classify_round107.py).
    "tune91": (1.0, 0),
    # tune92 (48 logs, two helpers on the less-visited corners of round 103's sitting, not
    # split, merged after round 105's rules froze at 81c8bb4 and scored once on them): 42/48 =
    # 87.5% (unknown 8.3%), its record as a held-out set. A tuning set since round 108, whose
    # rules took it to 48/48 (tests/test_classify_round108.py).
    "tune92": (1.0, 0),
    # tune93 (63 logs, two of round 109's six helpers, not split, merged after round 108's
    # rules froze at 48b2005 and scored once on them): 51/63 = 81.0% (unknown 11.1%), its
    # record as a held-out set. A tuning set since round 110, whose rules took it to 63/63
    # (tests/test_classify_round110.py).
    "tune93": (1.0, 0),
    # tune95 (42 logs, two of round 109's six helpers on the less-visited corners, not split,
    # merged after round 108's rules froze at 48b2005 and scored once on them): 39/42 = 92.9%
    # (unknown 7.1%), its record as a held-out set. A tuning set since round 112 (tune94 is
    # kept for heldout95, still held out), whose rules took it to 42/42
    # (tests/test_classify_round112.py).
    "tune95": (1.0, 0),
    # tune98 (74 logs, two of round 113's six helpers, not split, scored once on the rules at
    # 505ebb4): 66/74 = 89.2% (unknown 9.5%), its record as a held-out set. A tuning set since
    # round 114, whose rules took it to 74/74 (tests/test_classify_round114.py).
    "tune98": (1.0, 0),
    # tune99 (93 logs, two of round 113's six helpers, not split, scored once on the rules at
    # 505ebb4): 89/93 = 95.7% (unknown 2.2%), its record as a held-out set. A tuning set since
    # round 114, whose rules took it to 92/93 (the one left: a TensorFlow OOM line naming no
    # device, which is not guessed).
    "tune99": (0.989, 1),
    # tune100 (46 logs, two helpers with 70 look-ups each, not split, scored once on round 114's
    # rules frozen at 2287f46): 43/46 = 93.5% (unknown 4.3%), its record as a held-out set. A
    # tuning set since round 116, whose rules took it to 45/46 (tests/test_classify_round116.py;
    # the one left: a label the corpus does not agree on, _IMPRECISE).
    "tune100": (0.978, 0),
    # tune103 (95 logs, two of round 117's eight helpers, not split, scored once on the rules at
    # 1359809): 90/95 = 94.7% (unknown 3.2%), its record as a held-out set. A tuning set since
    # round 118, whose rules took it to 91/95 (tests/test_classify_round118.py; left: two
    # TensorFlow OOMs naming no device, not guessed, and two "No CUDA GPUs are available"
    # labelled user errors where tune18's copy is cuda_fatal, a label the corpus does not agree
    # on).
    "tune103": (0.957, 2),
    # tune104 (90 logs, two of round 117's eight helpers, not split, scored once on the rules at
    # 1359809): 80/90 = 88.9% (unknown 8.9%), its record as a held-out set. A tuning set since
    # round 118, whose rules took it to 86/90 (left: three TensorFlow OOMs naming no device and
    # a DGL library check).
    "tune104": (0.955, 4),
    # tune108 (71 logs, two of round 120's eight helpers, not split, scored once on the rules at
    # b39b147): 68/71 = 95.8% (unknown 2.8%), its record as a held-out set, both targets met.
    # A tuning set since round 121, whose rules took it to 71/71
    # (tests/test_classify_round121.py).
    "tune108": (1.0, 0),
    # tune109 (51 logs, two of round 120's eight helpers, not split, scored once on the rules at
    # b39b147): 44/51 = 86.3% (unknown 11.8%), its record as a held-out set. A tuning set since
    # round 121, whose rules took it to 51/51.
    "tune109": (1.0, 0),
    # tune112 (65 logs, two of round 123's eight helpers, not split, scored once on the rules at
    # 600ad6e): 59/65 = 90.8% (unknown 9.2%), its record as a held-out set. A tuning set since
    # round 124, whose rules took it to 64/65 (tests/test_classify_round124.py; left: a
    # TensorFlow OOM naming no device).
    "tune112": (0.984, 1),
    # tune114 (84 logs, two of round 123's eight helpers, not split, scored once on the rules at
    # 600ad6e): 76/84 = 90.5% (unknown 6.0%), its record as a held-out set. A tuning set since
    # round 124, whose rules took it to 81/84 (left: a detector's abbreviated NaN loss fields,
    # two h5py missing-key messages).
    "tune114": (0.964, 3),
    # tune118 (73 logs, two of round 126's eight helpers, not split, scored once on the rules at
    # c4e2aa0): 65/73 = 89.0% (unknown 11.0%), its record as a held-out set. A tuning set since
    # round 127, whose rules took it to 69/73 (tests/test_classify_round127.py), and round
    # 128's metrics-table reader to 70/73 (tests/test_classify_round128.py; left: a cluster
    # wrapper's "returns: 137", and NaN losses in abbreviated fields and in decoded predictions).
    "tune118": (0.958, 3),
    # tune119 (91 logs, two of round 126's eight helpers, not split, scored once on the rules at
    # c4e2aa0): 74/91 = 81.3% (unknown 13.2%), its record as a held-out set. A tuning set since
    # round 127, whose rules took it to 86/91 (left: a TensorFlow OOM naming no device, two
    # NumPy archive lookups and an MXNet parameter copy whose words data and models share, a
    # traceback pasted indented as a whole).
    "tune119": (0.945, 2),
    # tune122 (53 logs, two of round 129's eight helpers, not split, scored once on the rules at
    # 124e869): 51/53 = 96.2% (unknown 3.8%), its record as a held-out set. A tuning set since
    # round 130, whose rules took it to 53/53 (tests/test_classify_round130.py).
    "tune122": (1.0, 0),
    # tune123 (69 logs, two of round 129's eight helpers, not split, scored once on the rules at
    # 124e869): 57/69 = 82.6% (unknown 14.5%), its record as a held-out set. A tuning set since
    # round 130, whose rules took it to 63/69 (left: two TensorFlow OOMs naming no device,
    # NumPy 2's warning about modules built for NumPy 1, a loss column with no header, a NaN
    # only in a tensor's debug print cut mid-line, a training loop's own crash banner).
    "tune123": (0.913, 6),
}


@pytest.mark.parametrize("group", list(_TUNING_FLOORS))
def test_tuning_set_accuracy_floor(group: str) -> None:
    floor, most_unknown = _TUNING_FLOORS[group]
    s = _score(group)
    assert s.accuracy >= floor and s.predicted("unknown") <= most_unknown


def test_tune4_accuracy_floor() -> None:
    """tune4 (122 logs gathered as heldout5 under the stricter protocol, never used to write
    rules until round 6): 68.0% (83/122), ``unknown`` 22.1%, on the rules current when it was
    gathered (main at 62832dc); 76.2% (unknown 17.2%) after round 5's rules; a tuning set
    since round 6."""
    assert _score("tune4").accuracy >= 0.76


def test_tune5_accuracy_floor() -> None:
    """tune5 (60 logs gathered as heldout6 after round 6's rules were frozen): 68.3% on the
    rules before round 6, 71.7% (unknown 21.7%) on round 6's, its record as a held-out set; a
    tuning set since round 7."""
    assert _score("tune5").accuracy >= 0.71


@pytest.mark.xfail(
    strict=True,
    reason="issue 12 target not met yet: see bench/RESULTS.md (classifier rounds 3-4)",
)
def test_heldout_meets_the_issue_targets() -> None:
    """The issue's targets: >= 95% accuracy on logs not tuned on, ``unknown`` below 3%."""
    s = _score("heldout")
    assert s.accuracy >= 0.95 and s.predicted("unknown") / s.n < 0.03


def _with_probable(groups: tuple[str, ...]) -> Score:
    return score([c for c in CASES if c.group in groups], with_probable=True)


#: The fresh sets of round 109 (gathered by six helpers while round 108's rules were written,
#: each from one pair, not split, scored once on the rules frozen at 48b2005): their records as
#: held-out sets, held as floors (accuracy, most ``unknown``), and with the probable kind read
#: for an ``unknown`` verdict (accuracy, most with no kind named).
_FRESH_RECORDS: dict[str, tuple[float, int, float, int]] = {
    "heldout95": (0.972, 1, 0.972, 1),  # 36/37 (unknown 2.7%); probable 36/37
    # round 111's fresh set (two helpers, the sitting's last 140 look-ups, scored once on the
    # rules frozen at 79686dd): 10/10, too few logs to say much (95% interval about 69-100%)
    "heldout97": (1.0, 0, 1.0, 0),
    # round 113's fresh set (two of six helpers, not split, scored once on the rules at
    # 505ebb4, the sitting's first commit; its siblings heldout99 and heldout100 are now tune98
    # and tune99)
    "heldout98": (0.942, 3, 0.957, 2),  # 66/70 (unknown 4.3%); probable 67/70
    # round 117's fresh sets (one pair of eight helpers each, not split, scored once on the
    # rules at 1359809, the sitting's first commit; their siblings heldout104 and heldout105 are
    # now tune103 and tune104)
    "heldout102": (0.861, 5, 0.972, 1),  # 31/36 (unknown 13.9%); probable 35/36
    "heldout103": (0.937, 1, 0.968, 0),  # 30/32 (unknown 3.1%); probable 31/32
    # round 119's fresh set (two helpers, the sitting's last 80 look-ups, scored once on round
    # 118's rules frozen at 37f2f5f): 15/15, too few logs to say much (95% interval ~78-100%)
    "heldout106": (1.0, 0, 1.0, 0),
    # round 120's fresh sets (one pair of eight helpers each, not split, scored once on the
    # rules at b39b147, the sitting's first commit; their siblings heldout109 and heldout110
    # are now tune108 and tune109)
    "heldout107": (0.771, 7, 0.828, 0),  # 27/35 (unknown 20.0%); probable 29/35
    "heldout108": (0.976, 1, 1.0, 0),  # 42/43 (unknown 2.3%); probable 43/43
    # round 122's fresh set (two helpers, the sitting's last 60 look-ups, scored once on round
    # 121's rules frozen at 04488ff): 19 logs, too few to say much (95% interval ~74-100%)
    "heldout111": (0.947, 1, 1.0, 0),  # 18/19 (unknown 5.3%); probable 19/19
    # round 123's fresh sets (one pair of eight helpers each, not split, scored once on the
    # rules at 600ad6e, the sitting's first commit; their siblings heldout113 and heldout115
    # are now tune112 and tune114)
    "heldout112": (0.937, 2, 0.968, 1),  # 30/32 (unknown 6.2%); probable 31/32
    "heldout114": (0.907, 5, 0.962, 2),  # 49/54 (unknown 9.3%); probable 52/54
    # round 125's fresh set (two helpers, the sitting's last 108 look-ups, scored once on round
    # 124's rules frozen at 3ccdb28): 18 logs, too few to say much (95% interval ~73-100%)
    "heldout116": (0.944, 1, 1.0, 0),  # 17/18 (unknown 5.6%); probable 18/18
    # round 126's fresh sets (one pair of eight helpers each, not split, scored once on the
    # rules at c4e2aa0, the sitting's first commit; their siblings heldout119 and heldout120
    # are now tune118 and tune119)
    "heldout117": (0.9, 3, 0.95, 1),  # 36/40 (unknown 7.5%); probable 38/40
    "heldout118": (0.923, 3, 0.953, 1),  # 60/65 (unknown 4.6%); probable 62/65
    # round 128's fresh set (two helpers, the sitting's last 76 look-ups, scored once on round
    # 127's rules frozen at 83ecd08): 27 logs, too few to say much (95% interval ~76-99%)
    "heldout121": (0.925, 2, 0.962, 0),  # 25/27 (unknown 7.4%); probable 26/27
    # round 129's fresh sets (one pair of eight helpers each, not split, scored once on the
    # rules at 124e869, the sitting's first commit; their siblings heldout123 and heldout124
    # are now tune122 and tune123)
    "heldout122": (0.85, 1, 0.9, 0),  # 17/20 (unknown 5.0%); probable 18/20
    "heldout125": (0.959, 0, 0.959, 0),  # 47/49 (unknown 0.0%); probable 47/49
    # round 131's fresh set (two helpers, the sitting's last 64 look-ups, scored once on round
    # 130's rules frozen at f8c0936): 15 logs, too few to say much (95% interval ~78-100%)
    "heldout126": (1.0, 0, 1.0, 0),  # 15/15 (unknown 0.0%); probable 15/15
}


@pytest.mark.parametrize("group", list(_FRESH_RECORDS))
def test_fresh_set_accuracy_floor(group: str) -> None:
    """Each fresh set's once-score, held as a floor: no later rule may lose what it read."""
    floor, most_unknown, _, _ = _FRESH_RECORDS[group]
    s = _score(group)
    assert s.accuracy >= floor and s.predicted("unknown") <= most_unknown


@pytest.mark.parametrize("group", list(_FRESH_RECORDS))
def test_fresh_set_with_the_probable_kind_holds_its_once_score(group: str) -> None:
    """Each fresh set read with the probable kind, at its once-score or better."""
    _, _, floor, most_unnamed = _FRESH_RECORDS[group]
    s = _with_probable((group,))
    assert s.accuracy >= floor and s.predicted("unknown") <= most_unnamed


def test_the_fresh_heldout95_meets_the_accuracy_and_unknown_targets() -> None:
    """The issue's accuracy targets on a fresh held-out set, scored once on frozen rules:
    >= 95% right and ``unknown`` below 3%. heldout95 met both on its once-score (36/37,
    unknown 1 of 37), the first fresh set to: 37 logs, so its two-sided 95% interval runs from
    about 86% to 100%. Which log was missed is not read (a held-out set)."""
    s = _score("heldout95")
    assert s.accuracy >= 0.95 and s.predicted("unknown") / s.n < 0.03


def test_the_fresh_heldout108_meets_the_accuracy_and_unknown_targets() -> None:
    """heldout108 met both of the issue's targets on its once-score (42/43, ``unknown`` 1 of
    43), on the rules frozen at b39b147: 43 logs, so its two-sided 95% interval runs from about
    88% to 100%. Which log was missed is not read (a held-out set)."""
    s = _score("heldout108")
    assert s.accuracy >= 0.95 and s.predicted("unknown") / s.n < 0.03


def test_the_fresh_heldout125_meets_the_accuracy_and_unknown_targets() -> None:
    """heldout125 met both of the issue's targets on its once-score (47/49, ``unknown`` 0), on
    the rules frozen at 124e869: 49 logs, so its two-sided 95% interval runs from about 86% to
    99.5%. Which logs were missed is not read (a held-out set)."""
    s = _score("heldout125")
    assert s.accuracy >= 0.95 and s.predicted("unknown") / s.n < 0.03


def test_heldout_sets_with_the_probable_kind_name_a_kind_for_97_percent() -> None:
    """What the user is told happened, reading an ``unknown`` verdict's probable kind
    (core/lexicon.py, built from the tuning splits only; never acted on), over the three
    held-out sets (296 logs): 288 right (97.3%), no kind named for 3 (1.0%; 4 from round 107
    until round 112's table, rebuilt with tune95, named a wrong kind for one); the rules alone:
    278 (93.9%), unknown 4.7%. Floors at those figures (289 and 2 until round 107 rebuilt the
    table with tune91, whose words moved one verdict's margin below the table's threshold and
    one wrong kind's too: the table is fitted to the tuning splits, never to these sets). The
    three sets have been scored every round since they were gathered (never read, never
    written from), so this figure leans on sets that are no longer fresh: the issue's targets
    are judged on the newest set, scored once (bench/RESULTS.md)."""
    s = _with_probable(HELDOUT[:3])
    assert s.accuracy >= 0.972 and s.predicted("unknown") / s.n < 0.03


#: Sets on which the probable kind names an OOM for a user error (a strict xfail each). None
#: now: tune17's one (found once on heldout18; Hydra's "Error locating target", whose words
#: weighed towards an OOM) is named by a rule since round 20; tune55's (found once on
#: heldout56: TF 1.x's "InvalidArgumentError (see above for traceback): Not enough time for
#: target transition sequence", a CTC loss on labels longer than their inputs) since round 58.
_PROBABLE_USER_AS_OOM: dict[str, str] = {}


@pytest.mark.parametrize("group", _groups(SPLITS, _PROBABLE_USER_AS_OOM))
def test_the_probable_kind_never_takes_a_user_error_for_an_oom(group: str) -> None:
    """A probable kind is told to the user, so it keeps the verdicts' first promise, on every
    set (the tuning sets too: the table is built from them, which does not make it so). (Its
    ladder-kind precision is not the verdicts' 0.98: on heldout7, scored once before it became
    tune6, a probable cuda_oom was right 10 times in 11 and a probable ds_build_error 7 in 8;
    it moves no ladder.)"""
    assert _with_probable((group,)).user_as_oom() == 0


def test_every_real_oom_traceback_is_fatal_at_line_time() -> None:
    """Each cuda_oom log whose output has the OOM exception line (at a line start, after a
    rank prefix) ends the attempt while streaming (P1 stays met) and is judged cuda_oom.
    fairseq's caught-and-logged OOMs are evidence, not kills; a line pasted as a Markdown
    quote ("> torch...") is not output."""
    from bench.p_classify import judge_case

    raised = re.compile(r"(?m)^(?:\[\w+\]:\s?)?(?:\w+\.)*OutOfMemoryError: CUDA out of memory")
    ooms = [c for c in CASES if c.label == "cuda_oom" and raised.search(c.text)]
    assert len(ooms) >= 8
    for case in ooms:
        v = judge_case(case)
        assert v.fatal_lines and v.kind == "cuda_oom", case.name


def test_every_log_read_a_line_at_a_time_gives_the_evidence_of_4_kib_pieces() -> None:
    """A live child's output reaches the pump a read at a time, and a line-buffered writer
    (Python's stderr on a pipe) ends most reads at a line's end; the corpus is scored in 4 KiB
    pieces of a saved file. Every log and mention keeps the same evidence both ways
    (tests/test_classify_chunking.py has the cases that once differed) and the same lines
    reported; the order of the reports is when each reading completed, which a look-ahead
    (a TensorFlow OOM line waiting for its device line) ties to the reads. A held-out log's
    name is not shown: only how many differ."""
    from tests.test_classify import stream

    def read(chunks: list[str]) -> tuple[object, ...]:
        kept, reported, lines = stream(chunks)
        return kept, sorted(reported, key=lambda e: (e.line_no, e.kind.value)), lines

    differ = [
        c.name if c.group not in HELDOUT else "(held out)"
        for c in CASES
        if read(c.text.splitlines(keepends=True))
        != read([c.text[i : i + 4096] for i in range(0, len(c.text), 4096)])
    ]
    assert not differ, differ


#: The time prefixes a log collector writes before every line (core/classify.py,
#: _COLLECTOR_PREFIX): kubectl logs --timestamps and docker logs -t, moreutils ts, journalctl's
#: short and short-iso formats, a time with a space, a bracketed time, a bare clock time.
_COLLECTOR_PREFIXES = (
    "2024-05-01T12:34:56.123456789Z ",
    "Nov 28 18:26:07 ",
    "Nov  3 18:26:07 gpu-node-3 python3[12345]: ",
    "2026-11-28T18:26:07+0000 gpu-node-3 python3[12345]: ",
    "2024-05-01 12:34:56 ",
    "[2024-05-01T12:34:56.123Z] ",
    "12:34:56.789 ",
)


def test_every_verdict_holds_with_a_collector_time_on_every_line() -> None:
    """A log given to ``dsguard explain`` may have been saved through a collector that puts a
    time before every line: every log, mention and GPUAlert log gives the same verdict with
    one (a different form each line, all seven at every line position over the corpus). Only
    the verdict is compared: an exception line after a time no traceback header vouches for
    never ends an attempt at once (tests/test_classify_collector.py). A held-out log's name is
    not shown: only how many differ."""
    from bench.p_classify import judge_case

    def stamped(text: str) -> str:
        lines = text.split("\n")
        n = len(_COLLECTOR_PREFIXES)
        out = [_COLLECTOR_PREFIXES[i % n] + line for i, line in enumerate(lines[:-1])]
        return "\n".join([*out, lines[-1] and _COLLECTOR_PREFIXES[0] + lines[-1]])

    differ = [
        c.name if c.group not in HELDOUT else "(held out)"
        for c in [*CASES, *gpualert_cases()]
        if judge_case(c).kind != judge_case(dataclasses.replace(c, text=stamped(c.text))).kind
    ]
    assert not differ, differ


def test_external_gpualert_set_never_tuned_on() -> None:
    """GPUAlert's labelled corpus, scored as an external set: no user error taken for an OOM,
    the ladder kinds precise, every failure that did not exit 0 classified right but one
    (a state_dict load error GPUAlert labels runtime_error and dsguard checkpoint_error)."""
    cases = gpualert_cases()
    if not cases:
        pytest.skip("tests/data/external/gpualert not present")
    s = score(cases)
    assert s.user_as_oom() == 0
    for kind in LADDER_KINDS:
        p = s.precision(kind)
        assert p is None or p >= 0.98, (kind, p)
    failed = score([c for c in cases if c.exit_code != 0])
    assert failed.n - failed.correct <= 1, failed.misses
