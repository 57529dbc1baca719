"""Table-driven tests of the pure failure classifier (``dsguard.core.classify``).

Every table row is a real message format (see the citations in the module's rule table) or a
near miss that must *not* classify: a warning, an echoed source line, a launcher line about a
clean exit. The corpus in ``tests/data/logs`` holds whole multi-rank failure logs, each named
after the kind it must classify as.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsguard.core.classify import (
    Evidence,
    ExitStatus,
    FailureKind,
    StreamClassifier,
    classify,
    classify_text,
    decode_exit,
)

K = FailureKind
LOGS = Path(__file__).parent / "data" / "logs"
TRACEBACK = "Traceback (most recent call last):\n"


def evidence_of(text: str) -> tuple[Evidence, ...]:
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    return sc.evidence


def one_line(line: str, *, after_traceback: bool) -> Evidence | None:
    """Classify one line; with ``after_traceback`` a traceback header precedes it."""
    found = evidence_of((TRACEBACK if after_traceback else "") + line + "\n")
    assert len(found) <= 1
    return found[0] if found else None


# ----------------------------------------------------------------------------------------------
# decode_exit
# ----------------------------------------------------------------------------------------------

DECODE_CASES = [
    # (raw, signal, killed)
    (None, None, False),
    (0, None, False),
    (1, None, False),
    (2, None, False),
    (128, None, False),  # 128 itself is not "signal 0"
    (-9, 9, True),  # Popen.returncode of a SIGKILLed child
    (-15, 15, False),
    (-6, 6, False),
    (137, 9, True),  # a shell reporting 128 + 9
    (143, 15, False),
    (139, 11, False),
    (192, 64, False),
    (193, None, False),
    (247, 9, True),  # DeepSpeed launcher sys.exit(-9) -> 256 - 9
    (250, 6, False),
    (224, None, False),
    (255, 1, False),
    (256, None, False),
]


@pytest.mark.parametrize(("raw", "sig", "killed"), DECODE_CASES)
def test_decode_exit(raw: int | None, sig: int | None, killed: bool) -> None:
    """Raw codes decode to the signal that ended the process; the raw value is kept."""
    status = decode_exit(raw)
    assert status == ExitStatus(raw=raw, signal=sig)
    assert status.killed is killed


# ----------------------------------------------------------------------------------------------
# One line -> kind (and rank). A row: (line, expected kind or None, expected rank, after_tb)
# ----------------------------------------------------------------------------------------------

LINE_CASES: list[tuple[str, FailureKind | None, int | None, bool]] = [
    # cuda_oom
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.02 GiB is free.",
        K.CUDA_OOM,
        None,
        True,
    ),
    (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has "
        "a total capacty of 6.00 GiB of which 0 bytes is free.",
        K.CUDA_OOM,
        None,
        True,
    ),
    (
        "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total "
        "capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
        K.CUDA_OOM,
        None,
        True,
    ),
    ("RuntimeError: CUDA error: out of memory", K.CUDA_OOM, None, True),
    ("RuntimeError: CUDA driver error: out of memory", K.CUDA_OOM, None, True),
    (
        "RuntimeError: cuda runtime error (2) : out of memory at THCCachingAllocator.cpp:510",
        K.CUDA_OOM,
        None,
        True,
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        K.CUDA_OOM,
        None,
        True,
    ),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", K.CUDA_OOM, None, True),
    (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB. GPU 0 has a "
        "total capacity of 128.00 GiB of which 780.24 MiB is free.",
        K.CUDA_OOM,
        None,
        True,
    ),
    (
        "terminate called after throwing an instance of 'c10::OutOfMemoryError'",
        K.CUDA_OOM,
        None,
        False,
    ),
    ("  what():  CUDA out of memory. Tried to allocate 2.00 MiB", K.CUDA_OOM, None, False),
    ("node1:1:2 [3] NCCL WARN Cuda failure 2 'out of memory'", K.CUDA_OOM, None, False),
    ("RuntimeError: No executable batch size found, reached zero.", K.CUDA_OOM, None, True),
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB", K.CUDA_OOM, None, True),
    # host_oom
    (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 14495514624 bytes. Error code 12 (Cannot "
        "allocate memory)",
        K.HOST_OOM,
        None,
        True,
    ),
    (
        "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
        K.HOST_OOM,
        None,
        True,
    ),
    ("OSError: [Errno 12] Cannot allocate memory", K.HOST_OOM, None, True),
    (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
        K.HOST_OOM,
        None,
        False,
    ),
    (
        "RuntimeError: DataLoader worker (pid 2841) is killed by signal: Bus error.",
        K.HOST_OOM,
        None,
        True,
    ),
    (
        "RuntimeError: unable to write to file </torch_4823_1309448367_1>: No space left on "
        "device (28)",
        K.HOST_OOM,  # /dev/shm is RAM: not disk_full
        None,
        True,
    ),
    ("  what():  std::bad_alloc", K.HOST_OOM, None, False),
    ("MemoryError", K.HOST_OOM, None, True),
    (
        "[12345.678] Out of memory: Killed process 4242 (python) total-vm:1234kB",
        K.HOST_OOM,
        None,
        False,
    ),
    ("Memory cgroup out of memory: Killed process 4242 (python)", K.HOST_OOM, None, False),
    # disk_full
    ("OSError: [Errno 28] No space left on device: 'out/checkpoint-10'", K.DISK_FULL, None, True),
    ("tar: out.tar: Cannot write: No space left on device", K.DISK_FULL, None, False),
    ("OSError: [Errno 122] Disk quota exceeded", K.DISK_FULL, None, True),
    (
        "[rank0]: RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter "
        "failed writing file data.pkl: file write failed",
        K.DISK_FULL,
        0,
        True,
    ),
    (
        "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 10674 vs 10673",
        K.DISK_FULL,
        None,
        True,
    ),
    # ds_build_error
    ("RuntimeError: Error building extension 'cpu_adam'", K.DS_BUILD_ERROR, None, True),
    ("ninja: build stopped: subcommand failed.", K.DS_BUILD_ERROR, None, False),
    ("FAILED: multi_tensor_adam.cuda.o ", K.DS_BUILD_ERROR, None, False),
    (
        "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    ("RuntimeError: Ninja is required to load C++ extensions", K.DS_BUILD_ERROR, None, True),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_89'", K.DS_BUILD_ERROR, None, False),
    (
        "/usr/local/cuda/include/crt/host_config.h:143:2: error: #error -- unsupported GNU "
        "version! gcc versions later than 12 are not supported!",
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    (
        "deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, "
        "unable to compile CUDA op(s)",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: "
        "Installed CUDA version 11.8 does not match the version torch was compiled with 12.1, "
        "unable to compile cuda/cpp extensions without a matching cuda version.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
        "root.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "RuntimeError: Unable to JIT load the fused_adam op due to ninja not being installed.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "RuntimeError: PyTorch version mismatch! DeepSpeed ops were compiled and installed with "
        "a different version than what is being used at runtime.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "[rank2]: ImportError: /root/.cache/torch_extensions/py311_cu124/cpu_adam/cpu_adam.so: "
        "cannot open shared object file: No such file or directory",
        K.DS_BUILD_ERROR,
        2,
        True,
    ),
    # ds_config_error
    (
        "[rank2]: pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        "DeepSpeedZeroConfig",
        K.DS_CONFIG_ERROR,
        2,
        True,
    ),
    (
        "pydantic.error_wrappers.ValidationError: 3 validation errors for DeepSpeedZeroConfig",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "pydantic_core._pydantic_core.ValidationError: 5 validation errors for DeepSpeedBF16Config",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "deepspeed.runtime.config.DeepSpeedConfigError: Either train_batch_size or "
        "train_micro_batch_size_per_gpu needs to be provided",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "ValueError: Please correct the following DeepSpeed config values that mismatch "
        "TrainingArguments values:",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "AssertionError: Check batch related parameters. train_batch_size is not equal to "
        "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 5 * 1 * 3",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "ValueError: Expected a string path to an existing deepspeed config, or a dictionary, "
        "or a base64 encoded string. Received: ds.json",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    (
        "ValueError: `auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3.",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    # checkpoint_error
    (
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "ValueError: [deepspeed] failed to resume from checkpoint out/checkpoint-8",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "ValueError: Can't find a valid checkpoint at out/checkpoint-8",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    ("_pickle.UnpicklingError: invalid load key, 'v'.", K.CHECKPOINT_ERROR, None, True),
    (
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a "
        "DP world size of 4 but the current world size is 2.",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "RuntimeError: Error(s) in loading state_dict for PeftModelForCausalLM:",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'out/checkpoint-800/global_step800/mp_rank_00_model_states.pt'",
        K.CHECKPOINT_ERROR,
        None,
        True,
    ),
    # loss_divergence
    (
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run.",
        K.LOSS_DIVERGENCE,
        None,
        True,
    ),
    (
        "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
        K.LOSS_DIVERGENCE,
        None,
        True,
    ),
    # cuda_fatal
    (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        K.CUDA_FATAL,
        None,
        True,
    ),
    ("RuntimeError: CUDA error: device-side assert triggered", K.CUDA_FATAL, None, True),
    ("RuntimeError: CUDA error: unspecified launch failure", K.CUDA_FATAL, None, True),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", K.CUDA_FATAL, None, True),
    ("RuntimeError: CUDA driver error: unknown error", K.CUDA_FATAL, None, True),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", K.CUDA_FATAL, None, True),
    (
        "../aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [18,0,0], "
        "thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
        K.CUDA_FATAL,
        None,
        False,
    ),
    (
        "node1:77:99 [2] NCCL WARN Cuda failure 'an illegal memory access was encountered'",
        K.CUDA_FATAL,
        None,
        False,
    ),
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        K.CUDA_FATAL,
        None,
        False,
    ),
    # killed_externally
    (
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
        "'-u', 'main.py', '--local_rank=3'] exits with return code = -9",
        K.KILLED_EXTERNALLY,
        None,
        False,
    ),
    (
        "E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/"
        "api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /usr/bin/python",
        K.KILLED_EXTERNALLY,
        None,
        False,
    ),
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 "
        "(pid: 812917) of binary: /usr/bin/python",
        K.KILLED_EXTERNALLY,
        None,
        False,
    ),
    ("  exitcode  : -9 (pid: 14750)", K.KILLED_EXTERNALLY, None, False),
    ("  traceback : Signal 9 (SIGKILL) received by PID 14750", K.KILLED_EXTERNALLY, None, False),
    (
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
        "SIGKILL",
        K.KILLED_EXTERNALLY,
        None,
        True,
    ),
    ("Killed", K.KILLED_EXTERNALLY, None, False),
    (
        "bash: line 1:  4242 Killed                  python train.py",
        K.KILLED_EXTERNALLY,
        None,
        False,
    ),
    # the OOM killer took the compiler building an op, not a rank: a build failure (issue 12,
    # round 5; see tests/test_classify_round5.py)
    (
        "c++: fatal error: Killed signal terminated program cc1plus",
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    # zsh's job notice glued after a tqdm bar (baichuan-inc/Baichuan2#138)
    (
        "Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s][1]    26478 killed     "
        "python test.py",
        K.KILLED_EXTERNALLY,
        None,
        False,
    ),
    # nccl_error
    (
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
        "NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
        K.NCCL_ERROR,
        1,
        False,
    ),
    (
        "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 "
        "milliseconds before timing out.",
        K.NCCL_ERROR,
        7,  # no line prefix: the rank c10d names in the message
        False,
    ),
    (
        "[rank7]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        K.NCCL_ERROR,
        7,
        True,
    ),
    ("[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.", K.NCCL_ERROR, 7, True),
    ("RuntimeError: NCCL communicator was aborted on rank 0.", K.NCCL_ERROR, None, True),
    (
        "[rank3]:[E626 16:48:25.440250129 ProcessGroupNCCL.cpp:684] [Rank 3] Some NCCL "
        "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.",
        K.NCCL_ERROR,
        3,
        False,
    ),
    (
        # the heartbeat monitor reporting a stuck watchdog is a hang (the corpus labelling
        # rule), not an NCCL error: it says nothing completed, not that something failed
        "[rank1]:[E1111 17:10:53] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
        "making progress",
        None,
        None,
        False,
    ),
    (
        "[E ProcessGroupNCCL.cpp:916] [Rank 2] NCCL watchdog thread terminated with exception: "
        "[Rank 2] Watchdog caught collective operation timeout",
        K.NCCL_ERROR,
        2,
        False,
    ),
    (
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients.",
        K.NCCL_ERROR,
        None,
        True,
    ),
    # user_code_error: the exception line of a traceback no other kind explains
    ("KeyError: 'labels'", K.USER_CODE_ERROR, None, True),
    ("ValueError: too many values to unpack (expected 2)", K.USER_CODE_ERROR, None, True),
    ("ModuleNotFoundError: No module named 'flash_attn'", K.USER_CODE_ERROR, None, True),
    ("AssertionError", K.USER_CODE_ERROR, None, True),
    (
        "[default3]:TypeError: forward() got an unexpected keyword argument 'labels'",
        K.USER_CODE_ERROR,
        3,
        True,
    ),
    ("transformers.utils.import_utils.OptionalDependencyNotAvailable: x", None, None, True),
    # -- issue 12 round 2: framework messages printed without an exception name on the line
    # (an assert's message, a log line), from DeepSpeed op_builder/builder.py and
    # runtime/fp16/loss_scaler.py, Megatron param_and_grad_buffer.py, torch clip_grad.py
    (
        'assert cuda_home is not None, "CUDA_HOME does not exist, unable to compile CUDA op(s)"',
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    (
        "DeepSpeed Op Builder: Installed CUDA version 12.0 does not match the version torch was "
        "compiled with 11.8, unable to compile cuda/cpp extensions without a matching cuda "
        "version.",
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    (
        "deepspeed.ops.op_builder.builder.MissingCUDAException: Unable to run "
        "/usr/local/cuda/bin/nvcc, unable to compile CUDA op(s): [Errno 2] No such file",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "RuntimeError: DeepSpeed JIT builder for 'cpu_adam' found no CUDA devices. Set "
        "TORCH_CUDA_ARCH_LIST or make GPUs visible.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    ("ImportError: No module named 'fused_adam'", K.DS_BUILD_ERROR, None, True),
    (
        "ModuleNotFoundError: No module named 'deepspeed.ops.adam.cpu_adam_op'",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    (
        "[2023-05-01 10:00:00,000] [INFO] [loss_scaler.py:190:update_scale] Current loss scale "
        "already at minimum - cannot decrease scale anymore. Exiting run.",
        K.LOSS_DIVERGENCE,
        None,
        False,
    ),
    (
        "AssertionError: Rank 3: found NaN in local grad norm in backward pass before "
        "data-parallel communication collective. Device: 3, node: n1",
        K.LOSS_DIVERGENCE,
        None,
        True,
    ),
    (
        "[rank2]: RuntimeError: Rank 2, node n1, device 2, iteration 7: Unexpected result nan "
        "(message='found NaN in local grad norm for bucket #0 in backward pass before "
        "data-parallel communication collective')",
        K.LOSS_DIVERGENCE,
        2,
        True,
    ),
    (
        "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is "
        "non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
        "the non-finite norm anyway, set `error_if_nonfinite=False`",
        K.LOSS_DIVERGENCE,
        None,
        True,
    ),
    (
        "[rank3]:[E606 09:09:08.172519935 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID "
        "0(default_pg) Rank 3] Received a dump signal due to a collective timeout from this "
        "local rank and we will try our best to dump the debug info. Last enqueued NCCL work: "
        "1, last completed NCCL work: -1.",
        K.NCCL_ERROR,
        3,
        False,
    ),
    (
        "[rank1]: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [172.19.2.2]:33177",
        K.NCCL_ERROR,
        1,
        False,
    ),
    (
        "RuntimeError: Gloo connectFullMesh failed with "
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        K.NCCL_ERROR,
        None,
        True,
    ),
    # ---- must NOT classify --------------------------------------------------------------------
    # the warning form of the mismatch without its ANSI colour (a plain log file)
    (
        " [WARNING]  DeepSpeed Op Builder: Installed CUDA version 12.4 does not match the "
        "version torch was compiled with 11.8.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this "
        "combination of CUDA, but it may result in unexpected behavior.",
        None,
        None,
        False,
    ),
    # DeepSpeed op_builder's mismatch *warnings*: they print, they do not raise
    (
        "Installed CUDA version 12.2 does not match the version torch was compiled with 12.1 but "
        "since the APIs are compatible, accepting this combination",
        None,
        None,
        False,
    ),
    (
        "\x1b[93m [WARNING] \x1b[0m DeepSpeed Op Builder: Installed CUDA version 12.4 does not "
        "match the version torch was compiled with 11.8.Detected `DS_SKIP_CUDA_CHECK=1`: "
        "Allowing this combination of CUDA, but it may result in unexpected behavior.",
        None,
        None,
        False,
    ),
    (
        "\x1b[93m [WARNING] \x1b[0m cpu_adam cuda is missing or is incompatible with installed "
        "torch, only cpu ops can be compiled!",
        None,
        None,
        False,
    ),
    # DeepSpeed's warning when no "latest" file exists: load_checkpoint returns None, it may
    # be fine; only HF's raise afterwards is evidence
    (
        "[WARNING] [engine.py:2893:load_checkpoint] Unable to find latest file at out/latest, "
        "if trying to load latest checkpoint please ensure this file exists",
        None,
        None,
        False,
    ),
    (
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, "
        "reducing to 32768",
        None,
        None,
        False,
    ),
    ("[INFO] [launch.py:319:sigkill_handler] Killing subprocess 41017", None, None, False),
    (
        "[ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] "
        "exits with return code = 1",
        None,
        None,
        False,
    ),
    (
        "E1122 api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 5141) of binary: python",
        None,
        None,
        False,
    ),
    ("  exitcode  : -6 (pid: 1203)", None, None, False),
    ("[INFO] [launch.py:351:main] Process 7001 exits successfully.", None, None, False),
    # the shell printing "Killed" inside a longer message is not the bare job-status line
    ("sample 17: 'the villain Killed the hero'", None, None, False),
    (
        "node01:1234:5678 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
        None,
        None,
        False,
    ),
    (
        "Emitting ninja build file "
        "/root/.cache/torch_extensions/py311_cu121/cpu_adam/build.ninja...",
        None,
        None,
        False,
    ),
    ("Loading extension module cpu_adam...", None, None, False),
    (
        "[INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 61.2 GB",
        None,
        None,
        False,
    ),
    # an exception line counts with or without its traceback header: saved and pasted logs
    # often lose the header (issue 12: ordinary exceptions came out ``unknown``)
    ("KeyError: 'labels'", K.USER_CODE_ERROR, None, False),
    # c10d advice lines after a CUDA error are not errors themselves
    ("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", None, None, True),
    (
        "CUDA kernel errors might be asynchronously reported at some other API call",
        None,
        None,
        True,
    ),
    # a launcher summary says a child failed, not why
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", None, None, True),
    # KeyboardInterrupt is someone's Ctrl-C: a stop from outside, not the user's code failing
    ("KeyboardInterrupt", K.KILLED_EXTERNALLY, None, True),
    ("Fatal Python error: Segmentation fault", None, None, False),
    # -- issue 12, third round: rules written from the tune2 corpus split
    # ProcessGroupNCCL.cpp watchdog glog line (FunASR#2006): no "Error" on it, its own trigger
    (
        "[rank11]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 11] Timeout at NCCL work: 15734, "
        "last enqueued NCCL work: 15735, last completed NCCL work: 15733.",
        K.NCCL_ERROR,
        11,
        False,
    ),
    # NCCL net_ib.cc WARN as a vendor plugin reprints it (NVIDIA/nccl#1664)
    (
        "NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 "
        "len=32696 vendor err 129 (Send)",
        K.NCCL_ERROR,
        None,
        False,
    ),
    # torch distributed_c10d.py _store_based_barrier (neu-vi/ezflow#194)
    (
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
        "for key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
        K.NCCL_ERROR,
        None,
        True,
    ),
    # c10d socket.cpp SocketConnectOp::throwTimeoutError (lllyasviel/ControlNet#382)
    (
        "TimeoutError: The client socket has timed out after 1800s while trying to connect to "
        "(127.0.0.1, 48391).",
        K.NCCL_ERROR,
        None,
        True,
    ),
    # c10d Utils.hpp recvBytes, gloo on Windows (pytorch/pytorch#85621)
    ("RuntimeError: Socket Timeout", K.NCCL_ERROR, None, True),
    # ProcessGroupNCCL.cpp broadcastUniqueNCCLID, several ranks glued (axolotl#809)
    (
        "RuntimeErrorRuntimeErrorRuntimeErrorRuntimeError: RuntimeError: : : : RuntimeError: : "
        "[2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
        "key-value store by key '0', but store->get('0') got error: Socket Timeout",
        K.NCCL_ERROR,
        None,
        False,
    ),
    # torch elastic error_handler JSON, indented (pytorch/pytorch#64926)
    (
        '    "message": "RendezvousConnectionError: The connection to the C10d store has '
        'failed. See inner exception for details.",',
        K.NCCL_ERROR,
        None,
        False,
    ),
    # GCC diagnostic from torch's c10/util/C++17.h while JIT-building fused_adam (DeepSpeed#7143)
    (
        "/dockerdata/lujunda/env/rft/lib/python3.12/site-packages/torch/include/c10/util/"
        "C++17.h:13:2: error: #error \"You're trying to build PyTorch with a too old version of "
        'GCC. We need GCC 9 or later."',
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    # nvcc/EDG diagnostics (DeepSpeed#3196, DeepSpeed#397)
    (
        'csrc/includes\\memory_access_utils.h(908): error: identifier "int32_t" is undefined',
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    (
        '91 errors detected in the compilation of "csrc/quantization/quantize.cu".',
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    # a grad norm logged as a tensor repr (LLaVA-VL/LLaVA-NeXT#359)
    (
        "Why do I encounter 'loss': 0.0, 'grad_norm': tensor(nan, device='cuda:0', "
        "dtype=torch.float64) when fine-tuning llava-v1.5-7b",
        K.LOSS_DIVERGENCE,
        None,
        False,
    ),
    # MSVC diagnostic (DeepSpeed PR #2428) and torch cpp_extension's compiler check
    # (FlagOpen/FlagEmbedding#232)
    (
        "`DeepSpeed-eltonz-fix-win-build\\csrc\\includes\\StopWatch.h(3): fatal error C1083: "
        "Cannot open include file: 'windows.h': No such file or directory`",
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
    (
        "subprocess.CalledProcessError: Command '['which', 'c++']' returned non-zero exit "
        "status 1.",
        K.DS_BUILD_ERROR,
        None,
        True,
    ),
    # accelerate DeepSpeedPlugin (yuvalkirstain/PickScore#2)
    (
        "ValueError: When using `deepspeed_config_file`, the following accelerate config "
        "variables will be ignored: ['gradient_accumulation_steps', 'gradient_clipping',",
        K.DS_CONFIG_ERROR,
        None,
        True,
    ),
    # a C++ trainer's glog FATAL (flashlight/wav2letter#128)
    (
        "F0104 23:37:18.678984 7164 Train.cpp:472] Loss has NaN values",
        K.LOSS_DIVERGENCE,
        None,
        False,
    ),
    # c10d socket error as a bare RuntimeError (Lightning-AI/pytorch-lightning#16673)
    ("RuntimeError: Connection reset by peer", K.NCCL_ERROR, None, True),
    # a message glued before the next traceback's header on one line (DeepSpeed#5623)
    (
        "[BUG] RuntimeError: Error building extension 'fused_adam' Loading extension module "
        'fused_adam... Traceback (most recent call last):   File "/public/home/finetune/'
        'finetune.py", line 323, in <module> Loading extension module fused_adam...',
        K.DS_BUILD_ERROR,
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("line", "kind", "rank", "after_tb"), LINE_CASES, ids=[c[0][:60] for c in LINE_CASES]
)
def test_line_kind(line: str, kind: FailureKind | None, rank: int | None, after_tb: bool) -> None:
    """Each real message format maps to its kind (and rank); near misses map to nothing."""
    ev = one_line(line, after_traceback=after_tb)
    if kind is None:
        assert ev is None, ev
        return
    assert ev is not None
    assert (ev.kind, ev.rank) == (kind, rank)
    assert ev.fatal is (kind in (K.CUDA_OOM, K.HOST_OOM) and line not in NOT_RAISED), ev
    assert ev.line_no == (2 if after_tb else 1)


#: OOM evidence that is not an exception raised on a rank (a worker's error message, the
#: kernel's record): it explains a death, but does not end the attempt by itself.
NOT_RAISED = {
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).",
    "[12345.678] Out of memory: Killed process 4242 (python) total-vm:1234kB",
    "Memory cgroup out of memory: Killed process 4242 (python)",
}


# ----------------------------------------------------------------------------------------------
# Echoed source lines: code shown in traceback frames repeats words, it is not a message
# ----------------------------------------------------------------------------------------------

ECHO_CASES = {
    "plain": (
        'Traceback (most recent call last):\n  File "train.py", line 40, in step\n'
        "    except torch.cuda.OutOfMemoryError:\n"
        '  File "train.py", line 41, in step\n    raise RuntimeError("CUDA out of memory")\n'
    ),
    "multi-line raise": (
        'Traceback (most recent call last):\n  File "ds/loss_scaler.py", line 176, in update\n'
        "    raise Exception(\n"
        '        "Current loss scale already at minimum - cannot decrease scale anymore.")\n'
    ),
    "rank-prefixed": (
        '[rank0]: Traceback (most recent call last):\n[rank0]:   File "a.py", line 1, in f\n'
        '[rank0]:     raise RuntimeError("CUDA error: device-side assert triggered")\n'
        '[rank0]:   File "/x/torch_extensions/builder.py", line 9, in load\n'
    ),
    "torchrun tee prefix": (
        '[default1]:Traceback (most recent call last):\n[default1]:  File "a.py", line 1\n'
        '[default1]:    raise ValueError("No space left on device")\n'
    ),
    "mpirun prefix": (
        '[1,0]<stderr>:Traceback (most recent call last):\n[1,0]<stderr>:  File "a.py", line 1\n'
        "[1,0]<stderr>:    os.kill(pid, signal.SIGKILL)  # Killed\n"
    ),
    "pdsh prefix": 'worker-1:     raise RuntimeError("NCCL error in: x")\n',
    "rich frames": (
        "╭──────── Traceback (most recent call last) ────────╮\n"
        "│ /home/u/train.py:88 in main                        │\n"
        "│   87 │   except torch.cuda.OutOfMemoryError:         │\n"
        '│ ❱ 88 │   │   raise RuntimeError("CUDA out of memory") │\n'
        "╰────────────────────────────────────────────────────╯\n"
    ),
    "ipython frames": (
        "CalledProcessError                        Traceback (most recent call last)\n"
        "   1914 if hasattr(error, 'output') and error.output:\n"
        '-> 1916 raise RuntimeError(f"Error building extension {name}") from e\n'
        "---> 294     run(args)  # CUDA error: out of memory\n"
    ),
}


@pytest.mark.parametrize("text", ECHO_CASES.values(), ids=ECHO_CASES.keys())
def test_echoed_source_lines_are_not_evidence(text: str) -> None:
    """Source lines quoted by plain, rich and IPython tracebacks never become evidence."""
    assert evidence_of(text) == ()


# ----------------------------------------------------------------------------------------------
# Rank prefixes, ANSI colour and tqdm glue
# ----------------------------------------------------------------------------------------------

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"
PREFIX_CASES = [
    (f"[rank3]: {OOM}", 3),
    (f"[rank12]:{OOM}", 12),
    ("[rank3]:[W1122 10:00:00.1 ProcessGroupNCCL.cpp:1] CUDA error: out of memory", 3),
    (f"[default3]:{OOM}", 3),
    (f"3: {OOM}", 3),
    (f"worker-1: {OOM}", None),  # a host, not a rank
    (f"worker-1: [rank5]: {OOM}", 5),
    (f"node07.cluster.local: 2: {OOM}", 2),
    (f"[1,3]<stderr>:{OOM}", 3),
    (f"[0,7]<stdout>:{OOM}", 7),
    (f"\x1b[31m[rank6]: \x1b[1m{OOM}\x1b[0m", 6),
    (f" 45%|████▌     | 45/100 [00:12<00:15]{OOM}", None),
    (OOM, None),
]


@pytest.mark.parametrize(("line", "rank"), PREFIX_CASES, ids=[c[0][:40] for c in PREFIX_CASES])
def test_rank_prefixes(line: str, rank: int | None) -> None:
    """Rank comes from the line's prefix: torch, torchrun --tee, srun, pdsh, mpirun."""
    ev = one_line(line, after_traceback=False)
    assert ev is not None
    assert (ev.kind, ev.rank) == (K.CUDA_OOM, rank)
    assert "\x1b" not in ev.text


