"""The server's whole state at once: reset to empty (``server_state.ServerState.reset``), saved
as a snapshot and restored from one (``export``, ``restore``), and the snapshot's versioned
on-disk format (``snapshot_format``, shared with ``mme snapshot``). Its HTTP binding is
``emulator/routes/state.py``; docs/testing.md says what a reset removes and what a snapshot
holds."""
