"""P3: classifier throughput on the supervisor's own path, against a bare pipe read.

1,000,000 realistic lines (``bench.logsynth``) are written into a pipe (1 MiB, as
``proc.spawn`` sizes it) by a forked writer process pinned to one CPU; the reader, pinned to
another CPU, is either

* ``bare``: an ``os.read(fd, 1 MiB)`` loop that discards the bytes (the floor), or
* ``pump``: ``watch.OutputPump`` itself (select, read, append to the attempt log, incremental
  UTF-8 decode, ``StreamClassifier.feed``, fatal callback), exactly as the run loop starts it,

alternating in the same run, so the ratio compares like with like. A third row, ``classify``,
feeds the same bytes in 1 MiB chunks through decode + ``StreamClassifier.feed`` in-process
(no pipe, no log, no thread) to show what the classifier alone costs.

Run: ``python -m bench.run P3`` (``--quick``: one repetition).
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Summary, summarize
from bench.logsynth import Synth, synth
from dsguard.core.classify import Evidence, StreamClassifier
from dsguard.run.proc import PIPE_SIZE_BYTES
from dsguard.run.watch import OutputPump

N_LINES = 1_000_000
_WRITE_CHUNK = 1 << 16
_READ_BYTES = 1 << 20


@dataclass
class _Case:
    name: str
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)


def _cpus() -> tuple[int | None, int | None]:
    """(reader CPU, writer CPU); None = do not pin."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        return cpus[0], cpus[1]
    return None, None


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def _start_writer(data: bytes, writer_cpu: int | None) -> tuple[int, int, int]:
    """Fork a writer that waits for a byte on the go pipe, then writes ``data`` and exits.

    Returns (read fd of the data pipe, write fd of the go pipe, writer pid).
    """
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, PIPE_SIZE_BYTES)
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # writer
        code = 0
        try:
            os.close(r)
            os.close(go_w)
            _pin(writer_cpu)
            os.read(go_r, 1)
            view = memoryview(data)
            off = 0
            while off < len(view):
                off += os.write(w, view[off : off + _WRITE_CHUNK])
            os.close(w)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    os.close(go_r)
    return r, go_w, pid


