"""Remedies for ds_build_error and loss_divergence: pure, table-driven, milliseconds.

The log lines are real formats: the cpu_adam lines are from a real failed JIT build on this
machine (tests/test_build_remedy.py makes one); the others are DeepSpeed's and torch's own
messages (deepspeed/ops/op_builder/builder.py, torch/utils/cpp_extension.py, gcc, nvcc) as
they appear in public issue logs, with rank prefixes where a launcher adds them.
"""

from __future__ import annotations

from typing import Any

import pytest

from dsguard.core.classify import FailureKind, classify_text
from dsguard.core.remedies import (
    ConfigPatch,
    GiveUp,
    Remedy,
    apply_flags,
    compiler_error_line,
    failing_op,
    is_cuda_mismatch,
    merged_env,
    next_remedy,
    remedy_args,
    remedy_config,
)
from dsguard.host.envfacts import EnvFacts, GpuFact, Toolkit

SITE = "/work/main/.venv/lib/python3.11/site-packages"

# A real failed build of cpu_adam (broken compiler first on PATH), as the log shows it.
CPU_ADAM_BUILD = [
    "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully",
    "[rank0]: subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit "
    "status 1.",
    f"[rank0]: RuntimeError: Error building extension 'cpu_adam': [1/3] c++ -MMD -MF "
    f"cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -DTORCH_API_INCLUDE_EXTENSION_H "
    f"-I{SITE}/deepspeed/ops/csrc/includes -fPIC -std=c++20 -O2 -c "
    f"{SITE}/deepspeed/ops/csrc/adam/cpu_adam.cpp -o cpu_adam.o ",
    "[rank0]: FAILED: cpu_adam.o ",
    f"[rank0]: c++ -MMD -MF cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -std=c++20 -O2 -c "
    f"{SITE}/deepspeed/ops/csrc/adam/cpu_adam.cpp -o cpu_adam.o ",
    "[rank0]: c++: error: unrecognized command line option '-std=c++20'; did you mean "
    "'-std=c++2a'?",
    "[rank0]: ninja: build stopped: subcommand failed.",
    "[rank0]: RuntimeError: DeepSpeedCPUAdam requires the cpu_adam op, which failed to build/load.",
]
CUDA_MISMATCH = [
    "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...",
    "[rank0]: deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: "
    "Installed CUDA version 11.8 does not match the version torch was compiled with 12.1, "
    "unable to compile cuda/cpp extensions without a matching cuda version.",
]
FUSED_ADAM_GNU = [
    "Emitting ninja build file /root/.cache/torch_extensions/py310_cu118/fused_adam/build.ninja...",
    "Building extension module fused_adam...",
    "Allowing ninja to set a default number of workers... (overridable by setting the "
    "environment variable MAX_JOBS=N)",
    "FAILED: multi_tensor_adam.cuda.o ",
    "/usr/local/cuda/include/crt/host_config.h:132:2: error: #error -- unsupported GNU "
    "version! gcc versions later than 11 are not supported! The nvcc flag "
    "'-allow-unsupported-compiler' can be used to override this version check",
    "ninja: build stopped: subcommand failed.",
]
ADAGRAD_SO = [
    "ImportError: /root/.cache/torch_extensions/py310_cu117/cpu_adagrad/cpu_adagrad.so: "
    "cannot open shared object file: No such file or directory",
]
LION_JIT = [
    "RuntimeError: Unable to JIT load the cpu_lion op due to it not being compatible due to "
    "hardware/software issue. cpu_lion requires CUDA extensions",
]
SHM = [
    "RuntimeError: Error building extension 'deepspeed_shm_comm': [1/3] c++ -MMD -MF "
    "shm_interface.o.d -DTORCH_EXTENSION_NAME=deepspeed_shm_comm -c shm_interface.cpp",
    "shm_interface.cpp:1:10: fatal error: immintrin_broken.h: No such file or directory",
]
LINK = [
    "[2/2] c++ multi_tensor_adam.cuda.o -shared -lcurand -o fused_adam.so",
    "FAILED: fused_adam.so",
    "/usr/bin/ld: cannot find -lcurand: No such file or directory",
    "collect2: error: ld returned 1 exit status",
    "RuntimeError: Error building extension 'fused_adam'",
]
# A real failure inside DeepSpeed's fused_adam builder on an H200 before any build line
# (bench/gpu, TORCH_CUDA_ARCH_LIST=9.0a: compute_capability_args cannot parse "0a"): only the
# traceback's op_builder frame names the op.
ARCH_SUFFIX = [
    "[rank0]:     fused_adam_cuda = FusedAdamBuilder().load()",
    '[rank0]:   File "/tmp/site/deepspeed/ops/op_builder/builder.py", line 566, in load',
    '[rank0]:   File "/tmp/site/deepspeed/ops/op_builder/fused_adam.py", line 36, in nvcc_args',
    '[rank0]:   File "/tmp/site/deepspeed/ops/op_builder/builder.py", line 710, in <genexpr>',
    "[rank0]: ValueError: invalid literal for int() with base 10: '0a'",
]
LOSS_SCALE = [
    "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale "
    "anymore. Exiting run."
]


