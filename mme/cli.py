"""``mme``: the command line. ``mme serve`` runs the emulator; other features add subcommands.

Every ``serve`` flag is also an environment variable: ``--memory-budget`` is ``MME_MEMORY_BUDGET``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mme.arguments import check_paths, refuse_negative_numbers

if TYPE_CHECKING:
    from emulator.settings import Settings

log = logging.getLogger("mme.cli")

# Each subcommand and the module that adds it (``add_subcommands(subparsers)``), and each
# benchmark under ``mme bench`` with its module (``add_bench_subcommands(commands)``). A command
# line imports only its own command's module, so ``mme lint`` does not load what the load tests
# or the benchmarks need (a second of CPU at every start); ``mme --help`` imports them all.
SUBCOMMANDS = {
    "demo": "mme.demo",
    "build": "mme.ensembles_cli",
    "package": "mme.ensembles_cli",
    "loadtest": "harness.cli",
    "sweep": "harness.cli",
    "deploy": "harness.deploy_cli",
    "teardown": "harness.deploy_cli",
    "alarm": "harness.alarm_cli",
    "ci": "mme.ci.cli",
    "plan": "mme.plan",
    "gpu-check": "mme.gpu_check",
    "lint": "harness.lint.cli",
    "reset": "mme.snapshot_cli",
    "snapshot": "mme.snapshot_cli",
}
BENCHMARKS = {
    "overhead": "mme.bench",
    "fleet": "mme.bench",
    "scale": "mme.bench_scale",
    "coldstart": "mme.bench_coldstart",
    "async": "mme.bench_async",
    "miss": "mme.bench_miss",
    "reset": "mme.bench_reset",
    "routing": "mme.bench_routing",
    "replay": "mme.bench_replay",
    "trace": "mme.bench_trace",
    "ensemble": "mme.ensembles_cli",
    "loadgen": "harness.loadtest.bench",  # mme bench loadgen
    "lint": "harness.lint.cli",  # mme bench lint
}


def _modules(table: dict[str, str], name: str | None) -> list[str]:
    """The module of ``name``; every module of the table when ``name`` is not one of its."""
    return [table[name]] if name in table else list(dict.fromkeys(table.values()))


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("boto3").setLevel(logging.WARNING)
    logging.getLogger("s3transfer").setLevel(logging.WARNING)


def add_serve(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve", help="run the emulator (SageMaker runtime API in front of a real Triton)",
        description="Run a local SageMaker multi-model endpoint. Each flag may also be given as "
                    "an MME_<FLAG> environment variable (e.g. MME_MEMORY_BUDGET=2GiB).",
    )
    from emulator.settings import add_flags  # here: pydantic-settings is 0.4 CPU-s to import

    add_flags(p)
    p.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags given win over ``MME_*`` variables; raises ``InvalidSettings`` naming the flag."""
    from emulator.settings import Settings, flag_fields

    return Settings.from_env(**{name: getattr(args, name, None) for name, _, _ in flag_fields()})


def run_serve(args: argparse.Namespace,
              prepare_app: Callable[[Any], None] | None = None) -> int:
    """``mme serve`` (and the server ``mme ci up`` starts, which passes ``prepare_app``)."""
    from emulator.malloc import tune_malloc

    tune_malloc()  # this process is the server: large bodies reused, one arena (before threads)
    from emulator.settings import InvalidSettings
    from mme.serve import serve

    try:
        settings = settings_from_args(args)
    except InvalidSettings as exc:
        print(f"mme serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    from mme.store_folders import StoreMistake, served_store

    try:
        with served_store(settings, sys.stderr) as served:  # model folders: served packaged
            return serve(served, sys.stderr, prepare_app=prepare_app)
    except StoreMistake as exc:
        print(f"mme serve: {exc}", file=sys.stderr)
        return 2


def build_parser(command_line: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``command_line``: its command's subparser only, with the module behind
    it imported; every command's when it is None or names none (help, a mistyped command:
    argparse then lists every choice)."""
    parser = argparse.ArgumentParser(
        prog="mme", description="A local SageMaker multi-model endpoint in front of a real Triton.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    words = list(command_line or [])
    command = words[0] if words else None
    every = command not in ("serve", "bench", *SUBCOMMANDS)
    if every or command == "serve":
        add_serve(subparsers)
    if every or command in SUBCOMMANDS:
        for module_name in _modules(SUBCOMMANDS, command):
            importlib.import_module(module_name).add_subcommands(subparsers)
    if every or command == "bench":
        bench = subparsers.add_parser("bench", help="benchmarks that print a table and a ratio")
        commands = bench.add_subparsers(dest="bench_command", required=True)
        for module_name in _modules(BENCHMARKS, words[1] if len(words) > 1 else None):
            importlib.import_module(module_name).add_bench_subcommands(commands)
    refuse_negative_numbers(parser)
    return parser


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
_STOPPED = "what it started was stopped"
_INTERRUPTED = {
    "plan": "the measurements stopped (what it started was stopped); no prediction or report "
            "was written",
    "ci": "what it started was stopped (`mme ci down` stops an emulator `mme ci up` left)",
}


def _stop_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _forget_interrupt_seen_by_string_exec() -> None:
    """Let a handled Ctrl-C end the process with 130, not by the signal.

    CPython marks a KeyboardInterrupt that leaves code run from a string (``exec``/``eval`` of
    source: every dataclass and namedtuple a lazy import defines) as unhandled, even when a
    caller catches it; under ``python -m`` the interpreter then ends itself by SIGINT at exit,
    whatever code ``sys.exit`` was given. Each string ``exec`` clears that mark as it starts.
    """
    exec("pass", {})  # a constant string: its only effect is that reset


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(words).parse_args(words)
    if args.command != "serve":
        level = getattr(args, "log_level", None) or os.environ.get("MME_LOG_LEVEL", "")
        known = level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        configure_logging(level if known else "INFO")
        # A SIGTERM (a CI timeout, ``kill``) unwinds like Ctrl-C: the commands' cleanup stops
        # the servers, relays and Tritons they started. Python's default would just exit.
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    problem = check_paths(args) if args.command != "serve" else None  # serve: its own checks
    if problem is not None:
        words = [args.command, *(str(v) for k, v in sorted(vars(args).items())
                                 if k.endswith("_command") and v)]
        print(f"mme {' '.join(words)}: {problem}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        # The command's own cleanup ran while unwinding (servers, Tritons and relays it
        # started are stopped); one line instead of a traceback, and the shell's code. A
        # SIGINT that lands from here on (a second Ctrl-C) would otherwise escape at exit and
        # end the process by the signal instead of 130: there is nothing left to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"mme {args.command}: interrupted; {_INTERRUPTED.get(args.command, _STOPPED)}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # one line, never a traceback (it is logged)
        # What no command foresaw (a file it cannot write, a value it cannot use): the
        # command's cleanup ran while unwinding; the traceback goes to the DEBUG log.
        log.debug("mme %s failed", args.command, exc_info=True)
        print(f"mme {args.command}: {type(exc).__name__}: {exc} (MME_LOG_LEVEL=DEBUG shows "
              "the traceback)", file=sys.stderr)
        return 1
    finally:  # a Ctrl-C met by now was handled, here or by the command (mme loadtest, deploy)
        _forget_interrupt_seen_by_string_exec()


if __name__ == "__main__":
    sys.exit(main())
