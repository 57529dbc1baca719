"""Quick start: ``dsguard run -- deepspeed|torchrun|accelerate launch|python ...`` -> Job.

The job is built from the training command line alone, without a job file. The launcher part
(``deepspeed --num_gpus 2``, ``torchrun --nproc_per_node 2``, ``accelerate launch``, ``python
-m``) gives the world size, GPUs and interpreter; the script arguments give the knobs under
their HF Trainer flag names, which are taken out because dsguard passes them itself on every
attempt. Whatever the quick start cannot represent in a :class:`Job` is refused, never
dropped: a silently ignored launcher option would change the run behind the user's back.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsguard.errors import JobFileError, Problem
from dsguard.job.file import (
    _FLAG_RE,
    _HINTS,
    _MODULE_RE,
    _NAME_RE,
    _RESUME_FLAG,
    MAX_GPU_INDEX,
    MAX_HOST_MEMORY_BYTES,
    MAX_WORLD_SIZE,
    _absolute,
    _build_data,
    _canonical_flag,
    _ds_knobs,
    _negated,
    _offload_conflict,
    _read_ds_config,
    _resolve_python,
    ds_batch_problem,
    parse_size,
)
from dsguard.job.knobs import (
    BOOL_KNOBS,
    DEFAULT_FLAGS,
    FLAG_KNOBS,
    INT_KNOB_MAXIMUM,
    INT_KNOB_MINIMUM,
    KNOB_NAMES,
    Knobs,
    Offload,
)
from dsguard.job.model import (
    CheckpointSpec,
    DeepSpeedSpec,
    Job,
    KnobDelivery,
    LauncherKind,
    Resources,
)

__all__ = ["job_from_command"]

_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")

# HF Trainer defaults for the knobs a quick-start command line does not set
# (TrainingArguments.per_device_train_batch_size / gradient_accumulation_steps): only the
# starting values dsguard reports; a knob the command does not carry is never passed.
_HF_MICRO_BATCH_DEFAULT = 8
_HF_ACCUMULATION_DEFAULT = 1
_DEEPSPEED_FLAG = "--deepspeed"
_OUTPUT_DIR_FLAG = "--output_dir"

# HfArgumentParser's string_to_bool (transformers.hf_argparser), case-insensitive.
_TRUE_WORDS = frozenset({"true", "t", "yes", "y", "1"})
_FALSE_WORDS = frozenset({"false", "f", "no", "n", "0"})


# --------------------------------------------------------------------------------------------
# Quick start: `dsguard run -- deepspeed train.py ARGS...`
# --------------------------------------------------------------------------------------------


@dataclass
class _Command:
    """What the launcher part of a quick-start command line says."""

    launcher: LauncherKind
    python: str
    target: str | None = None
    is_module: bool = False
    args: list[str] = field(default_factory=list)
    gpus: tuple[int, ...] | None = None
    world_size: int | None = None
    env: dict[str, str] = field(default_factory=dict)


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(Problem(None, None, where, message))


#: Launcher options the quick start understands: option -> (key, takes a value). Anything
#: else is refused rather than dropped, because Job has nowhere to keep it.
_LAUNCHER_OPTIONS: dict[LauncherKind, dict[str, tuple[str, bool]]] = {
    LauncherKind.DEEPSPEED: {
        "--num_gpus": ("num_gpus", True),
        "--num-gpus": ("num_gpus", True),
        "--include": ("include", True),
        "--module": ("module", False),
    },
    LauncherKind.TORCHRUN: {
        "--nproc_per_node": ("nproc", True),
        "--nproc-per-node": ("nproc", True),
        "--nnodes": ("nnodes", True),
        "--standalone": ("standalone", False),
        "-m": ("module", False),
        "--module": ("module", False),
    },
    LauncherKind.ACCELERATE: {
        "--num_processes": ("num_processes", True),
        "--num-processes": ("num_processes", True),
        "--gpu_ids": ("gpu_ids", True),
        "--gpu-ids": ("gpu_ids", True),
        "--multi_gpu": ("multi_gpu", False),
        "--multi-gpu": ("multi_gpu", False),
        "-m": ("module", False),
        "--module": ("module", False),
    },
}


def _scan_options(
    tokens: Sequence[str], spec: Mapping[str, tuple[str, bool]], problems: _Problems
) -> tuple[dict[str, str | None], int, bool]:
    """Launcher options up to the first positional: ``(values, index of it, understood)``.
    After an unknown option parsing stops: whether it takes a value cannot be known."""
    found: dict[str, str | None] = {}
    i = 0
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-":
        name, eq, inline = tokens[i].partition("=")
        if name not in spec:
            problems.add(
                name,
                "launcher option not supported by the quick start (dsguard builds the "
                f"launcher command itself; supported: {', '.join(sorted(spec))})",
            )
            return found, len(tokens), False
        key, takes_value = spec[name]
        value: str | None = None
        if takes_value:
            if eq:
                value = inline
            elif i + 1 < len(tokens):
                i += 1
                value = tokens[i]
            else:
                problems.add(name, "needs a value")
        elif eq:
            problems.add(name, "takes no value")
        if key in found:
            problems.add(name, "given twice")
        found[key] = value
        i += 1
    return found, i, True


def _positive_int(text: str | None, where: str, problems: _Problems) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        problems.add(where, f"must be a whole number, got {text!r}")
        return None
    if value < 1:
        problems.add(where, f"must be at least 1, got {value}")
        return None
    if value > MAX_WORLD_SIZE:
        problems.add(
            where, f"must be at most {MAX_WORLD_SIZE}, got {value} (a process count per job)"
        )
        return None
    return value


def _gpu_list(text: str, where: str, problems: _Problems) -> tuple[int, ...] | None:
    try:
        gpus = tuple(int(part) for part in text.split(","))
    except ValueError:
        problems.add(where, f"expected GPU indices like 0,1,2, got {text!r}")
        return None
    if any(g < 0 or g > MAX_GPU_INDEX for g in gpus) or len(set(gpus)) != len(gpus):
        problems.add(
            where,
            f"GPU indices must be distinct and between 0 and {MAX_GPU_INDEX}, got {text!r}",
        )
        return None
    return gpus


def _interpreter_of(executable: str, cwd: Path) -> str:
    """The python a console script (``deepspeed``, ``torchrun``, ``accelerate``) runs under,
    from its shebang: that is the training environment. Falls back to dsguard's own python."""
    path = _absolute(cwd, executable) if os.sep in executable else None
    if path is None:
        found = shutil.which(executable)
        path = Path(found) if found else None
    if path is None or not path.is_file():
        return sys.executable
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace").splitlines()
    except OSError:
        return sys.executable
    if not head or not head[0].startswith("#!"):
        return sys.executable
    words = head[0][2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1])
        return found or sys.executable
    if words and _PYTHON_RE.match(Path(words[0]).name):
        return words[0]
    # pip writes `#!/bin/sh` + `'''exec' /long/path/python "$0" "$@"` for very long paths.
    for line in head[1:3]:
        match = re.match(r"^'''exec' (\S+) ", line)
        if match:
            return match.group(1)
    return sys.executable


