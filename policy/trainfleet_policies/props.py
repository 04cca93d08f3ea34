"""Reading resource properties the way the policy SDK hands them over.

pulumi-policy gives a validator `args.props` wrapped in its unknown-checking proxy
(`pulumi_policy.proxy.unknown_checking_proxy`): a `Mapping` / `Sequence` (not a `dict` / `list`) whose
item access raises `UnknownValueError` for a value only known after apply. A resource policy lets that
error propagate: the SDK then reports "can't run policy ... during preview" (advisory) and the policy runs
again, with every value known, when `pulumi up` analyzes the resource before creating it. A stack policy
reads `plain(props)` instead, where an unknown value is the string `UNKNOWN`, and skips what it cannot know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

# What `pulumi preview --json` (and cli/preview/pricing) calls a value unknown until apply.
UNKNOWN = UNKNOWN_STRING_VALUE
_UNKNOWNS = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


def is_unknown(value: Any) -> bool:
    return isinstance(value, str) and value in _UNKNOWNS


def is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def listed(value: Any) -> list[Any]:
    """A list input as a list; None as []; a single value as [value] (IAM's "Action": "s3:GetObject")."""
    if value is None:
        return []
    if is_list(value):
        return [value[i] for i in range(len(value))]
    return [value]


def dig(props: Any, path: str, default: Any = None) -> Any:
    """props['a']['b'] for 'a.b'; `default` when a step is missing or not a mapping. Through the SDK's
    proxy, an unknown value on the way raises UnknownValueError."""
    value = props
    for part in path.split("."):
        if not is_map(value) or part not in value:
            return default
        value = value[part]
    return default if value is None else value


def plain(value: Any) -> Any:
    """The SDK's proxies as plain dicts and lists; an unknown value as the string UNKNOWN."""
    if is_map(value):
        out: dict[str, Any] = {}
        for key in value:
            try:
                out[key] = plain(value[key])
            except UnknownValueError:
                out[key] = UNKNOWN
        return out
    if is_list(value):
        items: list[Any] = []
        for i in range(len(value)):
            try:
                items.append(plain(value[i]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return UNKNOWN if is_unknown(value) else value


def json_document(value: Any) -> Any:
    """An IAM-style document given as a JSON string (pulumi-aws `policy` inputs) or already as an object.
    Raises ValueError when a string is not JSON."""
    if isinstance(value, str):
        return json.loads(value)
    return plain(value)
