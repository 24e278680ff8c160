"""``mme reset`` and ``mme snapshot save|load``: a running emulator's whole state from the shell.

    mme reset [--keep-cache]                    # empty the server (as it started)
    mme snapshot save DIR [--with-models]       # its state into the folder DIR
    mme snapshot load DIR                       # into a server that is empty (reset first)
    mme serve --restore DIR                     # or start a server from it

``--url`` names the server (default: ``MME_EMULATOR_URL``, else http://127.0.0.1:8080). Exit 0;
1 when the server refuses (one line: its reason) or cannot be reached; 2 for a folder that is
not a snapshot.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _url_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", "--emulator-url", dest="url", default=None,
                        help="the emulator's URL (env MME_EMULATOR_URL; default "
                        "http://127.0.0.1:8080)")


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reset = subparsers.add_parser(
        "reset", help="empty a running emulator: endpoints, configs, models, alarms, scaling, "
        "metrics, fault rules (the --model-data endpoint starts again, empty)")
    _url_flag(reset)
    reset.add_argument("--keep-cache", action="store_true",
                       help="leave the stopped instances' models on disk")
    reset.set_defaults(func=run_reset)

    snapshot = subparsers.add_parser(
        "snapshot", help="save a running emulator's state to a folder, or load one into it")
    commands = snapshot.add_subparsers(dest="snapshot_command", required=True)
    save = commands.add_parser("save", help="the server's state into the folder DIR")
    save.add_argument("folder", type=Path, metavar="DIR")
    _url_flag(save)
    save.add_argument("--with-models", action="store_true",
                      help="also which TargetModels are loaded, to load them again on restore")
    save.set_defaults(func=run_save)
    load = commands.add_parser("load", help="the snapshot in DIR into a server that is empty")
    load.add_argument("folder", type=Path, metavar="DIR")
    _url_flag(load)
    load.set_defaults(func=run_load)


def _state(args: argparse.Namespace) -> Any:
    from harness.deploy_cli import emulator_url
    from harness.server_state import ServerState

    return ServerState(emulator_url(args.url))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items() if n) \
        or "nothing"


def _ask(args: argparse.Namespace, command: str,
         request: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """The server's answer to ``request`` (made of its ``ServerState``); None, said on stderr,
    where the server refused it or could not be reached."""
    from harness.server_state import StateRequestRefused

    try:
        return request(_state(args))
    except (StateRequestRefused, OSError) as exc:
        print(f"mme {command}: {exc}", file=sys.stderr)
        return None


def run_reset(args: argparse.Namespace) -> int:
    answer = _ask(args, "reset", lambda state: state.reset(keep_cache=args.keep_cache))
    if answer is None:
        return 1
    restarted = "; started again: " + ", ".join(answer["restarted"]) if answer["restarted"] \
        else ""
    print(f"reset: removed {_counts(answer['removed'])}; "
          f"{answer['stopped_endpoints']} endpoint(s) stopped{restarted}")
    return 0


def run_save(args: argparse.Namespace) -> int:
    from emulator.state.snapshot_format import SnapshotError, write_folder

    doc = _ask(args, "snapshot save", lambda state: state.snapshot(with_models=args.with_models))
    if doc is None:
        return 1
    try:
        write_folder(doc, args.folder)
    except SnapshotError as exc:
        print(f"mme snapshot save: {exc}", file=sys.stderr)
        return 2
    control = {table: len(rows) for table, rows in doc["control_plane"].items()}
    scaling = {part: len(items) for part, items in doc["autoscaling"].items()}
    loaded = doc["loaded_models"]
    print(f"saved {args.folder}: {_counts(control)}; {len(doc['alarms'])} alarm(s); "
          f"{_counts(scaling)} (scaling)"
          + (f"; {len(loaded)} loaded model(s)" if loaded is not None else ""))
    return 0


def run_load(args: argparse.Namespace) -> int:
    from emulator.state.snapshot_format import SnapshotError, read_folder

    try:
        doc = read_folder(args.folder)
    except SnapshotError as exc:
        print(f"mme snapshot load: {exc}", file=sys.stderr)
        return 2
    answer = _ask(args, "snapshot load", lambda state: state.restore(doc))
    if answer is None:
        return 1
    endpoints = ", ".join(f"{name} {status}" for name, status in answer["endpoints"].items())
    print(f"loaded {args.folder}: {_counts(answer['restored'])}"
          + (f"; endpoints: {endpoints}" if endpoints else "")
          + f"; {answer['loaded_models']} model load(s)")
    for failure in answer["failed_models"]:
        print(f"  not loaded: {failure}")
    for inference_id in answer.get("skipped_async_requests", []):
        print(f"  asynchronous request not queued (its endpoint is not in the snapshot): "
              f"{inference_id}")
    return 0 if not answer["failed_models"] else 1
