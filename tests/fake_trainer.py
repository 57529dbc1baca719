"""A scripted stand-in for an HF Trainer script, run as a real child process by the e2e tests.

It takes the HF flag names of the job contract, "trains" (one optimizer step consumes the
samples ``[step*G, (step+1)*G)`` with ``G = micro x accum``, the order a seeded sampler would
give them for a fixed global batch), writes HF-layout checkpoints (safetensors with a real
header, torch-style zip archives, ``trainer_state.json`` last, as HF does), and fails on
purpose by scenario with the real message formats. Every start and step is appended to a
JSONL trace so tests can check what the supervisor really made it do.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
    "has 78.12 GiB memory in use. Of the allocated memory 75.80 GiB is allocated by PyTorch, and "
    "1.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
TRACEBACK_HEAD = (
    "Traceback (most recent call last):\n"
    '  File "/home/user/train.py", line 88, in <module>\n'
    "    trainer.train()\n"
    '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2245, '
    "in train\n"
    "    return inner_training_loop(\n"
    '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2556, '
    "in _inner_training_loop\n"
    "    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)\n"
)


def hf_bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text}")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--per_device_train_batch_size", type=int, default=8)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--output_dir", required=True)
    p.add_argument("--resume_from_checkpoint")
    p.add_argument("--deepspeed")
    p.add_argument("--model_max_length", type=int)
    p.add_argument("--gradient_checkpointing", type=hf_bool, default=False)
    p.add_argument("--dataloader_num_workers", type=int, default=0)
    p.add_argument("--dataloader_pin_memory", type=hf_bool, default=True)
    p.add_argument("--lora_enable", type=hf_bool, default=False)
    p.add_argument("--max_steps", type=int, default=6)
    p.add_argument("--save_steps", type=int, default=2)
    p.add_argument("--step_s", type=float, default=0.01)
    p.add_argument("--trace", required=True)
    p.add_argument("--scenario", default="ok")
    p.add_argument("--oom_above", type=int, default=1 << 30, help="micro > this OOMs")
    p.add_argument("--fail_at_step", type=int, default=3)
    p.add_argument("--oom_then", choices=["hang", "exit"], default="hang")
    p.add_argument("--truncate_at_step", type=int, default=4)
    p.add_argument("--flood_mb", type=int, default=0)
    p.add_argument("--rank_prefix", default="")
    p.add_argument("--exclusive_lock", help="flock this file; a second trainer exits 3")
    p.add_argument("--fail_attempts", type=int, default=1 << 30, help="fail only if attempt <= N")
    p.add_argument("--save_s", type=float, default=0.0, help="a checkpoint save takes this long")
    p.add_argument(
        "--alloc_mb_per_sample", type=int, default=0,
        help="really allocate micro x this many MiB of host memory (hits a real RLIMIT_AS)",
    )  # fmt: skip
    return p.parse_args()


def trace(args: argparse.Namespace, **record: object) -> None:
    with open(args.trace, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def write_safetensors(path: Path, n_floats: int = 16) -> None:
    header = {"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * n_floats))


def write_torch_zip(path: Path, payload: bytes = b"\x80\x02}q\x00.") -> None:
    # torch.save writes a zip archive: <name>/data.pkl, <name>/data/0, <name>/version.
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/data/0", b"\0" * 64)
        zf.writestr("archive/version", b"3\n")


def save_checkpoint(args: argparse.Namespace, step: int, *, truncate: bool = False) -> Path:
    ckpt = Path(args.output_dir) / f"checkpoint-{step}"
    ckpt.mkdir(parents=True, exist_ok=True)
    write_safetensors(ckpt / "model.safetensors")
    for name in ("optimizer.pt", "scheduler.pt", "training_args.bin", "rng_state.pth"):
        write_torch_zip(ckpt / name)
    if truncate:
        # The save died mid-write of the weights (disk full, OOM during gather): the file is
        # 4 bytes short; HF would still have gone on to write trainer_state.json only if it
        # had not crashed -- here it did write it, the worst case for a naive "latest" pick.
        data = (ckpt / "model.safetensors").read_bytes()
        (ckpt / "model.safetensors").write_bytes(data[:-4])
    state = {
        "global_step": step,
        "max_steps": args.max_steps,
        "save_steps": args.save_steps,
        "train_batch_size": args.per_device_train_batch_size,
        "log_history": [],
    }
    (ckpt / "trainer_state.json").write_text(json.dumps(state))  # last, as HF does
    return ckpt


def heartbeat(args: argparse.Namespace, event: str, step: int) -> None:
    """What dsguard's HF callback does, in miniature: announce capabilities and progress."""
    hb_dir = os.environ.get("DSGUARD_HEARTBEAT_DIR")
    if not hb_dir or "heartbeat" not in args.scenario:
        return
    attempt = int(os.environ.get("DSGUARD_ATTEMPT", "0"))
    Path(hb_dir).mkdir(parents=True, exist_ok=True)
    path = Path(hb_dir) / f"attempt-{attempt}-rank-0.json"
    record = {
        "attempt": attempt, "rank": 0, "pid": os.getpid(), "time_s": time.time(),
        "event": event, "global_step": step, "loss": 1.0 / max(step, 1),
        "capabilities": ["heartbeat", "save_and_stop"],
    }  # fmt: skip
    with open("/proc/self/statm", encoding="ascii") as f:  # real resident memory
        record["host_rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    with open(path.with_suffix(".jsonl"), "a", encoding="utf-8") as f:  # the history
        f.write(json.dumps(record) + "\n")


def stop_requested() -> bool:
    control = os.environ.get("DSGUARD_CONTROL_DIR")
    attempt = os.environ.get("DSGUARD_ATTEMPT", "0")
    return control is not None and (Path(control) / f"stop-attempt-{attempt}.json").exists()


BUILD_FAILURE = """Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...
Creating extension directory /root/.cache/torch_extensions/py311_cpu/cpu_adam...
Building extension module cpu_adam...
Allowing ninja to set a default number of workers... (overridable by setting MAX_JOBS=N)
[1/3] c++ -MMD -MF cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -c cpu_adam.cpp -o cpu_adam.o
FAILED: cpu_adam.o
csrc/adam/cpu_adam.cpp:12:10: fatal error: omp.h: No such file or directory
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "/home/user/train.py", line 88, in <module>
    trainer.train()
RuntimeError: Error building extension 'cpu_adam'"""


def build_error_unless_torch_adam(args: argparse.Namespace) -> None:
    """DeepSpeedCPUAdam JIT-builds cpu_adam; DeepSpeed's torch_adam switch avoids it."""
    cfg = json.loads(Path(args.deepspeed).read_text()) if args.deepspeed else {}
    if (cfg.get("optimizer") or {}).get("params", {}).get("torch_adam"):
        return
    print(BUILD_FAILURE, file=sys.stderr, flush=True)
    sys.exit(1)


def oom(args: argparse.Namespace) -> None:
    prefix = args.rank_prefix
    for line in TRACEBACK_HEAD.splitlines():
        print(prefix + line, file=sys.stderr)
    print(prefix + CUDA_OOM, file=sys.stderr, flush=True)
    if args.oom_then == "hang":
        # Like the surviving ranks in an NCCL collective: never exits on its own.
        while True:
            time.sleep(3600)
    sys.exit(1)


def main() -> int:
    args = parse()
    scenarios = set(args.scenario.split(","))
    attempt = int(os.environ.get("DSGUARD_ATTEMPT", "0"))
    micro, accum = args.per_device_train_batch_size, args.gradient_accumulation_steps
    start = 0
    if args.resume_from_checkpoint:
        state = json.loads((Path(args.resume_from_checkpoint) / "trainer_state.json").read_text())
        start = int(state["global_step"])
    if args.exclusive_lock:
        lock_fd = os.open(args.exclusive_lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            trace(args, event="two_trainers", attempt=attempt, pid=os.getpid())
            print("TWO TRAINERS AT ONCE", file=sys.stderr)
            return 3
    current = {"step": start}
    if "save_on_sigterm" in scenarios:

        def on_term(_sig: int, _frame: object) -> None:
            # Like transformers' JIT checkpoint: save the current step, then exit 0.
            time.sleep(args.save_s)
            save_checkpoint(args, current["step"])
            trace(args, event="saved_on_sigterm", step=current["step"])
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_term)
    if "build_error" in scenarios:
        build_error_unless_torch_adam(args)
    heartbeat(args, "train_begin", start)
    trace(
        args, event="start", attempt=attempt, pid=os.getpid(), micro=micro, accum=accum,
        resume=args.resume_from_checkpoint, start_step=start, argv=sys.argv[1:],
        gradient_checkpointing=args.gradient_checkpointing, max_length=args.model_max_length,
        deepspeed=args.deepspeed, output_dir=args.output_dir,
    )  # fmt: skip
    print(f"***** Running training *****  micro={micro} accum={accum} start_step={start}")

    if "children" in scenarios:
        # A helper child in our session and a daemon-like one in a session of its own; both
        # must be ended with the attempt (the latter is found by the marker variable).
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
    if args.flood_mb:
        line = ("x" * 99 + "\n").encode()
        chunk = line * 10000
        out = sys.stdout.buffer
        for _ in range(args.flood_mb):
            out.write(chunk)
        out.flush()

    if args.alloc_mb_per_sample:
        # A real allocation: under RLIMIT_AS this raises a real MemoryError.
        activations = bytearray(micro * args.alloc_mb_per_sample * 1024 * 1024)
        activations[::4096] = b"\1" * len(activations[::4096])
    global_batch = micro * accum
    failing = attempt <= args.fail_attempts
    for step in range(start + 1, args.max_steps + 1):
        if "hang" in scenarios and failing and step >= args.fail_at_step:
            while True:  # silent, like a rank stuck in a collective
                time.sleep(3600)
        if "oom" in scenarios and failing and micro > args.oom_above and step >= args.fail_at_step:
            oom(args)
        if "user_error" in scenarios and step >= args.fail_at_step:
            raise KeyError("labels")
        if "sigkill" in scenarios and failing and step >= args.fail_at_step:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args.step_s)
        current["step"] = step
        ids = [(step - 1) * global_batch, step * global_batch - 1]
        trace(args, event="step", step=step, micro=micro, accum=accum, sample_ids=ids)
        print(f"\r{step}/{args.max_steps} [loss={1.0 / step:.4f}]", end="", flush=True)
        heartbeat(args, "step", step)
        if stop_requested():
            time.sleep(args.save_s)
            save_checkpoint(args, step)
            heartbeat(args, "stop_requested", step)
            trace(args, event="saved_on_request", step=step)
            return 0
        if step % args.save_steps == 0:
            bad = "truncate_ckpt" in scenarios and step == args.truncate_at_step and attempt <= 1
            save_checkpoint(args, step, truncate=bad)
            if bad:
                oom(args)
    print("\ntraining finished")
    trace(args, event="end", attempt=attempt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
