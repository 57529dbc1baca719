"""``dsguard report``: one self-contained HTML page (inline SVG, no script, no network) of
what happened in a run, read from its log dir; optionally the same page as a PNG through a
headless Chromium. Effectful (it reads files and may start a browser); the summarising is
pure, in :mod:`dsguard.core.summary`."""
