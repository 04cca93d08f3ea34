"""The dated JSON files `catalog refresh --cloud CLOUD --capacity` writes: read one, or say in one line why not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from infra.catalog.offer_rules import parse_time
from infra.errors import CatalogError

T = TypeVar("T")
FORMAT_VERSION = 1


def read_dated(path: Path, what: str, cloud: str, parse: Callable[[dict], T]) -> T | None:
    """parse(the file's JSON object), None when there is no file; a CatalogError naming the file and the command
    that rewrites it when the file is not format 1 with a fetched_at time, or `parse` finds a bad row."""
    if not path.is_file():
        return None
    fix = f"re-run `trainfleet catalog refresh --cloud {cloud} --capacity` to rewrite it, or delete {path}"
    try:
        body = json.loads(path.read_text())
        if body.get("format") != FORMAT_VERSION or parse_time(str(body["fetched_at"])) is None:
            raise ValueError("unknown format or fetched_at")
        return parse(body)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CatalogError(f"{what} {path} is corrupt ({exc}); {fix}") from None
