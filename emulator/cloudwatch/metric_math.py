"""The part of CloudWatch metric math an alarm's ``Metrics[]`` is evaluated with.

Supported: numbers, query ids, ``+ - * / ^``, unary minus, parentheses, and the functions
``SUM``, ``AVG``, ``MIN``, ``MAX`` (over their arguments, or over ``METRICS()``), ``ABS`` and
``FILL(series, value)``: what Application Auto Scaling's target tracking with metric math
(``CustomizedMetricSpecification.Metrics``) writes and what a per-instance or ratio alarm needs
(``m1 / m2``, ``SUM(METRICS()) / 3``, ``100 * errors / FILL(calls, 1)``). Everything else
(search expressions, ``ANOMALY_DETECTION_BAND``, ``IF``, ``RATE``, ...) is refused when the alarm
is put, never accepted and ignored.

Each series is a numpy array over the alarm's evaluation periods (oldest first), NaN where a
period has no datapoint; arithmetic on NaN is NaN (missing), as CloudWatch drops a timestamp
where an operand has no value. Division by zero is missing too [U].
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Series = npt.NDArray[np.float64]

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
FUNCTIONS = ("SUM", "AVG", "MIN", "MAX", "ABS", "FILL", "METRICS")


class MathError(ValueError):
    """An expression the emulator cannot evaluate: the message says what to change."""


# One step of an expression's postfix program, (kind, value, argument count):
# ("number", 2.0, 0), ("id", "m1", 0), ("op", "+", 2), ("neg", "", 1), ("call", "SUM", 3).
Step = tuple[str, Any, int]
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 4, "neg": 5}


@dataclass(frozen=True)
class Program:
    """An expression parsed once, as a postfix program: evaluating it is a loop, so no
    expression that fits MetricExpression's 2,048 characters (1,000 nested parentheses, 2,000
    minus signs, ``1^`` 600 times) can exhaust the stack."""

    text: str
    steps: tuple[Step, ...]


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:  # only trailing blanks are left
            break
        out.append(next(g for g in match.groups() if g is not None))
        position = match.end()
    return out


def _shown(text: str) -> str:
    return repr(text if len(text) <= 200 else text[:200] + "...")


def parse(text: str) -> Program:
    """Operator precedence with explicit stacks (``^`` right-associative, unary minus tighter
    than ``^`` as before); the MathError says what is wrong."""
    tokens = _tokens(text)

    def bad(why: str) -> MathError:
        return MathError(f"The expression {_shown(text)} is not valid: {why}.")

    steps: list[Step] = []
    # operators: ("op", "+"), ("neg", ""), ("group", ""), ("call", NAME)
    operators: list[tuple[str, str]] = []
    arguments: list[int] = []  # for each open call: the arguments completed so far
    operand = True

    def pop_operator() -> None:
        kind, value = operators.pop()
        steps.append((kind, value, 1 if kind == "neg" else 2))

    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if operand:
            if token == "-":
                operators.append(("neg", ""))
            elif token == "(":
                operators.append(("group", ""))
            elif token[0].isdigit():
                steps.append(("number", float(token), 0))
                operand = False
            elif token[0].isalpha() or token[0] == "_":
                if index < len(tokens) and tokens[index] == "(":
                    name = token.upper()
                    if name not in FUNCTIONS:
                        raise MathError(f"The function {token} is not supported by the "
                                        "emulator's metric math (supported: "
                                        f"{', '.join(FUNCTIONS)}).")
                    index += 1  # its "("
                    if index < len(tokens) and tokens[index] == ")":
                        index += 1
                        steps.append(("call", name, 0))
                        operand = False
                    else:
                        operators.append(("call", name))
                        arguments.append(0)
                else:
                    steps.append(("id", token, 0))
                    operand = False
            else:
                raise bad(f"unexpected {token!r}")
        elif token in ("+", "-", "*", "/", "^"):
            while operators and operators[-1][0] in ("op", "neg") and (
                    _PRECEDENCE[operators[-1][1] or "neg"] > _PRECEDENCE[token]
                    or (_PRECEDENCE[operators[-1][1] or "neg"] == _PRECEDENCE[token]
                        and token != "^")):
                pop_operator()
            operators.append(("op", token))
            operand = True
        elif token in (")", ","):
            while operators and operators[-1][0] in ("op", "neg"):
                pop_operator()
            if not operators:
                raise bad(f"unexpected {token!r}")
            kind, name = operators[-1]
            if token == ",":
                if kind != "call":
                    raise bad("',' outside a function's arguments")
                arguments[-1] += 1
                operand = True
            else:
                operators.pop()
                if kind == "call":
                    steps.append(("call", name, arguments.pop() + 1))
        else:
            raise bad(f"unexpected {token!r}")
    if not tokens:
        raise bad("it is empty")
    if operand:
        raise bad("expected more at its end")
    while operators:
        if operators[-1][0] in ("group", "call"):
            raise bad("expected ')' at its end")
        pop_operator()
    return Program(text, tuple(steps))


def references(program: Program) -> set[str]:
    """The query ids an expression reads (METRICS() reads them all: ``*``)."""
    out = {str(value) for kind, value, _ in program.steps if kind == "id"}
    if any(kind == "call" and value == "METRICS" for kind, value, _ in program.steps):
        out.add("*")
    return out


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "^": np.power}


def evaluate(program: Program, series: Mapping[str, Series], length: int,
             metrics: Sequence[str] | None = None) -> Series:
    """The expression over ``length`` periods; ``series`` holds every query's computed so far,
    ``metrics`` names the MetricStat ones (what METRICS() returns; expressions are not in it,
    as CloudWatch documents)."""
    names = metrics if metrics is not None else sorted(series)
    stack: list[Any] = []
    with np.errstate(all="ignore"):
        for kind, value, count in program.steps:
            if kind == "number":
                stack.append(np.full(length, value))
            elif kind == "id":
                if value not in series:
                    raise MathError(f"The expression refers to {value}, which is not the Id "
                                    "of another query of the alarm.")
                stack.append(series[value])
            elif kind == "neg":
                stack.append(-_one(stack.pop(), "-"))
            elif kind == "op":
                right, left = _one(stack.pop(), value), _one(stack.pop(), value)
                stack.append(_BINARY[str(value)](left, right))
            else:
                args = stack[len(stack) - count:]
                del stack[len(stack) - count:]
                stack.append(_call(str(value), args, series, length, names))
    result = stack[-1]
    if isinstance(result, list):
        raise MathError("An alarm's expression must give one time series, not METRICS().")
    out = np.asarray(result, dtype=np.float64)
    out = np.broadcast_to(out, (length,)).copy()
    out[~np.isfinite(out)] = np.nan  # x/0: no datapoint  [U]
    return out


def _one(value: Any, where: str) -> Any:
    if isinstance(value, list):
        raise MathError(f"METRICS() gives several time series: it can be an argument of SUM, "
                        f"AVG, MIN or MAX, not of {where}.")
    return value


def _call(name: str, args: list[Any], series: Mapping[str, Series], length: int,
          metrics: Sequence[str]) -> Any:
    if name == "METRICS":
        if args:
            raise MathError("METRICS() takes no argument in the emulator.")
        return [series[k] for k in metrics if k in series]
    if name in ("ABS", "FILL"):
        _arity(name, args, 1 if name == "ABS" else 2)
        first = _one(args[0], name)
        if name == "ABS":
            return np.abs(first)
        return np.where(np.isnan(first), _one(args[1], name), first)
    values: list[Any] = []
    for value in args:
        values.extend(value if isinstance(value, list) else [value])
    if not values:
        raise MathError(f"{name}() needs at least one argument.")
    stacked = np.vstack([np.broadcast_to(v, (length,)) for v in values])
    present = ~np.isnan(stacked)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN period: missing
        out = _REDUCERS[name](stacked, axis=0)
    return np.where(present.any(axis=0), out, np.nan)


_REDUCERS: dict[str, Callable[..., Any]] = {
    "SUM": np.nansum, "AVG": np.nanmean, "MIN": np.nanmin, "MAX": np.nanmax}


def _arity(name: str, values: list[Any], count: int) -> None:
    if len(values) != count:
        raise MathError(f"{name}() takes {count} argument{'s' if count > 1 else ''}.")
