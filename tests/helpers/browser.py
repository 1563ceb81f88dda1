"""A page opened in a real browser: headless Chromium from the system's packages (.ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium: apt-get install chromium (.ci/run installs it)")


def open_page(page: Path, screenshot: Path, profile: Path) -> tuple[str, list[str]]:
    """Load `page` headless: its DOM after loading, and every console message it logged; a
    screenshot of it is written to `screenshot`."""
    common = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
              "--window-size=1200,2600"]
    shot = subprocess.run([*common, f"--screenshot={screenshot}", page.as_uri()], capture_output=True, text=True,
                          timeout=180, check=False)
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180, check=False)
    assert shot.returncode == 0 and dom.returncode == 0, shot.stderr[-2000:] + dom.stderr[-2000:]
    console = [line for line in (shot.stderr + dom.stderr).splitlines() if ":CONSOLE" in line]
    return dom.stdout, console
