"""ListTags: the tags a model, an endpoint config, an endpoint or an inference component was
created with, looked up by its ARN. The SageMaker Python SDK reads them to copy an endpoint
config (``Predictor.update_data_capture_config``, ``disable_data_capture``). Tags change only
at creation here: AddTags and DeleteTags are not served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as component_rules
from emulator.contract.control_plane import KIND_CONFIG, KIND_ENDPOINT, KIND_MODEL
from emulator.control.state_db import CONFIGS, INFERENCE_COMPONENTS, MODELS, ControlStore

# Each kind an ARN names and where its creation tags are kept: the table, and the key of
# the tags in a row's document.
_KEPT = {KIND_MODEL: (MODELS, "Tags"), KIND_CONFIG: (CONFIGS, "Tags"),
         component_rules.KIND: (INFERENCE_COMPONENTS, "tags")}


class Tags:
    def __init__(self, store: ControlStore, region: str, account: str,
                 unmanaged: Callable[[str], bool]) -> None:
        self._store = store
        self._unmanaged = unmanaged  # an endpoint of ``mme serve --model-data``: no tags
        self._prefix = f"arn:aws:sagemaker:{region}:{account}:"

    def handlers(self) -> dict[str, Any]:
        return {"ListTags": self.list_tags}

    async def list_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        arn = params["ResourceArn"]
        tags = self._tags(arn)
        offset = wire.decode_token(params.get("NextToken"))
        size = int(params.get("MaxResults") or 50)
        page = tags[offset:offset + size]
        more = offset + size < len(tags)
        return {"Tags": page, **({"NextToken": wire.encode_token(offset + size)} if more else {})}

    def _tags(self, arn: str) -> list[dict[str, str]]:
        kind, _, name = arn.removeprefix(self._prefix).partition("/")
        if not arn.startswith(self._prefix) or not name or (
                kind not in _KEPT and kind != KIND_ENDPOINT):
            raise wire.validation_error(  # [U] AWS's words for an ARN it keeps nothing for
                f"ResourceArn {arn} names no model, endpoint config, endpoint or inference "
                f"component of this emulator (its ARNs begin {self._prefix}).")
        if kind == KIND_ENDPOINT:
            record = self._store.get_endpoint(name)
            if record is None and self._unmanaged(name):
                return []
            if record is None:
                raise wire.not_found(KIND_ENDPOINT, arn)
            return list(record.tags)
        table, key = _KEPT[kind]
        resource = self._store.get(table, name)
        if resource is None:
            if kind == component_rules.KIND:
                raise component_rules.not_found(arn)
            raise wire.not_found(kind, arn)
        return list(resource.doc.get(key) or [])
