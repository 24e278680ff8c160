"""HTTP routes, each module a thin binding from a path to the behaviour behind it."""