def _parse_launcher(argv: Sequence[str], cwd: Path, problems: _Problems) -> _Command | None:
    head = argv[0]
    base = Path(head).name
    rest = list(argv[1:])
    if base.endswith(".py"):
        return _Command(LauncherKind.PYTHON, sys.executable, target=head, args=rest)
    if _PYTHON_RE.match(base):
        python, error = _resolve_python(head, cwd)
        if error:
            problems.add("python", error)
        return _parse_python(rest, python or head, cwd, problems)
    if base == "accelerate":
        if not rest or rest[0] != "launch":
            problems.add("accelerate", "expected `accelerate launch ...`")
            return None
        rest = rest[1:]
        kind = LauncherKind.ACCELERATE
    elif base in ("deepspeed", "torchrun"):
        kind = LauncherKind(base)
    else:
        problems.add(
            "command",
            f"unknown launcher {head!r}; expected deepspeed, torchrun, accelerate launch, "
            "python or a .py script",
        )
        return None
    return _parse_distributed(kind, rest, _interpreter_of(head, cwd), problems)


def _parse_python(rest: list[str], python: str, cwd: Path, problems: _Problems) -> _Command | None:
    cmd = _Command(LauncherKind.PYTHON, python)
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        opt = rest[i]
        if opt == "-u":
            cmd.env["PYTHONUNBUFFERED"] = "1"  # the same effect, kept across restarts
        elif opt.startswith("-m"):
            module = opt[2:] or (rest[i + 1] if i + 1 < len(rest) else "")
            if not module:
                problems.add("-m", "needs a module name")
                return cmd
            args = rest[i + (1 if opt[2:] else 2) :]
            if module == "torch.distributed.run":  # `python -m torch.distributed.run` is torchrun
                return _parse_distributed(LauncherKind.TORCHRUN, args, python, problems)
            cmd.target, cmd.is_module, cmd.args = module, True, args
            return cmd
        else:
            problems.add(opt, "python option not supported by the quick start (only -m and -u)")
            return cmd
        i += 1
    if i < len(rest):
        cmd.target, cmd.args = rest[i], rest[i + 1 :]
    else:
        problems.add("command", "no training script after the python interpreter")
    return cmd


