"""IAM identity-policy evaluation: small, in one module, following IAM's documented rules.

No maintained PyPI library evaluates a request against a policy with conditions: policyuniverse
parses and expands, iam-ape/cloudsplaining analyse, and moto's evaluator is internal to moto and
skips Resource/Condition. So this module implements the documented rules
(IAM User Guide: "Policy evaluation logic", "Condition operators", "Policy variables"):

- explicit Deny wins; otherwise an applicable Allow allows; otherwise implicit (default) deny;
- a statement applies when its Action/NotAction, Resource/NotResource and every condition match;
- Action matching is case-insensitive with ``*``/``?``; Resource matching is case-sensitive, per
  ARN segment (wildcards do not cross ``:``, they do cross ``/``);
- in a Condition block operators are AND'ed, keys within an operator AND'ed, values OR'ed;
- a key missing from the request: false, but true for negated operators (``StringNotLike`` ...),
  true for ``...IfExists`` and for ``ForAllValues:``, false for ``ForAnyValue:``;
- condition key names are case-insensitive, values are case-sensitive unless the operator says;
- ``${aws:username}``-style policy variables in Resource and String/Arn condition values
  (Version 2012-10-17 only); an unresolvable variable never matches.

Policies are parsed and validated once, at start (``parse_policy``), so a typo is refused with a
reason instead of silently denying in the middle of a test.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

Context = Mapping[str, Sequence[str]]  # lowercased condition key -> its values


class PolicyError(ValueError):
    """Why a policy document is refused (the caller adds the file)."""


class Decision(str, Enum):
    ALLOW = "allow"
    EXPLICIT_DENY = "explicit-deny"
    IMPLICIT_DENY = "implicit-deny"


_STRING = {"StringEquals", "StringNotEquals", "StringEqualsIgnoreCase",
           "StringNotEqualsIgnoreCase", "StringLike", "StringNotLike"}
_ARN = {"ArnEquals", "ArnNotEquals", "ArnLike", "ArnNotLike"}
_NUMERIC = {"NumericEquals", "NumericNotEquals", "NumericLessThan", "NumericLessThanEquals",
            "NumericGreaterThan", "NumericGreaterThanEquals"}
_IP = {"IpAddress", "NotIpAddress"}
OPERATORS = frozenset(_STRING | _ARN | _NUMERIC | _IP | {"Bool", "Null"})
_NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals",
            "ArnNotLike", "NumericNotEquals", "NotIpAddress"}
_STATEMENT_KEYS = {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}
_ACTION = re.compile(r"^(\*|[a-z0-9-]+:[A-Za-z0-9*?]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Condition:
    operator: str  # the base operator, e.g. StringLike
    qualifier: str | None  # ForAnyValue | ForAllValues | None
    if_exists: bool
    key: str  # lowercased
    values: tuple[str, ...]


@dataclass(frozen=True)
class Statement:
    sid: str | None
    allow: bool
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Policy:
    version: str
    statements: tuple[Statement, ...]


# --- Parsing --------------------------------------------------------------------------------

def parse_policy(document: Any) -> Policy:
    if not isinstance(document, dict):
        raise PolicyError("a policy document must be a JSON object with a Statement")
    unknown = set(document) - {"Version", "Id", "Statement"}
    if unknown:
        raise PolicyError(f"unknown policy element(s) {sorted(unknown)}")
    version = document.get("Version", "2008-10-17")
    if version not in ("2012-10-17", "2008-10-17"):
        raise PolicyError(f"Version {version!r} is not 2012-10-17 (or 2008-10-17)")
    raw = document.get("Statement")
    if raw is None:
        raise PolicyError("the policy has no Statement")
    raw_statements = raw if isinstance(raw, list) else [raw]
    if not raw_statements:
        raise PolicyError("Statement is empty")
    return Policy(version, tuple(_parse_statement(s, i) for i, s in enumerate(raw_statements)))


def _parse_statement(raw: Any, index: int) -> Statement:
    where = f"Statement[{index}]"
    if not isinstance(raw, dict):
        raise PolicyError(f"{where} is not an object")
    if isinstance(raw.get("Sid"), str):
        where += f" (Sid {raw['Sid']!r})"
    if "Principal" in raw or "NotPrincipal" in raw:
        raise PolicyError(f"{where}: an identity-based policy must not name a Principal")
    unknown = set(raw) - _STATEMENT_KEYS
    if unknown:
        raise PolicyError(f"{where}: unknown element(s) {sorted(unknown)}")
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise PolicyError(f"{where}: Effect must be \"Allow\" or \"Deny\", not {effect!r}")
    actions, not_action = _exactly_one(raw, "Action", "NotAction", where)
    for action in actions:
        if not _ACTION.match(action):
            raise PolicyError(f"{where}: {action!r} is not an action (service:Operation or *)")
    resources, not_resource = _exactly_one(raw, "Resource", "NotResource", where)
    for resource in resources:
        if resource != "*" and not resource.startswith("arn:"):
            raise PolicyError(f"{where}: resource {resource!r} is neither * nor an ARN")
    return Statement(sid=raw.get("Sid"), allow=effect == "Allow", actions=actions,
                     not_action=not_action, resources=resources, not_resource=not_resource,
                     conditions=_parse_conditions(raw.get("Condition"), where))


def _exactly_one(raw: dict[str, Any], name: str, not_name: str,
                 where: str) -> tuple[tuple[str, ...], bool]:
    if (name in raw) == (not_name in raw):
        raise PolicyError(f"{where}: needs exactly one of {name} or {not_name}")
    key = name if name in raw else not_name
    value = raw[key]
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PolicyError(f"{where}: {key} must be a non-empty string or list of strings")
    return tuple(values), key == not_name


def _parse_conditions(raw: Any, where: str) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: Condition must be an object")
    out: list[Condition] = []
    for op_name, block in raw.items():
        qualifier, _, base = op_name.rpartition(":")
        if qualifier not in ("", "ForAnyValue", "ForAllValues"):
            raise PolicyError(f"{where}: unknown set operator {qualifier!r} in {op_name!r}")
        if_exists = base.endswith("IfExists") and base != "IfExists"
        base = base[: -len("IfExists")] if if_exists else base
        if base not in OPERATORS or (if_exists and base == "Null"):
            raise PolicyError(f"{where}: unsupported condition operator {op_name!r} (supported: "
                              f"{', '.join(sorted(OPERATORS))}, with IfExists and "
                              "ForAnyValue:/ForAllValues:)")
        if not isinstance(block, dict) or not block:
            raise PolicyError(f"{where}: {op_name} must map condition keys to values")
        for key, value in block.items():
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, (str, int, float, bool)) for v in values):
                raise PolicyError(f"{where}: {op_name} {key}: values must be strings, numbers "
                                  "or booleans")
            texts = tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
            _check_values(base, texts, f"{where}: {op_name} {key}")
            out.append(Condition(base, qualifier or None, if_exists, key.lower(), texts))
    return tuple(out)


def _check_values(operator: str, values: tuple[str, ...], where: str) -> None:
    for value in values:
        if operator in ("Bool", "Null") and value.lower() not in ("true", "false"):
            raise PolicyError(f"{where}: {value!r} is not true or false")
        if operator in _NUMERIC:
            try:
                float(value)
            except ValueError as exc:
                raise PolicyError(f"{where}: {value!r} is not a number") from exc
        if operator in _IP:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError as exc:
                raise PolicyError(f"{where}: {value!r} is not an IP address or CIDR") from exc


# --- Matching -------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_ESCAPES = {"*": "*", "?": "?", "$": "$"}


def _resolve(pattern: str, context: Context, version: str) -> str | None:
    """Substitute ``${key}`` policy variables; None when one has no single value."""
    if version != "2012-10-17" or "${" not in pattern:
        return pattern
    unresolved = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal unresolved
        name = match.group(1)
        if name in _ESCAPES:
            return "\0" + name  # a literal * ? $ even in Like patterns; unmarked below
        values = context.get(name.lower())
        if not values or len(values) != 1:
            unresolved = True
            return ""
        return values[0].replace("*", "\0*").replace("?", "\0?")

    result = _VARIABLE.sub(substitute, pattern)
    return None if unresolved else result


@lru_cache(maxsize=4096)
def _like(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """``*`` and ``?`` wildcards (``\\0`` marks a literal one) as an anchored regex."""
    out: list[str] = []
    literal = False
    for char in pattern:
        if char == "\0":
            literal = True
            continue
        if not literal and char == "*":
            out.append(".*")
        elif not literal and char == "?":
            out.append(".")
        else:
            out.append(re.escape(char))
        literal = False
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _plain(text: str) -> str:
    return text.replace("\0", "")


def action_matches(pattern: str, action: str) -> bool:
    return _like(pattern, True).fullmatch(action) is not None


def arn_matches(pattern: str, arn: str) -> bool:
    """Segment by segment: ``arn:partition:service:region:account:resource``."""
    if pattern == "*":
        return True
    wanted, actual = pattern.split(":", 5), arn.split(":", 5)
    if len(wanted) != len(actual):
        return False
    return all(_like(w).fullmatch(a) is not None for w, a in zip(wanted, actual, strict=True))


def _match_one(operator: str, wanted: str, actual: str) -> bool:
    """Positive form of ``operator``: does one request value match one policy value?"""
    if operator in ("StringEquals", "StringNotEquals"):
        return _plain(wanted) == actual
    if operator in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return _plain(wanted).casefold() == actual.casefold()
    if operator in ("StringLike", "StringNotLike"):
        return _like(wanted).fullmatch(actual) is not None
    if operator in _ARN:
        return arn_matches(wanted, actual)
    if operator == "Bool":
        return wanted.lower() == actual.lower()
    if operator in _IP:
        try:
            return ipaddress.ip_address(actual) in ipaddress.ip_network(wanted, strict=False)
        except ValueError:
            return False
    try:
        a, w = float(actual), float(wanted)
    except ValueError:
        return False
    return {"NumericEquals": a == w, "NumericNotEquals": a == w, "NumericLessThan": a < w,
            "NumericLessThanEquals": a <= w, "NumericGreaterThan": a > w,
            "NumericGreaterThanEquals": a >= w}[operator]


def condition_holds(condition: Condition, context: Context, version: str = "2012-10-17") -> bool:
    present = condition.key in context and len(context[condition.key]) > 0
    if condition.operator == "Null":
        # "true": the key must be absent; "false": present. Several values are OR'ed.
        return any((v.lower() == "true") != present for v in condition.values)
    negated = condition.operator in _NEGATED
    if not present:
        if condition.if_exists or condition.qualifier == "ForAllValues":
            return True
        if condition.qualifier == "ForAnyValue":
            return False
        return negated
    substitutes = condition.operator in _STRING or condition.operator in _ARN
    wanted = [w for w in (_resolve(v, context, version) if substitutes else v
                          for v in condition.values) if w is not None]

    def single(actual: str) -> bool:
        hit = any(_match_one(condition.operator, w, actual) for w in wanted)
        return not hit if negated else hit

    values = context[condition.key]
    if condition.qualifier == "ForAllValues":
        return all(single(v) for v in values)
    # ForAnyValue, and [U] a single-valued operator on a multivalued key: any value may match.
    return any(single(v) for v in values)


def statement_applies(statement: Statement, action: str, resource: str, context: Context,
                      version: str = "2012-10-17") -> bool:
    hit = any(action_matches(a, action) for a in statement.actions)
    if hit == statement.not_action:
        return False
    resources = [r for r in (_resolve(p, context, version) for p in statement.resources)
                 if r is not None]
    hit = any(arn_matches(r, resource) for r in resources)
    if hit == statement.not_resource:
        return False
    return all(condition_holds(c, context, version) for c in statement.conditions)


def evaluate(policies: Sequence[Policy], action: str, resource: str,
             context: Context) -> Decision:
    allowed = False
    for policy in policies:
        for statement in policy.statements:
            if statement_applies(statement, action, resource, context, policy.version):
                if not statement.allow:
                    return Decision.EXPLICIT_DENY
                allowed = True
    return Decision.ALLOW if allowed else Decision.IMPLICIT_DENY


def normalise_context(values: Mapping[str, str | Sequence[str] | None]) -> dict[str, list[str]]:
    """Lowercase the key names and drop absent keys; single values become one-element lists."""
    out: dict[str, list[str]] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key.lower()] = [value] if isinstance(value, str) else list(value)
    return out
