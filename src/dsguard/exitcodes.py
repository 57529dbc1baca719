"""dsguard's process exit codes (a leaf module: the CLI imports it without the supervisor)."""

EXIT_SUCCEEDED = 0
#: Gave up deliberately (ladder exhausted, non-recoverable failure, retry budget): systemd's
#: RestartPreventExitStatus includes it, retrying would repeat the same failure.
EXIT_GAVE_UP = 1
#: Bad job file, bad usage, or the job is already supervised: nothing was launched.
EXIT_USAGE = 2
#: EX_SOFTWARE: dsguard itself failed (a bug). systemd restarts it; it recovers from state.json.
EXIT_INTERNAL_ERROR = 70


def exit_code_for_signal(signum: int) -> int:
    """128 + signal number: 130 for SIGINT, 143 for SIGTERM (the shell's convention)."""
    return 128 + signum