@pytest.mark.parametrize(
    ("lines", "op"),
    [
        (CPU_ADAM_BUILD, "cpu_adam"),
        (FUSED_ADAM_GNU, "fused_adam"),  # verbose build lines, no "Error building" line
        (ADAGRAD_SO, "cpu_adagrad"),
        (LION_JIT, "cpu_lion"),
        (ARCH_SUFFIX, "fused_adam"),
        (  # an accelerator's own builder directory; the base builder.py alone names no op
            [r'  File "C:\py\deepspeed\ops\op_builder\cpu\cpu_adam.py", line 3, in x'],
            "cpu_adam",
        ),
        (['  File "/x/deepspeed/ops/op_builder/builder.py", line 710, in <genexpr>'], None),
        (['  File "/x/deepspeed/ops/op_builder/__init__.py", line 9, in <module>'], None),
        (SHM, "deepspeed_shm_comm"),
        (LINK, "fused_adam"),
        (
            [
                "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f>",
                "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'",
            ],
            "cpu_adam",
        ),
        (
            [  # a prebuilt op that no longer loads
                f"ImportError: {SITE}/deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu"
                ".so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
            ],
            "cpu_adam",
        ),
        (
            [  # shm built fine, then cpu_adam started and never finished
                "Building extension module deepspeed_shm_comm...",
                "Loading extension module deepspeed_shm_comm...",
                "Building extension module cpu_adam...",
                "ninja: build stopped: subcommand failed.",
            ],
            "cpu_adam",
        ),
        (["Loading extension module cpu_adam...", "Time to load cpu_adam op: 2.1 seconds"], None),
        (CUDA_MISMATCH, None),
        (  # a missing CUDA runtime library is not a DeepSpeed op
            [
                "ImportError: /usr/local/cuda/lib64/libcudart.so: cannot open shared object "
                "file: No such file or directory"
            ],
            None,
        ),
    ],
)
def test_failing_op(lines: list[str], op: str | None) -> None:
    assert failing_op(lines) == op


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            CPU_ADAM_BUILD,
            "c++: error: unrecognized command line option '-std=c++20'; did you mean '-std=c++2a'?",
        ),
        (FUSED_ADAM_GNU, FUSED_ADAM_GNU[4]),
        (["x.cpp:1:2: error: " + "y" * 400], "x.cpp:1:2: error: " + "y" * 281 + "…"),
        (SHM, SHM[1]),
        (LINK, "/usr/bin/ld: cannot find -lcurand: No such file or directory"),
        (
            ["nvcc fatal   : Unsupported gpu architecture 'compute_90'"],
            "nvcc fatal   : Unsupported gpu architecture 'compute_90'",
        ),
        (
            ['multi_tensor_adam.cu(87): error: identifier "__hfma2" is undefined'],
            'multi_tensor_adam.cu(87): error: identifier "__hfma2" is undefined',
        ),
        (CUDA_MISMATCH, None),  # Python exceptions are not compiler diagnostics
    ],
)
def test_compiler_error_line(lines: list[str], expected: str | None) -> None:
    assert compiler_error_line(lines) == expected


