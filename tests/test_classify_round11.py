"""Issue 12, round 11: rules written from ``tune8`` (gathered as ``heldout9``), each from the
code that prints the message (macOS's shells, mshadow's and dmlc's CUDA_CALL, a step-led
row of values that are all NaN, DeepSpeed using a config value that is a string where it
needs a number). Each positive case fails on the rules before round 11; the near misses
pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind


def test_macos_killed_9_is_a_sigkill() -> None:
    """bash and zsh on macOS name the signal after the word: "Killed: 9"."""
    text = (
        "W0911 14:03:35.855503 4568733120 dataset_builder.py:83] num_readers has been reduced"
        " to 1 to match input file shards.\n"
        "Killed: 9\n"
    )
    assert kind(text) is K.HOST_OOM


def test_mshadow_cuda_call_out_of_memory_is_a_cuda_oom_at_line_time() -> None:
    """MXNet's ``CUDA_CALL``: ``CHECK_EQ(e, cudaSuccess) << "CUDA: " <<
    cudaGetErrorString(e)``, thrown as a dmlc::Error; the abort after it is its after-effect."""
    text = (
        "terminate called after throwing an instance of 'dmlc::Error'\n"
        "  what():  [17:54:40] /build/3rdparty/mshadow/mshadow/./stream_gpu-inl.h:198: Check"
        " failed: e == cudaSuccess CUDA: out of memory\n"
        "\n"
        "Stack trace returned 9 entries:\n"
        "[bt] (0) /env/lib/python3.6/site-packages/mxnet/libmxnet.so(+0x42831a) [0x7fdf1fafd31a]\n"
        "Aborted (core dumped)\n"
    )
    assert kind(text) is K.CUDA_OOM
    oom = [ev for ev in evidence_of(text) if ev.kind is K.CUDA_OOM]
    assert oom and oom[0].fatal


@pytest.mark.parametrize(
    "row",
    [
        "76980 nan",  # a script's own print(step, loss)
        "2000      [nan]         [nan]         [nan]",  # DeepXDE's loss table
        "  120 nan nan",
    ],
)
def test_a_step_row_of_nothing_but_nan_repeated_is_a_divergence_even_at_exit_0(row: str) -> None:
    text = f"{row}\n{row}\n"
    assert kind(text) is K.LOSS_DIVERGENCE
    v = classify_text(text, exit_code=0)
    assert v is not None and v.kind is K.LOSS_DIVERGENCE


@pytest.mark.parametrize(
    "row",
    [
        "76970 2.6265104",  # finite
        "2000      [5.47e+03]    [nan]         [1.00e+00]",  # one metric not computed yet
        "3    0.5213    NaN",  # pandas' missing cell
        "12 nan 0.31",
        "nan nan",  # no step first
        "epoch 3 nan",
    ],
)
def test_a_row_with_a_number_or_no_step_is_not_a_divergence(row: str) -> None:
    """At exit 0 these rows are a run that succeeded (no failure at all)."""
    assert classify_text(f"{row}\n{row}\n", exit_code=0) is None


_DS_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/w/train/dpo_train.py", line 308, in main\n'
    "    dpo_trainer = CustomDPOTrainer(\n"
    '  File "/env/lib/python3.9/site-packages/deepspeed/__init__.py", line 171, in initialize\n'
    "    engine = DeepSpeedEngine(args=args,\n"
    '  File "/env/lib/python3.9/site-packages/deepspeed/runtime/engine.py", line 946, in'
    " _scheduler_from_config\n"
    "    instantiated_scheduler = scheduler(self.optimizer, **scheduler_params)\n"
    '  File "/env/lib/python3.9/site-packages/deepspeed/runtime/lr_schedules.py", line 661, in'
    " __init__\n"
    "    self.warmup_num_steps = max(2, warmup_num_steps)\n"
)


@pytest.mark.parametrize(
    "message",
    [
        "TypeError: '>' not supported between instances of 'str' and 'int'",
        "TypeError: '<' not supported between instances of 'float' and 'str'",
        "TypeError: unsupported operand type(s) for -: 'float' and 'str'",
        "TypeError: unsupported operand type(s) for *: 'str' and 'int'",
    ],
)
def test_a_string_where_deepspeed_needs_a_number_is_a_config_error(message: str) -> None:
    """An "auto" left in the config where no Trainer fills it in reaches DeepSpeed's
    scheduler (LianjiaTech/BELLE#558) or engine (DeepSpeed#1270) as a string."""
    assert kind(_DS_TRACE + message) is K.DS_CONFIG_ERROR


def test_the_same_message_elsewhere_stays_the_scripts() -> None:
    """torch.optim comparing a learning rate YAML read as "1e-5" is the script's config; a
    TypeError in DeepSpeed about anything else, or a str against a list, names nothing."""
    torch_optim = (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 54, in train\n'
        '  File "/env/lib/python3.10/site-packages/torch/optim/adamw.py", line 29, in __init__\n'
        "    if not 0.0 <= lr:\n"
        "TypeError: '<=' not supported between instances of 'float' and 'str'\n"
    )
    assert kind(torch_optim) is K.USER_CODE_ERROR
    other = _DS_TRACE + "TypeError: 'NoneType' object is not subscriptable"
    assert kind(other) is K.USER_CODE_ERROR
    str_list = _DS_TRACE + "TypeError: '>' not supported between instances of 'str' and 'list'"
    assert kind(str_list) is K.USER_CODE_ERROR
    # a user whose home is /home/deepspeed: the script is theirs, not the package's
    users = (
        "Traceback (most recent call last):\n"
        '  File "/home/deepspeed/train.py", line 12, in <module>\n'
        "    if steps > 0:\n"
        "TypeError: '>' not supported between instances of 'str' and 'int'\n"
    )
    assert kind(users) is K.USER_CODE_ERROR


@pytest.mark.parametrize(
    "line",
    [
        "Killed: 9 stale workers before the restart",  # not alone on its line
        "ps: 4242 Killed: 9 (from a previous run)",
        "Check failed: e == cudaSuccess CUDA: invalid device ordinal",
    ],
)
def test_round11_near_misses(line: str) -> None:
    v = classify_text(line + "\n", exit_code=1)
    assert v is not None
    assert v.kind not in (K.HOST_OOM, K.CUDA_OOM, K.KILLED_EXTERNALLY)
