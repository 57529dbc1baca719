"""Who killed the attempt? The SIGKILL playbook, as a pure function of the evidence.

A SIGKILL does not say who sent it. The common answer on a training box is the kernel's OOM
killer (host RAM ran out: the classic "exits with return code = -9"), and the careful
engineer's answer to an unexplained -9 is therefore "treat it as host memory": lower the
micro-batch and the DataLoader workers. dsguard used to do the opposite (an unconfirmed kill
was ``killed_externally``, retried once at the same config, then given up), so the most common
host failure was never healed.

:func:`judge_sigkill` gives one of three outcomes:

* **confirmed**: something independent says it was the OOM killer: the attempt's memory
  cgroup's ``oom_kill`` counter rose, the kernel log names one of the attempt's pids, the
  attempt's resident memory was near its limit just before the kill, a user-space OOM daemon
  (systemd-oomd, earlyoom) reported a kill in the attempt's window, or the memory pressure
  (PSI, ``full avg10``) was high.
* **refuted**: the counter was readable and did not move, there was no memory pressure, and
  something else is *known* to have sent the signal (dsguard's own stop, the service manager,
  a scheduler's preemption or time limit, named in the output).
* **unknown**: anything else. The run loop treats unknown like confirmed (the host-OOM
  ladder) and records ``host_oom_confirmed: null`` so the user can tell the two apart.

The live probing (the counter, ``/dev/kmsg``, PSI, the journal) is in ``host/`` behind the run
loop's ``Host`` seam; everything here is plain values, so each branch is unit-tested.
See the kernel's ``Documentation/admin-guide/cgroup-v1/memory.rst`` (``oom_control``),
``cgroup-v2.rst`` (``memory.events``) and ``accounting/psi.rst``.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from dsguard.core.classify import rank_exit_from_text

__all__ = [
    "NEAR_LIMIT_FRACTION",
    "PSI_FULL_HIGH_PCT",
    "KillEvidence",
    "KillJudgement",
    "KillOutcome",
    "judge_sigkill",
    "kill_sender_in",
    "oom_daemon_kills",
    "rank_killed_in",
]

#: Resident memory this close to the limit just before a SIGKILL is taken as the OOM killer's.
NEAR_LIMIT_FRACTION = 0.9
#: PSI ``full avg10`` (percent of the last 10 s in which every task stalled on memory) at or
#: above this is memory pressure high enough to explain a kill; 0 on a healthy machine.
PSI_FULL_HIGH_PCT = 10.0


class KillOutcome(StrEnum):
    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class KillEvidence:
    """What the loop measured about one SIGKILLed attempt (None: could not be read)."""

    #: Rise of the attempt's cgroup ``oom_kill`` counter across the attempt.
    oom_kill_delta: int | None
    #: Pids of the attempt the kernel log says the OOM killer killed.
    kernel_oom_pids: tuple[int, ...] = ()
    #: Peak resident memory of the attempt's tree in its last samples, and its limit.
    rss_peak_bytes: int | None = None
    limit_bytes: int | None = None
    #: systemd-oomd / earlyoom journal lines that name a kill in the attempt's window.
    oom_daemon_lines: tuple[str, ...] = ()
    #: PSI memory ``full avg10`` (percent) right after the kill.
    psi_full_avg10: float | None = None
    #: Who is known to have sent the signal ("dsguard", "a scheduler's preemption", ...).
    sender: str | None = None


@dataclass(frozen=True, slots=True)
class KillJudgement:
    outcome: KillOutcome
    #: Why, one line per fact (the confirmations, or what refuted it, or what was missing).
    reasons: tuple[str, ...]

    @property
    def host_oom_confirmed(self) -> bool | None:
        """True / False / None (unknown), as ``failure_detected`` records it."""
        if self.outcome is KillOutcome.UNKNOWN:
            return None
        return self.outcome is KillOutcome.CONFIRMED


def _confirmations(ev: KillEvidence) -> list[str]:
    found: list[str] = []
    if ev.oom_kill_delta is not None and ev.oom_kill_delta > 0:
        found.append(f"cgroup oom_kill counter +{ev.oom_kill_delta}")
    if ev.kernel_oom_pids:
        found.append(f"kernel log: OOM killer killed pid {ev.kernel_oom_pids[0]}")
    rss, limit = ev.rss_peak_bytes, ev.limit_bytes
    if rss is not None and limit and rss >= NEAR_LIMIT_FRACTION * limit:
        found.append(
            f"resident memory {rss / 2**30:.2f} GiB, {100 * rss / limit:.0f} % of the "
            f"{limit / 2**30:.2f} GiB limit, just before the kill"
        )
    found += [f"OOM daemon: {line}" for line in ev.oom_daemon_lines[:2]]
    if ev.psi_full_avg10 is not None and ev.psi_full_avg10 >= PSI_FULL_HIGH_PCT:
        found.append(f"memory pressure: PSI full avg10={ev.psi_full_avg10:.1f} %")
    return found


def judge_sigkill(ev: KillEvidence) -> KillJudgement:
    """Confirmed, refuted or unknown (see the module doc). Any confirmation wins: a kill
    dsguard or a scheduler sent can still have come after the OOM killer's own."""
    found = _confirmations(ev)
    if found:
        return KillJudgement(KillOutcome.CONFIRMED, tuple(found))
    missing: list[str] = []
    if ev.oom_kill_delta is None:
        missing.append("the memory cgroup's oom_kill counter could not be read")
    if ev.psi_full_avg10 is None:
        pressure = "memory pressure unknown (no PSI)"
    else:
        pressure = f"no memory pressure (PSI full avg10={ev.psi_full_avg10:.1f} %)"
    if ev.sender is None:
        missing.append("nothing known sent the SIGKILL")
    if missing:
        return KillJudgement(KillOutcome.UNKNOWN, tuple(missing))
    return KillJudgement(
        KillOutcome.REFUTED,
        ("the oom_kill counter did not move", pressure, f"sent by {ev.sender}"),
    )


