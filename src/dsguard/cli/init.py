"""``dsguard init -- <command>``: write a commented job file for the command you run today."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from dsguard.errors import JobFileError
from dsguard.exitcodes import EXIT_OK, EXIT_USAGE

__all__ = ["cmd_init"]


def cmd_init(ns: argparse.Namespace) -> int:
    """Detect the framework, write ``--output`` (never over an existing file), print its path."""
    from dsguard.job.initjob import detect, render_job

    command: list[str] = list(ns.command)
    if not command:
        print("dsguard init: give the training command after --", file=sys.stderr)
        return EXIT_USAGE
    out = Path(ns.output)
    cwd = Path.cwd()
    try:
        detected = detect(command, cwd)
    except JobFileError as err:
        for p in err.problems:
            print(f"dsguard init: {p.field}: {p.message}", file=sys.stderr)
        return EXIT_USAGE
    stem = Path(detected.target).stem if not detected.is_module else detected.target
    name = ns.name or re.sub(r"[^A-Za-z0-9_.-]", "-", stem.split(".")[-1]) or "job"
    text = render_job(detected, name)
    try:
        # O_EXCL: an existing job file (or a link in its place) is never written over.
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        print(f"dsguard init: {out} exists; not overwritten (use --output)", file=sys.stderr)
        return EXIT_USAGE
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(out.resolve())
    return EXIT_OK
