"""A plain DeepSpeed training loop, the shape users run without HF Trainer.

``deepspeed.initialize`` from a config file, ``engine.save_checkpoint(out)`` every
``--save_every`` optimizer steps (``out/global_stepN/`` + ``out/latest``) and, at start,
``engine.load_checkpoint(out)``: the script resumes itself from whatever ``latest`` names,
with no resume flag. Every start appends one JSON line to ``--record`` (the tag it loaded and
the step it resumed at), which is what the tests compare.

``--oom_at_micro M`` makes every attempt whose micro-batch is at least M fail with a CUDA OOM
line after its second save, the way a real OOM ends a run; ``--tear_newest_on_oom`` first cuts
that save's optimizer shard in half (``latest`` already names it): a torn newest tag next to
a complete older one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import deepspeed
import torch


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--save_every", type=int, default=2)
    p.add_argument("--per_device_train_batch_size", type=int)
    p.add_argument("--gradient_accumulation_steps", type=int)
    p.add_argument("--oom_at_micro", type=int, default=0)
    p.add_argument("--tear_newest_on_oom", action="store_true")
    p.add_argument("--record", default="record.jsonl")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=args.deepspeed
    )
    out = Path(args.out)
    load_path, _ = engine.load_checkpoint(str(out))
    start = engine.global_steps
    rec = {
        "loaded": None if load_path is None else Path(load_path).parent.name,
        "start_step": start,
        "micro": engine.train_micro_batch_size_per_gpu(),
        "accum": engine.gradient_accumulation_steps(),
        "world_size": engine.world_size,
        "attempt": os.environ.get("DSGUARD_ATTEMPT"),
    }
    with open(args.record, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(f"resumed from {rec['loaded']} at step {start}", flush=True)

    g = torch.Generator().manual_seed(1)
    micro = engine.train_micro_batch_size_per_gpu()
    while engine.global_steps < args.steps:
        for _ in range(engine.gradient_accumulation_steps()):
            x = torch.randn(micro, 8, generator=g)
            loss = model_loss(engine, x)
            engine.backward(loss)
            engine.step()
        step = engine.global_steps
        if step % args.save_every == 0:
            engine.save_checkpoint(str(out))
            if args.oom_at_micro and micro >= args.oom_at_micro and step > args.save_every:
                if args.tear_newest_on_oom:  # this save's optimizer shard lost its tail
                    shard = out / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
                    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
                print(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
    print("done", flush=True)
    return 0


def model_loss(engine: deepspeed.DeepSpeedEngine, x: torch.Tensor) -> torch.Tensor:
    loss: torch.Tensor = engine(x).pow(2).mean()
    return loss


if __name__ == "__main__":
    sys.exit(main())