def test_mismatch_exception_is_a_build_error_but_its_warnings_are_not_failures() -> None:
    """DeepSpeed's two mismatch *warnings* do not stop the build: not a failure, not evidence."""
    accepted = (
        "Installed CUDA version 12.4 does not match the version torch was compiled with 12.1 "
        "but since the APIs are compatible, accepting this combination\n"
    )
    skipped = (
        " [WARNING]  DeepSpeed Op Builder: Installed CUDA version 11.8 does not match the "
        "version torch was compiled with 12.1.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this "
        "combination of CUDA, but it may result in unexpected behavior.\n"
    )
    for warning in (accepted, skipped):
        assert classify_text(warning + "{'loss': 1.9}\n", 0) is None
        failed = classify_text(warning, 1)
        assert failed is not None
        assert failed.kind is FailureKind.UNKNOWN
        assert not is_cuda_mismatch([warning])
    failure = classify_text("\n".join(CUDA_MISMATCH) + "\n", 1)
    assert failure is not None
    assert failure.kind is FailureKind.DS_BUILD_ERROR
    assert is_cuda_mismatch(failure.evidence)


# -- the ladder -------------------------------------------------------------------------------


def tk(path: str, version: str | None, *, nvcc: bool = True, headers: bool = True) -> Toolkit:
    return Toolkit(
        path=path,
        realpath=path,
        version=version,
        full_version=version,
        version_source="nvcc" if nvcc else "version.json",
        has_nvcc=nvcc,
        has_headers=headers,
        found_via="search",
    )


CU118 = tk("/usr/local/cuda-11.8", "11.8")
CU121 = tk("/usr/local/cuda-12.1", "12.1")
CU124 = tk("/usr/local/cuda-12.4", "12.4")
CU121_RUNTIME = tk("/opt/cuda-12.1", "12.1", nvcc=False)
LOCAL_WRAPPER = tk("/usr/local", "12.1", headers=False)  # /usr/local/bin/nvcc script only


def facts(
    *,
    torch_cuda: str | None = "12.1",
    cuda_home: str | None = "/usr/local/cuda-11.8",
    toolkits: tuple[Toolkit, ...] = (CU118,),
    gpus: tuple[GpuFact, ...] | None = None,
    gpu_error: str | None = "NVML unavailable: NVML Shared Library Not Found",
    skip: bool = False,
) -> EnvFacts:
    return EnvFacts(
        python="/venv/bin/python",
        torch_version="2.5.1+cu121" if torch_cuda else "2.13.0+cpu",
        torch_cuda=torch_cuda,
        cuda_home=cuda_home,
        toolkits=toolkits,
        gpus=gpus,
        gpu_error=gpu_error,
        ds_skip_cuda_check=skip,
    )


ADAMW_CFG: dict[str, Any] = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
}
ADAM_CFG: dict[str, Any] = {"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}}
ADAGRAD_CFG: dict[str, Any] = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "Adagrad", "params": {"lr": 0.01}},
}
LION_CFG: dict[str, Any] = {"optimizer": {"type": "Lion", "params": {"lr": 1e-4}}}
NO_OPT_CFG: dict[str, Any] = {"zero_optimization": {"stage": 2}}

TORCH_ADAM = ConfigPatch(set={"optimizer.params.torch_adam": True})


