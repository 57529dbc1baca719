"""Pure failure classifier: turns a training attempt's output and exit status into a root cause.

Why this module exists: the supervisor must decide *what* went wrong before it can decide what
to change (the OOM ladder, a rebuild hint, a resume from an older checkpoint, or giving up).
A multi-rank DeepSpeed / HF run fails loudly and repetitively: one rank hits a CUDA OOM, the
others then time out in NCCL 10-30 minutes later, the launcher SIGKILLs stragglers and every
rank prints a traceback. The *last* line is almost never the cause, so classification is by
priority over all the evidence (see ``_PRIORITY``), not by recency.

Design, in two stages, because the watcher sits in the hot path of every output byte
(a healthy run prints tqdm ``\\r`` spam and INFO logs at hundreds of thousands of lines/s):

1. A literal prefilter: one compiled alternation of about twenty trigger substrings searched
   over the whole chunk (C speed); healthy chunks usually contain none, and then cost that
   search plus a few ``str.count`` calls. Only lines that contain a trigger go on.
2. Per hit line: strip ANSI colour, peel rank prefixes, drop echoed *source* lines of
   tracebacks (a ``raise RuntimeError("CUDA out of memory")`` shown in a frame is not a CUDA
   OOM), then run the per-kind regexes in priority order.

The module is pure: no I/O, no clocks, no imports beyond the standard library. Every message
format below was checked against the code that emits it or against real logs in public issues;
each rule cites where.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Evidence",
    "ExitStatus",
    "Failure",
    "FailureKind",
    "StreamClassifier",
    "classify",
    "classify_text",
    "decode_exit",
]


class FailureKind(StrEnum):
    """Root-cause classes the supervisor acts on. Values are stable: they go into events.jsonl."""

    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    DS_BUILD_ERROR = "ds_build_error"
    DS_CONFIG_ERROR = "ds_config_error"
    NCCL_ERROR = "nccl_error"
    CUDA_FATAL = "cuda_fatal"
    LOSS_DIVERGENCE = "loss_divergence"
    CHECKPOINT_ERROR = "checkpoint_error"
    DISK_FULL = "disk_full"
    USER_CODE_ERROR = "user_code_error"
    KILLED_EXTERNALLY = "killed_externally"
    HANG = "hang"
    UNKNOWN = "unknown"


# Root-cause priority, strongest first. Consequences rank below their causes: one rank's CUDA
# OOM makes the other ranks' collectives time out (nccl_error) and every rank print a
# traceback (user_code_error); a rank the kernel OOM-killed makes its peers' NCCL calls fail.
# killed_externally (a SIGKILL that nothing in the output explains and no OOM-kill counter
# confirms, see classify()) sits above nccl_error for the same reason, and below the kinds
# whose own message explains the death. host_oom outranks the build kinds
# because a compiler killed by the OOM killer surfaces as a build failure.
_PRIORITY: tuple[FailureKind, ...] = (
    FailureKind.CUDA_OOM,
    FailureKind.HOST_OOM,
    FailureKind.DISK_FULL,
    FailureKind.DS_BUILD_ERROR,
    FailureKind.DS_CONFIG_ERROR,
    FailureKind.CHECKPOINT_ERROR,
    FailureKind.LOSS_DIVERGENCE,
    FailureKind.CUDA_FATAL,
    FailureKind.KILLED_EXTERNALLY,
    FailureKind.NCCL_ERROR,
    FailureKind.USER_CODE_ERROR,
)
_RANK_OF: dict[FailureKind, int] = {kind: i for i, kind in enumerate(_PRIORITY)}

# When the supervisor itself ended a stalled attempt (hang=True) these do not explain the
# stall: the supervisor's own kill shows up as SIGKILL evidence, and tracebacks printed while
# being torn down are teardown noise.
_WEAKER_THAN_HANG = frozenset({FailureKind.KILLED_EXTERNALLY, FailureKind.USER_CODE_ERROR})

_MAX_TEXT = 500  # Evidence.text limit, so one absurd line cannot bloat events.jsonl
_KEEP_PER_KIND = 16  # StreamClassifier keeps the first and the last this many per kind
_MAX_FAILURE_LINES = 8
_MAX_WINNER_LINES_FIRST = 5  # leave room for one line of each other kind in Failure.evidence
_MAX_CARRY = 65536  # a partial line longer than this keeps only its head and tail


@dataclass(frozen=True, slots=True)
class Evidence:
    """One output line that supports a failure kind."""

    kind: FailureKind
    rank: int | None  # from the line's rank prefix (or an in-message "[Rank N]"), if any
    line_no: int  # 1-based; "\n", "\r" and "\r\n" each end one line
    text: str  # the line without terminator or ANSI colour, at most 500 chars
    fatal: bool  # end the attempt now: today only CUDA OOM (peers would hang in NCCL)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How the attempt's process ended, as reported and as decoded."""

    raw: int | None  # Popen.returncode, or what a shell/launcher reported; None = unknown
    signal: int | None  # decoded signal number, or None

    @property
    def killed(self) -> bool:
        """True when the process died of SIGKILL (OOM killer, a watchdog, a user's kill -9)."""
        return self.signal == int(signal.SIGKILL)