def test_tqdm_carriage_returns_end_lines() -> None:
    """A message glued to a tqdm redraw is found, and every \\r counts as a line end."""
    bars = "".join(f"\r {i:3d}%|#  | {i}/100 [00:01<00:09]" for i in range(45))
    text = "start\n" + bars + f"\r 45%|####▌ | 45/100 [00:12<00:15]{OOM}\nafter\n"
    found = evidence_of(text)
    # 1 "start", 2 the empty line the first \r ends, 3..47 the bars, 48 the glued message
    assert [(e.kind, e.line_no) for e in found] == [(K.CUDA_OOM, 48)]
    sc = StreamClassifier()
    sc.feed(text)
    assert sc.lines_seen == 49


def test_user_code_error_glued_to_a_progress_bar() -> None:
    """An exception line glued after a bar's closing bracket still counts."""
    text = "\r3/6 [loss=0.3333]Traceback (most recent call last):\n  File 'x'\nKeyError: 'labels'\n"
    assert [e.kind for e in evidence_of(text)] == [K.USER_CODE_ERROR]


# ----------------------------------------------------------------------------------------------
# Line numbers, partial lines, bounded memory, text limits
# ----------------------------------------------------------------------------------------------


def test_line_numbers_count_cr_lf_and_crlf_once_each() -> None:
    """\\n, \\r and \\r\\n each end exactly one line."""
    text = "a\rb\r\nc\n\nd\r\rKilled\r\ne"
    sc = StreamClassifier()
    found = sc.feed(text)
    assert [(e.kind, e.line_no) for e in found] == [(K.KILLED_EXTERNALLY, 7)]
    assert sc.lines_seen == 7
    sc.close()
    assert sc.lines_seen == 8


