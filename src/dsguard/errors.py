"""dsguard's own faults. Child failures are data (see ``supervisor.classify``), not exceptions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class DsguardError(Exception):
    """Base of every error dsguard raises about itself or its input."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a job file, located so the user can jump to it."""

    file: Path | None
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = str(self.file) if self.file is not None else "<command line>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.field}: {self.message}"


class JobFileError(DsguardError):
    """The job file (or quick-start command line) is invalid; nothing may be launched.

    Carries every problem found, not just the first, so one edit round fixes them all.
    """

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class InvalidTransition(DsguardError):
    """A run-state transition outside the table: a bug in dsguard, never a child failure."""


class LockHeldError(DsguardError):
    """Another dsguard already supervises this job (two trainers would share GPUs and dirs)."""


class InvariantViolation(DsguardError):
    """A policy produced knobs that break the global-batch invariant: a bug, never data."""
