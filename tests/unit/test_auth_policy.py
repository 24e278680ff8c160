"""The IAM evaluator against IAM's documented evaluation rules (emulator/auth/policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.auth.policy import (
    Decision,
    PolicyError,
    evaluate,
    normalise_context,
    parse_policy,
)

ENDPOINT = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/mme"
INVOKE = "sagemaker:InvokeEndpoint"


def decide(document: dict[str, Any] | list[dict[str, Any]], action: str = INVOKE,
           resource: str = ENDPOINT, **keys: Any) -> Decision:
    documents = document if isinstance(document, list) else [document]
    context = normalise_context({k.replace("__", ":"): v for k, v in keys.items()})
    return evaluate([parse_policy(d) for d in documents], action, resource, context)


def statement(**fields: Any) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", **fields}]}


# The policy, verbatim (from AWS's multi-container endpoint documentation).
ISSUE_POLICY = {"Version": "2012-10-17", "Statement": [{"Action": ["sagemaker:InvokeEndpoint"], "Effect": "Allow",  # noqa: E501
  "Resource": "arn:aws:sagemaker:region:account-id:endpoint/endpoint_name",
  "Condition": {"StringLike": {"sagemaker:TargetContainerHostname": ["customIps*", "common*"]}}}]}
ISSUE_RESOURCE = "arn:aws:sagemaker:region:account-id:endpoint/endpoint_name"


@pytest.mark.parametrize(("hostname", "expected"), [
    ("customIps", Decision.ALLOW),
    ("customIpsModel1", Decision.ALLOW),
    ("common", Decision.ALLOW),
    ("commonBert", Decision.ALLOW),
    ("CustomIps1", Decision.IMPLICIT_DENY),  # StringLike is case-sensitive
    ("secondContainer", Decision.IMPLICIT_DENY),
    ("xcommon", Decision.IMPLICIT_DENY),  # no leading wildcard in the pattern
    (None, Decision.IMPLICIT_DENY),  # key absent: a positive operator is false
])
def test_issue_policy_target_container_hostname(hostname: str | None,
                                                expected: Decision) -> None:
    keys = {"sagemaker__TargetContainerHostname": hostname}
    assert decide(ISSUE_POLICY, resource=ISSUE_RESOURCE, **keys) is expected


def test_issue_policy_other_endpoint_and_action_are_denied() -> None:
    keys = {"sagemaker__TargetContainerHostname": "customIps1"}
    assert decide(ISSUE_POLICY, resource=ISSUE_RESOURCE + "2", **keys) is Decision.IMPLICIT_DENY
    assert decide(ISSUE_POLICY, action="sagemaker:InvokeEndpointAsync", resource=ISSUE_RESOURCE,
                  **keys) is Decision.IMPLICIT_DENY


TEAM_A = statement(Action=["sagemaker:InvokeEndpoint"], Resource=ENDPOINT,
                   Condition={"StringLike": {"sagemaker:TargetModel": ["team-a/*"]}})


@pytest.mark.parametrize(("target", "expected"), [
    ("team-a/x.tar.gz", Decision.ALLOW),
    ("team-a/sub/dir/y.tar.gz", Decision.ALLOW),  # * crosses /
    ("team-b/y.tar.gz", Decision.IMPLICIT_DENY),
    ("team-a", Decision.IMPLICIT_DENY),
    ("TEAM-A/x.tar.gz", Decision.IMPLICIT_DENY),
    (None, Decision.IMPLICIT_DENY),
])
def test_target_model_matrix(target: str | None, expected: Decision) -> None:
    assert decide(TEAM_A, sagemaker__TargetModel=target) is expected


def test_explicit_deny_wins_over_any_allow() -> None:
    policies = [statement(Action="sagemaker:*", Resource="*"),
                {"Version": "2012-10-17", "Statement": {
                    "Effect": "Deny", "Action": INVOKE, "Resource": ENDPOINT,
                    "Condition": {"StringLike": {"sagemaker:TargetModel": "secret/*"}}}}]
    assert decide(policies, sagemaker__TargetModel="public/a.tar.gz") is Decision.ALLOW
    assert decide(policies, sagemaker__TargetModel="secret/a.tar.gz") is Decision.EXPLICIT_DENY


def test_default_deny_without_matching_statement() -> None:
    assert decide(statement(Action="sagemaker:CreateModel", Resource="*")) \
        is Decision.IMPLICIT_DENY
    assert decide([]) is Decision.IMPLICIT_DENY


def test_action_wildcards_are_case_insensitive() -> None:
    for pattern in ("sagemaker:invokeendpoint", "SageMaker:Invoke*", "sagemaker:Invoke?ndpoint",
                    "*", "sagemaker:*"):
        assert decide(statement(Action=pattern, Resource="*")) is Decision.ALLOW, pattern
    assert decide(statement(Action="sagemaker:Invoke?", Resource="*")) is Decision.IMPLICIT_DENY
    assert decide(statement(Action="cloudwatch:*", Resource="*")) is Decision.IMPLICIT_DENY


def test_not_action_and_not_resource() -> None:
    everything_but_delete = statement(NotAction="sagemaker:Delete*", Resource="*")
    assert decide(everything_but_delete) is Decision.ALLOW
    assert decide(everything_but_delete, action="sagemaker:DeleteEndpoint") \
        is Decision.IMPLICIT_DENY
    not_prod = statement(Action="sagemaker:*", NotResource="arn:aws:sagemaker:*:*:endpoint/prod-*")
    assert decide(not_prod) is Decision.ALLOW
    assert decide(not_prod, resource=ENDPOINT.replace("mme", "prod-1")) is Decision.IMPLICIT_DENY


def test_resource_wildcards_stay_within_arn_segments_and_are_case_sensitive() -> None:
    assert decide(statement(Action=INVOKE, Resource="arn:aws:sagemaker:*:*:endpoint/*")) \
        is Decision.ALLOW
    assert decide(statement(Action=INVOKE, Resource="arn:aws:sagemaker:us-east-1:*:*")) \
        is Decision.ALLOW
    assert decide(statement(Action=INVOKE, Resource="arn:aws:sagemaker:*:endpoint/mme")) \
        is Decision.IMPLICIT_DENY  # five segments: * does not swallow the account's colon
    assert decide(statement(Action=INVOKE, Resource=ENDPOINT.upper().replace("ARN", "arn"))) \
        is Decision.IMPLICIT_DENY
    assert decide(statement(Action=INVOKE, Resource="arn:aws:sagemaker:us-east-1:123456789012:"
                                                    "endpoint/m?e")) is Decision.ALLOW


def condition(operator: str, key: str, values: Any) -> dict[str, Any]:
    return statement(Action=INVOKE, Resource="*", Condition={operator: {key: values}})


@pytest.mark.parametrize(("operator", "values", "actual", "allowed"), [
    ("StringEquals", ["a.tar.gz", "b.tar.gz"], "b.tar.gz", True),  # values OR'ed
    ("StringEquals", "a.tar.gz", "A.tar.gz", False),
    ("StringEqualsIgnoreCase", "a.tar.gz", "A.TAR.GZ", True),
    ("StringNotEquals", ["a.tar.gz", "b.tar.gz"], "c.tar.gz", True),
    ("StringNotEquals", ["a.tar.gz", "b.tar.gz"], "b.tar.gz", False),
    ("StringNotEqualsIgnoreCase", "a.tar.gz", "A.tar.gz", False),
    ("StringLike", "team-?/*", "team-a/m.tar.gz", True),
    ("StringNotLike", "team-b/*", "team-a/m.tar.gz", True),
    ("StringNotLike", "team-b/*", "team-b/m.tar.gz", False),
    # a missing key: false for positive operators, true for negated ones (IAM docs)
    ("StringEquals", "a.tar.gz", None, False),
    ("StringNotEquals", "a.tar.gz", None, True),
    ("StringNotLike", "team-b/*", None, True),
    # ...IfExists: true when the key is absent, otherwise the operator decides
    ("StringEqualsIfExists", "a.tar.gz", None, True),
    ("StringEqualsIfExists", "a.tar.gz", "b.tar.gz", False),
    ("StringLikeIfExists", "team-a/*", "team-a/m.tar.gz", True),
    ("StringNotLikeIfExists", "team-a/*", "team-a/m.tar.gz", False),
    # Null: "true" means the key must be absent, "false" that it must be present
    ("Null", "true", None, True),
    ("Null", "true", "x.tar.gz", False),
    ("Null", "false", "x.tar.gz", True),
    ("Null", False, None, False),
])
def test_condition_operators(operator: str, values: Any, actual: str | None,
                             allowed: bool) -> None:
    got = decide(condition(operator, "sagemaker:TargetModel", values),
                 sagemaker__TargetModel=actual)
    assert (got is Decision.ALLOW) is allowed


def test_keys_and_operators_are_anded_and_key_names_case_insensitive() -> None:
    policy = statement(Action=INVOKE, Resource="*", Condition={
        "StringLike": {"sagemaker:targetmodel": "team-a/*",
                       "SageMaker:TargetContainerHostname": "c*"},
        "IpAddress": {"aws:SourceIp": ["127.0.0.0/8", "10.0.0.0/8"]}})
    ok = {"sagemaker__TargetModel": "team-a/x", "sagemaker__TargetContainerHostname": "c1",
          "aws__SourceIp": "127.0.0.1"}
    assert decide(policy, **ok) is Decision.ALLOW
    for key, bad in (("sagemaker__TargetModel", "team-b/x"),
                     ("sagemaker__TargetContainerHostname", "d1"),
                     ("aws__SourceIp", "192.168.1.5")):
        assert decide(policy, **{**ok, key: bad}) is Decision.IMPLICIT_DENY, key


def test_source_ip_not_ip_address_deny() -> None:
    policies = [statement(Action="*", Resource="*"),
                {"Version": "2012-10-17", "Statement": [{
                    "Effect": "Deny", "Action": "*", "Resource": "*",
                    "Condition": {"NotIpAddress": {"aws:SourceIp": "127.0.0.1/32"}}}]}]
    assert decide(policies, aws__SourceIp="127.0.0.1") is Decision.ALLOW
    assert decide(policies, aws__SourceIp="127.0.0.2") is Decision.EXPLICIT_DENY


def test_set_operators_on_multivalued_keys() -> None:
    any_value = condition("ForAnyValue:StringEquals", "sagemaker:InstanceTypes", "ml.m5.large")
    all_values = condition("ForAllValues:StringLike", "sagemaker:InstanceTypes", "ml.m5.*")
    action = {"action": INVOKE}
    assert decide(any_value, **action, sagemaker__InstanceTypes=["ml.g5.xlarge", "ml.m5.large"]) \
        is Decision.ALLOW
    assert decide(any_value, sagemaker__InstanceTypes=None) is Decision.IMPLICIT_DENY
    assert decide(all_values, sagemaker__InstanceTypes=["ml.m5.large", "ml.m5.xlarge"]) \
        is Decision.ALLOW
    assert decide(all_values, sagemaker__InstanceTypes=["ml.m5.large", "ml.g5.xlarge"]) \
        is Decision.IMPLICIT_DENY
    assert decide(all_values, sagemaker__InstanceTypes=None) is Decision.ALLOW  # vacuously


def test_policy_variables() -> None:
    own_prefix = condition("StringLike", "sagemaker:TargetModel", "${aws:username}/*")
    assert decide(own_prefix, aws__username="team-a", sagemaker__TargetModel="team-a/x") \
        is Decision.ALLOW
    assert decide(own_prefix, aws__username="team-a", sagemaker__TargetModel="team-b/x") \
        is Decision.IMPLICIT_DENY
    assert decide(own_prefix, sagemaker__TargetModel="team-a/x") is Decision.IMPLICIT_DENY
    literal_star = condition("StringLike", "sagemaker:TargetModel", "a${*}")
    assert decide(literal_star, sagemaker__TargetModel="a*") is Decision.ALLOW
    assert decide(literal_star, sagemaker__TargetModel="ab") is Decision.IMPLICIT_DENY
    own_endpoint = statement(Action=INVOKE,
                             Resource="arn:aws:sagemaker:*:*:endpoint/${aws:username}-*")
    assert decide(own_endpoint, resource=ENDPOINT.replace("mme", "bob-1"), aws__username="bob") \
        is Decision.ALLOW


@pytest.mark.parametrize(("document", "reason"), [
    ([], "must be a JSON object"),
    ({"Version": "2012-10-17"}, "no Statement"),
    ({"Version": "2012-10-18", "Statement": []}, "Version"),
    (statement(Action=INVOKE), "exactly one of Resource or NotResource"),
    (statement(Resource="*"), "exactly one of Action or NotAction"),
    (statement(Action=INVOKE, NotAction=INVOKE, Resource="*"), "exactly one of Action"),
    ({"Statement": [{"Effect": "allow", "Action": INVOKE, "Resource": "*"}]}, "Effect"),
    (statement(Action="InvokeEndpoint", Resource="*"), "is not an action"),
    (statement(Action=INVOKE, Resource="endpoint/mme"), "neither * nor an ARN"),
    (statement(Action=INVOKE, Resource="*", Principal="*"), "must not name a Principal"),
    (statement(Action=INVOKE, Resource="*", Condition={"StringLikes": {"k": "v"}}),
     "unsupported condition operator 'StringLikes'"),
    (statement(Action=INVOKE, Resource="*", Condition={"NullIfExists": {"k": "true"}}),
     "unsupported condition operator"),
    (statement(Action=INVOKE, Resource="*", Condition={"DateLessThan": {"k": "2020"}}),
     "unsupported condition operator"),
    (statement(Action=INVOKE, Resource="*", Condition={"Null": {"k": "yes"}}), "true or false"),
    (statement(Action=INVOKE, Resource="*", Condition={"IpAddress": {"aws:SourceIp": "x"}}),
     "not an IP address"),
    (statement(Action=INVOKE, Resource="*", Condition={"StringLike": {"k": {}}}), "values must"),
    (statement(Action=INVOKE, Resource="*", Conditions={}), "unknown element"),
])
def test_invalid_policies_are_refused_with_a_reason(document: Any, reason: str) -> None:
    with pytest.raises(PolicyError, match=None) as caught:
        parse_policy(document)
    assert reason in str(caught.value)