def test_partial_line_waits_for_its_end_and_close_flushes_it() -> None:
    """feed() reports only complete lines; close() classifies the unterminated last one."""
    sc = StreamClassifier()
    assert sc.feed("ok\n" + OOM) == []
    assert sc.lines_seen == 1
    flushed = sc.close()
    assert [(e.kind, e.line_no) for e in flushed] == [(K.CUDA_OOM, 2)]
    assert sc.close() == []
    assert sc.lines_seen == 2


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    """A chunk ending in \\r followed by one starting with \\n does not add an empty line."""
    sc = StreamClassifier()
    sc.feed("x\r")
    sc.feed("\nKilled\r")
    found = sc.feed("\nKilled\n")
    assert [e.line_no for e in sc.evidence] == [2, 3]
    assert [e.line_no for e in found] == [3]
    assert sc.lines_seen == 3


def test_evidence_is_bounded_per_kind() -> None:
    """Memory stays bounded: the first and the last 16 lines of each kind are kept."""
    line = "[rank0]:[E1 ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout"
    text = "".join(f"{line} {i}\n" for i in range(1000)) + OOM + "\n"
    sc = StreamClassifier()
    found = sc.feed(text)
    assert len(found) == 1001  # feed reports everything it found in the chunk
    kept = sc.evidence
    nccl = [e for e in kept if e.kind is K.NCCL_ERROR]
    assert len(nccl) == 32
    assert [e.line_no for e in nccl] == [*range(1, 17), *range(985, 1001)]
    assert [e.kind for e in kept][-1] is K.CUDA_OOM
    assert [e.line_no for e in kept] == sorted(e.line_no for e in kept)


