"""Issue 12, round 21: rules written from ``tune18`` (gathered as ``heldout19``), each from the
code that prints the message: SpeechBrain's warning for a non-finite parameter, DeepSpeed's
checkpoint reader finding no ZeRO shards, torch finding no GPU, cuDNN failures as torch 0.3/0.4
raised them, NCCL 2.0-2.3's untagged socket failures, and a lower-case "killed" alone on its
line. Each positive case fails on the rules before round 21; the near misses pass before and
after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text, rank_exit_from_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # speechbrain/core.py check_loss_isfinite (speechbrain#2031)
        (
            "2023-06-14 13:04:41,744 - speechbrain.core - WARNING - Parameter is not finite: "
            "Parameter containing:\n"
            "tensor([nan, nan, nan,  ..., nan, nan, nan], device='cuda:0',\n"
            "       requires_grad=True)",
            K.LOSS_DIVERGENCE,
        ),
        # deepspeed/utils/zero_to_fp32.py get_checkpoint_files (InternLM/xtuner#674)
        (
            "    raise FileNotFoundError(f\"can't find {glob_pattern} files in directory "
            "'{checkpoint_dir}'\")\n"
            "FileNotFoundError: can't find *_optim_states.pt files in directory "
            "'/root/autodl-tmp/llava-llama-3-8b-v1_1'",
            K.CHECKPOINT_ERROR,
        ),
        # torch CUDA init with no visible GPU (jiaw-z/CoR-GS#23)
        (
            '  File "./torch/cuda/__init__.py", line 293, in _lazy_init\n'
            "    torch._C._cuda_init()\n"
            "RuntimeError: No CUDA GPUs are available",
            K.CUDA_FATAL,
        ),
        # torch 0.4's THCUDNN_CHECK (pytorch/pytorch#5962) and 0.3's CuDNNError
        (
            '  File "torch/nn/functional.py", line 90, in conv2d\n'
            "    return f(input, weight, bias)\n"
            "RuntimeError: CUDNN_STATUS_INTERNAL_ERROR",
            K.CUDA_FATAL,
        ),
        ("torch.backends.cudnn.CuDNNError: 8: CUDNN_STATUS_EXECUTION_FAILED", K.CUDA_FATAL),
        # NCCL 2.x's untagged debug lines (horovod/horovod#210) ...
        (
            "ml-gpu-ser015:2123:2230 [3] include/socket.h:194 WARN Call to recv failed : "
            "Connection reset by peer\n"
            "ml-gpu-ser015:2123:2230 [3] INFO transport/net_ib.cu:555 -> 2\n"
            "ml-gpu-ser015:2123:2230 [3] INFO bootstrap.cu:169 -> 2",
            K.NCCL_ERROR,
        ),
        # ... and socket.h's failed connect
        (
            "node2:4242:4300 [0] include/socket.h:345 WARN Net : Connect to 10.0.0.7<43129> "
            "failed : No route to host",
            K.NCCL_ERROR,
        ),
    ],
)
def test_round21_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_a_lower_case_killed_alone_on_its_line_is_a_sigkill() -> None:
    """athena-team/athena#233: a 2 GB host, the training's last output, then "killed"."""
    text = (
        ">>>>> start training in epoch 0\n"
        "please be patient, enable tf.function, it takes time ...\n"
        "killed\n"
    )
    assert rank_exit_from_text(text.splitlines()) == -9
    v = classify_text(text, exit_code=None)
    assert v is not None and v.kind is K.HOST_OOM


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # NCCL 2.x warning that an absent InfiniBand library is not loaded: harmless
        (
            "node2:4242:4300 [0] misc/ibvwrap.cu:63 WARN Failed to open libibverbs.so[.1]\n",
            K.NCCL_ERROR,
        ),
        # "killed" in a sentence is not the shell's notice
        ("2 stale workers were killed before the restart\n", K.HOST_OOM),
        ("killed workers: 0\n", K.HOST_OOM),
        # a non-finite *loss* warning names nothing by this rule (SpeechBrain's own text
        # before the parameters; its patience error has its own rule)
        (
            "speechbrain.core - WARNING - Loss is tensor(12.5, device='cuda:0').\n",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round21_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_cudnn_alloc_failed_in_the_old_form_stays_an_oom() -> None:
    assert kind("RuntimeError: CUDNN_STATUS_ALLOC_FAILED") is K.CUDA_OOM
