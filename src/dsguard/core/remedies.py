"""Remedies for failures no knob fixes: a DeepSpeed op that will not build, an fp16 loss collapse.

Pure: no I/O, no clock. The run loop gathers the evidence (the classifier's lines plus the tail
of the attempt log) and the :class:`~dsguard.core.envfacts.EnvFacts`; this module decides.

Why remedies are not ladder rungs: a rung changes a *knob* and keeps the global batch. These
change the *environment* (``CUDA_HOME``, ``DS_SKIP_CUDA_CHECK``), the rendered DeepSpeed
config (a small :class:`ConfigPatch`) or an HF precision flag, and they stack: once applied a
remedy stays applied for every later attempt of the run, and each is tried at most once.

``ds_build_error`` (the JIT build of a DeepSpeed op failed, or its ``.so`` will not load; the
same failure of another package's compiled extension, such as apex or mamba's kernels, gets
steps 1 and 4 only, with that package's advice: :func:`build_subject`), in order, each only
where it can help:

1. ``cuda_home``: torch was built for CUDA X.Y but the JIT build uses another (or no)
   toolkit, and a toolkit X.Y with a working ``nvcc`` is installed: point ``CUDA_HOME`` at it.
   This is the real fix for DeepSpeed's ``CUDAMismatchException`` ("Installed CUDA version ...
   does not match the version torch was compiled with ..."), so it is tried before (2).
2. ``skip_cuda_check``: the failure *is* that version check and no matching toolkit exists:
   ``DS_SKIP_CUDA_CHECK=1`` (DeepSpeed then builds with the toolkit it has, with a warning).
   ``DS_BUILD_OPS=0`` is deliberately not set: DeepSpeed reads it only in ``setup.py`` at
   install time; at run time it changes nothing, and an event claiming it did would mislead.
3. ``avoid_<op>``: do without the op. ``cpu_adam`` / ``fused_adam`` (DeepSpeed's Adam/AdamW
   under ZeRO-Offload / on the device): ``optimizer.params.torch_adam: true``, DeepSpeed's own
   switch to ``torch.optim.AdamW``/``Adam``. The optimizer block, its hyperparameters, its
   single parameter group and the LR-scheduler wiring stay as they were, so checkpoints
   resume; only the implementation of the update changes (slower on CPU). ``cpu_adagrad``:
   no torch switch exists inside DeepSpeed, so the optimizer block is dropped, HF builds
   ``torch.optim.Adagrad`` (``--optim adagrad``) and ``zero_force_ds_cpu_optimizer: false``
   lets DeepSpeed accept it under offload (a new phase when a checkpoint exists: the
   parameter groups differ). Lion and LAMB have no torch implementation; switching them to
   AdamW would silently train another optimizer at the wrong learning rate, so those give up.
4. give up, naming the op (or the package whose extension it is) and the first compiler
   ``error:`` line.

``loss_divergence`` (DeepSpeed: "Current loss scale already at minimum - cannot decrease scale
anymore"): fp16 -> bf16 (``fp16.enabled false``, ``bf16.enabled true``; HF flags ``--fp16
false --bf16 true``), only when every GPU the job uses has compute capability >= 8.0 (bf16
needs Ampere or newer). An unknown capability (no driver, NVML failing) is *not* "< 8.0": the
answer is to give up with the advice, never to guess either way.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsguard.core.classify import COMPILER_OOM, FailureKind
from dsguard.core.envfacts import EnvFacts, Toolkit
from dsguard.core.records import as_builtins, from_builtins

__all__ = [
    "BuildSubject",
    "ConfigPatch",
    "GiveUp",
    "Remedy",
    "apply_flags",
    "build_subject",
    "compiler_error_line",
    "failing_op",
    "is_cuda_mismatch",
    "merged_env",
    "next_remedy",
    "remedy_args",
    "remedy_config",
]


# -- what a remedy is -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigPatch:
    """A change to the rendered DeepSpeed config: drop dotted paths, then set dotted paths.

    ``ConfigPatch(drop=("optimizer",), set={"zero_force_ds_cpu_optimizer": False})``;
    ``set`` creates missing intermediate objects (``"bf16.enabled": True`` with no ``bf16``
    block adds one).
    """

    set: Mapping[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.set) or bool(self.drop)

    def apply(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """A patched deep copy of ``cfg``."""
        out: dict[str, Any] = copy.deepcopy(dict(cfg))
        for path in self.drop:
            *parents, leaf = path.split(".")
            node: Any = out
            for p in parents:
                node = node.get(p) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(leaf, None)
        for path, value in self.set.items():
            *parents, leaf = path.split(".")
            node = out
            for p in parents:
                child = node.get(p)
                if not isinstance(child, dict):
                    child = node[p] = {}
                node = child
            node[leaf] = copy.deepcopy(value)
        return out

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConfigPatch:
        return from_builtins(d, cls)


@dataclass(frozen=True, slots=True)
class Remedy:
    """One change to the environment of every later attempt; see the module docstring.

    ``flags`` are HF ``TrainingArguments`` flags (``{"--fp16": "false"}``). With
    ``flags_anchor`` set they are passed only when that flag is already in the job's args:
    its presence is the evidence that the script parses HF's flags (a custom DeepSpeed script
    would die on an unknown ``--bf16``), and without it the config change alone does the job.
    :func:`remedy_args` applies this. ``new_phase``: a checkpoint saved before the remedy
    cannot be resumed under it (only matters when there is one to resume).
    """

    name: str
    kind: FailureKind
    reason: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    config: ConfigPatch = field(default_factory=ConfigPatch)
    flags: Mapping[str, str] = field(default_factory=dict)
    flags_anchor: str | None = None
    caveats: tuple[str, ...] = ()
    new_phase: bool = False

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Remedy:
        return from_builtins(d, cls)


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Nothing (more) dsguard can change helps; ``reason`` says what the user must do."""

    reason: str