def test_evidence_text_is_limited_and_keeps_the_match() -> None:
    """Text is at most 500 chars; a match past the limit stays visible."""
    args = ", ".join(f"'--arg{i}', 'value{i}'" for i in range(80))
    line = f"[ERROR] [launch.py:325:sigkill_handler] ['python', {args}] exits with return code = -9"
    ev = one_line(line, after_traceback=False)
    assert ev is not None
    assert ev.kind is K.KILLED_EXTERNALLY
    assert len(ev.text) == 500
    assert ev.text.endswith("exits with return code = -9")
    short = one_line(OOM + " x" * 400, after_traceback=False)
    assert short is not None
    assert short.text == (OOM + " x" * 400)[:500]


def test_huge_unterminated_line_is_clipped() -> None:
    """A partial line never grows without bound; its fatal head is reported once, when the
    line outgrows the carry, and kept as evidence."""
    sc = StreamClassifier()
    reported = sc.feed(OOM)
    for _ in range(200):
        reported += sc.feed("y" * 1000)
    reported += sc.close()
    assert [(e.kind, e.fatal) for e in reported] == [(K.CUDA_OOM, True)]
    assert [e.kind for e in sc.evidence] == [K.CUDA_OOM]
    assert len(sc._carry) == 0


# ----------------------------------------------------------------------------------------------
# classify(): root cause by priority, exit codes, confirmation, hang
# ----------------------------------------------------------------------------------------------


