"""Asynchronous inference (InvokeEndpointAsync): a queue per endpoint, kept in the state folder,
drained through each endpoint's own ``Endpoint.invoke``; results and failures written to S3, SNS
notifications, and the backlog metrics Application Auto Scaling reads."""

from emulator.async_inference.service import Accepted, AsyncInference
from emulator.async_inference.store import RequestStore

__all__ = ["Accepted", "AsyncInference", "RequestStore"]
