"""Debian's headless Chromium for the tests that look at the live page as a person would."""

from __future__ import annotations

import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags that work on a CI runner as root without a display or a network beyond loopback.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_cli(*args: str) -> str:
    """Chromium's own headless command line, as a person or a CI step runs it; its stdout."""
    done = subprocess.run([CHROMIUM, *FLAGS, "--hide-scrollbars", "--window-size=1400,1000",
                           *args], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
