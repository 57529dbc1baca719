"""What one finished attempt showed, and the pure verdict on it.

The run loop collects everything it learnt about an ended attempt (its exit, its output's
evidence, heartbeats, OOM evidence, checkpoint progress) into one frozen
:class:`Observation`; :func:`verdict` and :func:`judge` then decide from it alone, with the
core's ``classify`` and ``decide``, so a scenario test can check the judgement of any
observation without a process.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from typing import Literal

from dsguard.core.classify import Evidence, ExitStatus, Failure, classify, decode_exit
from dsguard.core.evidence import MoveEvidence
from dsguard.core.ladder import Decision, PolicyConfig, RemedyContext, decide
from dsguard.core.ledger import Ledger
from dsguard.core.sigkill import KillJudgement, KillOutcome
from dsguard.protocol import CAP_ZERO_TRANSPLANT

#: Why the supervise phase stopped waiting: the launcher exited on its own, a fatal output
#: line, a stop request to dsguard, no progress for ``hang_timeout_s``, or the loss or grad
#: norm turned NaN/inf (``core/divergence``), or the in-run probe moves to another config
#: (``fit_probe: in_run``, ``core/throughput``: not a failure).
EndedBy = Literal["exit", "fatal", "stop", "hang", "diverged", "probe"]


@dataclass(frozen=True, slots=True)
class HostPeak:
    """The attempt's host-memory peak as dsguard measured it from outside (no heartbeat
    needed): ``measure`` names the quantity (``vm_peak``: the largest process's peak address
    space, what RLIMIT_AS limits; ``cgroup_peak``: the attempt cgroup's peak charge;
    ``vm_hwm``: the tree's summed peak resident sets), per rank; ``source`` where it was
    read (``process_tree``: ``/proc/<pid>/status`` of the attempt's own tree, ``cgroup``)."""

    bytes: int
    measure: str
    source: str


def measured_host_peak(
    how: str | None,
    world_size: int,
    vm_peak: int | None,
    vm_hwm: int | None,
    cgroup_peak: int | None,
) -> HostPeak | None:
    """The outside measurement that matches the attempt's limit (None: nothing read).

    Under RLIMIT_AS (per process) the largest VmPeak; under the attempt's memory cgroup its
    peak charge (the tree's summed VmHWM when the kernel has no peak file); without a limit
    of dsguard's the summed VmHWM. Tree figures are divided by the world size: the estimate
    is one rank's."""
    ranks = max(1, world_size)
    if how == "rlimit_as":
        return None if not vm_peak else HostPeak(vm_peak, "vm_peak", "process_tree")
    if how is not None and cgroup_peak:
        return HostPeak(cgroup_peak // ranks, "cgroup_peak", "cgroup")
    return None if not vm_hwm else HostPeak(vm_hwm // ranks, "vm_hwm", "process_tree")


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything the judge may look at about one ended attempt."""

    attempt: int
    exit_code: int | None
    ended_by: EndedBy
    duration_s: float
    evidence: tuple[Evidence, ...]
    output_bytes: int
    output_lines: int
    #: Every pid seen in the attempt's tree (kernel OOM records and GPU holders name pids).
    pids: tuple[int, ...]
    #: Who killed it, when a SIGKILL of the attempt (or of one of its ranks) needs
    #: explaining; None when nothing was killed.
    kill: KillJudgement | None
    #: A newer complete checkpoint appeared during the attempt.
    progressed: bool
    #: What the heartbeats announced; None when the attempt wrote none.
    caps: frozenset[str] | None
    last_step: int | None
    last_loss: float | None
    gpu_mem_peak_bytes: int | None
    host_rss_peak_bytes: int | None
    #: Output dropped because the attempt log could not be written (a full disk).
    log_dropped_bytes: int = 0
    #: The launcher exited with a plain error but its output says a rank died of SIGKILL
    #: (accelerate's ``CalledProcessError ... -9``, torchrun's ``exitcode: -9``).
    rank_killed: bool = False
    #: The host-memory peak dsguard measured from outside (None: nothing could be read).
    host_peak: HostPeak | None = None
    #: The output's last 16 KiB (``StreamClassifier.tail``): the words an unknown failure's
    #: probable kind is read from.
    output_tail: str = ""

    @property
    def kill_is_host_oom(self) -> bool:
        """Whether the kill is judged a host OOM: confirmed, or unknown on an attempt that
        died on its own (a careful engineer treats an unexplained -9 as host memory). A kill
        dsguard sent while ending an attempt for a fatal line or a hang is an OOM only when
        confirmed: the hang or the fatal line is the cause then."""
        if self.kill is None:
            return False
        outcome = self.kill.outcome
        return outcome is KillOutcome.CONFIRMED or (
            outcome is KillOutcome.UNKNOWN and self.ended_by == "exit"
        )

    @property
    def exit(self) -> ExitStatus:
        return decode_exit(self.exit_code)


def verdict(obs: Observation) -> Failure | None:
    """The attempt's root cause, or None when it succeeded.

    An attempt dsguard ended for a fatal line or a hang failed, whatever its exit code: an
    exit 0 there comes from our SIGTERM (a trainer that saves and exits cleanly on it) or
    from a shutdown after the error, not from finished training. Judging it by that 0 would
    report success for an OOMed run (and, before this rule, crashed dsguard with an illegal
    ``ending -> succeeded`` transition, which systemd answered by restarting a finished job).
    An attempt that exited 0 *before* dsguard sent any signal is reported as ``exit`` by the
    supervise phase and succeeds like any other.
    """
    status = obs.exit
    if obs.ended_by in ("fatal", "hang") and status.raw == 0:
        status = ExitStatus(raw=None, signal=None)  # unknown: the output decides
    if obs.rank_killed and not status.killed and status.raw != 0:
        # The launcher turned a rank's -9 into its own exit 1: judge the rank's death.
        status = ExitStatus(raw=status.raw, signal=int(signal.SIGKILL))
    return classify(
        obs.evidence, status, host_oom_confirmed=obs.kill_is_host_oom,
        hang=obs.ended_by == "hang", tail=obs.output_tail,
    )  # fmt: skip


def judge(
    failure: Failure,
    ledger: Ledger,
    cfg: PolicyConfig,
    remedy_ctx: RemedyContext | None,
    evidence: MoveEvidence | None = None,
) -> Decision:
    """What to do about ``failure`` given the run so far (``ledger`` already records it)."""
    cfg_now = dataclasses.replace(
        cfg,
        ctx=dataclasses.replace(cfg.ctx, exact_zero_transfer=CAP_ZERO_TRANSPLANT in ledger.caps),
    )
    return decide(
        failure.kind, knobs=ledger.knobs, positions=ledger.positions, history=ledger.history,
        cfg=cfg_now, remedy_ctx=remedy_ctx, evidence=evidence,
        retry_helps=failure.retry_helps, hint=failure.hint,
    )  # fmt: skip
