"""``python -m mme.ci.server [mme serve flags]``: the server ``mme ci up`` starts.

It is ``mme serve`` (same flags, same start-up checks and messages) with the per-model
recorder of ``stats.py`` installed; when it stops it writes the figures and its exit status
into the state folder (``$MME_STATE_DIR``) for ``mme ci down``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from emulator.settings import add_flags
from mme.ci.state import STATE_ENV, StateDir
from mme.ci.stats import ModelStats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mme ci up (server)")
    add_flags(parser)
    args = parser.parse_args(argv)
    state = StateDir(Path(os.environ[STATE_ENV]))
    code = 1
    stats = ModelStats()
    try:
        code = _serve(args, stats)
    finally:
        stats.dump(state.stats_path)
        state.write_exit(code)
    return code


def _serve(args: argparse.Namespace, stats: ModelStats) -> int:
    from mme.cli import run_serve

    return run_serve(args, prepare_app=stats.install)  # as under mme serve, figures recorded


if __name__ == "__main__":
    sys.exit(main())
