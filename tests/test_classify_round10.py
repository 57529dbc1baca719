"""Issue 12, round 10: rules written from ``tune7`` (gathered as ``heldout8``), each from the
code that prints the message (TensorFlow's check_numerics, DeepSpeed's
loss scaler and runner, guided-diffusion's fp16 trainer, the openai logger, loguru and MXNet
metric lines, Megatron's checkpoint loader, a wrapper reporting a child's return code, a CLI
that logs a caught ImportError). Each positive case fails on the rules before round 10; the
near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind


LINES = [
    # a wrapper's report of a child's SIGKILL under another name
    ("ERROR: error code -9", K.HOST_OOM),
    ("Process finished with exit code -9", K.HOST_OOM),
    ("worker 3 return code: -9", K.HOST_OOM),
    # DeepSpeed's runner checking its hosts over ssh
    (
        "subprocess.CalledProcessError: Command '['ssh deepspeed-helloworld-worker-0 hostname "
        "-I']' returned non-zero exit status 255.",
        K.NCCL_ERROR,
    ),
    # a NaN loss under a metric name that holds "loss", in several logging shapes
    ("2021-08-12 05:44:07,141 Epoch[1] Batch[7] Speed: 143.86 samples/sec,  IDLoss=nan,", None),
    (
        "2023-01-25 01:03:05.674 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | "
        "E104 iter[ 14/ 15] | [Loss] nan | [step]  1574 |",
        None,
    ),
    ("02:31:56: train iter: 100 loss_net: nan loss_scale: 785.4200 norm: nan", None),
    ("| loss          | nan       |", None),
    ("| loss                          | nan          |", None),  # padded to a long key
    ("Steps:   0%|▏     | 17/6000 [00:58<4:50:05,  2.91s/it, lr=0, noise_step_loss=nan]", None),
    # TensorFlow's numeric checks
    (
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Found Inf or NaN global "
        "norm. : Tensor had NaN values",
        K.LOSS_DIVERGENCE,
    ),
    ("InvalidArgumentError: loss : Tensor had Inf values", K.LOSS_DIVERGENCE),
    # guided-diffusion's fp16 scale (log2) below 0
    ("Found NaN, decreased lg_loss_scale to -16199.354", K.LOSS_DIVERGENCE),
    # DeepSpeed's scaler reaching its floor of 1, then a death nothing else explains
    (
        "[2025-08-27 10:12:25,030] [INFO] [loss_scaler.py:184:update_scale] [deepspeed] "
        "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1",
        K.LOSS_DIVERGENCE,
    ),
    # a CLI that logged a caught ImportError
    (
        "05/30 17:18:49 - mmengine - WARNING - WARNING: command error: 'cannot import name "
        "'packaging' from 'pkg_resources' (/r/site-packages/pkg_resources/__init__.py)'!",
        K.USER_CODE_ERROR,
    ),
]


@pytest.mark.parametrize(("line", "want"), LINES)
def test_round10_lines(line: str, want: FailureKind | None) -> None:
    """``None``: a NaN metric line, which is a divergence when the run repeats it (a single
    line may be a mention), so the line is given twice."""
    if want is None:
        assert kind(line + "\n" + line) is K.LOSS_DIVERGENCE
    else:
        assert kind(line) is want


def test_a_nan_metric_line_repeated_is_a_divergence_even_at_exit_0() -> None:
    """The prefixed metric names count for the diverged-run rule, which ends an attempt and
    never reports it as succeeded."""
    line = "2021-08-12 05:44:07,141 Epoch[1] Batch[7] Speed: 143.86 samples/sec,  IDLoss=nan,\n"
    v = classify_text(line * 2, exit_code=0)
    assert v is not None and v.kind is K.LOSS_DIVERGENCE


def test_a_cut_megatron_resume_traceback_is_a_checkpoint_error() -> None:
    """One rank's bare KeyError, another's traceback cut inside Megatron's load_checkpoint."""
    text = (
        "[default7]:[rank7]: KeyError: 'state'\n"
        "[default0]:[rank0]: Traceback (most recent call last):\n"
        '[default0]:[rank0]:   File "/opt/megatron-lm/megatron/training/training.py", line 1588,'
        " in setup_model_and_optimizer\n"
        "[default0]:[rank0]:     args.iteration, args.flops = load_checkpoint(\n"
        '[default0]:[rank0]:   File "/opt/megatron-lm/megatron/training/checkpointing.py", line'
        " 1818, in load_checkpoint\n"
        "[default0]:[rank0]:     optimizer.load_state_dict(state_dict['optimizer'])\n"
        '[default0]:[rank0]:   File "/opt/megatron-lm/megatron/core/optimizer/optimizer.py", line'
        " 1244, in load_state_dict\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_generic_error_raised_in_megatrons_loader_is_a_checkpoint_error() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/pretrain_gpt.py", line 354, in <module>\n'
        '  File "/w/megatron/checkpointing.py", line 560, in load_checkpoint\n'
        "    state_dict = _load_base_checkpoint(load_dir, rank0=False)\n"
        '  File "/w/megatron/checkpointing.py", line 530, in _load_base_checkpoint\n'
        "    iteration = state_dict['iteration']\n"
        "KeyError: 'iteration'\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_generic_error_raised_in_megatrons_dist_checkpointing_load_is_a_checkpoint_error() -> (
    None
):
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/megatron/core/dist_checkpointing/serialization.py", line 120, in load\n'
        "    sharded_state_dict = validate_sharded_objects_handling(sharded_strategy)\n"
        '  File "/w/megatron/core/dist_checkpointing/validation.py", line 88, in'
        " validate_sharding_integrity\n"
        "    raise CheckpointingException(f'Invalid access pattern for {shard}')\n"
        "megatron.core.dist_checkpointing.core.CheckpointingException: Invalid access pattern\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_the_same_error_in_megatrons_save_path_stays_the_scripts() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/megatron/checkpointing.py", line 300, in save_checkpoint\n'
        "    state_dict['args'] = args.to_dict()\n"
        "KeyError: 'args'\n"
    )
    assert kind(text) is K.USER_CODE_ERROR