def _parse_distributed(
    kind: LauncherKind, rest: list[str], python: str, problems: _Problems
) -> _Command:
    """``deepspeed``/``torchrun``/``accelerate launch`` options, then the script (or
    module) and its arguments. The options become a world size and GPU list in the Job, since
    dsguard rebuilds the launcher command on every attempt."""
    cmd = _Command(kind, python)
    found, index, understood = _scan_options(rest, _LAUNCHER_OPTIONS[kind], problems)
    if not understood:
        return cmd
    if index >= len(rest):
        problems.add("command", f"no training script after the {kind.value} options")
        return cmd
    cmd.target, cmd.args = rest[index], rest[index + 1 :]
    cmd.is_module = "module" in found
    if kind is LauncherKind.DEEPSPEED:
        _deepspeed_gpus(cmd, found, problems)
    elif kind is LauncherKind.TORCHRUN:
        _torchrun_gpus(cmd, found, problems)
    else:
        _accelerate_gpus(cmd, found, problems)
    if cmd.gpus is not None and cmd.world_size is not None and cmd.world_size != len(cmd.gpus):
        problems.add(
            "command", f"{cmd.world_size} processes disagree with {len(cmd.gpus)} listed GPUs"
        )
    return cmd


def _deepspeed_gpus(cmd: _Command, found: Mapping[str, str | None], problems: _Problems) -> None:
    """``deepspeed --num_gpus N`` or ``--include localhost:0,1``: a world size or a GPU list
    on this host (dsguard supervises one node, so another host is refused)."""
    if "num_gpus" in found and "include" in found:
        problems.add("--include", "cannot be combined with --num_gpus (DeepSpeed refuses it)")
    cmd.world_size = _positive_int(found.get("num_gpus"), "--num_gpus", problems)
    include = found.get("include")
    if include is not None:
        host, _, slots = include.partition(":")
        if "@" in include or host != "localhost":
            problems.add("--include", f"only localhost is supported, got {include!r}")
        elif slots:
            cmd.gpus = _gpu_list(slots, "--include", problems)


def _torchrun_gpus(cmd: _Command, found: Mapping[str, str | None], problems: _Problems) -> None:
    """``torchrun --nproc_per_node N``; ``--nnodes`` other than 1 is refused (one node only)."""
    nnodes = found.get("nnodes")
    if nnodes is not None and nnodes not in ("1", "1:1"):
        problems.add("--nnodes", f"dsguard supervises a single node, got {nnodes!r}")
    cmd.world_size = _positive_int(found.get("nproc"), "--nproc_per_node", problems)


def _accelerate_gpus(cmd: _Command, found: Mapping[str, str | None], problems: _Problems) -> None:
    """``accelerate launch --num_processes N --gpu_ids 0,1`` (``all`` means every visible GPU,
    the same as no list)."""
    cmd.world_size = _positive_int(found.get("num_processes"), "--num_processes", problems)
    gpu_ids = found.get("gpu_ids")
    if gpu_ids is not None and gpu_ids != "all":
        cmd.gpus = _gpu_list(gpu_ids, "--gpu_ids", problems)


@dataclass
class _ArgScan:
    """HF flags pulled out of a quick-start command's script arguments."""

    args: list[str] = field(default_factory=list)
    knobs: dict[str, Any] = field(default_factory=dict)
    #: knob -> the flag spelling the command used (``--per_device_train_batch_size``).
    seen_flags: dict[str, str] = field(default_factory=dict)
    deepspeed: str | None = None
    output_dir: str | None = None


def _parse_bool(text: str, where: str, problems: _Problems) -> bool | None:
    word = text.lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    problems.add(where, f"expected true or false, got {text!r}")
    return None


