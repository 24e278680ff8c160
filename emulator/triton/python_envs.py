"""The Python backend's ``/tmp/python_env_*`` folders that no running Triton can own.

Triton's Python backend makes a folder ``/tmp/python_env_XXXXXX`` as it starts in a Triton (where
it would unpack an ``EXECUTION_ENV_PATH`` archive; the path is fixed in the backend, TMPDIR is not
read) and removes it as that Triton exits cleanly. A Triton that is killed (a reset, an instance
kill fault, a stop past its grace period, a server that was itself SIGKILLed) leaves it behind,
so a day of resets would fill ``/tmp`` with them.

Which Triton made a folder is not recorded anywhere, and other Tritons (another server's, a
user's own) may be running. But a folder is made by a Triton that is running at the time, so a
folder last changed before the oldest running ``tritonserver`` started belongs to a Triton that
has exited: only those are removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path("/tmp")
PREFIX = "python_env_"
# A process's start time is read to clock ticks (10 ms); a folder is kept unless it is older than
# every running Triton by more than this.
MARGIN_S = 1.0


def triton_starts(proc: Path = Path("/proc")) -> list[float]:
    """When each running ``tritonserver`` process started (seconds since the epoch)."""
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    now = time.time()
    starts = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            name = stat[stat.index("(") + 1: stat.rindex(")")]
            fields = stat.rpartition(")")[2].split()
            if name.startswith("tritonserver") and fields[0] != "Z":  # a zombie makes nothing
                started_s = int(fields[19]) / ticks_per_s
                starts.append(now - (since_boot - started_s))
    return starts


def remove_orphans(root: Path = ROOT, starts: Iterable[float] | None = None) -> list[Path]:
    """Remove the folders no running Triton can own (see the module docstring). Returns them."""
    running = list(triton_starts() if starts is None else starts)
    oldest = min(running, default=float("inf"))
    removed = []
    with contextlib.suppress(OSError):
        for folder in root.glob(f"{PREFIX}*"):
            with contextlib.suppress(OSError):
                info = folder.lstat()
                if folder.is_dir() and not folder.is_symlink() \
                        and info.st_uid == os.geteuid() and info.st_ctime < oldest - MARGIN_S:
                    shutil.rmtree(folder)
                    removed.append(folder)
    return removed