@pytest.mark.parametrize(
    ("name", "lines", "applied", "env", "cfg", "expected"),
    [
        # CUDA mismatch, a matching toolkit installed: point CUDA_HOME at it first
        ("mismatch+match", CUDA_MISMATCH, set(), facts(toolkits=(CU118, CU121)), ADAMW_CFG,
         ("cuda_home", {"CUDA_HOME": "/usr/local/cuda-12.1"})),
        # ... the runtime-only or header-less one is never offered
        ("mismatch+runtime-only", CUDA_MISMATCH, set(),
         facts(toolkits=(CU118, CU121_RUNTIME, LOCAL_WRAPPER)), ADAMW_CFG,
         ("skip_cuda_check", {"DS_SKIP_CUDA_CHECK": "1"})),
        # same-major fallback when no exact toolkit exists (DeepSpeed accepts 12.x for 12.y)
        ("mismatch+same-major", CUDA_MISMATCH, set(), facts(toolkits=(CU118, CU124)), ADAMW_CFG,
         ("cuda_home", {"CUDA_HOME": "/usr/local/cuda-12.4"})),
        # no matching toolkit: skip DeepSpeed's check
        ("mismatch-only", CUDA_MISMATCH, set(), facts(), ADAMW_CFG,
         ("skip_cuda_check", {"DS_SKIP_CUDA_CHECK": "1"})),
        # cuda_home done, still a mismatch (another toolkit picked up?): skip the check
        ("after-cuda-home", CUDA_MISMATCH, {"cuda_home"}, facts(toolkits=(CU118, CU121)),
         ADAMW_CFG, ("skip_cuda_check", {"DS_SKIP_CUDA_CHECK": "1"})),
        # the user already skips the check: go on to avoiding the op (named in the log)
        ("skip-already-set", [*CUDA_MISMATCH, CPU_ADAM_BUILD[2]], set(), facts(skip=True),
         ADAMW_CFG, ("avoid_cpu_adam", TORCH_ADAM)),
        # a compile error (not CUDA) on a CPU torch: straight to avoiding cpu_adam
        ("cpu-compile", CPU_ADAM_BUILD, set(), facts(torch_cuda=None, cuda_home=None,
                                                      toolkits=()), ADAMW_CFG,
         ("avoid_cpu_adam", TORCH_ADAM)),
        # Adam type (adam_w_mode semantics kept): the same switch
        ("adam-type", CPU_ADAM_BUILD, set(), facts(torch_cuda=None), ADAM_CFG,
         ("avoid_cpu_adam", TORCH_ADAM)),
        # fused_adam with the toolkit in use != torch's and a matching one present: CUDA_HOME
        ("fused+differs", FUSED_ADAM_GNU, set(),
         facts(cuda_home="/usr/local/cuda-11.8", toolkits=(CU118, CU121)), ADAMW_CFG,
         ("cuda_home", {"CUDA_HOME": "/usr/local/cuda-12.1"})),
        ("fused+matches", FUSED_ADAM_GNU, set(),
         facts(cuda_home="/usr/local/cuda-12.1", toolkits=(CU118, CU121)), ADAMW_CFG,
         ("avoid_fused_adam", TORCH_ADAM)),
        ("adagrad", ADAGRAD_SO, set(), facts(torch_cuda=None), ADAGRAD_CFG,
         ("avoid_cpu_adagrad", ConfigPatch(set={"zero_force_ds_cpu_optimizer": False},
                                           drop=("optimizer",)))),
        # give-ups
        ("all-tried", CPU_ADAM_BUILD, {"avoid_cpu_adam"}, facts(torch_cuda=None), ADAMW_CFG,
         "DeepSpeed could not build the cpu_adam op; first compiler error: c++: error: "
         "unrecognized command line option '-std=c++20'"),
        ("lion", LION_JIT, set(), facts(torch_cuda=None), LION_CFG,
         "Lion has no torch implementation"),
        ("shm", SHM, set(), facts(torch_cuda=None), NO_OPT_CFG,
         "first compiler error: shm_interface.cpp:1:10: fatal error: immintrin_broken.h"),
        ("no-opt-block", CPU_ADAM_BUILD, set(), facts(torch_cuda=None), NO_OPT_CFG,
         "no config change avoids it"),
        ("no-ds-config", CPU_ADAM_BUILD, set(), facts(torch_cuda=None), None,
         "DS_BUILD_CPU_ADAM=1 pip install deepspeed"),
        ("torch-adam-already", CPU_ADAM_BUILD, set(), facts(torch_cuda=None),
         TORCH_ADAM.apply(ADAMW_CFG), "already uses torch_adam"),
        ("unknown-op", ["ninja: build stopped: subcommand failed."], set(), facts(torch_cuda=None),
         ADAMW_CFG, "DeepSpeed could not build a DeepSpeed op"),
    ],
)  # fmt: skip
def test_ds_build_ladder(
    *,
    name: str,
    lines: list[str],
    applied: set[str],
    env: EnvFacts,
    cfg: dict[str, Any] | None,
    expected: tuple[str, Any] | str,
) -> None:
    got = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(applied), env, ds_config=cfg)
    if isinstance(expected, str):
        assert isinstance(got, GiveUp), got
        assert expected in got.reason
        return
    assert isinstance(got, Remedy), got
    rname, change = expected
    assert got.name == rname
    assert got.kind is FailureKind.DS_BUILD_ERROR
    if isinstance(change, ConfigPatch):
        assert got.config == change
        assert not got.env
    else:
        assert dict(got.env) == change
        assert not got.config


