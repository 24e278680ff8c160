"""A stand-in for Triton's model control that a ``ModelManager`` drives in unit tests."""

from __future__ import annotations

from collections.abc import Callable, Collection


class InstantTriton:
    """Loads and unloads at once, keeping the set of loaded models; a subclass adds what it
    watches in ``loaded_now`` and ``unloaded_now``."""

    def __init__(self) -> None:
        self.loaded: set[str] = set()

    async def load(self, model: str, timeout: float | None = None) -> None:
        self.loaded_now(model)
        self.loaded.add(model)

    async def unload(self, model: str, dependents: bool = True, timeout: float = 360.0,
                     on_accepted: Callable[[], None] | None = None,
                     also: Collection[str] = ()) -> None:
        if on_accepted is not None:
            on_accepted()
        self.loaded.discard(model)
        self.unloaded_now(model)

    def loaded_now(self, model: str) -> None:
        """Called as ``model`` begins to load."""

    def unloaded_now(self, model: str) -> None:
        """Called once ``model`` is unloaded."""
