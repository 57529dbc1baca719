"""Real CUDA failures, provoked on the GPU machine and read by dsguard's live classifier.

The corpus (``tests/data/corpus``) holds what users pasted; this holds what the installed torch
on a real card prints *today*, read the way ``dsguard run`` reads it: the child's merged
stdout/stderr is read by the loop's own :class:`~dsguard.run.watch.OutputPump` (log, redaction,
:class:`~dsguard.core.classify.StreamClassifier`) while it runs, and the verdict is taken from
``classify`` with the real exit status. Each case records whether the ending line was seen *at
line time* (a fatal evidence before the process exited, and how long before) and whether the
verdict is the kind an engineer would name.

The failure modes it checks:

- an allocation past the card (``torch.OutOfMemoryError``), under a per-process memory
  fraction (the ``gpu_memory_fraction`` cap's wording) and with ``expandable_segments``;
- a caught OOM that a trainer logs and survives (fairseq-style), which must not be fatal;
- a device-side assert from an out-of-range embedding index (``cuda_fatal``, not a user error:
  the later CUDA calls all fail with it);
- anomaly mode's NaN in backward (``loss_divergence``);
- two ranks of one torchrun on one GPU, where NCCL refuses the duplicate device
  (``nccl_error`` through ``ChildFailedError``).

``python -m bench.gpu.real_errors --out FILE.json``; on a machine without CUDA every case ends
in torch's "not compiled with CUDA" / "no NVIDIA driver" error, which shows the plumbing only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsguard.core.classify import Evidence, StreamClassifier, classify, decode_exit
from dsguard.run.watch import OutputPump


@dataclass(frozen=True)
class Case:
    name: str
    expect: str | None  # the kind an engineer would name; None: a healthy run (exit 0)
    code: str  # python source, or a torchrun script when ``torchrun`` is set
    env: tuple[tuple[str, str], ...] = ()
    torchrun: int = 0  # nproc_per_node


_OOM_LOOP = """
    import torch
    torch.cuda.set_per_process_memory_fraction({fraction})
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).cuda().bfloat16()
    for micro in (64, 256, 1024, 4096, 16384, 65536):
        x = torch.randn(micro, 128, 8192, device="cuda", dtype=torch.bfloat16)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        print(f"micro {{micro}} ok, loss {{loss.item():.4f}}", flush=True)
"""

CASES: tuple[Case, ...] = (
    Case(
        "cuda_oom_past_the_card",
        "cuda_oom",
        """
        import torch
        print("allocating 400 GiB on", torch.cuda.get_device_name(0), flush=True)
        x = torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")
    """,
    ),
    Case("cuda_oom_under_fraction", "cuda_oom", _OOM_LOOP.format(fraction=0.1)),
    Case(
        "cuda_oom_expandable_segments",
        "cuda_oom",
        _OOM_LOOP.format(fraction=0.1),
        env=(("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),),
    ),
    Case(
        "cuda_oom_caught_and_skipped",
        None,
        """
        import torch
        torch.cuda.set_per_process_memory_fraction(0.1)
        for step, micro in enumerate((64, 1 << 20, 64)):
            try:
                x = torch.randn(micro, 128, 8192, device="cuda", dtype=torch.bfloat16)
                print(f"step {step}: ok", flush=True)
            except torch.OutOfMemoryError as e:
                print(f"| WARNING: ran out of memory with exception: {e}", flush=True)
                print("| WARNING: attempting to recover from OOM in forward/backward pass",
                      flush=True)
                torch.cuda.empty_cache()
        print("training done", flush=True)
    """,
    ),
    Case(
        "device_side_assert_embedding",
        "cuda_fatal",
        """
        import torch
        emb = torch.nn.Embedding(32000, 64).cuda()
        ids = torch.tensor([[1, 5, 32000 + 7]], device="cuda")
        out = emb(ids)
        print(out.sum().item())
    """,
    ),
    Case(
        "anomaly_nan_in_backward",
        "loss_divergence",
        """
        import torch
        torch.autograd.set_detect_anomaly(True)
        w = torch.tensor([-1.0, 4.0], device="cuda", requires_grad=True)
        loss = torch.sqrt(w).sum()
        print("loss", loss.item(), flush=True)
        loss.backward()
    """,
    ),
    Case(
        "nccl_duplicate_gpu_under_torchrun",
        # (issue 12, round 41) two ranks on one GPU is the script's or the launch's error:
        # user_code_error, no longer nccl_error (the 2026-11-27 capture expected the latter)
        "user_code_error",
        """
        import os, torch, torch.distributed as dist
        dist.init_process_group("nccl")
        torch.cuda.set_device(0)  # both ranks on one card: NCCL refuses it
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        print("rank", dist.get_rank(), t.tolist(), flush=True)
        dist.destroy_process_group()
    """,
        torchrun=2,
    ),
)


def run_case(case: Case, workdir: Path, timeout_s: float) -> dict[str, Any]:
    script = workdir / f"{case.name}.py"
    script.write_text(textwrap.dedent(case.code).lstrip())
    if case.torchrun:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={case.torchrun}", str(script)]  # fmt: skip
    else:
        argv = [sys.executable, str(script)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **dict(case.env)}
    log = workdir / f"{case.name}.log"
    sc = StreamClassifier()
    fatal: list[tuple[float, Evidence]] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=workdir)  # fmt: skip
    assert proc.stdout is not None
    # the loop's own pump: reads, logs and classifies the output as `dsguard run` does
    pump = OutputPump(proc.stdout.fileno(), log, sc,
                      on_fatal=lambda ev: fatal.append((time.monotonic() - t0, ev)))  # fmt: skip
    pump.start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    t_exit = time.monotonic() - t0
    pump.join(30)
    proc.stdout.close()
    first_fatal: dict[str, Any] | None = None
    if fatal:
        t_s, ev = fatal[0]
        first_fatal = {"t_s": min(t_s, t_exit), "line_no": ev.line_no, "kind": str(ev.kind),
                       "text": ev.text[:300]}  # fmt: skip
    failure = classify(sc.evidence, decode_exit(rc), tail=sc.tail)
    got = None if failure is None else str(failure.kind)
    return {
        "case": case.name, "expect": case.expect, "got": got, "right": got == case.expect,
        "exit_code": rc, "duration_s": round(t_exit, 3),
        "first_fatal": first_fatal,
        "fatal_before_exit_s": (
            None if first_fatal is None else round(t_exit - first_fatal["t_s"], 3)
        ),
        "evidence": [] if failure is None else list(failure.evidence),
        "retry_helps": None if failure is None else failure.retry_helps,
        "output": log.read_text(encoding="utf-8", errors="replace"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu.real_errors", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/dsguard-real-errors"))
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--only", nargs="*", default=None)
    a = p.parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in CASES:
        if a.only and case.name not in a.only:
            continue
        row = run_case(case, a.workdir, a.timeout_s)
        mark = "ok " if row["right"] else "MISS"
        print(f"{mark} {case.name}: expect {case.expect}, got {row['got']}, "
              f"exit {row['exit_code']}, fatal {row['fatal_before_exit_s']} s before exit",
              flush=True)  # fmt: skip
        rows.append(row)
    a.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{sum(r['right'] for r in rows)}/{len(rows)} right", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
