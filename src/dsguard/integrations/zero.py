"""Exact resume across a ZeRO-stage change, and full weights out of any HF/DeepSpeed checkpoint.

Runs inside the training process (it imports torch; DeepSpeed and transformers are imported
lazily, only when a function needs them). Written for and tested with DeepSpeed 0.19.8 and
transformers 5.23.0; it touches a few DeepSpeed internals, each guarded so that a DeepSpeed
that changed them fails with a :class:`ZeroTransplantError` naming the attribute, never with
a silently wrong resume.

Why this module exists (docs/resuming.md, section 3.4):

* ``engine.load_checkpoint`` dies with a bare ``AssertionError`` (``assert len(self.ckpt_list)
  > 0`` in ``state_dict_factory.py``) when the checkpoint was saved under another ZeRO stage:
  it globs the model-state files by the *running* engine's naming (``mp_rank_00_model_states.pt``
  for ZeRO 0-2, ``zero_pp_rank_{r}_mp_rank_00_model_states.pt`` for ZeRO-3). That happens for
  every load mode, so HF Trainer's ``resume_from_checkpoint`` cannot cross a stage change, which
  is exactly what the ``zero3`` and ``offload_*`` rungs of dsguard's OOM ladder do.
* Universal Checkpointing does not bridge stages either: a ZeRO-2 universal checkpoint fed to a
  ZeRO-3 engine fails the same glob, and after a rename with ``KeyError: 'optimizer_state_dict'``
  (the stage<=2 and stage-3 converters write different ``optimizer_state.pt`` schemas).
  What the universal format *does* give is per-parameter, unpartitioned fp32 master weights and
  optimizer moments, independent of the stage and world size that wrote them.

So :func:`enable_zero_transplant` patches HF's ``deepspeed_load_checkpoint``: on a stage
mismatch it converts the checkpoint to universal format once (``ds_to_universal``, in a child
process, into ``checkpoint-N/dsguard-universal/``; the original files are only read) and copies
every parameter's fp32 master, its Adam moments, the optimizer step, the param-group
hyperparameters (the current LR), the engine's step counters and a DeepSpeed-owned LR scheduler
into the new engine with DeepSpeed's public ``safe_set_full_*`` API. Everything HF does around
the load (``trainer_state.json``, RNG states, skipping consumed batches, its own
``scheduler.pt``) stays HF's job, so the continuation matches an uninterrupted run.

:func:`load_consolidated_weights` is the other half of a stage-changing or LoRA rung: the full
weights of a checkpoint into a plain model, from HF's gathered safetensors or, for a ZeRO-3
checkpoint saved without ``stage3_gather_16bit_weights_on_model_save``, consolidated from the
ZeRO shards, with a strict key check (a LoRA phase must never silently start from random
weights; HF's own loaders only warn about missing keys).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import torch

from dsguard.errors import DsguardError

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Sibling dir inside ``checkpoint-N/`` holding the universal conversion (and its marker).
UNIVERSAL_SUBDIR = "dsguard-universal"
#: Sibling dir inside ``checkpoint-N/`` caching consolidated fp32 weights of a ZeRO checkpoint.
CONSOLIDATED_SUBDIR = "dsguard-consolidated"
_UNIVERSAL_MARKER = "dsguard-universal.json"
_CONSOLIDATED_FILE = "model.safetensors"
_CONSOLIDATED_MARKER = "dsguard-consolidated.json"

# Ranks other than 0 wait this long for rank 0's conversion (a dedicated gloo group, so the
# training backend's shorter collective timeout does not apply).
_CONVERT_TIMEOUT_S = 4 * 3600
# ds_to_universal worker processes (extract / merge). The merge is memory hungry.
_EXTRACT_WORKERS = max(1, min(4, (os.cpu_count() or 1) // 2))
_MERGE_WORKERS = max(1, min(2, (os.cpu_count() or 1) // 4))

_Z3_MODEL_RE = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt")
_Z012_MODEL_RE = re.compile(r"mp_rank_(\d+)_model_states\.pt")
_OPTIM_RE = re.compile(r"(?:(?:bf16|fp16)_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
_HF_LOAD_NAME = "deepspeed_load_checkpoint"
# Param-group keys that select an implementation rather than define the update: they follow
# the *running* optimizer (e.g. fused kernels on another device), everything else is restored.
_IMPL_GROUP_KEYS = frozenset({"params", "fused", "foreach", "capturable", "differentiable"})


class ZeroTransplantError(DsguardError, RuntimeError):
    """A checkpoint saved under one ZeRO stage cannot be transplanted into this engine.

    Raised instead of DeepSpeed's bare ``AssertionError`` with what is wrong and where: the
    conversion failed, a parameter or optimizer-state key is missing on one side, a DeepSpeed
    internal this module relies on changed, or the setup is out of scope (ZeRO-0, NVMe
    optimizer offload).
    """


class WeightsMismatchError(DsguardError, RuntimeError):
    """Consolidated checkpoint weights do not fit the model exactly (strict key match).

    The message starts like torch's ``load_state_dict`` error (``Error(s) in loading
    state_dict for ...``), so a supervisor that classifies output lines sees a checkpoint error.
    """

    def __init__(self, message: str, missing: list[str], unexpected: list[str]) -> None:
        super().__init__(message)
        self.missing = missing
        self.unexpected = unexpected


# ---------------------------------------------------------------------------------------------
# Checkpoint layout
# ---------------------------------------------------------------------------------------------


def _read_tag(ckpt_dir: Path) -> str | None:
    """The DeepSpeed tag named by ``latest`` (None when absent or not a plain child dir)."""
    try:
        tag = (ckpt_dir / "latest").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not tag or "/" in tag or tag in (".", "..") or not (ckpt_dir / tag).is_dir():
        return None
    return tag


def _torch_load(path: Path, *, mmap: bool = False) -> Any:
    """``torch.load`` of a DeepSpeed file on CPU (it pickles DeepSpeed objects, so no
    ``weights_only``); ``mmap`` avoids reading tensors we do not touch (a ZeRO-2 model-states
    file holds the whole module)."""
    if mmap:
        try:
            return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:
            pass  # legacy (non-zip) serialization cannot be memory-mapped
    return torch.load(path, map_location="cpu", weights_only=False)


def checkpoint_zero_stage(ckpt_dir: Path) -> int | None:
    """The ZeRO stage an HF ``checkpoint-N`` (DeepSpeed ``latest`` + tag dir) was saved under.

    3 when the tag dir holds per-rank ``zero_pp_rank_*_mp_rank_*_model_states.pt``; for a
    single ``mp_rank_00_model_states.pt`` (ZeRO 0, 1 or 2 write the same names) the exact stage
    from the ``ds_config`` saved in that file, falling back to 2 when ZeRO optimizer partitions
    are present and 0 when not. None when this is not a DeepSpeed checkpoint (no ``latest``, or
    it names no existing dir, or no model-state files). Reads no tensors.

    A ZeRO-2 checkpoint cannot be loaded by a ZeRO-3 engine or vice versa: ``load_checkpoint``
    dies with a bare ``AssertionError`` (see :func:`enable_zero_transplant`).
    """
    ckpt_dir = Path(ckpt_dir)
    tag = _read_tag(ckpt_dir)
    if tag is None:
        return None
    try:
        names = sorted(os.listdir(ckpt_dir / tag))
    except OSError:
        return None
    if any(_Z3_MODEL_RE.fullmatch(n) for n in names):
        return 3
    model_files = [n for n in names if _Z012_MODEL_RE.fullmatch(n)]
    if not model_files:
        return None
    try:
        cfg = _torch_load(ckpt_dir / tag / model_files[0], mmap=True).get("ds_config") or {}
        stage = int((cfg.get("zero_optimization") or {}).get("stage", 0))
        if 0 <= stage <= 2:
            return stage
    except Exception as exc:  # unreadable or an unexpected layout: fall back to the names
        logger.debug("dsguard: no ds_config in %s/%s: %s", tag, model_files[0], exc)
    return 2 if any(_OPTIM_RE.fullmatch(n) for n in names) else 0


def _layout(stage: int) -> str:
    """DeepSpeed's file-naming family: what decides whether ``load_checkpoint`` can work."""
    return "zero3" if stage == 3 else "zero012"