# -- reading the evidence (pure) --------------------------------------------------------------

_RANK_PREFIX = re.compile(r"^(?:\[[A-Za-z_][\w-]*?\d+\]: ?|\d{1,6}: )")

# Where the name of the op that failed appears, strongest first. Sources: torch
# cpp_extension._run_ninja_build ("Error building extension 'cpu_adam'"), DeepSpeed
# op_builder/builder.py jit_load ("Unable to JIT load the cpu_adam op due to ..."), DeepSpeed
# ops/adam/cpu_adam.py in 0.19.8 ("DeepSpeedCPUAdam requires the cpu_adam op, which failed to
# build/load."), the loader when a failed build left no .so (DeepSpeed#7174) or a prebuilt op
# no longer matches torch (only paths under torch_extensions/ or deepspeed/ops/: a missing
# libcudart is not an op).
_OP_STRONG: tuple[re.Pattern[str], ...] = (
    re.compile(r"Error building extension '(\w+)'"),
    re.compile(r"Unable to JIT load the (\w+) op due to"),
    re.compile(r"requires the (\w+) op, which failed to build"),
    re.compile(
        r"(?:torch_extensions|deepspeed/ops)/\S*?(\w+?)(?:_op)?(?:\.cpython-[\w.-]+|\.abi3)?\.so: "
        r"(?:cannot open shared object file|undefined symbol)"
    ),
    # ninja's failing compile command (the ninja output is embedded in the RuntimeError)
    re.compile(r"-DTORCH_EXTENSION_NAME=(\w+)\b.*\s-c\s"),
)
# After a failed build the optimizer's __del__ often dies too (older DeepSpeed, a common sight
# in issue logs): "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'".
_OP_OF_CLASS: dict[str, str] = {
    "DeepSpeedCPUAdam": "cpu_adam",
    "DeepSpeedCPUAdagrad": "cpu_adagrad",
    "DeepSpeedCPULion": "cpu_lion",
    "FusedAdam": "fused_adam",
    "FusedLamb": "fused_lamb",
    "FusedLion": "fused_lion",
}
_OP_CLASS = re.compile(r"'(" + "|".join(_OP_OF_CLASS) + r")' object has no attribute 'ds_opt_")
# A failure inside the op's own builder before any build line is printed, where only the
# traceback names the op: DeepSpeed 0.19.8's compute_capability_args cannot parse an arch with
# a suffix ("ValueError: invalid literal for int() with base 10: '0a'" with TORCH_CUDA_ARCH_LIST
# =9.0a on an H200, seen in bench/gpu; DeepSpeed#7589 is the same on a GH200). The innermost
# frame in deepspeed/ops/op_builder/<op>.py names it; builder.py and __init__.py are the base.
_OP_BUILDER_FRAME = re.compile(
    r'File "[^"]*deepspeed[/\\]ops[/\\]op_builder[/\\](?:\w+[/\\])?'
    r'(?!builder\.py|__init__\.py|all_ops\.py)(\w+)\.py", line \d+'
)
# torch's verbose JIT lines: a build that started and never reported success is the failed one.
_OP_BUILDING = re.compile(
    r"Building extension module (\w+)\.\.\.|Emitting ninja build file \S*/(\w+)/build\.ninja"
)
_OP_LOADED = re.compile(
    r"Loading extension module (\w+)\.\.\.|Time to load (\w+) op:|deepspeed\.ops\.\w+\.(\w+?)_op "
    r"built successfully"
)

# DeepSpeed op_builder/builder.py assert_no_cuda_mismatch: the raised exception. Its two
# warnings (a compatible minor version; DS_SKIP_CUDA_CHECK=1) do not stop the build.
_CUDA_MISMATCH = re.compile(
    r"CUDAMismatchException"
    r"|unable to compile cuda/cpp extensions without a matching cuda version"
)
# The toolkit is missing or unusable (no nvcc, CUDA_HOME unset), or nvcc itself refused.
_CUDA_TOOLKIT_TROUBLE = re.compile(
    r"MissingCUDAException|CUDA_HOME does not exist|CUDA_HOME environment variable is not set"
    r"|Unable to run \S*nvcc|nvcc fatal"
)

