"""Job file (YAML) -> :class:`dsguard.job.model.Job`.

This is the only module that sees YAML; it and :mod:`dsguard.job.quickstart` (the job built
from a command line, which reuses the DeepSpeed-config and path helpers here) are the only
ones that see relative paths. Its contract with the
user: a bad job file is refused before anything launches, and *every* problem is reported at
once as ``FILE:LINE: field: what is wrong``. A supervisor that finds the third typo only after
the first two restarts wastes GPU hours, so validation never stops at the first error.

How positions are found: the shape check (:mod:`dsguard.job.schema`) sees plain Python
values, so the text is parsed twice. The composed node tree (``yaml.compose``) keeps
``start_mark`` for every key and value; a shape error's ``loc`` is walked through that tree to
the offending key. Checks a shape cannot express (files exist, cross-field rules, flags
dsguard owns) run afterwards over whatever parts validated, using the same locator.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import json
import math
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dsguard.errors import JobFileError, Problem
from dsguard.job.delivery import DOTTED_KEY_RE, dotted_get, dotted_set, read_knobs_file
from dsguard.job.knobs import (
    BOOL_KNOBS,
    DEFAULT_FLAGS,
    FLAG_KNOBS,
    KNOB_NAMES,
    KNOB_SPECS,
    MAX_BATCH,
    MAX_LENGTH,
    OFFLOAD_NAMES,
    Knobs,
    Offload,
)
from dsguard.job.model import (
    ALL_RUNGS,
    DIVERGENCE_ACTIONS,
    IN_RUN_PROBE_STEPS,
    LAUNCHER_NAMES,
    LAYOUT_NAMES,
    CheckpointLayout,
    CheckpointSpec,
    DataSpec,
    DeepSpeedSpec,
    DivergencePolicy,
    ExitCodes,
    Job,
    KnobDelivery,
    KnobsFile,
    Ladder,
    LauncherKind,
    Limits,
    Outputs,
    Resources,
    redact_url,
)
from dsguard.job.schema import (
    Bool,
    BoolOrOneOf,
    Float,
    Int,
    IntOrStr,
    KeyedSection,
    ListOf,
    OneOf,
    Section,
    ShapeError,
    Str,
    StrMap,
    flag_keys,
    spec,
    train_keys,
)

__all__ = [
    "NAME_PATTERN",
    "dir_problem",
    "ds_batch_problem",
    "job_file_schema",
    "load_job",
]

#: Job names become a directory name and a systemd instance name (``dsguard@NAME``), so
#: they must be safe in both without escaping.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_NAME_RE = re.compile(NAME_PATTERN)
#: What a command-line flag must look like for dsguard to add, find and remove it reliably.
_FLAG_RE = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A GPU index is a C ``unsigned int`` to NVML; one past it overflows the ctypes call.
MAX_GPU_INDEX = 1023
#: Data-parallel ranks: 65,536 is already more GPUs than any single job has had.
MAX_WORLD_SIZE = 2**16
#: ``host_memory_limit`` becomes RLIMIT_AS; 2**56 bytes (64 PiB) is more address space than
#: x86-64's five-level paging gives a process, so anything above it is not a limit at all,
#: and past 2**64 ``setrlimit`` itself raises in the child, before the launcher starts.
MAX_HOST_MEMORY_BYTES = 2**56

#: Field used for problems about the document as a whole (unreadable, not YAML, not a mapping).
DOCUMENT = "(document)"

#: HF Trainer's resume flag: dsguard owns it (it passes it when it resumes), in a job file
#: and on a quick-start command line alike.
_RESUME_FLAG = "--resume_from_checkpoint"
#: Knobs HfArgumentParser treats as booleans, so each also owns its ``--no_`` spelling.
_BOOL_KNOBS = BOOL_KNOBS


# --------------------------------------------------------------------------------------------
# The shape of the file (dsguard.job.schema). Semantics live in the checks further down.
# --------------------------------------------------------------------------------------------


class TrainSection(KeyedSection, keys=train_keys()):
    """``train:``, one key per knob (derived from :class:`~dsguard.job.knobs.Knobs`)."""


class FlagsSection(KeyedSection, keys=flag_keys()):
    """``flags:``, one key per knob in ``knobs.FLAG_KNOBS``."""


class DeepSpeedSection(Section):
    config: str = spec(Str())
    flag: str | None = spec(Str(), None)  # absent -> DeepSpeedSpec's default; null -> never passed


class CheckpointsSection(Section):
    dir: str = spec(Str())
    resume_flag: str | None = spec(Str(), None)  # absent -> CheckpointSpec's default; null -> never
    output_flag: str | None = spec(Str(), None)  # absent -> CheckpointSpec's default; null -> kept
    resume_at_start: bool | None = spec(Bool(), None)
    layout: str | None = spec(OneOf(LAYOUT_NAMES), None)  # absent/null -> auto (detected)


class LadderSection(Section):
    oom: list[str] | None = spec(ListOf(Str()), None)
    host_oom: list[str] | None = spec(ListOf(Str()), None)


#: Upper bounds of the ``limits:`` numbers. A duration of ``1e30`` (or ``.inf``) passes a
#: ``>= 0`` check and then overflows the first ``sleep``/``wait`` it reaches (``OverflowError:
#: timeout value is too large``): dsguard exits 70, and under systemd that is a restart loop
#: that never says which key is wrong. The bounds are far past any useful setting.
_HOUR_S = 3600.0
_DAY_S = 86400.0
_WEEK_S = 7 * _DAY_S
#: A retry budget beyond this is "forever" spelled as a number; a week of one-minute attempts.
_MAX_ATTEMPTS = 10_000


class LimitsSection(Section):
    min_micro_batch_size: int | None = spec(Int(ge=1, le=MAX_BATCH), None)
    min_max_length: int | None = spec(Int(ge=1, le=MAX_LENGTH), None)
    max_attempts: int | None = spec(Int(ge=1, le=_MAX_ATTEMPTS), None)
    backoff_s: list[float] | None = spec(
        ListOf(Float(ge=0, le=_DAY_S), min_length=2, max_length=2), None
    )
    healthy_uptime_s: float | None = spec(Float(ge=0, le=_WEEK_S), None)
    stop_grace_s: float | None = spec(Float(ge=0, le=_HOUR_S), None)
    fatal_grace_s: float | None = spec(Float(ge=0, le=_HOUR_S), None)
    hang_timeout_s: float | None = spec(Float(gt=0, le=_WEEK_S), None)
    stop_save_timeout_s: float | None = spec(Float(ge=0, le=_DAY_S), None)
    fixed: list[str] | None = spec(ListOf(Str()), None)


class ResourcesSection(Section):
    gpu_memory_fraction: float | None = spec(Float(gt=0, le=1), None)
    #: Bytes, or a size such as "6GiB", "800MiB", "1.5G".
    host_memory_limit: int | str | None = spec(IntOrStr(), None)
    host_memory_via: str | None = spec(OneOf(("auto", "rlimit_as")), None)


class ExitCodesSection(Section):
    """issue 16: how ``dsguard run`` numbers its outcomes for a cluster engine
    (docs/engines.md); the CLI's ``--exit-*`` flags override it."""

    succeeded: int | None = spec(Int(ge=0, le=255), None)
    gave_up: int | None = spec(Int(ge=1, le=255), None)
    retry: int | None = spec(Int(ge=1, le=255), None)


class _TopSection(Section):
    """The top-level scalars; the sections are validated one by one (see :func:`_validate`)."""

    name: str = spec(Str(pattern=NAME_PATTERN))
    workdir: str = spec(Str(), ".", nullable=False)
    launcher: str = spec(OneOf(LAUNCHER_NAMES), LauncherKind.PYTHON.value, nullable=False)
    script: str | None = spec(Str(), None)
    module: str | None = spec(Str(), None)
    args: list[str] = spec(ListOf(Str()), [], nullable=False)
    python: str | None = spec(Str(), None)
    gpus: list[int] | None = spec(ListOf(Int(ge=0, le=MAX_GPU_INDEX)), None)
    world_size: int | None = spec(Int(ge=1, le=MAX_WORLD_SIZE), None)
    env: dict[str, str] = spec(StrMap(), {}, nullable=False)
    log_dir: str | None = spec(Str(), None)
    knobs_dotlist: dict[str, str] = spec(StrMap(), {}, nullable=False)
    knobs_env: dict[str, str] = spec(StrMap(), {}, nullable=False)
    notify: list[str] | None = spec(ListOf(Str()), None)  # issue 17: apprise URLs
    #: Start at the fastest config predicted to fit (``core.fit``); false: start as written.
    fit: bool = spec(Bool(), True, nullable=False)
    #: Each run tries one unmeasured neighbour of the fastest config the known-good store
    #: measured (``core.throughput``), so the store learns which is faster (issue 15).
    #: ``true`` is ``next_run``; ``in_run``: the probe happens inside this run.
    fit_probe: bool | str = spec(BoolOrOneOf(("next_run", "in_run")), False, nullable=False)
    #: ``fit_probe: in_run``: optimizer steps each config is timed over (default
    #: ``core.throughput.IN_RUN_STEPS``).
    fit_probe_steps: int | None = spec(Int(ge=2, le=100_000), None)


