"""Reading a flag's value out of a command line: one home for the ``--f v`` / ``--f=v`` rule.

Pure (the standard library only), so the core's ladder and the host's model-shape reader use
the same reading; a second copy drifted once already (one accepted ``--f=v``, one did not).
"""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of the first ``flag`` in ``args`` (``--f v`` or ``--f=v``), or None."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1 :]
    return None
