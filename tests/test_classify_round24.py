"""Issue 12, round 24: rules written from ``tune21`` (gathered as ``heldout22``), each from the
code that prints the message: Kaldi's CUDA error check, ssh failing to reach a host the
DeepSpeed runner launches on, torch.load's weights_only message cut to its last line, a
Megatron/DeepSpeed checkpoint shard that is missing, a trainer's "loss is not finite" guard,
the ultralytics training row with NaN losses, and slurmstepd unable to exec the step's
command. Each positive case fails on the rules before round 24; the near misses pass before
and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Kaldi's CU_SAFE_CALL (kaldi-asr/kaldi#2636) ...
        (
            "ERROR (nnet3-train[5.4]:CopyToVec():cu-vector.cc:899) cudaError_t 4 : "
            '"unspecified launch failure" returned from \'cudaMemcpy(dst->Data(), this->data_, '
            "sizeof(Real) * dim_, cudaMemcpyDeviceToHost)'\n\n[ Stack-Trace: ]",
            K.CUDA_FATAL,
        ),
        # ... and its out of memory
        (
            "ERROR (nnet3-chain-train[5.5]:MallocPitchInternal():cu-allocator.cc:112) "
            'cudaError_t 2 : "out of memory" returned from \'cudaMallocPitch(&ans, pitch, '
            "row_bytes, num_rows)'",
            K.CUDA_OOM,
        ),
        # ssh from the DeepSpeed runner through pdsh (deepspeedai/DeepSpeedExamples#894)
        ("localhost: ssh: connect to host localhost port 22: Connection refused", K.NCCL_ERROR),
        # torch.load's weights_only message, its last line only (allenai/open-instruct#673)
        (
            "[rank1]: Check the documentation of torch.load to learn more about types accepted "
            "by default with weights_only https://pytorch.org/docs/stable/generated/"
            "torch.load.html.\n"
            "[rank4]: Traceback (most recent call last):\n"
            '[rank4]:   File "/w/open_instruct/finetune.py", line 732, in main\n'
            "[rank4]:     accelerator.load_state(last_checkpoint_path)",
            K.CHECKPOINT_ERROR,
        ),
        # a Megatron checkpoint shard missing (NVIDIA/Megatron-LM#185)
        (
            "[Errno 2] No such file or directory: "
            "'checkpoints/gpt2_345m/iter_0006000/mp_rank_00/model_optim_rng.pt'",
            K.CHECKPOINT_ERROR,
        ),
        # 3D-R1's guard, its typo and all (AIGeeksGroup/3D-R1#16)
        (
            "Epoch [0/5]; Iter [0/9450]; Loss 10.08; LR 1.00e-06; Iter time 3.72\n"
            "Loss in not finite. Skip this training step.\n"
            "Loss in not finite. Terminate training.",
            K.LOSS_DIVERGENCE,
        ),
        # the ultralytics training row (ultralytics/ultralytics#19357)
        (
            "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
            "     91/300        17G        nan        nan        nan          2        640: "
            "100%|##########| 278/278 [02:11<00:00,  2.11it/s]",
            K.LOSS_DIVERGENCE,
        ),
        # slurmstepd (CSCfi/pytorch-ddp-examples#1)
        (
            "slurmstepd: error: execve(): torchrun: No such file or directory\n"
            "srun: error: g1301: task 0: Exited with exit code 2",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round24_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # a healthy ultralytics row
        (
            "     91/300        17G      1.234     0.8123      1.101          2        640: "
            "100%|##########| 278/278 [02:11<00:00,  2.11it/s]\n",
            K.LOSS_DIVERGENCE,
        ),
        # a missing file that is no checkpoint shard
        ("[Errno 2] No such file or directory: 'data/train.jsonl'\n", K.CHECKPOINT_ERROR),
        # ssh failing to resolve a git host is a clone, not the runner's reachability (the
        # name resolution of a launch host is, since round 27)
        (
            "ssh: Could not resolve hostname github-mirror: Name or service not known\n",
            K.NCCL_ERROR,
        ),
        # a loss that is finite, said in words
        ("INFO loss is finite again after the warm-up\n", K.LOSS_DIVERGENCE),
    ],
)
def test_round24_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
