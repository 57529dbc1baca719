"""``python -m dsguard.train``: run the reference trainer (see :mod:`dsguard.train.trainer`)."""

from __future__ import annotations

from dsguard.train.trainer import main

if __name__ == "__main__":
    raise SystemExit(main())
