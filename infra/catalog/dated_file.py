"""The dated JSON files `catalog refresh --cloud CLOUD --capacity` writes: write one atomically, read one back, or
say in one line why not."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from infra.atomic import write_file
from infra.catalog.offer_rules import parse_time
from infra.errors import CatalogError

T = TypeVar("T")
FORMAT_VERSION = 1


def now_text() -> str:
    """The current UTC time as trainfleet's refresh files write it: '2026-11-29T06:00:00Z'."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_dated(path: Path, what: str, source: str, fetched_at: str | None = None, **rows: object) -> str:
    """Write {"format": 1, "fetched_at", "source", **rows} to `path` atomically; the fetched_at written (now, unless
    given)."""
    fetched_at = fetched_at or now_text()
    body = {"format": FORMAT_VERSION, "fetched_at": fetched_at, "source": source, **rows}
    write_file(path, json.dumps(body, indent=1) + "\n", what=what)
    return fetched_at


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