# -- text facts about a kill --------------------------------------------------------------------
# Who sent it, when the output says so: Slurm's step/job cancellation banner and its reason.
_SENDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ .*CANCELLED AT \S+ DUE TO PREEMPTION"),
     "a scheduler's preemption (Slurm)"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ .*CANCELLED AT \S+ DUE TO TIME LIMIT"),
     "the scheduler's time limit (Slurm)"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ .*CANCELLED AT "), "a scheduler's cancellation (Slurm)"),
)  # fmt: skip

_EARLYOOM = re.compile(r"sending SIG(?:KILL|TERM) to process (\d+)")
_OOMD = re.compile(r"Killed \S+ due to memory (?:pressure|used)")


def rank_killed_in(lines: Iterable[str]) -> bool:
    """A launcher's own output says one of its ranks died of SIGKILL. The wordings (DeepSpeed's
    launcher, torchrun, ``CalledProcessError``, mp.spawn, a shell's ``Killed``) have one home,
    the classifier's :func:`~dsguard.core.classify.rank_exit_from_text`."""
    return rank_exit_from_text(lines) == -int(signal.SIGKILL)


def kill_sender_in(lines: Iterable[str]) -> str | None:
    """Who the output says ended the job (a scheduler), or None."""
    for line in lines:
        for rx, who in _SENDERS:
            if rx.search(line):
                return who
    return None


def oom_daemon_kills(journal: Iterable[str], pids: Iterable[int]) -> tuple[str, ...]:
    """The journal lines of systemd-oomd / earlyoom that explain a kill of ``pids``.

    earlyoom names the pid it signals; systemd-oomd kills a whole cgroup and names the unit,
    so any of its kills in the attempt's window counts."""
    ours = set(pids)
    found: list[str] = []
    for line in journal:
        m = _EARLYOOM.search(line)
        if (m is not None and int(m.group(1)) in ours) or _OOMD.search(line):
            found.append(line.strip()[:300])
    return tuple(found)
