"""Issue 12, round 20: rules written from ``tune17`` (gathered as ``heldout18``), each from the
code that prints the message: PySlowFast's NaN-loss guard, Hydra failing to import a config's
``_target_``, fish's notice of a job killed by SIGKILL, and a rank's line inside a paste that
was indented as a whole. Each positive case fails on the rules before round 20 (but Hydra's
later wording, an exception line, which is a guard); the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text, rank_exit_from_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # facebookresearch/SlowFast slowfast/utils/misc.py check_nan_losses (Buzz-Beater/LEMMA#5)
        (
            '  File "/w/LEMMA/utils/model_utils/misc.py", line 27, in check_nan_losses\n'
            '    raise RuntimeError("ERROR: Got NaN losses {}".format(datetime.now()))\n'
            "RuntimeError: ERROR: Got NaN losses 2021-10-28 23:20:46.797813",
            K.LOSS_DIVERGENCE,
        ),
        # Hydra 1.2's _resolve_target (ashleve/lightning-hydra-template#350) ...
        (
            "Error executing job with overrides: []\n"
            "Error locating target 'src.models.xxx_module.XXXLitModule', see chained exception "
            "above.\nfull_key: model\n\n"
            "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
            K.USER_CODE_ERROR,
        ),
        # ... and its later wording, raised as hydra.errors.InstantiationException (an
        # exception line, read as the user's before round 20 too: kept as a guard)
        (
            "hydra.errors.InstantiationException: Error locating target "
            "'src.datasets.drilling.get_loaders', set env var HYDRA_FULL_ERROR=1 to see chained "
            "stack trace.",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round20_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_hydra_target_whose_import_hit_a_build_error_stays_a_build_error() -> None:
    """The chained cause, printed above Hydra's summary with HYDRA_FULL_ERROR=1, outranks it."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/env/lib/python3.10/site-packages/hydra/_internal/utils.py", line 644, in '
        "_locate\n"
        "    obj = import_module(part0)\n"
        "RuntimeError: Error building extension 'fused_adam'\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "hydra.errors.InstantiationException: Error locating target 'src.models.Model', set "
        "env var HYDRA_FULL_ERROR=1 to see chained stack trace.\n"
    )
    assert kind(text) is K.DS_BUILD_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # fish-shell's notice for a job (Lightricks/ComfyUI-LTXVideo#254) ...
        "fish: Job 1, 'python main.py' terminated by signal SIGKILL (Forced quit)",
        # ... for the only job (no number) and for one process of a pipeline
        "fish: 'deepspeed train.py' terminated by signal SIGKILL (Forced quit)",
        "fish: Process 4242, 'python train.py' from job 1, 'python train.py | tee log' "
        "terminated by signal SIGKILL (Forced quit)",
    ],
)
def test_fish_reports_a_sigkill(line: str) -> None:
    assert rank_exit_from_text([line]) == -9
    text = "Requested to load LTXV\n" + line + "\n"
    # an unconfirmed SIGKILL walks the host-OOM ladder (issue 12's playbook)
    v = classify_text(text, exit_code=None)
    assert v is not None and v.kind is K.HOST_OOM


def test_fish_reports_another_signal_as_not_a_sigkill() -> None:
    line = "fish: Job 1, 'python main.py' terminated by signal SIGSEGV (Address boundary error)"
    assert rank_exit_from_text([line]) != -9


def test_a_ranks_line_in_a_paste_indented_as_a_whole_is_read() -> None:
    """A Markdown code block made by indenting every line 4 spaces (isaac-sim/IsaacLab#4011):
    the rank's own line is output, not an echoed source line."""
    text = (
        "    Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1902 (most recent call first):\n"
        "\n"
        "    Error executing job with overrides: []\n"
        "    [rank1]:[E1113 13:57:32.346752417 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA "
        "error: an illegal memory access was encountered\n"
        "    Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )
    assert kind(text) is K.CUDA_FATAL
    assert any(ev.rank == 1 and ev.kind is K.CUDA_FATAL for ev in evidence_of(text))


@pytest.mark.parametrize(
    "text",
    [
        # echoed source lines that hold the words stay source, not messages
        '  File "train.py", line 88, in step\n'
        '    logger.info("ERROR: Got NaN losses at Epoch {}".format(epoch))\n',
        "    raise InstantiationException(f\"Error locating target '{target}'\")\n",
        # fish's notice of a SIGTERM is not a SIGKILL
        "fish: Job 1, 'python main.py' terminated by signal SIGTERM (Polite quit request)\n",
    ],
)
def test_round20_near_misses(text: str) -> None:
    assert read_as(text) not in (K.LOSS_DIVERGENCE, K.USER_CODE_ERROR, K.CUDA_FATAL, K.HOST_OOM)
