"""Synthetic but realistic training output: HF Trainer / DeepSpeed INFO logs, tqdm ``\\r``
redraws, torch ``[rankN]:`` prefixes, NCCL INFO, warnings, occasional tracebacks, one OOM.

Every record ends with exactly one terminator (``\\n``, or ``\\r`` for a tqdm redraw) and none
starts with ``\\n``, so the number of records is exactly the number of lines the classifier
counts (``\\n``, ``\\r`` and ``\\r\\n`` each end one line). Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.children import OOM_LINE, TRACEBACK_HEAD

_BLOCKS = " ▏▎▍▌▋▊▉█"
_KINDS = (
    # (name, weight): shares of records in a steady-state multi-rank fine-tune's output
    ("tqdm", 0.55),
    ("rank", 0.12),
    ("nccl", 0.08),
    ("ds_step", 0.07),
    ("ds_timer", 0.07),
    ("hf_loss", 0.03),
    ("hf_info", 0.03),
    ("warning", 0.03),  # two records: the warning and "  warnings.warn("
    ("overflow", 0.01),
    ("see_memory", 0.005),  # healthy line that hits the "memory" trigger
    ("stage3", 0.004),  # healthy line that hits the "memory" trigger
    ("wandb", 0.001),  # healthy line that hits the "rror" trigger
)
#: a harmless traceback (DataLoader teardown noise) every this many records
TRACEBACK_EVERY = 200_000
_TEARDOWN_TRACEBACK = (
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1b9e40>",
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
    "line 1479, in __del__",
    "    self._shutdown_workers()",
    '  File "/opt/conda/lib/python3.11/multiprocessing/process.py", line 160, in is_alive',
    "    assert self._parent_pid == os.getpid(), 'can only test a child process'",
    "AssertionError: can only test a child process",
)


@dataclass(frozen=True, slots=True)
class Synth:
    text: str
    lines: int  # records == classifier lines
    oom_lines: int  # CUDA OOM lines in it (fatal evidence expected)
    tracebacks: int

    @property
    def data(self) -> bytes:
        return self.text.encode()


def _ts(i: int) -> str:
    s = i // 50
    return f"2026-11-22 {2 + s // 3600 % 20:02d}:{s // 60 % 60:02d}:{s % 60:02d},{i * 7 % 1000:03d}"


def _bar(step: int, total: int) -> str:
    frac = step / total
    filled = frac * 10
    full = int(filled)
    part = _BLOCKS[int((filled - full) * 8)] if full < 10 else ""
    bar = ("█" * full + part).ljust(10)
    elapsed = step * 7 // 10
    left = (total - step) * 7 // 10
    return (
        f"{int(frac * 100):3d}%|{bar}| {step}/{total} "
        f"[{elapsed // 60:02d}:{elapsed % 60:02d}<{left // 60:02d}:{left % 60:02d}, "
        f"{1.4 + (step % 7) / 100:.2f}it/s]"
    )


def _record(kind: str, i: int, rng: random.Random) -> list[str]:
    step = i // 20 + 1
    ts = _ts(i)
    if kind == "tqdm":
        total = 16260
        return [_bar(step % total, total) + "\r"]
    if kind == "rank":
        r = rng.randrange(8)
        body = rng.choice(
            (
                f"[{ts}] [INFO] [logging.py:128:log_dist] [Rank {r}] step={step}, skipped=0, "
                f"lr=[1.98e-05], mom=[(0.9, 0.999)]",
                f"{{'loss': {1 + (i % 997) / 1000:.4f}, 'grad_norm': {(i % 89) / 100:.4f}, "
                f"'learning_rate': 1.98e-05, 'epoch': {step / 16260:.2f}}}",
                f"[W1122 02:13:45.{i % 999999:06d} ProcessGroupNCCL.cpp:4115] Warning: "
                "TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives.",
            )
        )
        return [f"[rank{r}]:{body}\n"]
    if kind == "nccl":
        r = rng.randrange(8)
        return [
            f"node01:{41000 + r}:{41100 + r} [{r}] NCCL INFO Channel {i % 32:02d}/0 : "
            f"{r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/IPC/read\n"
        ]
    if kind == "ds_step":
        return [
            f"[{ts}] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, skipped=0, "
            f"lr=[1.98e-05], mom=[(0.9, 0.999)]\n"
        ]
    if kind == "ds_timer":
        return [
            f"[{ts}] [INFO] [timer.py:264:stop] epoch=0/micro_step={2 * step}/global_step="
            f"{step}, RunningAvgSamplesPerSec=45.{i % 100:02d}, CurrSamplesPerSec=44.83, "
            f"MemAllocated=12.3GB, MaxMemAllocated=20.12GB\n"
        ]
    if kind == "hf_loss":
        return [
            f"{{'loss': {1 + (i % 997) / 1000:.4f}, 'grad_norm': {(i % 89) / 100:.4f}, "
            f"'learning_rate': 1.98e-05, 'epoch': {step / 16260:.2f}}}\n"
        ]
    if kind == "hf_info":
        return [
            f"[INFO|trainer.py:3705] {ts} >> Saving model checkpoint to outputs/checkpoint-{step}\n"
        ]
    if kind == "warning":
        return [
            "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: UserWarning: "
            "None of the inputs have requires_grad=True. Gradients will be None\n",
            "  warnings.warn(\n",
        ]
    if kind == "overflow":
        return [
            f"[{ts}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
            "Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
        ]
    if kind == "see_memory":
        return [
            f"[{ts}] [INFO] [utils.py:781:see_memory_usage] MA 12.3 GB         Max_MA 14.2 GB"
            "         CA 15.0 GB         Max_CA 15 GB \n"
        ]
    if kind == "stage3":
        return [
            f"[{ts}] [WARNING] [stage3.py:2139:step] 4 pytorch allocator cache flushes since "
            "last step. this happens when there is high memory pressure and is detrimental to "
            "performance. if this is happening frequently consider adjusting settings to reduce "
            "memory consumption.\n"
        ]
    return ["wandb: Network error (ReadTimeout), entering retry loop.\n"]


def synth(n_lines: int, *, seed: int = 0, failures: bool = True, ansi_every: int = 0) -> Synth:
    """``n_lines`` records of realistic output.

    Args:
        failures: include a harmless teardown traceback every 200,000 records and one
            ``[rank3]:``-prefixed CUDA OOM traceback at 90 % of the stream.
        ansi_every: colour every N-th record's head with ANSI codes (0: none).
    """
    rng = random.Random(seed)
    names = [k for k, _ in _KINDS]
    weights = [w for _, w in _KINDS]
    kinds = rng.choices(names, weights, k=n_lines)
    out: list[str] = []
    oom_at = int(n_lines * 0.9) if failures else -1
    tracebacks = 0
    for i, kind in enumerate(kinds):
        if len(out) >= n_lines:
            break
        if failures and i and i % TRACEBACK_EVERY == 0:
            out.extend(line + "\n" for line in _TEARDOWN_TRACEBACK)
            tracebacks += 1
        if i == oom_at:
            out.extend(f"[rank3]: {line}\n" for line in (*TRACEBACK_HEAD, OOM_LINE))
            tracebacks += 1
        recs = _record(kind, i, rng)
        if ansi_every and i % ansi_every == 0:
            recs[0] = "\x1b[32m" + recs[0][:6] + "\x1b[0m" + recs[0][6:]
        out.extend(recs)
    del out[n_lines:]
    oom = sum(1 for line in out if "CUDA out of memory" in line)
    return Synth(text="".join(out), lines=len(out), oom_lines=oom, tracebacks=tracebacks)


def count_lines(text: str) -> int:
    """Line ends as the classifier counts them: each \\n, each \\r, \\r\\n once."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")