def test_ds_build_walks_the_whole_ladder_once() -> None:
    """Each remedy at most once, in order, then a give-up that names op, error and history."""
    lines = [*CUDA_MISMATCH, *CPU_ADAM_BUILD]
    env = facts(toolkits=(CU118, CU121))
    applied: set[str] = set()
    names = []
    for _ in range(10):
        got = next_remedy(
            FailureKind.DS_BUILD_ERROR, lines, frozenset(applied), env, ds_config=ADAMW_CFG
        )
        if isinstance(got, GiveUp):
            break
        names.append(got.name)
        applied.add(got.name)
    assert names == ["cuda_home", "skip_cuda_check", "avoid_cpu_adam"]
    assert isinstance(got, GiveUp)
    assert "cpu_adam" in got.reason
    assert "already tried: avoid_cpu_adam, cuda_home, skip_cuda_check" in got.reason
    assert "c++: error: unrecognized command line option" in got.reason


def test_adagrad_remedy_is_a_new_phase_with_hf_flag() -> None:
    got = next_remedy(
        FailureKind.DS_BUILD_ERROR, ADAGRAD_SO, frozenset(), facts(), ds_config=ADAGRAD_CFG
    )
    assert isinstance(got, Remedy)
    assert dict(got.flags) == {"--optim": "adagrad"}
    assert got.new_phase
    patched = got.config.apply(ADAGRAD_CFG)
    assert "optimizer" not in patched
    assert patched["zero_force_ds_cpu_optimizer"] is False
    assert "optimizer" in ADAGRAD_CFG  # the input is not mutated


AMPERE = GpuFact(0, "GPU-a", "NVIDIA A100-SXM4-80GB", (8, 0))
HOPPER = GpuFact(1, "GPU-h", "NVIDIA H100 80GB HBM3", (9, 0))
VOLTA = GpuFact(2, "GPU-v", "Tesla V100-SXM2-32GB", (7, 0))
NOCAP = GpuFact(3, "GPU-x", None, None)