def ev(kind: FailureKind, line_no: int, rank: int | None = None) -> Evidence:
    return Evidence(kind, rank, line_no, f"{kind.value} line {line_no}", kind is K.CUDA_OOM)


@dataclass(frozen=True)
class Case:
    evidence: tuple[Evidence, ...]
    exit_code: int | None
    expect: FailureKind | None
    rank: int | None = None
    confirmed: bool = False
    hang: bool = False


CLASSIFY_CASES: dict[str, Case] = {
    "exit 0 is success": Case((), 0, None),
    "exit 0 wins over evidence": Case((ev(K.CUDA_OOM, 1, 0),), 0, None),
    "exit 0 with confirmation is success": Case((), 0, None, confirmed=True),
    "nonzero, nothing found": Case((), 1, K.UNKNOWN),
    "unknown exit, nothing found": Case((), None, K.UNKNOWN),
    "SIGTERM is not a kill": Case((), 143, K.UNKNOWN),
    "SIGKILL via Popen": Case((), -9, K.KILLED_EXTERNALLY),
    "SIGKILL via shell": Case((), 137, K.KILLED_EXTERNALLY),
    "SIGKILL via deepspeed launcher": Case((), 247, K.KILLED_EXTERNALLY),
    "SIGKILL confirmed OOM": Case((), 247, K.HOST_OOM, confirmed=True),
    "kill lines, unconfirmed": Case((ev(K.KILLED_EXTERNALLY, 5, 1),), 1, K.KILLED_EXTERNALLY, 1),
    "kill lines, confirmed": Case((ev(K.KILLED_EXTERNALLY, 5, 1),), 1, K.HOST_OOM, 1, True),
    "confirmed OOM kill with a killed rank outranks teardown tracebacks": Case(
        (ev(K.USER_CODE_ERROR, 3, 0), ev(K.NCCL_ERROR, 4, 0), ev(K.KILLED_EXTERNALLY, 5, 1)),
        1,
        K.HOST_OOM,
        1,
        True,
    ),
    "confirmation without any kill in the attempt explains nothing": Case(
        (ev(K.USER_CODE_ERROR, 3, 0), ev(K.NCCL_ERROR, 4, 0)), 1, K.NCCL_ERROR, 0, True
    ),
    "sigkill outranks teardown tracebacks": Case(
        (ev(K.USER_CODE_ERROR, 3, 0),), -9, K.KILLED_EXTERNALLY
    ),
    "CUDA OOM outranks a confirmed host OOM": Case(
        (ev(K.CUDA_OOM, 9, 2),), 247, K.CUDA_OOM, 2, True
    ),
    "OOM then NCCL timeouts on other ranks": Case(
        (ev(K.CUDA_OOM, 10, 2), ev(K.NCCL_ERROR, 20, 0), ev(K.NCCL_ERROR, 21, 1)), 1, K.CUDA_OOM, 2
    ),
    "NCCL first in time, OOM later": Case(
        (ev(K.NCCL_ERROR, 1, 0), ev(K.CUDA_OOM, 30, 3)), 1, K.CUDA_OOM, 3
    ),
    "rank of the first line of the winning kind": Case(
        (ev(K.CUDA_OOM, 12, 5), ev(K.CUDA_OOM, 11, 3)), 1, K.CUDA_OOM, 3
    ),
    "compiler OOM-killed in a JIT build, unconfirmed": Case(
        (ev(K.KILLED_EXTERNALLY, 2), ev(K.DS_BUILD_ERROR, 3)), 1, K.DS_BUILD_ERROR
    ),
    "compiler OOM-killed in a JIT build, confirmed": Case(
        (ev(K.KILLED_EXTERNALLY, 2), ev(K.DS_BUILD_ERROR, 3)), 1, K.HOST_OOM, confirmed=True
    ),
    "build error under the traceback it causes": Case(
        (ev(K.DS_BUILD_ERROR, 3), ev(K.USER_CODE_ERROR, 9)), 1, K.DS_BUILD_ERROR
    ),
    "host OOM outranks a build it killed": Case(
        (ev(K.DS_BUILD_ERROR, 3), ev(K.HOST_OOM, 2)), 1, K.HOST_OOM
    ),
    "disk full outranks the checkpoint it truncated": Case(
        (ev(K.CHECKPOINT_ERROR, 8, 0), ev(K.DISK_FULL, 3, 1)), 1, K.DISK_FULL, 1
    ),
    "config over checkpoint": Case(
        (ev(K.CHECKPOINT_ERROR, 1), ev(K.DS_CONFIG_ERROR, 2)), 1, K.DS_CONFIG_ERROR
    ),
    "checkpoint over divergence": Case(
        (ev(K.LOSS_DIVERGENCE, 1), ev(K.CHECKPOINT_ERROR, 2)), 1, K.CHECKPOINT_ERROR
    ),
    "divergence over cuda fatal": Case(
        (ev(K.CUDA_FATAL, 1), ev(K.LOSS_DIVERGENCE, 2)), 1, K.LOSS_DIVERGENCE
    ),
    "cuda fatal over nccl": Case(
        (ev(K.NCCL_ERROR, 1, 1), ev(K.CUDA_FATAL, 2, 0)), -6, K.CUDA_FATAL, 0
    ),
    "kill over nccl fallout": Case(
        (ev(K.NCCL_ERROR, 1, 1), ev(K.KILLED_EXTERNALLY, 2)), 1, K.KILLED_EXTERNALLY
    ),
    "nccl over user code": Case(
        (ev(K.USER_CODE_ERROR, 1, 0), ev(K.NCCL_ERROR, 2, 1)), 1, K.NCCL_ERROR, 1
    ),
    "user code alone": Case((ev(K.USER_CODE_ERROR, 4, 2),), 1, K.USER_CODE_ERROR, 2),
    "hang, nothing else": Case((), -9, K.HANG, hang=True),
    "hang even with exit 0": Case((), 0, K.HANG, hang=True),
    "hang beats its own kill and teardown": Case(
        (ev(K.KILLED_EXTERNALLY, 3), ev(K.USER_CODE_ERROR, 4)), -9, K.HANG, hang=True
    ),
    "hang explained by an OOM": Case((ev(K.CUDA_OOM, 2, 1),), -9, K.CUDA_OOM, 1, hang=True),
    "hang explained by NCCL": Case((ev(K.NCCL_ERROR, 2, 1),), -9, K.NCCL_ERROR, 1, hang=True),
    "hang with a confirmed host OOM": Case((), -9, K.HOST_OOM, hang=True, confirmed=True),
}