def _reap(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("P3 writer process failed")


def _bare(data: bytes, cpus: tuple[int | None, int | None]) -> tuple[float, float]:
    r, go_w, pid = _start_writer(data, cpus[1])
    n = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    os.write(go_w, b"g")
    while True:
        chunk = os.read(r, _READ_BYTES)
        if not chunk:
            break
        n += len(chunk)
    t1 = time.perf_counter()
    c1 = time.process_time()
    os.close(r)
    os.close(go_w)
    _reap(pid)
    if n != len(data):
        raise RuntimeError(f"bare read got {n} of {len(data)} bytes")
    return t1 - t0, c1 - c0


def _pump(
    data: bytes, s: Synth, cpus: tuple[int | None, int | None], tmp: Path
) -> tuple[float, float]:
    r, go_w, pid = _start_writer(data, cpus[1])
    log_path = tmp / "attempt-1.log"
    classifier = StreamClassifier()
    fatal: list[Evidence] = []
    pump = OutputPump(r, log_path, classifier, on_fatal=fatal.append)
    pump.start()
    time.sleep(0.05)  # the pump thread is up and blocked in select
    c0 = time.process_time()
    t0 = time.perf_counter()
    os.write(go_w, b"g")
    pump.join()
    t1 = time.perf_counter()
    c1 = time.process_time()
    os.close(r)
    os.close(go_w)
    _reap(pid)
    if pump.error is not None:
        raise pump.error
    problems = []
    if pump.bytes_read != len(data):
        problems.append(f"pump read {pump.bytes_read} of {len(data)} bytes")
    if classifier.lines_seen != s.lines:
        problems.append(f"classifier counted {classifier.lines_seen} lines, not {s.lines}")
    if len(fatal) != s.oom_lines:
        problems.append(f"{len(fatal)} fatal evidence lines, expected {s.oom_lines}")
    if log_path.stat().st_size != len(data):
        problems.append("attempt log size differs from the bytes written")
    if problems:
        raise RuntimeError("P3 pump check failed: " + "; ".join(problems))
    log_path.unlink()
    return t1 - t0, c1 - c0


def _classify_only(data: bytes, s: Synth) -> tuple[float, float]:
    chunks = [data[i : i + _READ_BYTES] for i in range(0, len(data), _READ_BYTES)]
    classifier = StreamClassifier()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fatal = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    for chunk in chunks:
        fatal += sum(ev.fatal for ev in classifier.feed(decoder.decode(chunk)))
    fatal += sum(ev.fatal for ev in classifier.feed(decoder.decode(b"", final=True)))
    fatal += sum(ev.fatal for ev in classifier.close())
    t1 = time.perf_counter()
    c1 = time.process_time()
    if classifier.lines_seen != s.lines or fatal != s.oom_lines:
        raise RuntimeError("P3 classify-only check failed")
    return t1 - t0, c1 - c0


def _measure(s: Synth, reps: int, tmp: Path) -> dict[str, Any]:
    data = s.data
    cpus = _cpus()
    saved = os.sched_getaffinity(0)
    cases = {name: _Case(name) for name in ("bare", "pump", "classify")}
    ratios: list[float] = []
    try:
        _pin(cpus[0])
        for _ in range(reps):
            bare = _bare(data, cpus)
            pump = _pump(data, s, cpus, tmp)
            only = _classify_only(data, s)
            for name, (wall, cpu) in (("bare", bare), ("pump", pump), ("classify", only)):
                cases[name].seconds.append(wall)
                cases[name].cpu_seconds.append(cpu)
            ratios.append(pump[0] / bare[0])
    finally:
        os.sched_setaffinity(0, saved)
    out: dict[str, Any] = {
        "lines": s.lines,
        "bytes": len(data),
        "reps": reps,
        "reader_cpu": cpus[0],
        "writer_cpu": cpus[1],
        "ratio_pump_over_bare_time": summarize(ratios).as_dict(),
    }
    for name, case in cases.items():
        secs: Summary = summarize(case.seconds)
        out[name] = {
            "seconds": secs.as_dict(),
            "lines_per_s_median": s.lines / secs.median,
            "mb_per_s_median": len(data) / secs.median / 1e6,
            "cpu_s_median": summarize(case.cpu_seconds).median,
        }
    return out


def run(quick: bool = False) -> dict[str, Any]:
    reps = 1 if quick else 5
    t = time.perf_counter()
    main = synth(N_LINES, seed=1)
    gen_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory(prefix="dsguard-p3-") as d:
        tmp = Path(d)
        result = {"generate_s": gen_s, "main": _measure(main, reps, tmp)}
        del main
        ansi = synth(N_LINES, seed=1, ansi_every=1000)
        result["ansi_1_in_1000"] = _measure(ansi, max(1, reps // 2), tmp)
    return result


def markdown(res: dict[str, Any]) -> str:
    lines = []
    for key, title in (("main", "plain"), ("ansi_1_in_1000", "1 line in 1,000 ANSI-coloured")):
        m = res[key]
        lines.append(
            f"*{title}* — {m['lines']:,} lines, {m['bytes'] / 1e6:.1f} MB, "
            f"{m['reps']} repetitions, reader on CPU {m['reader_cpu']}, "
            f"writer on CPU {m['writer_cpu']}:\n"
        )
        lines.append("| path | median s | lines/s | MB/s | reader CPU s | lines per CPU-s |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for name, label in (
            ("bare", "bare pipe read (os.read, discard)"),
            ("pump", "OutputPump (read + log + decode + classify)"),
            ("classify", "decode + StreamClassifier.feed only, in-process"),
        ):
            c = m[name]
            lines.append(
                f"| {label} | {c['seconds']['median']:.3f} | {c['lines_per_s_median']:,.0f} | "
                f"{c['mb_per_s_median']:.0f} | {c['cpu_s_median']:.3f} | "
                f"{m['lines'] / c['cpu_s_median']:,.0f} |"
            )
        r = m["ratio_pump_over_bare_time"]
        lines.append(
            f"\nRatio pump time / bare-read time, per repetition: median {r['median']:.1f}x "
            f"(min {r['min']:.1f}x, max {r['max']:.1f}x).\n"
        )
    return "\n".join(lines)
