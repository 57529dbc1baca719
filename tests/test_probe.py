"""The one probe runner: every way a probe can fail comes back as one result type."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dsguard.host.probe import exit_word, run_probe

WRITE = """
import json, os, sys
def answer(obj):
    tmp = sys.argv[-1] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, sys.argv[-1])
"""


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "probe.py"
    path.write_text(WRITE + body)
    return path


def test_answer_and_request_round_trip(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "req = json.load(open(sys.argv[1]))\n"
        "print('noise on stdout is only diagnostics')\n"
        "answer({'echo': req, 'argc': len(sys.argv), 'cwd': os.getcwd()})\n",
    )
    res = run_probe(
        script, sys.executable, env=dict(os.environ), timeout_s=30.0, request={"a": [1, 2]}
    )
    assert res.ok and res.failure is None and res.error is None and res.returncode == 0
    assert res.data is not None
    assert res.data["echo"] == {"a": [1, 2]} and res.data["argc"] == 3
    assert res.data["cwd"] != os.getcwd()  # a scratch dir, removed afterwards
    assert not Path(res.data["cwd"]).exists()
    assert res.duration_s > 0


def test_without_request_the_answer_is_the_only_argument(tmp_path: Path) -> None:
    res = run_probe(
        _script(tmp_path, "answer({'argc': len(sys.argv)})\n"),
        sys.executable,
        env=dict(os.environ),
        timeout_s=30.0,
    )
    assert res.ok and res.data == {"argc": 2}


def test_crash_keeps_partial_facts_and_the_stderr_tail(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "answer({'complete': False, 'python': 1})\n"
        "sys.stderr.write('line1\\nline2\\nline3\\nValueError: boom\\n')\n"
        "sys.exit(3)\n",
    )
    res = run_probe(script, sys.executable, env=dict(os.environ), timeout_s=30.0)
    assert not res.ok and res.failure == "crashed" and res.returncode == 3
    assert res.data == {"complete": False, "python": 1}
    assert res.error is not None
    assert res.error.startswith(f"{sys.executable} exited 3: ")
    assert res.error.endswith("line2 | line3 | ValueError: boom")
    assert "line1" not in res.error


def test_killed_by_a_signal_names_it(tmp_path: Path) -> None:
    script = _script(tmp_path, "import signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    res = run_probe(script, sys.executable, env=dict(os.environ), timeout_s=30.0)
    assert res.failure == "crashed" and res.returncode == -9
    assert "exited -9 (SIGKILL)" in (res.error or "")
    assert exit_word(2) == "2" and exit_word(-15) == "-15 (SIGTERM)" and exit_word(-999) == "-999"


def test_timeout_kills_and_keeps_what_was_written(tmp_path: Path) -> None:
    script = _script(tmp_path, "answer({'stage': 'torch'})\nimport time; time.sleep(60)\n")
    res = run_probe(script, sys.executable, env=dict(os.environ), timeout_s=1.0)
    assert res.failure == "timeout" and res.returncode is None
    assert res.data == {"stage": "torch"}
    assert res.error == f"{sys.executable} did not answer within 1 s"
    assert res.duration_s < 30


def test_bad_or_missing_answer(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nopen(sys.argv[-1], 'w').write('{not json')\nprint('hi')\n")
    res = run_probe(bad, sys.executable, env=dict(os.environ), timeout_s=30.0)
    assert res.failure == "bad_json" and res.data is None
    assert "not valid JSON" in (res.error or "") and "hi" in (res.error or "")
    listing = tmp_path / "list.py"
    listing.write_text("import json, sys\njson.dump([1], open(sys.argv[-1], 'w'))\n")
    res = run_probe(listing, sys.executable, env=dict(os.environ), timeout_s=30.0)
    assert res.failure == "bad_json" and "not a JSON object" in (res.error or "")
    silent = tmp_path / "silent.py"
    silent.write_text("pass\n")
    res = run_probe(silent, sys.executable, env=dict(os.environ), timeout_s=30.0)
    assert res.failure == "bad_json" and "wrote no answer" in (res.error or "")


def test_an_interpreter_that_cannot_run(tmp_path: Path) -> None:
    script = _script(tmp_path, "answer({})\n")
    missing = run_probe(script, str(tmp_path / "nope"), env={}, timeout_s=5.0)
    assert missing.failure == "cannot_run" and missing.data is None
    assert missing.error == f"cannot run {tmp_path / 'nope'}: no such interpreter"
    not_exec = tmp_path / "python"
    not_exec.write_text("#!/bin/sh\n")
    res = run_probe(script, str(not_exec), env={}, timeout_s=5.0)
    assert res.failure == "cannot_run" and "not executable" in (res.error or "")


def test_the_env_is_the_probes_whole_environment(tmp_path: Path) -> None:
    script = _script(tmp_path, "answer(dict(os.environ))\n")
    env = {"PATH": os.environ.get("PATH", ""), "DSGUARD_PROBE_TEST": "x"}
    res = run_probe(script, sys.executable, env=env, timeout_s=30.0)
    assert res.ok and res.data is not None
    assert res.data["DSGUARD_PROBE_TEST"] == "x"
    assert "HOME" not in res.data  # dsguard's own environment is not merged in