@pytest.mark.parametrize("case", CLASSIFY_CASES.values(), ids=CLASSIFY_CASES.keys())
def test_classify(case: Case) -> None:
    """The root cause is the highest-priority kind present, not the last line."""
    failure = classify(
        case.evidence,
        decode_exit(case.exit_code),
        host_oom_confirmed=case.confirmed,
        hang=case.hang,
    )
    if case.expect is None:
        assert failure is None
        return
    assert failure is not None
    assert (failure.kind, failure.rank) == (case.expect, case.rank)
    assert failure.exit == decode_exit(case.exit_code)
    assert len(failure.evidence) <= 8


def test_failure_evidence_leads_with_the_winner_and_is_deduplicated() -> None:
    """Winning lines first, then one line per other kind; at most 8, no repeats."""
    evs = [ev(K.NCCL_ERROR, i, 0) for i in range(1, 4)]
    evs += [Evidence(K.CUDA_OOM, 2, 10 + i, "[rank2]: OOM", True) for i in range(3)]
    evs += [ev(K.CUDA_OOM, 20 + i, 3) for i in range(10)]
    evs += [ev(K.USER_CODE_ERROR, 40, 0)]
    failure = classify(evs, decode_exit(1))
    assert failure is not None
    assert failure.evidence[:5] == (
        "[rank2]: OOM",
        "cuda_oom line 20",
        "cuda_oom line 21",
        "cuda_oom line 22",
        "cuda_oom line 23",
    )
    assert failure.evidence[5:] == (
        "nccl_error line 1",
        "user_code_error line 40",
        "cuda_oom line 24",
    )


