"""Issue 12, round 5: rules written from ``tune3`` (gathered as ``heldout4``) and three known
defects. Every message below is copied from the framework source that raises it or from a
public issue thread (cited per case); each test fails without the change it covers.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import (
    FailureKind,
    StreamClassifier,
    classify_text,
)
from tests.test_classify_frames import GPT_NEOX_1043, REDET_60

K = FailureKind


def kinds_of(text: str) -> list[FailureKind]:
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    return [ev.kind for ev in sc.evidence]


# -- interleaved tracebacks without rank prefixes (defect c) ---------------------------------


def interleave(a: str, b: str, *, lag: int) -> str:
    """Two ranks' tracebacks written into one stream line by line, ``b`` starting ``lag``
    lines after ``a``: what two unprefixed ranks print when both fail at once."""
    la, lb = a.splitlines(), b.splitlines()
    out: list[str] = la[:lag]
    rest_a = la[lag:]
    for i in range(max(len(rest_a), len(lb))):
        out += rest_a[i : i + 1] + lb[i : i + 1]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("lag", [0, 1, 3])
def test_interleaved_tracebacks_are_each_attributed_by_their_frames(lag: int) -> None:
    """Two ranks raise deepspeed.initialize's config assert (EleutherAI/gpt-neox#1043) at
    once, lines interleaved: both exception lines are config errors. Before, the first
    exception line took every frame with it and the second rank's came out the script's
    own error."""
    text = interleave(GPT_NEOX_1043, GPT_NEOX_1043, lag=lag)
    assert text.count("Traceback (most recent call last)") == 2
    assert kinds_of(text) == [K.DS_CONFIG_ERROR, K.DS_CONFIG_ERROR]


def test_a_second_header_before_the_exception_line_keeps_the_first_tracebacks_frames() -> None:
    """A second rank's header printed between the first rank's last frame and its exception
    line (csuhan/ReDet#60's torch.load of a corrupt file on both ranks): the first one's
    frames were dropped at that header, and its RuntimeError read as the script's error."""
    lines = REDET_60.splitlines()
    text = "\n".join([*lines[:-1], lines[0], lines[-1], *lines[1:]]) + "\n"
    assert kinds_of(text) == [K.CHECKPOINT_ERROR, K.CHECKPOINT_ERROR]


def test_a_traceback_cut_before_its_exception_line_still_lends_no_frames() -> None:
    """A header far below an unfinished traceback starts afresh: the old frames must not
    explain an unrelated exception printed later (the reach limit still holds)."""
    head = "\n".join(GPT_NEOX_1043.splitlines()[:-1])  # cut before its exception line
    filler = "\n".join(f"step {i} loss 1.0" for i in range(60))
    text = (
        head
        + "\n"
        + filler
        + "\nTraceback (most recent call last):\n"
        + '  File "train.py", line 3, in <module>\n    x = cfg["lr"]\nKeyError: \'lr\'\n'
    )
    assert K.USER_CODE_ERROR in kinds_of(text)
    assert K.DS_CONFIG_ERROR not in kinds_of(text)


# -- DeepSpeed config errors by their messages --------------------------------------------


DS_CONFIG_LINES = [
    # accelerate utils/dataclasses.py DeepSpeedPlugin (zjunlp/KnowLM#87)
    "ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",
    # accelerate utils/dataclasses.py, quoted in prose (shibing624/MedicalGPT#288)
    "是用zero2进行pt时，出现ValueError: `--mixed_precision` arg cannot be set to `bf16` when "  # noqa: RUF001
    "`fp16` is set in the DeepSpeed config file.",
    # accelerate utils/dataclasses.py fill_match
    "ValueError: `optimizer.params.lr` not found in kwargs. Please specify `optimizer.params.lr`"
    " without `auto` (set to correct value) in the DeepSpeed config file or pass it in kwargs.",
    # accelerate accelerator.py _prepare_deepspeed
    "ValueError: At least one of the dataloaders passed to `accelerate.prepare()` has `None` as "
    "batch size. Please set an integer value in `train_micro_batch_size_per_gpu` in the "
    "deepspeed config file or assign integer value to `AcceleratorState().deepspeed_plugin."
    "deepspeed_config['train_micro_batch_size_per_gpu']`.",
    # DeepSpeed runtime/config_utils.py
    "ValueError: Duplicate keys in DeepSpeed config: ['train_batch_size']",
    # transformers modeling_utils.py from_pretrained (hiyouga/LlamaFactory#199)
    "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with "
    "passing a `device_map`.",
    # ... its message half, split from its name by another rank's output
    # (ymcui/Chinese-LLaMA-Alpaca#465)
    ": DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
    "`device_map`.ValueError",
    # transformers integrations/accelerate.py (5.x)
    "ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.",
    # DeepSpeed runtime/config.py, engine.py; accelerate utils/dataclasses.py
    "ValueError: gradient_allreduce_op='sum' is not supported with ZeRO stage 3",
    "AssertionError: Native DeepSpeed MoE is not supported with ZeRO Stage 3. Use AutoEP or "
    "choose ZeRO stage 1/2.",
    "NotImplementedError: MS-AMP is not supported for ZeRO Stage 3. Please use ZeRO Stage 0, 1, "
    "or 2 instead.",
    # DeepSpeed runtime/config.py, zero/config.py, precision_config.py, elasticity/config.py,
    # pasted without their traceback (deepspeed 0.19.8)
    "AssertionError: DeepSpeedConfig: Maximum supported ZeRO stage is 3",
    "AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled",
    "AssertionError: Either train_batch_size or train_micro_batch_size_per_gpu needs to be "
    "provided",
    "AssertionError: Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.",
    "AssertionError: Partial offloading only supported for ZeRO Stage 3.",
    "ValueError: fp16.loss_scale must be >= 0 (0 enables dynamic loss scaling)",
    "deepspeed.elasticity.config.ElasticityConfigError: Elasticity min_gpus cannot be greater "
    "than max_gpus, given min_gpus: 8, max_gpus: 4",
]


@pytest.mark.parametrize("line", DS_CONFIG_LINES, ids=[x[:50] for x in DS_CONFIG_LINES])
def test_deepspeed_config_messages(line: str) -> None:
    failure = classify_text(line + "\n", 1)
    assert failure is not None and failure.kind is K.DS_CONFIG_ERROR, failure


@pytest.mark.parametrize(
    "line",
    [
        # log lines that name the config are no failure (DeepSpeed's own start-up INFO lines)
        "[INFO] [config.py:1000:print] DeepSpeedEngine configuration: zero_enabled True",
        "Using the `WANDB_DISABLED` value in the DeepSpeed config file is deprecated",
        # (deepspeed.initialize's "Not sure how to proceed, we were given deepspeed configs in
        # the deepspeed arguments and deepspeed.initialize() function call" was here: only
        # that assert prints it, and since round 6 its words alone name the config, as its
        # frame already did; see tests/test_classify_round6.py)
    ],
)
def test_lines_that_only_mention_the_deepspeed_config(line: str) -> None:
    assert K.DS_CONFIG_ERROR not in kinds_of(line + "\n")


# -- other tune3 misses: general wordings, each from the code that prints it ------------------

BATCH_LINES: list[tuple[str, FailureKind | None]] = [
    # TensorFlow ResourceExhaustedError, GPU and host allocators (salesforce/ctrl#83; a gpt-2
    # TF fine-tune on CPU)
    (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[246534,1280] and type float on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc [Op:RandomStandardNormal]",
        K.CUDA_OOM,
    ),
    (
        "  (0) Resource exhausted: OOM when allocating tensor with shape[1024,50257] and type "
        "float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
        K.HOST_OOM,
    ),
    # cudaGetErrorString after a library's own words (junjie18/CMT#15; CTranslate2)
    (
        "cuda failed with error 2 out of memory. use CUDA_LAUNCH_BLOCKING=1 to get correct "
        "traceback.",
        K.CUDA_OOM,
    ),
    ("RuntimeError: CUDA failed with error out of memory", K.CUDA_OOM),
    # torch dataloader.py _try_get_data (facebookresearch/detectron2#384)
    ("`RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly`", K.HOST_OOM),
    # detectron2 engine/train_loop.py _write_metrics (csuhan/opendet2#29, retyped)
    ("Runtime Error: floatingPointError: Loss became infinite or NaN at iteration=166!",
     K.LOSS_DIVERGENCE),
    # Keras TerminateOnNaN (manishsoni1908/Mobilenet-ssd-keras#21)
    ("  3/234 [......] - ETA: 33:37:24 - loss: 44.4110Batch 3: Invalid loss, terminating "
     "training", K.LOSS_DIVERGENCE),
    ("  4/234 [......] - ETA: 25:09:00 - loss: inf", K.LOSS_DIVERGENCE),
    # load_state_dict's detail without its RuntimeError (zhangcheng828/MonoDetector#3)
    ('Unexpected key(s) in state_dict: "head.heatmap_head.1.weight_", "head.wh_head.1.bias_"',
     K.CHECKPOINT_ERROR),
    # torch/cuda/__init__.py _check_cubins (jiangyzy/GOAE#16) and 2.13's _warn_unsupported_code
    ("NVIDIA RTX A6000 with CUDA capability sm_86 is not compatible with the current PyTorch "
     "installation.", K.CUDA_FATAL),
    ("Your installed torch==2.13.0+cu126 does not include kernels for this GPU. Reinstall the "
     "same version against a CUDA build that does, e.g.:", K.CUDA_FATAL),
    # a VM or node taken away (mozilla/translations#964, kubeflow/trainer#999)
    ("Dec 17 16:03:58Z host-1 start-worker 2024/12/17 16:03:58 GCP Metadata Service says "
     "termination is imminent", K.KILLED_EXTERNALLY),
    ("Dec 17 16:04:09Z host-1 systemd-logind Power key pressed.", K.KILLED_EXTERNALLY),
    ("On google kubernetes engine, I am finding that TFJobs fail when a node running a worker "
     "is pre-empted.", K.KILLED_EXTERNALLY),
    ("  Message:  Pod was terminated in response to imminent node shutdown.",
     K.KILLED_EXTERNALLY),
    # orchestrators that killed a worker for host memory: Ray's memory monitor (its
    # OutOfMemoryError is host RAM, not CUDA), Kubernetes' OOMKilled and kubelet's eviction
    (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory.",
        K.HOST_OOM,
    ),
    ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor."
     "update_weights()", None),
    ("      Reason:       OOMKilled", K.HOST_OOM),
    ("  Message: The node was low on resource: memory. Container trainer was using 30Gi, which "
     "exceeds its request of 16Gi.", K.HOST_OOM),
    # batch schedulers: memory enforcement (host_oom, the CANCELLED line after it is its
    # consequence) and time/owner kills
    (
        "slurmstepd: error: Job 1785248 exceeded memory limit (105782124 > 104857600), being "
        "killed\nslurmstepd: error: Exceeded job memory limit\nslurmstepd: error: *** JOB "
        "1785248 ON pn052 CANCELLED AT 2025-12-01T22:13:00 ***",
        K.HOST_OOM,
    ),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code "
     "137.", K.HOST_OOM),
    ("=>> PBS: job killed: vmem 9542811648 exceeded limit 8589934592", K.HOST_OOM),
    ("=>> PBS: job killed: walltime 7230 exceeded limit 7200", K.KILLED_EXTERNALLY),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", K.KILLED_EXTERNALLY),
    # quoted exception lines, weak evidence of the script's error (codertimo/KorQuAD-Question-
    # Generation#1, Akegarasu/lora-scripts#132, LgQu/DPT-T2I#5)
    (">>> TypeError: __new__() got an unexpected keyword argument 'eval_batch_size'",
     K.USER_CODE_ERROR),
    ("D:\\venv\\Scripts\\python.exe: Error while finding module specification for "
     "'accelerate.commands.launch' (ModuleNotFoundError: No module named 'accelerate')",
     K.USER_CODE_ERROR),
    (" [Errno 2] No such file or directory: '../dataset/finetune_refall_train.json' when i run "
     "command `accelerate launch train_stage1.py`", K.USER_CODE_ERROR),
]  # fmt: skip


