"""What redacting one long line of child output costs the pump: ``python -m bench.p_redact``.

``run.events.redact_output`` runs on every read the pump makes that may hold a credential
(``--hub_token=...``, ``token='...'``, ``hf_...``) before it reaches ``attempt-N.log`` and the
console echo. A line of 64 KiB with such a word in it (a progress bar's fill, a dumped tensor,
a base64 blob, then a token) is read in one piece. Each shape below is one long word repeated,
then a token and a quoted secret, so every substitution runs over it; the time is CPU seconds
for one ``redact_output`` call, and the check is that both secrets are gone.

Until round 116 four of the patterns could start again at every character of a long word and
read it to its end, quadratic in its length: 64 KiB of "x" took about 100 s, the pump's thread
stalled and the child blocked on a full pipe (tests/test_output_redaction.py's join timed out in
a clean-clone CI run).
"""

from __future__ import annotations

import argparse
import time

from dsguard.run.events import redact_output

TOKEN = "hf_" + "Ab3" * 12
SHAPES = ("x", "a_", "A", "-a", "--a", "ab.", "'a", "=a", ".-a")


def run(length: int) -> list[tuple[str, float, bool]]:
    """(shape, CPU seconds, both secrets redacted) for a line of ``length`` bytes per shape."""
    rows = []
    for shape in SHAPES:
        line = (shape * (length // len(shape)) + f" {TOKEN} token='s3cret' end\n").encode()
        t0 = time.process_time()
        out = redact_output(line)
        rows.append(
            (shape, time.process_time() - t0, TOKEN.encode() not in out and b"s3cret" not in out)
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=65530)
    args = parser.parse_args(argv)
    print(f"| shape repeated to {args.length:,} bytes | CPU s | secrets redacted |")
    print("|---|---:|---|")
    for shape, seconds, ok in run(args.length):
        print(f"| `{shape}` | {seconds:.4f} | {'yes' if ok else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
