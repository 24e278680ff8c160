"""A composite alarm's ``AlarmRule``, as PutCompositeAlarm documents it.

``ALARM(x)``, ``OK(x)``, ``INSUFFICIENT_DATA(x)`` (x an alarm name or ARN, quoted with double
quotes or not), ``TRUE``, ``FALSE``, ``AND``, ``OR``, ``NOT`` and parentheses; AND binds tighter
than OR, NOT tightest. Documented limits: at most 10,240 characters, 100 alarms and 500
elements ("Elements are child alarms, TRUE or FALSE statements, and parentheses": here each
``ALARM(x)`` is one element and each grouping parenthesis one [U]).

A rule is parsed once, when it is put (and when a stored one is loaded), into a postfix program
(``Rule.program``); parsing and evaluation are loops over it, never recursion, so no rule that
fits the limits (``NOT`` repeated 2,500 times, 250 nested parentheses) can exhaust the stack.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_RULE_LENGTH = 10_240
MAX_ALARMS = 100
MAX_ELEMENTS = 500
_FUNCTIONS = ("ALARM", "OK", "INSUFFICIENT_DATA")
_TOKEN = re.compile(r'\s*(\(|\)|"(?:[^"\\]|\\.)*"|[^\s()"]+)')
_PRECEDENCE = {"OR": 1, "AND": 2, "NOT": 3}

# One step of a rule's postfix program, (op, value, alarm name): ("const", "TRUE", ""),
# ("state", "ALARM", name), ("not", "", ""), ("and", "", ""), ("or", "", "").
Step = tuple[str, str, str]


class RuleError(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    text: str
    program: tuple[Step, ...]
    names: frozenset[str] = field(default_factory=frozenset)

    def alarms(self) -> set[str]:
        """The alarms the rule names (ARNs turned into names)."""
        return set(self.names)

    def holds(self, state_of: Callable[[str], str | None]) -> bool:
        """Whether the rule is true with the alarms' states now."""
        stack: list[bool] = []
        for op, value, name in self.program:
            if op == "const":
                stack.append(value == "TRUE")
            elif op == "state":
                stack.append(state_of(name) == value)
            elif op == "not":
                stack.append(not stack.pop())
            else:
                right, left = stack.pop(), stack.pop()
                stack.append(left and right if op == "and" else left or right)
        return stack[-1]


def _name(text: str) -> str:
    if text.startswith('"'):
        text = text[1:-1].replace('\\"', '"')
    if text.startswith("arn:aws:cloudwatch:") and ":alarm:" in text:
        return text.split(":alarm:", 1)[1]
    return text


def _tokens(text: str) -> list[str]:
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens) != re.sub(r"\s+", "", text) and text.strip():
        raise RuleError(_bad(text, "it has an unterminated quote"))
    return tokens


def _bad(text: str, why: str) -> str:
    shown = text if len(text) <= 200 else text[:200] + "..."
    return f"Error in alarm rule {shown!r}: {why}."


def parse(text: str) -> Rule:
    """The rule as a postfix program (operator precedence, with an explicit stack), or the
    RuleError that says what to change."""
    if len(text) > MAX_RULE_LENGTH:
        raise RuleError(f"The AlarmRule must be at most {MAX_RULE_LENGTH} characters.")
    tokens = _tokens(text)
    if not tokens:
        raise RuleError("The AlarmRule must not be empty.")
    program: list[Step] = []
    operators: list[str] = []  # "(", "NOT", "AND", "OR"
    names: set[str] = set()
    elements = 0
    operand = True  # an operand is expected next (else AND, OR or ")")
    position = 0

    def take() -> str:
        nonlocal position
        if position >= len(tokens):
            raise RuleError(_bad(text, "it ends too early"))
        position += 1
        return tokens[position - 1]

    while position < len(tokens):
        token = take()
        if operand:
            if token in ("NOT", "("):
                operators.append(token)
                elements += token == "("
            elif token in ("TRUE", "FALSE"):
                program.append(("const", token, ""))
                elements += 1
                operand = False
            elif token in _FUNCTIONS:
                if take() != "(":
                    raise RuleError(_bad(text, f"{token} must be followed by (alarm name)"))
                name = take()
                if name in ("(", ")"):
                    raise RuleError(_bad(text, f"{token}() needs an alarm name"))
                if take() != ")":
                    raise RuleError(_bad(text, f"{token}({name} is not closed"))
                names.add(_name(name))
                program.append(("state", token, _name(name)))
                elements += 1
                operand = False
            else:
                raise RuleError(_bad(text, f"unexpected {token!r} (expected ALARM(), OK(), "
                                     "INSUFFICIENT_DATA(), TRUE, FALSE, NOT or a parenthesis)"))
        elif token in ("AND", "OR"):
            while operators and operators[-1] != "(" and (
                    _PRECEDENCE[operators[-1]] >= _PRECEDENCE[token]):
                program.append((operators.pop().lower(), "", ""))
            operators.append(token)
            operand = True
        elif token == ")":
            while operators and operators[-1] != "(":
                program.append((operators.pop().lower(), "", ""))
            if not operators:
                raise RuleError(_bad(text, "unexpected ')'"))
            operators.pop()
            elements += 1
        else:
            raise RuleError(_bad(text, f"unexpected {token!r} (expected AND, OR or ')')"))
        if elements > MAX_ELEMENTS:
            raise RuleError(f"The AlarmRule can have at most {MAX_ELEMENTS} elements (child "
                            "alarms, TRUE or FALSE, and parentheses).")
    if operand:
        raise RuleError(_bad(text, "it ends too early"))
    while operators:
        op = operators.pop()
        if op == "(":
            raise RuleError(_bad(text, "a parenthesis is not closed"))
        program.append((op.lower(), "", ""))
    if len(names) > MAX_ALARMS:
        raise RuleError(f"An AlarmRule can refer to at most {MAX_ALARMS} alarms.")
    return Rule(text, tuple(program), frozenset(names))
