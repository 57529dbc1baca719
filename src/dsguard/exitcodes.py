"""Every exit code dsguard's own processes use (a leaf module: the CLI imports it without the
supervisor). One home, so two commands never give one number two meanings by accident, and
systemd's ``RestartPreventExitStatus=`` and scripts can rely on the list below.

The probes under :mod:`dsguard.probes` are the one exception: they run in the *training*
interpreter, where dsguard may not be importable, so they spell their own usage code (2) and
dsguard only ever reads their answer file, never their exit code's meaning.
"""

EXIT_SUCCEEDED = 0
#: The same 0 for commands that check rather than run (``validate``, ``plan``, ``doctor``
#: without a blocker): "nothing is wrong".
EXIT_OK = EXIT_SUCCEEDED
#: Gave up deliberately (ladder exhausted, non-recoverable failure, retry budget): systemd's
#: RestartPreventExitStatus includes it, retrying would repeat the same failure.
EXIT_GAVE_UP = 1
#: ``dsguard doctor`` found a blocker: the job cannot train in this environment as it is.
EXIT_BLOCKED = 1
#: Bad job file, bad usage, or the job is already supervised: nothing was launched.
EXIT_USAGE = 2
#: EX_SOFTWARE: dsguard itself failed (a bug). systemd restarts it; it recovers from state.json.
EXIT_INTERNAL_ERROR = 70

#: ``dsguard status`` (the LSB init-script ``status`` convention: 0 running, 3 not running,
#: 4 unknown): scripts and monitoring can tell "stopped" from "never ran here".
EXIT_RUNNING = 0
EXIT_NOT_RUNNING = 3
EXIT_NO_STATE = 4

#: The exec shim (``dsguard.run.exec_shim``), which becomes the attempt's launcher: dsguard
#: died before the parent-death signal was armed, so the attempt refuses to train unsupervised.
EXIT_SHIM_ORPHANED = 1
#: The shim could not exec the launcher (the shell's "command not found" convention).
EXIT_SHIM_CANNOT_EXEC = 127


def exit_code_for_signal(signum: int) -> int:
    """128 + signal number: 130 for SIGINT, 143 for SIGTERM (the shell's convention)."""
    return 128 + signum


# -- issue 16: the exit-code contract with cluster engines ----------------------------------------
#
# An engine that restarts dsguard (Kubeflow's restartPolicy: ExitCode, SkyPilot's
# job_recovery.recover_on_exit_codes, a Slurm script, NVRx-aware tooling) decides from the exit
# code alone whether to start it again. dsguard's three answers: it succeeded, it gave up (do
# not restart: the same job would fail the same way), or "restart me" (stopped by a signal, e.g.
# preemption, or a dsguard bug; state.json lets the restart continue at its rung). The
# defaults are the codes above; ``dsguard run --exit-succeeded/--exit-gave-up/--exit-retry``
# renumbers them for an engine that reads numbers differently (docs/engines.md has the table).

#: The lowest code Kubeflow's ``restartPolicy: ExitCode`` retries (128+: killed by a signal).
KUBEFLOW_RETRYABLE_MIN = 128
#: nvidia-resiliency-ext's default ``--ft-no-restart-exit-code``: "do not requeue".
NVRX_NO_RESTART = 93


class ExitContract:
    """How dsguard's outcomes are numbered for the engine that runs it.

    ``retry`` None keeps the natural "restart me" codes (128+N for a stop by signal N, 70 for
    an internal error); set, both become ``retry``. Codes not in the contract (2: nothing
    was launched) are never renumbered: an engine must not retry a bad job file.
    """

    __slots__ = ("gave_up", "retry", "succeeded")

    def __init__(
        self, *, succeeded: int = EXIT_SUCCEEDED, gave_up: int = EXIT_GAVE_UP,
        retry: int | None = None,
    ) -> None:  # fmt: skip
        codes = [succeeded, gave_up, *([] if retry is None else [retry])]
        if any(not 0 <= c <= 255 for c in codes):
            raise ValueError("exit codes are 0..255")
        if len(set(codes)) != len(codes):
            raise ValueError("the succeeded, gave-up and retry codes must differ")
        if EXIT_USAGE in codes[1:] or gave_up == EXIT_SUCCEEDED:
            raise ValueError(f"{EXIT_USAGE} (nothing launched) and 0 cannot mean gave up or retry")
        self.succeeded = succeeded
        self.gave_up = gave_up
        self.retry = retry

    def apply(self, code: int) -> int:
        """``code`` (dsguard run's natural exit code) as this contract numbers it."""
        if code == EXIT_SUCCEEDED:
            return self.succeeded
        if code == EXIT_GAVE_UP:
            return self.gave_up
        if self.retry is not None and (code == EXIT_INTERNAL_ERROR or code > 128):
            return self.retry
        return code
