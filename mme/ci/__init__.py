"""``mme ci``: the emulator as a background service of a CI job (``up``, ``down``); docs/ci.md."""