@pytest.mark.parametrize(("line", "kind"), BATCH_LINES, ids=[x[0][:50] for x in BATCH_LINES])
def test_round5_wordings(line: str, kind: FailureKind | None) -> None:
    failure = classify_text(line + "\n", None)
    if kind is None:  # a wrapper that names no cause: nothing ladder-moving in it
        assert failure is None or failure.kind not in (K.CUDA_OOM, K.HOST_OOM), failure
        return
    assert failure is not None and failure.kind is kind, failure


def test_a_deepspeed_checkpoint_loader_traceback_cut_before_its_exception_line() -> None:
    """DeepSpeed PR #1322: two ranks' output on one line, then the second rank's traceback cut
    before its exception line, in state_dict_factory.py check_ckpt_list (no checkpoint file
    matched): a checkpoint error, not the bare AssertionError's script error."""
    text = (
        "AssertionError\n"
        "        sd_loader = SDLoaderFactory.get_sd_loader(ckpt_list)sd_loader = "
        "SDLoaderFactory.get_sd_loader(ckpt_list)\n"
        '  File "/code/deepspeed-big-science/deepspeed/runtime/state_dict_factory.py", line '
        "162, in check_ckpt_list\n"
        "    assert len(self.ckpt_list) > 0\n"
    )
    failure = classify_text(text, None)
    assert failure is not None and failure.kind is K.CHECKPOINT_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # TF's BFC allocator warns and goes on ("... The caller indicates that this is not a
        # failure"): not the OOM exception
        "W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out "
        "of memory trying to allocate 2.20GiB with freed_by_count=0. The caller indicates that "
        "this is not a failure, but may mean that there could be performance gains if more "
        "memory were available.",
        # a loss that is fine, an info line that says "inference"
        "{'loss': 0.4521, 'grad_norm': 1.2, 'learning_rate': 2e-05, 'epoch': 0.1}",
        "INFO: running inference\n",
        # pre-emption as a scheduler *setting*, not an event
        "PreemptMode=REQUEUE PreemptType=preempt/partition_prio",
    ],
)
def test_round5_near_misses_are_no_evidence(line: str) -> None:
    assert kinds_of(line + "\n") == []


