"""A plain DeepSpeed training loop that reads its knobs from its own config file (issue 14).

The shape users run without the HF Trainer: ``python ds_config_loop.py --config config.json
--out OUT`` with ``{"training": {"batch_size": B, "gradient_accumulation_steps": A,
"max_length": L}}`` in ``config.json``; the script builds its DeepSpeed config from those
numbers, calls ``deepspeed.initialize``, and saves with ``engine.save_checkpoint(OUT)``
(``OUT/global_stepN/`` and ``OUT/latest``), resuming itself from ``latest`` when it exists.
No flag for any knob: dsguard can only reach them through the config file. With
``--deepspeed_config PATH`` the micro-batch and accumulation come from that DeepSpeed config
instead (``deepspeed.initialize(config=PATH)``), the way scripts that take DeepSpeed's own
``--deepspeed_config`` argument do.

Host memory: from step ``--alloc_from_step`` on, every micro-batch holds ``batch_size x
max_length x --kib_per_token`` KiB of activations in a real tensor, so under the job's
RLIMIT_AS (``resources.host_memory_limit``) too large a micro-batch fails with torch's own
``DefaultCPUAllocator: can't allocate memory``.

``--trace FILE`` appends one JSON line per start and per optimizer step (the knobs seen, the
sample ids consumed), so a test can check the global batch and the data order.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import deepspeed
import torch

N_SAMPLES = 64
DIM = 16


def trace(path: str | None, **record: object) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max_steps", type=int, default=6)
    p.add_argument("--kib_per_token", type=int, default=0)
    p.add_argument("--alloc_from_step", type=int, default=0)
    p.add_argument("--trace")
    p.add_argument("--deepspeed_config", help="take micro-batch and accumulation from here")
    args = p.parse_args()
    training = json.loads(Path(args.config).read_text())["training"]
    max_length = int(training["max_length"])
    ds_config: dict[str, object] | str
    if args.deepspeed_config:
        ds_config = args.deepspeed_config  # DeepSpeed reads the file itself
    else:
        ds_config = {
            "train_micro_batch_size_per_gpu": int(training["batch_size"]),
            "gradient_accumulation_steps": int(training["gradient_accumulation_steps"]),
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_optimization": {"stage": 0},
        }
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.Tanh(), torch.nn.Linear(DIM, 1))
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config
    )
    micro = engine.train_micro_batch_size_per_gpu()
    accum = engine.gradient_accumulation_steps()
    step = 0
    if (Path(args.out) / "latest").is_file():
        _, client = engine.load_checkpoint(args.out)
        step = int((client or {}).get("step", engine.global_steps))
    trace(args.trace, event="start", micro=micro, accum=accum, max_length=max_length,
          resume_step=step, config=args.config, ds_config=args.deepspeed_config,
          ds_micro=engine.train_micro_batch_size_per_gpu(),
          ds_accum=engine.gradient_accumulation_steps())  # fmt: skip
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(N_SAMPLES, DIM, generator=g)
    ys = xs.sum(dim=1, keepdim=True).tanh()
    per_step = micro * accum
    while step < args.max_steps:
        first = (step * per_step) % N_SAMPLES
        for m in range(accum):
            lo = first + m * micro
            ids = [(lo + i) % N_SAMPLES for i in range(micro)]
            if args.kib_per_token and step >= args.alloc_from_step:
                # Activations that scale with the micro-batch: the real host-memory failure.
                held = torch.empty(micro * max_length * args.kib_per_token * 256)
                del held
            loss = torch.nn.functional.mse_loss(engine(xs[ids]), ys[ids])
            engine.backward(loss)
            engine.step()
        step += 1
        trace(args.trace, event="step", step=step, first_sample=first, samples=per_step,
              pid=os.getpid())  # fmt: skip
        if step % 2 == 0:
            engine.save_checkpoint(args.out, client_state={"step": step})
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
