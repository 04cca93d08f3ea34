"""The stack config a `pulumi preview --json` document was made with, read from the document itself.

Pulumi writes the stack's whole config into the document's `config` map (pulumi/pulumi pkg/engine/events.go,
`preludeEvent`: every value through `config.Value.Value(config.NewBlindingDecrypter())`, then
`pkg/backend/display/json.go` copies it into the digest): a plain value as its string, an object or a list
as its JSON text (`NewObjectValue(`{"foo":"bar"}`)` reads back as `{"foo":"bar"}`, sdk/go/common/resource/
config/value_test.go), a secret as "[secret]". So each document says which trainfleet settings it was
previewed with: the base document the base branch's, the head document the head's. That is what sizes a
fleet (its `nodes`, which a real preview does not show: the group's size is declared with ignore_changes)
and what the expected job cost of each side is worked out from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from infra.config import NAMESPACE, SECTIONS, StackConfig
from infra.errors import TrainfleetError

SECRET = "[secret]"


@dataclass(frozen=True)
class DocumentConfig:
    """A document's trainfleet stack config (None when it carries none, or one that does not validate, with
    why in `note`) and its other config keys (provider settings such as aws:region)."""

    config: StackConfig | None
    other: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _value(raw: Any) -> Any:
    """A config value as the program reads it: JSON text of an object or list parsed, anything else as is."""
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def document_config(doc: dict[str, Any], where: str) -> DocumentConfig:
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    sections: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, raw in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace != NAMESPACE:
            other[key] = raw
        elif name in SECTIONS:
            sections[name] = _value(raw)
    if not sections:
        return DocumentConfig(None, other, f"{where} carries no {NAMESPACE}:* config")
    secret = sorted(f"{NAMESPACE}:{k}" for k, v in sections.items() if v == SECRET)
    if secret:
        return DocumentConfig(None, other, f"{where}: {', '.join(secret)} is a secret in the document")
    try:
        return DocumentConfig(StackConfig.from_sections(sections, check_catalog=False), other)
    except TrainfleetError as exc:
        # a base previewed by an older trainfleet may not validate with this schema: that side goes without
        # the stack's terms (fleet sizes from the document, no expected cost), and says why
        return DocumentConfig(None, other, f"{where}: its {NAMESPACE} config does not validate here ({exc})")
