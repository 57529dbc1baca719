"""Issue 12: fatal versus mention, and fatal text that arrives without its newline.

A line ends an attempt at once only when it is an OOM *raised* on some rank; the same words in
a tip, a caught-and-skipped OOM, a data sample or an echo of old output are evidence for the
verdict at exit, never a kill. A fatal message written without a newline (the rank then
stalls) or inside a 1 MB line written in bursts is reported as soon as it is complete, through
real pipes and the real output pump.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dsguard.core.classify import (
    Evidence,
    FailureKind,
    StreamClassifier,
    classify_text,
    rank_exit_from_text,
)
from dsguard.run.watch import OutputPump

K = FailureKind
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"


def fatal_lines(text: str) -> list[Evidence]:
    sc = StreamClassifier()
    found = sc.feed(text) + sc.close()
    return [ev for ev in found if ev.fatal]


MENTIONS = [
    # a tip printed at start-up (the first false kill)
    "Tip: if you see 'CUDA out of memory', lower --per_device_train_batch_size",
    # fairseq trainer.py: caught, logged, batch skipped, training goes on
    "2021-03-02 10:14:19 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: "
    "CUDA out of memory. Tried to allocate 2.00 GiB",
    # an eval loop that logs a caught OOM and retries smaller
    "[eval] caught torch.OutOfMemoryError: CUDA out of memory; retrying with batch 8",
    # a wrapper echoing the previous run's error
    "previous run ended with: RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB",
    # a data preview whose sample contains error text
    "{'text': 'RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB', 'label': 0}",
    # Lightning's batch-size finder reporting its probes
    "Batch size 2048 failed, trying batch size 1024",
    "INFO: DefaultCPUAllocator: can't allocate memory was reported by the last probe",
]


@pytest.mark.parametrize("line", MENTIONS, ids=range(len(MENTIONS)))
def test_mentions_never_end_an_attempt(line: str) -> None:
    assert fatal_lines(line + "\n") == []
    assert classify_text(line + "\n", 0) is None  # exit 0: success


RAISED = [
    (OOM, K.CUDA_OOM),
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", K.CUDA_OOM),
    (" 12%|█▏  | 3/25 [00:01<00:09, 2.3it/s]RuntimeError: CUDA out of memory.", K.CUDA_OOM),
    ("terminate called after throwing an instance of 'c10::OutOfMemoryError'", K.CUDA_OOM),
    (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 34359738368 bytes.",
        K.HOST_OOM,
    ),
]


@pytest.mark.parametrize(("line", "kind"), RAISED, ids=range(len(RAISED)))
def test_raised_oom_ends_the_attempt(line: str, kind: FailureKind) -> None:
    assert [ev.kind for ev in fatal_lines(line + "\n")] == [kind]


def test_a_mention_still_explains_a_death() -> None:
    """The caught OOM is evidence if the process then dies without saying more."""
    text = MENTIONS[1] + "\n"
    failure = classify_text(text, 1)
    assert failure is not None and failure.kind is K.CUDA_OOM


def test_mention_corpus_has_no_fatal_line() -> None:
    """Every harmless real log in tests/data/corpus/mentions streams without a kill."""
    root = Path(__file__).parent / "data" / "corpus" / "mentions"
    logs = sorted(root.glob("*.log"))
    assert len(logs) >= 45
    for log in logs:
        text = log.read_text(encoding="utf-8", errors="replace")
        assert fatal_lines(text) == [], log.name


LAUNCHER_KILLS = [
    (
        "[ERROR] [launch.py:434:sigkill_handler] ['python', 't.py'] exits with return code = -9",
        -9,
    ),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0", -9),
    ("  exitcode  : -9 (pid: 14750)", -9),
    (
        "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit "
        "status -9.",
        -9,
    ),
    ("RuntimeError: process 0 died with <Signals.SIGKILL: 9>", -9),
    ("Killed", -9),
    ("已杀死", -9),
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", -9),
    ("mpirun noticed that process rank 7 with PID 0 on node n1 exited on signal 9 (Killed).", -9),
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
        None,
    ),
    ("step 10 loss 1.2", None),
]


@pytest.mark.parametrize(("line", "code"), LAUNCHER_KILLS, ids=range(len(LAUNCHER_KILLS)))
def test_rank_exit_from_launcher_text(line: str, code: int | None) -> None:
    assert rank_exit_from_text([line]) == code
    failure = classify_text(line + "\n", 1)
    if code is not None:  # the launcher exited 1; the rank's -9 makes it a probable host OOM
        assert failure is not None
        assert (failure.kind, failure.rank_exit, failure.host_oom_confirmed) == (
            K.HOST_OOM, -9, None)  # fmt: skip
        refuted = classify_text(line + "\n", 1, host_oom_confirmed=False)
        assert refuted is not None and refuted.kind is K.KILLED_EXTERNALLY


def test_sigkill_is_signal_sigkill_first() -> None:
    """A SIGKILL wins over the SIGTERMs the launcher then sends the other ranks."""
    lines = ["Signal 15 (SIGTERM) received by PID 10", "  exitcode  : -9 (pid: 11)"]
    assert rank_exit_from_text(lines) == -9
    assert rank_exit_from_text(["Signal 15 (SIGTERM) received by PID 10"]) == -15


def test_an_external_stop_named_in_the_output_is_not_an_oom() -> None:
    text = "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-04-20 DUE TO TIME LIMIT ***\n"
    failure = classify_text(text + "Killed\n", 137)
    assert failure is not None and failure.kind is K.KILLED_EXTERNALLY


def test_retry_helps_is_separate_from_kind() -> None:
    nccl = classify_text("torch.distributed.DistBackendError: NCCL error in: x\n", 1)
    cfg = classify_text("Please correct the following DeepSpeed config values that mismatch\n", 1)
    driver = classify_text(
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).\n", 1
    )
    assert nccl is not None and nccl.retry_helps
    assert cfg is not None and cfg.kind is K.DS_CONFIG_ERROR and not cfg.retry_helps
    assert driver is not None and driver.kind is K.CUDA_FATAL and not driver.retry_helps


def test_optimizer_del_noise_is_not_the_cause() -> None:
    text = (
        "ValueError: Please correct the following DeepSpeed config values that mismatch\n"
        "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f>\n"
        "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'\n"
    )
    failure = classify_text(text, 1)
    assert failure is not None and failure.kind is K.DS_CONFIG_ERROR
    alone = classify_text(text.split("\n", 1)[1], 1)  # nothing else: the build is suspect
    assert alone is not None and alone.kind is K.DS_BUILD_ERROR


# -- real pipes ---------------------------------------------------------------------------------


def _pump(
    script: str,
) -> tuple[subprocess.Popen[bytes], OutputPump, threading.Event, list[Evidence]]:
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert child.stdout is not None
    got: list[Evidence] = []
    seen = threading.Event()

    def on_fatal(ev: Evidence) -> None:
        got.append(ev)
        seen.set()

    pump = OutputPump(child.stdout.fileno(), Path("/dev/null"), StreamClassifier(),
                      on_fatal=on_fatal)  # fmt: skip
    pump.start()
    return child, pump, seen, got


def _finish(child: subprocess.Popen[bytes], pump: OutputPump) -> None:
    child.kill()
    child.wait(timeout=30)
    pump.stop()
    assert pump.join(30)
    assert child.stdout is not None
    child.stdout.close()
    assert pump.error is None


def test_fatal_without_newline_is_reported_while_the_child_stalls() -> None:
    """The OOM text arrives with no newline and the child then sleeps (as a rank whose peers
    hang in NCCL would): the pump reports it while the child is still alive."""
    script = f"import sys, time\nsys.stdout.write({OOM!r}); sys.stdout.flush()\ntime.sleep(120)\n"
    child, pump, seen, got = _pump(script)
    try:
        assert seen.wait(60), "fatal line without newline not reported"
        assert child.poll() is None  # reported during the stall, not at exit
        assert [(e.kind, e.line_no) for e in got] == [(K.CUDA_OOM, 1)]
    finally:
        _finish(child, pump)
    assert len(got) == 1  # the flush at EOF does not report it again


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_fatal_inside_a_1mb_line_written_in_bursts(where: str) -> None:
    """One 1 MiB line (progress redraws without a newline) written in 4 KiB bursts, the OOM
    at its start, in its middle (glued after a progress bar's ']') or at its end."""
    msg = {"start": OOM, "middle": "]" + OOM, "end": "]" + OOM}[where]
    before = {"start": 0, "middle": 512 * 1024, "end": 1024 * 1024}[where]
    after = 1024 * 1024 - before
    script = (
        "import sys, time\n"
        f"data = 'x' * {before} + {msg!r} + 'y' * {after}\n"
        "for i in range(0, len(data), 4096):\n"
        "    sys.stdout.write(data[i:i + 4096]); sys.stdout.flush()\n"
        "time.sleep(120)\n"
    )
    child, pump, seen, got = _pump(script)
    try:
        assert seen.wait(60), f"fatal at the {where} of a 1 MiB line not reported"
        assert child.poll() is None
        assert got[0].kind is K.CUDA_OOM
    finally:
        _finish(child, pump)
    assert len(got) == 1


def test_innermost_exception_under_the_op_builder_is_a_build_error() -> None:
    """An exception raised inside DeepSpeed's op builder (or torch's extension builder) is a
    build failure whatever its type; the same exception from the user's frames is not."""
    frame = '  File "/x/site-packages/deepspeed/ops/op_builder/builder.py", line 445, in load\n'
    exc = "ImportError: libcurand.so.10: cannot open shared object file\n"
    tb = "Traceback (most recent call last):\n"
    built = classify_text(tb + frame + "    return self.jit_load(verbose)\n" + exc, 1)
    assert built is not None and built.kind is K.DS_BUILD_ERROR
    user = classify_text(tb + '  File "train.py", line 3, in <module>\n' + exc, 1)
    assert user is not None and user.kind is K.USER_CODE_ERROR
    # a new traceback starts clean
    again = classify_text(tb + frame + exc + tb + '  File "train.py", line 3\n' + exc, 1)
    assert again is not None and again.kind is K.DS_BUILD_ERROR  # the build error outranks
