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