@pytest.mark.parametrize(
    ("gpus", "applied", "cfg", "expected"),
    [
        ((AMPERE, HOPPER), set(), {"fp16": {"enabled": True}}, "bf16"),
        ((HOPPER,), set(), None, "bf16"),
        ((AMPERE, VOLTA), set(), {"fp16": {"enabled": True}}, "Tesla V100-SXM2-32GB) 7.0"),
        (None, set(), {"fp16": {"enabled": True}}, "compute capability is unknown"),
        ((), set(), None, "no GPU is visible"),
        ((AMPERE, NOCAP), set(), None, "GPU 3 is unknown"),
        ((AMPERE,), {"bf16"}, None, "again after switching to bf16"),
        ((AMPERE,), set(), {"bf16": {"enabled": True}}, "bf16 is already enabled"),
    ],
)
def test_loss_divergence(
    gpus: tuple[GpuFact, ...] | None,
    applied: set[str],
    cfg: dict[str, Any] | None,
    expected: str,
) -> None:
    got = next_remedy(
        FailureKind.LOSS_DIVERGENCE, LOSS_SCALE, frozenset(applied), facts(gpus=gpus),
        ds_config=cfg,
    )  # fmt: skip
    if expected != "bf16":
        assert isinstance(got, GiveUp), got
        assert expected in got.reason
        return
    assert isinstance(got, Remedy)
    assert got.name == "bf16"
    assert dict(got.flags) == {"--fp16": "false", "--bf16": "true"}
    patched = got.config.apply(cfg or {})
    assert patched["fp16"]["enabled"] is False
    assert patched["bf16"]["enabled"] is True


def test_loss_divergence_is_classified_from_deepspeeds_message() -> None:
    failure = classify_text("\n".join(LOSS_SCALE) + "\n", 1)
    assert failure is not None
    assert failure.kind is FailureKind.LOSS_DIVERGENCE


def test_other_kinds_are_not_remedied() -> None:
    assert isinstance(next_remedy(FailureKind.CUDA_OOM, [], frozenset(), facts()), GiveUp)


# -- applying ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "flags", "expected"),
    [
        (["--fp16", "true", "--lr", "1"], {"--fp16": "false", "--bf16": "true"},
         ["--fp16", "false", "--lr", "1", "--bf16", "true"]),
        (["--fp16", "--lr", "1"], {"--fp16": "false"}, ["--fp16", "false", "--lr", "1"]),
        (["--lr", "1", "--fp16"], {"--fp16": "false"}, ["--lr", "1", "--fp16", "false"]),
        (["--fp16=true"], {"--fp16": "false"}, ["--fp16=false"]),
        (["--fp16_full_eval", "true"], {"--fp16": "false"},
         ["--fp16_full_eval", "true", "--fp16", "false"]),
        ([], {"--optim": "adagrad"}, ["--optim", "adagrad"]),
    ],
)  # fmt: skip
def test_apply_flags(args: list[str], flags: dict[str, str], expected: list[str]) -> None:
    assert apply_flags(args, flags) == expected


def test_config_patch_apply_and_round_trip() -> None:
    patch = ConfigPatch(set={"bf16.enabled": True, "fp16.enabled": False}, drop=("optimizer",))
    cfg: dict[str, Any] = {"fp16": {"enabled": "auto", "loss_scale": 0}, "optimizer": {}}
    out = patch.apply(cfg)
    assert out == {"fp16": {"enabled": False, "loss_scale": 0}, "bf16": {"enabled": True}}
    assert cfg["fp16"]["enabled"] == "auto"
    assert ConfigPatch.from_dict(patch.as_dict()) == patch
    assert not ConfigPatch()
    assert ConfigPatch(drop=("a.b.c",)).apply({"a": 1}) == {"a": 1}  # missing path: no-op


def test_remedy_round_trip_and_env_merge() -> None:
    r1 = Remedy("cuda_home", FailureKind.DS_BUILD_ERROR, "why", env={"CUDA_HOME": "/a"})
    r2 = Remedy(
        "bf16",
        FailureKind.LOSS_DIVERGENCE,
        "why",
        config=ConfigPatch(set={"bf16.enabled": True}),
        flags={"--bf16": "true"},
        caveats=("c",),
    )
    for r in (r1, r2):
        assert Remedy.from_dict(r.as_dict()) == r
    r3 = Remedy("x", FailureKind.DS_BUILD_ERROR, "", env={"CUDA_HOME": "/b", "K": "1"})
    assert merged_env([r1, r3]) == {"CUDA_HOME": "/b", "K": "1"}


