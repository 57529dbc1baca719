"""The run's lifecycle: one enum and one transition table (pure; no I/O).

The run loop is driven by this table: each non-terminal state has one phase function that
returns the next state, and :class:`dsguard.run.state.StateMachine` refuses any move not
listed here, so a path the table does not allow is a dsguard bug caught at once, not a
state.json that ``dsguard status`` cannot explain.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """Lifecycle of one ``dsguard run``.

    STARTING -> RUNNING (attempt spawned) -> [ENDING (dsguard is ending the attempt: fatal line,
    stop request)] -> BACKOFF (will relaunch) -> RUNNING ... until SUCCEEDED, GAVE_UP or STOPPED.
    """

    STARTING = "starting"
    RUNNING = "running"
    ENDING = "ending"
    BACKOFF = "backoff"
    SUCCEEDED = "succeeded"
    GAVE_UP = "gave_up"
    STOPPED = "stopped"


TERMINAL = frozenset({RunState.SUCCEEDED, RunState.GAVE_UP, RunState.STOPPED})

#: ENDING never leads to SUCCEEDED: once dsguard has decided to end an attempt (a fatal line, a
#: hang, a stop request) its verdict stands, even if the attempt then exits 0 (a clean shutdown
#: on our SIGTERM, or a trainer that catches the error): the loop judges such an attempt by
#: its output, never by that exit code (see ``dsguard.run.observe.verdict``).
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.STARTING: frozenset({RunState.RUNNING, RunState.GAVE_UP, RunState.STOPPED}),
    RunState.RUNNING: frozenset(
        {
            RunState.ENDING,
            RunState.BACKOFF,
            RunState.SUCCEEDED,
            RunState.GAVE_UP,
            RunState.STOPPED,
        }
    ),
    RunState.ENDING: frozenset({RunState.BACKOFF, RunState.GAVE_UP, RunState.STOPPED}),
    RunState.BACKOFF: frozenset({RunState.RUNNING, RunState.GAVE_UP, RunState.STOPPED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.GAVE_UP: frozenset(),
    RunState.STOPPED: frozenset(),
}