# -- issue 14: knob delivery beyond flags, data semantics -------------------------------------


class KnobsFileSection(Section):
    """``knobs_file:``: the script reads its knobs from its own config file."""

    path: str = spec(Str())
    #: null: the file is a positional argument (``axolotl train config.yml``,
    #: ``llamafactory-cli train config.yaml``), the args item that names it is replaced.
    arg: str | None = spec(Str(), None)
    keys: dict[str, str] = spec(StrMap())


class DataSection(Section):
    packing: bool | None = spec(Bool(), None)


class MetricsSection(Section):
    """``metrics:`` (issue 17): a node_exporter textfile and/or a localhost HTTP port."""

    textfile: str | None = spec(Str(), None)
    http_port: int | None = spec(Int(ge=1, le=65535), None)


class DivergenceSection(Section):
    action: str | None = spec(OneOf(DIVERGENCE_ACTIONS), None)
    skip_batches: int | None = spec(Int(ge=0, le=1_000_000), None)
    max_rollbacks: int | None = spec(Int(ge=1, le=100), None)


_SECTIONS: dict[str, type[Section]] = {
    "knobs_file": KnobsFileSection,
    "data": DataSection,
    "train": TrainSection,
    "flags": FlagsSection,
    "deepspeed": DeepSpeedSection,
    "checkpoints": CheckpointsSection,
    "ladder": LadderSection,
    "limits": LimitsSection,
    "resources": ResourcesSection,
    "metrics": MetricsSection,
    "divergence": DivergenceSection,
    "exit_codes": ExitCodesSection,
}
#: Sections (and lists/maps) where an empty ``key:`` (YAML null) just means "not given":
#: templates often keep the key with every entry commented out.
_NULL_MEANS_ABSENT = frozenset(
    {
        "args",
        "env",
        "flags",
        "ladder",
        "limits",
        "resources",
        "knobs_dotlist",
        "knobs_env",
        "data",
        "divergence",
    }
)
#: Stand-ins for required fields that failed validation, so that the remaining checks still
#: run; the field is remembered as bad and checks that read it are skipped.
_FALLBACKS: dict[str, dict[str, Any]] = {
    "": {"name": "job"},
    "train": {"micro_batch_size": 1},
    "deepspeed": {"config": ""},
    "checkpoints": {"dir": "."},
    "knobs_file": {"path": "", "keys": {}},
}
#: Extra hints for shape errors, by dotted field (without list indices) and error type.
_HINTS: dict[tuple[str, str], str] = {
    ("args", "list_type"): "write args as a YAML list, one argument per item",
    ("args", "string_type"): "write each argument as its own list item (quote it if it "
    "contains ': ')",
    ("name", "string_pattern_mismatch"): "use letters, digits, '_', '.' and '-', starting with "
    "a letter or digit (it names the state directory and the systemd instance)",
    ("limits.backoff_s", "too_short"): "write [first, longest] in seconds",
    ("limits.backoff_s", "too_long"): "write [first, longest] in seconds",
    ("train.zero_stage", "less_than_equal"): "ZeRO stages are 0, 1, 2 and 3",
    ("train.zero_stage", "greater_than_equal"): "ZeRO stages are 0, 1, 2 and 3",
}


#: Valid top-level keys: the scalars, then the sections.
_TOP_KEYS: tuple[str, ...] = (*_TopSection.names(), *_SECTIONS)


def job_file_schema() -> dict[str, Any]:
    """JSON schema of the whole job file, for editor completion (YAML language servers)."""
    schema = _TopSection.json_schema()
    schema["title"] = "dsguard job file"
    schema["required"] = [*schema.get("required", []), "train"]
    for name, section in _SECTIONS.items():
        schema["properties"][name] = section.json_schema()
    return schema


# --------------------------------------------------------------------------------------------
# YAML positions
# --------------------------------------------------------------------------------------------

Loc = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _pairs(node: MappingNode) -> list[tuple[Node, Node]]:
    """Key/value pairs of a mapping, ``<<:`` merge sources first (own keys override them)."""
    merged: list[tuple[Node, Node]] = []
    own: list[tuple[Node, Node]] = []
    for key, value in node.value:
        if key.tag == _MERGE_TAG:
            sources = value.value if isinstance(value, SequenceNode) else [value]
            for source in sources:
                if isinstance(source, MappingNode):
                    merged.extend(_pairs(source))
        else:
            own.append((key, value))
    return merged + own


class _Locator:
    """Maps a loc (``("train", "micro_batch_size")``, ``("args", 3)``) to a YAML line."""

    def __init__(self, root: Node) -> None:
        self.root = root

    def find(self, loc: Loc) -> tuple[Node | None, int]:
        """The node at ``loc`` and its line (for a mapping entry: the key's line). When the
        path ends early (a missing key), ``None`` and the line of the deepest part found."""
        node = self.root
        line = _line(node)
        for part in loc:
            step = self._step(node, part)
            if step is None:
                return None, line
            node, line = step
        return node, line

    def line(self, loc: Loc) -> int:
        return self.find(loc)[1]

    def dotted(self, loc: Loc) -> str:
        """``loc`` as the user reads it: ``args[3]`` for list items, ``env.1`` for a key."""
        out = ""
        node: Node | None = self.root
        for part in loc:
            if part == "[key]":  # pydantic's marker for "the key itself is wrong"
                continue
            in_list = isinstance(node, SequenceNode) or (node is None and isinstance(part, int))
            if in_list:
                out += f"[{part}]"
            else:
                out += f".{part}" if out else str(part)
            step = self._step(node, part) if node is not None else None
            node = step[0] if step is not None else None
        return out or DOCUMENT

    @staticmethod
    def _step(node: Node, part: str | int) -> tuple[Node, int] | None:
        if isinstance(node, MappingNode):
            # Reversed: with duplicate keys YAML keeps the last one, so point at that one.
            for key, value in reversed(_pairs(node)):
                if isinstance(key, ScalarNode) and key.value == str(part):
                    return value, _line(key)
        elif (
            isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value)
        ):
            item = node.value[part]
            return item, _line(item)
        return None


def _duplicate_keys(root: Node) -> list[tuple[Loc, int, int]]:
    """``(loc, line, first_line)`` for every repeated key. PyYAML silently keeps the last
    value, so a second ``train:`` block would throw away the first without a word."""
    found: list[tuple[Loc, int, int]] = []
    seen_nodes: set[int] = set()

    def walk(node: Node, loc: Loc) -> None:
        if id(node) in seen_nodes:  # aliases share nodes (and may even be recursive)
            return
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if key.tag == _MERGE_TAG or not isinstance(key, ScalarNode):
                    continue
                if key.value in first:
                    found.append(((*loc, key.value), _line(key), first[key.value]))
                else:
                    first[key.value] = _line(key)
                walk(value, (*loc, key.value))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*loc, index))

    walk(root, ())
    return found


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for "the key itself is wrong"
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or DOCUMENT


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _show(value: object) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return f"{_kind(value)} {value!r}" if isinstance(value, str) else repr(value)
    if isinstance(value, bool):
        return f"{value!r}".lower()
    return _kind(value)


