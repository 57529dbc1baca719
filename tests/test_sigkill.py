"""Who killed the attempt: the pure SIGKILL judgement (core/sigkill) and the loop acting on it.

Each branch of ``judge_sigkill`` is pinned on plain values; then the real Supervisor runs on
a FakeHost scripted for each outcome: confirmed and unknown kills walk the host-OOM ladder
(``host_oom_confirmed`` true / null), only a refuted one is ``killed_externally``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsguard.core.sigkill import (
    KillEvidence,
    KillOutcome,
    judge_sigkill,
    kill_sender_in,
    oom_daemon_kills,
    rank_killed_in,
)
from dsguard.testing import Script
from tests.test_loop_scenarios import Outcome, Scenario, ok_attempt, run_scenario

GiB = 1 << 30


# -- the pure judgement ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("evidence", "why"),
    [
        (KillEvidence(oom_kill_delta=1), "cgroup oom_kill counter +1"),
        (KillEvidence(oom_kill_delta=0, kernel_oom_pids=(42,)), "kernel log"),
        (KillEvidence(None, rss_peak_bytes=int(3.8 * GiB), limit_bytes=4 * GiB), "95 %"),
        (KillEvidence(0, oom_daemon_lines=("earlyoom: sending SIGKILL to process 42",)), "daemon"),
        (KillEvidence(0, psi_full_avg10=35.0), "PSI full avg10=35.0"),
        # A confirmation wins even when a sender is known: the OOM kill came first.
        (KillEvidence(2, sender="dsguard"), "counter +2"),
    ],
)
def test_confirmed(evidence: KillEvidence, why: str) -> None:
    j = judge_sigkill(evidence)
    assert j.outcome is KillOutcome.CONFIRMED and j.host_oom_confirmed is True
    assert any(why in r for r in j.reasons)


def test_refuted_needs_a_readable_counter_no_pressure_and_a_known_sender() -> None:
    j = judge_sigkill(KillEvidence(0, psi_full_avg10=0.0, sender="a scheduler's preemption"))
    assert j.outcome is KillOutcome.REFUTED and j.host_oom_confirmed is False
    assert "sent by a scheduler's preemption" in j.reasons


@pytest.mark.parametrize(
    ("evidence", "missing"),
    [
        (KillEvidence(0), "nothing known sent"),  # counter still, but who sent it?
        (KillEvidence(None, sender="dsguard"), "could not be read"),  # sender, no counter
        (KillEvidence(0, rss_peak_bytes=GiB, limit_bytes=4 * GiB, psi_full_avg10=2.0), "sent"),
    ],
)
def test_unknown(evidence: KillEvidence, missing: str) -> None:
    j = judge_sigkill(evidence)
    assert j.outcome is KillOutcome.UNKNOWN and j.host_oom_confirmed is None
    assert any(missing in r for r in j.reasons)


def test_launcher_lines_that_report_a_killed_rank() -> None:
    """accelerate / llamafactory-cli / axolotl exit 1 re-raising the rank's CalledProcessError;
    torchrun and the DeepSpeed launcher print the rank's -9."""
    killed = [
        "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with "
        "<Signals.SIGKILL: 9>.",
        "subprocess.CalledProcessError: Command '['python', 'x.py']' returned non-zero exit "
        "status -9.",
        "  exitcode  : -9 (pid: 1234)",
        "[2024-01-01 00:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['python', 'x.py'] "
        "exits with return code = -9",
    ]
    for line in killed:
        assert rank_killed_in([line]), line
    assert not rank_killed_in(["returned non-zero exit status 1.", "exitcode  : -90"])


def test_who_sent_it_and_oom_daemons() -> None:
    assert kill_sender_in(
        ["slurmstepd: error: *** STEP 1234.0 ON node7 CANCELLED AT 2024-05-01T10:00:00 "
         "DUE TO PREEMPTION ***"]
    ) == "a scheduler's preemption (Slurm)"  # fmt: skip
    assert kill_sender_in(["all good"]) is None
    journal = [
        'earlyoom: sending SIGKILL to process 777 "python": badness 900',
        'earlyoom: sending SIGKILL to process 42 "python": badness 900',
        "systemd-oomd: Killed /user.slice/user-1000.slice/app.scope due to memory pressure",
        "earlyoom: mem avail: 20 of 100 MiB",
    ]
    assert len(oom_daemon_kills(journal, [42])) == 2


# -- the loop on each outcome -------------------------------------------------------------------

PREEMPTED = (
    "slurmstepd: error: *** STEP 99.0 ON gpu3 CANCELLED AT 2024-05-01T10:00:00 DUE TO "
    "PREEMPTION ***"
)
ACCELERATE_KILLED = (
    "subprocess.CalledProcessError: Command '['/venv/bin/python', 'train.py']' died with "
    "<Signals.SIGKILL: 9>."
)
HOST_LADDER = {"ladder": {"host_oom": ["micro_batch"]}}
LIMITED = {**HOST_LADDER, "resources": {"host_memory_limit": "2GiB"}}


def _walked_host_ladder(o: Outcome, confirmed: bool | None, outcome: str) -> None:
    assert o.code == 0
    (judged,) = o.named("sigkill_judged")
    assert judged["outcome"] == outcome and judged["host_oom"] is True
    failure = o.named("failure_detected")[0]
    assert failure["kind"] == "host_oom" and failure["host_oom_confirmed"] is confirmed
    applied = o.named("policy_applied")[0]
    assert applied["rung"] == "micro_batch" and applied["changes"]["micro_batch_size"] == [8, 4]


