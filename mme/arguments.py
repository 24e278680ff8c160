"""Checks of command-line values that every ``mme`` command shares, made before a command starts
anything: a number that cannot be negative, a folder or file to write into, a model folder to
read. Each problem is one line that names the flag and says what to give instead.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Flags whose numbers may be negative (an alarm's threshold); every other number of an ``mme``
# command (counts, sizes, durations, rates, seeds, ports) is 0 or more.
SIGNED = frozenset({"threshold"})


def _not_negative(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def checked(text: str) -> Any:
        value = convert(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
        return value

    checked.__name__ = getattr(convert, "__name__", "number")  # argparse names it in errors
    return checked


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def refuse_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """Every int and float flag of every subcommand refuses a negative value (argparse's
    usage line and ``error: argument --x: must be 0 or more``, exit status 2)."""
    for each in _parsers(parser):
        for action in each._actions:
            if action.type in (int, float) and action.dest not in SIGNED:
                action.type = _not_negative(action.type)


def writable_folder(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot be a folder to write into, or None; it is created when missing
    (the command would create it anyway), which is the test that it can be."""
    if path.exists() and not path.is_dir():
        return f"{flag} {path}: is a file, not a folder; give a folder (created if missing)"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".mme-write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        return f"{flag} {path}: cannot write there ({exc.strerror}); give a folder you can " \
               "write to"
    return None


def writable_file(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot be a file to write (its folder must exist), or None; tried by
    opening it for appending (a file that was not there is removed again)."""
    if path.is_dir():
        return f"{flag} {path}: is a folder; give a file name"
    if not path.parent.is_dir():
        return f"{flag} {path}: the folder {path.parent} does not exist"
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        return f"{flag} {path}: cannot write there ({exc.strerror}); give a path you can " \
               "write to"
    if not existed:
        path.unlink()
    return None


def model_folder(path: Path, flag: str) -> str | None:
    """Why ``path`` is not a folder of models (``*.tar.gz``, in subfolders too), or None."""
    if not path.exists():
        return f"{flag} {path}: no such folder"
    if not path.is_dir():
        return f"{flag} {path}: is a file, not a folder of models (*.tar.gz)"
    if next(path.rglob("*.tar.gz"), None) is None:
        return f"{flag} {path}: holds no model (*.tar.gz); build one with mme build or mme package"
    return None


# Flags that name where a command writes (files or folders) and where it reads; ``check_paths``
# tries them before the command starts, so that a mistake is one line, not minutes of work
# (a build, a benchmark) that ends in a file that cannot be written.
OUTPUTS = {"output": "--output", "out": "--out", "work_dir": "--work-dir",
           "report": "--report", "plot": "--plot", "write_spec": "--write-spec",
           "state_dir": "--state-dir", "store_dir": "--store-dir"}
# (--model-data is the commands' own to check: mme ci up hands it to its server, which says why
# it cannot serve it; mme plan and mme loadtest say what a model store must hold.)
INPUTS = {"repo_dir": "REPO_DIR", "repository": "REPOSITORY", "artifacts": "ARTIFACTS",
          "config": "--config", "inputs": "--inputs", "body": "--body",
          "variants": "--variants", "trace": "--trace", "credentials": "--credentials",
          "policies": "--policies", "paths": "TARBALL|REPO"}


def _values(value: Any) -> list[Path]:
    items = value if isinstance(value, (list, tuple)) else [value]
    return [Path(v) for v in items if isinstance(v, (str, Path)) and "://" not in str(v)]


def _cannot_write(path: Path) -> str | None:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if path.exists() and not path.is_dir():
        return None if os.access(path, os.W_OK) else "not writable"
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"{existing} is not writable ({exc.strerror})"
    return None


# Inputs that must hold a model: an empty folder there is a mistake (a model store may start
# empty: ``--model-data`` is not among them).
MODEL_INPUTS = frozenset({"repo_dir", "repository", "artifacts", "paths"})


def check_paths(args: argparse.Namespace) -> str | None:
    """The first path flag of the command that cannot be used, as one line; else None."""
    for dest, flag in INPUTS.items():
        for path in _values(getattr(args, dest, None)):
            if not path.exists():
                return f"{flag} {path}: no such file or folder"
            if dest in MODEL_INPUTS and path.is_dir() and next(path.iterdir(), None) is None:
                return (f"{flag} {path}: an empty folder; give a model repository (a folder of "
                        "<model>/config.pbtxt) or a model's .tar.gz")
    for dest, flag in OUTPUTS.items():
        for path in _values(getattr(args, dest, None)):
            why = _cannot_write(path)
            if why is not None:
                return f"{flag} {path}: cannot write there: {why}; give a path you can write to"
    return None
