"""Issue 12, round 6 (lead's part): DeepSpeed config, build, and script/environment wordings.

Every message below is the text the named framework source raises or prints (deepspeed 0.19.8,
transformers 5.23, accelerate 1.15, gcc/nvcc, argparse, bash), pasted the way users paste it.
Each test fails on the rules before round 6.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text

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
        "<command-line>: fatal error: cuda_runtime_api.h: No such file or directory",
        "<command-line>: fatal error: cuda_run",
        "cc1plus: fatal error: /tmp/x/cpu_adam.cpp: No such file or directory",
        "gcc: error: unrecognized command-line option '-mavx512bf16'",
        "x86_64-linux-gnu-g++: fatal error: Killed signal terminated program cc1plus",
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