def check_counter_confirms(o: Outcome) -> None:
    _walked_host_ladder(o, True, "confirmed")
    limits = o.named("memory_limit_applied")
    assert [x["how"] for x in limits] == ["cgroup_v1", "cgroup_v1"]
    assert limits[0]["limit_bytes"] == 2 * GiB and limits[0]["cgroup"].endswith("attempt-1")
    # Each attempt's cgroup is removed after its counter was read.
    assert len(o.host.memory_limits_removed) == 2


def check_unknown_no_counter(o: Outcome) -> None:
    _walked_host_ladder(o, None, "unknown")
    assert any("could not be read" in r for r in o.named("sigkill_judged")[0]["reasons"])


def check_refuted(o: Outcome) -> None:
    assert o.code == 0
    (judged,) = o.named("sigkill_judged")
    assert judged["outcome"] == "refuted" and judged["host_oom"] is False
    failure = o.named("failure_detected")[0]
    assert failure["kind"] == "killed_externally" and failure["host_oom_confirmed"] is False
    assert o.named("policy_applied")[0]["rung"] is None  # resumed as is


def check_rank_killed_behind_exit_1(o: Outcome) -> None:
    _walked_host_ladder(o, None, "unknown")
    assert o.named("attempt_finished")[0]["exit_code"] == 1
    assert o.named("sigkill_judged")[0]["rank_killed"] is True


def check_hang_killed_by_dsguard_stays_a_hang(o: Outcome) -> None:
    """dsguard's own SIGKILL of a hung attempt is not taken for an OOM."""
    assert o.code == 0
    failure = o.named("failure_detected")[0]
    assert failure["kind"] == "hang"
    (judged,) = o.named("sigkill_judged")
    assert judged["outcome"] == "refuted" and any("dsguard" in r for r in judged["reasons"])


def check_rlimit_fallback(o: Outcome) -> None:
    (applied,) = o.named("memory_limit_applied")
    assert applied["how"] == "rlimit_as" and applied["cgroup"] is None and applied["reason"]


def check_rlimit_chosen(o: Outcome) -> None:
    (applied,) = o.named("memory_limit_applied")
    assert applied["how"] == "rlimit_as" and "host_memory_via" in applied["reason"]
    assert not o.host.memory_limits  # no cgroup was made
    assert "--as-bytes" in o.host.commands[0].argv and "--cgroup" not in o.host.commands[0].argv


def killed(**kw: Any) -> Script:
    """An attempt that dies of SIGKILL on its own, 3 s in."""
    return Script(exit_code=-9, exit_at_s=3.0, **kw)


SCENARIOS = [
    Scenario("counter_confirms", [killed(oom_kills=1), ok_attempt()],
             check_counter_confirms, job=LIMITED),
    Scenario("psi_confirms", [killed(psi_full_avg10=60.0), ok_attempt()],
             lambda o: _walked_host_ladder(o, True, "confirmed"), job=HOST_LADDER),
    Scenario("oom_daemon_confirms",
             [killed(oom_daemon_lines=("systemd-oomd: Killed /a.scope due to memory "
                                               "pressure for /a.scope being 91% > 50%",)),
              ok_attempt()],
             lambda o: _walked_host_ladder(o, True, "confirmed"), job=HOST_LADDER),
    Scenario("unknown_when_the_counter_is_unreadable",
             [killed(lines=((1.0, PREEMPTED),)), ok_attempt()],
             check_unknown_no_counter, job=HOST_LADDER, host={"oom_counter_readable": False}),
    Scenario("refuted_by_a_preemption_banner",
             [killed(lines=((1.0, PREEMPTED),), psi_full_avg10=0.0), ok_attempt()],
             check_refuted, job=HOST_LADDER),
    Scenario("rank_killed_behind_launcher_exit_1",
             [Script(lines=((1.0, "Traceback (most recent call last):"),
                            (1.1, ACCELERATE_KILLED)), exit_code=1, exit_at_s=2.0),
              ok_attempt()], check_rank_killed_behind_exit_1, job=HOST_LADDER),
    Scenario("hang_killed_by_dsguard",
             [Script(lines=((1.0, "step 1"),), exit_at_s=None, sigterm_exit_code=None),
              ok_attempt()], check_hang_killed_by_dsguard_stays_a_hang,
             job={"limits": {"hang_timeout_s": 30}}),
    Scenario("rlimit_as_where_no_cgroup", [ok_attempt()], check_rlimit_fallback,
             job=LIMITED, host={"limit_how": "rlimit_as"}),
    Scenario("rlimit_as_when_the_job_asks", [ok_attempt()], check_rlimit_chosen,
             job={"resources": {"host_memory_limit": "2GiB", "host_memory_via": "rlimit_as"}}),
]  # fmt: skip


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_loop_on_each_outcome(tmp_path: Path, sc: Scenario) -> None:
    sc.check(run_scenario(tmp_path, sc))


def test_psi_is_read_from_the_cgroup_then_the_machine(tmp_path: Path) -> None:
    from dsguard.host.memory import psi_memory_full_avg10

    (tmp_path / "memory.pressure").write_text(
        "some avg10=40.00 avg60=10.00 avg300=2.00 total=123\n"
        "full avg10=31.50 avg60=8.00 avg300=1.00 total=99\n"
    )
    assert psi_memory_full_avg10(tmp_path) == 31.5
    machine = psi_memory_full_avg10(tmp_path / "no-such-cgroup")
    if Path("/proc/pressure/memory").exists():
        assert machine is not None and machine >= 0.0
    else:
        assert machine is None
