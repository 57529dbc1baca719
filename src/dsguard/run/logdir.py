"""Every name dsguard gives a file or folder in a job's log dir: one home, so the loop, the
CLI (``status``, ``events``, ``explain``) and the training side cannot drift apart.

The layout (``dsguard status`` and the tests read the same names)::

    LOG_DIR/                       0700; every file dsguard creates in it 0600
      events.jsonl                 append-only event log, one JSON object per line
      state.json                   the run's state, replaced atomically at every transition
      dsguard.lock                 held by the supervising dsguard (flock)
      attempt-N.log                the attempt's combined output, as the child wrote it
      attempt-N.deepspeed.json     the DeepSpeed config rendered for the attempt
      heartbeat/attempt-N-rank-R.json   progress written by the training process
      heartbeat/attempt-N-rank-R.jsonl  every heartbeat, one line each (``dsguard report``)
      report.html                  written by ``dsguard report`` and by notifications
      control/stop-attempt-N.json       a request to the training process to save and stop

Attempt numbers are never reused within a log dir, so a late write from a dying attempt cannot
be mistaken for the next attempt's.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dsguard.protocol import CONTROL_SUBDIR, HEARTBEAT_SUBDIR, heartbeat_path, stop_request_path
from dsguard.run.safefs import UnsafePathError, make_private_dir

EVENTS_FILENAME = "events.jsonl"
STATE_FILENAME = "state.json"
LOCK_FILENAME = "dsguard.lock"


def ensure_log_dir(root: Path, *, subdirs: bool = True) -> LogDir:
    """Create ``root`` (0700 whatever the umask) and check it is safe to write into, before
    anything is launched: a real directory, not a symlink, owned by the running user or root.

    A log dir that is a symlink, or that another user owns, lets that user point
    ``events.jsonl`` or ``attempt-N.log`` at any file, which dsguard (often root) would then
    append to; 0700 keeps argv, environment and output from other local users.

    Raises:
        UnsafePathError (an ``OSError``): a symlink, not a directory, or another user's; its
            message is one line naming the path.
        OSError: it cannot be created (a parent is a file, read-only filesystem, ...).
    """
    make_private_dir(root, narrow=True)
    logs = LogDir(root)
    for path in (logs.events, logs.state, logs.lock):
        # Refused here, before the lock and the launch, so every unsafe log dir is one
        # clear error at start (the writers refuse them later too, one by one).
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(path).st_mode):
                what = "a symlink" if os.path.islink(path) else "not a regular file"
                raise UnsafePathError(path, f"is {what}: dsguard never writes through one")
    if subdirs:
        # Made here, 0700, so the training side's mkdir(exist_ok=True) finds them private.
        # ``subdirs=False`` before the lock is taken: the lock is the first thing created,
        # so a full file system is reported as the lock it could not take.
        make_private_dir(logs.heartbeat_dir)
        make_private_dir(logs.control_dir)
    return logs


@dataclass(frozen=True, slots=True)
class LogDir:
    """A job's log dir and the name of everything dsguard keeps in it."""

    root: Path

    @property
    def events(self) -> Path:
        return self.root / EVENTS_FILENAME

    @property
    def state(self) -> Path:
        return self.root / STATE_FILENAME

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILENAME

    @property
    def heartbeat_dir(self) -> Path:
        return self.root / HEARTBEAT_SUBDIR

    @property
    def control_dir(self) -> Path:
        return self.root / CONTROL_SUBDIR

    def attempt_log(self, attempt: int) -> Path:
        return self.root / f"attempt-{attempt}.log"

    def deepspeed_config(self, attempt: int) -> Path:
        return self.root / f"attempt-{attempt}.deepspeed.json"

    def knobs_file(self, attempt: int, name: str) -> Path:
        """This attempt's copy of the script's own config file (``knobs_file:``), keeping the
        original name so its suffix still tells the script's loader the format."""
        return self.root / f"attempt-{attempt}.{name}"

    def heartbeat(self, attempt: int, rank: int) -> Path:
        return heartbeat_path(self.heartbeat_dir, attempt, rank)

    def heartbeat_prefix(self, attempt: int) -> str:
        """The file-name prefix of ``attempt``'s heartbeats (one file per rank)."""
        return heartbeat_path(Path(), attempt, 0).name.removesuffix("0.json")

    def stop_request(self, attempt: int) -> Path:
        return stop_request_path(self.control_dir, attempt)
