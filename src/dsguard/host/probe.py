"""Run one probe script (:mod:`dsguard.probes`) with the training interpreter.

The supervisor never imports torch or deepspeed (the training environment may be another
interpreter, another venv, or broken), so every fact about that environment comes from a
script run by path with ``job.python``. Before this module there were three copies of the
subprocess dance, and they disagreed on what a missing interpreter, a hang or a crash meant.
Here is the one protocol:

* argv is ``python SCRIPT [REQUEST.json] ANSWER.json``: the answer path is always last; the
  request (when the caller has one) is a JSON file before it. Probes write the answer
  atomically (``tmp`` + ``os.replace``) and may write it more than once, so a probe that dies
  half-way still leaves the facts it had (the env probe's ``complete`` flag says how far it got);
* stdout and stderr are only diagnostics (DeepSpeed prints op-builder warnings to stdout);
  the tail of stderr explains a crash;
* a timeout kills the probe (a wedged GPU can hang CUDA initialisation forever).

The result is one type, :class:`ProbeResult`: the parsed answer, or the reason there is none.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["ProbeFailure", "ProbeResult", "exit_word", "run_probe"]

#: Why a probe gave no (complete) answer: the interpreter could not be started, it ran past
#: the timeout, it exited non-zero, or its answer file is missing or not a JSON object.
ProbeFailure = Literal["cannot_run", "timeout", "crashed", "bad_json"]

#: stderr lines kept to explain a crash (the exception line is usually the last).
_TAIL_LINES = 3
_TAIL_CHARS = 400


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a probe answered, or why it did not.

    ``data`` may be set together with ``failure`` ``"crashed"`` or ``"timeout"``: the probe
    wrote part of its answer before it died or hung, and those facts are still true.
    """

    data: dict[str, Any] | None
    failure: ProbeFailure | None
    #: One line for a human: why there is no answer (None when the probe succeeded).
    error: str | None
    returncode: int | None
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.failure is None and self.data is not None


def exit_word(code: int) -> str:
    """``1``, or ``-9 (SIGKILL)`` for a probe killed by a signal (the OOM killer, a user)."""
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()[-_TAIL_LINES:]
    return " | ".join(lines)[-_TAIL_CHARS:] or "no output"


def _read_answer(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, "the probe wrote no answer"
    except OSError as exc:
        return None, f"cannot read the probe's answer: {exc.strerror or exc}"
    try:
        data = json.loads(text)
    except ValueError:
        return None, "the probe's answer is not valid JSON"
    if not isinstance(data, dict):
        return None, "the probe's answer is not a JSON object"
    return data, None


def run_probe(
    script: Path,
    python: str,
    *,
    env: Mapping[str, str],
    timeout_s: float,
    request: object | None = None,
) -> ProbeResult:
    """Run ``python script [request] answer`` in a scratch directory; never raises.

    Args:
        script: a file under :mod:`dsguard.probes` (``ENV_PROBE``, ``DS_CONFIG_PROBE``, ...).
        python: the training interpreter.
        env: the probe's whole environment (the job's, so it sees what training will see).
        timeout_s: wall-clock bound; the probe is killed after it.
        request: JSON-serialisable input, written to a file the probe gets before the answer.
    """
    start = time.monotonic()

    def result(
        data: dict[str, Any] | None, failure: ProbeFailure | None, error: str | None, rc: int | None
    ) -> ProbeResult:
        return ProbeResult(data, failure, error, rc, time.monotonic() - start)

    with tempfile.TemporaryDirectory(prefix="dsguard-probe-") as tmp:
        answer = Path(tmp) / "answer.json"
        argv = [python, str(script)]
        if request is not None:
            req = Path(tmp) / "request.json"
            req.write_text(json.dumps(request))
            argv.append(str(req))
        argv.append(str(answer))
        try:
            proc = subprocess.run(
                argv,
                env=dict(env),
                cwd=tmp,  # a stray file the probe writes lands in the scratch dir
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return result(None, "cannot_run", f"cannot run {python}: no such interpreter", None)
        except PermissionError:
            return result(None, "cannot_run", f"cannot run {python}: not executable", None)
        except OSError as exc:
            return result(None, "cannot_run", f"cannot run {python}: {exc.strerror or exc}", None)
        except subprocess.TimeoutExpired:
            # Keep what a probe that writes as it goes had found before it hung.
            partial, _ = _read_answer(answer)
            why = f"{python} did not answer within {timeout_s:g} s"
            return result(partial, "timeout", why, None)
        data, bad = _read_answer(answer)
    rc = proc.returncode
    if rc != 0:
        return result(data, "crashed", f"{python} exited {exit_word(rc)}: {_tail(proc)}", rc)
    if bad is not None:
        return result(None, "bad_json", f"{bad} ({_tail(proc)})", rc)
    return result(data, None, None, rc)
