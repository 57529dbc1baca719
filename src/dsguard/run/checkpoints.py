"""Find the newest checkpoint that can really be resumed from, and move broken ones aside.

Why this exists: HF Trainer writes straight into the final ``checkpoint-N`` directory (no staging
dir, no completion marker; two atomic-save attempts were reverted), and ``get_last_checkpoint``
picks the highest N with no completeness check. A job killed mid-save (OOM during the ZeRO-3
16-bit gather, disk full, SIGKILL, NCCL timeout on a slow FS) therefore leaves a partial
``checkpoint-N`` that the next resume dies on (``FileNotFoundError`` for trainer_state.json,
``PytorchStreamReader failed finding central directory`` for a truncated ``.pt``,
``SafetensorError ... file not fully covered`` for a truncated safetensors file, DeepSpeed
``failed to resume`` without ``latest``). dsguard validates, passes the explicit path of the newest
*complete* checkpoint to ``--resume_from_checkpoint`` and quarantines newer partial ones so that
neither ``get_last_checkpoint``, ``rotate_checkpoints`` nor the next save into the same
``checkpoint-N`` (``exist_ok=True``: stale files would mix with new ones) can see them.

Write order this relies on (transformers 4.57 / 5.x ``Trainer._save_checkpoint``):
weights -> optimizer/scheduler (or DeepSpeed ``global_stepN/`` + ``latest``) -> scaler ->
``rng_state[_i].pth`` (every rank) -> ``trainer_state.json`` (rank 0, last).

Every check is cheap: safetensors headers are read with a seek, ``.pt`` files are opened with
``zipfile`` (which reads only the central directory at the end of the file). No tensor is read and
torch is never imported. The cheap checks catch truncation, missing files and missing ranks; they do
not catch bit rot in the middle of a file (that needs a real ``torch.load``).

Not recognised: FSDP sharded layouts (``pytorch_model_fsdp_*``/``optimizer_*`` dirs) and pipeline-
parallel DeepSpeed layouts; such checkpoints are reported incomplete ("no optimizer state").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "QUARANTINE_DIRNAME",
    "CheckpointVerdict",
    "Selection",
    "checkpoint_step",
    "inspect_checkpoint",
    "list_checkpoints",
    "quarantine",
    "select_checkpoint",
]

QUARANTINE_DIRNAME = ".dsguard-quarantine"
"""Sibling of the ``checkpoint-N`` dirs. Its name does not match ``checkpoint-*``, so HF's
``get_last_checkpoint`` and ``rotate_checkpoints`` never look inside it."""

TRAINER_STATE = "trainer_state.json"
JIT_INCOMPLETE_SENTINEL = "checkpoint-is-incomplete.txt"

_CHECKPOINT_RE = re.compile(r"checkpoint-(\d+)")
# DeepSpeed ``_get_ckpt_name`` / ``_get_zero_ckpt_name`` naming. The precision prefix of the
# optimizer partitions is "bf16_" under bf16; fp16_ is accepted for forks and older versions.
_Z3_MODEL_RE = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt")
_Z012_MODEL_RE = re.compile(r"mp_rank_(\d+)_model_states\.pt")
_OPTIM_RE = re.compile(r"(?:(bf16|fp16)_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
_RNG_RANK_RE = re.compile(r"rng_state_(\d+)\.pth")

# safetensors refuses headers above 100 MB; a larger length means a corrupt first 8 bytes and
# reading it would be the expensive full read this module promises not to do.
_MAX_SAFETENSORS_HEADER = 100_000_000
# torch.save with _use_new_zipfile_serialization=False (or DeepSpeed with zip serialization
# turned off) writes a pickle stream: PROTO n (torch's default protocol is 2), LONG1 10 bytes,
# MAGIC_NUMBER 0x1950a86a20f9469cfc6c little-endian. Such files have no central directory, so
# truncation cannot be detected cheaply; they are accepted with a warning rather than
# quarantining every checkpoint of a job that turned zip serialization off.
_LEGACY_TORCH_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_MAX_LATEST_BYTES = 4096


@dataclass(frozen=True, slots=True)
class CheckpointVerdict:
    """Result of :func:`inspect_checkpoint` for one ``checkpoint-N`` directory.

    ``reasons`` says why it cannot be resumed (empty iff ``complete``); ``warnings`` are things
    that do not block a resume but are worth logging (e.g. no RNG state: HF only logs an info and
    resumes with different dropout randomness). ``size_bytes`` is the total size of the files
    inside, used to check free disk space before a relaunch: a full disk is what produces
    partial checkpoints in the first place.
    """

    path: Path
    step: int
    complete: bool
    reasons: tuple[str, ...]
    size_bytes: int
    # 3 for ZeRO-3 (per-rank zero_pp_rank_*_model_states.pt), 2 meaning "ZeRO 0, 1 or 2"
    # (one mp_rank_00_model_states.pt), None when not a DeepSpeed checkpoint or ambiguous.
    # A ZeRO-2 checkpoint cannot be loaded by a ZeRO-3 engine or vice versa.
    zero_stage_hint: int | None = None
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.complete == bool(self.reasons):
            raise ValueError(
                "CheckpointVerdict: complete must be True exactly when reasons is empty"
            )


@dataclass(frozen=True, slots=True)
class Selection:
    """Outcome of :func:`select_checkpoint`.

    ``chosen`` is the newest complete checkpoint (None: nothing resumable, start fresh).
    ``rejected`` holds the incomplete checkpoints NEWER than ``chosen``, newest first: these are
    what HF would otherwise pick or save into, so they are the ones to quarantine. Incomplete
    checkpoints older than ``chosen`` are left alone (harmless, and rotation deletes them).
    When ``chosen`` is None every incomplete checkpoint is in ``rejected``: starting fresh
    discards all progress, so callers should say so loudly.
    """

    chosen: CheckpointVerdict | None
    rejected: tuple[CheckpointVerdict, ...]
    #: The layout judged (``checkpoints.layout``, or what ``auto`` detected):
    #: :mod:`dsguard.run.layouts` handles all but ``hf``.
    layout: str = "hf"
    #: What the layout was detected from (``auto``), for the event.
    evidence: str = ""


@dataclass(slots=True)
class _Findings:
    ckpt: Path
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def rel(self, p: Path) -> str:
        """Name files relative to the checkpoint dir so reasons stay short."""
        try:
            return p.relative_to(self.ckpt).as_posix()
        except ValueError:
            return str(p)


def checkpoint_step(path: Path) -> int | None:
    """Return N for a path named ``checkpoint-N`` (N decimal digits), else None."""
    m = _CHECKPOINT_RE.fullmatch(path.name)
    return int(m.group(1)) if m else None


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Return the ``checkpoint-N`` directories in ``ckpt_dir``, newest (highest N) first.

    Ordering is numeric (checkpoint-10 is newer than checkpoint-9), not by name and not by mtime:
    HF names checkpoints by global step, and mtimes of a stale partial dir that was later written
    into again would lie. Files, non-matching names and the quarantine dir are ignored. A missing
    ``ckpt_dir`` means no checkpoints yet (first launch), not an error.
    """
    try:
        entries = list(os.scandir(ckpt_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found: list[tuple[int, str, Path]] = []
    for entry in entries:
        step = checkpoint_step(Path(entry.name))
        # A symlink named checkpoint-N is listed whatever it points to (a tree outside, a
        # loop, nothing): HF would follow it, so :func:`inspect_checkpoint` must reject it
        # and :func:`quarantine` move the link itself aside. Not following it here also
        # keeps a link loop (ELOOP) from crashing the listing.
        if step is None or not _is_dir_or_link(entry):
            continue
        found.append((step, entry.name, Path(entry.path)))
    # Name as tie-break keeps the order deterministic for "checkpoint-010" vs "checkpoint-10".
    found.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return [p for _, _, p in found]


def _is_dir_or_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() or entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def inspect_checkpoint(path: Path, *, world_size: int | None = None) -> CheckpointVerdict:
    """Check whether ``path`` (a ``checkpoint-N`` dir) holds everything needed to resume.

    ``world_size`` is the number of ranks the checkpoint is expected to have been saved with;
    when given, DeepSpeed optimizer shards and per-rank RNG files are counted against it (a rank
    whose save died leaves its files missing while rank 0's files look fine).

    Raises ValueError if the name is not ``checkpoint-N`` or ``world_size`` < 1.
    """
    step = checkpoint_step(path)
    if step is None:
        raise ValueError(f"not a checkpoint-N directory name: {path.name!r}")
    if world_size is not None and world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")

    f = _Findings(path)
    try:
        return _inspect(path, step, f, world_size)
    except OSError as exc:
        # Whatever the checks could not read (EACCES, ELOOP, EIO) makes the checkpoint
        # unresumable, never dsguard crash: say so, and let the caller set it aside.
        f.reasons.append(f"unreadable: {exc.strerror or exc}")
        return _verdict(path, step, f, size_bytes=0, zero_stage_hint=None)


def _inspect(path: Path, step: int, f: _Findings, world_size: int | None) -> CheckpointVerdict:
    """:func:`inspect_checkpoint`'s checks; an OSError escaping them is a reason there."""
    if os.path.islink(path):
        f.reasons.append(
            f"is a symlink (to {os.readlink(path)!r}): dsguard never resumes from, patches or "
            "follows a tree outside the checkpoint dir"
        )
        return _verdict(path, step, f, size_bytes=0, zero_stage_hint=None)
    if not path.is_dir():
        f.reasons.append("checkpoint directory missing or not a directory")
        return _verdict(path, step, f, size_bytes=0, zero_stage_hint=None)

    try:
        names = {e.name: e for e in os.scandir(path)}
    except OSError as exc:
        f.reasons.append(f"cannot list checkpoint directory: {exc.strerror or exc}")
        return _verdict(path, step, f, size_bytes=0, zero_stage_hint=None)

    state_entry = names.get(TRAINER_STATE)
    if state_entry is not None and state_entry.is_symlink():
        # The resume patch rewrites this file: through a link it would write elsewhere.
        f.reasons.append(f"{TRAINER_STATE} is a symlink: dsguard never writes through one")
        return _verdict(path, step, f, size_bytes=0, zero_stage_hint=None)

    def is_file(name: str) -> bool:
        e = names.get(name)
        try:
            return e is not None and e.is_file()
        except OSError:  # a link loop: not a file HF could load either
            return False

    _check_trainer_state(f, path / TRAINER_STATE, step, present=is_file(TRAINER_STATE))

    if JIT_INCOMPLETE_SENTINEL in names:
        # transformers >= 5 JIT checkpointing (save on SIGTERM) creates this first and removes it
        # on success; get_last_checkpoint does not look at it.
        f.reasons.append(f"{JIT_INCOMPLETE_SENTINEL} present (JIT save on SIGTERM did not finish)")

    # HF Trainer's DeepSpeed resume requires a global_step* entry; `latest` is written by rank 0
    # after its own shards. Either one means this checkpoint was saved by a DeepSpeed engine.
    ds_tag_dirs = sorted(n for n, e in names.items() if n.startswith("global_step") and e.is_dir())
    is_deepspeed = "latest" in names or bool(ds_tag_dirs)

    has_weights = _check_weights(f, path, is_file)
    zero_stage_hint: int | None = None
    ds_ranks: int | None = None
    if is_deepspeed:
        zero_stage_hint, ds_ranks = _check_deepspeed(f, path, step, ds_tag_dirs, world_size)
    elif not has_weights:
        f.reasons.append(
            "no model weights (model.safetensors, sharded index, adapter_model.*, "
            "pytorch_model.bin or DeepSpeed global_step dir)"
        )

    # HF optimizer/scheduler/scaler state (plain/DDP). Under DeepSpeed the optimizer lives in the
    # tag dir, but scheduler.pt is still written when the LR scheduler is an HF one.
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt"):
        if is_file(name):
            _check_torch_file(f, path / name)
    if not is_deepspeed and not is_file("optimizer.pt"):
        f.reasons.append(
            "no optimizer state (optimizer.pt): save_only_model checkpoints cannot resume training"
        )

    rng_ranks = _check_rng(f, path, names, world_size)
    # Without a world size the highest rank's missing files are invisible to the gap checks;
    # the two per-rank file families (written by the same ranks) must at least agree.
    if world_size is None and None not in (ds_ranks, rng_ranks) and ds_ranks != rng_ranks:
        f.reasons.append(
            f"DeepSpeed optimizer shards cover {ds_ranks} ranks, "
            f"rng_state_*.pth files cover {rng_ranks}"
        )

    return _verdict(path, step, f, size_bytes=_tree_size(path), zero_stage_hint=zero_stage_hint)


def select_checkpoint(ckpt_dir: Path, *, world_size: int | None = None) -> Selection:
    """Pick the newest complete checkpoint in ``ckpt_dir``; report the incomplete newer ones.

    Stops inspecting at the first complete one: older checkpoints are not read at all.
    """
    rejected: list[CheckpointVerdict] = []
    for path in list_checkpoints(ckpt_dir):
        verdict = inspect_checkpoint(path, world_size=world_size)
        if verdict.complete:
            return Selection(chosen=verdict, rejected=tuple(rejected))
        rejected.append(verdict)
    return Selection(chosen=None, rejected=tuple(rejected))


def quarantine(path: Path, ckpt_dir: Path) -> Path:
    """Move ``path`` to ``ckpt_dir/.dsguard-quarantine/<name>`` and return the destination.

    Never deletes: a checkpoint judged incomplete may still hold the only copy of hours of
    training (NeMo PR #10228 added a guard for exactly this), so a human decides what to throw
    away. The move is one ``os.rename`` inside ``ckpt_dir`` (same filesystem, atomic, no copy).
    Moving it out of ``ckpt_dir`` matters: left in place, HF's ``get_last_checkpoint`` and
    mtime-based rotation still see it, and the next save of the same step would write into it.
    If the name is taken (the same step failed twice), ``.1``, ``.2``, ... are appended; a
    directory's destination is claimed with ``mkdir`` first so two movers cannot overwrite each
    other, and a rename onto an existing file never happens.

    A ``checkpoint-N`` that is a symlink is moved as the link: its target is never touched.
    A directory that cannot be moved to another parent (not writable by us: see the code) is
    renamed in place to ``.dsguard-quarantine-checkpoint-N`` instead.

    Raises ValueError if ``path`` is not directly inside ``ckpt_dir`` (a cross-filesystem rename
    would fail, and copy+delete is exactly what this must never do) or is the quarantine dir,
    FileNotFoundError if it does not exist, OSError if it cannot be moved at all (read-only
    filesystem): the caller then leaves it in place and skips it.
    """
    if path.name == QUARANTINE_DIRNAME:
        raise ValueError(f"refusing to quarantine the quarantine directory itself: {path}")
    if path.parent.resolve() != ckpt_dir.resolve():
        raise ValueError(f"{path} is not directly inside {ckpt_dir}")
    if not os.path.lexists(path):
        raise FileNotFoundError(path)

    qdir = ckpt_dir / QUARANTINE_DIRNAME
    qdir.mkdir(exist_ok=True)
    # lstat-based: a symlink (to a tree outside, or a loop) is moved as the link itself.
    is_real_dir = path.is_dir() and not path.is_symlink()
    try:
        dest = _move_into(path, qdir, is_real_dir)
    except PermissionError:
        if not is_real_dir:
            raise
        # Moving a directory to another parent rewrites its ".." entry, which needs write
        # permission on the directory itself: a checkpoint the trainer left unreadable or
        # read-only (mode 0500) cannot go into the quarantine dir. A rename within ckpt_dir
        # does not touch "..": a dot name outside the checkpoint-* pattern hides it from
        # get_last_checkpoint, rotation and the next save alike.
        dest = _move_into(path, ckpt_dir, True, prefix=QUARANTINE_DIRNAME + "-")
    _fsync_dir(ckpt_dir)
    _fsync_dir(dest.parent)
    return dest


def _move_into(path: Path, qdir: Path, is_real_dir: bool, prefix: str = "") -> Path:
    """Rename ``path`` to a free name ``qdir/<prefix><name>[.n]``; never onto anything."""
    attempt = 0
    while True:
        dest = qdir / (prefix + (path.name if attempt == 0 else f"{path.name}.{attempt}"))
        attempt += 1
        if is_real_dir:
            try:
                dest.mkdir()  # claim the name; POSIX rename(dir, empty dir) replaces it atomically
            except FileExistsError:
                continue
            try:
                os.rename(path, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    dest.rmdir()  # only ever our own empty placeholder (rmdir cannot delete data)
                raise
        else:
            if os.path.lexists(dest):
                continue
            os.rename(path, dest)
        return dest


# --------------------------------------------------------------------------------------------
# Individual checks. Each appends short, file-naming reasons/warnings to the _Findings.


def _verdict(
    path: Path, step: int, f: _Findings, *, size_bytes: int, zero_stage_hint: int | None
) -> CheckpointVerdict:
    return CheckpointVerdict(
        path=path,
        step=step,
        complete=not f.reasons,
        reasons=tuple(f.reasons),
        size_bytes=size_bytes,
        zero_stage_hint=zero_stage_hint,
        warnings=tuple(f.warnings),
    )


def _check_trainer_state(f: _Findings, p: Path, step: int, *, present: bool) -> None:
    """trainer_state.json is written last by rank 0, so its absence means the save died.

    A global_step different from N means a stale state file in a reused dir (HF saves with
    exist_ok=True) or a hand-renamed dir; resuming would skip or repeat data. An empty ``{}``
    makes HF crash with a TypeError, so global_step must be a real integer.
    """
    if not present:
        f.reasons.append(f"{TRAINER_STATE} missing (HF writes it last: the save did not finish)")
        return
    try:
        state = json.loads(p.read_bytes())
    except OSError as exc:
        f.reasons.append(f"{TRAINER_STATE} unreadable: {exc.strerror or exc}")
        return
    except (ValueError, RecursionError):
        f.reasons.append(f"{TRAINER_STATE} is not valid JSON (truncated write?)")
        return
    if not isinstance(state, dict):
        f.reasons.append(f"{TRAINER_STATE} is not a JSON object")
        return
    gs = state.get("global_step")
    if not isinstance(gs, int) or isinstance(gs, bool):
        f.reasons.append(f"{TRAINER_STATE} has no integer global_step")
    elif gs != step:
        f.reasons.append(f"{TRAINER_STATE} global_step={gs}, expected {step} (stale or moved dir)")


def _check_weights(f: _Findings, ckpt: Path, is_file: Callable[[str], bool]) -> bool:
    """Check every top-level weights file that exists; return whether any weights exist.

    All present formats are checked (not just the first): HF loads whichever it finds first,
    and a stale extra file is as likely to be picked as the new one.
    """
    found = False
    for name in ("model.safetensors", "adapter_model.safetensors"):
        if is_file(name):
            found = True
            _check_safetensors(f, ckpt / name)
    for name in ("pytorch_model.bin", "adapter_model.bin"):
        if is_file(name):
            found = True
            _check_torch_file(f, ckpt / name)
    for index_name, checker in (
        ("model.safetensors.index.json", _check_safetensors),
        ("pytorch_model.bin.index.json", _check_torch_file),
    ):
        if is_file(index_name):
            found = True
            for shard in _index_shards(f, ckpt / index_name):
                if (ckpt / shard).is_file():
                    checker(f, ckpt / shard)
                else:
                    f.reasons.append(f"{index_name} lists missing shard {shard}")
    return found


def _index_shards(f: _Findings, index: Path) -> list[str]:
    """Shard file names referenced by a sharded-weights index (its weight_map values)."""
    rel = f.rel(index)
    try:
        data = json.loads(index.read_bytes())
    except OSError as exc:
        f.reasons.append(f"{rel} unreadable: {exc.strerror or exc}")
        return []
    except (ValueError, RecursionError):
        f.reasons.append(f"{rel} is not valid JSON")
        return []
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        f.reasons.append(f"{rel} has no weight_map")
        return []
    shards: set[str] = set()
    for shard in wmap.values():
        # A shard name must be a plain file name: anything else would make us look outside the
        # checkpoint (and HF would not find it either).
        if not isinstance(shard, str) or not shard or "/" in shard or shard in (".", ".."):
            f.reasons.append(f"{rel} has an invalid shard name {shard!r}")
            return []
        shards.add(shard)
    return sorted(shards)


def _check_safetensors(f: _Findings, p: Path) -> None:
    """safetensors = u64 LE header length n, n bytes of JSON header, then the tensor data.

    The file must end exactly at ``8 + n + max(data_offsets end)``: safetensors itself refuses
    anything else ("incomplete metadata, file not fully covered"), and a save that died mid-write
    leaves the file shorter. Only the header is read.
    """
    rel = f.rel(p)
    try:
        size = p.stat().st_size
        if size < 8:
            f.reasons.append(f"{rel} is {size} bytes: shorter than its 8-byte header length")
            return
        with p.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8:
                f.reasons.append(f"{rel} truncated: header length {n} exceeds file size {size}")
                return
            if n > _MAX_SAFETENSORS_HEADER:
                f.reasons.append(f"{rel} header length {n} is implausible (corrupt)")
                return
            raw = fh.read(n)
    except OSError as exc:
        f.reasons.append(f"{rel} unreadable: {exc.strerror or exc}")
        return
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        f.reasons.append(f"{rel} header is not valid JSON")
        return
    if not isinstance(header, dict):
        f.reasons.append(f"{rel} header is not a JSON object")
        return
    data_end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            f.reasons.append(f"{rel} header has bad data_offsets for tensor {name!r}")
            return
        data_end = max(data_end, offsets[1])
    expected = 8 + n + data_end
    if size < expected:
        f.reasons.append(f"{rel} truncated: {size} bytes, header describes {expected}")
    elif size > expected:
        f.reasons.append(f"{rel} is {size} bytes but its header describes {expected}")


def _check_torch_file(f: _Findings, p: Path) -> None:
    """torch.save files are zip archives whose central directory is written at the very end.

    ``zipfile.ZipFile`` reads only that directory, so a truncated file raises BadZipFile cheaply
    (torch would fail with "PytorchStreamReader failed finding central directory").
    """
    rel = f.rel(p)
    try:
        size = p.stat().st_size
        if size == 0:
            f.reasons.append(f"{rel} is empty")
            return
        with p.open("rb") as fh:
            head = fh.read(32)
        if _is_legacy_torch(head):
            f.warnings.append(f"{rel} uses the legacy non-zip torch format: truncation not checked")
            return
        with zipfile.ZipFile(p) as zf:
            members = zf.namelist()
    except OSError as exc:
        f.reasons.append(f"{rel} unreadable: {exc.strerror or exc}")
        return
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        f.reasons.append(f"{rel} is not a valid zip (truncated?): {exc}")
        return
    # Every torch.save archive has <prefix>/data.pkl; without it torch.load cannot load it.
    if not any(m == "data.pkl" or m.endswith("/data.pkl") for m in members):
        f.reasons.append(f"{rel} is a zip without data.pkl: not a torch.save file")


def _is_legacy_torch(head: bytes) -> bool:
    """PROTO n, optional FRAME (protocol >= 4: opcode + u64 length), then the LONG1 magic."""
    if head[:1] != b"\x80":
        return False
    body = head[2:]
    if body[:1] == b"\x95":
        body = body[9:]
    return body.startswith(_LEGACY_TORCH_MAGIC)


def _check_deepspeed(
    f: _Findings, ckpt: Path, step: int, tag_dirs: list[str], world_size: int | None
) -> tuple[int | None, int | None]:
    """Validate the DeepSpeed part of an HF checkpoint.

    Returns (ZeRO stage hint, number of ranks the optimizer shards cover or None).

    DeepSpeed: every rank writes its own shards into ``global_stepN/``, rank 0 writes ``latest``
    after ITS OWN shards and before the final barrier. So ``latest`` missing means rank 0 died
    mid-save, but ``latest`` present does not prove the other ranks finished: count the shards.
    """
    latest = ckpt / "latest"
    if not latest.is_file():
        what = "missing" if not os.path.lexists(latest) else "not a file"
        f.reasons.append(f"DeepSpeed 'latest' {what} (rank 0 writes it after its shards)")
        return None, None
    try:
        with latest.open("rb") as fh:
            tag = fh.read(_MAX_LATEST_BYTES).decode("utf-8", errors="replace").strip()
    except OSError as exc:
        f.reasons.append(f"DeepSpeed 'latest' unreadable: {exc.strerror or exc}")
        return None, None
    if not tag or "/" in tag or tag in (".", ".."):
        f.reasons.append(f"DeepSpeed 'latest' names an invalid tag {tag!r}")
        return None, None
    tag_dir = ckpt / tag
    if not tag_dir.is_dir():
        f.reasons.append(f"DeepSpeed 'latest' names {tag}/, which does not exist")
        return None, None
    if tag != f"global_step{step}":
        f.warnings.append(f"DeepSpeed tag {tag} does not match checkpoint step {step}")
    stale = [t for t in tag_dirs if t != tag]
    if stale:
        f.warnings.append(f"extra DeepSpeed tag dirs ignored by resume: {', '.join(stale)}")
    if not (ckpt / "zero_to_fp32.py").is_file():
        f.warnings.append("zero_to_fp32.py missing: offline fp32 consolidation needs a copy")
    return check_ds_tag(f, tag_dir, tag, world_size)


def check_ds_tag(
    f: _Findings, tag_dir: Path, tag: str, world_size: int | None
) -> tuple[int | None, int | None]:
    """Validate one DeepSpeed tag dir (``global_stepN/``): every rank's model-state and
    optimizer shards present, each ``.pt`` a complete zip. Returns (ZeRO stage hint, ranks the
    optimizer shards cover). Shared by HF checkpoints and raw ``engine.save_checkpoint`` dirs."""
    try:
        files = sorted(e.name for e in os.scandir(tag_dir) if e.is_file())
    except OSError as exc:
        f.reasons.append(f"{tag}/ cannot be listed: {exc.strerror or exc}")
        return None, None

    z3_model: dict[int, set[int]] = {}  # mp rank -> dp ranks
    z012_model: set[int] = set()  # mp ranks
    optim: dict[str, dict[int, set[int]]] = {}  # precision prefix -> mp rank -> dp ranks
    any_model = False
    for name in files:
        if m := _Z3_MODEL_RE.fullmatch(name):
            z3_model.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
        elif m := _Z012_MODEL_RE.fullmatch(name):
            z012_model.add(int(m.group(1)))
        elif m := _OPTIM_RE.fullmatch(name):
            prefix = m.group(1) or ""
            optim.setdefault(prefix, {}).setdefault(int(m.group(3)), set()).add(int(m.group(2)))
        any_model = any_model or name.endswith("model_states.pt")

    hint: int | None = None
    ranks: int | None = None
    if not any_model:
        f.reasons.append(f"{tag}/ has no *model_states.pt")
    elif z3_model and z012_model:
        # A ZeRO-3 save into a dir that already held a ZeRO-2 save of the same step (or the
        # reverse): the engine will pick the files of ITS stage, which may be the stale ones.
        f.reasons.append(f"{tag}/ mixes ZeRO-3 and ZeRO<=2 model-state files (stale dir reused)")
    elif z3_model:
        hint = 3
    elif z012_model:
        hint = 2

    if len(optim) > 1:
        kinds = ", ".join(f"{p or 'no'} prefix" for p in sorted(optim))
        f.reasons.append(f"{tag}/ mixes optimizer shard precisions ({kinds}; stale dir reused)")
    elif optim:
        ((_, by_mp),) = optim.items()
        ranks = _check_rank_grid(f, tag, "optimizer", by_mp, world_size)
        if hint == 3 and z3_model != by_mp:
            f.reasons.append(
                f"{tag}/ ZeRO-3 model-state and optimizer shards cover different ranks"
            )
    elif hint == 3:
        f.reasons.append(f"{tag}/ has no *zero_pp_rank_*_optim_states.pt (ZeRO-3 always has them)")
    elif any_model:
        # Rank 0 writes its optimizer partition before `latest`, so with `latest` present and no
        # partition at all this is ZeRO-0 (optimizer inside mp_rank_00_model_states.pt).
        f.warnings.append(f"{tag}/ has no ZeRO optimizer shards (only expected for ZeRO-0)")

    if hint == 3:
        _check_rank_grid(f, tag, "ZeRO-3 model-state", z3_model, world_size)
    elif hint == 2:
        missing_mp = _missing(z012_model)
        if missing_mp:
            f.reasons.append(f"{tag}/ mp_rank model states missing for mp ranks {missing_mp}")

    for name in files:
        if name.endswith(".pt"):
            _check_torch_file(f, tag_dir / name)
    return hint, ranks


def _check_rank_grid(
    f: _Findings, tag: str, what: str, by_mp: dict[int, set[int]], world_size: int | None
) -> int:
    """Shards must be numbered 0..k-1 per model-parallel rank, same k everywhere, k*mp == world.

    A gap means a rank died before writing; a count different from the world size means either
    missing trailing ranks or a checkpoint saved at another world size (plain ZeRO checkpoints
    cannot be loaded at a different DP size).
    """
    missing_mp = _missing(set(by_mp))
    if missing_mp:
        f.reasons.append(f"{tag}/ {what} shards missing for mp ranks {missing_mp}")
    dp_count = max(max(dps) for dps in by_mp.values()) + 1
    for mp, dps in sorted(by_mp.items()):
        missing = [r for r in range(dp_count) if r not in dps]
        if missing:
            f.reasons.append(
                f"{tag}/ {what} shard missing for rank(s) {missing} (mp_rank {mp:02d})"
            )
    total = dp_count * (max(by_mp) + 1)
    if world_size is not None and total != world_size:
        f.reasons.append(f"{tag}/ has {what} shards for {total} ranks, world size is {world_size}")
    return total


def _missing(ranks: set[int]) -> list[int]:
    """Ranks absent from 0..max(ranks)."""
    if not ranks:
        return []
    return [r for r in range(max(ranks) + 1) if r not in ranks]


def _check_rng(
    f: _Findings, ckpt: Path, names: dict[str, os.DirEntry[str]], world_size: int | None
) -> int | None:
    """Every rank writes rng_state_{rank}.pth (rng_state.pth at world size 1) just before rank 0
    writes trainer_state.json, with no barrier in between: a rank can still be mid-write when
    trainer_state.json appears. A checkpoint without any RNG file resumes fine (HF logs an info),
    only with different randomness, so that is a warning, not a reason.

    Returns how many ranks the per-rank files cover (max index + 1), None when there are none.
    """
    single = "rng_state.pth" in names and names["rng_state.pth"].is_file()
    per_rank: dict[int, str] = {}
    for name, entry in names.items():
        if (m := _RNG_RANK_RE.fullmatch(name)) and entry.is_file():
            per_rank[int(m.group(1))] = name
    if not single and not per_rank:
        f.warnings.append("no RNG state (rng_state*.pth): resume works, randomness will differ")
        return None
    if world_size is not None and world_size > 1:
        if per_rank:
            missing = [i for i in range(world_size) if i not in per_rank]
            if missing:
                files = ", ".join(f"rng_state_{i}.pth" for i in missing)
                f.reasons.append(f"{files} missing (world size {world_size})")
            extra = sorted(i for i in per_rank if i >= world_size)
            if extra:
                f.warnings.append(f"RNG files for ranks {extra} beyond world size {world_size}")
        else:
            f.warnings.append(
                f"only rng_state.pth (saved at world size 1), world size {world_size}"
            )
    else:
        missing = _missing(set(per_rank))
        if missing:
            files = ", ".join(f"rng_state_{i}.pth" for i in missing)
            f.reasons.append(f"{files} missing (gap in per-rank RNG files)")
    if single:
        _check_torch_file(f, ckpt / "rng_state.pth")
    for _, name in sorted(per_rank.items()):
        _check_torch_file(f, ckpt / name)
    return max(per_rank) + 1 if per_rank else None


def _tree_size(root: Path) -> int:
    """Total bytes of regular files below root (lstat: symlinks are not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            total += st.st_size
    return total


def _fsync_dir(d: Path) -> None:
    """Make a rename durable: a crash right after quarantine must not resurrect the dir."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
            os.fsync(fd)
    finally:
        os.close(fd)