# ----------------------------------------------------------------------------------------------
# The corpus: whole logs, each named after the kind it must classify as
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogCase:
    exit_code: int | None
    kind: FailureKind | None
    rank: int | None
    confirmed: bool = False


CORPUS: dict[str, LogCase] = {
    "cuda_oom_deepspeed_4ranks.log": LogCase(1, K.CUDA_OOM, 2),
    "cuda_oom_tqdm_glued.log": LogCase(1, K.CUDA_OOM, None),
    "cuda_oom_torchrun_rank_prefix.log": LogCase(1, K.CUDA_OOM, 1),
    "cuda_oom_srun_label_cublas.log": LogCase(1, K.CUDA_OOM, 1),
    "host_oom_dataloader_worker.log": LogCase(1, K.HOST_OOM, None),
    "host_oom_cpu_allocator_offload.log": LogCase(1, K.HOST_OOM, 1),
    "killed_externally_deepspeed_sigkill.log": LogCase(247, K.KILLED_EXTERNALLY, None),
    "killed_externally_torchrun_sigkill.log": LogCase(1, K.KILLED_EXTERNALLY, None),
    "ds_build_error_cpu_adam.log": LogCase(1, K.DS_BUILD_ERROR, None),
    "ds_build_error_cuda_mismatch.log": LogCase(1, K.DS_BUILD_ERROR, None),
    "ds_config_error_hf_mismatch.log": LogCase(1, K.DS_CONFIG_ERROR, None),
    "ds_config_error_pydantic_zero.log": LogCase(1, K.DS_CONFIG_ERROR, 0),
    "nccl_error_watchdog_timeout.log": LogCase(1, K.NCCL_ERROR, 3),
    "nccl_error_mpirun_unhandled_cuda.log": LogCase(1, K.NCCL_ERROR, 2),
    "cuda_fatal_illegal_memory_access.log": LogCase(-6, K.CUDA_FATAL, 0),
    "cuda_fatal_device_assert.log": LogCase(1, K.CUDA_FATAL, None),
    "loss_divergence_fp16_loss_scale.log": LogCase(1, K.LOSS_DIVERGENCE, 0),
    "checkpoint_error_truncated_zip.log": LogCase(1, K.CHECKPOINT_ERROR, None),
    "checkpoint_error_deepspeed_resume.log": LogCase(1, K.CHECKPOINT_ERROR, 0),
    "disk_full_checkpoint_save.log": LogCase(1, K.DISK_FULL, 0),
    "user_code_error_keyerror.log": LogCase(1, K.USER_CODE_ERROR, 1),
    "user_code_error_rich_traceback.log": LogCase(1, K.USER_CODE_ERROR, None),
    "user_code_error_pdsh_multinode.log": LogCase(1, K.USER_CODE_ERROR, 5),
    "unknown_segfault.log": LogCase(139, K.UNKNOWN, None),
    "success_with_warnings.log": LogCase(0, None, None),
}


