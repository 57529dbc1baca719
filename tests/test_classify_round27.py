"""Issue 12, round 27: rules written from ``tune24`` (gathered as ``heldout25``), each from the
code that prints the message: legacy TH's and CuPy's allocators, a traceback pasted as one
line, an exception run onto its frame's echoed source, ROCm's hipified kernel sources, torch
1.13-2.1's spelling of the NCCL unique-id store error, ssh's name resolution, Mozilla TTS's NaN
guard, Orbax's restore, accelerate's config file, DeepSpeed's parallel groups, and a policy's
Normal sampled with a NaN scale. Each positive case fails on the rules before round 27; the
near misses pass before and after. (TensorFlow's start-up "failed to allocate ... from device:
CUDA_ERROR_OUT_OF_MEMORY" stays no evidence, as round 6 decided: two tune logs that died after
it are left to the probable kind, which tells the user and moves no ladder.)
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TH's THAlloc, as fastai's docs quote it (torch 1.0 nightly)
        (
            "RuntimeError: $ Torch: not enough memory: you tried to allocate 64GB. Buy new RAM! "
            "at /opt/conda/conda-bld/pytorch-nightly_1540719301766/work/aten/src/TH/"
            "THGeneral.cpp:204",
            K.HOST_OOM,
        ),
        # CuPy >= 7 (cupy/cuda/memory.pyx OutOfMemoryError) and before (Chainer's reprint)
        (
            "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes "
            "(allocated so far: 15,032,385,536 bytes).",
            K.CUDA_OOM,
        ),
        (
            "Exception in main training loop: out of memory to allocate 8589934592 bytes (total "
            "12884901888 bytes)",
            K.CUDA_OOM,
        ),
        # a whole traceback on one line: the frames and the exception follow the header
        (
            'Traceback (most recent call last): File "train.py", line 90, in <module> '
            'torch.save(state, path) File "/usr/lib/python3/dist-packages/torch/serialization.py'
            '", line 440, in save return _save(obj, f)RuntimeError: [enforce fail at '
            "inline_container.cc:337] . unexpected pos 1794880 vs 1794768",
            K.DISK_FULL,
        ),
        # the exception run onto its frame's echoed source (stderr interleaving)
        (
            "Traceback (most recent call last):\n"
            '  File "TTS/bin/train_tts.py", line 700, in <module>\n'
            "    main(args)RuntimeError:  [!] NaN loss with postnet_loss.\n",
            K.LOSS_DIVERGENCE,
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "train.py", line 12, in <module>\n'
            "    trainer.fit(model)torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "2.00 GiB\n",
            K.CUDA_OOM,
        ),
        # ROCm's hipified sources
        (
            "csrc/transformer/inference/csrc/pt_binding_hip.hip:1021:12: error: use of "
            "undeclared identifier 'rocblas_gemm_strided_batched_ex'",
            K.DS_BUILD_ERROR,
        ),
        # ProcessGroupNCCL.cpp broadcastUniqueNCCLID, torch 1.13-2.1 (rank 3's view)
        (
            "RuntimeError: [3] is setting up NCCL communicator and retreiving ncclUniqueId from "
            "[0] via c10d key-value store by key '0', but store->get('0') got error: Connection "
            "reset by peer",
            K.NCCL_ERROR,
        ),
        # ssh.c, a hostfile's name the resolver does not know
        (
            "worker-1: ssh: Could not resolve hostname worker-1: Temporary failure in name "
            "resolution",
            K.NCCL_ERROR,
        ),
        # Orbax's restore check, as its users' docs quote it
        (
            "ValueError: User-provided restore item and on-disk value metadata tree structures "
            "do not match:\n{'opt_state': [None, Diff(lhs=<class 'optax._src.base.EmptyState'>,"
            " rhs=<class 'dict'>)]}",
            K.CHECKPOINT_ERROR,
        ),
        # ... and a restore that fails inside Orbax, whatever its message
        (
            "Traceback (most recent call last):\n"
            '  File "/app/train.py", line 88, in <module>\n'
            "    state = mngr.restore(step)\n"
            '  File "/usr/lib/python3.10/site-packages/orbax/checkpoint/checkpoint_manager.py", '
            "line 1120, in restore\n"
            "    restored = self._checkpointer.restore(restore_directory, args=args)\n"
            '  File "/usr/lib/python3.10/site-packages/orbax/checkpoint/type_handlers.py", line '
            "921, in deserialize\n"
            "    raise ValueError(f'Sharding of jax.Array cannot be None.')\n"
            "ValueError: Sharding of jax.Array cannot be None.",
            K.CHECKPOINT_ERROR,
        ),
        # accelerate's own config file (a key another tool's config carries)
        (
            "ValueError: The config file at /root/.cache/huggingface/accelerate/default_config."
            "yaml had unknown keys (['dynamo_backend']), please try upgrading your `accelerate` "
            "version or fix (and potentially remove) these keys from your config file.",
            K.DS_CONFIG_ERROR,
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "/opt/bin/accelerate", line 8, in <module>\n'
            "    sys.exit(main())\n"
            '  File "/opt/lib/python3.10/site-packages/accelerate/commands/launch.py", line 921, '
            "in _validate_launch_command\n"
            "    defaults = load_config_from_file(args.config_file)\n"
            '  File "/opt/lib/python3.10/site-packages/accelerate/commands/config/config_args.py"'
            ", line 110, in process_config\n"
            '    raise ValueError("A `distributed_type` must be specified in the config file.")\n'
            "ValueError: A `distributed_type` must be specified in the config file.",
            K.DS_CONFIG_ERROR,
        ),
        # DeepSpeed's expert-parallel group larger than the world
        (
            '  File "/env/lib/python3.11/site-packages/deepspeed/utils/groups.py", line 60, in '
            "_ensure_divisibility\n"
            "    assert numerator % denominator == 0, '{} is not divisible by {}'.format("
            "numerator, denominator)\n"
            "AssertionError: 12 is not divisible by 8",
            K.DS_CONFIG_ERROR,
        ),
        # rsl_rl's PPO sampling actions with a NaN std (HybridRobotics/whole_body_tracking#33)
        (
            "Traceback (most recent call last):\n"
            '  File "/home/robot/lib/python3.10/site-packages/rsl_rl/algorithms/ppo.py", line '
            "260, in update\n"
            "    self.policy.act(obs_batch, masks=masks_batch, hidden_states=hid_states_batch[0])"
            "\n"
            '  File "/home/robot/lib/python3.10/site-packages/rsl_rl/modules/actor_critic.py", '
            "line 122, in act\n"
            "    return self.distribution.sample()\n"
            '  File "/home/robot/lib/python3.10/site-packages/torch/distributions/normal.py", '
            "line 73, in sample\n"
            "    return torch.normal(self.loc.expand(shape), self.scale.expand(shape))\n"
            "RuntimeError: normal expects all elements of std >= 0.0",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round27_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # TH's other check is an overflow, not memory
        ("RuntimeError: $ Torch: invalid memory size -- maybe an overflow?", K.HOST_OOM),
        # the raise statement echoed as a frame's source is no exception of its own
        (
            "Traceback (most recent call last):\n"
            '  File "/content/TTS/tts/layers/losses.py", line 398, in forward\n'
            '    raise RuntimeError(f" [!] NaN loss with {key}.")\n',
            K.LOSS_DIVERGENCE,
        ),
        # a git host over ssh is a clone, not the launcher reaching its workers
        (
            "ssh: Could not resolve hostname github.com: Temporary failure in name resolution\n"
            "fatal: Could not read from remote repository.",
            K.NCCL_ERROR,
        ),
        # Orbax's save side is not a restore
        (
            "Traceback (most recent call last):\n"
            '  File "/app/train.py", line 90, in <module>\n'
            "    mngr.save(step, args=ocp.args.StandardSave(state))\n"
            '  File "/usr/lib/python3.10/site-packages/orbax/checkpoint/checkpoint_manager.py", '
            "line 1301, in save\n"
            "    raise ValueError(f'Checkpoint for step {step} already exists.')\n"
            "ValueError: Checkpoint for step 1000 already exists.",
            K.CHECKPOINT_ERROR,
        ),
        # a script's own torch.normal with a negative std it made (wbw520/MTUNet#1)
        (
            "Traceback (most recent call last):\n"
            '  File "/content/MTUNet/model/scouter/scouter_attention.py", line 23, in __init__\n'
            "    self.initial_slots = nn.Parameter(torch.normal(mu, sigma))\n"
            "RuntimeError: normal expects all elements of std >= 0.0",
            K.LOSS_DIVERGENCE,
        ),
        # DeepSpeed's groups asked for before they exist: the script's order, not a config
        (
            '  File "/env/lib/python3.11/site-packages/deepspeed/utils/groups.py", line 666, in '
            "_get_expert_parallel_group\n"
            "    assert _EXPERT_PARALLEL_GROUP is not None, 'Warning! Process group not "
            "initialized'\n"
            "AssertionError: Warning! Process group not initialized",
            K.DS_CONFIG_ERROR,
        ),
    ],
)
def test_round27_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_a_one_line_traceback_is_read_once() -> None:
    """The exception after a one-line traceback's header is the evidence, reported once."""
    text = (
        'Traceback (most recent call last): File "main.py", line 184, in <module> '
        "pickle.dump(img_list, img_f)OSError: [Errno 28] No space left on device\n"
    )
    v = classify_text(text, exit_code=1)
    assert v is not None and v.kind is K.DISK_FULL
    assert sum("Errno 28" in line for line in v.evidence) == 1
