"""P4: the supervisor's own footprint, and CLI start-up time.

Footprint: a real ``dsguard run job.yaml`` supervises ``children.py print``, which replays
realistic log lines (``bench.logsynth``, healthy: no tracebacks) at 1,000 lines/s, one
``write`` per line, for 60 s (``--quick``: 10 s). From 1 s after the child's first line to
0.5 s before its last, the benchmark samples the dsguard process only (psutil, children
excluded): RSS every 0.25 s (steady = median of the samples, peak = their max; ``VmHWM`` is
the kernel's high-water mark over the whole life, start-up included), and CPU as
``cpu_times().user + .system`` over the window divided by the window's wall time (percent of
one core; all dsguard threads, no children). Variants: ``--quiet`` (the target), output
mirrored to a console (stdout to /dev/null), and a silent child (the idle cost).

Start-up: ``dsguard --help`` and ``dsguard validate job.yaml`` (the repository's full
``llama7b-sft.yaml`` example in a temp layout), with hyperfine when installed (``-N``, 3
warm-ups), else our own repeated timing; plus the top imports by ``-X importtime``.

Run: ``python -m bench.run P4``.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import p4_pump
from bench.common import (
    REPO_ROOT,
    dsguard_argv,
    read_jsonl,
    time_commands,
    wait_for,
    write_job,
)
from bench.logsynth import synth

RATE = 1000
_SAMPLE_S = 0.25


def _vm_hwm_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _wakeups(pid: int) -> int:
    """Voluntary context switches of every thread (psutil reads only the main thread's)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def _footprint(
    tmp: Path, rate: int, duration: float, quiet: bool, dsguard: list[str] | None = None
) -> dict[str, Any]:
    side = tmp / "side.jsonl"
    lines_file = tmp / "lines.txt"
    if rate:
        lines_file.write_text(synth(int(rate * duration), seed=4, failures=False).text)
    else:
        lines_file.write_text("")
    job = write_job(
        tmp,
        ["print", "--side", str(side), "--lines", str(lines_file), "--rate", str(rate),
         "--duration", str(duration)],
        train={"micro_batch_size": 1, "gradient_accumulation_steps": 1},
    )  # fmt: skip
    argv = [*(dsguard or dsguard_argv()), "run", str(job)] + (["--quiet"] if quiet else [])
    stderr = (tmp / "dsguard.stderr").open("wb")
    proc = subprocess.Popen(
        argv, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
    )
    try:
        start = wait_for(
            lambda: next((r for r in read_jsonl(side) if r["ev"] == "start"), None), 30.0
        )
        t_start = float(start["t"])
        p = psutil.Process(proc.pid)
        time.sleep(max(0.0, t_start + 1.0 - time.time()))
        end_at = t_start + duration - 0.5
        c0 = p.cpu_times()
        x0 = _wakeups(proc.pid)
        w0 = time.monotonic()
        rss: list[int] = []
        while time.time() < end_at:
            rss.append(p.memory_info().rss)
            time.sleep(_SAMPLE_S)
        c1 = p.cpu_times()
        x1 = _wakeups(proc.pid)
        w1 = time.monotonic()
        hwm = _vm_hwm_bytes(proc.pid)
        uss = p.memory_full_info().uss
        threads = p.num_threads()
        rc = proc.wait(60.0)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30.0)
        stderr.close()
    if rc != 0:
        raise RuntimeError(f"P4 run failed rc={rc}: {(tmp / 'dsguard.stderr').read_text()[-2000:]}")
    window = w1 - w0
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    finished = [e for e in read_jsonl(tmp / "runs" / "events.jsonl")
                if e.get("event") == "attempt_finished"]  # fmt: skip
    return {
        "rate": rate,
        "duration_s": duration,
        "quiet": quiet,
        "window_s": window,
        "cpu_pct_of_core": 100.0 * cpu / window,
        "cpu_user_s": c1.user - c0.user,
        "cpu_system_s": c1.system - c0.system,
        "voluntary_ctx_switches_per_s": (x1 - x0) / window,
        "rss_steady_bytes": statistics.median(rss),
        "rss_peak_sampled_bytes": max(rss),
        "vm_hwm_bytes": hwm,
        "uss_end_bytes": uss,
        "threads": threads,
        "rss_samples": len(rss),
        "output_lines_seen": finished[0].get("output_lines") if finished else None,
    }


def _importtime(cmd_args: list[str], reps: int = 5) -> dict[str, list[tuple[str, float]]]:
    """Where start-up goes, from ``-X importtime`` (medians over ``reps`` runs, microseconds).

    ``packages``: every root package (a name without a dot, dsguard excluded) by cumulative
    time: its first import pays for everything it pulls in, so nested packages (rich inside
    structlog) are counted in both. ``dsguard``: dsguard's own modules by self time.
    """
    cum: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    total: list[float] = []
    for _ in range(reps):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "dsguard", *cmd_args],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        run_total = 0.0
        for line in proc.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
            if m is None:
                continue
            self_us, cum_us, indent, name = float(m[1]), float(m[2]), m[3], m[4]
            if not indent:
                run_total += cum_us
            if name.split(".")[0] == "dsguard":
                own.setdefault(name, []).append(self_us)
            elif "." not in name:
                cum.setdefault(name, []).append(cum_us)
        total.append(run_total)

    def top(d: dict[str, list[float]], n: int) -> list[tuple[str, float]]:
        ranked = sorted(((k, statistics.median(v)) for k, v in d.items()), key=lambda kv: -kv[1])
        return ranked[:n]

    return {
        "total": [("(all imports)", statistics.median(total))],
        "packages": top(cum, 10),
        "dsguard": top(own, 6),
    }