def _knob_flags(mapping: Mapping[str, str] | None = None) -> dict[str, tuple[str, bool]]:
    """Canonical flag -> ``(knob, negated)`` for every knob flag a script may carry, with the
    ``--no_`` spelling of the boolean ones. ``mapping`` (``--knob NAME=FLAG``) replaces a
    knob's HF flag name."""
    knob_of: dict[str, tuple[str, bool]] = {}  # canonical flag -> (knob, negated)
    flags = {**DEFAULT_FLAGS, **(mapping or {})}
    for knob in FLAG_KNOBS:
        flag = flags[knob]
        if flag is None:
            continue
        knob_of[_canonical_flag(flag)] = (knob, False)
        no_flag = _negated(flag) if knob in BOOL_KNOBS else None
        if no_flag is not None:
            knob_of[_canonical_flag(no_flag)] = (knob, True)
    return knob_of


def _bool_knob_value(
    name: str, inline: str | None, nxt: str | None, negated: bool, problems: _Problems
) -> tuple[bool | None, int]:
    """A boolean knob flag's value and how many following tokens it took, read as
    HfArgumentParser does: ``--x``, ``--x=true``, ``--x false`` and ``--no_x``."""
    if negated:
        if inline is not None:
            problems.add(name, "takes no value")
        return False, 0
    if inline is not None:
        return _parse_bool(inline, name, problems), 0
    if nxt is not None and not nxt.startswith("--"):
        return _parse_bool(nxt, name, problems), 1
    return True, 0  # a bare HF boolean flag means true


def _int_knob_value(
    knob: str, name: str, inline: str | None, nxt: str | None, problems: _Problems
) -> tuple[int | None, int]:
    """A whole-number knob flag's value (``--x=N`` or ``--x N``) and how many following
    tokens it took; below the knob's minimum is refused, since no attempt could run it."""
    text = inline if inline is not None else nxt
    used = 1 if inline is None and nxt is not None else 0
    if text is None:
        problems.add(name, "needs a value")
        return None, used
    try:
        value = int(text)
    except ValueError:
        problems.add(name, f"must be a whole number, got {text!r}")
        return None, used
    minimum = INT_KNOB_MINIMUM[knob]
    if value < minimum:
        problems.add(name, f"must be at least {minimum}, got {value}")
        return None, used
    maximum = INT_KNOB_MAXIMUM.get(knob)
    if maximum is not None and value > maximum:
        problems.add(
            name,
            f"must be at most {maximum}, got {value} (valid range: {minimum} <= value <= "
            f"{maximum})",
        )
        return None, used
    return value, used


def _scan_script_args(
    args: Sequence[str], problems: _Problems, mapping: Mapping[str, str] | None = None
) -> _ArgScan:
    """Take the knob flags (and ``--deepspeed``/``--resume_from_checkpoint``) out of the
    script's arguments: dsguard passes them itself, with the values of each attempt."""
    knob_of = _knob_flags(mapping)
    scan = _ArgScan()
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            scan.args.append(token)
            continue
        name, eq, inline_text = token.partition("=")
        inline = inline_text if eq else None
        canon = _canonical_flag(name)
        nxt = args[i] if i < len(args) else None
        if canon in knob_of:
            knob, negated = knob_of[canon]
            if knob in scan.knobs:
                problems.add(name, f"given twice (sets {knob})")
            value: int | None
            if knob in BOOL_KNOBS:
                value, used = _bool_knob_value(name, inline, nxt, negated, problems)
            else:
                value, used = _int_knob_value(knob, name, inline, nxt, problems)
            i += used
            if value is not None:
                scan.knobs[knob] = value
            scan.seen_flags.setdefault(knob, name)
        elif canon == _DEEPSPEED_FLAG:
            text = inline if eq else nxt
            if not eq and nxt is not None:
                i += 1
            if not text or text.lstrip().startswith("{"):
                problems.add(name, "needs the path of a DeepSpeed JSON config")
            else:
                scan.deepspeed = text
        elif canon == _RESUME_FLAG:
            # dsguard decides when to resume; drop the flag and its value.
            if not eq and nxt is not None and not nxt.startswith("-"):
                i += 1
        else:
            scan.args.append(token)
            if canon == _OUTPUT_DIR_FLAG:
                if eq:
                    scan.output_dir = inline
                elif nxt is not None:
                    scan.output_dir = nxt
    return scan


def _sanitise_name(stem: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).lstrip("_.-")
    return name or "job"


