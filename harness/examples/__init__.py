"""Examples for users of the harness: a tiny model, a test file, a CI workflow."""
