"""The SageMaker control plane (CreateModel ... DeleteEndpoint) of the emulator."""

from emulator.control.runtimes import EndpointRuntimes
from emulator.control.service import ControlPlaneService
from emulator.control.state_db import ControlStore

__all__ = ["ControlPlaneService", "ControlStore", "EndpointRuntimes"]