def decode_exit(code: int | None) -> ExitStatus:
    """Decode the three ways one signal shows up as an exit code; keep the raw value.

    - ``rc < 0``: ``Popen.returncode`` of a process killed by signal ``-rc``.
    - ``128 < rc <= 192``: a shell reports a signalled child as ``128 + sig`` (137 = SIGKILL).
    - ``224 < rc < 256``: the DeepSpeed launcher calls ``sys.exit(-9)`` with the child's
      negative return code, which the OS truncates to ``256 - 9 = 247``.
    """
    if code is None:
        return ExitStatus(raw=None, signal=None)
    sig: int | None = None
    if code < 0:
        sig = -code
    elif 128 < code <= 128 + 64:
        sig = code - 128
    elif 224 < code < 256:
        sig = 256 - code
    return ExitStatus(raw=code, signal=sig)


@dataclass(frozen=True, slots=True)
class Failure:
    """The root cause of a failed attempt and the lines that show it."""

    kind: FailureKind
    rank: int | None
    evidence: tuple[str, ...]  # supporting lines, most important first, at most 8
    exit: ExitStatus


# --------------------------------------------------------------------------------------------
# Stage 1: literal triggers. Every line a rule below can match contains at least one of these
# (case-sensitive); the line table in tests/test_classify.py has a real line for every rule.
# Every trigger slows the one search over every chunk, so the list is short and leans on most
# messages being Python exception lines: "...Error: <message>" or "...Exception: <message>".
# Triggers common in healthy output are avoided: a bare "NCCL" would hit every NCCL_DEBUG=INFO
# line and send it to stage 2.
# --------------------------------------------------------------------------------------------
_TRIGGERS: tuple[str, ...] = (
    "rror",  # Error / error / ERROR: exception lines, "CUDA error:", "NCCL error", "[ERROR]"
    "Exception",  # DeepSpeed raises bare Exception (loss scale), ZeRORuntimeException, ...
    "StopIteration",
    "Traceback",  # arms the user_code_error rule
    # Not a bare "memory": DeepSpeed logs memory-usage lines at every step, and each would take
    # the slow path (bench P3: +22 % throughput with these four instead).
    "of memory",  # "CUDA out of memory" without its exception name (C++ what(), tqdm glue), kernel
    "allocate memory",  # DefaultCPUAllocator "can't allocate memory", "[Errno 12] Cannot allocate"
    "enough memory",  # "not enough memory"
    "shared memory",  # DataLoader /dev/shm exhaustion
    "bad_alloc",  # "what():  std::bad_alloc"
    "Kill",  # "Killed" (shell), "Killed process" (kernel)
    "kill",  # "is killed by signal: Killed" (DataLoader), "oom-kill:"
    "SIGKILL",  # torchrun "Signal 9 (SIGKILL) received by PID"
    "exitcode",  # torchrun "failed (exitcode: -9)" is logged without "error" by newer torch
    "No space left",  # non-Python tools (tar, cp) report ENOSPC without "error"
    "build stopped",  # "ninja: build stopped: subcommand failed."
    "FAILED: ",  # ninja's "FAILED: cpu_adam.o"
    "nvcc fatal",
    "Assertion `",  # a CUDA kernel's device-side assert
    "illegal memory access",  # NCCL: "Cuda failure 'an illegal memory access was encountered'"
    "NVRM",  # kernel driver log: "NVRM: Xid ...", "... has fallen off the bus"
    "Watchdog",  # c10d glog lines: "[Rank 0] Watchdog caught collective operation timeout"
    "watchdog",  # "... watchdog thread terminated ...", "... watchdog got stuck ..."
    "NCCL operations",  # "Some NCCL operations have failed or timed out."
    "communicator was aborted",
)
# One alternation is faster than a str.find pass per trigger (sre skips on the first-char set).
_TRIGGER_RX = re.compile("|".join(re.escape(t) for t in _TRIGGERS))