def test_a_quoted_exception_is_weak() -> None:
    """A quoted exception explains a death only when nothing else does: a SIGKILL line in the
    same output wins."""
    text = ">>> TypeError: f() got an unexpected keyword argument 'x'\nKilled\n"
    failure = classify_text(text, 137)
    assert failure is not None and failure.kind is K.HOST_OOM


# -- a compiler the OOM killer took during a JIT op build (defect a) ------------------------

#: DeepSpeed's JIT build of its CPU shm op (as in tests/test_remedies.py), with the compiler
#: killed instead of failing an allocation.
JIT_BUILD = [
    "RuntimeError: Error building extension 'deepspeed_shm_comm': [1/3] c++ -MMD -MF "
    "shm_interface.o.d -DTORCH_EXTENSION_NAME=deepspeed_shm_comm -fPIC -std=c++20 -O2 -c "
    "/venv/lib/python3.11/site-packages/deepspeed/ops/csrc/cpu/comm/shm_interface.cpp -o "
    "shm_interface.o",
    "FAILED: shm.o ",
    "{killed}",
    "ninja: build stopped: subcommand failed.",
]

COMPILER_KILLED = [
    "c++: fatal error: Killed signal terminated program cc1plus",  # gcc >= 5
    "g++-12: fatal error: Killed signal terminated program cc1plus",
    "g++: internal compiler error: Killed (program cc1plus)",  # older gcc
    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
    "nvcc error   : 'cudafe++' died due to signal 9 (Kill signal)",
    "clang: error: unable to execute command: Killed",
]