def _source_fingerprint(tag_dir: Path) -> dict[str, list[int]]:
    """Sizes and mtimes of the tag dir's files: a re-saved checkpoint invalidates caches."""
    out: dict[str, list[int]] = {}
    for entry in sorted(os.scandir(tag_dir), key=lambda e: e.name):
        if entry.is_file():
            st = entry.stat()
            out[entry.name] = [st.st_size, st.st_mtime_ns]
    return out


# ---------------------------------------------------------------------------------------------
# Rank coordination
# ---------------------------------------------------------------------------------------------


def _dist() -> tuple[bool, int]:
    """(multi-process world?, global rank)."""
    d = torch.distributed
    if d.is_available() and d.is_initialized() and d.get_world_size() > 1:
        return True, d.get_rank()
    return False, 0


def _rank0_then_share(what: str, work: Callable[[], _T]) -> _T:
    """Run ``work()`` on global rank 0 only; every rank gets its result or raises its error.

    The outcome travels on a dedicated gloo group with a long timeout, so ranks waiting for a
    long conversion do not trip the training backend's collective timeout, and a failure on
    rank 0 fails every rank with the same message instead of hanging them in the next
    collective.
    """
    multi, rank = _dist()
    result: _T | None = None
    error: str | None = None
    if rank == 0:
        try:
            result = work()
        except Exception as exc:
            if not multi:
                if isinstance(exc, ZeroTransplantError):
                    raise
                raise ZeroTransplantError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            error = f"{type(exc).__name__}: {exc}"
    if multi:
        d = torch.distributed
        group = d.new_group(backend="gloo", timeout=_dt.timedelta(seconds=_CONVERT_TIMEOUT_S))
        try:
            box: list[Any] = [(result, error)]
            d.broadcast_object_list(box, src=0, group=group)
            result, error = box[0]
        finally:
            d.destroy_process_group(group)
    if error is not None or result is None:
        raise ZeroTransplantError(f"{what} failed on rank 0: {error}")
    return result


