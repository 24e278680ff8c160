"""Alarm actions on SNS topics: the notification CloudWatch publishes, sent to the SNS server
given by ``--sns-endpoint-url`` (a moto server, LocalStack, ...). Without one, the action is
recorded in the alarm's history as done, with the message it would have published [U].

The message is CloudWatch's alarm notification (a JSON document: AlarmName, NewStateValue,
NewStateReason, StateChangeTime, Trigger, ...) and the subject ``ALARM: "name" in <Region>``.

Publishes run on workers of their own (``WORKERS`` threads), never on the default thread pool
the CloudWatch routes, the evaluation, saves and model downloads share: an SNS server that
accepts and never answers holds up its own notifications only. Each publish waits at most
``CONNECT_TIMEOUT_S`` to connect and ``READ_TIMEOUT_S`` for the answer, once more after a
failure (botocore's standard retry, 2 attempts); at most ``MAX_WAITING`` publishes wait for a
worker, and one past that fails at once (its history item says so) [U: the bounds].
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
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

WORKERS = 4
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 10
ATTEMPTS = 2  # one retry
MAX_WAITING = 1000

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


def sns_client(endpoint_url: str | None, region: str, connections: int) -> Any:
    """A boto3 SNS client for ``--sns-endpoint-url``: the environment's credentials, or
    placeholders (an emulated SNS server checks none); short timeouts, one retry."""
    import boto3

    session = boto3.session.Session()
    credentials = {} if session.get_credentials() is not None else {
        "aws_access_key_id": "emulator", "aws_secret_access_key": "emulator"}
    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                    max_pool_connections=connections)
    return session.client("sns", endpoint_url=endpoint_url, region_name=region, config=config,
                          **credentials)


class _Workers:
    """``count`` daemon threads running what is handed to them, in order: a publish stuck on
    a server that never answers ends with its timeouts, and never holds up the process's exit
    (a ThreadPoolExecutor's threads are joined at exit)."""

    def __init__(self, count: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[None], Callable[[], None]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{k}", daemon=True)
                         for k in range(count)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, work = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                work()
                future.set_result(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                future.set_exception(exc)

    def submit(self, work: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        self._jobs.put((future, work))
        return future

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


class SnsPublisher:
    def __init__(self, endpoint_url: str | None, store: AlarmStore) -> None:
        self.endpoint_url = endpoint_url
        self.store = store
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._executor: _Workers | None = None
        self._waiting = 0  # publishes handed to the workers and not finished

    def _client(self, region: str) -> Any:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self._clients[region] = sns_client(self.endpoint_url, region, WORKERS)
            return client

    def _workers(self) -> _Workers:
        with self._lock:
            if self._executor is None:
                self._executor = _Workers(WORKERS, "sns-publish")
            return self._executor

    def close(self) -> None:
        """Stop the workers once they are done with what they hold."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.stop()

    def _send(self, region: str, arn: str, subject: str, body: str) -> None:
        try:
            self._client(region).publish(TopicArn=arn, Subject=subject, Message=body)
        finally:
            with self._lock:
                self._waiting -= 1

    async def publish(self, calls: list[ActionCall]) -> list[str | None]:
        return list(await asyncio.gather(*(self._publish_one(call) for call in calls)))

    async def _publish_one(self, call: ActionCall) -> str | None:
        subject, body = message(call, self.store)
        if self.endpoint_url is None:
            log.info("alarm %s: SNS %s not published (no --sns-endpoint-url): %s",
                     call.alarm_name, call.arn, subject)
            return None
        with self._lock:
            if self._waiting >= MAX_WAITING:
                full = True
            else:
                full, self._waiting = False, self._waiting + 1
        if full:
            error = (f"{MAX_WAITING} notifications are already waiting for the SNS server "
                     f"{self.endpoint_url}; this one was dropped")
            log.warning("alarm %s: %s", call.alarm_name, error)
            return error
        region = call.arn.split(":")[3]
        try:
            text = json.dumps(body)
            await asyncio.wrap_future(self._workers().submit(
                lambda: self._send(region, call.arn, subject, text)))
            return None
        except Exception as exc:  # noqa: BLE001 - the history says why it failed
            log.warning("alarm %s: publishing to %s failed: %s", call.alarm_name, call.arn,
                        exc)
            return str(exc)