def _evidence(line: str) -> list[tuple[FailureKind, bool]]:
    return [(ev.kind, ev.weak) for ev in evidence_of(line + "\n")]


def test_the_scaler_reaching_1_is_weak_and_a_scale_stuck_at_1_is_not() -> None:
    reached = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1"
    stuck = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1"
    assert _evidence(reached) == [(K.LOSS_DIVERGENCE, True)]
    assert _evidence(stuck) == [(K.LOSS_DIVERGENCE, False)]
    assert kind(reached + "\nKeyError: 'labels'") is K.USER_CODE_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # the usual scaler steps, a tracker's initial best value, a finite loss
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to "
        "16384",
        "best_val_loss = inf",
        "aux_loss_nan: 0 | skip_loss_nan_count: 0",
        "Epoch[1] Batch[6] Speed: 136.34 samples/sec,  IDLoss=70.405,",
        "| loss          | 0.0231    |",
        "Found NaN, decreased lg_loss_scale to 14.000",
        # other negative codes, and an ssh that failed for a non-connection reason
        "clBuildProgram failed: error code -11",
        "exit code -90",
        "subprocess.CalledProcessError: Command '['ssh w0 test -f x']' returned non-zero exit "
        "status 1.",
        # an import warning that is no error
        "UserWarning: cannot import name 'flash_attn_func' from 'flash_attn', using eager",
    ],
)
def test_round10_near_misses(line: str) -> None:
    v = classify_text(line + "\n" + line + "\n", exit_code=1)
    assert v is not None
    assert v.kind not in (K.LOSS_DIVERGENCE, K.HOST_OOM, K.NCCL_ERROR, K.CUDA_OOM)
    if "flash_attn" in line:
        assert v.kind is not K.USER_CODE_ERROR
