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


@dataclass(frozen=True)
class Node:
    kind: str  # number | id | op | neg | call
    value: Any = None
    args: tuple[Node, ...] = ()


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


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise MathError(f"The expression {self.text!r} is not valid: expected "
                            f"{expected or 'more'} at its end." if token is None else
                            f"The expression {self.text!r} is not valid: expected {expected!r}, "
                            f"found {token!r}.")
        self.position += 1
        return token

    def parse(self) -> Node:
        node = self.sum()
        if self.peek() is not None:
            raise MathError(f"The expression {self.text!r} is not valid: unexpected "
                            f"{self.peek()!r}.")
        return node

    def sum(self) -> Node:
        node = self.product()
        while self.peek() in ("+", "-"):
            node = Node("op", self.take(), (node, self.product()))
        return node

    def product(self) -> Node:
        node = self.power()
        while self.peek() in ("*", "/"):
            node = Node("op", self.take(), (node, self.power()))
        return node

    def power(self) -> Node:
        node = self.unary()
        if self.peek() == "^":
            node = Node("op", self.take(), (node, self.power()))
        return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return Node("neg", None, (self.unary(),))
        return self.atom()

    def atom(self) -> Node:
        token = self.take()
        if token == "(":
            node = self.sum()
            self.take(")")
            return node
        if token[0].isdigit():
            return Node("number", float(token))
        if token[0].isalpha() or token[0] == "_":
            if self.peek() == "(":
                name = token.upper()
                if name not in FUNCTIONS:
                    raise MathError(f"The function {token} is not supported by the emulator's "
                                    f"metric math (supported: {', '.join(FUNCTIONS)}).")
                self.take("(")
                args: list[Node] = []
                if self.peek() != ")":
                    args.append(self.sum())
                    while self.peek() == ",":
                        self.take()
                        args.append(self.sum())
                self.take(")")
                return Node("call", name, tuple(args))
            return Node("id", token)
        raise MathError(f"The expression {self.text!r} is not valid: unexpected {token!r}.")


def parse(text: str) -> Node:
    return _Parser(text).parse()


def references(node: Node) -> set[str]:
    """The query ids an expression reads (METRICS() reads them all: ``*``)."""
    if node.kind == "id":
        return {str(node.value)}
    if node.kind == "call" and node.value == "METRICS":
        return {"*"}
    out: set[str] = set()
    for arg in node.args:
        out |= references(arg)
    return out


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "^": np.power}


def evaluate(node: Node, series: Mapping[str, Series], length: int,
             metrics: Sequence[str] | None = None) -> Series:
    """The expression over ``length`` periods; ``series`` holds every query's computed so far,
    ``metrics`` names the MetricStat ones (what METRICS() returns; expressions are not in it,
    as CloudWatch documents)."""
    with np.errstate(all="ignore"):
        result = _evaluate(node, series, length, metrics if metrics is not None else
                           sorted(series))
    if isinstance(result, list):
        raise MathError("An alarm's expression must give one time series, not METRICS().")
    out = np.asarray(result, dtype=np.float64)
    out = np.broadcast_to(out, (length,)).copy()
    out[~np.isfinite(out)] = np.nan  # x/0: no datapoint  [U]
    return out


def _evaluate(node: Node, series: Mapping[str, Series], length: int,
              metrics: Sequence[str]) -> Any:
    if node.kind == "number":
        return np.full(length, node.value)
    if node.kind == "id":
        if node.value not in series:
            raise MathError(f"The expression refers to {node.value}, which is not the Id of "
                            "another query of the alarm.")
        return series[node.value]
    if node.kind == "neg":
        return -_evaluate(node.args[0], series, length, metrics)
    if node.kind == "op":
        left, right = (_evaluate(a, series, length, metrics) for a in node.args)
        return _BINARY[str(node.value)](left, right)
    name = node.value
    if name == "METRICS":
        return [series[k] for k in metrics]
    values: list[Any] = []
    for arg in node.args:
        value = _evaluate(arg, series, length, metrics)
        values.extend(value if isinstance(value, list) else [value])
    if name == "ABS":
        _arity(name, values, 1)
        return np.abs(values[0])
    if name == "FILL":
        _arity(name, values, 2)
        return np.where(np.isnan(values[0]), values[1], values[0])
    if not values:
        raise MathError(f"{name}() needs at least one argument.")
    stacked = np.vstack([np.broadcast_to(v, (length,)) for v in values])
    present = ~np.isnan(stacked)
    reduce = _REDUCERS[name]
    with np.errstate(all="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN period: missing
            out = reduce(stacked, axis=0)
    return np.where(present.any(axis=0), out, np.nan)


_REDUCERS: dict[str, Callable[..., Any]] = {
    "SUM": np.nansum, "AVG": np.nanmean, "MIN": np.nanmin, "MAX": np.nanmax}


def _arity(name: str, values: list[Any], count: int) -> None:
    if len(values) != count:
        raise MathError(f"{name}() takes {count} argument{'s' if count > 1 else ''}.")
