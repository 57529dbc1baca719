"""A plain torch loop configured only by ``key=value`` overrides (issue 14), the way Hydra,
OmegaConf, LLaMA-Factory and torchtune take them: ``python dotlist_loop.py
training.batch_size=4 training.accum=1 data.max_len=64 data.packing=true --out DIR``.

Texts are *packed*: the corpus is one token stream cut into ``data.max_len`` chunks, so a
different ``max_len`` is a different dataset (the chunk boundaries move). Each micro-batch
holds ``batch_size x max_len x --kib_per_token`` KiB of activations in a real tensor, so under
the job's RLIMIT_AS too long a sequence fails with torch's own ``DefaultCPUAllocator: can't
allocate memory``. Unknown ``key=value`` overrides are refused, as OmegaConf's strict mode
does. ``--trace FILE`` appends one JSON line per start and per optimizer step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

KNOWN = {"training.batch_size": 4, "training.accum": 1, "data.max_len": 64, "data.packing": "false"}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--max_steps", type=int, default=4)
    p.add_argument("--kib_per_token", type=int, default=0)
    p.add_argument("--trace")
    args, overrides = p.parse_known_args()
    cfg: dict[str, object] = dict(KNOWN)
    for item in overrides:
        key, eq, value = item.lstrip("+").partition("=")
        if not eq or key not in KNOWN:
            raise SystemExit(f"error: unknown override {item!r}")
        cfg[key] = value
    micro, accum = int(str(cfg["training.batch_size"])), int(str(cfg["training.accum"]))
    max_len = int(str(cfg["data.max_len"]))
    stream = torch.arange(4096) % 97  # one token stream, cut into max_len chunks
    chunks = stream[: len(stream) // max_len * max_len].view(-1, max_len).float()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    model = torch.nn.Linear(max_len, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def trace(**record: object) -> None:
        if args.trace:
            with open(args.trace, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    trace(event="start", micro=micro, accum=accum, max_len=max_len, out=args.out,
          n_chunks=len(chunks), packing=cfg["data.packing"])  # fmt: skip
    for step in range(1, args.max_steps + 1):
        for m in range(accum):
            lo = ((step - 1) * accum + m) * micro % len(chunks)
            if args.kib_per_token:
                held = torch.empty(micro * max_len * args.kib_per_token * 256)
                del held
            loss = model(chunks[lo : lo + micro]).pow(2).mean()
            loss.backward()
        opt.step()
        opt.zero_grad()
        trace(event="step", step=step, tokens=micro * accum * max_len)
    print(f"done at step {args.max_steps}", flush=True)


if __name__ == "__main__":
    main()
