"""Read the per-rank heartbeat files an attempt's training processes write (see protocol).

A file that is missing, half-written by a foreign tool, or from another attempt is ignored:
heartbeats are evidence of progress and capabilities, never a reason for dsguard to fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from dsguard.protocol import Heartbeat, decode_heartbeat

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
            found.append(decode_heartbeat(path.read_bytes()))
        except (OSError, msgspec.DecodeError):
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
