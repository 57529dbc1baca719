"""Checkpoint layouts other than HF Trainer's ``checkpoint-N/``: find them, judge them, point
the script's own resume at the newest complete one.

Why: a plain DeepSpeed loop, an accelerate ``save_state`` loop or a Lightning run resumes by
its own rules, and each one picks "the newest" without checking it is whole. A save killed
mid-write (OOM, SIGKILL, a full disk) then takes every later attempt down with it: DeepSpeed
follows ``latest`` into a tag whose shard is truncated (``PytorchStreamReader failed finding
central directory``), accelerate's automatic naming loads the highest ``checkpoint_N``.
dsguard validates each candidate with the same cheap checks as :mod:`dsguard.run.checkpoints`
(zip central directories, safetensors headers, every rank's files; no tensor is read and
torch is never imported) and moves the incomplete newer ones aside, never deleting anything.

The layouts, as the frameworks write them:

* ``deepspeed``: ``engine.save_checkpoint(dir)`` writes ``dir/<tag>/`` (default tag
  ``global_step{N}``: ``mp_rank_00_model_states.pt`` and one
  ``[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt`` per rank, or per-rank
  ``zero_pp_rank_R_mp_rank_00_model_states.pt`` under ZeRO-3), then rank 0 writes
  ``dir/latest`` with the tag; ``load_checkpoint(dir)`` reads ``latest`` and, without it,
  warns and starts fresh (``DeepSpeedEngine.save_checkpoint`` / ``load_checkpoint`` in
  https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/engine.py).
* ``accelerate``: ``Accelerator.save_state(dir)`` writes ``model.safetensors`` (or
  ``pytorch_model.bin``), ``optimizer.bin``, ``scheduler.bin``, ``sampler.bin``,
  ``scaler.pt``, and last each process's ``random_states_{rank}.pkl``; with automatic naming
  the dir is ``project_dir/checkpoints/checkpoint_{N}``
  (``save_accelerator_state`` in
  https://github.com/huggingface/accelerate/blob/main/src/accelerate/checkpointing.py).
* ``lightning``: one ``*.ckpt`` file per save (a ``torch.save`` zip).
* ``dcp``: a ``torch.distributed.checkpoint`` dir; the coordinator writes ``.metadata``
  after every rank's ``.distcp`` files, so a dir without it never finished.
* NeMo marks a save in progress with a sibling file ``<name>-unfinished`` (``.ckpt``,
  ``.nemo`` and ``-EMA`` stripped from the name) and removes it when the save is done
  (``NeMoModelCheckpoint.format_checkpoint_unfinished_marker_path`` in
  https://github.com/NVIDIA/NeMo/blob/main/nemo/utils/callbacks/nemo_model_checkpoint.py);
  such a checkpoint is incomplete in every layout.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dsguard.job.model import CheckpointLayout
from dsguard.run import checkpoints as ckpts
from dsguard.run.checkpoints import CheckpointVerdict, Selection, _Findings
from dsguard.run.safefs import open_dir, replace_at

__all__ = [
    "LATEST",
    "LatestChange",
    "detect_layout",
    "inspect_candidate",
    "point_latest",
    "select",
]

LATEST = "latest"
UNFINISHED_SUFFIX = "-unfinished"
ACCELERATE_SUBDIR = "checkpoints"
_DS_TAG_RE = re.compile(r"global_step(\d+)")
_TRAILING_STEP_RE = re.compile(r"(\d+)$")
_LIGHTNING_STEP_RE = re.compile(r"step=(\d+)")
_ACCEL_RNG_RE = re.compile(r"random_states_(\d+)\.pkl")
_ACCEL_FILES = re.compile(
    r"(model(_\d+)?\.safetensors|pytorch_model(_\d+)?\.bin|optimizer(_\d+)?\.bin|"
    r"random_states_\d+\.pkl)"
)
_MAX_LATEST_BYTES = 4096


def detect_layout(ckpt_dir: Path) -> tuple[CheckpointLayout, str]:
    """The layout ``ckpt_dir`` holds, and the evidence (for the event). An empty or missing
    dir is ``hf`` with "nothing saved yet": there is nothing to choose between until then."""
    try:
        entries = {e.name: e for e in os.scandir(ckpt_dir)}
    except OSError:
        return CheckpointLayout.HF, "nothing saved yet"
    names = set(entries)
    if any(ckpts.checkpoint_step(Path(n)) is not None for n in names):
        return CheckpointLayout.HF, "checkpoint-N dirs"
    if LATEST in names or any(_DS_TAG_RE.fullmatch(n) for n in names):
        return CheckpointLayout.DEEPSPEED, "a DeepSpeed 'latest' file or global_stepN tag dirs"
    if _accelerate_dirs(ckpt_dir):
        return CheckpointLayout.ACCELERATE, "save_state dirs (optimizer.bin, random_states_*.pkl)"
    if any(n.endswith(".ckpt") for n in names):
        return CheckpointLayout.LIGHTNING, "*.ckpt files"
    if any(
        _is_dir(e) and os.path.exists(os.path.join(e.path, ".metadata")) for e in entries.values()
    ):
        return CheckpointLayout.DCP, "dirs with a DCP .metadata file"
    return CheckpointLayout.HF, "no checkpoint of a known layout yet"


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _step_of(name: str, pattern: re.Pattern[str] = _TRAILING_STEP_RE) -> int | None:
    m = pattern.search(name)
    return int(m.group(1)) if m else None


def _candidates(ckpt_dir: Path, layout: CheckpointLayout) -> list[tuple[int, Path]]:
    """(step, path) of each checkpoint of ``layout`` in ``ckpt_dir``, newest first."""
    if layout is CheckpointLayout.DEEPSPEED:
        found = _ds_tags(ckpt_dir)
    elif layout is CheckpointLayout.ACCELERATE:
        found = _accelerate_dirs(ckpt_dir)
    elif layout is CheckpointLayout.LIGHTNING:
        return _lightning_files(ckpt_dir)
    else:  # dcp: any dir whose name ends in a step number
        found = [(step, p) for p in _subdirs(ckpt_dir) if (step := _step_of(p.name)) is not None]
    found.sort(key=lambda t: (t[0], t[1].name), reverse=True)
    return found


def _subdirs(d: Path) -> list[Path]:
    try:
        return [
            Path(e.path)
            for e in os.scandir(d)
            if e.name != ckpts.QUARANTINE_DIRNAME and (_is_dir(e) or e.is_symlink())
        ]
    except OSError:
        return []


def _ds_tags(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """``global_stepN`` dirs, plus a custom tag ``latest`` names (its step: trailing digits)."""
    found = [
        (int(m.group(1)), p) for p in _subdirs(ckpt_dir) if (m := _DS_TAG_RE.fullmatch(p.name))
    ]
    tag = read_latest(ckpt_dir)
    if tag and not _DS_TAG_RE.fullmatch(tag) and (ckpt_dir / tag).is_dir():
        found.append((_step_of(tag) or 0, ckpt_dir / tag))
    return found


def _accelerate_dirs(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """save_state dirs named with a step number, in ``ckpt_dir`` or its ``checkpoints/``
    (automatic naming). A dir counts when it holds any accelerate file, or, named
    ``checkpoint_N``, when it is empty (a save that died before its first file)."""
    found: list[tuple[int, Path]] = []
    for base in (ckpt_dir, ckpt_dir / ACCELERATE_SUBDIR):
        for p in _subdirs(base):
            step = _step_of(p.name)
            if step is None:
                continue
            try:
                names = os.listdir(p)
            except OSError:
                names = []
            if any(_ACCEL_FILES.fullmatch(n) for n in names) or (
                p.name.startswith("checkpoint_") and not names
            ):
                found.append((step, p))
    return found


def _lightning_files(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """``*.ckpt`` files, newest first by mtime: ``last.ckpt`` carries no step in its name."""
    found: list[tuple[float, int, Path]] = []
    try:
        entries = list(os.scandir(ckpt_dir))
    except OSError:
        return []
    for e in entries:
        if e.name.endswith(".ckpt"):
            try:
                mtime = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                mtime = 0.0
            found.append((mtime, _step_of(e.name, _LIGHTNING_STEP_RE) or 0, Path(e.path)))
    found.sort(key=lambda t: (t[0], t[1], t[2].name), reverse=True)
    return [(step, p) for _, step, p in found]


def unfinished_marker(path: Path) -> Path:
    """NeMo's marker for ``path`` (see the module docstring)."""
    name = path.name.removesuffix(".nemo").removesuffix(".ckpt").removesuffix("-EMA")
    return path.with_name(name + UNFINISHED_SUFFIX)


