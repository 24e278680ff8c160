import os

# The emulator talks gRPC to its Tritons (emulator/triton/client.py) and forks only to exec a
# Triton: gRPC's fork handlers have nothing to do, and with them on it prints "Other threads are
# currently calling into gRPC, skipping fork() handlers" at every Triton start. Read by gRPC at
# import, so set before the first import of grpc (emulator/manager/repository.py's, on the way
# to the server); a user's own setting wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
