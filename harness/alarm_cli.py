"""``mme alarm put|list|delete``: CloudWatch alarms from the shell, for a guarded update's
``--rollback-alarm``, on the emulator (``--target local``) and on AWS alike.

    mme alarm put --target local --name demo-errors --endpoint-name demo \\
        --metric Invocation5XXErrors --statistic Sum --threshold 0
    mme alarm list --target local
    mme alarm set-state --target local --name demo-errors --state ALARM   # rolls back now
    mme alarm delete --target local demo-errors

``put`` is PutMetricAlarm: with ``--endpoint-name`` the metric is the endpoint's own
(``AWS/SageMaker``, dimensions EndpointName and VariantName); ``--namespace`` and ``--dimension``
name any other. It exits 0, 1 when a call fails (one line: the API's code and message), 2 for a
bad flag.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

COMPARISONS = {
    ">": "GreaterThanThreshold", ">=": "GreaterThanOrEqualToThreshold",
    "<": "LessThanThreshold", "<=": "LessThanOrEqualToThreshold",
}
STATISTICS = ("Sum", "Average", "Minimum", "Maximum", "SampleCount")
MISSING_DATA = ("notBreaching", "breaching", "ignore", "missing")


def _dimension(text: str) -> dict[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"a dimension is NAME=VALUE, not {text!r}")
    return {"Name": name, "Value": value}


def _comparison(text: str) -> str:
    if text in COMPARISONS:
        return COMPARISONS[text]
    if text in COMPARISONS.values():
        return text
    raise argparse.ArgumentTypeError(
        f"a comparison is one of {', '.join(COMPARISONS)} or "
        f"{', '.join(COMPARISONS.values())}, not {text!r}")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", choices=("local", "aws"), required=True,
                        help="local: the emulator's CloudWatch; aws: CloudWatch")
    parser.add_argument("--emulator-url", default=None,
                        help="--target local: the emulator's URL (env MME_EMULATOR_URL; "
                        "default http://127.0.0.1:8080)")
    parser.add_argument("--region", help="AWS region (default: the session's, us-east-1 "
                        "locally)")
    parser.add_argument("--profile", help="AWS profile of the boto3 session")


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    alarm = subparsers.add_parser(
        "alarm", help="CloudWatch alarms (put, list, delete), e.g. a guarded update's "
        "rollback alarm")
    commands = alarm.add_subparsers(dest="alarm_command", required=True)

    put = commands.add_parser("put", help="create or replace an alarm (PutMetricAlarm)")
    _common(put)
    put.add_argument("--name", required=True, help="the alarm's name")
    put.add_argument("--metric", required=True,
                     help="the metric, e.g. Invocation5XXErrors, InvocationModelErrors, "
                     "ModelLatency")
    put.add_argument("--endpoint-name",
                     help="the endpoint whose metric it is (AWS/SageMaker, EndpointName and "
                     "VariantName dimensions)")
    put.add_argument("--variant", default="AllTraffic",
                     help="with --endpoint-name: the variant (default AllTraffic)")
    put.add_argument("--namespace", default=None,
                     help="another namespace (default AWS/SageMaker)")
    put.add_argument("--dimension", type=_dimension, action="append", default=[],
                     metavar="NAME=VALUE", help="a dimension (repeatable)")
    put.add_argument("--statistic", choices=STATISTICS, default="Sum")
    put.add_argument("--threshold", type=float, required=True)
    put.add_argument("--comparison", type=_comparison, default="GreaterThanThreshold",
                     metavar="OP", help="'>' (default), '>=', '<', '<=' or CloudWatch's name")
    put.add_argument("--period", type=int, default=60, help="seconds per datapoint (60)")
    put.add_argument("--evaluation-periods", type=int, default=1)
    put.add_argument("--treat-missing-data", choices=MISSING_DATA, default="notBreaching")
    put.set_defaults(func=run_put)

    listed = commands.add_parser("list", help="every alarm with its state")
    _common(listed)
    listed.add_argument("--name-prefix", default=None)
    listed.set_defaults(func=run_list)

    state = commands.add_parser(
        "set-state", help="set an alarm's state (SetAlarmState): ALARM rolls back the guarded "
        "update it guards")
    _common(state)
    state.add_argument("--name", required=True)
    state.add_argument("--state", choices=("ALARM", "OK", "INSUFFICIENT_DATA"), required=True)
    state.add_argument("--reason", default="set by hand (mme alarm set-state)")
    state.set_defaults(func=run_set_state)

    delete = commands.add_parser("delete", help="delete alarms (DeleteAlarms)")
    _common(delete)
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.set_defaults(func=run_delete)


def _client(args: argparse.Namespace) -> Any:
    import boto3

    from harness.deploy_cli import check_emulator, emulator_url

    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    kwargs: dict[str, Any] = {"region_name": session.region_name or "us-east-1"}
    if args.target == "local":
        url = emulator_url(args.emulator_url)
        check_emulator(url)
        kwargs["endpoint_url"] = url
        if session.get_credentials() is None:
            kwargs.update(aws_access_key_id="local", aws_secret_access_key="local")
    return session.client("cloudwatch", **kwargs)


def _command(work: Callable[[argparse.Namespace, Any], None]
             ) -> Callable[[argparse.Namespace], int]:
    """A subcommand: ``work(args, cloudwatch)``; a refusal of AWS or of the deployer is
    printed as an error (exit status 1)."""
    @functools.wraps(work)
    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        from harness.deployment import DeployError

        try:
            work(args, _client(args))
        except DeployError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except ClientError as exc:
            error = exc.response.get("Error", {})
            print(f"error: {exc.operation_name} failed: {error.get('Code')}: "
                  f"{error.get('Message')}", file=sys.stderr)
            return 1
        except BotoCoreError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0

    return run


def alarm_request(args: argparse.Namespace) -> dict[str, Any]:
    """PutMetricAlarm's parameters from ``mme alarm put``'s flags."""
    dimensions = list(args.dimension)
    if args.endpoint_name:
        dimensions = [{"Name": "EndpointName", "Value": args.endpoint_name},
                      {"Name": "VariantName", "Value": args.variant}, *dimensions]
    namespace = args.namespace or "AWS/SageMaker"
    return {"AlarmName": args.name, "Namespace": namespace, "MetricName": args.metric,
            "Dimensions": dimensions, "Statistic": args.statistic, "Period": args.period,
            "EvaluationPeriods": args.evaluation_periods, "Threshold": args.threshold,
            "ComparisonOperator": args.comparison,
            "TreatMissingData": args.treat_missing_data}


def _metric(alarm: dict[str, Any], separator: str) -> str:
    """An alarm's metric as the commands show it: NAMESPACE METRIC (NAME=VALUE, ...)."""
    dims = separator.join(f"{d['Name']}={d['Value']}" for d in alarm.get("Dimensions", []))
    return f"{alarm.get('Namespace', '')} {alarm.get('MetricName', '')} ({dims})"


