"""Human-friendly quantities: `7B` parameters, `200B` tokens, `72h` deadlines."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from infra.errors import TrainfleetError

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGT]?)\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(m|min|h|d|w)?\s*$", re.IGNORECASE)
_HOURS_PER = {"m": 1 / 60, "min": 1 / 60, "h": 1, "d": 24, "w": 168, None: 1}


def parse_count(value: object, what: str = "value") -> int:
    """'7B' -> 7_000_000_000; '6.7B', '1T', '350M', 7e9 and 7000000000 all work."""
    if isinstance(value, bool):
        raise TrainfleetError(
            f"{what}: {value!r} is not a count; use a number with optional K/M/B/T, e.g. 7B"
        )
    if isinstance(value, int):
        number: Decimal | float = Decimal(value)
    elif isinstance(value, float):
        number = value if not math.isfinite(value) else Decimal(value)
    elif isinstance(value, str) and (m := _COUNT.match(value)):
        number = Decimal(m.group(1)) * _SUFFIX[m.group(2).upper()]  # exact: 6.7B is 6_700_000_000
    else:
        raise TrainfleetError(
            f"{what}: {value!r} is not a count; use a number with optional K/M/B/T, e.g. 7B"
        )
    if not math.isfinite(number) or number <= 0 or number > 10**18:
        raise TrainfleetError(f"{what}: {value!r} must be a positive number up to 1e18, e.g. 7B")
    return int(number.to_integral_value())


def format_count(value: int) -> str:
    """Inverse of parse_count for display and for stack files: 7_000_000_000 -> '7B' (exact only)."""
    for suffix in ("T", "B", "M", "K"):
        scale = _SUFFIX[suffix]
        if value >= scale and value % (scale // 1000 if scale >= 1000 else 1) == 0:
            text = f"{value / scale:.3f}".rstrip("0").rstrip(".")
            if parse_count(text + suffix) == value:
                return text + suffix
    return str(value)


def parse_hours(value: object, what: str = "duration") -> float:
    """'72h' -> 72.0, '3d' -> 72.0, '90min' -> 1.5, a bare number is hours."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        hours = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        unit = m.group(2).lower() if m.group(2) else None
        hours = float(m.group(1)) * _HOURS_PER[unit]
    else:
        raise TrainfleetError(f"{what}: {value!r} is not a duration; use e.g. 72h, 3d or 90min")
    if not math.isfinite(hours) or hours <= 0:
        raise TrainfleetError(f"{what}: {value!r} must be a positive duration, e.g. 72h")
    return hours