def _target_of(
    target: str, is_module: bool, cwd: Path, problems: _Problems
) -> tuple[Path | None, str | None]:
    """``(script, module)``: the script must exist now, before anything launches."""
    script: Path | None = None
    module: str | None = None
    if is_module:
        module = target
        if not _MODULE_RE.match(module):
            problems.add("module", f"not a python module name: {module!r}")
    else:
        script = _absolute(cwd, target)
        if not script.is_file():
            problems.add("script", f"script not found: {script}")
    return script, module


def _deepspeed_of(
    text: str, cwd: Path, problems: _Problems
) -> tuple[DeepSpeedSpec, int | None, Offload] | None:
    """``--deepspeed PATH`` as the base DeepSpeed config, with the ZeRO stage and offload
    level it sets; None when it cannot be read."""
    config_path = _absolute(cwd, text)
    base, error = _read_ds_config(config_path)
    if base is None:
        problems.add(_DEEPSPEED_FLAG, str(error))
        return None
    stage, offload, errors = _ds_knobs(base, config_path)
    for message in errors:
        problems.add(_DEEPSPEED_FLAG, message)
    conflict = _offload_conflict(stage, offload)
    if conflict is not None and stage is not None:
        problems.add(_DEEPSPEED_FLAG, f"{config_path}: {conflict}")
    deepspeed = DeepSpeedSpec(config_path=config_path, base=base, flag=_DEEPSPEED_FLAG)
    return deepspeed, stage, offload


def _job_name(name: str | None, target: str, is_module: bool, problems: _Problems) -> str:
    """The given name, checked, or one made from the script's stem (or the module's name)."""
    if name is None:
        stem = target if is_module else Path(target).stem
        return _sanitise_name(stem)
    if not _NAME_RE.match(name):
        problems.add(
            "name",
            f"{name!r} is not a valid job name; {_HINTS[('name', 'string_pattern_mismatch')]}",
        )
    return name


def job_from_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    name: str | None = None,
    log_dir: Path | None = None,
    knob_flags: Sequence[str] = (),
    memory_limit: str | None = None,
) -> Job:
    """Build a Job from ``dsguard run -- LAUNCHER ... SCRIPT ARGS...``.

    Knob flags are parsed from ARGS (HF Trainer names) and removed, since dsguard passes
    them itself; ``--deepspeed PATH`` becomes the base DeepSpeed config and
    ``--output_dir`` (kept) the checkpoint directory. Problems raise :class:`JobFileError`
    with ``file=None`` and the offending flag as the field.

    Only the knob flags the command already has, or ``knob_flags`` (``--knob NAME=FLAG``)
    declares, are passed: a script without ``--per_device_train_batch_size`` is not handed
    one. A knob with no flag keeps its HF default as a starting value and its rungs are left
    out of the ladder. ``memory_limit`` (``--memory-limit 6GiB``) is
    ``resources.host_memory_limit``.
    """
    cwd = _absolute(Path.cwd(), cwd)
    problems = _Problems()
    if not argv:
        problems.add("command", "empty command; give the training command after `--`")
        raise JobFileError(problems.items)
    cmd = _parse_launcher(argv, cwd, problems)
    if cmd is None or cmd.target is None:
        raise JobFileError(problems.items)
    script, module = _target_of(cmd.target, cmd.is_module, cwd, problems)

    mapping = _knob_mapping(knob_flags, problems)
    scan = _scan_script_args(cmd.args, problems, mapping)
    flags = _quick_flags(scan, mapping, problems)
    resources = _quick_resources(memory_limit, problems)
    explicit = set(scan.knobs)
    values = dict(scan.knobs)
    values.setdefault("micro_batch_size", _HF_MICRO_BATCH_DEFAULT)
    values.setdefault("gradient_accumulation_steps", _HF_ACCUMULATION_DEFAULT)

    deepspeed: DeepSpeedSpec | None = None
    ds_read = _deepspeed_of(scan.deepspeed, cwd, problems) if scan.deepspeed is not None else None
    if ds_read is not None:
        deepspeed, stage, offload = ds_read
        values.update(zero_stage=stage, offload=offload)
        explicit |= {"zero_stage", "offload"}

    checkpoints = (
        CheckpointSpec(dir=_absolute(cwd, scan.output_dir)) if scan.output_dir is not None else None
    )
    name = _job_name(name, cmd.target, cmd.is_module, problems)
    gpus = cmd.gpus
    world_size = cmd.world_size or (len(gpus) if gpus else 1)
    if deepspeed is not None and not problems.items:
        batch_problem = ds_batch_problem(
            deepspeed.base, Knobs(**values), world_size, deepspeed.config_path
        )
        if batch_problem is not None:
            problems.add(_DEEPSPEED_FLAG, batch_problem)
    if problems.items:
        raise JobFileError(problems.items)

    return Job(
        name=name,
        source=None,
        workdir=cwd,
        launcher=cmd.launcher,
        script=script,
        module=module,
        args=tuple(scan.args),
        python=cmd.python,
        gpus=gpus,
        world_size=world_size,
        env=dict(cmd.env),
        knobs=Knobs(**values),
        explicit_knobs=frozenset(explicit),
        flags=flags,
        deepspeed=deepspeed,
        checkpoints=checkpoints,
        log_dir=_absolute(cwd, log_dir) if log_dir is not None else cwd / "runs" / name,
        resources=resources,
        data=_build_data(None, cmd.args, KnobDelivery()),
    )


