"""Read the per-rank heartbeat files an attempt's training processes write (see protocol).

A file that is missing, half-written by a foreign tool, or from another attempt is ignored:
heartbeats are evidence of progress and capabilities, never a reason for dsguard to fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dsguard.protocol import Heartbeat

_NAME = re.compile(r"attempt-(\d+)-rank-(\d+)\.json")


def read_heartbeats(heartbeat_dir: Path, attempt: int) -> list[Heartbeat]:
    """Every parseable heartbeat of ``attempt``, ordered by rank."""
    found: list[Heartbeat] = []
    try:
        entries = list(heartbeat_dir.iterdir())
    except OSError:
        return []
    for path in entries:
        m = _NAME.fullmatch(path.name)
        if m is None or int(m.group(1)) != attempt:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found.append(Heartbeat.from_dict(data))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda hb: hb.rank)


def capabilities(heartbeats: list[Heartbeat]) -> frozenset[str]:
    """What every reporting rank can do (a capability one rank lacks is not usable)."""
    if not heartbeats:
        return frozenset()
    caps = set(heartbeats[0].capabilities)
    for hb in heartbeats[1:]:
        caps &= set(hb.capabilities)
    return frozenset(caps)
