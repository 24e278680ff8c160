"""What the model manager answers when bringing a model in fails for a reason outside the model.

Each becomes a ModelError (``ModelLoadFailed``: status and body, as the container would answer)
with a message that says what to fix. Unconfirmed SageMaker behaviour is marked [U]; every such
decision of the model manager is in this file.
"""

from __future__ import annotations

import errno
import json

# Triton's SageMaker server answers 507 to a load that runs out of memory (SageMakerMMECheckOOM).
# [U] We answer 507 for a lack of disk too (HTTP's "Insufficient Storage"); SageMaker itself
# evicts from its disk and does not document what a tarball larger than the disk gets.
INSUFFICIENT_STORAGE = 507
# [U] SageMaker does not document what a client sees when its model store cannot be read for a
# reason other than a missing object (e.g. an outage): we answer a ModelError with status 503 so
# the client sees it is transient. A missing or forbidden object stays a ValidationError.
STORE_UNAVAILABLE = 503
# What Triton answers to a failed load (e.g. a stub that dies in ``initialize``): 400.
LOAD_FAILED = 400
# [U] What SageMaker answers after a model's stub died while serving is not published: the request
# that meets the dead stub gets Triton's own answer (500, "Stub process '...' is not healthy"),
# the model is taken out, and the next request loads it afresh, as a replaced worker would.
STUB_UNHEALTHY_MARKERS = ("Stub process", "is not healthy")

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

# [U] SageMaker budgets memory, not a model count: --max-loaded-models counts the models that
# serve or are loading, so a load may start once Triton has accepted its victim's unload; under
# --memory-budget too, but it waits for the unload to complete where the victims' memory could
# pass the instance's or Triton has GPUs (ModelManager._load_may_overlap_unloads).


class DiskFull(Exception):
    """The disk (or the quota) holding the cache has no room left."""


class StoreUnavailable(Exception):
    """The model store did not answer (connection refused, reset, timed out, 5xx)."""


def body(message: str) -> str:
    """A body shaped like Triton's error answers."""
    return json.dumps({"error": message})


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


def disk_full(target: str, cache: str, step: str, detail: str) -> str:
    return (f"no space left on the disk holding the cache ({cache}) while {step} TargetModel "
            f"{target}: {detail}. Free disk space, point --cache-dir at a larger disk, or set "
            "--disk-budget below the free space so unused models are deleted first.")


def over_disk_budget(target: str, limit: int, budget: int) -> str:
    return (f"TargetModel {target} expands to more than {limit} bytes, all the room the disk "
            f"budget ({budget} bytes, --disk-budget) leaves once every unused model is deleted. "
            "Raise --disk-budget, or free room by sending fewer models at once.")


def store_unavailable(target: str, location: str, detail: str) -> str:
    return (f"could not download TargetModel {target} from {location}: the model store did not "
            f"answer ({detail}). Check that it is reachable (--s3-endpoint-url, network), then "
            "retry.")


def stub_died_loading(target: str, instances: list[str]) -> str:
    return (f"load failed for TargetModel {target}: the Python backend process of "
            f"{', '.join(sorted(instances))} exited while the model was being imported (a crash, "
            "a segfault or os._exit in model.py or a library it imports). Run model.py under "
            "`python -X faulthandler` to find it, fix it and upload the tarball again.")


def load_timed_out(target: str, seconds: float) -> str:
    return (f"load of TargetModel {target} did not complete within {seconds:g}s "
            "(--model-load-timeout); the model's initialize may be stuck.")


def recycle_after_timeout(target: str, seconds: float) -> str:
    return (f"the load of TargetModel {target} did not complete within {seconds:g}s "
            "(--model-load-timeout) and Triton cannot cancel a load: its Triton is replaced, "
            "as SageMaker replaces an instance that cannot recover")


def recycle_after_dead_stubs(count: int) -> str:
    return (f"{count} loads whose Python process died at import hold every model-load thread "
            "of Triton, which never ends such a load: its Triton is replaced")


def out_of_memory(target: str, needs: int, budget: int, measured: bool) -> str:
    """[U] The words: SageMaker's client sees a ModelError with the container's 507; what the
    container says is Triton's (SageMakerMMECheckOOM), which names no sizes."""
    what = "holds once loaded (measured)" if measured else "takes (its files)"
    return (f"out of memory: TargetModel {target} {what} {needs} bytes, more than the "
            f"{budget} bytes of memory its instance has for models even with every other model "
            "unloaded. Use an instance type with more memory (or a larger --memory-budget), or a "
            "smaller model.")


def out_of_gpu_memory(target: str, needs: int, budget: int) -> str:
    """[U] As ``out_of_memory``, for the instance's GPU memory."""
    return (f"out of GPU memory: TargetModel {target} holds {needs} bytes of GPU memory once "
            f"loaded (measured), more than the {budget} bytes of GPU memory its instance has "
            "for models even with every other model unloaded. Use an instance type with more "
            "GPU memory (or a larger --gpu-memory-budget), or a smaller model.")


def stub_unhealthy(answer: str) -> bool:
    return all(marker in answer for marker in STUB_UNHEALTHY_MARKERS)
