"""Issue 12, round 6 (lead's part): DeepSpeed config, build, and script/environment wordings.

Every message below is the text the named framework source raises or prints (deepspeed 0.19.8,
transformers 5.23, accelerate 1.15, gcc/nvcc, argparse, bash), pasted the way users paste it.
Each positive case fails on the rules before round 6; the near-miss cases pass before and
after (they guard the new rules' edges).
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, StreamClassifier, classify_text

K = FailureKind


def kind(text: str) -> FailureKind:
    v = classify_text(text if text.endswith("\n") else text + "\n", exit_code=1)
    assert v is not None
    return v.kind


# -- DeepSpeed config errors by what the message ties to ZeRO --------------------------------

DS_CONFIG_LINES = [
    # deepspeed runtime/zero/stage3.py __init__ asserts
    "AssertionError: gradient_predivide_factor != 1.0 is not yet supported with ZeRO-3 with "
    "reduce scatter enabled",
    # deepspeed runtime/engine.py no_sync
    "AssertionError: no_sync context manager is incompatible with gradient partitioning logic "
    "of ZeRO stage 2",
    # deepspeed runtime/engine.py, zero/config.py, zero/stage_1_and_2.py
    "NotImplementedError: coalesce_grad_reduction requires ZeRO stage 1/2/3, got stage 0",
    "ValueError: compute_grad_norm=false is supported only with ZeRO Stage 1 or 2",
    "ValueError: zero_optimization.compute_grad_norm=false requires gradient_clipping=0",
    "AssertionError: Contiguous Gradients in ZeRO Stage 2 must be set to True for MoE. Other "
    "code paths are not tested with MoE",
    "AssertionError: Offloading is supported only for DeepSpeed FusedAdam.",
    "ValueError: 'max_grad_norm' is not supported as an optimizer parameter, please switch to "
    "using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/"
    "config-json/#gradient-clipping for more details",
    # LLaMA-Factory model/loader (hiyouga/LlamaFactory, FP8 DeepSeek-R1 under ZeRO-3)
    "[rank6]: ValueError: DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models.",
    # transformers trainer.py _validate_model (peft QLoRA under ZeRO-3)
    "ValueError: Model was not initialized with `Zero-3` despite being configured for "
    "DeepSpeed Zero-3. Please re-initialize your model via `Model.from_pretrained(...)` or "
    "`Model.from_config(...)` after creating your `TrainingArguments`!",
    # transformers integrations/deepspeed.py deepspeed_init
    "ValueError: ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config",
    # transformers modeling_utils.py's message, pasted with a misspelt class and ";" between
    "deepspeed zero3训练方式,一直报错误:ValieError;DeepSpeed Zreo-3 is not compatible with "
    "'low_cpu_mem_usage=True' or with passing a 'device_map'.",
    # deepspeed/__init__.py initialize(), quoted in prose without its AssertionError
    "hello, I meet an assertion: Not sure how to proceed, we were given deepspeed configs in "
    "the deepspeed arguments and deepspeed.initialize() function call",
    # deepspeed runtime/utils.py get_only_unique_item from ZeRO-3 Init's all_gather_coalesced:
    # a 4-bit model's mixed parameter dtypes under ZeRO-3 (axolotl)
    "RuntimeError: expected there to be only one unique element in <generator object "
    "Init._convert_to_deepspeed_param.<locals>.all_gather_coalesced.<locals>.<genexpr> at "
    "0x7f0f04211eb0>",
]


@pytest.mark.parametrize("line", DS_CONFIG_LINES)
def test_deepspeed_config_messages(line: str) -> None:
    assert kind(line) is K.DS_CONFIG_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # the script's own misuse of the ZeRO-3 API, not its config
        "RuntimeError: Detected in-place modification of ZeRO-3 parameters inside "
        "GatheredParameters with modifier_rank=None. Use modifier_rank=<rank> to broadcast",
        # a missing package named DeepSpeed
        "ImportError: DeepSpeed is not installed => run `pip install deepspeed` or build it "
        "from source.",
        # a log line (no exception) that talks about ZeRO stages
        "[INFO] [config.py:1001] zero stage 3 requires offload_param for this model size: enabling",
    ],
)
def test_not_config_errors(line: str) -> None:
    assert kind(line) is not K.DS_CONFIG_ERROR


# -- a compiler driver's own diagnostics ------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # nvcc's host-compiler pass of a forced include (microsoft/DeepSpeed-MII, cut paste)
        "<command-line>: fatal error: cuda_run",
        "cc1plus: fatal error: /tmp/x/cpu_adam.cpp: No such file or directory",
        "gcc: error: unrecognized command-line option '-mavx512bf16'",
    ],
)
def test_compiler_driver_errors_are_build_errors(line: str) -> None:
    assert kind(line) is K.DS_BUILD_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # deepspeed op_builder/builder.py, cpu/builder.py; torch utils/cpp_extension.py
        "AssertionError: CANN_HOME does not exist, unable to compile NPU op(s)",
        "OSError: ROCM_HOME environment variable is not set. Please set it to your ROCm install "
        "root.",
        "FileNotFoundError: nvcc not found at '/usr/local/cuda-12.1/bin/nvcc'. Ensure CUDA path "
        "'/usr/local/cuda-12.1' is correct.",
        "RuntimeError: The current installed version of g++ (13.2.0) is greater than the maximum "
        "required version by CUDA 12.1. Please make sure to use an adequate version of g++ "
        "(>=6.0.0, <13.0).",
        "RuntimeError: MSVC is required to load C++ extensions",
        # deepspeed op_builder/evoformer_attn.py
        "RuntimeError: Unable to locate CUTLASS. Install nvidia-cutlass, clone CUTLASS next to "
        "DeepSpeed, or set CUTLASS_PATH to the CUTLASS checkout.",
        "AssertionError: Could not detect ROCm version",
    ],
)
def test_toolchain_checks_are_build_errors(line: str) -> None:
    assert kind(line) is K.DS_BUILD_ERROR


def test_a_log_line_about_gcc_is_no_build_error() -> None:
    v = classify_text("[INFO] using gcc: error checking disabled for speed\n", exit_code=1)
    assert v is not None and v.kind is not K.DS_BUILD_ERROR


# -- the script's or environment's error, however it is quoted --------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # instructlab: backticks with spaces inside (trl removed max_seq_length)
        "` TypeError: SFTTrainer.__init__() got an unexpected keyword argument 'max_seq_length' `",
        # double quotes around transformers' hub OSError
        "\"OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't "
        "find it in the cached files and it looks like org/model is not the path to a "
        "directory containing a file named config.json.",
        "**ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently "
        "imported.**",
        # argparse's other rejections, the shell not finding a launcher or the script
        "train.py: error: argument --learning_rate: invalid float value: '1e-4,'",
        "train.py: error: ambiguous option: --lr could match --lr_scheduler, --lr_warmup",
        "bash: deepspeed: command not found",
        "run.sh: line 12: torchrun: command not found",
        "python: can't open file '/workspace/train.py': [Errno 2] No such file or directory",
    ],
)
def test_script_and_environment_errors(line: str) -> None:
    assert kind(line) is K.USER_CODE_ERROR


def test_nvcc_not_found_stays_a_build_error() -> None:
    """The build rule outranks the shell's: a missing nvcc is the op build's failure."""
    assert kind("/bin/sh: 1: nvcc: command not found") is K.DS_BUILD_ERROR


def test_quoted_oom_stays_an_oom_and_a_quote_is_weak() -> None:
    """A quoted user error never outranks a specific verdict elsewhere in the log."""
    text = (
        "\"TypeError: forward() got an unexpected keyword argument 'labels'\" was fixed; now:\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert kind(text) is K.CUDA_OOM


# -- Slurm's own host-memory reports ----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # slurm src/slurmd/slurmstepd (task cgroup OOM accounting), 21.08 and later spelling
        "slurmstepd: error: Detected 1 oom_kill event in StepId=61004969.0. Some of the step "
        "tasks have been OOM Killed.",
        # srun's report of the task the step's cgroup OOM killer took
        "srun: error: kakawa-0: task 0: Out Of Memory",
        "srun: error: gpu-07: tasks 0-3: Out Of Memory",
    ],
)
def test_slurm_memory_kills_are_host_oom(line: str) -> None:
    assert kind(line) is K.HOST_OOM


def test_srun_task_exit_is_not_an_oom() -> None:
    v = classify_text("srun: error: node1: task 3: Exited with exit code 1\n", exit_code=1)
    assert v is not None and v.kind is not K.HOST_OOM


# -- checkpoint restores named by where they were raised --------------------------------------


def test_optimizer_load_state_dict_raise_is_a_checkpoint_error() -> None:
    """YOLOv6 resuming from a best_ckpt.pt stripped of its optimizer state: torch's
    Optimizer.load_state_dict raises a TypeError (meituan/YOLOv6)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "tools/train.py", line 103, in main\n'
        "    trainer = Trainer(args, cfg, device)\n"
        '  File "/content/YOLOv6/yolov6/core/engine.py", line 63, in __init__\n'
        "    self.optimizer.load_state_dict(self.ckpt['optimizer'])\n"
        '  File "/usr/local/lib/python3.7/dist-packages/torch/optim/optimizer.py", line 138, '
        "in load_state_dict\n"
        "    saved_groups = state_dict['param_groups']\n"
        "TypeError: 'NoneType' object is not subscriptable\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_optimizer_setstate_keyerror_is_a_checkpoint_error() -> None:
    """torch optim/adamw.py __setstate__ on a state saved by another torch (pytest output)."""
    text = (
        'E     File "/home/u/.venv/lib/python3.11/site-packages/torch/optim/adamw.py", line 97, '
        "in __setstate__\n"
        'E       if len(p_state) != 0 and not torch.is_tensor(p_state["step"]):\n'
        "E                                                    ~~~~~~~^^^^^^^^\n"
        "E   KeyError: 'step'\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_keyerror_on_the_scripts_own_load_line_is_a_checkpoint_error() -> None:
    """SFA3D resuming from a released checkpoint that holds only the weights: the KeyError is
    raised on the script's line that restores the optimizer (maudzung/SFA3D)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 67, in main\n'
        "    main_worker(configs.gpu_idx, configs)\n"
        '  File "train.py", line 132, in main_worker\n'
        "    optimizer.load_state_dict(utils_state_dict['optimizer'])\n"
        "KeyError: 'optimizer'\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_keyerror_elsewhere_in_the_script_stays_its_own_error() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 80, in collate\n'
        "    labels = batch['labels']\n"
        "KeyError: 'labels'\n"
    )
    assert kind(text) is K.USER_CODE_ERROR


def test_an_attribute_error_on_a_load_line_is_the_scripts_bug() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "    model.load_state_dict(ckpt.state_dict())\n"
        "AttributeError: 'dict' object has no attribute 'state_dict'\n"
    )
    assert kind(text) is K.USER_CODE_ERROR


def test_a_frame_pasted_without_file_names_its_kind() -> None:
    """xtuner resume through DeepSpeed's state_dict_factory, the frame selected without its
    leading 'File ' (magic-research/Sa2VA)."""
    text = (
        '"python3.10/site-packages/deepspeed/runtime/state_dict_factory.py", line 168, in '
        "check_ckpt_list\n"
        "[rank0]:     assert len(self.ckpt_list) > 0\n"
        "[rank0]: AssertionError\n"
    )
    assert kind(text) is K.CHECKPOINT_ERROR


def test_a_wrapped_rendezvous_traceback_cut_before_its_exception_is_nccl() -> None:
    """torchtune's elastic agent: frames wrapped inside "line N, in f", the paste ending at
    the raise (pytorch/torchtune; RendezvousConnectionError)."""
    site = "/home/u/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous"
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{site}/dynamic_rendezvous.py", line 437, in\n'
        " sync\n"
        "    get_response = self._backend.get_state()\n"
        f'  File "{site}/c10d_rendezvous_backend.py", line 11\n'
        "9, in _call_store\n"
        "    raise RendezvousConnectionError(\n"
    )
    assert kind(text) is K.NCCL_ERROR


# -- disk, divergence, cuBLAS and scheduler wordings ------------------------------------------


OTHER_WORDINGS = [
    ('Now I cannot even create any file, it complains "disk quota exceeded".', K.DISK_FULL),
    # TensorFlow ENOSPC -> RESOURCE_EXHAUSTED under a checkpoint write (mozilla/DeepSpeech)
    (
        "InternalError (see above for traceback): Error writing (tmp) checkpoint file: "
        "/home/u/ckpt/model.ckpt-6.tempstate9784191321997661396: Resource exhausted: "
        "/home/u/ckpt/model.ckpt-6.tempstate9784191321997661396",
        K.DISK_FULL,
    ),
    # DeepSpeed stage2.py (ru-gpts): the scale reached zero
    (
        "[2021-06-01 05:04:21,527] [INFO] [stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 "
        "Skipping step. Attempted loss scale: 0.0, reducing to 0.0",
        K.LOSS_DIVERGENCE,
    ),
    ("**Once grad_norm got 'nan', all losses become 0 as follows:**", K.LOSS_DIVERGENCE),
    ("After epoch 3 the loss becomes NaN and never recovers", K.LOSS_DIVERGENCE),
    # Caffe's glog CHECK and CNTK: cuBLAS status names with no "error" on the line
    (
        "F0421 10:06:05.111 math_functions.cu:52] Check failed: status == "
        "CUBLAS_STATUS_SUCCESS (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED",
        K.CUDA_FATAL,
    ),
    ("CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=1 ; hostname=rg404", K.CUDA_FATAL),
    # Moab/PBS mails, SGE, HTCondor
    ("MOAB_INFO:  job exceeded wallclock limit", K.KILLED_EXTERNALLY),
    ("Job deleted at request of root@gpc-sched-ib0", K.KILLED_EXTERNALLY),
    ("job 4242.1 exceeded hard wallclock time - initiate terminate method", K.KILLED_EXTERNALLY),
    ("Job was evicted.", K.KILLED_EXTERNALLY),
    # prose about a host memory death (weak: see the next test)
    ("I keep hitting a point where I run out of RAM and the process is Killed", K.HOST_OOM),
    ('I run it on an image and I get the error "killed".', K.HOST_OOM),
]


@pytest.mark.parametrize(("line", "want"), OTHER_WORDINGS)
def test_other_wordings(line: str, want: FailureKind) -> None:
    assert kind(line) is want


@pytest.mark.parametrize(
    "line",
    [
        # a scale that is still large, a recovering run's start-up overflow
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to "
        "32768",
        # a kill the sentence puts on the scheduler's clock
        "the job was killed because it hit the time limit",
    ],
)
def test_near_misses(line: str) -> None:
    v = classify_text(line + "\n", exit_code=1)
    assert v is not None and v.kind not in (K.LOSS_DIVERGENCE, K.HOST_OOM)


def test_prose_about_ram_never_outranks_the_scripts_exception() -> None:
    """Weak prose evidence of an OOM explains a death only when nothing else does: no user
    error is ever taken for an OOM."""
    text = "Earlier I ran out of RAM, so I lowered the batch; now:\nKeyError: 'labels'\n"
    assert kind(text) is K.USER_CODE_ERROR


# -- TensorFlow 1.x OOMs whose device is on the next line -------------------------------------

TF1_GPU = (
    "W tensorflow/core/common_runtime/executor.cc:1076] 0x18ef02bb0 Compute status: Resource "
    "exhausted: OOM when allocating tensor with shape\n"
    '\t [[Node: sub_2518 = Sub[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/gpu:0"]'
    "(sub_2518/x, Variable_1955/read)]]\n"
    "Traceback (most recent call last):\n"
    '  File "dnn.py", line 398, in <module>\n'
    "    fited = model.fit(Xtrain, ytrain)\n"
)
TF1_BFC = (
    "2018-05-10 09:14:16.535628: W tensorflow/core/framework/op_kernel.cc:1192] Resource "
    "exhausted: OOM when allocating tensor with shape[123008,500]\n"
    "2018-05-10 09:14:16.536752: W tensorflow/core/common_runtime/bfc_allocator.cc:217] "
    "Allocator (GPU_0_bfc) ran out of memory trying to allocate 84.60MiB.\n"
)
TF1_CPU = (
    "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with "
    "shape[64,1024,1024]\n"
    '\t [[Node: conv1/Conv2D = Conv2D[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/'
    'cpu:0"](input, conv1/weights/read)]]\n'
)


@pytest.mark.parametrize(("text", "want"), [(TF1_GPU, K.CUDA_OOM), (TF1_BFC, K.CUDA_OOM),
                                             (TF1_CPU, K.HOST_OOM)])  # fmt: skip
def test_tensorflow_oom_takes_the_device_from_the_lines_below(text: str, want: FailureKind) -> None:
    assert kind(text) is want


def test_tensorflow_oom_without_any_device_is_not_guessed() -> None:
    text = "Resource exhausted: OOM when allocating tensor with shape[8,512]\nstep 3 done\n"
    v = classify_text(text, exit_code=1)
    assert v is not None and v.kind not in (K.CUDA_OOM, K.HOST_OOM)


@pytest.mark.parametrize("text", [TF1_GPU, TF1_BFC, TF1_CPU])
def test_tensorflow_oom_device_is_found_whatever_the_chunking(text: str) -> None:
    def run(chunks: list[str]) -> list[tuple[FailureKind, int]]:
        sc = StreamClassifier()
        for c in chunks:
            sc.feed(c)
        sc.close()
        return [(ev.kind, ev.line_no) for ev in sc.evidence]

    whole = run([text])
    assert whole and whole[0][1] == 1  # the OOM line's own number
    assert run(list(text)) == whole
    assert run(text.splitlines(keepends=True)) == whole


# -- other frameworks' and tools' memory, restore, divergence and scheduler lines -------------

FRAMEWORK_LINES = [
    # XLA (JAX, TF-XLA), TPU
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 33762398024 bytes.", K.CUDA_OOM),
    (
        "Resource exhausted: Failed to allocate request for 1.00GiB (1073741824B) on device "
        "ordinal 0",
        K.CUDA_OOM,
    ),
    # torch's MPS allocator, MXNet's pooled storage manager, Caffe's glog CHECK, darknet, Numba
    (
        "RuntimeError: MPS backend out of memory (MPS allocated: 7.64 GiB, other allocations: "
        "68.91 GiB, max allowed: 88.13 GiB). Tried to allocate 33.92 GiB",
        K.CUDA_OOM,
    ),
    (
        "[12:00:00] src/storage/./pooled_storage_manager.h:143: cudaMalloc retry failed: out of "
        "memory",
        K.CUDA_OOM,
    ),
    ("F0101 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
     K.CUDA_OOM),
    ("CUDA Error: out of memory", K.CUDA_OOM),
    (
        "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
        "CUDA_ERROR_OUT_OF_MEMORY",
        K.CUDA_OOM,
    ),
    # the kernel, systemd-oomd, earlyoom, jemalloc, HTCondor, SGE, docker
    ("[ 1234.5] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0",
     K.HOST_OOM),
    ("[ 1234.9] oom_reaper: reaped process 4242 (python), now anon-rss:0kB", K.HOST_OOM),
    (
        "systemd-oomd[612]: Killed /user.slice/user-1000.slice/session-2.scope due to memory "
        "pressure for /user.slice/user-1000.slice being 75.23% > 50.00% for > 20s",
        K.HOST_OOM,
    ),
    ("earlyoom[801]: low memory! at or below SIGTERM limit: mem  4.99%, swap  9.98%", K.HOST_OOM),
    ("<jemalloc>: Error in malloc(): out of memory. Requested: 1048576", K.HOST_OOM),
    ("Job has gone over memory limit of 2048 megabytes. Peak usage: 2300 megabytes.", K.HOST_OOM),
    (
        'job 42 exceeds job hard limit "h_vmem" of queue "all.q@n1" (4.1G > limit:4G) - '
        "sending SIGKILL",
        K.HOST_OOM,
    ),
    ("trainer-0 exited with code 137", K.HOST_OOM),
    # Lightning, TensorFlow, torch's zip reader, h5py
    (
        "KeyError: 'Trying to restore optimizer state but checkpoint contains only the model. "
        "This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`.'",
        K.CHECKPOINT_ERROR,
    ),
    (
        "tensorflow.python.framework.errors_impl.NotFoundError: Unsuccessful "
        "TensorSliceReader constructor: Failed to find any matching files for ./ckpt/model",
        K.CHECKPOINT_ERROR,
    ),
    ("NotFoundError: Key conv1/kernel not found in checkpoint", K.CHECKPOINT_ERROR),
    ("RuntimeError: [enforce fail at inline_container.cc:222] . file not found: archive/data.pkl",
     K.CHECKPOINT_ERROR),
    ("OSError: Unable to open file (truncated file: eof = 123, sblock->base_addr = 0)",
     K.CHECKPOINT_ERROR),
    # Lightning EarlyStopping, node's ENOSPC, AWS spot, c10d's TCPStore (torch < 2.3)
    (
        "Monitored metric val_loss = nan is not finite. Previous best value was inf. Signaling "
        "Trainer to stop.",
        K.LOSS_DIVERGENCE,
    ),
    ("Error: ENOSPC: no space left on device, write", K.DISK_FULL),
    ("Spot instance interruption notice received", K.KILLED_EXTERNALLY),
    ("RuntimeError: Timed out after 1801 seconds waiting for clients. 1/2 clients joined.",
     K.NCCL_ERROR),
]  # fmt: skip


@pytest.mark.parametrize(("line", "want"), FRAMEWORK_LINES)
def test_framework_lines(line: str, want: FailureKind) -> None:
    assert kind(line) is want


def test_tensorflows_startup_allocation_retry_is_no_oom() -> None:
    """TensorFlow grabs its memory fraction at start-up and retries with less: the line is
    printed by runs that then train normally, so it never ends an attempt, a run that goes on
    to finish is no failure, and one that dies of its own error is that error. (Round 110
    made it weak evidence of the device's memory for a death nothing else explains: six corpus
    logs, all device OOMs, end on it; tests/test_classify_round110.py.)"""
    line = (
        "E tensorflow/stream_executor/cuda/cuda_driver.cc:1002] failed to allocate 3.80G "
        "(4078829568 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n"
    )
    sc = StreamClassifier()
    assert not any(ev.fatal for ev in sc.feed(line) + sc.close())
    assert classify_text(line, exit_code=0) is None
    v = classify_text(line + "ValueError: could not convert string to float: 'x'\n", exit_code=1)
    assert v is not None and v.kind is K.USER_CODE_ERROR