# -- issue 14: --knob NAME=FLAG and --memory-limit ------------------------------------------

#: Knobs whose default flag is a field of transformers' ``TrainingArguments``
#: (src/transformers/training_args.py): per_device_train_batch_size,
#: gradient_accumulation_steps, gradient_checkpointing, dataloader_num_workers,
#: dataloader_pin_memory.
_TRAINING_ARGUMENTS_KNOBS = frozenset(
    {"micro_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
     "dataloader_workers", "pin_memory"}
)  # fmt: skip


def _knob_mapping(items: Sequence[str], problems: _Problems) -> dict[str, str]:
    """``--knob NAME=FLAG`` items as knob -> flag; unknown knobs and non-flags refused."""
    out: dict[str, str] = {}
    for item in items:
        knob, eq, flag = item.partition("=")
        where = f"--knob {item}"
        if not eq or not knob or not flag:
            problems.add(where, "write --knob NAME=FLAG, e.g. --knob max_length=--block_size")
        elif knob not in FLAG_KNOBS:
            known = ", ".join(FLAG_KNOBS)
            extra = " (it reaches DeepSpeed through its config)" if knob in KNOB_NAMES else ""
            problems.add(where, f"no knob {knob!r} takes a flag{extra}; knobs: {known}")
        elif not _FLAG_RE.match(flag):
            problems.add(where, f"must be a command-line flag like --name, got {flag!r}")
        elif knob in out:
            problems.add(where, f"{knob} is mapped twice")
        else:
            out[knob] = flag
    return out


def _quick_flags(
    scan: _ArgScan, mapping: Mapping[str, str], problems: _Problems
) -> dict[str, str | None]:
    """knob -> flag for the knobs the command carries or ``--knob`` declares; None for the
    rest. A declared whole-number knob must be in the command: dsguard passes it on every
    attempt and must know the value the script starts from."""
    flags: dict[str, str | None] = dict.fromkeys(DEFAULT_FLAGS)
    if set(scan.seen_flags) & _TRAINING_ARGUMENTS_KNOBS:
        # One TrainingArguments flag in the command means HfArgumentParser parses it, and it
        # has every TrainingArguments field; --model_max_length and --lora_enable are the
        # script's own and stay out unless the command has them.
        for knob in _TRAINING_ARGUMENTS_KNOBS:
            flags[knob] = DEFAULT_FLAGS[knob]
    for knob in scan.seen_flags:
        flags[knob] = mapping.get(knob, DEFAULT_FLAGS[knob])
    for knob, flag in mapping.items():
        if knob not in scan.seen_flags and knob not in BOOL_KNOBS:
            problems.add(
                f"--knob {knob}={flag}",
                f"the command does not give {flag}; add {flag} N so dsguard knows the value "
                "the script starts from",
            )
        flags[knob] = flag
    return flags


def _quick_resources(memory_limit: str | None, problems: _Problems) -> Resources:
    if memory_limit is None:
        return Resources()
    size = parse_size(memory_limit)
    if size is None or size > MAX_HOST_MEMORY_BYTES:
        problems.add(
            "--memory-limit",
            f"{memory_limit!r} is not a size between 1 byte and 64 PiB; write e.g. 6GiB, 800MiB",
        )
        return Resources()
    return Resources(host_memory_limit_bytes=size)