@pytest.mark.parametrize("line", COMPILER_KILLED)
def test_a_compiler_killed_by_the_oom_killer_is_a_build_failure(line: str) -> None:
    """The kill is the compiler's, not a rank's: ds_build_error, and the build ladder gives up
    at once with the compiler-OOM advice (build the op once without the limit), where the
    host-memory ladder halved a batch that cannot change what the compiler needs. It was
    host_oom before (gcc's line counted as a rank's SIGKILL)."""
    from dsguard.core.remedies import GiveUp, next_remedy
    from tests.test_remedies import facts

    lines = [x.format(killed=line) for x in JIT_BUILD]
    for exit_code in (1, None):
        failure = classify_text("\n".join(lines) + "\n", exit_code)
        assert failure is not None and failure.kind is K.DS_BUILD_ERROR, failure
        assert failure.rank_exit is None  # no rank was killed
    got = next_remedy(K.DS_BUILD_ERROR, lines, frozenset(), facts(), ds_config=None)
    assert isinstance(got, GiveUp)
    assert got.reason.startswith("the compiler building the deepspeed_shm_comm op ran out of")
    assert line.strip()[:20] in got.reason


def test_the_ranks_own_sigkill_stays_host_oom() -> None:
    """Without build lines, a SIGKILL is still a probable host OOM (the launcher's -9, a
    shell's Killed), and a kill reported next to a build that succeeded too."""
    for text, code in (
        ("[launch.py:315:sigkill_handler] Killed subprocess 4242\n"
         "subprocess.CalledProcessError: Command '['python', 'train.py']' died with "
         "<Signals.SIGKILL: 9>.\n", 1),
        ("Loading extension module deepspeed_shm_comm...\nstep 3 loss 1.2\nKilled\n", 137),
    ):  # fmt: skip
        failure = classify_text(text, code)
        assert failure is not None and failure.kind is K.HOST_OOM, failure


