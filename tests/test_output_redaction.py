"""Credentials in the child's output never reach ``attempt-N.log`` or the console echo.

A training script that prints its arguments (``--hub_token=hf_...``) or a wrapper that dumps
its environment (``HF_TOKEN=...``) would otherwise leave the token in the attempt log, which
users attach to bug reports next to the (already redacted) event log. Real child, real pipe.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from dsguard.core.classify import StreamClassifier
from dsguard.run.events import redact_output
from dsguard.run.watch import OutputPump

TOKEN = "hf_" + "Ab3" * 12


def _run(script: str, tmp_path: Path) -> tuple[bytes, bytes]:
    log = tmp_path / "attempt-1.log"
    echo = io.BytesIO()
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert child.stdout is not None
    pump = OutputPump(child.stdout.fileno(), log, StreamClassifier(), on_fatal=lambda ev: None,
                      echo=echo)  # fmt: skip
    pump.start()
    assert child.wait(timeout=60) == 0
    assert pump.join(60) and pump.error is None
    child.stdout.close()
    return log.read_bytes(), echo.getvalue()


def test_tokens_in_output_are_redacted_in_the_log_and_the_echo(tmp_path: Path) -> None:
    # The token of the long line straddles the pipe's 64 KiB read boundary: held back until
    # its line ends, it is redacted whole.
    script = (
        "import sys\n"
        "w = sys.stdout.buffer.write\n"
        f"w(b'args: --hub_token={TOKEN} --tokenizer_name gpt2\\n')\n"
        f"w(b'HF_TOKEN={TOKEN}\\nWANDB_API_KEY=0123456789abcdef\\n')\n"
        "w('\u5df2\u6740\u6b7b \\xff\\n'.encode('utf-8', 'surrogateescape'))\n"
        "w(b'raw byte \\xff kept\\n')\n"
        f"w(b'x' * 65530 + b' {TOKEN} end\\n')\n"
        "w(b'last line without newline')\n"
    )
    log, echo = _run(script, tmp_path)
    assert log == echo
    assert TOKEN.encode() not in log and b"hf_Ab3" not in log
    assert b"0123456789abcdef" not in log
    assert log.count(b"<redacted>") == 4
    assert b"--tokenizer_name gpt2\n" in log  # not a secret: untouched
    assert "已杀死".encode() in log and b"raw byte \xff kept\n" in log
    assert log.endswith(b" end\nlast line without newline")  # flushed at EOF


def test_output_without_secrets_is_passed_through_byte_for_byte() -> None:
    data = b"step 3 loss 2.31 \xe2\x96\x88\xff\r{'key_len': 4, 'monkey': 1}\n"
    assert redact_output(data) == data
    assert redact_output(b"--api_key=abc --lr=1e-4\n") == b"--api_key=<redacted> --lr=1e-4\n"


def test_secrets_printed_with_a_space_or_quoted_are_redacted() -> None:
    # A wrapper echoing its argv joined by spaces, argparse's Namespace repr, a config dict.
    line = (
        b"cmd: train.py --api_key sk-live-0123 --lr 1e-4 --hub_token --fp16\n"
        b"Namespace(api_key='sk-live-0123', model='gpt2', max_tokens=5)\n"
        b"{'hub_token': \"abc123\", 'tokenizer_name': 'gpt2', 'key_len': 4}\n"
    )
    out = redact_output(line)
    assert b"sk-live-0123" not in out and b"abc123" not in out
    assert b"--api_key <redacted> --lr 1e-4" in out
    assert b"--hub_token --fp16" in out  # the next word is a flag, not a value
    assert b"api_key='<redacted>', model='gpt2', max_tokens=5" in out
    assert b"'hub_token': \"<redacted>\", 'tokenizer_name': 'gpt2', 'key_len': 4" in out


def test_secrets_after_long_words_and_flags_after_punctuation_are_redacted() -> None:
    """Each pattern tries a name once per word (round 116: a 64 KiB word once took the pump's
    thread about 100 s, bench/p_redact.py); a flag still counts after a quote, a bracket, a
    colon or an equals sign, only not glued to a word or another dash."""
    for shape in ("x", "a_", "A", "-a", "--a", "ab.", "'a", "=a", ".-a"):
        line = (shape * 2000 + f" --hub_token={TOKEN} token='s3cret' end\n").encode()
        out = redact_output(line)
        assert TOKEN.encode() not in out and b"s3cret" not in out, shape
        assert out.endswith(b" --hub_token=<redacted> token='<redacted>' end\n"), shape
    for line in (
        b"args=--hub_token=abc123",
        b"'--api_key=abc123'",
        b"[--api_key abc123]",
        b"cmd:--password=abc123",
        b"(--wandb_api_key abc123)",
    ):
        assert b"abc123" not in redact_output(line), line
    # glued to a word it is no flag (before round 116 it was read as one)
    assert redact_output(b"x--hub_token=abc123") == b"x--hub_token=abc123"