def inspect_candidate(
    path: Path, step: int, layout: CheckpointLayout, world_size: int | None
) -> CheckpointVerdict:
    """Whether one checkpoint of ``layout`` can be resumed from (reasons when not)."""
    f = _Findings(path)
    try:
        _inspect(f, path, layout, world_size)
    except OSError as exc:
        f.reasons.append(f"unreadable: {exc.strerror or exc}")
    hint = None
    return CheckpointVerdict(
        path=path, step=step, complete=not f.reasons, reasons=tuple(f.reasons),
        size_bytes=_size(path), zero_stage_hint=hint, warnings=tuple(f.warnings),
    )  # fmt: skip


def _inspect(f: _Findings, path: Path, layout: CheckpointLayout, world_size: int | None) -> None:
    if os.path.islink(path):
        f.reasons.append(f"is a symlink (to {os.readlink(path)!r}): dsguard never follows one")
        return
    if os.path.lexists(unfinished_marker(path)):
        f.reasons.append(f"{unfinished_marker(path).name} present: the save did not finish")
    if layout is CheckpointLayout.LIGHTNING:
        ckpts._check_torch_file(f, path)
        return
    if not path.is_dir():
        f.reasons.append("not a directory")
        return
    if layout is CheckpointLayout.DEEPSPEED:
        ckpts.check_ds_tag(f, path, path.name, world_size)
    elif layout is CheckpointLayout.ACCELERATE:
        _check_accelerate(f, path, world_size)
    else:
        meta = path / ".metadata"
        if not meta.is_file() or meta.stat().st_size == 0:
            f.reasons.append(".metadata missing (DCP writes it after every rank's shards)")