def startup(quick: bool) -> dict[str, Any]:
    runs = 10 if quick else 30
    with tempfile.TemporaryDirectory(prefix="dsguard-p4s-") as d:
        tmp = Path(d)
        (tmp / "configs" / "examples").mkdir(parents=True)
        shutil.copytree(REPO_ROOT / "configs" / "deepspeed", tmp / "configs" / "deepspeed")
        job = tmp / "configs" / "examples" / "llama7b-sft.yaml"
        shutil.copy(REPO_ROOT / "configs" / "examples" / "llama7b-sft.yaml", job)
        (tmp / "train.py").write_text("")
        check = subprocess.run([*dsguard_argv(), "validate", str(job)], capture_output=True,
                               text=True, check=False)  # fmt: skip
        if check.returncode != 0:
            raise RuntimeError(f"validate of the example failed: {check.stderr}")
        cmds = {
            "dsguard --help": [*dsguard_argv(), "--help"],
            "dsguard validate job.yaml": [*dsguard_argv(), "validate", str(job)],
            "python -c pass": [sys.executable, "-c", "pass"],
            # Where the time goes: the interpreter, then the imports each command needs.
            "python -c 'import dsguard.cli.main'": [
                sys.executable, "-c", "import dsguard.cli.main",
            ],
            "python -c 'import dsguard.job.file'": [
                sys.executable, "-c", "import dsguard.job.file",
            ],
            "python -c 'import yaml'": [sys.executable, "-c", "import yaml"],
        }  # fmt: skip
        tool, timing = time_commands(cmds, runs, tmp)
        imports = {
            "dsguard --help": _importtime(["--help"]),
            "dsguard validate job.yaml": _importtime(["validate", str(job)]),
        }
    return {"tool": tool, "runs": runs, "timing": timing, "imports_us": imports}


def run(quick: bool = False) -> dict[str, Any]:
    dur = 10.0 if quick else 60.0
    # The first run's what-if variants (a 0.1 s coalescing window, a 0.25 s main tick) are
    # the source's values now, so they are gone from here.
    variants: tuple[tuple[str, int, bool, list[str] | None], ...] = (
        ("quiet_1000", RATE, True, None),
        ("echo_1000", RATE, False, None),
        ("silent", 0, True, None),
    )
    foot: dict[str, Any] = {}
    for key, rate, quiet, argv in variants:
        with tempfile.TemporaryDirectory(prefix="dsguard-p4-") as d:
            foot[key] = _footprint(Path(d), rate, dur, quiet, argv)
    return {"footprint": foot, "pump": p4_pump.run(quick), "startup": startup(quick)}


def markdown(res: dict[str, Any]) -> str:
    mb = 1e6
    lines = [
        "| child output | window s | CPU % of one core | user / sys s | wakeups/s (vol. ctx sw.) | "
        "RSS steady MB | RSS peak (sampled) MB | VmHWM MB | USS MB | threads |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "quiet_1000": "1,000 lines/s, `--quiet`",
        "echo_1000": "1,000 lines/s, mirrored to stdout (/dev/null)",
        "silent": "silent child (idle cost)",
    }
    for key, f in res["footprint"].items():
        hwm = f["vm_hwm_bytes"]
        lines.append(
            f"| {labels[key]} | {f['window_s']:.1f} | **{f['cpu_pct_of_core']:.2f}** | "
            f"{f['cpu_user_s']:.2f} / {f['cpu_system_s']:.2f} | "
            f"{f['voluntary_ctx_switches_per_s']:.0f} | **{f['rss_steady_bytes'] / mb:.1f}** | "
            f"{f['rss_peak_sampled_bytes'] / mb:.1f} | "
            f"{'-' if hwm is None else f'{hwm / mb:.1f}'} | {f['uss_end_bytes'] / mb:.1f} | "
            f"{f['threads']} |"
        )
    lines.append("")
    lines.append(p4_pump.markdown(res["pump"]))
    st = res["startup"]
    lines += [
        f"\nStart-up ({st['tool']}, {st['runs']} runs after 3 warm-ups), milliseconds:\n",
        "| command | median | min | p90 | max | mean user + sys CPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in st["timing"].items():
        lines.append(
            f"| `{name}` | **{s['median'] * 1000:.0f}** | {s['min'] * 1000:.0f} | "
            f"{s['p90'] * 1000:.0f} | {s['max'] * 1000:.0f} | "
            f"{(s['user'] + s['system']) * 1000:.0f} |"
        )
    for name, imp in st["imports_us"].items():
        lines.append(
            f"\n`{name}` under `-X importtime` (median of 5; importtime inflates times): all "
            f"imports {imp['total'][0][1] / 1000:.0f} ms. Heaviest root packages (cumulative, "
            "nested ones counted in their importer too), and dsguard's own modules (self):\n"
        )
        pk = ", ".join(f"`{m}` {us / 1000:.0f}" for m, us in imp["packages"])
        ds = ", ".join(f"`{m}` {us / 1000:.0f}" for m, us in imp["dsguard"])
        lines.append(f"- packages (ms): {pk}")
        lines.append(f"- dsguard modules (ms): {ds}")
    return "\n".join(lines) + "\n"