# --------------------------------------------------------------------------------------------
# Stage 2: per-kind rules, in _PRIORITY order, so a line that matches two kinds (an NCCL error
# whose CUDA failure is "out of memory") gets the stronger one.
# --------------------------------------------------------------------------------------------


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


# Sources: "repo/path" is the emitting code, "repo#N" an issue or PR whose log shows the line.
_RULES: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (
        FailureKind.CUDA_OOM,
        _rx(
            # c10 CUDACachingAllocator: "torch.OutOfMemoryError: CUDA out of memory. Tried to
            # allocate ..." (torch >= 2.5; CADS#4), torch.cuda.OutOfMemoryError (1.13-2.4) and
            # the RuntimeError form before it (pytorch/pytorch#16417), ROCm's "HIP out of
            # memory" (pytorch/pytorch#138002). Also c10::OutOfMemoryError in
            # "terminate called after throwing an instance of ...".
            r"(?:CUDA|HIP) out of memory",
            r"OutOfMemoryError",
            # cudaMalloc outside the caching allocator (SlowFast#702), the driver API behind
            # expandable segments (unslothai/unsloth#2401), pre-1.0 THC (neural-motifs#58),
            # NCCL's "Cuda failure <code> '<cudaGetErrorString>'" format (NVIDIA/nccl#1410)
            r"CUDA error: ?out of memory",
            r"CUDA driver error: out of memory",
            r"cuda runtime error \(2\) : out of memory",
            r"Cuda failure (?:\d+ )?'out of memory'",
            # cuBLAS/cuDNN handle or workspace allocation (Qwen3#873, pytorch/pytorch#20123)
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"CUDNN_STATUS_ALLOC_FAILED",
            # accelerate utils/memory.py: auto_find_batch_size halved down to zero on OOMs
            r"No executable batch size found, reached zero",
        ),
    ),
    (
        FailureKind.HOST_OOM,
        _rx(
            # c10 alloc_cpu.cpp (pytorch/pytorch#20618, JingyunLiang/VRT#49); "not enough
            # memory" is the Windows spelling (MKLpy#27)
            r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)",
            # torch DataLoader: the kernel OOM-killed a worker (pytorch/pytorch#8976)
            r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed",
            r"\[Errno 12\] Cannot allocate memory",  # OSError(ENOMEM): fork, mmap, pin_memory
            # /dev/shm (RAM-backed) exhausted by DataLoader workers passing tensors: torch's
            # SIGBUS handler in csrc/DataLoader.cpp, the worker's death, and the shm file write
            # whose "No space left on device" is about RAM, not the checkpoint disk. The host
            # memory remedies (fewer workers, no pinning) are the ones that help.
            r"insufficient shared memory \(shm\)",
            r"is killed by signal: Bus error",
            r"unable to write to file </torch_",
            r"unable to open shared memory object",
            r"std::bad_alloc",  # C++ heap exhaustion ("what():  std::bad_alloc")
            r"(?<![A-Za-z])MemoryError\b",  # Python's own allocation failure
            # kernel records (mm/oom_kill.c) when a wrapper tails the kernel log: these are the
            # explicit confirmation a bare "Killed" is not
            r"Out of memory: Kill(?:ed)? process",
            r"Memory cgroup out of memory",
            r"oom-kill:",
        ),
    ),
    (
        FailureKind.DISK_FULL,
        _rx(
            r"No space left on device",  # strerror(ENOSPC), also inside safetensors IoError
            r"\[Errno 28\]",
            r"Disk quota exceeded",
            r"\[Errno 122\]",
            # torch.save's zip writer (caffe2 inline_container.cc) drops errno: a failed data
            # write or a short write is ENOSPC/quota in practice (F5-TTS#458,
            # pytorch/pytorch#10577, ChatGLM-6B#1166, so-vits-svc#46)
            r"PytorchStreamWriter failed writing file",
            r"unexpected pos \d+ vs \d+",
        ),
    ),
    (
        FailureKind.DS_BUILD_ERROR,
        _rx(
            # torch/utils/cpp_extension.py _run_ninja_build: error_prefix "Error building
            # extension '<name>'" after CalledProcessError(['ninja', '-v']) (DeepSpeed#885,
            # AutoPoison#6); ninja's own "FAILED: x.o" and "build stopped" (DeepSpeed#1435)
            r"Error building extension '",
            r"ninja: build stopped: subcommand failed",
            r"Command '\['ninja', '-v'\]' returned non-zero exit status",
            r"Ninja is required to load C\+\+ extensions",
            r"(?:^|\s)FAILED: \S+\.o\b",
            r"nvcc fatal",  # "nvcc fatal   : Unsupported gpu architecture 'compute_89'"
            r"unsupported GNU version",  # CUDA crt/host_config.h "#error -- unsupported GNU ..."
            # deepspeed op_builder/builder.py: MissingCUDAException, CUDAMismatchException
            # (raised by assert_no_cuda_mismatch). Its two *warnings* for the same mismatch
            # ("... but since the APIs are compatible, accepting this combination" and the
            # DS_SKIP_CUDA_CHECK=1 one) do not raise and deliberately do not match.
            r"CUDA_HOME does not exist, unable to compile CUDA op",
            r"unable to compile cuda/cpp extensions without a matching cuda version",
            r"CUDAMismatchException|MissingCUDAException",
            r"CUDA_HOME environment variable is not set",  # torch cpp_extension OSError
            # op_builder/builder.py jit_load / compute_capability_args / validate_torch_*
            r"Unable to JIT load the \w+ op due to",
            r"Unable to load \w+ op due to no compute capabilities remaining",
            r"(?:PyTorch|CUDA|HIP) version mismatch! DeepSpeed ops were compiled",
            # a JIT build that failed leaves no .so behind (DeepSpeed#7174, Baichuan-7B#116)
            r"(?:torch_extensions|deepspeed/ops)/\S*\.so: "
            r"(?:cannot open shared object file|undefined symbol)",
        ),
    ),
    (
        FailureKind.DS_CONFIG_ERROR,
        _rx(
            # pydantic models behind DeepSpeedConfig, v1 and v2 wording (DeepSpeed#6525,
            # DeepSpeedExamples#287, FlagEmbedding#1487: DeepSpeedBF16Config)
            r"validation errors? for (?:DeepSpeed\w*|\w*(?:Zero|Offload)\w*)",
            r"DeepSpeedConfigError",  # deepspeed/runtime/config.py
            # transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig
            r"Please correct the following DeepSpeed config values that mismatch "
            r"TrainingArguments",
            r"Expected a string path to an existing deepspeed config",
            # deepspeed/runtime/config.py _batch_assertion: train != micro * gas * world
            r"Check batch related parameters",
            r"isn't supported yet with DeepSpeed Zero-3",  # transformers trainer.py
        ),
    ),
    (
        FailureKind.CHECKPOINT_ERROR,
        _rx(
            # truncated/corrupt torch.load zip (mmdetection#4835, dddd_trainer#36)
            r"PytorchStreamReader failed",
            # safetensors header truncated or corrupt (QwenLM/Qwen#462, ComfyUI#3225)
            r"Error while deserializing header",
            # transformers integrations/deepspeed.py deepspeed_load_checkpoint and
            # trainer.py _load_from_checkpoint
            r"\[deepspeed\] failed to resume from checkpoint",
            r"Can't find a valid checkpoint at",
            r"Weights only load failed",  # torch >= 2.6 weights_only default, old pickles
            r"invalid load key",  # pickle on a non-pickle / corrupted file
            # DeepSpeed ZeRORuntimeException: optimizer state partitioned for another world
            # size, needs a universal checkpoint (changing world size or stage hits this)
            r"The checkpoint being loaded used a DP world size of",
            r"Error\(s\) in loading state_dict for",  # torch nn.Module.load_state_dict
            r"No such file or directory: '[^']*(?:global_step|_states\.pt|checkpoint-\d)",
        ),
    ),
    (
        FailureKind.LOSS_DIVERGENCE,
        _rx(
            # deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale
            r"Current loss scale already at minimum",
            # torch autograd anomaly mode (pytorch/pytorch#51196)
            r"returned nan values in its \d+\w* output",
        ),
    ),
    (
        FailureKind.CUDA_FATAL,
        _rx(
            # Any other CUDA runtime/driver error is sticky: the context is unusable (illegal
            # memory access, device-side assert, unspecified launch failure, ECC, ...).
            r"CUDA error:",
            r"CUDA driver error:",
            r"cuda runtime error \(\d+\)",
            r"cuDNN error: CUDNN_STATUS_",
            r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `",  # kernel assert
            r"illegal memory access was encountered",  # also via NCCL "Cuda failure '...'"
            r"uncorrectable ECC error",
            r"NVRM: Xid",  # kernel driver log, if a wrapper tails it into the output
            r"GPU has fallen off the bus",
        ),
    ),
    (
        FailureKind.KILLED_EXTERNALLY,
        _rx(
            # deepspeed/launcher/launch.py sigkill_handler (DeepSpeed#3232, #4890). The
            # "['python', ..., '--local_rank=N', ...]" in that line is the command of the
            # *last* rank launched, not of the failed one, so no rank is taken from it.
            r"exits with return code = -9\b",
            # torchrun: "failed (exitcode: -9) local_rank: 0" and the "exitcode  : -9" row
            # plus "Signal 9 (SIGKILL) received by PID" of its failure table
            # (MiniCPM-V#770, lzhxmu/CPPO#6)
            r"exitcode\s*: -9\b",
            r"Signal 9 \(SIGKILL\) received by PID",
            r"terminated with signal SIGKILL",  # torch.multiprocessing.spawn
            r"^Killed\s*$",  # a shell reporting its killed foreground job: the "bare Killed"
            r": line \d+: +\d+ Killed\b",  # bash: "bash: line 1: 4242 Killed   python ..."
            # gcc when the OOM killer took the JIT build's compiler; the build error it causes
            # outranks this, and a confirmed host OOM outranks both
            r"Killed signal terminated program",
        ),
    ),
    (
        FailureKind.NCCL_ERROR,
        _rx(
            # torch ProcessGroupNCCL.cpp / NCCLUtils (NVIDIA/nccl#1410, LlamaFactory#6269,
            # ArcticTraining#219, accelerate#2174, pytorch/pytorch#57974)
            r"NCCL error",
            r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument"
            r"|InvalidUsage|RemoteError)",
            r"Watchdog caught collective operation timeout",
            r"NCCL communicator was aborted",
            r"Some NCCL operations have failed or timed out",
            r"watchdog thread terminated with exception",
            r"watchdog got stuck",  # heartbeat monitor: "ProcessGroupNCCL's watchdog got stuck"
            r"Dist(?:Backend|Network|Store)Error",
        ),
    ),
)

# A Python exception line: "KeyError: 'labels'", "torch.distributed.DistBackendError: ...",
# "AssertionError" (bare). At the start of the body, or glued after a tqdm bar's "]".
_EXC_LINE = re.compile(
    r"(?:^|(?<=\]))((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Iteration))(?::\s|:?\s*$)"
)
# Exception lines that say "a child failed" without saying why: the child's own output says it.
_EXC_NOT_USER_CODE = frozenset({"ChildFailedError"})
_TRACEBACK = "Traceback (most recent call last)"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_EOL = re.compile(r"[\r\n]")

# Line prefixes that name a rank, peeled left to right (a pdsh host prefix can wrap a torch one).
_PREFIX = re.compile(
    r"\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:"  # mpirun --tag-output: "[1,3]<stderr>:"
    r"|\[[A-Za-z_][\w-]*?(?P<role>\d+)\]: ?"  # torch "[rank3]: ", torchrun --tee "[default3]:"
    r"|(?P<num>\d{1,6}): "  # srun --label / launcher "3: "
    r"|(?P<host>[A-Za-z0-9][\w.-]*): "  # pdsh "worker-1: " (a host, not a rank)
)
# A pdsh host prefix ("worker-1: ", "node07.cluster: ", "localhost: ") carries no rank, but
# peeling it is what lets "worker-1: [rank3]: ..." find its rank and an echoed source line
# find its indentation. A token is taken for a host only if it looks like one: an exception
# name ("RuntimeError: ...") or a tool name ("ninja: build stopped") must keep its line head.
_HOST_LIKE = re.compile(r"localhost|(?=.*[\d-])(?!.*(?:Error|Exception|Warning)$).*")
_INLINE_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")  # c10d "[Rank 3]", "[PG 1 Rank 3]"
# Echoed source of a traceback frame: plain Python indents it 4 spaces under '  File "...",'
# (3 are left when a prefix like "[default0]:" ate one); rich draws frames inside
# "│ ... ❱ 12 │"; IPython prints "----> 12 code" and "     11 code". Real messages start at
# column 0, or 2 for torchrun's failure table ("  exitcode  : -9").
_ECHO = re.compile(r"(?: {3}|\t)|[ \t]*(?:File \"|[│❱╭╰┃]|-*>\s*\d+\s)")


def _is_echoed_source(body: str) -> bool:
    """True for traceback frame headers and source lines, which repeat code, not messages."""
    return _ECHO.match(body) is not None


def _split_prefix(line: str) -> tuple[int | None, str]:
    """Peel rank/host prefixes; return (rank, body). A host prefix alone gives no rank."""
    rank: int | None = None
    pos = 0
    for _ in range(3):
        m = _PREFIX.match(line, pos)
        if m is None:
            break
        host = m.group("host")
        if host is not None:
            if _HOST_LIKE.fullmatch(host) is None:
                break
        else:
            rank = int(m.group("mpi") or m.group("role") or m.group("num"))
        pos = m.end()
    return rank, line[pos:]


def _line_terminators(text: str, start: int, end: int) -> int:
    """Line ends in text[start:end]: each \\n, each \\r, with \\r\\n counted once."""
    return (
        text.count("\n", start, end) + text.count("\r", start, end) - text.count("\r\n", start, end)
    )


def _make_evidence(
    kind: FailureKind, rank: int | None, *, body: str, line: str, line_no: int, match_end: int
) -> Evidence:
    if rank is None:
        inline = _INLINE_RANK.search(body)  # c10d names the rank in the message itself
        if inline is not None:
            rank = int(inline.group(1))
    return Evidence(
        kind=kind,
        rank=rank,
        line_no=line_no,
        text=_clip(line, match_end),
        fatal=kind is FailureKind.CUDA_OOM,
    )


def _clip(text: str, match_end: int) -> str:
    """At most _MAX_TEXT chars, keeping the matched message visible on very long lines."""
    if len(text) <= _MAX_TEXT:
        return text
    if match_end <= _MAX_TEXT:
        return text[:_MAX_TEXT]
    return "…" + text[match_end - (_MAX_TEXT - 1) : match_end]


class StreamClassifier:
    """Incremental classifier fed with arbitrary text chunks (boundaries may split lines anywhere).

    Lines end at ``\\n``, ``\\r`` (tqdm redraws) or ``\\r\\n``; a line is classified once it is
    complete, so feeding a log whole, in random pieces or byte by byte gives the same evidence.
    Memory is bounded: the partial line (head and tail of a line over 64 KiB) and, per kind,
    the first and last 16 evidence lines.
    """

    def __init__(self) -> None:
        self._carry = ""  # the current partial line
        self._pending_cr = False  # previous chunk ended in "\r": a leading "\n" continues it
        self._lines = 0  # complete lines seen
        self._seen_traceback = False  # arms the user_code_error rule
        self._first: dict[FailureKind, list[Evidence]] = {}
        self._last: dict[FailureKind, deque[Evidence]] = {}

    @property
    def lines_seen(self) -> int:
        """Complete lines classified so far (plus the final partial one after ``close``)."""
        return self._lines

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        """All kept evidence in output order: per kind the first 16 and the last 16 lines."""
        kept: list[Evidence] = []
        for kind, first in self._first.items():
            kept.extend(first)
            kept.extend(self._last.get(kind, ()))
        kept.sort(key=lambda ev: ev.line_no)
        return tuple(kept)

    def feed(self, text: str) -> list[Evidence]:
        """Classify the lines this chunk completes; keep the trailing partial line for later."""
        if not text:
            return []
        if self._pending_cr and text[0] == "\n":
            text = text[1:]  # second half of a "\r\n" split across chunks: same line end
        self._pending_cr = False
        if not text:
            return []
        last_nl = text.rfind("\n")
        last_cr = text.rfind("\r")
        last = max(last_nl, last_cr)
        if last < 0:  # no line completed: only extend the partial line
            self._append_carry(text)
            return []
        buf = self._carry + text if self._carry else text
        cut = len(buf) - len(text) + last + 1  # end of the complete lines in buf
        self._carry = buf[cut:]
        self._pending_cr = buf[cut - 1] == "\r" and cut == len(buf)
        found = self._scan(buf, cut)
        self._lines += _line_terminators(buf, 0, cut)
        return found

    def close(self) -> list[Evidence]:
        """Flush the last partial line (output that ended without a newline)."""
        self._pending_cr = False
        if not self._carry:
            return []
        tail, self._carry = self._carry, ""
        found = self._scan(tail + "\n", len(tail) + 1)
        self._lines += 1
        return found

    # -- internals ---------------------------------------------------------------------------

    def _append_carry(self, text: str) -> None:
        carry = self._carry + text
        if len(carry) > _MAX_CARRY:
            # A "line" this long is binary junk or an unterminated progress stream; keep its
            # head (where messages start) and its tail (where glued messages end up).
            half = _MAX_CARRY // 2
            carry = carry[:half] + carry[-half:]
        self._carry = carry

    def _scan(self, buf: str, end: int) -> list[Evidence]:
        """Classify the complete lines in buf[:end] that contain a trigger."""
        if buf.find("\x1b", 0, end) >= 0:
            # Colour codes never contain line ends, so stripping keeps line numbering intact.
            buf = _ANSI.sub("", buf[:end])
            end = len(buf)
        found: list[Evidence] = []
        counted_to = 0  # line_no bookkeeping: terminators already counted in buf[:counted_to]
        line_no = self._lines + 1
        hit = _TRIGGER_RX.search(buf, 0, end)
        while hit is not None:
            pos = hit.start()
            start = max(buf.rfind("\n", counted_to, pos), buf.rfind("\r", counted_to, pos)) + 1
            eol = _EOL.search(buf, pos, end)
            line_end = eol.start() if eol is not None else end
            line_no += _line_terminators(buf, counted_to, start)
            counted_to = start
            ev = self._classify_line(buf[start:line_end], line_no)
            if ev is not None:
                found.append(ev)
                self._keep(ev)
            hit = _TRIGGER_RX.search(buf, line_end, end)  # the next line with a trigger
        return found

    def _classify_line(self, line: str, line_no: int) -> Evidence | None:
        rank, body = _split_prefix(line)
        if _TRACEBACK in body:  # before the echo test: rich draws it inside "╭── ... ──╮"
            self._seen_traceback = True
            return None
        if _is_echoed_source(body):
            return None
        offset = len(line) - len(body)
        for kind, rule in _RULES:
            m = rule.search(body)
            if m is not None:
                return _make_evidence(
                    kind, rank, body=body, line=line, line_no=line_no, match_end=offset + m.end()
                )
        if self._seen_traceback:
            m = _EXC_LINE.search(body)
            if m is not None and m.group(1).rsplit(".", 1)[-1] not in _EXC_NOT_USER_CODE:
                return _make_evidence(
                    FailureKind.USER_CODE_ERROR,
                    rank,
                    body=body,
                    line=line,
                    line_no=line_no,
                    match_end=offset + m.end(),
                )
        return None

    def _keep(self, ev: Evidence) -> None:
        first = self._first.setdefault(ev.kind, [])
        if len(first) < _KEEP_PER_KIND:
            first.append(ev)
            return
        last = self._last.get(ev.kind)
        if last is None:
            last = self._last[ev.kind] = deque(maxlen=_KEEP_PER_KIND)
        last.append(ev)


def classify(
    evidence: Sequence[Evidence],
    exit: ExitStatus,
    *,
    host_oom_confirmed: bool = False,
    hang: bool = False,
) -> Failure | None:
    """None = success (exit raw == 0 and not hang). Otherwise the root cause.

    - Evidence kinds compete by ``_PRIORITY``, not by recency: NCCL timeouts after one rank's
      OOM are consequences, and the OOM wins.
    - SIGKILL (exit -9/137/247, or launcher lines saying a rank got -9) is killed_externally:
      a bare kill does not say *who* killed (OOM killer, a watchdog, a user). It is host_oom
      only when the caller confirmed a kernel/cgroup OOM kill (NVRx rule: a bare "Killed"
      line is not confirmation). Confirmation only explains a kill the attempt shows.
    - ``hang`` (the supervisor ended a stalled attempt) is HANG unless stronger evidence
      explains the stall; the supervisor's own SIGKILL and teardown tracebacks do not.
    - A non-zero (or unknown) exit without evidence is UNKNOWN.
    """
    if exit.raw == 0 and not hang:
        return None
    by_kind: dict[FailureKind, list[Evidence]] = {}
    for ev in sorted(evidence, key=lambda e: e.line_no):
        by_kind.setdefault(ev.kind, []).append(ev)

    present = {kind for kind in by_kind if kind in _RANK_OF}  # hang/unknown are verdicts
    if exit.killed:
        present.add(FailureKind.KILLED_EXTERNALLY)
    if host_oom_confirmed and FailureKind.KILLED_EXTERNALLY in present:
        # The cgroup counter also counts OOM kills of *other* processes in the same cgroup
        # (on a workstation: the user's whole session), so it only explains a kill this
        # attempt actually shows; it never turns, say, a KeyError into a host OOM.
        present.add(FailureKind.HOST_OOM)
        present.discard(FailureKind.KILLED_EXTERNALLY)
    if hang:
        present -= _WEAKER_THAN_HANG
    ranked = sorted(present, key=_RANK_OF.__getitem__)

    if ranked:
        winner = ranked[0]
    elif hang:
        winner = FailureKind.HANG
    else:
        winner = FailureKind.UNKNOWN

    lead = list(by_kind.get(winner, ()))
    explained = {winner}
    if winner is FailureKind.HOST_OOM:
        lead += by_kind.get(FailureKind.KILLED_EXTERNALLY, [])  # the kill it explains
        explained.add(FailureKind.KILLED_EXTERNALLY)
    rank = next((ev.rank for ev in lead), None)
    others = [by_kind[kind][0] for kind in _PRIORITY if kind in by_kind and kind not in explained]
    return Failure(kind=winner, rank=rank, evidence=_pick_lines(lead, others), exit=exit)


def _pick_lines(lead: list[Evidence], others: list[Evidence]) -> tuple[str, ...]:
    """Winner's distinct lines first (5), one line per other kind, then more of the winner's.

    The same message from eight ranks would otherwise crowd out the one line that shows
    what the other ranks did.
    """
    lead_texts = list(dict.fromkeys(ev.text for ev in lead))
    other_texts = [t for t in dict.fromkeys(ev.text for ev in others) if t not in lead_texts]
    head = _MAX_WINNER_LINES_FIRST
    return tuple((lead_texts[:head] + other_texts + lead_texts[head:])[:_MAX_FAILURE_LINES])


def classify_text(
    text: str, exit_code: int | None, *, host_oom_confirmed: bool = False
) -> Failure | None:
    """Convenience for ``dsguard explain`` and tests.

    Runs a StreamClassifier over the whole text, then ``classify`` with the decoded exit code.
    """
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    return classify(sc.evidence, decode_exit(exit_code), host_oom_confirmed=host_oom_confirmed)