@contextlib.contextmanager
def _dir_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on a directory itself (no lock file is added to a checkpoint)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------
# Universal conversion
# ---------------------------------------------------------------------------------------------


def _universal_ready(out: Path, tag: str, fingerprint: dict[str, list[int]]) -> bool:
    try:
        marker = json.loads((out / _UNIVERSAL_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(
        marker.get("tag") == tag
        and marker.get("source") == fingerprint
        and (out / tag / "zero" / "optimizer_state.pt").is_file()
    )


def _convert_to_universal(ckpt_dir: Path, tag: str) -> str:
    """Convert ``ckpt_dir/tag`` into ``ckpt_dir/dsguard-universal/tag`` unless already done.

    Runs ``python -m deepspeed.checkpoint.ds_to_universal --inject_missing_state`` with this
    interpreter (HF/plain DeepSpeed checkpoints lack Megatron's ``universal_checkpoint_info``:
    without the flag the converter fails with ``AssertionError: Required
    universal_checkpoint_info state is missing``). Output goes to a temp dir that is renamed
    into place with a marker, so a crash mid-conversion never leaves a half dir that looks
    done; the original files are only read. Returns the output dir.
    """
    out = ckpt_dir / UNIVERSAL_SUBDIR
    fingerprint = _source_fingerprint(ckpt_dir / tag)
    if _universal_ready(out, tag, fingerprint):
        logger.info("dsguard: reusing universal checkpoint %s", out)
        return str(out)
    if out.exists():
        shutil.rmtree(out)  # ours, stale (another tag, re-saved source or interrupted)
    tmp = Path(tempfile.mkdtemp(prefix=f".{UNIVERSAL_SUBDIR}.tmp-", dir=ckpt_dir))
    try:
        log_path = tmp / "convert.log"
        cmd = [
            sys.executable,
            "-m",
            "deepspeed.checkpoint.ds_to_universal",
            "--input_folder",
            str(ckpt_dir / tag),
            "--output_folder",
            str(tmp / tag),
            "--inject_missing_state",
            "--num_extract_workers",
            str(_EXTRACT_WORKERS),
            "--num_merge_workers",
            str(_MERGE_WORKERS),
        ]
        # The converter is a plain CPU job: keep it out of the launcher's process group setup.
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
        }
        logger.info("dsguard: converting %s to universal format: %s", ckpt_dir / tag, cmd)
        with log_path.open("wb") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
        if proc.returncode != 0 or not (tmp / tag / "zero" / "optimizer_state.pt").is_file():
            tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
            raise ZeroTransplantError(
                f"ds_to_universal exited {proc.returncode} converting {ckpt_dir / tag}:\n"
                + "\n".join(tail)
            )
        ds = importlib.import_module("deepspeed")
        marker = {"tag": tag, "source": fingerprint, "deepspeed": str(ds.__version__)}
        (tmp / _UNIVERSAL_MARKER).write_text(json.dumps(marker, indent=1))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def _ensure_universal(ckpt_dir: Path, tag: str) -> Path:
    """Rank-consistent conversion: rank 0 converts (once per checkpoint), every rank checks."""
    out = Path(
        _rank0_then_share(
            f"universal conversion of {ckpt_dir / tag}",
            lambda: _convert_to_universal(ckpt_dir, tag),
        )
    )
    if not (out / tag / "zero" / "optimizer_state.pt").is_file():
        # Every rank reaches this check, so a node without the shared dir fails the same way
        # on all of its ranks instead of desynchronising the collectives that follow.
        raise ZeroTransplantError(
            f"universal checkpoint {out / tag} (written by rank 0) is not visible here: the "
            "checkpoint dir must be on a filesystem shared by all ranks"
        )
    return out / tag


# ---------------------------------------------------------------------------------------------
# Transplant
# ---------------------------------------------------------------------------------------------


def _need(obj: Any, attr: str) -> Any:
    """A DeepSpeed internal the transplant relies on, or a clear error naming it."""
    if not hasattr(obj, attr):
        ds = importlib.import_module("deepspeed")
        raise ZeroTransplantError(
            f"DeepSpeed {ds.__version__}: {type(obj).__name__}.{attr} is missing; dsguard's "
            "ZeRO transplant was written against DeepSpeed 0.19 internals"
        )
    return getattr(obj, attr)


def _base_optimizers(zopt: Any) -> list[Any]:
    """The torch optimizers holding the fp32 state (ZeRO-3 partial offload adds a backup)."""
    opts = [_need(zopt, "optimizer")]
    backup = getattr(zopt, "backup_optimizer", None)
    if backup is not None and backup is not opts[0]:
        opts.append(backup)
    return opts


@contextlib.contextmanager
def _zero_lr(optimizers: list[Any]) -> Iterator[None]:
    saved = [[g.get("lr") for g in opt.param_groups] for opt in optimizers]
    for opt in optimizers:
        for g in opt.param_groups:
            g["lr"] = 0.0
    try:
        yield
    finally:
        for opt, lrs in zip(optimizers, saved, strict=True):
            for g, lr in zip(opt.param_groups, lrs, strict=True):
                g["lr"] = lr


def _materialise_optimizer_state(zopt: Any, stage: int) -> None:
    """Create the base optimizer's lazily initialised state (Adam's ``exp_avg`` ... exist only
    after its first ``step``) with one zero-gradient, zero-LR step of the fp32 partitions.

    Whatever that step writes is overwritten from the checkpoint right after; it only gives
    every state tensor the exact type, device and layout the running optimizer wants (fused
    AdamW keeps ``step`` as a tensor on the parameter's device, for example).
    """
    if getattr(zopt, "zenflow", False):
        raise ZeroTransplantError("ZenFlow optimizers are not supported by the ZeRO transplant")
    optimizers = _base_optimizers(zopt)
    if stage == 3:
        if getattr(zopt, "swap_optimizer", False):
            raise ZeroTransplantError(
                "NVMe optimizer offload is not supported by the ZeRO transplant"
            )
        flats = _need(zopt, "fp32_partitioned_groups_flat")
        step_one = _need(zopt, "_optimizer_step")
        with _zero_lr(optimizers):
            for i, flat in enumerate(flats):
                if any(flat in opt.state and opt.state[flat] for opt in optimizers):
                    continue
                old_grad = flat.grad
                flat.grad = torch.zeros_like(flat)
                try:
                    # DeepSpeed's own per-sub-group step: puts the partition into the right
                    # param group of the right optimizer (CPU or backup) for the call.
                    step_one(i)
                finally:
                    flat.grad = old_grad
        return

    base = optimizers[0]
    params = [p for g in base.param_groups for p in g["params"]]
    if not all(base.state.get(p) for p in params):
        old_grads = [p.grad for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        try:
            with _zero_lr([base]):
                base.step()
        finally:
            for p, g in zip(params, old_grads, strict=True):
                p.grad = g
    # ZeRO-1/2 (and the bf16 optimizer) link each parameter's fragment of the flat optimizer
    # state only after their first step; safe_set_full_optimizer_state needs those links.
    _need(zopt, "_lazy_init_hp_params_optimizer_state")()


def _load_universal_tensor(path: Path) -> torch.Tensor:
    """Stage<=2 conversions store ``{'param': t, 'cat_dim': ...}``, stage 3 a bare tensor."""
    obj = _torch_load(path)
    t = obj["param"] if isinstance(obj, dict) else obj
    if not isinstance(t, torch.Tensor):
        raise ZeroTransplantError(f"{path} holds {type(t).__name__}, not a tensor")
    return t


def _as_float(v: Any) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


def _saved_step(zdir: Path, names: list[str], optim_sd: Mapping[str, Any]) -> float | None:
    """The optimizer step of the saved run: per-parameter ``step.pt`` (stage<=2 conversions)
    or the base optimizer state in ``optimizer_state.pt`` (stage-3 conversions)."""
    steps: set[float] = set()
    for name in names:
        f = zdir / name / "step.pt"
        if f.is_file():
            steps.add(_as_float(_torch_load(f)))
    if not steps:
        inner = optim_sd.get("optimizer_state_dict")
        state = inner.get("state", {}) if isinstance(inner, Mapping) else {}
        steps = {_as_float(s["step"]) for s in state.values() if "step" in s}
    if len(steps) > 1:
        raise ZeroTransplantError(f"optimizer steps differ between parameters: {sorted(steps)}")
    return steps.pop() if steps else None


def _running_state_keys(optimizers: list[Any]) -> set[str]:
    keys: set[str] = set()
    for opt in optimizers:
        for st in opt.state.values():
            keys.update(k for k, v in st.items() if k != "step" and isinstance(v, torch.Tensor))
    return keys


def _set_step(optimizers: list[Any], step: float) -> None:
    for opt in optimizers:
        for st in opt.state.values():
            if "step" not in st:
                continue
            old = st["step"]
            if isinstance(old, torch.Tensor):
                st["step"] = torch.full_like(old, step)
            else:
                st["step"] = type(old)(step)


def _restore_param_groups(optimizers: list[Any], saved_groups: list[Mapping[str, Any]]) -> None:
    """Restore the hyperparameters a resume must keep, above all the current ``lr``.

    HF's LambdaLR ``load_state_dict`` does not touch the optimizer's ``lr``; a native DeepSpeed
    resume restores it with the optimizer state, so the transplant must too, or the first
    resumed step runs at the scheduler's initial LR. Groups are matched by index (the same
    training script builds them in the same order; ZeRO keeps one base group per client group
    at every stage).
    """
    for opt in optimizers:
        groups = opt.param_groups
        if len(groups) != len(saved_groups):
            raise ZeroTransplantError(
                f"the checkpoint's optimizer has {len(saved_groups)} param groups, the running "
                f"one {len(groups)}: cannot tell which hyperparameters (lr) belong where"
            )
        for g, sg in zip(groups, saved_groups, strict=True):
            for k, v in sg.items():
                if k not in _IMPL_GROUP_KEYS and k in g:
                    g[k] = v


def _persistent_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for mod_name, mod in module.named_modules():
        for b_name, buf in mod.named_buffers(recurse=False):
            if buf is not None and b_name not in mod._non_persistent_buffers_set:
                out[f"{mod_name}.{b_name}" if mod_name else b_name] = buf
    return out


def _consolidated_state(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """Full fp32 state dict of a DeepSpeed checkpoint (frozen params and buffers included)."""
    z2fp32 = importlib.import_module("deepspeed.utils.zero_to_fp32")
    sd = z2fp32.get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), lazy_mode=True)
    return {k: v.contiguous() for k, v in sd.items()}


def _transplant(engine: Any, ckpt_dir: Path, saved_stage: int, strict: bool) -> None:
    """Load ``ckpt_dir`` (saved under ``saved_stage``) into ``engine`` (another ZeRO stage)."""
    ds = importlib.import_module("deepspeed")
    ds_utils = importlib.import_module("deepspeed.utils")
    stage = int(engine.zero_optimization_stage())
    if stage == 0 or saved_stage == 0:
        raise ZeroTransplantError(
            f"cannot transplant a ZeRO-{saved_stage} checkpoint into a ZeRO-{stage} engine: "
            "the transplant needs ZeRO optimizer partitions on both sides (stages 1-3)"
        )
    tag = _read_tag(ckpt_dir)
    if tag is None:
        raise ZeroTransplantError(f"{ckpt_dir}: DeepSpeed 'latest' missing or names no dir")
    zdir = _ensure_universal(ckpt_dir, tag) / "zero"

    zopt = engine.optimizer
    optimizers = _base_optimizers(zopt)
    _materialise_optimizer_state(zopt, stage)

    optim_sd = _torch_load(zdir / "optimizer_state.pt")
    module: torch.nn.Module = engine.module
    named = list(module.named_parameters())
    trainable = [(n, p) for n, p in named if p.requires_grad]
    on_disk = {e.name for e in os.scandir(zdir) if e.is_dir()}
    missing = [n for n, _ in trainable if n not in on_disk]
    if missing:
        raise ZeroTransplantError(
            f"{zdir}: no universal state for trainable parameter(s) {missing[:10]}"
            f"{' ...' if len(missing) > 10 else ''} (a different model?)"
        )
    if strict:
        known = {n for n, _ in named} | set(_persistent_buffers(module))
        unexpected = sorted(on_disk - known)
        if unexpected:
            raise ZeroTransplantError(
                f"{zdir}: parameters not in this model: {unexpected[:10]}"
                f"{' ...' if len(unexpected) > 10 else ''}"
            )

    saved_keys: set[str] = set()
    for name, _ in trainable:
        saved_keys.update(
            f.name[:-3]
            for f in os.scandir(zdir / name)
            if f.name.endswith(".pt") and f.name not in ("fp32.pt", "step.pt")
        )
    running_keys = _running_state_keys(optimizers)
    if saved_keys != running_keys:
        raise ZeroTransplantError(
            f"optimizer state differs: the checkpoint has {sorted(saved_keys)}, the running "
            f"optimizer {sorted(running_keys)} (another optimizer class or settings?)"
        )

    # Param-group hyperparameters and the step first: nothing below depends on them.
    _restore_param_groups(optimizers, list(optim_sd.get("param_groups") or []))
    step = _saved_step(zdir, [n for n, _ in trainable], optim_sd)
    if step is not None:
        _set_step(optimizers, step)

    rank = _dist()[1]
    for name, p in trainable:
        shape = tuple(getattr(p, "ds_shape", p.shape))
        fp32 = _load_universal_tensor(zdir / name / "fp32.pt").reshape(shape)
        ds_utils.safe_set_full_fp32_param(p, fp32)
        for key in sorted(saved_keys):
            value = _load_universal_tensor(zdir / name / f"{key}.pt").reshape(shape)
            ds_utils.safe_set_full_optimizer_state(p, value, key)
        _set_module_tensor(ds, p, fp32, stage=stage, rank=rank)

    tag_dir = ckpt_dir / tag
    extras = _restore_frozen_and_buffers(
        ds, engine, tag_dir, saved_stage=saved_stage, zdir=zdir, strict=strict
    )
    _restore_engine_counters(engine, tag_dir, saved_stage=saved_stage, optim_sd=optim_sd)

    lr = optimizers[0].param_groups[0].get("lr") if optimizers[0].param_groups else None
    # One line per job: WARNING on rank 0 (visible under default logging), INFO elsewhere.
    logger.log(
        logging.WARNING if rank == 0 else logging.INFO,
        "dsguard: transplanted ZeRO-%d checkpoint %s (%s) into this ZeRO-%d engine via %s: "
        "%d parameters (fp32 master + %s), %d frozen/buffers, optimizer step %s, "
        "global_steps %s, lr %s",
        saved_stage,
        ckpt_dir,
        tag,
        stage,
        zdir.parent,
        len(trainable),
        ", ".join(sorted(saved_keys)) or "no optimizer state",
        extras,
        None if step is None else int(step),
        engine.global_steps,
        lr,
    )


def _set_module_tensor(
    ds: ModuleType, p: torch.Tensor, value: torch.Tensor, *, stage: int, rank: int
) -> None:
    """The module's (possibly 16-bit) copy: ZeRO<=2 keeps it whole on every rank; under ZeRO-3
    it is partitioned, so gather it, let rank 0 write, and re-partition (a broadcast)."""
    if stage == 3 and hasattr(p, "ds_id"):
        with ds.zero.GatheredParameters([p], modifier_rank=0):
            if rank == 0:
                with torch.no_grad():
                    p.data.copy_(value.to(device=p.device, dtype=p.dtype))
    else:
        with torch.no_grad():
            p.data.copy_(value.reshape(p.shape).to(device=p.device, dtype=p.dtype))


def _restore_frozen_and_buffers(
    ds: ModuleType, engine: Any, tag_dir: Path, *, saved_stage: int, zdir: Path, strict: bool
) -> int:
    """Frozen parameters and persistent buffers: not in the optimizer, so not (reliably) in the
    universal checkpoint. Taken from the saved module state dict (exact dtype; ZeRO-3 saves
    buffers whole but parameters as empty placeholders), else from the universal dir, else,
    strict only, from a full ZeRO consolidation. Returns how many were restored."""
    module: torch.nn.Module = engine.module
    stage = int(engine.zero_optimization_stage())
    rank = _dist()[1]
    wanted: dict[str, tuple[torch.Tensor, bool]] = {
        n: (p, True) for n, p in module.named_parameters() if not p.requires_grad
    }
    wanted.update({n: (b, False) for n, b in _persistent_buffers(module).items()})
    if not wanted:
        return 0
    model_file = _model_states_file(tag_dir, saved_stage)
    saved_module: Mapping[str, Any] = _torch_load(model_file, mmap=True).get("module") or {}
    unresolved: list[str] = []
    done = 0
    consolidated: dict[str, torch.Tensor] | None = None
    for name, (t, is_param) in wanted.items():
        numel = int(getattr(t, "ds_numel", t.numel()))
        src = saved_module.get(name)
        if not (isinstance(src, torch.Tensor) and src.numel() == numel):
            f = zdir / name / "fp32.pt"
            src = _load_universal_tensor(f) if f.is_file() else None
        if src is None or src.numel() != numel:
            if not strict:
                unresolved.append(name)
                continue
            if consolidated is None:  # once per checkpoint and node, cached (see there)
                consolidated = _zero_consolidated_cached(tag_dir.parent)[0]
            src = consolidated.get(name)
            if src is None or src.numel() != numel:
                unresolved.append(name)
                continue
        if is_param:
            shape = tuple(getattr(t, "ds_shape", t.shape))
            _set_module_tensor(ds, t, src.reshape(shape), stage=stage, rank=rank)
        else:
            with torch.no_grad():
                t.copy_(src.reshape(t.shape).to(device=t.device, dtype=t.dtype))
        done += 1
    if unresolved:
        msg = f"{tag_dir}: no saved value for frozen parameter(s)/buffer(s) {unresolved[:10]}"
        if strict:
            raise ZeroTransplantError(msg)
        logger.warning("dsguard: %s; keeping the model's current values (non-strict load)", msg)
    return done


def _model_states_file(tag_dir: Path, saved_stage: int) -> Path:
    name = (
        "zero_pp_rank_0_mp_rank_00_model_states.pt"
        if saved_stage == 3
        else "mp_rank_00_model_states.pt"
    )
    f = tag_dir / name
    if not f.is_file():
        raise ZeroTransplantError(f"{f} is missing")
    return f


def _restore_engine_counters(
    engine: Any, tag_dir: Path, *, saved_stage: int, optim_sd: Mapping[str, Any]
) -> None:
    """What ``load_checkpoint`` restores besides tensors: step counters (they name the next
    checkpoint's ``global_stepN`` tag), a DeepSpeed-owned LR scheduler, the loss scaler."""
    zopt = engine.optimizer
    states = _torch_load(_model_states_file(tag_dir, saved_stage), mmap=True)
    engine.global_steps = int(states["global_steps"])
    engine.global_samples = int(
        states.get("global_samples", engine.global_steps * engine.train_batch_size())
    )
    engine.skipped_steps = int(states.get("skipped_steps", 0))
    sched_state = states.get("lr_scheduler")
    if getattr(engine, "lr_scheduler", None) is not None and sched_state is not None:
        engine.lr_scheduler.load_state_dict(sched_state)
    # Same precision mode only: an fp16 loss scale means nothing to a bf16/fp32 engine.
    scaler = optim_sd.get("loss_scaler")
    if scaler is not None and type(scaler) is type(getattr(zopt, "loss_scaler", None)):
        zopt.loss_scaler = scaler
        for attr in ("dynamic_loss_scale", "overflow"):
            if attr in optim_sd and hasattr(zopt, attr):
                setattr(zopt, attr, optim_sd[attr])


# ---------------------------------------------------------------------------------------------
# HF patch
# ---------------------------------------------------------------------------------------------

_original_load: Any = None


def _engine_stage(engine: Any) -> int | None:
    fn = getattr(engine, "zero_optimization_stage", None)
    return int(fn()) if callable(fn) else None


def _dsguard_deepspeed_load_checkpoint(
    deepspeed_engine: Any, checkpoint_path: Any, load_module_strict: bool = True
) -> None:
    """Drop-in for transformers' ``deepspeed_load_checkpoint``; see enable_zero_transplant."""
    saved = checkpoint_zero_stage(Path(checkpoint_path))
    running = _engine_stage(deepspeed_engine)
    if saved is None or running is None or _layout(saved) == _layout(running):
        _original_load(deepspeed_engine, checkpoint_path, load_module_strict=load_module_strict)
        return
    _transplant(deepspeed_engine, Path(checkpoint_path), saved, strict=load_module_strict)


def enable_zero_transplant() -> None:
    """Let HF Trainer resume a DeepSpeed checkpoint saved under another ZeRO stage, exactly.

    Without it, ``trainer.train(resume_from_checkpoint=...)`` after a ZeRO-2 <-> ZeRO-3 change
    dies inside ``engine.load_checkpoint`` with a bare ``AssertionError`` (``assert
    len(self.ckpt_list) > 0``): the engine looks for model-state files named for its own stage.

    Replaces ``transformers.integrations.deepspeed.deepspeed_load_checkpoint`` and every
    already-imported module's reference to it (``transformers.trainer`` imports the name
    directly, so patching the defining module alone would not reach Trainer). The replacement
    calls the original unchanged when the checkpoint's stage uses the running engine's file
    layout (same stage, 1 <-> 2, offload changes, non-DeepSpeed dirs). On a mismatch it
    converts the checkpoint once to universal format (rank 0, in a child process with this
    interpreter, into ``checkpoint-N/dsguard-universal/``; the original files are only read)
    and transplants fp32 master weights, optimizer moments, the step, the param-group
    hyperparameters (current LR), frozen parameters, persistent buffers, DeepSpeed's step
    counters and a DeepSpeed-owned LR scheduler into the new engine, logging one line (WARNING)
    that says so. HF's scheduler.pt, trainer state, RNG and data position are left to HF.

    Idempotent; call it before ``Trainer.train`` in every rank.
    """
    global _original_load
    hf_ds = importlib.import_module("transformers.integrations.deepspeed")
    current = getattr(hf_ds, _HF_LOAD_NAME)
    if current is not _dsguard_deepspeed_load_checkpoint:
        _original_load = current
    if _original_load is None:  # pragma: no cover - only if someone else re-exported ours
        raise ZeroTransplantError("cannot find transformers' original deepspeed_load_checkpoint")
    for mod in list(sys.modules.values()):
        namespace = getattr(mod, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(_HF_LOAD_NAME) is _original_load:
            setattr(mod, _HF_LOAD_NAME, _dsguard_deepspeed_load_checkpoint)
    setattr(hf_ds, _HF_LOAD_NAME, _dsguard_deepspeed_load_checkpoint)


# ---------------------------------------------------------------------------------------------
# Consolidated weights
# ---------------------------------------------------------------------------------------------


def _load_weights_file(f: Path) -> dict[str, torch.Tensor]:
    if f.name.endswith(".safetensors"):
        st = importlib.import_module("safetensors.torch")
        return dict(st.load_file(str(f), device="cpu"))
    return dict(torch.load(f, map_location="cpu", weights_only=True))


def _read_hf_weights(ckpt_dir: Path) -> tuple[dict[str, torch.Tensor], str] | None:
    """HF's saved weights (single or sharded, safetensors or .bin), or None when absent."""
    for index_name, single in (
        ("model.safetensors.index.json", "model.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    ):
        if (ckpt_dir / index_name).is_file():
            index = json.loads((ckpt_dir / index_name).read_text())
            out: dict[str, torch.Tensor] = {}
            for shard in sorted(set(index["weight_map"].values())):
                out.update(_load_weights_file(ckpt_dir / shard))
            return out, str(ckpt_dir / index_name)
        if (ckpt_dir / single).is_file():
            return _load_weights_file(ckpt_dir / single), str(ckpt_dir / single)
    return None


def _zero_consolidated_cached(ckpt_dir: Path) -> tuple[dict[str, torch.Tensor], str]:
    """fp32 weights consolidated from ZeRO shards, once per checkpoint for all local ranks.

    Consolidation reads every optimizer partition (about 3x the fp32 model): done once under a
    file lock and cached as ``checkpoint-N/dsguard-consolidated/model.safetensors`` (keyed by
    the shards' sizes and mtimes), every other rank or later phase memory-maps the cache.
    """
    tag = _read_tag(ckpt_dir)
    if tag is None:
        raise FileNotFoundError(
            f"{ckpt_dir}: no model.safetensors / pytorch_model.bin and no DeepSpeed checkpoint "
            "('latest' missing or naming no dir): nothing to load weights from"
        )
    st = importlib.import_module("safetensors.torch")
    out = ckpt_dir / CONSOLIDATED_SUBDIR
    fingerprint = _source_fingerprint(ckpt_dir / tag)
    marker_doc = {"tag": tag, "source": fingerprint}
    with _dir_lock(ckpt_dir):
        try:
            ready = json.loads((out / _CONSOLIDATED_MARKER).read_text()) == marker_doc
        except (OSError, ValueError):
            ready = False
        if not ready:
            logger.info("dsguard: consolidating ZeRO shards of %s (%s)", ckpt_dir, tag)
            sd = _consolidated_state(ckpt_dir)
            # safetensors refuses shared storage (tied weights appear under both names).
            seen: set[int] = set()
            flat: dict[str, torch.Tensor] = {}
            for k, tensor in sd.items():
                t = tensor.detach().cpu().contiguous()
                ptr = t.untyped_storage().data_ptr()
                flat[k] = t.clone() if ptr in seen and t.numel() else t
                seen.add(ptr)
            if out.exists():
                shutil.rmtree(out)
            tmp = Path(tempfile.mkdtemp(prefix=f".{CONSOLIDATED_SUBDIR}.tmp-", dir=ckpt_dir))
            try:
                st.save_file(flat, str(tmp / _CONSOLIDATED_FILE), metadata={"format": "pt"})
                (tmp / _CONSOLIDATED_MARKER).write_text(json.dumps(marker_doc, indent=1))
                os.replace(tmp, out)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
    return dict(st.load_file(str(out / _CONSOLIDATED_FILE), device="cpu")), (
        f"{ckpt_dir / tag} (ZeRO shards, consolidated to {out / _CONSOLIDATED_FILE})"
    )


def _placeholder_weights(sd: Mapping[str, torch.Tensor], model: torch.nn.Module) -> bool:
    """ZeRO-3 saves without gathering used to write empty tensors: not real weights."""
    expected = model.state_dict()
    return any(v.numel() == 0 and k in expected and expected[k].numel() > 0 for k, v in sd.items())


def load_consolidated_weights(model: torch.nn.Module, ckpt_dir: Path) -> None:
    """Load a checkpoint's full weights into a plain (non-engine) model, with strict keys.

    Source: HF's ``model.safetensors`` (or sharded index, or ``pytorch_model.bin``) when present
    (HF gathers them at ZeRO<=2, and at ZeRO-3 with ``stage3_gather_16bit_weights_on_model_save``;
    16-bit under bf16/fp16 training), else the ZeRO shards consolidated to fp32 with DeepSpeed's
    ``zero_to_fp32`` (a ZeRO-3 checkpoint saved without gathering has no weights file at all),
    cached once per checkpoint in ``checkpoint-N/dsguard-consolidated/``.

    Raises :class:`WeightsMismatchError` listing missing and unexpected keys unless the keys
    match the model's ``state_dict`` exactly (a tied weight saved once counts for both names):
    HF's own loaders and ``load_state_dict(strict=False)`` only warn, and a LoRA phase started
    on randomly initialised weights would look like a working run. Shape mismatches raise
    torch's ``RuntimeError``. Use it on the base model before wrapping it with PEFT.
    """
    ckpt_dir = Path(ckpt_dir)
    found = _read_hf_weights(ckpt_dir)
    if found is not None and _placeholder_weights(found[0], model):
        logger.warning("dsguard: %s holds placeholder (empty) tensors; using ZeRO shards", found[1])
        found = None
    sd, source = found if found is not None else _zero_consolidated_cached(ckpt_dir)

    own = model.state_dict(keep_vars=True)
    by_tensor: dict[int, list[str]] = {}
    for k, v in own.items():
        by_tensor.setdefault(id(v), []).append(k)
    missing = [
        k for k in own if k not in sd and not any(alias in sd for alias in by_tensor[id(own[k])])
    ]
    unexpected = sorted(k for k in sd if k not in own)
    if missing or unexpected:
        raise WeightsMismatchError(
            f"Error(s) in loading state_dict for {type(model).__name__} from {source} "
            f"(dsguard strict load): missing keys {missing}; unexpected keys {unexpected}",
            missing,
            unexpected,
        )
    result = model.load_state_dict({k: v for k, v in sd.items() if k in own}, strict=False)
    if result.unexpected_keys:  # pragma: no cover - excluded above
        raise WeightsMismatchError(
            f"Error(s) in loading state_dict for {type(model).__name__}: unexpected keys "
            f"{result.unexpected_keys}",
            [],
            list(result.unexpected_keys),
        )
    logger.info("dsguard: loaded %d tensors into %s from %s", len(sd), type(model).__name__, source)