def _did_you_mean(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _key_home(key: str, here: str) -> str | None:
    """The section a misplaced key belongs to, e.g. top-level ``micro_batch_size`` -> train."""
    if here != "" and key in _TopSection.names():
        return "the top level"
    for section, model in _SECTIONS.items():
        if section != here and key in model.names():
            return f"{section}:"
    return None


def _range(err: ShapeError) -> str:
    """`` (valid range: 1 <= value <= 1048576)`` for a bound error with both a lower and an
    upper bound: the user fixing ``micro_batch_size: 1e30`` should not need a second round to
    find the other end."""
    bounds = err.ctx.get("bounds")
    if not isinstance(bounds, dict) or "le" not in bounds:
        return ""
    if "ge" in bounds:
        low = f"{_num(bounds['ge'])} <= "
    elif "gt" in bounds:
        low = f"{_num(bounds['gt'])} < "
    else:
        return ""
    return f" (valid range: {low}value <= {_num(bounds['le'])})"


def _num(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _message(err: ShapeError, field_name: str, section: str) -> str:
    kind = err.type
    value = err.input
    loc = err.loc
    if kind == "extra_forbidden":
        key = str(loc[-1])
        candidates = list(_SECTIONS[section].names() if section else _TOP_KEYS)
        msg = "unknown key" + _did_you_mean(key, candidates)
        home = _key_home(key, section) if len(loc) == 1 else None
        if section == "flags" and key in KNOB_NAMES:
            msg += f"; {key} reaches DeepSpeed through the rendered config, not a flag"
        elif home is not None:
            msg += f"; it belongs under {home}"
        return msg + f" (valid keys: {', '.join(candidates)})"
    if kind == "missing":
        return "required key is missing"
    if kind in ("model_type", "dict_type"):
        return f"must be a mapping, got {_show(value)}"
    msg = err.msg.replace("Input should be", "must be").replace(
        "String should match pattern", "must match the pattern"
    )
    msg = f"{msg}, got {_show(value)}{_range(err)}"
    if kind == "literal_error" and isinstance(value, str):
        expected = re.findall(r"'([^']*)'", str(err.ctx.get("expected", "")))
        msg += _did_you_mean(value, expected)
    if kind == "string_type" and value is not None and not isinstance(value, list | dict):
        msg += " (quote it to make it a string)"
    hint = _HINTS.get((re.sub(r"\[\d+\]", "", field_name), kind))
    if hint:
        msg += f"; {hint}"
    return msg


# --------------------------------------------------------------------------------------------
# Section validation that keeps going
# --------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Section)


@dataclass
class _Checked(Generic[M]):
    """A validated section, or ``None``; ``bad`` names its keys that failed validation
    (replaced by stand-ins), so checks that would read them are skipped."""

    model: M | None
    bad: frozenset[str] = frozenset()

    def ok(self, *keys: str) -> M | None:
        if self.model is None or any(k in self.bad for k in keys):
            return None
        return self.model


@dataclass
class _Context:
    file: Path
    locator: _Locator
    problems: list[Problem] = field(default_factory=list)

    def add(self, loc: Loc, message: str) -> None:
        field_name = self.locator.dotted(loc)
        self.problems.append(Problem(self.file, self.locator.line(loc), field_name, message))


def _validate(model: type[M], data: object, section: str, ctx: _Context) -> _Checked[M]:
    prefix: Loc = (section,) if section else ()
    checked, errors = model.check(data)
    if checked is not None:
        return _Checked(checked)
    for err in errors:
        loc = prefix + err.loc
        ctx.add(loc, _message(err, ctx.locator.dotted(loc), section))
    if not isinstance(data, dict):
        return _Checked(None)
    # Retry without the offending keys (stand-ins for required ones) so that the checks
    # below still see the parts of this section that are fine.
    bad = frozenset(str(err.loc[0]) for err in errors if err.loc)
    cleaned = {k: v for k, v in data.items() if k not in bad}
    for key, stand_in in _FALLBACKS.get(section, {}).items():
        if key in bad or key not in cleaned:
            cleaned[key] = stand_in
    return _Checked(model.check(cleaned)[0], bad)


# --------------------------------------------------------------------------------------------
# DeepSpeed config (shared by the job file and the quick start)
# --------------------------------------------------------------------------------------------


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # DeepSpeed itself refuses duplicate keys (dict_raise_error_on_duplicate_keys); say it
    # here, before any GPU time is spent.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _read_ds_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(config, None)`` or ``(None, what is wrong)``."""
    if not path.exists():
        return None, f"DeepSpeed config not found: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read DeepSpeed config {path}: {exc}"
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except json.JSONDecodeError as exc:
        return None, (
            f"DeepSpeed config {path} is not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno})"
        )
    except ValueError as exc:
        return None, f"DeepSpeed config {path} is not valid: {exc}"
    if not isinstance(data, dict):
        return None, f"DeepSpeed config {path} must be a JSON object, got {_kind(data)}"
    return data, None


def _offloaded(zero: Mapping[str, Any], key: str, legacy: str) -> bool:
    section = zero.get(key)
    if isinstance(section, dict):
        # HF templates carry `"offload_optimizer": {"device": "none"}`: present but off.
        return str(section.get("device", "none")).lower() in ("cpu", "nvme")
    return zero.get(legacy) is True  # pre-0.3.x spelling DeepSpeed still accepts


def _ds_knobs(base: Mapping[str, Any], path: Path) -> tuple[int | None, Offload, list[str]]:
    """ZeRO stage and offload level the base config sets, plus what is wrong with them."""
    zero = base.get("zero_optimization", {})
    if not isinstance(zero, dict):
        return None, Offload.NONE, [f"{path}: zero_optimization must be an object"]
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage <= 3:
        return (
            None,
            Offload.NONE,
            [f"{path}: zero_optimization.stage must be 0, 1, 2 or 3, got {_show(stage)}"],
        )
    if _offloaded(zero, "offload_param", "cpu_offload_param"):
        offload = Offload.ALL
    elif _offloaded(zero, "offload_optimizer", "cpu_offload"):
        offload = Offload.OPTIMIZER
    else:
        offload = Offload.NONE
    return stage, offload, []


def ds_batch_problem(
    base: Mapping[str, Any], knobs: Knobs, world_size: int, path: Path
) -> str | None:
    """Why the base config's explicit ``train_batch_size`` cannot be used with the job's
    knobs, or None.

    Refused, not fixed: ``train_batch_size`` *is* the global batch
    (micro x accumulation x world), the one number the ladder keeps constant, and the job then
    states two different ones. Rewriting it to the knobs' product (what happened silently)
    trains another optimisation problem than the config says; keeping it is impossible
    (DeepSpeed asserts the product, the HF Trainer raises on the mismatch); guessing which
    knob to change (accumulation 7/4?) may have no answer at all. Only the user can say which
    global batch was meant, so nothing launches until the two agree. ``"auto"``, absent and
    non-numeric values are left to the preflight (:mod:`dsguard.core.preflight`), which
    fills, adds or refuses them per attempt; a disagreeing micro-batch or accumulation alone
    is a per-rank setting the job's ``train:`` overrides, and the preflight reports that
    rewrite as a fix.
    """
    value = base.get("train_batch_size")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None  # the preflight names a fractional or infinite batch
    wanted = knobs.global_batch(world_size)
    if int(value) == wanted:
        return None
    return (
        f"{path}: train_batch_size is {value!r}, but train: gives micro "
        f"{knobs.micro_batch_size} x accumulation {knobs.gradient_accumulation_steps} x world "
        f"{world_size} = {wanted}; train_batch_size is the global batch, which dsguard keeps "
        "constant, and the job states two different ones: set it to "
        f'{wanted} (or "auto"), or change train: so that the product is {int(value)}'
    )


def _offload_conflict(stage: int | None, offload: Offload) -> str | None:
    if offload is Offload.NONE:
        return None
    if stage is None:
        return "CPU offload is a DeepSpeed ZeRO feature; add a deepspeed: section"
    if stage == 0:
        return f"offload {offload.value!r} needs ZeRO stage 1 or higher, but zero_stage is 0"
    if offload is Offload.ALL and stage < 3:
        return f"offload 'all' (parameters too) needs ZeRO stage 3, but zero_stage is {stage}"
    return None


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _absolute(base: Path, value: str | Path) -> Path:
    """``value`` against ``base``, normalised but with symlinks kept (paths stay the ones
    the user recognises)."""
    return Path(os.path.normpath(base / Path(value).expanduser()))


def _canonical_flag(flag: str) -> str:
    """HfArgumentParser accepts ``--a-b`` for ``--a_b``; treat the spellings as one flag."""
    body = flag.lstrip("-")
    return flag[: len(flag) - len(body)] + body.replace("-", "_")


def _negated(flag: str) -> str | None:
    """``--no_x`` for a boolean ``--x``: HfArgumentParser adds it for fields defaulting to True."""
    return "--no_" + flag[2:] if flag.startswith("--") else None


def _nearest_existing(path: Path) -> tuple[Path | None, os.stat_result | None, str | None]:
    """The deepest existing ancestor of ``path`` (``path`` itself included) and its stat,
    or why the walk stopped: a symlink loop or a component that cannot be searched."""
    for candidate in (path, *path.parents):
        try:
            return candidate, candidate.stat(), None
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing, or below a file: the ancestor that exists tells which
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return candidate, None, f"{candidate} goes through a symlink loop"
            return candidate, None, f"cannot look up {candidate}: {exc.strerror or exc}"
        except ValueError as exc:  # an embedded NUL byte
            return None, None, f"not a usable path: {exc}"
    return None, None, None


def _writable(directory: Path) -> str | None:
    """Why dsguard (its effective user) could not create files in ``directory``, or None.
    ``access(2)`` answers for root too on a read-only mount (EROFS), where permission bits
    would not stop root."""
    use_effective = os.access in os.supports_effective_ids
    if os.access(directory, os.W_OK | os.X_OK, effective_ids=use_effective):
        return None
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"{directory} is on a read-only file system"
    return f"{directory} is not writable by this user (uid {os.geteuid()})"


def dir_problem(path: Path, *, writable: bool) -> str | None:
    """What stops ``path`` from being (or becoming) a directory dsguard can use, or None.

    A ``log_dir`` below a regular file, equal to one, inside a read-only mount, or behind a
    symlink loop used to pass validation and then crash ``dsguard run`` with a traceback and
    exit 70 (under systemd a restart loop) at its first ``mkdir``; the same for
    ``checkpoints.dir``, where the trainer fails minutes into the first attempt instead.
    Checked here so that ``validate`` and ``run`` refuse it alike, naming the line.

    ``writable``: also require that the directory (or, when it does not exist yet, its
    nearest existing ancestor) is writable by this process; only the commands that will
    write there ask, since ``status`` or ``plan`` may be run by another user.
    """
    found, st, error = _nearest_existing(path)
    if error is not None:
        return error
    if found is None or st is None:
        return None  # nothing exists up to the root: nothing to say about it here
    if not stat.S_ISDIR(st.st_mode):
        what = "a regular file" if stat.S_ISREG(st.st_mode) else "not a directory"
        if found == path:
            return f"{path} exists and is {what}, not a directory"
        return f"{found} is {what}, so no directory can be created below it ({path})"
    if writable:
        why = _writable(found)
        if why is not None:
            return why if found == path else f"cannot create {path}: {why}"
    return None


def _resolve_python(value: str, base: Path) -> tuple[str | None, str | None]:
    """Absolute interpreter path, or an error. A bare name is looked up on PATH *now*:
    systemd gives services a different PATH, so the job must not depend on it later."""
    if os.sep in value or value.startswith("~"):
        path = _absolute(base, value)
        if not path.is_file():
            return None, f"python interpreter not found: {path}"
        return str(path), None
    found = shutil.which(value)
    if found is None:
        return None, f"python interpreter {value!r} not found on PATH; give its full path"
    return str(Path(found).absolute()), None


def _stringify_scalars(data: dict[str, Any], locator: _Locator) -> None:
    """``args`` items and ``env`` values become strings, from the YAML source text: the
    constructed value would turn ``0.00002`` into ``2e-05`` and ``010`` into ``8``."""

    def raw(loc: Loc, value: object) -> object:
        if value is None or isinstance(value, str | list | dict):
            return value  # null and containers are left for the shape check to reject
        node, _ = locator.find(loc)
        return node.value if isinstance(node, ScalarNode) else str(value)

    args = data.get("args")
    if isinstance(args, list):
        data["args"] = [raw(("args", i), item) for i, item in enumerate(args)]
    env = data.get("env")
    if isinstance(env, dict):
        data["env"] = {k: raw(("env", k), v) for k, v in env.items()}


# --------------------------------------------------------------------------------------------
# load_job
# --------------------------------------------------------------------------------------------


def _fail(path: Path, line: int | None, message: str) -> JobFileError:
    return JobFileError([Problem(path, line, DOCUMENT, message)])


#: libyaml when PyYAML was built with it: parsing a job file twice (nodes for the lines, then
#: values) in pure Python costs ~25 ms of `dsguard validate`'s 300 ms start-up budget.
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose_and_load(text: str, loader: Any) -> tuple[Node | None, object]:
    """The node tree (it keeps every key's line) and the constructed values. Two parses, not
    one: constructing merges ``<<:`` keys into the tree in place, and the locator and the
    duplicate-key check need the tree as written."""
    root = yaml.compose(text, Loader=loader)
    data = yaml.load(text, Loader=loader) if root is not None else None
    return root, data


def _parse(path: Path) -> tuple[dict[str, Any], _Locator, list[Problem]]:
    """Read, compose and construct the YAML; raise at once if there is nothing to validate."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(path, None, "job file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, None, f"cannot read the job file: {exc}") from None
    try:
        try:
            # A tab goes to the pure-Python parser, which refuses it where libyaml would keep
            # it inside a value (`dir: out<TAB>/x` would silently name a directory with a tab).
            loader = yaml.SafeLoader if "\t" in text else _FAST_LOADER
            root, data = _compose_and_load(text, loader)
        except yaml.YAMLError:
            # libyaml's messages are terse ("found character that cannot start any token");
            # the pure-Python parser names the character and where the construct started.
            # Only a broken file pays for the second, slower parse.
            root, data = _compose_and_load(text, yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = str(exc.problem or exc.context)
        if exc.context and exc.problem:
            where = f" started at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            what += f" ({exc.context}{where})"
        raise _fail(path, mark.line + 1 if mark else None, f"invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise _fail(path, None, f"invalid YAML: {exc}") from None
    if root is None:
        raise _fail(
            path, None, "the job file is empty; it needs at least name:, script: and train:"
        )
    if not isinstance(root, MappingNode) or not isinstance(data, dict):
        raise _fail(path, _line(root), f"the job file must be a mapping of keys, got {_kind(data)}")
    locator = _Locator(root)
    problems = [
        Problem(
            path,
            line,
            _dotted(loc),
            f"duplicate key; it is also set at line {first} and YAML would silently keep only "
            "the last one",
        )
        for loc, line, first in _duplicate_keys(root)
    ]
    return data, locator, problems


def load_job(path: Path, *, writable: bool = False) -> Job:
    """Parse and validate a job file; raise :class:`JobFileError` with every problem found.

    Relative paths resolve against the job file's directory (``workdir`` too), except
    ``script`` and ``checkpoints.dir``, which belong to the training code and resolve
    against ``workdir``.

    ``writable``: also require that this process can create ``log_dir`` and write in it.
    ``dsguard run`` and ``dsguard validate`` ask (validate must refuse what run would);
    read-only commands (``status``, ``events``, ``plan``) and ``service install`` (which
    runs as another user than the job) do not.
    """
    given = Path(path)
    source = _absolute(Path.cwd(), given)
    base_dir = source.parent
    data, locator, duplicate_problems = _parse(given)
    ctx = _Context(given, locator, duplicate_problems)

    for key in _NULL_MEANS_ABSENT:
        if key in data and data[key] is None:
            del data[key]
    _stringify_scalars(data, locator)

    top_data = {k: v for k, v in data.items() if k not in _SECTIONS}
    if "train" not in data:
        ctx.add(("train",), "required section is missing; it needs at least micro_batch_size")

    def section(name: str, model: type[M]) -> _Checked[M] | None:
        return _validate(model, data[name], name, ctx) if name in data else None

    parsed = _Sections(
        top=_validate(_TopSection, top_data, "", ctx),
        train=section("train", TrainSection),
        flags=section("flags", FlagsSection),
        deepspeed=section("deepspeed", DeepSpeedSection),
        checkpoints=section("checkpoints", CheckpointsSection),
        ladder=section("ladder", LadderSection),
        limits=section("limits", LimitsSection),
        resources=section("resources", ResourcesSection),
        metrics=section("metrics", MetricsSection),
        knobs_file=section("knobs_file", KnobsFileSection),
        data=section("data", DataSection),
        divergence=section("divergence", DivergenceSection),
        exit_codes=section("exit_codes", ExitCodesSection),
    )
    job = _build(ctx, base_dir, source, parsed, writable=writable)
    outputs = _build_outputs(ctx, parsed, base_dir)
    if job is not None:
        job = dataclasses.replace(job, outputs=outputs)
    if job is None and not ctx.problems:  # every path to None records why; never raise empty
        ctx.add((), "the job could not be built (a dsguard bug: no problem was recorded)")
    if ctx.problems or job is None:
        ctx.problems.sort(key=lambda p: p.line or 0)
        raise JobFileError(ctx.problems)
    return job


def _check_output_dir(
    ctx: _Context, args: Sequence[str], workdir: Path, checkpoints: CheckpointSpec
) -> None:
    """The trainer's ``--output_dir`` in args must be ``checkpoints.dir``: dsguard looks for
    checkpoints (and rewrites that value per phase) there, not where the trainer writes."""
    if checkpoints.output_flag is None:
        return
    wanted = _canonical_flag(checkpoints.output_flag)
    for index, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if not arg.startswith("-") or _canonical_flag(name) != wanted:
            continue
        if eq:
            value, where = inline, index
        elif index + 1 < len(args):
            value, where = args[index + 1], index + 1
        else:
            ctx.add(("args", index), f"{name} needs a value")
            continue
        target = _absolute(workdir, value)
        if target != checkpoints.dir:
            ctx.add(
                ("args", where),
                f"{name} {value} resolves to {target}, but checkpoints.dir is "
                f"{checkpoints.dir}; dsguard would look for checkpoints in the wrong place",
            )


@dataclass
class _Sections:
    """Each part of the file as validated; ``None`` for a section the file leaves out."""

    top: _Checked[_TopSection]
    train: _Checked[TrainSection] | None
    flags: _Checked[FlagsSection] | None
    deepspeed: _Checked[DeepSpeedSection] | None
    checkpoints: _Checked[CheckpointsSection] | None
    ladder: _Checked[LadderSection] | None
    limits: _Checked[LimitsSection] | None
    resources: _Checked[ResourcesSection] | None = None
    metrics: _Checked[MetricsSection] | None = None
    knobs_file: _Checked[KnobsFileSection] | None = None
    data: _Checked[DataSection] | None = None
    divergence: _Checked[DivergenceSection] | None = None
    exit_codes: _Checked[ExitCodesSection] | None = None


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}  # fmt: skip


def parse_size(value: int | str) -> int | None:
    """Bytes from an int or a size string ("6GiB", "800M", "1.5 GB"); None if unparseable."""
    if isinstance(value, int):
        return value if value > 0 else None
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        return None
    size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    return size if size > 0 else None


def _build_resources(ctx: _Context, parsed: _Checked[ResourcesSection] | None) -> Resources:
    if parsed is None or parsed.model is None:
        return Resources()
    rm = parsed.model
    host: int | None = None
    if rm.host_memory_limit is not None:
        host = parse_size(rm.host_memory_limit)
        if host is None:
            ctx.add(
                ("resources", "host_memory_limit"),
                f"{rm.host_memory_limit!r} is not a size; write bytes or e.g. 6GiB, 800MiB",
            )
        elif host > MAX_HOST_MEMORY_BYTES:
            ctx.add(
                ("resources", "host_memory_limit"),
                f"{rm.host_memory_limit!r} is {host} bytes, more than any address space "
                f"(valid range: 1 <= bytes <= {MAX_HOST_MEMORY_BYTES}, i.e. 64 PiB)",
            )
            host = None
    return Resources(
        gpu_memory_fraction=rm.gpu_memory_fraction,
        host_memory_limit_bytes=host,
        host_memory_via=rm.host_memory_via or "auto",
    )


def _build_divergence(
    ctx: _Context,
    parsed: _Checked[DivergenceSection] | None,
    checkpoints: CheckpointSpec | None,
) -> DivergencePolicy:
    """A rollback needs checkpoints to roll back to, and a resume flag to pass one."""
    if parsed is None or parsed.model is None:
        return DivergencePolicy()
    dm = parsed.model
    default = DivergencePolicy()
    policy = DivergencePolicy(
        action=dm.action or default.action,
        skip_batches=default.skip_batches if dm.skip_batches is None else dm.skip_batches,
        max_rollbacks=dm.max_rollbacks or default.max_rollbacks,
    )
    if policy.action == "rollback" and (checkpoints is None or checkpoints.resume_flag is None):
        ctx.add(
            ("divergence", "action"),
            "rollback resumes from a checkpoint before the divergence: it needs a checkpoints: "
            "section with a resume flag (or write action: give_up)",
        )
    return policy


def _build_locations(
    ctx: _Context, top_c: _Checked[_TopSection], base_dir: Path
) -> tuple[Path | None, Path | None, str | None]:
    """``(workdir, script, python)``, each ``None`` when it is missing or failed a check: the
    job must not launch from a directory, script or interpreter that is not there."""
    top = top_c.model

    # --- where things are -------------------------------------------------------------------
    workdir: Path | None = None
    if top is not None and "workdir" not in top_c.bad:
        workdir = _absolute(base_dir, top.workdir)
        if not workdir.is_dir():
            ctx.add(("workdir",), f"directory not found: {workdir}")
            workdir = None

    script: Path | None = None
    if top is not None and not {"script", "module"} & top_c.bad:
        if top.script is not None and top.module is not None:
            ctx.add(("module",), "set either script or module, not both")
        elif top.script is None and top.module is None:
            ctx.add(("script",), "required: set script: (a file) or module: (a python module)")
        elif top.module is not None and not _MODULE_RE.match(top.module):
            ctx.add(("module",), f"not a python module name: {top.module!r}")
        elif top.script is not None and workdir is not None:
            script = _absolute(workdir, top.script)
            if not script.is_file():
                ctx.add(("script",), f"script not found: {script} (resolved against workdir)")

    python: str | None = None
    if top is not None and "python" not in top_c.bad:
        if top.python is None:
            python = sys.executable
        else:
            python, error = _resolve_python(top.python, base_dir)
            if error:
                ctx.add(("python",), error)
    return workdir, script, python


def _check_gpus_and_env(ctx: _Context, top_c: _Checked[_TopSection]) -> int:
    """The world size ``gpus:`` and ``world_size:`` agree on (1 when neither is set); records
    duplicate GPUs, bad environment names, and a ``CUDA_VISIBLE_DEVICES`` that would fight
    the one dsguard sets from ``gpus:``."""
    top = top_c.model
    # --- GPUs and environment ---------------------------------------------------------------
    world_size = 1
    if top is not None:
        gpus_ok = top_c.ok("gpus")
        if gpus_ok is not None and top.gpus is not None:
            if not top.gpus:
                ctx.add(("gpus",), "must not be empty; leave gpus out to use every visible GPU")
            seen: dict[int, int] = {}
            for index, gpu in enumerate(top.gpus):
                if gpu in seen:
                    ctx.add(("gpus", index), f"GPU {gpu} is listed twice (also gpus[{seen[gpu]}])")
                seen.setdefault(gpu, index)
        n_gpus = len(top.gpus) if gpus_ok is not None and top.gpus else None
        if top.world_size is not None:
            world_size = top.world_size
            if n_gpus is not None and top.world_size != n_gpus:
                ctx.add(
                    ("world_size",),
                    f"is {top.world_size} but gpus lists {n_gpus} GPUs; drop one of them or "
                    "make them agree",
                )
        elif n_gpus is not None:
            world_size = n_gpus
        for key in top.env:
            if not _ENV_NAME_RE.match(key):
                ctx.add(("env", key), f"not a valid environment variable name: {key!r}")
        if top.gpus and "CUDA_VISIBLE_DEVICES" in top.env:
            ctx.add(
                ("env", "CUDA_VISIBLE_DEVICES"),
                "conflicts with gpus:, from which dsguard sets it; remove one of them",
            )
    return world_size


def _build_deepspeed(
    ctx: _Context, ds_c: _Checked[DeepSpeedSection] | None, base_dir: Path
) -> tuple[DeepSpeedSpec | None, int | None, Offload]:
    """The base DeepSpeed config, read and checked now (a bad one would otherwise fail only
    after the launcher started), with the ZeRO stage and offload level it sets."""
    # --- DeepSpeed ---------------------------------------------------------------------------
    ds_model = ds_c.model if ds_c is not None else None
    ds_spec: DeepSpeedSpec | None = None
    ds_stage: int | None = None
    ds_offload = Offload.NONE
    if ds_c is not None and ds_model is not None and "config" not in ds_c.bad:
        config_path = _absolute(base_dir, ds_model.config)
        base, error = _read_ds_config(config_path)
        if base is None:
            ctx.add(("deepspeed", "config"), str(error))
        else:
            ds_stage, ds_offload, errors = _ds_knobs(base, config_path)
            for message in errors:
                ctx.add(("deepspeed", "config"), message)
            flag_kw = {"flag": ds_model.flag} if "flag" in ds_model.fields_set else {}
            ds_spec = DeepSpeedSpec(config_path=config_path, base=base, **flag_kw)
    return ds_spec, ds_stage, ds_offload


def _build_knobs(
    ctx: _Context,
    train_c: _Checked[TrainSection] | None,
    ds_c: _Checked[DeepSpeedSection] | None,
    ds_config: tuple[DeepSpeedSpec | None, int | None, Offload],
) -> tuple[Knobs | None, set[str]]:
    """``train:`` as :class:`Knobs` plus the knob names the user set. ZeRO stage and offload
    come from the base DeepSpeed config unless ``train:`` overrides them; without a
    ``deepspeed:`` section they are refused, since nothing could apply them."""
    ds_spec, ds_stage, ds_offload = ds_config
    # --- knobs ------------------------------------------------------------------------------
    knobs: Knobs | None = None
    explicit: set[str] = set()
    train = train_c.model if train_c is not None else None
    if train_c is not None and train is not None:
        values = {
            k: getattr(train, k)
            for k in train.fields_set
            if getattr(train, k) is not None and k not in train_c.bad
        }
        explicit = set(values)
        has_ds = ds_c is not None
        if not has_ds:
            if "zero_stage" in values:
                ctx.add(
                    ("train", "zero_stage"),
                    "needs a deepspeed: section (ZeRO is a DeepSpeed feature); remove it or "
                    "add deepspeed: {config: ...}",
                )
            if values.get("offload", "none") != "none":
                ctx.add(
                    ("train", "offload"),
                    "needs a deepspeed: section (CPU offload is a DeepSpeed ZeRO feature)",
                )
            values.pop("zero_stage", None)
            values.pop("offload", None)
        elif ds_spec is not None:
            stage = values.setdefault("zero_stage", ds_stage)
            offload = Offload(values.setdefault("offload", ds_offload))
            explicit |= {"zero_stage", "offload"}  # the base config states them explicitly
            conflict = _offload_conflict(stage, offload)
            if conflict is not None:
                if "offload" in train.fields_set and train.offload is not None:
                    ctx.add(("train", "offload"), conflict)
                elif "zero_stage" in train.fields_set and train.zero_stage is not None:
                    ctx.add(("train", "zero_stage"), conflict)
                else:
                    ctx.add(("deepspeed", "config"), f"{ds_spec.config_path}: {conflict}")
        if "offload" in values:
            values["offload"] = Offload(values["offload"])
        if "micro_batch_size" not in train_c.bad:
            knobs = Knobs(**values)
    return knobs, explicit


def _build_flags(
    ctx: _Context,
    top_c: _Checked[_TopSection],
    flags_c: _Checked[FlagsSection] | None,
    ckpt_c: _Checked[CheckpointsSection] | None,
    ds_spec: DeepSpeedSpec | None,
    *,
    delivery: KnobDelivery | None = None,
) -> tuple[dict[str, str | None], str | None]:
    """``(flag of each knob, resume flag)``. dsguard owns these flags (it passes them on every
    attempt), so each must look like a flag, belong to one knob only, and be absent from
    ``args:``, where a second copy would silently override or contradict dsguard's."""
    top = top_c.model
    # --- flags dsguard owns -----------------------------------------------------------------
    flag_map: dict[str, str | None] = dict(DEFAULT_FLAGS)
    if delivery is not None and delivery.declared:
        # Not an HF Trainer script: HF's flag names are not assumed (a plain argparse script
        # dies on `unrecognized arguments: --gradient_checkpointing`); only stated flags.
        flag_map = dict.fromkeys(DEFAULT_FLAGS)
    if flags_c is not None and flags_c.model is not None:
        for knob in FlagsSection.names():
            if knob in flags_c.model.fields_set and knob not in flags_c.bad:
                flag_map[knob] = getattr(flags_c.model, knob)
    stated: set[str] = set()
    if flags_c is not None and flags_c.model is not None:
        stated = set(flags_c.model.fields_set) - set(flags_c.bad)
    for knob in delivery.mapped() if delivery is not None else ():
        if flag_map.get(knob) is not None and knob in stated:
            ctx.add(
                ("flags", knob),
                f"{knob} is also delivered by knobs_file, knobs_dotlist or knobs_env; a knob "
                "has one route (set this flag to null or drop the other mapping)",
            )
        if knob in flag_map:
            flag_map[knob] = None  # a knob mapped elsewhere is never also passed as a flag
    owned: list[tuple[str, Loc, str]] = []  # (flag, where it is configured, why dsguard owns it)
    for knob in FLAG_KNOBS:
        flag = flag_map.get(knob)
        if flag is not None:
            why = f"dsguard sets this from train.{knob}"
            owned.append((flag, ("flags", knob), why))
            negated = _negated(flag) if knob in _BOOL_KNOBS else None
            if negated is not None:
                owned.append((negated, ("flags", knob), why))
    resume_flag: str | None = None
    ckpt = ckpt_c.model if ckpt_c is not None else None
    if ckpt is not None:
        resume_flag = ckpt.resume_flag if "resume_flag" in ckpt.fields_set else _RESUME_FLAG
        if "resume_flag" not in ckpt.fields_set and ckpt.layout not in (None, "hf", "auto"):
            # Only HF Trainer takes --resume_from_checkpoint; other layouts resume through
            # the script's own logic (DeepSpeed's `latest`) or a flag the file names.
            resume_flag = None
        if resume_flag is not None:
            owned.append(
                (resume_flag, ("checkpoints", "resume_flag"), "dsguard passes this when it resumes")
            )
    if ds_spec is not None and ds_spec.flag is not None:
        owned.append(
            (
                ds_spec.flag,
                ("deepspeed", "flag"),
                "dsguard passes the config it renders from deepspeed.config",
            )
        )
    owners: dict[str, Loc] = {}
    for owned_flag, where, _ in owned:
        if not _FLAG_RE.match(owned_flag):
            ctx.add(where, f"must be a command-line flag like --name, got {owned_flag!r}")
        key = _canonical_flag(owned_flag)
        if key in owners and owners[key] != where:
            ctx.add(where, f"{owned_flag} is also the flag of {_dotted(owners[key])}")
        owners.setdefault(key, where)
    if top is not None and "args" not in top_c.bad:
        whys = {_canonical_flag(owned_flag): why for owned_flag, _, why in owned}
        for index, arg in enumerate(top.args):
            reason = whys.get(_canonical_flag(arg.partition("=")[0])) if arg[:1] == "-" else None
            if reason is not None:
                ctx.add(("args", index), f"{reason}; remove it from args")
    return flag_map, resume_flag


def _build_checkpoints(
    ctx: _Context,
    top_c: _Checked[_TopSection],
    ckpt_c: _Checked[CheckpointsSection] | None,
    workdir: Path | None,
    resume_flag: str | None,
) -> CheckpointSpec | None:
    """``checkpoints:`` resolved against ``workdir``; its output flag in ``args:`` must point
    at the same directory, or dsguard would look for checkpoints where none are written."""
    top = top_c.model
    ckpt = ckpt_c.model if ckpt_c is not None else None
    # --- checkpoints ------------------------------------------------------------------------
    checkpoints: CheckpointSpec | None = None
    if ckpt is not None and ckpt_c is not None and "dir" not in ckpt_c.bad and workdir is not None:
        ckpt_kw: dict[str, Any] = {"resume_flag": resume_flag}
        if "output_flag" in ckpt.fields_set:
            ckpt_kw["output_flag"] = ckpt.output_flag
        if ckpt.resume_at_start is not None:
            ckpt_kw["resume_at_start"] = ckpt.resume_at_start
        if ckpt.layout is not None:
            ckpt_kw["layout"] = CheckpointLayout(ckpt.layout)
        ckpt_kw["resume_flag_explicit"] = "resume_flag" in ckpt.fields_set
        checkpoints = CheckpointSpec(dir=_absolute(workdir, ckpt.dir), **ckpt_kw)
        ckpt_problem = dir_problem(checkpoints.dir, writable=False)
        if ckpt_problem is not None:
            ctx.add(("checkpoints", "dir"), f"{ckpt_problem} (resolved against workdir)")
        if checkpoints.output_flag is not None and not _FLAG_RE.match(checkpoints.output_flag):
            ctx.add(
                ("checkpoints", "output_flag"),
                f"must be a command-line flag like --name, got {checkpoints.output_flag!r}",
            )
        elif top is not None and "args" not in top_c.bad:
            _check_output_dir(ctx, top.args, workdir, checkpoints)
    return checkpoints


def _build_ladder(ctx: _Context, ladder_c: _Checked[LadderSection] | None) -> Ladder:
    """``ladder:`` with every rung known and listed once (a typo would silently skip a rung)."""
    ladder = Ladder()
    if ladder_c is not None and ladder_c.model is not None:
        ladder_kw: dict[str, tuple[str, ...]] = {}
        for which in ("oom", "host_oom"):
            rungs = getattr(ladder_c.model, which)
            if rungs is None:
                continue
            ladder_kw[which] = tuple(rungs)
            first: dict[str, int] = {}
            for index, rung in enumerate(rungs):
                if rung not in ALL_RUNGS:
                    ctx.add(
                        ("ladder", which, index),
                        f"unknown rung {rung!r}{_did_you_mean(rung, ALL_RUNGS)}; "
                        f"known rungs: {', '.join(ALL_RUNGS)}",
                    )
                elif rung in first:
                    ctx.add(
                        ("ladder", which, index),
                        f"rung {rung!r} is listed twice (also {which}[{first[rung]}])",
                    )
                first.setdefault(rung, index)
        ladder = Ladder(**ladder_kw, explicit=frozenset(ladder_kw))
    return ladder


def _build_limits(
    ctx: _Context, limits_c: _Checked[LimitsSection] | None, knobs: Knobs | None
) -> Limits:
    """``limits:``; explicit floors above the starting knobs are refused, since the ladder
    could never take its first step."""
    limits = Limits()
    if limits_c is not None and limits_c.model is not None:
        lm = limits_c.model
        limits_kw: dict[str, Any] = {
            k: getattr(lm, k)
            for k in lm.fields_set
            if k not in ("backoff_s", "fixed") and getattr(lm, k) is not None
        }
        if lm.backoff_s is not None:
            first_s, longest_s = lm.backoff_s
            if first_s > longest_s:
                ctx.add(
                    ("limits", "backoff_s"),
                    f"first delay {first_s:g}s is longer than the longest {longest_s:g}s; "
                    "write [first, longest]",
                )
            limits_kw.update(backoff_first_s=first_s, backoff_max_s=longest_s)
        limits = Limits(**limits_kw)
        # Only explicit limits are checked: the default min_max_length (512) above a short
        # max_length just makes the max_length rung inapplicable, which is fine.
        min_mbs, min_len = lm.min_micro_batch_size, lm.min_max_length
        if knobs is not None and min_mbs is not None and min_mbs > knobs.micro_batch_size:
            ctx.add(
                ("limits", "min_micro_batch_size"),
                f"{min_mbs} is above train.micro_batch_size ({knobs.micro_batch_size}); "
                "the ladder could never start",
            )
        max_len = knobs.max_length if knobs is not None else None
        if max_len is not None and min_len is not None and min_len > max_len:
            ctx.add(
                ("limits", "min_max_length"),
                f"{min_len} is above train.max_length ({max_len})",
            )
    return limits


def _build_log_dir(
    ctx: _Context, top_c: _Checked[_TopSection], base_dir: Path, *, writable: bool
) -> Path | None:
    """``log_dir`` (default ``runs/NAME``) resolved against the job file's directory, and
    checked the way ``dsguard run`` will use it (see :func:`dir_problem`)."""
    top = top_c.model
    if top is None:
        return None
    given = top.log_dir is not None
    log_dir = _absolute(base_dir, top.log_dir if top.log_dir is not None else f"runs/{top.name}")
    problem = dir_problem(log_dir, writable=writable)
    if problem is not None and "log_dir" not in top_c.bad:
        where = "" if given else " (the default log_dir, runs/NAME next to the job file)"
        ctx.add(("log_dir",), f"{problem}{where}; dsguard writes its logs and lock there")
    return log_dir


# -- issue 14: knob delivery beyond flags, data semantics -------------------------------------

#: Argument-line spellings of packing: run_clm concatenates text into ``--block_size`` chunks
#: (transformers examples/pytorch/language-modeling/run_clm.py, ``group_texts``); TRL's
#: SFTConfig ``packing``; axolotl's ``sample_packing``.
_PACKING_FLAGS: dict[str, str] = {
    "--block_size": "run_clm's --block_size (texts are concatenated into block_size chunks)",
    "--packing": "TRL's --packing",
    "--sample_packing": "axolotl's --sample_packing",
}
#: Keys in a script's own config file (or dotlist) that turn packing on: TRL/LLaMA-Factory
#: ``packing``, axolotl ``sample_packing``, torchtune ``dataset.packed``.
_PACKING_KEYS = frozenset({"packing", "sample_packing", "packed"})
#: HfArgumentParser's string_to_bool words for true.
_TRUE_WORDS = frozenset({"true", "t", "yes", "y", "1"})


def _arg_value(args: Sequence[str], flag: str) -> tuple[int, str] | None:
    """``(index of the value, value)`` of ``flag`` in args (``--f v`` or ``--f=v``), or None."""
    wanted = _canonical_flag(flag)
    for index, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if not arg.startswith("-") or _canonical_flag(name) != wanted:
            continue
        if eq:
            return index, inline
        if index + 1 < len(args):
            return index + 1, args[index + 1]
    return None


def _check_knob_names(ctx: _Context, where: Loc, names: Sequence[str]) -> list[str]:
    good: list[str] = []
    for knob in names:
        if knob in KNOB_NAMES:
            good.append(knob)
        else:
            ctx.add(
                (*where, knob),
                f"unknown knob{_did_you_mean(knob, KNOB_NAMES)}; knobs: {', '.join(KNOB_NAMES)}",
            )
    return good


#: knob -> (where the script states it, the value): from the knobs file or an args dotlist.
_Stated = dict[str, tuple[Loc, object]]


def _parse_stated(knob: str, stated: object) -> tuple[object, str | None]:
    """The script's own value for ``knob`` as a knob value, or why it is not one."""
    spec = KNOB_SPECS[knob]
    text = str(stated).strip().lower()
    if spec.kind == "bool":
        if isinstance(stated, bool) or text in ("true", "false"):
            return stated if isinstance(stated, bool) else text == "true", None
        return None, f"{stated!r} is not true or false"
    if spec.kind == "offload":
        return (text, None) if text in OFFLOAD_NAMES else (None, f"{stated!r} is not an offload")
    if isinstance(stated, bool) or not (isinstance(stated, int) or text.isdigit()):
        return None, f"{stated!r} is not a whole number"
    value = int(text)
    low, high = spec.minimum, spec.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        return None, f"{value} is outside {low}..{high}"
    return value, None


def _reconcile(
    ctx: _Context, stated: _Stated, knobs: Knobs | None, explicit: set[str]
) -> Knobs | None:
    """The job's knobs with the script's own values taken in for knobs ``train:`` leaves out
    (``gradient_accumulation_steps: 4`` in config.json must not silently become dsguard's
    default 1 in every attempt's copy); a knob ``train:`` sets must agree with the script's
    value, since two statements of the micro-batch would make the global batch a guess."""
    if knobs is None:
        return None
    adopt: dict[str, object] = {}
    for knob, (where, raw) in stated.items():
        if raw is None or isinstance(raw, dict | list):
            continue
        value, error = _parse_stated(knob, raw)
        current = getattr(knobs, knob)
        current = current.value if isinstance(current, Offload) else current
        if error is not None:
            ctx.add(where, f"the script's own value for {knob}: {error}; set train.{knob}")
        elif knob not in explicit:
            adopt[knob] = Offload(str(value)) if knob == "offload" else value
        elif value != current:
            ctx.add(
                where,
                f"the script's own value for {knob} is {raw!r} but train: starts at "
                f"{current!r}; make them agree (dsguard sets it on every attempt)",
            )
    explicit |= set(adopt)
    return knobs.replace(**adopt) if adopt else knobs


def _check_knobs_file_arg(
    ctx: _Context, arg: str | None, args: Sequence[str], workdir: Path, path: Path
) -> None:
    """``arg`` (or, when null, a positional item) must be in args and name ``path``: that is
    the value dsguard replaces with each attempt's copy."""
    if arg is None:
        named = [i for i, a in enumerate(args) if a[:1] != "-" and _absolute(workdir, a) == path]
        if len(named) != 1:
            how = "no item" if not named else f"{len(named)} items"
            ctx.add(
                ("knobs_file", "arg"),
                f"null means the file is a positional argument, but {how} of args names "
                f"{path}; give arg: (the flag before it) or list the file once",
            )
        return
    found = _arg_value(args, arg)
    if not _FLAG_RE.match(arg):
        ctx.add(("knobs_file", "arg"), f"must be a flag like --config, got {arg!r}")
    elif found is None:
        ctx.add(
            ("knobs_file", "arg"),
            f"{arg} with a value is not in args; dsguard replaces its value with the "
            "per-attempt copy of the file",
        )
    elif not any(a.partition("=")[0] == arg for a in args):
        ctx.add(("knobs_file", "arg"), f"args spell {arg} differently; write it as in args")
    elif _absolute(workdir, found[1]) != path:
        ctx.add(("args", found[0]), f"{found[1]} is not knobs_file.path ({path})")


def _build_knobs_file(
    ctx: _Context,
    kf_c: _Checked[KnobsFileSection] | None,
    args: Sequence[str],
    workdir: Path | None,
    stated: _Stated,
) -> KnobsFile | None:
    """``knobs_file:`` read and checked: the file parses, ``arg`` is in args and names it,
    each key is a knob and a dotted key that can be set."""
    model = kf_c.model if kf_c is not None else None
    if kf_c is None or model is None or workdir is None or "path" in kf_c.bad:
        return None
    path = _absolute(workdir, model.path)
    fmt, base, error = read_knobs_file(path)
    if error is not None or base is None or fmt is None:
        ctx.add(("knobs_file", "path"), str(error))
        return None
    if "arg" not in kf_c.bad:
        _check_knobs_file_arg(ctx, model.arg, args, workdir, path)
    keys: dict[str, str] = {}
    for knob in _check_knob_names(ctx, ("knobs_file", "keys"), list(model.keys)):
        key = model.keys[knob]
        if not DOTTED_KEY_RE.match(key):
            ctx.add(("knobs_file", "keys", knob), f"not a dotted key like a.b_c: {key!r}")
            continue
        try:
            dotted_set(base, key, 0)
        except ValueError as exc:
            ctx.add(("knobs_file", "keys", knob), f"{path.name}: {exc}")
            continue
        stated[knob] = (("knobs_file", "keys", knob), dotted_get(base, key))
        keys[knob] = key
    return KnobsFile(path=path, arg=model.arg, keys=keys, fmt=fmt, base=base)


def _build_delivery(
    ctx: _Context,
    top_c: _Checked[_TopSection],
    kf_c: _Checked[KnobsFileSection] | None,
    workdir: Path | None,
    stated: _Stated,
) -> KnobDelivery:
    """``knobs_file:``, ``knobs_dotlist:`` and ``knobs_env:`` checked; each knob has at most
    one route."""
    top = top_c.model
    args = list(top.args) if top is not None and "args" not in top_c.bad else []
    kfile = _build_knobs_file(ctx, kf_c, args, workdir, stated)
    dotlist: dict[str, str] = {}
    env: dict[str, str] = {}
    if top is not None and "knobs_dotlist" not in top_c.bad:
        for knob in _check_knob_names(ctx, ("knobs_dotlist",), list(top.knobs_dotlist)):
            key = top.knobs_dotlist[knob]
            if not DOTTED_KEY_RE.match(key.lstrip("+")):
                ctx.add(("knobs_dotlist", knob), f"not a dotted key like a.b_c: {key!r}")
                continue
            for index, arg in enumerate(args):
                name, eq, value = arg.partition("=")
                if eq and name.lstrip("+") == key.lstrip("+"):
                    stated[knob] = (("args", index), value)
            dotlist[knob] = key
    if top is not None and "knobs_env" not in top_c.bad:
        for knob in _check_knob_names(ctx, ("knobs_env",), list(top.knobs_env)):
            var = top.knobs_env[knob]
            if not _ENV_NAME_RE.match(var):
                ctx.add(("knobs_env", knob), f"not a valid environment variable name: {var!r}")
            elif var in top.env:
                ctx.add(("knobs_env", knob), f"{var} is also in env:; dsguard sets it per attempt")
            else:
                env[knob] = var
    seen: dict[str, str] = {k: "knobs_file.keys" for k in (kfile.keys if kfile else {})}
    for where, mapping in (("knobs_dotlist", dotlist), ("knobs_env", env)):
        for knob in mapping:
            if knob in seen:
                ctx.add((where, knob), f"{knob} is also delivered by {seen[knob]}; keep one")
            seen.setdefault(knob, where)
    return KnobDelivery(file=kfile, dotlist=dotlist, env=env)


def _has_packing_key(node: object, depth: int = 0) -> str | None:
    if not isinstance(node, dict) or depth > 3:
        return None
    for key, value in node.items():
        if key in _PACKING_KEYS and value is True:
            return str(key)
        inner = _has_packing_key(value, depth + 1)
        if inner is not None:
            return f"{key}.{inner}"
    return None


def _build_data(
    data_c: _Checked[DataSection] | None,
    args: Sequence[str],
    delivery: KnobDelivery,
    flag_map: Mapping[str, str | None] | None = None,
) -> DataSpec:
    """``data.packing`` as stated, else as the command line or the script's config says."""
    if data_c is not None and data_c.model is not None and data_c.model.packing is not None:
        return DataSpec(packing=data_c.model.packing, source="data.packing")
    max_length_flag = (flag_map or {}).get("max_length")
    if max_length_flag is not None and _canonical_flag(max_length_flag) == "--block_size":
        return DataSpec(packing=True, source=f"flags.max_length {_PACKING_FLAGS['--block_size']}")
    for flag, why in _PACKING_FLAGS.items():
        found = _arg_value(args, flag)
        last = bool(args) and _canonical_flag(args[-1]) == flag  # a bare store_true flag
        if found is None and not last:
            continue
        value = found[1] if found is not None else ""
        if flag == "--block_size" or last or value.startswith("-") or value.lower() in _TRUE_WORDS:
            return DataSpec(packing=True, source=why)
    for arg in args:
        name, eq, value = arg.partition("=")
        key = name.lstrip("+").rsplit(".", 1)[-1]
        if eq and key in _PACKING_KEYS and value.lower() in _TRUE_WORDS:
            return DataSpec(packing=True, source=f"argument {arg}")
    if delivery.file is not None:
        found_key = _has_packing_key(dict(delivery.file.base))
        if found_key is not None:
            return DataSpec(packing=True, source=f"{delivery.file.path.name}: {found_key}")
    return DataSpec()


def _check_fixed(ctx: _Context, limits_c: _Checked[LimitsSection] | None) -> tuple[str, ...]:
    if limits_c is None or limits_c.model is None or limits_c.model.fixed is None:
        return ()
    good: list[str] = []
    for index, knob in enumerate(limits_c.model.fixed):
        if knob not in KNOB_NAMES:
            ctx.add(
                ("limits", "fixed", index),
                f"unknown knob {knob!r}{_did_you_mean(knob, KNOB_NAMES)}; knobs: "
                f"{', '.join(KNOB_NAMES)}",
            )
        elif knob not in good:
            good.append(knob)
    return tuple(good)


def _build(
    ctx: _Context, base_dir: Path, source: Path, parsed: _Sections, *, writable: bool = False
) -> Job | None:
    """Cross-field checks and path resolution; ``None`` when a part needed for the Job failed
    (its problems are already in ``ctx``)."""
    top_c = parsed.top
    top = top_c.model
    workdir, script, python = _build_locations(ctx, top_c, base_dir)
    world_size = _check_gpus_and_env(ctx, top_c)
    ds_config = _build_deepspeed(ctx, parsed.deepspeed, base_dir)
    ds_spec = ds_config[0]
    knobs, explicit = _build_knobs(ctx, parsed.train, parsed.deepspeed, ds_config)
    stated: _Stated = {}
    delivery = _build_delivery(ctx, top_c, parsed.knobs_file, workdir, stated)
    knobs = _reconcile(ctx, stated, knobs, explicit)
    if ds_spec is not None and knobs is not None and "world_size" not in top_c.bad:
        batch_problem = ds_batch_problem(ds_spec.base, knobs, world_size, ds_spec.config_path)
        if batch_problem is not None:
            ctx.add(("deepspeed", "config"), batch_problem)
    flag_map, resume_flag = _build_flags(
        ctx, top_c, parsed.flags, parsed.checkpoints, ds_spec, delivery=delivery
    )
    checkpoints = _build_checkpoints(ctx, top_c, parsed.checkpoints, workdir, resume_flag)
    ladder = _build_ladder(ctx, parsed.ladder)
    limits = _build_limits(ctx, parsed.limits, knobs)
    limits = dataclasses.replace(limits, fixed=_check_fixed(ctx, parsed.limits))
    args = list(top.args) if top is not None else []
    data_spec = _build_data(parsed.data, args, delivery, flag_map)
    resources = _build_resources(ctx, parsed.resources)
    divergence = _build_divergence(ctx, parsed.divergence, checkpoints)
    exit_codes = _build_exit_codes(ctx, parsed.exit_codes)
    log_dir = _build_log_dir(ctx, top_c, base_dir, writable=writable)
    if top is None or workdir is None or python is None or knobs is None or ctx.problems:
        return None
    name = top.name
    assert log_dir is not None  # set whenever top is
    return Job(
        name=name,
        source=source,
        workdir=workdir,
        launcher=LauncherKind(top.launcher),
        script=script,
        module=top.module,
        args=tuple(top.args),
        python=python,
        gpus=tuple(top.gpus) if top.gpus else None,
        world_size=world_size,
        env=dict(top.env),
        knobs=knobs,
        explicit_knobs=frozenset(explicit),
        flags=flag_map,
        deepspeed=ds_spec,
        checkpoints=checkpoints,
        ladder=ladder,
        limits=limits,
        log_dir=log_dir,
        resources=resources,
        delivery=delivery,
        data=data_spec,
        divergence=divergence,
        exit_codes=exit_codes,
        fit=top.fit,
        fit_probe=top.fit_probe in (True, "next_run"),
        in_run_probe_steps=_in_run_probe_steps(ctx, top, top_c.bad),
    )


# -- issue 15: fit_probe: in_run ---------------------------------------------------------------


def _in_run_probe_steps(ctx: _Context, top: _TopSection, bad: frozenset[str]) -> int | None:
    """The steps each config is timed over with ``fit_probe: in_run`` (None: no in-run
    probe). ``fit_probe_steps`` without ``in_run`` is refused: it would silently do nothing."""
    if top.fit_probe != "in_run":
        if top.fit_probe_steps is not None and "fit_probe" not in bad:
            ctx.add(("fit_probe_steps",), "only used with fit_probe: in_run "
                    f"(fit_probe is {str(top.fit_probe).lower()})")  # fmt: skip
        return None
    return IN_RUN_PROBE_STEPS if top.fit_probe_steps is None else top.fit_probe_steps


# -- issue 17: notifications and metrics ------------------------------------------------------

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


def _build_outputs(ctx: _Context, parsed: _Sections, base_dir: Path) -> Outputs:
    """``notify:`` and ``metrics:``. A notify URL is only checked for its shape here (the
    apprise package is optional and slow to import); problems never echo a URL whole, since
    its path or user part is often the credential."""
    top = parsed.top.model
    urls: list[str] = []
    for i, url in enumerate((top.notify if top is not None else None) or []):
        if _URL.fullmatch(url.strip()) is None:
            ctx.add(("notify", i), f"{redact_url(url)} is not an apprise URL (scheme://...), "
                    "e.g. jsons://host/path, slack://..., mailto://...")  # fmt: skip
        else:
            urls.append(url.strip())
    textfile: Path | None = None
    port: int | None = None
    m = parsed.metrics.model if parsed.metrics is not None else None
    if m is not None:
        port = m.http_port
        if m.textfile is not None:
            textfile = _absolute(base_dir, m.textfile)
            if textfile.suffix != ".prom":
                ctx.add(("metrics", "textfile"), f"{textfile}: node_exporter's textfile "
                        "collector reads only *.prom files; name it e.g. dsguard.prom")  # fmt: skip
            elif not textfile.parent.is_dir():
                ctx.add(("metrics", "textfile"), f"directory not found: {textfile.parent}")
    return Outputs(notify=tuple(urls), metrics_textfile=textfile, metrics_http_port=port)


# -- issue 16: exit_codes ----------------------------------------------------------------------


def _build_exit_codes(ctx: _Context, parsed: _Checked[ExitCodesSection] | None) -> ExitCodes:
    """The ``exit_codes:`` section, checked by the same rules as ``--exit-*``
    (:class:`dsguard.exitcodes.ExitContract`): distinct codes, 2 and 0 never "gave up" or
    "retry"."""
    from dsguard.exitcodes import ExitContract

    if parsed is None or parsed.model is None:
        return ExitCodes()
    m = parsed.model
    given = {k: v for k, v in (("succeeded", m.succeeded), ("gave_up", m.gave_up),
                               ("retry", m.retry)) if v is not None}  # fmt: skip
    try:
        ExitContract(**given)
    except ValueError as exc:
        ctx.add(("exit_codes",), str(exc))
        return ExitCodes()
    return ExitCodes(**given)