# -- gloo's EAGAIN (defect b) -----------------------------------------------------------------

GLOO_LINES = [
    # a receive that timed out on the socket (pair.cc: recv() -> EAGAIN on SO_RCVTIMEO) and a
    # peer that died (torchtnt CI; verl), both communication failures
    (
        "RuntimeError: [/var/tmp/portage/sci-libs/gloo-2023.07.15-r1/work/gloo/gloo/transport/"
        "tcp/pair.cc:525] Read error [127.0.0.1]:55523: Resource temporarily unavailable",
        K.NCCL_ERROR,
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [100.106.32.178]:22676",
        K.NCCL_ERROR,
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
        "waiting 1800000ms for recv operation to complete",
        K.NCCL_ERROR,
    ),
    # a port still held by another run: the script's, as for c10d's server socket
    (
        "RuntimeError: [/opt/conda/conda-bld/pytorch_1634272107467/work/third_party/gloo/gloo/"
        "transport/tcp/pair.cc:185] listen: Address already in use",
        K.USER_CODE_ERROR,
    ),
    # a thread that could not be started: under a tight limit on address space, no room for
    # its stack (ProcessGroupGloo's constructor through pybind; std::thread; Python threading)
    ("RuntimeError: Resource temporarily unavailable", K.HOST_OOM),
    ("  what():  Resource temporarily unavailable", K.HOST_OOM),
    ("RuntimeError: can't start new thread", K.HOST_OOM),
]


@pytest.mark.parametrize(("line", "kind"), GLOO_LINES, ids=[x[0][-50:] for x in GLOO_LINES])
def test_gloo_eagain(line: str, kind: FailureKind) -> None:
    failure = classify_text(line + "\n", 1)
    assert failure is not None and failure.kind is kind, failure


def test_gloo_thread_eagain_at_process_group_creation_is_host_memory() -> None:
    """The P5 scenario-B shape: ProcessGroupGloo cannot start its threads under RLIMIT_AS.
    The traceback runs through c10d's process-group creation, whose RuntimeErrors are
    otherwise communication failures; this message is the host's memory. Before: the
    script's error (no frames) or nccl_error (frames)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 1710, in _new_process_group_helper\n"
        "    backend_class = ProcessGroupGloo(backend_prefix_store, group_rank, group_size, "
        "timeout=timeout)\n"
        "RuntimeError: Resource temporarily unavailable\n"
    )
    failure = classify_text(text, 1)
    assert failure is not None and failure.kind is K.HOST_OOM


@pytest.mark.parametrize(
    "line",
    [
        # a file lock's EAGAIN names its file (h5py/HDF5 on NFS): not memory
        "OSError: Unable to open file (unable to lock file, errno = 11, error message = "
        "'Resource temporarily unavailable')",
        "E: Could not get lock /var/lib/dpkg/lock - open (11: Resource temporarily unavailable)",
    ],
)
def test_other_eagains_are_not_host_memory(line: str) -> None:
    assert K.HOST_OOM not in kinds_of(line + "\n")


def test_a_traceback_late_in_the_output_keeps_its_frames() -> None:
    """The frames of a traceback printed after many lines of output still name its kind
    (the reach is measured from its own last frame, not from the start of the output)."""
    filler = "".join(f"step {i} loss 1.0\n" for i in range(200))
    assert kinds_of(filler + GPT_NEOX_1043) == [K.DS_CONFIG_ERROR]
    assert kinds_of(filler + interleave(GPT_NEOX_1043, GPT_NEOX_1043, lag=2)) == [
        K.DS_CONFIG_ERROR,
        K.DS_CONFIG_ERROR,
    ]
