"""The hosting model: endpoint -> production variants -> instances, the router, and the factory
that builds an instance's parts (docs/hosting.md, "Fleets")."""