def test_remedy_args_and_config_stack() -> None:
    """The loop keeps every applied remedy and re-applies them to each attempt's launch."""
    bf16 = next_remedy(FailureKind.LOSS_DIVERGENCE, LOSS_SCALE, frozenset(), facts(gpus=(AMPERE,)))
    avoid = next_remedy(
        FailureKind.DS_BUILD_ERROR, CPU_ADAM_BUILD, frozenset(), facts(torch_cuda=None),
        ds_config=ADAMW_CFG,
    )  # fmt: skip
    assert isinstance(bf16, Remedy)
    assert isinstance(avoid, Remedy)
    assert Remedy.from_dict(bf16.as_dict()) == bf16
    both = [avoid, bf16]
    hf_args = ["--model_name_or_path", "m", "--fp16", "true"]
    assert remedy_args(hf_args, both) == [*hf_args[:3], "false", "--bf16", "true"]
    # no --fp16 in args: not an HF-flag script (or fp16 set elsewhere): the config carries it
    custom = ["--epochs", "3"]
    assert remedy_args(custom, both) == custom
    cfg = remedy_config({**ADAMW_CFG, "fp16": {"enabled": True}}, both)
    assert cfg["optimizer"]["params"]["torch_adam"] is True
    assert (cfg["fp16"]["enabled"], cfg["bf16"]["enabled"]) == (False, True)
    assert "torch_adam" not in ADAMW_CFG["optimizer"]["params"]


# A live P5 S1 attempt (RLIMIT_AS 1.54 GiB, the training process's VmPeak 1.21 GiB): DeepSpeed
# rebuilt its CPU shm op and the compiler, under the same limit, ran out of address space.
SHM_BUILD_OOM = [
    f"RuntimeError: Error building extension 'deepspeed_shm_comm': [1/3] c++ -MMD -MF "
    f"shm_interface.o.d -DTORCH_EXTENSION_NAME=deepspeed_shm_comm -fPIC -std=c++20 -O2 -c "
    f"{SITE}/deepspeed/ops/csrc/cpu/comm/shm_interface.cpp -o shm_interface.o",
    "FAILED: shm.o ",
    "virtual memory exhausted: Cannot allocate memory",
    "ninja: build stopped: subcommand failed.",
]


@pytest.mark.parametrize(
    "line",
    [
        "virtual memory exhausted: Cannot allocate memory",  # gcc
        "cc1plus: out of memory allocating 65536 bytes after a total of 1409024000 bytes",
        "LLVM ERROR: out of memory",
    ],
)
def test_a_compilers_oom_is_a_build_failure_not_the_trainings(line: str) -> None:
    """The memory line is the compiler's: ds_build_error (no knob shrinks a compiler), and
    the remedy ladder gives up at once saying why and what to do, not after every remedy."""
    lines = [*SHM_BUILD_OOM[:2], line, SHM_BUILD_OOM[3]]
    failure = classify_text("\n".join(lines) + "\n", 1)
    assert failure is not None and failure.kind is FailureKind.DS_BUILD_ERROR
    got = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(), facts(), ds_config=None)
    assert isinstance(got, GiveUp)
    assert got.reason.startswith("the compiler building the deepspeed_shm_comm op ran out of")
    assert "TORCH_EXTENSIONS_DIR" in got.reason and line[:20] in got.reason


def test_the_training_processes_own_oom_stays_host_oom() -> None:
    """Only the compiler's wording moves: torch's allocator and ENOMEM stay host_oom."""
    for line in ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: "
                 "can't allocate memory: you tried to allocate 209715200 bytes.",
                 "OSError: [Errno 12] Cannot allocate memory"):  # fmt: skip
        failure = classify_text(line + "\n", 1)
        assert failure is not None and failure.kind is FailureKind.HOST_OOM
