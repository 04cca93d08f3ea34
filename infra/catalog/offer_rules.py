"""What a catalog row may hold, field by field: one set of rules for the embedded snapshot, a user's refreshed
overlay as it is read, and the rows a refresh is about to write.

The bounds are far outside real hardware and prices but finite and positive, so a corrupt, hand-edited or
mis-answered row (nan, inf, 1e400, a price of 0, a node with 0 GPUs) is refused with one line naming the field
instead of turning into NaN, Infinity or a division by zero in plans and JSON output.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from infra.catalog.model import Offer


@dataclass(frozen=True)
class Bound:
    """low..high; `above`: low itself is refused too (no offer has 0 vCPUs or costs $0/h); `whole`: integers."""

    low: float
    high: float
    whole: bool = False
    above: bool = False

    def problem(self, value: float) -> str | None:
        if not math.isfinite(value):
            return "is not a finite number"
        if self.above and (value <= self.low or value > self.high):
            return f"must be more than {self.low:g} and at most {self.high:g}"
        if value < self.low or value > self.high:
            return f"is outside {self.low:g}..{self.high:g}"
        if self.whole and value != int(value):
            return "is not a whole number"
        return None


# Numeric columns; '' (None) is "unknown" for each, never 0.
NUMBERS: dict[str, Bound] = {
    "accelerators_per_node": Bound(1, 1024, whole=True),
    "accelerator_memory_gib": Bound(0, 10_000, above=True),
    "vcpus": Bound(0, 100_000, above=True),
    "memory_gib": Bound(0, 1_000_000, above=True),
    "on_demand_usd_per_hour": Bound(0, 100_000, above=True),
    "spot_usd_per_hour": Bound(0, 100_000, above=True),
    "interruption_bucket": Bound(0, 4, whole=True),
    "network_gbps": Bound(0, 1_000_000, above=True),
}

CLOUDS = ("aws", "gcp", "azure")
INTERRUPTION_SOURCES = ("aws-spot-advisor", "aws-spot-advisor-refresh", "assumed-interruption", "")
NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}"
# Text columns: the form each must have ('' allowed where the pattern allows it). Names reach stack files, shell
# and tables; notes only tables (no control characters, so no terminal escapes).
TEXTS: dict[str, tuple[re.Pattern[str], str]] = {
    "region": (re.compile(r"[a-z0-9][a-z0-9-]{0,49}"), "a region name such as us-east-1"),
    "zone": (re.compile(r"(?:[a-z0-9][a-z0-9-]{0,49})?"), "a zone name or id such as use1-az4, or empty"),
    "instance_type": (re.compile(NAME), "an instance type such as p4d.24xlarge"),
    "accelerator": (re.compile(f"(?:{NAME})?"), "an accelerator name such as A100-80GB, or empty"),
    "fabric": (re.compile(r"(?:[a-z0-9][a-z0-9-]{0,49})?"), "a fabric name such as efa, or empty"),
    "source": (re.compile(f"(?:{NAME})?"), "a source key such as skypilot-aws, or empty"),
    "note": (re.compile(r"[^\x00-\x1f\x7f]{0,500}"), "one line of at most 500 printable characters"),
}
ACCELERATOR_FIELDS = ("accelerator", "accelerators_per_node", "accelerator_memory_gib")
MAX_FUTURE = timedelta(days=1)  # clocks disagree a little; an observation from next week is corrupt


def row_problem(row: dict[str, object], now: datetime | None = None) -> tuple[str, str] | None:
    """The first (column, what is wrong) of a row (column -> value; None where the cell is empty), or None when
    every field is as the catalog allows."""
    row = _unknown_accelerator_as_empty(row)
    if row["cloud"] not in CLOUDS:
        return "cloud", f"is not one of {', '.join(CLOUDS)}"
    for column in TEXTS:
        if not _text_holds(column, str(row[column] or "")):
            return column, f"is not {TEXTS[column][1]}"
    for column, bound in NUMBERS.items():
        value = row[column]
        if value is None:
            continue
        problem = bound.problem(float(value))  # type: ignore[arg-type]
        if problem:
            return column, problem
    if row["interruption_source"] not in INTERRUPTION_SOURCES:
        return "interruption_source", f"is not one of {', '.join(repr(s) for s in INTERRUPTION_SOURCES)}"
    given = [row[c] not in (None, "") for c in ACCELERATOR_FIELDS]
    if any(given) and not all(given):
        missing = next(c for c, g in zip(ACCELERATOR_FIELDS, given, strict=True) if not g)
        return missing, "is missing: accelerator, accelerators_per_node and accelerator_memory_gib go together"
    as_of = str(row.get("as_of") or "")
    if as_of:
        when = parse_time(as_of)
        if when is None:
            return "as_of", "is not a UTC time such as 2026-11-27T12:00:00Z"
        if when > (now or datetime.now(UTC)) + MAX_FUTURE:
            return "as_of", "is in the future"
    return None


@lru_cache(maxsize=8192)  # a catalog repeats its regions, types and notes thousands of times
def _text_holds(column: str, text: str) -> bool:
    return TEXTS[column][0].fullmatch(text) is not None


def offer_row(offer: Offer) -> dict[str, object]:
    """An offer as the row it is written as: None where the cell is empty."""
    return _unknown_accelerator_as_empty({f.name: getattr(offer, f.name) for f in fields(offer)})


def _unknown_accelerator_as_empty(row: dict[str, object]) -> dict[str, object]:
    """An Offer keeps 0 accelerators of 0 GiB when its accelerator is unknown, and overlays written before these
    rules hold those zeros: both mean empty cells."""
    if row["accelerator"]:
        return row
    return {**row, **{c: row[c] or None for c in ACCELERATOR_FIELDS[1:]}}


def parse_time(text: str) -> datetime | None:
    """An ISO-8601 time (a trailing Z allowed), taken as UTC when it names no zone; None if it is not one."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
