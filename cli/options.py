"""Number options shared by the commands: one place where a float typed on the command line is checked.

Typer (like Python's float()) accepts 'nan', 'inf' and '1e400' (= inf) for a float option. Every float
option in cli/commands/ is declared with `finite_float(...)` as its parser instead, so those are refused
with one line naming the option and the value as typed, before the command runs:

    time_value: Annotated[float, typer.Option(parser=finite_float("--time-value", minimum=0), metavar="USD")]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from infra.errors import TrainfleetError, shown
from infra.units import parse_number


def finite_float(
    option: str, *, minimum: float | None = None, maximum: float | None = None, example: str = "2.5"
) -> Callable[[object], float]:
    """A Typer `parser` for a float option: finite, within [minimum, maximum], else TrainfleetError (exit 2)."""

    def parse(value: object) -> float:
        return parse_number(value, option, minimum=minimum, maximum=maximum, example=example)

    parse.__name__ = "float"  # what Typer shows as the option's type in --help
    return parse


def comma_list(value: str, option: str, example: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']; a value that names nothing (',' or '') is an error, never 'all'."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise TrainfleetError(
            f"{option} {shown(value)} names nothing; give a comma list, e.g. {example}, or leave {option} out for all"
        )
    return list(dict.fromkeys(items))


# How old a price may be before a plan, estimate or preview says so (infra/catalog/price_age.py); a team sets its
# own limit once in the environment. The names are spelled out here: `trainfleet --help` imports no catalog module.
MaxPriceAgeOpt = Annotated[
    float,
    typer.Option(
        "--max-price-age",
        envvar="TRAINFLEET_MAX_PRICE_AGE_DAYS",
        parser=finite_float("--max-price-age", minimum=0, maximum=36_500, example="90"),
        metavar="DAYS",
        help="say so when a price used is older than this many days, or undated (default 90; env "
        "TRAINFLEET_MAX_PRICE_AGE_DAYS)",
    ),
]