def _check_accelerate(f: _Findings, d: Path, world_size: int | None) -> None:
    names = {e.name for e in os.scandir(d) if e.is_file(follow_symlinks=False)}
    weights = sorted(n for n in names if re.fullmatch(r"model(_\d+)?\.safetensors", n))
    bins = sorted(n for n in names if re.fullmatch(r"pytorch_model(_\d+)?\.bin", n))
    if not weights and not bins:
        f.reasons.append("no model weights (model.safetensors or pytorch_model.bin)")
    for n in weights:
        ckpts._check_safetensors(f, d / n)
    torch_files = [
        *bins,
        *(n for n in sorted(names) if n.endswith((".bin", ".pt")) and n not in bins),
    ]
    if not any(re.fullmatch(r"optimizer(_\d+)?\.bin", n) for n in names):
        f.reasons.append("no optimizer state (optimizer.bin)")
    ranks = {int(m.group(1)) for n in names if (m := _ACCEL_RNG_RE.fullmatch(n))}
    want = range(world_size) if world_size is not None else range(max(ranks, default=0) + 1)
    missing = [r for r in want if r not in ranks]
    if missing:
        files = ", ".join(f"random_states_{r}.pkl" for r in missing)
        f.reasons.append(f"{files} missing (each process writes its own, last)")
    torch_files += sorted(n for n in names if _ACCEL_RNG_RE.fullmatch(n))
    torch_files += sorted(n for n in names if re.fullmatch(r"custom_checkpoint_\d+\.pkl", n))
    for n in torch_files:
        ckpts._check_torch_file(f, d / n)


def _size(path: Path) -> int:
    try:
        if path.is_file() and not path.is_symlink():
            return path.stat().st_size
    except OSError:
        return 0
    return ckpts._tree_size(path)


def select(ckpt_dir: Path, layout: CheckpointLayout, world_size: int | None) -> Selection:
    """:func:`dsguard.run.checkpoints.select_checkpoint` for any layout (``auto`` detected
    first); the Selection says which layout it judged."""
    evidence = "checkpoints.layout"
    if layout is CheckpointLayout.AUTO:
        layout, evidence = detect_layout(ckpt_dir)
    if layout is CheckpointLayout.HF:
        sel = ckpts.select_checkpoint(ckpt_dir, world_size=world_size)
        return Selection(sel.chosen, sel.rejected, layout=layout.value, evidence=evidence)
    rejected: list[CheckpointVerdict] = []
    chosen = None
    for step, path in _candidates(ckpt_dir, layout):
        verdict = inspect_candidate(path, step, layout, world_size)
        if verdict.complete:
            chosen = verdict
            break
        rejected.append(verdict)
    return Selection(chosen, tuple(rejected), layout=layout.value, evidence=evidence)


# -- DeepSpeed's `latest` -------------------------------------------------------------------


def read_latest(ckpt_dir: Path) -> str | None:
    """The tag ``ckpt_dir/latest`` names; None when absent, a link, or unreadable."""
    try:
        st = os.lstat(ckpt_dir / LATEST)
        if not stat.S_ISREG(st.st_mode):
            return None
        with (ckpt_dir / LATEST).open("rb") as fh:
            return fh.read(_MAX_LATEST_BYTES).decode("utf-8", errors="replace").strip()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class LatestChange:
    """What :func:`point_latest` did to ``latest``: ``previous`` tag (None: there was no
    file), ``tag`` now named (None: the file was moved aside to ``moved_to``)."""

    path: Path
    previous: str | None
    tag: str | None
    moved_to: Path | None = None


def point_latest(ckpt_dir: Path, tag: str | None) -> LatestChange | None:
    """Make DeepSpeed's own ``load_checkpoint(ckpt_dir)`` land on ``tag``.

    ``latest`` is replaced atomically (temp file + rename, mode and owner kept), so a crash
    leaves either the old or the new pointer, never half a tag name. With ``tag`` None (no
    complete tag left) the file is moved into the quarantine dir instead: DeepSpeed then warns
    and starts fresh rather than dying on a tag that is gone. Returns None when ``latest``
    already names ``tag``. Never follows or writes through a symlink.

    Raises:
        OSError: the file could not be written or moved (the old one is then unchanged).
    """
    path = ckpt_dir / LATEST
    previous = read_latest(ckpt_dir)
    exists = os.path.lexists(path)
    if tag is None:
        if not exists:
            return None
        return LatestChange(path, previous, None, ckpts.quarantine(path, ckpt_dir))
    if previous == tag:
        return None
    dfd = open_dir(ckpt_dir, owner=False)
    try:
        keep = None
        if exists:
            st = os.stat(LATEST, dir_fd=dfd, follow_symlinks=False)
            keep = st if stat.S_ISREG(st.st_mode) else None
        replace_at(dfd, LATEST, tag.encode(), mode=0o644, keep=keep)
    finally:
        os.close(dfd)
    return LatestChange(path, previous, tag)
