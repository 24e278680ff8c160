"""What the server does once as it starts, beyond building its parts (``emulator/app.py``):
``--preload`` (models loaded before it listens), ``--watch`` (the store looked at while it runs)
and ``--transitions`` (transition rules in force from the start). A setting whose content the
start cannot honour stops it with ``StartRefused``: one line, exit status 2."""

from __future__ import annotations

import contextlib
import logging

from emulator.clock import Clock
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.hosting.store_watch import StoreWatch
from emulator.manager.extract import UnsafeArchive
from emulator.manager.records import ModelLoadFailed
from emulator.manager.repository import InvalidModelRepository
from emulator.manager.sources import FolderSource, ObjectNotFound, source_for
from emulator.settings import Settings, StartRefused
from emulator.transitions import TransitionError, TransitionTable, read_rules_file

log = logging.getLogger(__name__)


async def preload(registry: EndpointRegistry, settings: Settings) -> None:
    """``--preload``: each TargetModel loaded on every instance of the default endpoint."""
    for target in settings.preload:
        try:
            timings = await registry.preload(settings.endpoint_name, target)
        except ModelLoadFailed as exc:
            raise StartRefused(f"--preload {target}: its load failed: "
                               f"{' '.join(exc.body.split())}") from None
        except ObjectNotFound:
            raise StartRefused(f"--preload {target}: no such object in "
                               f"{settings.model_data}") from None
        except (InvalidModelRepository, UnsafeArchive) as exc:  # what its calls would say
            raise StartRefused(f"--preload {target}: {' '.join(str(exc).split())}") from None
        for instance, seconds in timings:
            log.info("preload: %s loaded on %s in %.3f s", target, instance, seconds)


def store_watch(registry: EndpointRegistry,
                settings: Settings) -> contextlib.AbstractAsyncContextManager[None]:
    """``--watch``: the default endpoint's folder store looked at while the app runs."""
    source = source_for(settings.model_data) if settings.model_data else None
    if not settings.watch or not isinstance(source, FolderSource):
        return contextlib.nullcontext()
    name = settings.endpoint_name
    return StoreWatch(source, settings.watch_interval_s,
                      lambda target: registry.store_changed(name, target)).running()


def transition_table(settings: Settings, clock: Clock) -> TransitionTable:
    """The transition rules' table, with ``--transitions FILE``'s rules in force."""
    table = TransitionTable(clock)
    if settings.transitions is not None:
        try:
            for rule in read_rules_file(settings.transitions):
                table.put(rule)
        except TransitionError as exc:
            raise StartRefused(str(exc)) from None
    return table
