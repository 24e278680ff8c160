"""Alarm actions on SNS topics: the notification CloudWatch publishes, sent to the SNS server
given by ``--sns-endpoint-url`` (a moto server, LocalStack, ...). Without one, the action is
recorded in the alarm's history as done, with the message it would have published [U].

The message is CloudWatch's alarm notification (a JSON document: AlarmName, NewStateValue,
NewStateReason, StateChangeTime, Trigger, ...) and the subject ``ALARM: "name" in <Region>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timezone
from typing import Any, Protocol

from botocore.config import Config

from emulator.clock import Clock
from emulator.cloudwatch.actions import ActionCall


class _ConfiguredAlarm(Protocol):
    @property
    def config_updated(self) -> float: ...


class AlarmStore(Protocol):
    """What a notification reads of the alarm store (the store itself imports this module)."""

    region: str
    account: str
    clock: Clock

    def get(self, name: str) -> _ConfiguredAlarm | None: ...

log = logging.getLogger(__name__)

# The names AWS writes in "Region" and the subject (the common ones; others: the code) [U]
REGION_NAMES = {
    "us-east-1": "US East (N. Virginia)", "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)", "us-west-2": "US West (Oregon)",
    "eu-west-1": "EU (Ireland)", "eu-central-1": "EU (Frankfurt)",
    "eu-west-2": "EU (London)", "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-southeast-1": "Asia Pacific (Singapore)", "ap-southeast-2": "Asia Pacific (Sydney)",
}


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"


def message(call: ActionCall, store: AlarmStore) -> tuple[str, dict[str, Any]]:
    """(subject, message) CloudWatch publishes for this action."""
    config = call.config
    region = REGION_NAMES.get(store.region, store.region)
    now = store.clock.now()
    alarm = store.get(call.alarm_name)
    trigger: dict[str, Any] = {
        "Period": config.get("Period"), "EvaluationPeriods": config.get("EvaluationPeriods"),
        "DatapointsToAlarm": config.get("DatapointsToAlarm"),
        "ComparisonOperator": config.get("ComparisonOperator"),
        "Threshold": config.get("Threshold"),
        "TreatMissingData": config.get("TreatMissingData") or "missing",
        "EvaluateLowSampleCountPercentile": config.get("EvaluateLowSampleCountPercentile", ""),
    }
    if config.get("Metrics"):
        trigger["Metrics"] = config["Metrics"]
    elif config.get("MetricName"):
        trigger.update({
            "MetricName": config["MetricName"], "Namespace": config["Namespace"],
            "StatisticType": "Statistic" if config.get("Statistic") else "ExtendedStatistic",
            "Statistic": (config.get("Statistic") or config.get("ExtendedStatistic", "")).upper(),
            "Unit": config.get("Unit"),
            "Dimensions": [{"value": d["Value"], "name": d["Name"]}
                           for d in config.get("Dimensions") or []]})
    body: dict[str, Any] = {
        "AlarmName": call.alarm_name, "AlarmDescription": config.get("AlarmDescription"),
        "AWSAccountId": store.account,
        "AlarmConfigurationUpdatedTimestamp": _time(store.clock.to_emulated(
            alarm.config_updated, now)) if alarm else None,
        "NewStateValue": call.state, "NewStateReason": call.reason,
        "StateChangeTime": _time(store.clock.to_emulated(call.transitioned, now)),
        "Region": region, "AlarmArn": call.alarm_arn, "OldStateValue": call.old_state,
        "OKActions": config.get("OKActions") or [],
        "AlarmActions": config.get("AlarmActions") or [],
        "InsufficientDataActions": config.get("InsufficientDataActions") or [],
    }
    if config.get("AlarmRule"):
        body["AlarmRule"] = config["AlarmRule"]
    else:
        body["Trigger"] = trigger
    subject = f'{call.state}: "{call.alarm_name}" in {region}'
    if len(subject) > 100:  # SNS's limit for a subject
        subject = subject[:97] + "..."
    return subject, body


class SnsPublisher:
    def __init__(self, endpoint_url: str | None, store: AlarmStore) -> None:
        self.endpoint_url = endpoint_url
        self.store = store
        self._clients: dict[str, Any] = {}

    def _client(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is None:
            import boto3

            session = boto3.session.Session()
            credentials = {} if session.get_credentials() is not None else {
                "aws_access_key_id": "emulator", "aws_secret_access_key": "emulator"}
            # Short timeouts, one retry: an SNS server that is down costs seconds, not minutes
            config = Config(connect_timeout=2, read_timeout=10,
                            retries={"max_attempts": 2, "mode": "standard"})
            client = self._clients[region] = session.client(
                "sns", endpoint_url=self.endpoint_url, region_name=region, config=config,
                **credentials)
        return client

    async def publish(self, calls: list[ActionCall]) -> list[str | None]:
        results: list[str | None] = []
        for call in calls:
            subject, body = message(call, self.store)
            if self.endpoint_url is None:
                log.info("alarm %s: SNS %s not published (no --sns-endpoint-url): %s",
                         call.alarm_name, call.arn, subject)
                results.append(None)
                continue
            region = call.arn.split(":")[3]
            try:
                await asyncio.to_thread(self._client(region).publish, TopicArn=call.arn,
                                        Subject=subject, Message=json.dumps(body))
                results.append(None)
            except Exception as exc:  # noqa: BLE001 - the history says why it failed
                log.warning("alarm %s: publishing to %s failed: %s", call.alarm_name, call.arn,
                            exc)
                results.append(str(exc))
        return results
