"""An accelerate ``save_state`` training loop, the shape users write without HF Trainer.

``Accelerator.save_state(out/step_N)`` every ``--save_every`` optimizer steps; resuming is
the script's own ``--resume_from PATH`` (``load_state``, then the data position skipped with
``skip_first_batches``). Every start appends one JSON line per process to ``--record``.

The failure is real host memory: from step ``--grow_at_step`` on, each micro-batch holds a
buffer of ``--mib_per_sample`` MiB per sample (untouched, so address space, not RSS), which
``RLIMIT_AS`` (dsguard's ``resources.host_memory_limit``) refuses at a large micro-batch
with torch's own ``DefaultCPUAllocator: can't allocate memory``. ``--tear_newest_on_fail``
then cuts the newest save's ``random_states_0.pkl`` in half, a save torn by the crash.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--save_every", type=int, default=2)
    p.add_argument("--per_device_train_batch_size", type=int, default=4)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--resume_from")
    p.add_argument("--grow_at_step", type=int, default=0)
    p.add_argument("--mib_per_sample", type=int, default=1024)
    p.add_argument("--tear_newest_on_fail", action="store_true")
    p.add_argument("--record", default="record.jsonl")
    args = p.parse_args()
    micro, accum = args.per_device_train_batch_size, args.gradient_accumulation_steps

    acc = Accelerator(gradient_accumulation_steps=accum)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
    # A plain tensor is a map-style dataset at run time; torch's stubs want a Dataset.
    dl: Any = torch.utils.data.DataLoader(data, batch_size=micro, shuffle=False)  # type: ignore[arg-type]
    model, opt, dl = acc.prepare(model, opt, dl)
    step = 0
    if args.resume_from:
        acc.load_state(args.resume_from)
        m = re.search(r"(\d+)$", args.resume_from.rstrip("/"))
        step = int(m.group(1)) if m else 0
        dl = acc.skip_first_batches(dl, step * accum)
    rec = {
        "loaded": None if not args.resume_from else Path(args.resume_from).name,
        "start_step": step, "micro": micro, "accum": accum,
        "world_size": acc.num_processes, "rank": acc.process_index,
        "attempt": os.environ.get("DSGUARD_ATTEMPT"),
    }  # fmt: skip
    with open(args.record, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    out = Path(args.out)
    newest: Path | None = None
    for batch in dl:
        with acc.accumulate(model):
            if args.grow_at_step and step + 1 >= args.grow_at_step:
                try:
                    held = torch.empty(micro * args.mib_per_sample << 20, dtype=torch.uint8)
                except RuntimeError:
                    if args.tear_newest_on_fail and newest is not None:
                        rs = newest / "random_states_0.pkl"
                        rs.write_bytes(rs.read_bytes()[: rs.stat().st_size // 2])
                    raise
                del held
            loss = model(batch).pow(2).mean()
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        if acc.sync_gradients:
            step += 1
            if step % args.save_every == 0:
                newest = out / f"step_{step}"
                acc.save_state(str(newest))
            if step >= args.steps:
                break
    acc.wait_for_everyone()
    print(f"done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
