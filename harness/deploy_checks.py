"""What ``mme deploy`` checks before its first call, so a refusal leaves nothing behind.

The ranges and names come from botocore's SageMaker service model (the API's own contract):
the instance types of ``ProductionVariantInstanceType``, the ranges of a ``DeploymentConfig``
(``WaitIntervalInSeconds`` 0-3600, ``MaximumExecutionTimeoutInSeconds`` 600-28800, 1-10 alarms
of 1-255 characters), and SageMaker's documented guardrail rules (a canary of at most half the
fleet, linear steps of 10-50 %). Each problem is one line naming the flag to fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

GUARD_FLAGS = ("--canary-size", "--linear-step-size", "--bake", "--termination-wait",
               "--max-execution-timeout", "--rollback-alarm")


@cache
def _shape(name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for(name)
    return tuple(getattr(shape, "enum", None) or ()), dict(shape.metadata)


def instance_types() -> tuple[str, ...]:
    """Every ``InstanceType`` a production variant takes, as botocore lists them."""
    return _shape("ProductionVariantInstanceType")[0]


def check_instance_type(name: str) -> str | None:
    """None for a known instance type, else one line with the closest ones."""
    known = instance_types()
    if not known or name in known:
        return None
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else (
        "; instance types look like ml.m5.xlarge or ml.g5.2xlarge")
    return f"--instance-type {name!r} is not a SageMaker instance type{hint}"


def _range(flag: str, shape: str, value: int | None) -> str | None:
    if value is None:
        return None
    meta = _shape(shape)[1]
    low, high = meta.get("min"), meta.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        return f"{flag} is {low}-{high} seconds ({shape}), not {value}"
    return None


def _percent_of_fleet(size: Mapping[str, Any], instances: int) -> float:
    if size["Type"] == "CAPACITY_PERCENT":
        return float(size["Value"])
    return 100.0 * float(size["Value"]) / max(instances, 1)


def check_guarded(given: Mapping[str, Any], instance_count: int) -> list[str]:
    """The guarded-update flags (``traffic``, ``canary_size``, ``linear_step_size``, ``bake``,
    ``termination_wait``, ``max_execution_timeout``, ``rollback_alarm``) as one line each of
    what to fix; ``instance_count`` is the fleet the sizes are checked against."""
    from harness.deployer import capacity_size
    from harness.deployment import DeployError

    traffic = given.get("traffic")
    named = [flag for flag in GUARD_FLAGS
             if given.get(flag[2:].replace("-", "_")) not in (None, [], ())]
    if traffic is None:
        if not named:
            return []
        return [f"{', '.join(named)} guard an update: add --traffic canary (or linear, "
                "all-at-once) to run it as a guarded blue/green update, or leave them out"]
    problems = []
    sizes = {"canary": ("--canary-size", "canary_size"),
             "linear": ("--linear-step-size", "linear_step_size")}
    for kind, (flag, key) in sizes.items():
        value = given.get(key)
        if traffic != kind:
            if value is not None:
                problems.append(f"{flag} is for --traffic {kind}, not --traffic {traffic}")
            continue
        if value is None:
            problems.append(f"--traffic {kind} needs {flag} (a percentage, 10%, or a number "
                            "of instances, 1)")
            continue
        try:
            size = capacity_size(value)
        except DeployError as exc:
            problems.append(f"{flag}: {exc}")
            continue
        share = _percent_of_fleet(size, instance_count)
        if size["Type"] == "CAPACITY_PERCENT" and size["Value"] > 100:
            problems.append(f"{flag} {value} is more than the whole fleet")
        elif kind == "canary" and share > 50:
            problems.append(f"--canary-size {value} is {share:g}% of a fleet of "
                            f"{instance_count} instance(s); SageMaker takes at most 50%: "
                            "give a smaller canary or more instances (--instance-count)")
        elif kind == "linear" and not 10 <= share <= 50:
            problems.append(f"--linear-step-size {value} is {share:g}% of a fleet of "
                            f"{instance_count} instance(s); SageMaker takes 10-50%")
    problems += [p for p in (
        _range("--bake", "WaitIntervalInSeconds", given.get("bake")),
        _range("--termination-wait", "TerminationWaitInSeconds", given.get("termination_wait")),
        _range("--max-execution-timeout", "MaximumExecutionTimeoutInSeconds",
               given.get("max_execution_timeout"))) if p]
    timeout = given.get("max_execution_timeout")
    if timeout is not None and timeout <= (given.get("bake") or 0) + (
            given.get("termination_wait") or 0):
        problems.append(f"--max-execution-timeout ({timeout}) must be larger than --bake plus "
                        "--termination-wait")
    problems += check_alarm_names(given.get("rollback_alarm") or ())
    return problems


def check_alarm_names(names: Sequence[str]) -> list[str]:
    """AutoRollbackConfiguration's alarms: 1-10 names of 1-255 characters, not blank."""
    _, meta = _shape("AlarmName")
    _, listed = _shape("AlarmList")
    problems = []
    if len(names) > listed.get("max", 10):
        problems.append(f"--rollback-alarm is given {len(names)} times; SageMaker takes at "
                        f"most {listed.get('max', 10)} alarms")
    pattern = re.compile(meta.get("pattern", ".+"))
    for name in names:
        if not meta.get("min", 1) <= len(name) <= meta.get("max", 255) \
                or not pattern.fullmatch(name):
            problems.append(f"--rollback-alarm {name!r} is not an alarm name (1-255 "
                            "characters, not blank)")
    return problems


def _pattern(shape: str, value: str) -> bool:
    meta = _shape(shape)[1]
    return (meta.get("min", 0) <= len(value) <= meta.get("max", len(value))
            and re.fullmatch(meta.get("pattern", ".*"), value) is not None)


def check_container(role_arn: str | None, image_uri: str | None,
                    environment: Sequence[tuple[str, str]],
                    payloads: Sequence[tuple[str, str]]) -> list[str]:
    """The model's role, image and environment as botocore's patterns take them, and the smoke
    payload files there to read."""
    problems = []
    if role_arn is not None and not _pattern("RoleArn", role_arn):
        problems.append(f"--role-arn {role_arn!r} is not an IAM role ARN "
                        "(arn:aws:iam::123456789012:role/NAME)")
    if image_uri is not None and not _pattern("ContainerImage", image_uri):
        problems.append(f"--image-uri {image_uri!r} is not an image URI (no spaces, at most "
                        "255 characters)")
    for key, _ in environment:
        if not _pattern("EnvironmentKey", key):
            problems.append(f"--env {key}=...: a variable's name is letters, digits and _ "
                            "(not starting with a digit)")
    for target, file in payloads:
        if not Path(file).is_file():
            problems.append(f"--payload {target}={file}: no such file")
    return problems
