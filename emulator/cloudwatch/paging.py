"""Pages of DescribeAlarms and DescribeAlarmHistory: a NextToken names the last item shown (an
alarm's name, a history item's id), never a position, so a page goes on after it whatever was
deleted or added between the calls. The token is opaque to clients (base64 of JSON)."""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from typing import Any

from emulator.cloudwatch.cloudwatch_errors import CloudWatchError, invalid


def page(items: list[Any], keys: list[Any], params: dict[str, Any], default: int,
          descending: bool = False) -> tuple[list[Any], str | None]:
    """One page of ``items``, which are in the order of ``keys`` (unique; ascending, or
    descending). The NextToken names the last key shown, not a position: a page goes on after
    it whatever was deleted or added meanwhile."""
    size = params.get("MaxRecords") or default
    if not 1 <= size <= 100:
        raise invalid("The parameter MaxRecords must be between 1 and 100.")
    start = 0
    token = params.get("NextToken")
    if token:
        after = _decode_token(token)
        if keys and type(after) is not type(keys[0]):
            raise _bad_token()
        if descending:
            start = next((i for i, k in enumerate(keys) if k < after), len(keys))
        else:
            start = bisect.bisect_right(keys, after)
    page = items[start: start + size]
    more = start + size < len(items)
    return page, (_encode_token(keys[start + size - 1]) if more else None)


def _bad_token() -> CloudWatchError:
    return CloudWatchError("InvalidNextToken", "The service couldn't process the NextToken "
                           "because it is not valid.")


def _encode_token(after: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode()


def _decode_token(token: str) -> Any:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        after = decoded["after"]
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise _bad_token() from exc
    if not isinstance(after, (str, int)) or isinstance(after, bool):
        raise _bad_token()
    return after