# A compiler's own diagnostic: gcc/clang "file:12:3: error: ...", "c++: error: ...",
# "cc1plus: fatal error: ...", nvcc "file.cu(12): error: ...", "nvcc fatal   : ...".
_COMPILER_ERROR = re.compile(
    r"(?::\d+(?::\d+)?: (?:fatal )?error: )"
    r"|(?:^|[\s/])(?:c\+\+|g\+\+|gcc|cc|cc1plus|clang\+\+|clang|nvcc|x86_64-[\w-]+-g\+\+)"
    r"(?:-\d+)?: (?:fatal )?error: "
    r"|\(\d+\): (?:catastrophic )?error: "
    r"|nvcc fatal\s*: "
)
_LINKER_ERROR = re.compile(r"(?:^|[\s/])ld(?:\.\w+)?: (?:cannot find|error)|collect2: error: ")


# DeepSpeed's op builders, NAME -> the install-time BUILD_VAR (deepspeed/ops/op_builder/*.py
# and op_builder/cpu/*.py in 0.19.8; sparse_attn from 0.15 and older). The variable is not
# always DS_BUILD_<NAME>: async_io is DS_BUILD_AIO, so advice built from the name alone names a
# variable DeepSpeed's setup.py never reads. DeepSpeed's own flash_attn builder (NPU/XPU only)
# is left out: in a training log "flash_attn" is Dao's package, not a DeepSpeed op.
DS_OP_BUILD_VARS: dict[str, str] = {
    "async_io": "DS_BUILD_AIO",
    "cpu_adagrad": "DS_BUILD_CPU_ADAGRAD",
    "cpu_adam": "DS_BUILD_CPU_ADAM",
    "cpu_lion": "DS_BUILD_CPU_LION",
    "cutlass_ops": "DS_BUILD_CUTLASS_OPS",
    "dc": "DS_BUILD_DEEP_COMPILE",
    "deepspeed_ccl_comm": "DS_BUILD_CCL_COMM",
    "deepspeed_shm_comm": "DS_BUILD_SHM_COMM",
    "evoformer_attn": "DS_BUILD_EVOFORMER_ATTN",
    "fp_quantizer": "DS_BUILD_FP_QUANTIZER",
    "fused_adam": "DS_BUILD_FUSED_ADAM",
    "fused_lamb": "DS_BUILD_FUSED_LAMB",
    "fused_lion": "DS_BUILD_FUSED_LION",
    "gds": "DS_BUILD_GDS",
    "inference_core_ops": "DS_BUILD_INFERENCE_CORE_OPS",
    "pin_memory": "DS_BUILD_PIN_MEMORY",
    "quantizer": "DS_BUILD_QUANTIZER",
    "ragged_device_ops": "DS_BUILD_RAGGED_DEVICE_OPS",
    "ragged_ops": "DS_BUILD_RAGGED_OPS",
    "random_ltd": "DS_BUILD_RANDOM_LTD",
    "sparse_attn": "DS_BUILD_SPARSE_ATTN",
    "spatial_inference": "DS_BUILD_SPATIAL_INFERENCE",
    "stochastic_transformer": "DS_BUILD_STOCHASTIC_TRANSFORMER",
    "transformer": "DS_BUILD_TRANSFORMER",
    "transformer_inference": "DS_BUILD_TRANSFORMER_INFERENCE",
    "utils": "DS_BUILD_UTILS",
}
# pip naming the package whose build failed (its wordings old and new): apex, mamba-ssm or
# tiny-cuda-nn failing to build is ds_build_error's kind of failure but not DeepSpeed's, and
# advice to pre-build a DeepSpeed op would send the user the wrong way (NVIDIA/apex#1531's
# "Failed building wheel for apex"). pip's verdict names the package that failed; without one
# (a cut paste), the last build pip started is the one that was running (an earlier "Building
# wheel for x ... done" succeeded).
_PIP_FAILED = re.compile(
    r"Failed to build ([A-Za-z0-9][\w.-]*)"
    r"|Failed building wheel for ([A-Za-z0-9][\w.-]*)"
    r"|Could not build wheels for ([A-Za-z0-9][\w.-]*)"
)
_PIP_BUILDING = re.compile(
    r"Running setup\.py (?:install|develop) for ([A-Za-z0-9][\w.-]*)"
    r"|Building wheel for ([A-Za-z0-9][\w.-]*) \((?:setup\.py|pyproject\.toml)\)"
)
# A compiled extension module that will not load, outside DeepSpeed's op folders (those are
# failing_op's): mamba's selective_scan_cuda or causal_conv1d built against another torch
# ("undefined symbol: _ZN3c10..."). Only a CPython extension module's file name: a missing
# runtime library (libcudart.so.12) is not an extension of the job's.
_EXT_MODULE = re.compile(
    r"(?<![\w.-])(\w+)\.(?:cpython-[\w.-]+|abi3)\.so: "
    r"(?:undefined symbol|cannot open shared object)"
)
# setuptools' build_ext announcing each extension it builds; the last one started is the one
# that failed. DeepSpeed's own install builds "deepspeed.ops.<group>.<op>_op".
_BUILD_EXT = re.compile(r"building '([\w.]+)' extension")
_DS_EXT_NAME = re.compile(r"deepspeed\.ops\.(?:\w+\.)*(\w+?)(?:_op)?$")
# The log is about DeepSpeed at all: its package, its op builders, its install variables.
_DS_EVIDENCE = re.compile(r"deepspeed|op_builder|DS_BUILD_|ds_report", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class BuildSubject:
    """What failed to build or load, as the log tells it.

    ``op`` is the extension's name where the log gives one; ``deepspeed`` says whether it is
    one of DeepSpeed's ops (a name DeepSpeed's builders use, or an unnamed build in a log or
    job that is about DeepSpeed), None where nothing tells; ``package`` is the pip package whose
    build failed, when pip names one.
    """

    op: str | None
    deepspeed: bool | None
    package: str | None

    @property
    def what(self) -> str:
        if self.op is not None:
            return f"the {self.op} op" if self.deepspeed else f"the {self.op} extension"
        if self.package is not None and not self.deepspeed:
            return f"{self.package}'s compiled extension"
        return "a DeepSpeed op" if self.deepspeed else "an op or extension the log does not name"

    @property
    def build_var(self) -> str | None:
        return DS_OP_BUILD_VARS.get(self.op) if self.deepspeed and self.op else None


def _ds_names(op: str, lines: Sequence[str]) -> bool:
    """Whether DeepSpeed's own words name ``op`` as its op: its loader's "Unable to JIT load
    the <op> op", its optimizers' "requires the <op> op", a path under deepspeed/ops. An op of a
    DeepSpeed the table does not know (a newer release, an accelerator's builder) is still
    DeepSpeed's, and must not be told it is another package's."""
    name = re.escape(op)
    rx = re.compile(
        rf"Unable to JIT load the {name} op\b|requires the {name} op\b"
        rf"|deepspeed[/\\]ops[/\\]\S*\b{name}\b"
    )
    return any(rx.search(ln) for ln in lines)


def _pip_package(lines: Sequence[str]) -> str | None:
    bodies = [_body(ln) for ln in lines]
    for b in bodies:
        m = _PIP_FAILED.search(b)
        if m is not None:
            return next(g for g in m.groups() if g)
    started = [m for b in bodies if (m := _PIP_BUILDING.search(b)) is not None]
    return next(g for g in started[-1].groups() if g) if started else None


def build_subject(lines: Sequence[str], *, deepspeed_job: bool = False) -> BuildSubject:
    """Whose build failed: a DeepSpeed op, another package's extension, or an unnamed one.

    ``deepspeed_job`` (the job has a DeepSpeed config) makes an unnamed build DeepSpeed's: its
    ops are the ones a DeepSpeed job JIT-builds at start."""
    op = failing_op(lines)
    if op is None:
        for line in lines:
            m = _EXT_MODULE.search(line)
            if m is not None and not _DS_EVIDENCE.search(line):
                return BuildSubject(op=m.group(1), deepspeed=False, package=None)
        built = [m.group(1) for ln in lines if (m := _BUILD_EXT.search(ln)) is not None]
        if built:
            ds = _DS_EXT_NAME.match(built[-1])
            if ds is not None:
                return BuildSubject(op=ds.group(1), deepspeed=True, package=None)
            op = built[-1]
    package = _pip_package(lines)
    pip_ds = package is not None and package.lower() == "deepspeed"
    if op is not None:
        deepspeed = (op in DS_OP_BUILD_VARS and (package is None or pip_ds)) or _ds_names(op, lines)
    elif package is not None:
        deepspeed = pip_ds
    elif deepspeed_job or any(_DS_EVIDENCE.search(ln) for ln in lines):
        deepspeed = True
    else:
        return BuildSubject(op=None, deepspeed=None, package=None)
    return BuildSubject(op=op, deepspeed=deepspeed, package=None if pip_ds else package)


def _body(line: str) -> str:
    return _RANK_PREFIX.sub("", line.rstrip("\r\n"), count=1)


def failing_op(lines: Sequence[str]) -> str | None:
    """The DeepSpeed / torch extension op whose build or load failed, from real log lines."""
    bodies = [_body(ln) for ln in lines]
    for rx in _OP_STRONG:
        for b in bodies:
            m = rx.search(b)
            if m is not None:
                return m.group(1)
    for b in bodies:
        m = _OP_CLASS.search(b)
        if m is not None:
            return _OP_OF_CLASS[m.group(1)]
    framed = [m.group(1) for b in bodies if (m := _OP_BUILDER_FRAME.search(b)) is not None]
    if framed:
        return framed[-1]
    building: list[str] = []
    loaded: set[str] = set()
    for b in bodies:
        m = _OP_BUILDING.search(b)
        if m is not None:
            building.append(m.group(1) or m.group(2))
        m = _OP_LOADED.search(b)
        if m is not None:
            loaded.add(m.group(1) or m.group(2) or m.group(3))
    pending = [op for op in building if op not in loaded]
    return pending[-1] if pending else None


def compiler_error_line(lines: Sequence[str], limit: int = 300) -> str | None:
    """The first compiler diagnostic (``error:``), else the first linker error, clipped."""
    bodies = [_body(ln).strip() for ln in lines]
    for rx in (_COMPILER_ERROR, _LINKER_ERROR):
        for b in bodies:
            if rx.search(b) is not None:
                return b if len(b) <= limit else b[: limit - 1] + "…"
    return None


def is_cuda_mismatch(lines: Sequence[str]) -> bool:
    """DeepSpeed refused to build because the toolkit's CUDA is not torch's (not the warning)."""
    return any(_CUDA_MISMATCH.search(ln) for ln in lines)


def _cuda_trouble(lines: Sequence[str]) -> bool:
    return is_cuda_mismatch(lines) or any(_CUDA_TOOLKIT_TROUBLE.search(ln) for ln in lines)


# -- applying remedies (pure helpers for launch) -----------------------------------------------


def merged_env(remedies: Sequence[Remedy]) -> dict[str, str]:
    """The environment overrides of every applied remedy, later ones winning."""
    out: dict[str, str] = {}
    for r in remedies:
        out.update(r.env)
    return out


def remedy_config(cfg: Mapping[str, Any], remedies: Sequence[Remedy]) -> dict[str, Any]:
    """The rendered DeepSpeed config with every applied remedy's patch, in order."""
    out = dict(cfg)
    for r in remedies:
        out = r.config.apply(out)
    return out


def remedy_args(args: Sequence[str], remedies: Sequence[Remedy]) -> list[str]:
    """The job's args with every applied remedy's flags (honouring ``flags_anchor``)."""
    out = list(args)
    for r in remedies:
        if r.flags and (r.flags_anchor is None or _has_flag(out, r.flags_anchor)):
            out = apply_flags(out, r.flags)
    return out


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def apply_flags(args: Sequence[str], flags: Mapping[str, str]) -> list[str]:
    """``args`` with each HF flag set to its value: replaced where present, else appended.

    Handles ``--flag value``, ``--flag=value`` and HfArgumentParser's bare boolean ``--flag``
    (``nargs="?"``: a following ``--other`` or the end means "true"). A plain "replace the
    next token" would eat the next flag after a bare ``--fp16``.
    """
    out = list(args)
    for flag, value in flags.items():
        found = False
        i = 0
        while i < len(out):
            a = out[i]
            if a == flag:
                found = True
                nxt = out[i + 1] if i + 1 < len(out) else None
                if nxt is None or nxt.startswith("--"):
                    out.insert(i + 1, value)
                else:
                    out[i + 1] = value
                i += 2
                continue
            if a.startswith(flag + "="):
                found = True
                out[i] = f"{flag}={value}"
            i += 1
        if not found:
            out += [flag, value]
    return out


# -- deciding ---------------------------------------------------------------------------------

#: Ops built for DeepSpeed's Adam/AdamW (and Muon's auxiliary Adam): ``torch_adam`` avoids
#: them (engine.get_optimizer_configuration pops it before choosing CPUAdam/FusedAdam).
_ADAM_OPS = frozenset({"cpu_adam", "fused_adam"})
_TORCH_ADAM_TYPES = frozenset({"adam", "adamw", "muon"})
_NO_TORCH_EQUIVALENT = {
    "cpu_lion": "Lion",
    "fused_lion": "Lion",
    "fused_lamb": "LAMB",
}
_BF16_MIN_CAPABILITY = (8, 0)
_BUILD_REMEDIES = frozenset({"cuda_home", "skip_cuda_check"})
#: CUDA majors within which DeepSpeed accepts a minor-version mismatch (builder.py
#: ``cuda_minor_mismatch_ok``).
_MINOR_MISMATCH_OK_MAJORS = frozenset({10, 11, 12})


def _major_minor(v: str | None) -> tuple[int, int] | None:
    if not v:
        return None
    parts = v.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def _matching_toolkit(facts: EnvFacts) -> Toolkit | None:
    """A toolkit with nvcc whose CUDA is torch's, when the one in use is not: exact first."""
    want = _major_minor(facts.torch_cuda)
    if want is None:
        return None
    current = facts.toolkit_at(facts.cuda_home)
    if current is not None and _major_minor(current.version) == want and current.usable:
        return None  # the toolkit in use already matches: switching cannot help
    usable = [
        t
        for t in facts.toolkits
        if t.usable and (current is None or t.realpath != current.realpath)
    ]
    for t in usable:
        if _major_minor(t.version) == want:
            return t
    if want[0] in _MINOR_MISMATCH_OK_MAJORS:
        cur_mm = None if current is None else _major_minor(current.version)
        if cur_mm is None or cur_mm[0] != want[0] or not (current and current.usable):
            for t in usable:
                mm = _major_minor(t.version)
                if mm is not None and mm[0] == want[0]:
                    return t
    return None


def _toolkit_differs(facts: EnvFacts) -> bool:
    """The toolkit the JIT build uses is known and is not torch's CUDA major.minor."""
    want = _major_minor(facts.torch_cuda)
    current = facts.toolkit_at(facts.cuda_home)
    if want is None or current is None:
        return False
    return _major_minor(current.version) != want


def _optimizer_type(ds_config: Mapping[str, Any] | None) -> str | None:
    if ds_config is None:
        return None
    block = ds_config.get("optimizer")
    if not isinstance(block, Mapping):
        return None
    t = block.get("type")
    return None if t is None else str(t).lower()


def _avoid_op(op: str, ds_config: Mapping[str, Any] | None) -> tuple[Remedy | None, str | None]:
    """The remedy that does without ``op``, or (None, why not)."""
    opt = _optimizer_type(ds_config)
    if op in _ADAM_OPS:
        if opt not in _TORCH_ADAM_TYPES:
            return None, (
                f"{op} is not built for an Adam/AdamW block of the DeepSpeed config here "
                f"(optimizer type: {opt or 'none'}), so no config change avoids it"
            )
        assert ds_config is not None
        params = ds_config["optimizer"].get("params")
        if isinstance(params, Mapping) and params.get("torch_adam") is True:
            return None, f"the config already uses torch_adam and {op} was still built"
        impl = "torch.optim.AdamW" if opt == "adamw" else "torch.optim.AdamW (or Adam)"
        return (
            Remedy(
                name=f"avoid_{op}",
                kind=FailureKind.DS_BUILD_ERROR,
                reason=(
                    f"DeepSpeed could not build {op}; optimizer.params.torch_adam makes "
                    f"DeepSpeed use {impl} with the same hyperparameters instead"
                ),
                config=ConfigPatch(set={"optimizer.params.torch_adam": True}),
                caveats=(
                    f"the optimizer step runs in torch's {impl} instead of DeepSpeed's {op} "
                    "(same algorithm and state; slower per step, most visible with ZeRO-Offload)",
                ),
            ),
            None,
        )
    if op == "cpu_adagrad":
        if opt != "adagrad":
            return None, f"cpu_adagrad is not built for this config (optimizer: {opt or 'none'})"
        return (
            Remedy(
                name="avoid_cpu_adagrad",
                kind=FailureKind.DS_BUILD_ERROR,
                reason=(
                    "DeepSpeed could not build cpu_adagrad and has no torch switch for Adagrad "
                    "under offload: the optimizer block is dropped and HF builds "
                    "torch.optim.Adagrad (--optim adagrad), accepted under offload with "
                    "zero_force_ds_cpu_optimizer false"
                ),
                config=ConfigPatch(set={"zero_force_ds_cpu_optimizer": False}, drop=("optimizer",)),
                flags={"--optim": "adagrad"},
                caveats=(
                    "Adagrad's hyperparameters now come from the HF flags (--learning_rate, "
                    "--weight_decay), not from the DeepSpeed optimizer block",
                    "HF excludes biases and norm weights from weight decay; the DeepSpeed "
                    "optimizer decayed every parameter",
                ),
                new_phase=True,
            ),
            None,
        )
    if op in _NO_TORCH_EQUIVALENT:
        name = _NO_TORCH_EQUIVALENT[op]
        return None, (
            f"{name} has no torch implementation DeepSpeed can fall back to, and replacing it "
            f"with AdamW would train a different optimizer at a {name} learning rate"
        )
    if op == "deepspeed_shm_comm":
        return None, (
            "DeepSpeed builds deepspeed_shm_comm for every run on the CPU accelerator; no "
            "config avoids it"
        )
    return None, f"no config change avoids {op}"


def _build_advice(subject: BuildSubject) -> str:
    """What the user must do once nothing dsguard can change helps, for whoever owns the build.

    DeepSpeed's ops are pre-built at install time by their BUILD_VAR; another package's
    extension is rebuilt by reinstalling that package against the installed torch (under build
    isolation pip may build it against another torch from the index, one way to an extension's
    "undefined symbol"; flash-attn's and mamba's install notes ask for --no-build-isolation)."""
    env = "compiler, CUDA_HOME matching torch.version.cuda, ninja"
    if subject.deepspeed:
        if subject.build_var is None:
            return (
                f"fix the build environment ({env}) or pre-build DeepSpeed's ops "
                "(DS_BUILD_OPS=1 pip install deepspeed)"
            )
        return (
            f"fix the build environment ({env}) or pre-build the op ({subject.build_var}=1 "
            "pip install deepspeed --no-cache-dir; `ds_report` shows what is installed)"
        )
    if subject.package is not None:
        rebuild = (
            f"fix the build environment ({env}) and rebuild {subject.package} against the "
            f"installed torch (pip install --no-build-isolation --no-cache-dir "
            f"--force-reinstall {subject.package})"
        )
    else:
        rebuild = (
            f"fix the build environment ({env}) and rebuild the extension against the "
            "installed torch (a JIT-built one after clearing its folder under "
            "TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions)"
        )
    if subject.deepspeed is None:
        return rebuild
    return f"{rebuild}; it is not a DeepSpeed op, so no DeepSpeed setting avoids it"


def compiler_oom_line(lines: Sequence[str]) -> str | None:
    """The line where the compiler building an op ran out of memory (its own allocation
    failure, or the OOM killer taking it: core.classify's COMPILER_OOM), or None."""
    for line in lines:
        if COMPILER_OOM.search(line) is not None:
            return _body(line).strip()[:200]
    return None


def _compiler_oom_advice(subject: BuildSubject, line: str) -> str:
    """Why no knob helps when the compiler building an op runs out of memory, and what does.

    The job's host memory limit holds for every child of the training process (RLIMIT_AS is
    inherited across fork/exec; a memory cgroup holds the whole tree), so the JIT build runs
    under it. torch's cpp_extension rebuilds an op whenever the rendered build.ninja (its
    include and source paths) differs from the one in the cache (``TORCH_EXTENSIONS_DIR``,
    default ``~/.cache/torch_extensions``), so Python environments at different paths that
    share one cache rebuild it in turn: a job that started fine can meet the build later."""
    if subject.deepspeed:
        var = subject.build_var or "DS_BUILD_OPS"
        build = f"pre-build it: {var}=1 pip install deepspeed --no-cache-dir"
    elif subject.package is not None:
        # torch's cpp_extension runs MAX_JOBS compilers at once (ninja's default otherwise)
        pkg = subject.package
        build = f"pre-build it: MAX_JOBS=1 pip install --no-build-isolation --no-cache-dir {pkg}"
    else:
        build = "set MAX_JOBS=1, which bounds how many compilers torch's cpp_extension runs"
    return (
        f"the compiler building {subject.what} ran out of memory ({line}): the job's host "
        "memory limit holds for the JIT build too, and no batch size or bucket changes what the "
        "compiler needs; build it once without the limit (run the job's interpreter outside "
        f"dsguard once, or {build}), and give each Python environment its own "
        "TORCH_EXTENSIONS_DIR (a cache shared by environments at different paths is rebuilt "
        "whenever another one loads the op)"
    )


def _ds_build(
    lines: Sequence[str],
    applied: frozenset[str],
    facts: EnvFacts,
    ds_config: Mapping[str, Any] | None,
) -> Remedy | GiveUp:
    subject = build_subject(lines, deepspeed_job=ds_config is not None)
    op, what = subject.op, subject.what
    oom = compiler_oom_line(lines)
    if oom is not None:
        return GiveUp(_compiler_oom_advice(subject, oom))
    mismatch = is_cuda_mismatch(lines)
    notes: list[str] = []

    # 1. a toolkit that matches torch
    if "cuda_home" not in applied and (_cuda_trouble(lines) or _toolkit_differs(facts)):
        tk = _matching_toolkit(facts)
        if tk is not None:
            current = facts.cuda_home or "none"
            cur_tk = facts.toolkit_at(facts.cuda_home)
            cur_v = f" (CUDA {cur_tk.version})" if cur_tk and cur_tk.version else ""
            return Remedy(
                name="cuda_home",
                kind=FailureKind.DS_BUILD_ERROR,
                reason=(
                    f"{what} failed to build with CUDA_HOME={current}{cur_v}; torch was built "
                    f"with CUDA {facts.torch_cuda} and {tk.path} has CUDA {tk.version}"
                ),
                env={"CUDA_HOME": tk.path},
            )
        notes.append(
            f"no installed toolkit with nvcc matches torch's CUDA {facts.torch_cuda or '(unknown)'}"
        )

    # 2. skip DeepSpeed's version check (only for that failure)
    if mismatch and "skip_cuda_check" not in applied and not facts.ds_skip_cuda_check:
        return Remedy(
            name="skip_cuda_check",
            kind=FailureKind.DS_BUILD_ERROR,
            reason=(
                f"DeepSpeed refused to build {what}: the installed CUDA toolkit does not match "
                f"torch's CUDA {facts.torch_cuda or '(unknown)'} and no matching toolkit is "
                "installed; DS_SKIP_CUDA_CHECK=1 builds with the toolkit there is"
            ),
            env={"DS_SKIP_CUDA_CHECK": "1"},
            caveats=(
                "DeepSpeed warns that a CUDA mismatch 'may result in unexpected behavior'; "
                "install the toolkit matching torch for a clean build",
            ),
        )

    # 3. do without the op (only DeepSpeed's own: the DeepSpeed config is all dsguard changes)
    if op is not None and subject.deepspeed and f"avoid_{op}" not in applied:
        remedy, why_not = _avoid_op(op, ds_config)
        if remedy is not None:
            return remedy
        if why_not:
            notes.append(why_not)

    # 4. give up
    err = compiler_error_line(lines)
    tried = sorted(a for a in applied if a in _BUILD_REMEDIES or a.startswith("avoid_"))
    parts = [
        f"DeepSpeed could not build {what}" if subject.deepspeed else f"could not build {what}"
    ]
    if err:
        parts.append(f"first compiler error: {err}")
    if tried:
        parts.append(f"already tried: {', '.join(tried)}")
    parts.extend(notes)
    parts.append(_build_advice(subject))
    return GiveUp("; ".join(parts))


def _loss_divergence(
    applied: frozenset[str], facts: EnvFacts, ds_config: Mapping[str, Any] | None
) -> Remedy | GiveUp:
    base = "the fp16 loss scale collapsed"
    if "bf16" in applied:
        return GiveUp(
            f"{base} again after switching to bf16; lower the learning rate or check the data"
        )
    if ds_config is not None:
        bf16 = ds_config.get("bf16") or ds_config.get("bfloat16")
        if isinstance(bf16, Mapping) and bf16.get("enabled") is True:
            return GiveUp(f"{base} but bf16 is already enabled; lower the learning rate")
    if facts.gpus is None:
        return GiveUp(
            f"{base}; bf16 would avoid it but the GPUs' compute capability is unknown "
            f"({facts.gpu_error or 'NVML gave no answer'}); switch to bf16 yourself on GPUs "
            "with compute capability >= 8.0 (Ampere or newer), or lower the learning rate"
        )
    if not facts.gpus:
        return GiveUp(f"{base}; no GPU is visible to NVML, so bf16 cannot be checked")
    unknown = [g for g in facts.gpus if g.capability is None]
    old = [
        g for g in facts.gpus if g.capability is not None and g.capability < _BF16_MIN_CAPABILITY
    ]
    if unknown:
        return GiveUp(
            f"{base}; the compute capability of GPU {', '.join(str(g.index) for g in unknown)} "
            "is unknown, so bf16 cannot be checked; lower the learning rate or switch to bf16 "
            "yourself on GPUs with compute capability >= 8.0"
        )
    if old:
        desc = ", ".join(
            f"GPU {g.index} ({g.name or '?'}) {g.capability[0]}.{g.capability[1]}"
            for g in old
            if g.capability is not None
        )
        return GiveUp(
            f"{base}; bf16 needs compute capability >= 8.0 (Ampere or newer) and {desc} is "
            "older; lower the learning rate, raise the initial loss scale window, or train in "
            "fp32"
        )
    caps = sorted({f"{g.capability[0]}.{g.capability[1]}" for g in facts.gpus if g.capability})
    return Remedy(
        name="bf16",
        kind=FailureKind.LOSS_DIVERGENCE,
        reason=(
            f"{base}; every GPU of the job supports bf16 (compute capability "
            f"{', '.join(caps)}): fp16 -> bf16 (same exponent range as fp32, no loss scaling)"
        ),
        config=ConfigPatch(set={"fp16.enabled": False, "bf16.enabled": True}),
        flags={"--fp16": "false", "--bf16": "true"},
        flags_anchor="--fp16",
        caveats=(
            "training continues in bf16 from the last checkpoint: fewer mantissa bits than "
            "fp16, no loss scaling",
        ),
    )


def next_remedy(
    kind: FailureKind,
    evidence_lines: Sequence[str],
    applied: frozenset[str],
    env_facts: EnvFacts,
    *,
    ds_config: Mapping[str, Any] | None = None,
) -> Remedy | GiveUp:
    """The next remedy for ``kind``, or why there is none.

    Args:
        kind: ``ds_build_error`` or ``loss_divergence`` (anything else: GiveUp).
        evidence_lines: the failure's evidence plus the tail of the attempt log (the compiler's
            ``error:`` lines are not classifier evidence; they are only in the log).
        applied: names of remedies already applied in this run (each is tried at most once).
        env_facts: from :func:`dsguard.host.envfacts.detect` for the job's interpreter.
        ds_config: the DeepSpeed config the failed attempt ran with (rendered, remedies
            applied); None when the job has none. Decides which op avoidance exists.
    """
    if kind is FailureKind.DS_BUILD_ERROR:
        return _ds_build(evidence_lines, applied, env_facts, ds_config)
    if kind is FailureKind.LOSS_DIVERGENCE:
        return _loss_divergence(applied, env_facts, ds_config)
    return GiveUp(f"{kind}: no environment remedy")
