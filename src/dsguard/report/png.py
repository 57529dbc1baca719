"""The report page as a PNG, rendered by a headless Chromium (the page is plain HTML and
SVG, so the picture is exactly what a browser shows; no plotting library in the install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Executable names tried in order (Debian's package installs ``chromium``).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_ENV = "DSGUARD_CHROMIUM"


class NoBrowserError(RuntimeError):
    """No headless browser to render with."""


def find_browser() -> str | None:
    forced = os.environ.get(BROWSER_ENV)
    if forced:
        return shutil.which(forced)
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def screenshot(
    html_path: Path, png: Path, *, width: int = 1240, height: int = 1600, timeout_s: float = 60.0
) -> None:
    """Render ``html_path`` to ``png`` (``width`` x ``height`` CSS pixels).

    Raises:
        NoBrowserError: no Chromium found (message says what to install).
        RuntimeError: the browser failed or wrote no picture.
    """
    browser = find_browser()
    if browser is None:
        raise NoBrowserError(
            "no headless Chromium found (tried " + ", ".join(BROWSERS) + f", or set "
            f"{BROWSER_ENV}); install it, e.g. `apt-get install chromium`, or open the HTML"
        )
    with tempfile.TemporaryDirectory(prefix="dsguard-chromium-") as profile:
        argv = [
            browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
            f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
            html_path.resolve().as_uri(),
        ]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{browser} did not finish in {timeout_s:g} s") from exc
    if proc.returncode != 0 or not png.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{browser} exited {proc.returncode}: {' | '.join(tail)}")
