"""``mme`` imports only the module of the command it runs: ``mme lint`` must not pay a second of
CPU for the load generator's and the benchmarks' libraries at every start."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from mme.cli import BENCHMARKS, SUBCOMMANDS, build_parser


def _registered(module_name: str, adder: str) -> list[str]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    getattr(importlib.import_module(module_name), adder)(subparsers)
    return list(subparsers.choices)


@pytest.mark.parametrize(("table", "adder"), [(SUBCOMMANDS, "add_subcommands"),
                                              (BENCHMARKS, "add_bench_subcommands")])
def test_the_tables_name_what_each_module_adds(table: dict[str, str], adder: str) -> None:
    for module_name in dict.fromkeys(table.values()):
        assert sorted(_registered(module_name, adder)) == sorted(
            name for name, module in table.items() if module == module_name), module_name


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def test_a_command_line_gets_its_own_command_and_help_gets_every_one() -> None:
    every = _choices(build_parser())
    assert every == ["serve", *dict.fromkeys(SUBCOMMANDS), "bench"]
    assert _choices(build_parser(["--help"])) == every
    assert _choices(build_parser(["depoly"])) == every  # argparse names every choice
    assert _choices(build_parser(["lint", "models/"])) == ["lint"]
    assert _choices(build_parser(["deploy", "x"])) == ["deploy", "teardown"]
    assert _choices(build_parser(["serve"])) == ["serve"]
    (bench,) = _choices(parser := build_parser(["bench", "lint"]))
    assert _choices(_subparser(parser, bench)) == ["lint"]
    assert _choices(_subparser(build_parser(["bench"]), "bench")) == list(BENCHMARKS)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser = action.choices[name]
    return chosen


def test_mme_lint_loads_neither_the_load_tests_nor_the_benchmarks() -> None:
    probe = ("import sys; from mme.cli import build_parser; build_parser(['lint', 'x']); "
             "print(sorted(m for m in sys.modules if m.startswith(('harness.loadtest', "
             "'mme.bench', 'locust', 'mme.ensembles_cli'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("command", [["package", "x"], ["build", "x"], ["alarm", "list"],
                                     ["deploy", "x"]])
def test_a_command_without_serve_flags_does_not_load_the_settings(command: list[str]) -> None:
    """pydantic-settings (the ``mme serve`` flags) costs 0.4 CPU-s to import: a command that
    takes none of them, and every mistake it stops on, starts without it."""
    probe = (f"import sys; from mme.cli import build_parser; build_parser({command!r}); "
             "print(sorted(m for m in sys.modules if m.startswith(('pydantic_settings', "
             "'emulator.settings'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


def test_serve_still_takes_its_flags_from_the_settings() -> None:
    args = build_parser(["serve", "--memory-budget", "2GiB"]).parse_args(
        ["serve", "--memory-budget", "2GiB"])
    assert args.memory_budget == "2GiB"