def read_log(name: str) -> str:
    # newline="" keeps \r and \r\n exactly as the child wrote them
    with open(LOGS / name, encoding="utf-8", newline="") as fh:
        return fh.read()


def test_corpus_table_covers_every_log() -> None:
    """Every log file has an expectation, and every expectation has a log file."""
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_log(name: str) -> None:
    """Each log classifies as the kind its name starts with, at the right rank."""
    case = CORPUS[name]
    failure = classify_text(read_log(name), case.exit_code, host_oom_confirmed=case.confirmed)
    if case.kind is None:
        assert failure is None
        return
    assert name.startswith(case.kind.value + "_")
    assert failure is not None
    assert (failure.kind, failure.rank) == (case.kind, case.rank)
    assert failure.evidence or case.kind is K.UNKNOWN


def test_corpus_sigkill_is_host_oom_unless_refuted() -> None:
    """The seeds' playbook: a SIGKILL is a host OOM when confirmed, a *probable* one when
    nothing is known (a saved log), and killed_externally only when refuted."""
    text = read_log("killed_externally_deepspeed_sigkill.log")
    unknown = classify_text(text, 247)
    refuted = classify_text(text, 247, host_oom_confirmed=False)
    confirmed = classify_text(text, 247, host_oom_confirmed=True)
    assert unknown is not None and refuted is not None and confirmed is not None
    assert (unknown.kind, unknown.host_oom_confirmed) == (K.HOST_OOM, None)
    assert refuted.kind is K.KILLED_EXTERNALLY
    assert (confirmed.kind, confirmed.host_oom_confirmed) == (K.HOST_OOM, True)
    assert unknown.rank_exit == confirmed.rank_exit == -9
    assert any("exits with return code = -9" in line for line in confirmed.evidence)


def test_confirmation_does_not_relabel_a_failure_without_a_kill() -> None:
    """The cgroup counter may rise for a stranger's OOM: a KeyError stays user_code_error."""
    text = read_log("user_code_error_keyerror.log")
    failure = classify_text(text, 1, host_oom_confirmed=True)
    assert failure is not None
    assert failure.kind is K.USER_CODE_ERROR


def test_corpus_fatal_only_for_oom() -> None:
    """Only OOM lines (CUDA or host) ask the supervisor to end the attempt at once."""
    for name in CORPUS:
        for e in evidence_of(read_log(name)):
            if e.fatal:
                assert e.kind in (K.CUDA_OOM, K.HOST_OOM), (name, e)
        if name.startswith("cuda_oom"):
            assert any(e.fatal for e in evidence_of(read_log(name))), name


# ----------------------------------------------------------------------------------------------
# Chunking: boundaries anywhere give the same evidence
# ----------------------------------------------------------------------------------------------


def stream(chunks: list[str]) -> tuple[tuple[Evidence, ...], list[Evidence], int]:
    sc = StreamClassifier()
    reported: list[Evidence] = []
    for chunk in chunks:
        reported += sc.feed(chunk)
    reported += sc.close()
    return sc.evidence, reported, sc.lines_seen


def random_split(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, max(1, len(text) // 37))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("name", sorted(CORPUS))
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_chunk_boundaries_do_not_change_evidence(name: str, crlf: bool) -> None:
    """Whole, byte by byte, in random splits and in 64 KiB chunks: identical results."""
    text = read_log(name)
    if crlf:  # a pty turns every \n into \r\n
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    whole = stream([text])
    assert whole[0] == tuple(whole[1])  # feed()+close() reported exactly what was kept
    assert stream(list(text)) == whole
    rng = random.Random(name)
    for _ in range(5):
        assert stream(random_split(text, rng)) == whole
    assert stream([text[i : i + 65536] for i in range(0, len(text), 65536)]) == whole
    if crlf:
        assert whole[0] == evidence_of(text.replace("\r\n", "\n"))


def test_many_logs_in_one_stream_keep_line_numbers() -> None:
    """Line numbers continue across chunks: concatenated logs number like one file."""
    texts = [read_log(n) for n in sorted(CORPUS)]
    joined = "".join(t if t.endswith("\n") else t + "\n" for t in texts)
    evidence, _, lines = stream([joined])
    assert lines == joined.count("\n") + joined.count("\r") - joined.count("\r\n")
    chunks, _, _ = stream([t if t.endswith("\n") else t + "\n" for t in texts])
    assert chunks == evidence
