"""Human-friendly quantities: `7B` parameters, `200B` tokens, `72h` deadlines."""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException

from infra.errors import TrainfleetError, shown

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"  # signed: "-5" is refused as negative
_COUNT = re.compile(rf"^\s*{_NUMBER}\s*([KMBGT]?)\s*$", re.IGNORECASE)
_MONEY = re.compile(rf"^\s*\$?\s*{_NUMBER}\s*([KMBGT]?)\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+)\s*(m|min|h|d|w)?\s*$", re.IGNORECASE)
_HOURS_PER = {"m": 1 / 60, "min": 1 / 60, "h": 1, "d": 24, "w": 168, None: 1}

# Upper bounds for anything a user types or a file holds: far above any real job, far below where
# arithmetic on them overflows to infinity (and `Infinity` would reach JSON output).
MAX_COUNT = 10**18
MAX_HOURS = 87_600.0  # ten years
MAX_USD = 1e12


def _decimal(text: str, scale: int) -> Decimal | None:
    """Exact value of a matched number times its suffix; None if it is out of Decimal's range."""
    try:
        number = Decimal(text)
        if number.adjusted() > 40:  # far beyond every bound here; skip arithmetic on huge exponents
            return Decimal(10**41).copy_sign(number)
        return number * scale
    except DecimalException:
        return None


def parse_count(value: object, what: str = "value") -> int:
    """'7B' -> 7_000_000_000; '6.7B', '1T', '350M', 7e9 and 7000000000 all work.

    A count is a whole number from 1 to 1e18: '0.4' and '2.5' are refused (never rounded to 0 or 2)."""
    number: Decimal | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        number = Decimal(value) if math.isfinite(value) else Decimal("NaN")
    elif isinstance(value, str) and (m := _COUNT.match(value)):
        number = _decimal(m.group(1), _SUFFIX[m.group(2).upper()])  # exact: 6.7B is 6_700_000_000
    if number is None:
        raise TrainfleetError(
            f"{what}: {shown(value)} is not a count; use a whole number with optional K/M/B/T, e.g. 7B"
        )
    if not number.is_finite():
        raise TrainfleetError(f"{what}: {shown(value)} is not a finite number; use a count such as 7B")
    if number <= 0 or number > MAX_COUNT:
        raise TrainfleetError(f"{what}: {shown(value)} must be a positive number up to 1e18, e.g. 7B")
    if number < 1:
        raise TrainfleetError(f"{what}: {shown(value)} is less than 1; a count is at least 1, e.g. 7B")
    if number != number.to_integral_value():
        raise TrainfleetError(
            f"{what}: {shown(value)} is not a whole number; a count is whole, e.g. {int(number)} or 7B"
        )
    return int(number)


def parse_money(value: object, what: str = "amount") -> float:
    """'40000', '$40,000', '40K' and 4e4 -> 40000.0 USD: finite, positive, at most 1e12."""
    number: Decimal | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = Decimal(value) if math.isfinite(value) else Decimal("NaN")
    elif isinstance(value, str) and (m := _MONEY.match(value.replace(",", ""))):
        number = _decimal(m.group(1), _SUFFIX[m.group(2).upper()])
    if number is None:
        raise TrainfleetError(f"{what}: {shown(value)} is not an amount of USD; use e.g. 40000, $40,000 or 40K")
    if not number.is_finite():
        raise TrainfleetError(f"{what}: {shown(value)} is not a finite number; use an amount of USD such as 40K")
    if number < Decimal("0.01") or number > Decimal(MAX_USD):
        raise TrainfleetError(f"{what}: {shown(value)} must be from $0.01 to $1e12, e.g. 40K")
    return float(number)


def parse_number(
    value: object,
    what: str = "value",
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    example: str = "2.5",
) -> float:
    """A finite float from a CLI option or a file, within [minimum, maximum]; 'nan', 'inf' and '1e400' are refused."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and re.fullmatch(rf"\s*{_NUMBER}\s*", value):
        number = float(value)
    if number is None or not math.isfinite(number):
        raise TrainfleetError(f"{what}: {shown(value)} is not a finite number; use e.g. {example}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        if minimum is not None and maximum is not None:
            allowed = f"from {_plain(minimum)} to {_plain(maximum)}"
        elif minimum is not None:
            allowed = f"of at least {_plain(minimum)}"
        else:
            assert maximum is not None
            allowed = f"of at most {_plain(maximum)}"
        raise TrainfleetError(f"{what}: {shown(value)} is out of range; use a number {allowed}, e.g. {example}")
    return number


def format_count(value: int) -> str:
    """Inverse of parse_count for display and for stack files: 7_000_000_000 -> '7B' (exact only)."""
    for suffix in ("T", "B", "M", "K"):
        scale = _SUFFIX[suffix]
        if value >= scale and value % (scale // 1000 if scale >= 1000 else 1) == 0:
            text = f"{value / scale:.3f}".rstrip("0").rstrip(".")
            if parse_count(text + suffix) == value:
                return text + suffix
    return str(value)


def _plain(x: float) -> str:
    """1000000.0 -> '1,000,000', 0.5 -> '0.5': bounds as people write them."""
    return f"{x:,.0f}" if x == int(x) and abs(x) < 1e15 else f"{x:g}"


def parse_hours(value: object, what: str = "duration") -> float:
    """'72h' -> 72.0, '3d' -> 72.0, '90min' -> 1.5, a bare number is hours; at most ten years."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        hours = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        unit = m.group(2).lower() if m.group(2) else None
        hours = float(m.group(1)) * _HOURS_PER[unit]
    else:
        raise TrainfleetError(f"{what}: {shown(value)} is not a duration; use e.g. 72h, 3d or 90min")
    if not math.isfinite(hours) or hours <= 0 or hours > MAX_HOURS:
        raise TrainfleetError(
            f"{what}: {shown(value)} must be a positive duration up to 10 years (87600 h), e.g. 72h"
        )
    return hours