def run_put(args: argparse.Namespace) -> int:
    if not args.endpoint_name and not args.dimension and args.namespace is None:
        print("error: name the metric's endpoint (--endpoint-name NAME) or its namespace and "
              "dimensions (--namespace NS --dimension NAME=VALUE)", file=sys.stderr)
        return 2
    return _put(args)


@_command
def _put(args: argparse.Namespace, cloudwatch: Any) -> None:
    request = alarm_request(args)
    cloudwatch.put_metric_alarm(**request)
    print(f"alarm {args.name}: {request['Statistic']} of {_metric(request, ', ')} "
          f"{request['ComparisonOperator']} {request['Threshold']:g} for "
          f"{request['EvaluationPeriods']} period(s) of {request['Period']} s")


@_command
def run_list(args: argparse.Namespace, cloudwatch: Any) -> None:
    params = {"AlarmNamePrefix": args.name_prefix} if args.name_prefix else {}
    for page in cloudwatch.get_paginator("describe_alarms").paginate(**params):
        for alarm in page.get("MetricAlarms", []):
            print(f"{alarm['AlarmName']}\t{alarm['StateValue']}\t{_metric(alarm, ',')} "
                  f"{alarm.get('Statistic', '')} {alarm.get('ComparisonOperator', '')} "
                  f"{alarm.get('Threshold', 0):g}")


@_command
def run_set_state(args: argparse.Namespace, cloudwatch: Any) -> None:
    cloudwatch.set_alarm_state(AlarmName=args.name, StateValue=args.state,
                               StateReason=args.reason)
    print(f"alarm {args.name}: {args.state}")


@_command
def run_delete(args: argparse.Namespace, cloudwatch: Any) -> None:
    found = cloudwatch.describe_alarms(AlarmNames=args.names)
    known = {a["AlarmName"] for a in found.get("MetricAlarms", [])
             + found.get("CompositeAlarms", [])}
    missing = [n for n in args.names if n not in known]
    if missing:
        from harness.deployment import DeployError

        raise DeployError(f"no alarm named {', '.join(missing)} (mme alarm list shows "
                          "them); nothing was deleted")
    cloudwatch.delete_alarms(AlarmNames=args.names)
    print(f"deleted {', '.join(args.names)}")
