"""``DsguardCallback``: the HF Trainer side of dsguard's protocol, added with one line.

    trainer.add_callback(DsguardCallback())

Why: from outside, the supervisor can only see output and exit codes. Inside the process the
callback can tell it (1) that training is alive and where it is (per-rank heartbeat files:
step, loss, memory peaks, last checkpoint), (2) what this script can do (capabilities), and it
can (3) stop training *with* a complete checkpoint when asked, and (4) cap the GPU memory the
process may take. Everything follows :mod:`dsguard.protocol`; when ``DSGUARD_HEARTBEAT_DIR``
is unset (not running under dsguard) the callback does nothing at all.

Rules this code keeps (docs/resuming.md, section 5):

* Heartbeats are per rank, written atomically (``mkstemp`` in the same dir + ``os.replace``),
  with no collectives and no locks; a failing write (disk full, permissions) is logged once
  and never interrupts training.
* Save-and-stop is decided identically on every rank: rank 0 looks for the request file
  every k steps and the flag is all-reduced at the same step on all ranks. A per-rank file
  poll could let ranks see the request at different steps and deadlock the collective
  (DeepSpeed) save.
* The callback runs after ``DefaultFlowCallback``, so setting ``should_save`` and
  ``should_training_stop`` in ``on_step_end`` makes the Trainer write ``checkpoint-N`` and then
  leave the loop; ``train()`` returns normally and the script exits 0.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from dsguard import protocol

logger = logging.getLogger(__name__)

BASE_CAPABILITIES: tuple[str, ...] = (
    protocol.CAP_HEARTBEAT,
    protocol.CAP_SAVE_AND_STOP,
    protocol.CAP_GPU_MEMORY_FRACTION,
)
#: What the reference trainer adds (it honours DSGUARD_INIT_FROM and installs the transplant).
REFERENCE_TRAINER_CAPABILITIES: tuple[str, ...] = (
    protocol.CAP_ZERO_TRANSPLANT,
    protocol.CAP_INIT_FROM,
)


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        logger.warning("dsguard: ignoring %s=%r (not an integer)", name, raw)
        return default


class DsguardCallback(TrainerCallback):
    """Heartbeats, save-and-stop and the GPU memory cap for any HF ``Trainer``.

    ``reference_trainer`` announces the capabilities of :mod:`dsguard.train` (ZeRO transplant,
    init-from); other scripts should leave it False unless they implement both.
    ``stop_check_every`` is how often (optimizer steps) rank 0 looks for a stop request and
    all ranks agree on it; by default ``DSGUARD_HEARTBEAT_EVERY``. ``env`` is for tests.
    """

    def __init__(
        self,
        *,
        reference_trainer: bool = False,
        extra_capabilities: Iterable[str] = (),
        stop_check_every: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self._env = env
        hb_dir = env.get(protocol.HEARTBEAT_DIR_ENV, "").strip()
        ctl_dir = env.get(protocol.CONTROL_DIR_ENV, "").strip()
        self.enabled = bool(hb_dir)
        self.heartbeat_dir: Path | None = Path(hb_dir) if hb_dir else None
        self.control_dir: Path | None = Path(ctl_dir) if (ctl_dir and self.enabled) else None
        self.attempt = _env_int(env, protocol.ATTEMPT_ENV, 0)
        self.every = max(1, _env_int(env, protocol.HEARTBEAT_EVERY_ENV, 1))
        self.stop_check_every = max(1, stop_check_every or self.every)
        caps = list(BASE_CAPABILITIES)
        if reference_trainer:
            caps += REFERENCE_TRAINER_CAPABILITIES
        caps += [c for c in extra_capabilities if c not in caps]
        self.capabilities: tuple[str, ...] = tuple(caps)
        #: True once a stop request was honoured (the script should skip its final save).
        self.stop_requested = False
        self._rank = _env_int(env, "RANK", 0)
        self._local_rank = _env_int(env, "LOCAL_RANK", 0)
        self._last_loss: float | None = None
        #: The first logged metric that turned NaN/inf, and the step it was logged at.
        self._nonfinite: str | None = None
        self._nonfinite_step: int | None = None
        self._last_checkpoint: str | None = None
        self._write_failed = False
        self._history_n = 0
        self._gpu_fraction: float | None = None
        self._gpu_fraction_applied = False
        if self.enabled:
            raw = env.get(protocol.GPU_MEMORY_FRACTION_ENV, "").strip()
            if raw:
                try:
                    fraction = float(raw)
                except ValueError:
                    fraction = -1.0
                if 0.0 < fraction <= 1.0:
                    self._gpu_fraction = fraction
                else:
                    logger.warning(
                        "dsguard: ignoring %s=%r (want 0 < f <= 1)",
                        protocol.GPU_MEMORY_FRACTION_ENV,
                        raw,
                    )
            # As early as possible: before the model is moved to the GPU, when the script
            # constructs the callback before the Trainer.
            self._apply_gpu_memory_fraction()

    # -- GPU memory cap ------------------------------------------------------------------------

    def _apply_gpu_memory_fraction(self) -> None:
        if self._gpu_fraction is None or self._gpu_fraction_applied:
            return
        if not torch.cuda.is_available():
            return
        self._gpu_fraction_applied = True
        try:
            count = torch.cuda.device_count()
            device = self._local_rank if self._local_rank < count else torch.cuda.current_device()
            torch.cuda.set_per_process_memory_fraction(self._gpu_fraction, device)
            logger.info("dsguard: GPU %d capped at %.3f of its memory", device, self._gpu_fraction)
        except Exception as exc:  # a cap that cannot be set must not stop training
            logger.warning("dsguard: could not cap GPU memory: %s", exc)

    # -- heartbeat -----------------------------------------------------------------------------

    def _memory(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {
            "max_memory_allocated_bytes": None,
            "max_memory_reserved_bytes": None,
            "num_alloc_retries": None,
            "num_ooms": None,
            "host_rss_bytes": None,
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            stats = torch.cuda.memory_stats()
            out["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            out["max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
            out["num_alloc_retries"] = int(stats.get("num_alloc_retries", 0))
            out["num_ooms"] = int(stats.get("num_ooms", 0))
        import psutil

        out["host_rss_bytes"] = int(psutil.Process().memory_info().rss)
        return out

    def _write(self, state: TrainerState, event: str) -> None:
        if self.heartbeat_dir is None:
            return
        try:
            mem = self._memory()
            beat = protocol.Heartbeat(
                attempt=self.attempt,
                rank=self._rank,
                pid=os.getpid(),
                time_s=time.time(),
                event=event,
                global_step=int(state.global_step),
                max_steps=int(state.max_steps) if state.max_steps else None,
                loss=self._last_loss,
                epoch=None if state.epoch is None else float(state.epoch),
                max_memory_allocated_bytes=mem["max_memory_allocated_bytes"],
                max_memory_reserved_bytes=mem["max_memory_reserved_bytes"],
                num_alloc_retries=mem["num_alloc_retries"],
                num_ooms=mem["num_ooms"],
                host_rss_bytes=mem["host_rss_bytes"],
                last_checkpoint=self._last_checkpoint,
                capabilities=self.capabilities,
                nonfinite=self._nonfinite,
                nonfinite_step=self._nonfinite_step,
            )
            path = protocol.heartbeat_path(self.heartbeat_dir, self.attempt, self._rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(protocol.encode_heartbeat(beat))
                os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from other readers
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self._append_history(beat)
        except Exception as exc:  # never let reporting kill training
            if not self._write_failed:
                self._write_failed = True
                logger.warning(
                    "dsguard: heartbeat write failed (%s); training continues, "
                    "further failures are not logged",
                    exc,
                )

    def _append_history(self, beat: protocol.Heartbeat) -> None:
        """One line per heartbeat in the rank's history file (the loss curve of the report).
        One ``os.write`` on an O_APPEND descriptor: a reader never sees half a line from
        this writer. A failure is the caller's (logged once, training goes on)."""
        assert self.heartbeat_dir is not None
        self._history_n += 1
        every = protocol.HISTORY_OTHER_RANKS_EVERY
        if self._rank != 0 and beat.event == "step" and self._history_n % every != 1:
            return
        path = protocol.heartbeat_history_path(self.heartbeat_dir, self.attempt, self._rank)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, protocol.encode_history_line(beat))
        finally:
            os.close(fd)

    # -- save-and-stop -------------------------------------------------------------------------

    def _stop_wanted(self) -> bool:
        """Rank 0's view of the request file, agreed on by all ranks (collective)."""
        assert self.control_dir is not None
        local = 0
        if self._rank == 0:
            try:
                local = int(protocol.stop_request_path(self.control_dir, self.attempt).exists())
            except OSError:
                local = 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            backend = str(dist.get_backend())
            use_cuda = backend == "nccl" and torch.cuda.is_available()
            device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else None
            flag = torch.tensor([local], dtype=torch.int32, device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item())
        return bool(local)

    # -- TrainerCallback events ----------------------------------------------------------------

    def on_init_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self._rank = _env_int(self._env, "RANK", int(args.process_index))
        self._local_rank = _env_int(self._env, "LOCAL_RANK", int(args.local_process_index))
        self._apply_gpu_memory_fraction()

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self._rank = _env_int(self._env, "RANK", int(args.process_index))
        self._write(state, "train_begin")

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and isinstance(logs.get("loss"), int | float):
            self._last_loss = float(logs["loss"])
        if logs and self._nonfinite is None:
            for key in ("loss", "grad_norm"):
                value = logs.get(key)
                if isinstance(value, int | float) and not math.isfinite(value):
                    # A diverged run trains on for hours and may even exit 0: say so now
                    # (JSON has no NaN, so the loss field alone cannot carry it).
                    self._nonfinite, self._nonfinite_step = key, int(state.global_step)
                    if self.enabled:
                        self._write(state, "diverged")
                    break

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if not self.enabled:
            return
        step = int(state.global_step)
        if step % self.every == 0:
            self._write(state, "step")
        if (
            self.control_dir is not None
            and not self.stop_requested
            and step % self.stop_check_every == 0
            and self._stop_wanted()
        ):
            self.stop_requested = True
            control.should_save = True
            control.should_training_stop = True
            logger.warning("dsguard: stop requested; saving checkpoint-%d and stopping", step)
            self._write(state, "stop_requested")

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if not self.enabled:
            return
        self._last_checkpoint = os.path.abspath(
            os.path.join(args.output_dir or ".", f"checkpoint-{state.global_step}")
        )
        self._write(state, "save")

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self._write(state, "train_end")
