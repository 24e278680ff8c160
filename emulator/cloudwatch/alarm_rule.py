"""A composite alarm's ``AlarmRule``, as PutCompositeAlarm documents it.

``ALARM(x)``, ``OK(x)``, ``INSUFFICIENT_DATA(x)`` (x an alarm name or ARN, quoted with double
quotes or not), ``TRUE``, ``FALSE``, ``AND``, ``OR``, ``NOT`` and parentheses; AND binds tighter
than OR, NOT tightest. A rule names at most 100 alarms and is at most 10,240 characters
(documented limits).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MAX_RULE_LENGTH = 10_240
MAX_ALARMS = 100
_FUNCTIONS = ("ALARM", "OK", "INSUFFICIENT_DATA")
_TOKEN = re.compile(r'\s*(\(|\)|"(?:[^"\\]|\\.)*"|[^\s()"]+)')


class RuleError(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    kind: str  # const | state | not | and | or
    value: str | bool = False  # the state for "state", the truth for "const"
    alarm: str = ""  # for "state": the name (an ARN is turned into its name)
    args: tuple[Rule, ...] = ()

    def alarms(self) -> set[str]:
        if self.kind == "state":
            return {self.alarm}
        out: set[str] = set()
        for arg in self.args:
            out |= arg.alarms()
        return out

    def holds(self, state_of: Callable[[str], str | None]) -> bool:
        if self.kind == "const":
            return bool(self.value)
        if self.kind == "state":
            return state_of(self.alarm) == self.value
        if self.kind == "not":
            return not self.args[0].holds(state_of)
        if self.kind == "and":
            return all(a.holds(state_of) for a in self.args)
        return any(a.holds(state_of) for a in self.args)


def _name(text: str) -> str:
    if text.startswith('"'):
        text = text[1:-1].replace('\\"', '"')
    if text.startswith("arn:aws:cloudwatch:") and ":alarm:" in text:
        return text.split(":alarm:", 1)[1]
    return text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        if "".join(self.tokens) != re.sub(r"\s+", "", text) and text.strip():
            raise RuleError(self._bad("it has an unterminated quote"))
        self.position = 0

    def _bad(self, why: str) -> str:
        return f"Error in alarm rule {self.text!r}: {why}."

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise RuleError(self._bad("it ends too early"))
        self.position += 1
        return token

    def parse(self) -> Rule:
        if not self.tokens:
            raise RuleError("The AlarmRule must not be empty.")
        rule = self.any_of()
        if self.peek() is not None:
            raise RuleError(self._bad(f"unexpected {self.peek()!r}"))
        return rule

    def any_of(self) -> Rule:
        parts = [self.all_of()]
        while self.peek() == "OR":
            self.take()
            parts.append(self.all_of())
        return parts[0] if len(parts) == 1 else Rule("or", args=tuple(parts))

    def all_of(self) -> Rule:
        parts = [self.negation()]
        while self.peek() == "AND":
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else Rule("and", args=tuple(parts))

    def negation(self) -> Rule:
        if self.peek() == "NOT":
            self.take()
            return Rule("not", args=(self.negation(),))
        return self.atom()

    def atom(self) -> Rule:
        token = self.take()
        if token == "(":
            rule = self.any_of()
            if self.take() != ")":
                raise RuleError(self._bad("a parenthesis is not closed"))
            return rule
        if token in ("TRUE", "FALSE"):
            return Rule("const", token == "TRUE")
        if token in _FUNCTIONS:
            if self.take() != "(":
                raise RuleError(self._bad(f"{token} must be followed by (alarm name)"))
            name = self.take()
            if name in ("(", ")"):
                raise RuleError(self._bad(f"{token}() needs an alarm name"))
            if self.take() != ")":
                raise RuleError(self._bad(f"{token}({name} is not closed"))
            return Rule("state", token, _name(name))
        raise RuleError(self._bad(f"unexpected {token!r} (expected ALARM(), OK(), "
                                  "INSUFFICIENT_DATA(), TRUE, FALSE, NOT or a parenthesis)"))


def parse(text: str) -> Rule:
    if len(text) > MAX_RULE_LENGTH:
        raise RuleError(f"The AlarmRule must be at most {MAX_RULE_LENGTH} characters.")
    rule = _Parser(text).parse()
    if len(rule.alarms()) > MAX_ALARMS:
        raise RuleError(f"An AlarmRule can refer to at most {MAX_ALARMS} alarms.")
    return rule
