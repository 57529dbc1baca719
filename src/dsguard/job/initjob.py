"""``dsguard init -- <the command you run today>``: a commented job file from a command line.

The command says the launcher (and so the world size and GPUs), the script or module, and its
arguments; the script's source and its config file say which framework it is. The knob names
come from :data:`dsguard.job.frameworks.FRAMEWORKS` only. What cannot be detected is written
as a comment to check, never guessed silently: the file is a starting point a human reads
before ``dsguard validate``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dsguard.errors import JobFileError
from dsguard.job.frameworks import FRAMEWORKS, Framework
from dsguard.job.model import LauncherKind
from dsguard.job.quickstart import _parse_launcher, _Problems

__all__ = ["Detected", "detect", "render_job"]

_DOTLIST_RE = re.compile(r"^([A-Za-z_][\w.]*)=(.*)$")
#: What a script's source says about its framework, strongest first.
_SOURCE_MARKERS: tuple[tuple[str, str], ...] = (
    ("SFTTrainer", "trl"),
    ("from trl", "trl"),
    ("group_texts", "run_clm"),
    ("deepspeed.initialize", "deepspeed"),
    ("save_state(", "accelerate"),
    ("Accelerator(", "accelerate"),
    ("TrainingArguments", "hf_trainer"),
    ("Trainer(", "hf_trainer"),
)


@dataclass
class Detected:
    """What ``dsguard init`` found in the command, the script and its config file."""

    framework: Framework | None
    why: str
    launcher: LauncherKind
    python: str
    target: str
    is_module: bool
    args: list[str]
    gpus: tuple[int, ...] | None = None
    world_size: int | None = None
    train: dict[str, Any] = field(default_factory=dict)
    packing: bool = False
    ckpt_dir: str | None = None
    config: str | None = None
    ds_config: str | None = None
    ds_flag: str | None = None
    #: knob -> flag for the knobs that reach the script as flags.
    flag_map: dict[str, str] = field(default_factory=dict)


def _front_end(argv: list[str]) -> tuple[list[str], str | None]:
    """Framework CLIs that are launchers themselves, rewritten to the module they run."""
    head = Path(argv[0]).name
    if head == "llamafactory-cli" and argv[1:2] == ["train"]:
        return ["python", "-m", "llamafactory.launcher", *argv[2:]], "llamafactory"
    if head == "axolotl" and argv[1:2] == ["train"]:
        return ["accelerate", "launch", "-m", "axolotl.cli.train", *argv[2:]], "axolotl"
    if head == "tune" and argv[1:2] == ["run"]:
        return ["python", "-m", "torchtune._cli.tune", *argv[1:]], "torchtune"
    return argv, None


def _from_source(target: str, is_module: bool, cwd: Path) -> tuple[str | None, str]:
    if is_module:
        for prefix, name in (("axolotl", "axolotl"), ("llamafactory", "llamafactory")):
            if target.startswith(prefix):
                return name, f"module {target}"
        return None, f"module {target} (source not read)"
    if Path(target).name.startswith("run_clm"):
        return "run_clm", f"script name {Path(target).name}"
    try:
        text = (cwd / target).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, f"{target} could not be read"
    for marker, name in _SOURCE_MARKERS:
        if marker in text:
            return name, f"{target} contains {marker!r}"
    return None, f"{target} has no known framework marker"


def detect(argv: list[str], cwd: Path) -> Detected:
    """Parse the command and read what it points at. Raises JobFileError (FILE None) for a
    command the launcher parser refuses."""
    argv, fw_name = _front_end(list(argv))
    problems = _Problems()
    cmd = _parse_launcher(argv, cwd, problems)
    if cmd is None or problems.items or cmd.target is None:
        raise JobFileError(problems.items or [])
    why = f"command {Path(argv[0]).name}"
    if fw_name is None:
        fw_name, why = _from_source(cmd.target, cmd.is_module, cwd)
    d = Detected(
        FRAMEWORKS.get(fw_name) if fw_name else None, why, cmd.launcher, cmd.python,
        cmd.target, cmd.is_module, list(cmd.args), cmd.gpus, cmd.world_size,
    )  # fmt: skip
    if fw_name == "torchtune":
        d.world_size = _torchtune_world(d)
    _read_knobs(d, cwd)
    return d


def _torchtune_world(d: Detected) -> int | None:
    args = d.args
    if "--nproc_per_node" in args:
        i = args.index("--nproc_per_node")
        if i + 1 < len(args) and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


def _flag_value(args: list[str], flag: str) -> tuple[int, int, str | None] | None:
    """``(start, end, value)`` of ``flag`` in args (``--f v``, ``--f=v``, bare ``--f``)."""
    for i, a in enumerate(args):
        name, eq, inline = a.partition("=")
        if name != flag:
            continue
        if eq:
            return i, i + 1, inline
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            return i, i + 2, args[i + 1]
        return i, i + 1, None
    return None


def _scalar(text: str | None) -> Any:
    if text is None:
        return True
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if text.isdigit() else text


#: Knobs dsguard passes on every attempt once they have a flag (the global-batch invariant).
_ALWAYS = ("micro_batch_size", "gradient_accumulation_steps")


def _read_flags(d: Detected, table: dict[str, str], *, always: bool) -> None:
    """Take the knob flags out of args (dsguard passes them itself). Only flags the command
    has are mapped, plus (``always``) micro-batch and accumulation, which the framework is
    known to take, or every flag of the table for a script that parses ``TrainingArguments``
    (run_clm): a flag the script lacks would kill the first attempt that passed it."""
    every = d.framework is not None and d.framework.parses_training_arguments
    for knob, flag in table.items():
        found = _flag_value(d.args, flag)
        if found is not None:
            d.train[knob] = _scalar(found[2])
            del d.args[found[0] : found[1]]
            d.flag_map[knob] = flag
        elif always and (knob in _ALWAYS or every):
            d.flag_map[knob] = flag


def _read_knobs(d: Detected, cwd: Path) -> None:
    fw = d.framework
    if fw is None or (fw.route == "flags" and not fw.knobs):
        # An unknown script or a bare accelerate loop: map the HF-named flags it has.
        _read_flags(d, dict(FRAMEWORKS["hf_trainer"].knobs), always=False)
    elif fw.route == "flags":
        _read_flags(d, dict(fw.knobs), always=True)
    _read_deepspeed(d, cwd)
    if fw is None:
        return
    if fw.config_arg is not None:
        _read_config(d, fw, cwd)
    _read_output(d, fw)
    if fw.packing == "always":
        d.packing = True
    elif fw.packing is not None and fw.packing.startswith("--"):
        found = _flag_value(d.args, fw.packing)
        d.packing = found is not None and _scalar(found[2]) is True


def _read_deepspeed(d: Detected, cwd: Path) -> None:
    for flag in ("--deepspeed", "--deepspeed_config"):
        found = _flag_value(d.args, flag)
        if found is None or found[2] is None or not found[2].endswith(".json"):
            continue
        d.ds_config, d.ds_flag = found[2], flag
        del d.args[found[0] : found[1]]
        try:
            cfg = json.loads((cwd / found[2]).read_text())
        except (OSError, ValueError):
            return
        if not isinstance(cfg, dict):
            return
        for knob, key in FRAMEWORKS["deepspeed"].knobs.items():
            value = _dotted(cfg, key)
            if isinstance(value, int) and not isinstance(value, bool):
                d.train.setdefault(knob, value)
        return


def _dotted(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _read_config(d: Detected, fw: Framework, cwd: Path) -> None:
    """The framework's YAML config (and ``key=value`` overrides after it) for knob values,
    packing and the output dir."""
    path: str | None = None
    if fw.config_arg:
        found = _flag_value(d.args, fw.config_arg)
        path = None if found is None else found[2]
    else:
        path = next((a for a in d.args if a.endswith((".yaml", ".yml"))), None)
    d.config = path
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load((cwd / path).read_text())
        except (OSError, yaml.YAMLError):
            loaded = None
        data = loaded if isinstance(loaded, dict) else {}
    overrides = {m.group(1): m.group(2) for a in d.args if (m := _DOTLIST_RE.match(a))}
    for knob, key in fw.knobs.items():
        value = _scalar(overrides[key]) if key in overrides else _dotted(data, key.lstrip("-"))
        if isinstance(value, bool | int):
            d.train.setdefault(knob, value)
    if fw.packing and not fw.packing.startswith("--") and fw.packing != "always":
        value = overrides.get(fw.packing, _dotted(data, fw.packing))
        d.packing = _scalar(value) is True if isinstance(value, str) else value is True
    if fw.output and not fw.output.startswith("--"):
        out = overrides.get(fw.output, _dotted(data, fw.output))
        d.ckpt_dir = out if isinstance(out, str) else None


def _read_output(d: Detected, fw: Framework) -> None:
    if fw.output and fw.output.startswith("--"):
        found = _flag_value(d.args, fw.output)
        if found is not None and found[2] is not None:
            d.ckpt_dir = found[2]


# -- rendering ---------------------------------------------------------------------------------


def _q(value: Any) -> str:
    """A YAML scalar or flow list (JSON is valid YAML)."""
    return json.dumps(value)


def render_job(d: Detected, name: str) -> str:
    """The commented job file text."""
    fw = d.framework
    out = [
        "# dsguard job file written by `dsguard init`: read it, then `dsguard validate` it.",
        f"# Framework: {fw.name if fw else 'not recognised'} ({d.why}).",
    ]
    if fw is not None:
        out.append(f"# Knob names: {fw.versions}; read from")
        out += [f"#   {src}" for src in fw.sources]
        out += [f"# Note: {note}" for note in fw.notes]
    out += [f"name: {_q(name)}", f"launcher: {d.launcher.value}"]
    out.append(f"{'module' if d.is_module else 'script'}: {_q(d.target)}")
    out.append(f"args: {_q(d.args)}")
    if d.gpus is not None:
        out.append(f"gpus: {_q(list(d.gpus))}")
    elif d.world_size is not None:
        out.append(f"world_size: {d.world_size}")
    out += _train_block(d)
    out += _route_block(d)
    if d.ds_config is not None:
        out += ["deepspeed:", f"  config: {_q(d.ds_config)}", f"  flag: {_q(d.ds_flag)}"]
    out += _checkpoint_block(d)
    if d.packing:
        out += [
            "data:                 # packed data: a max_length move starts a logged new phase",
            "  packing: true",
        ]
    return "\n".join(out) + "\n"


def _train_block(d: Detected) -> list[str]:
    train = dict(d.train)
    lines = ["train:"]
    if "micro_batch_size" not in train:
        lines.append("  # micro_batch_size was not found in the command or config: check it")
        train["micro_batch_size"] = 1
    for knob, value in train.items():
        lines.append(f"  {knob}: {_q(value)}")
    return lines


def _route_block(d: Detected) -> list[str]:
    """How each knob reaches the script (flags, dotlist, or the DeepSpeed config)."""
    fw = d.framework
    all_knobs = ("micro_batch_size", "gradient_accumulation_steps", "max_length", "lora",
                 "gradient_checkpointing", "dataloader_workers", "pin_memory")  # fmt: skip
    lines = ["flags:                # knob -> the script's flag; null: never passed"]
    lines += [f"  {k}: {_q(d.flag_map.get(k))}" for k in all_knobs]
    if fw is not None and fw.route == "dotlist":
        lines.append("knobs_dotlist:        # knob -> key=value argument after the config file")
        lines += [f"  {k}: {_q(key)}" for k, key in fw.knobs.items()]
    if fw is not None and fw.route == "deepspeed_config" and d.ds_config is None:
        lines.append("# The script reads its batch from a DeepSpeed config: add deepspeed.config")
    return lines


def _checkpoint_block(d: Detected) -> list[str]:
    fw = d.framework
    layout = fw.layout if fw is not None else "auto"
    lines = ["checkpoints:"]
    if d.ckpt_dir is None:
        lines.append("  # the checkpoint dir was not found: set it to where the script saves")
    lines.append(f"  dir: {_q(d.ckpt_dir or 'out')}")
    lines.append(f"  layout: {layout}")
    resume = fw.resume_flag if fw is not None else None
    lines.append(f"  resume_flag: {_q(resume)}   # null: the script resumes itself")
    output = fw.output if fw is not None and fw.output and fw.output.startswith("--") else None
    if output is None or d.ckpt_dir is None:
        output = None
    lines.append(f"  output_flag: {_q(output)}")
    return lines
