"""How old the prices behind a figure are, and the one line that says when they are too old to bet a budget on.

A price is dated when its row carries `as_of` (`catalog refresh` writes the time it fetched it) or when its source in
sources.json names a date. The embedded snapshot's price sources carry none (skypilot-catalog files hold no date),
so those prices are undated, and an undated price counts as too old: nothing shows it is within the limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from infra.catalog.model import Offer
from infra.catalog.offer_rules import parse_time

DEFAULT_MAX_AGE_DAYS = 90.0
MAX_AGE_ENV = "TRAINFLEET_MAX_PRICE_AGE_DAYS"  # the option's default, where a team sets its own
MAX_AGE_OPTION = "--max-price-age"


@dataclass(frozen=True)
class PriceAge:
    """When the oldest of some prices was observed (None: at least one carries no date), judged at `now`."""

    source: str  # the source key of the oldest (or an undated) price
    observed: datetime | None
    now: datetime

    @property
    def days(self) -> float | None:
        return None if self.observed is None else max(0.0, (self.now - self.observed).total_seconds() / 86_400)

    def too_old(self, max_days: float) -> bool:
        return self.days is None or self.days > max_days

    def label(self, seen: str = "observed") -> str:
        """'observed 2026-11-27, 2 days old' (`seen` names how the date came: observed, published) or 'undated'."""
        if self.observed is None or self.days is None:
            return "undated"
        return f"{seen} {self.observed.date().isoformat()}, {age_text(self.days)} old"

    def to_json(self) -> dict:
        return {
            "as_of": None if self.observed is None else utc_text(self.observed),
            "age_days": None if self.days is None else round(self.days, 1),
            "source": self.source,
        }


def age_text(days: float) -> str:
    """'36 h' under two days, else '120 days': an age as plans, estimates and checks print it."""
    return f"{days * 24:.0f} h" if days < 2 else f"{days:,.0f} days"


def utc_text(when: datetime) -> str:
    """'2026-11-27T12:00:00Z': a UTC time as trainfleet's files and JSON write it."""
    return when.isoformat().replace("+00:00", "Z")


def observed(offer: Offer, sources: Mapping[str, Mapping]) -> datetime | None:
    """When the offer's price was observed: its row's as_of, else a date its source names, else None."""
    if offer.as_of:
        return parse_time(offer.as_of)
    return source_date(sources.get(offer.source) or {})


def source_date(source: Mapping) -> datetime | None:
    text = str(source.get("as_of") or "")
    return parse_time(text) if text[:4].isdigit() else None  # "unknown (...)", "n/a": no date


def oldest(offers: Iterable[Offer], sources: Mapping[str, Mapping], now: datetime | None = None) -> PriceAge:
    """The age of the oldest price among `offers`; an undated one is the oldest of all."""
    now = now or datetime.now(UTC)
    dated: list[tuple[datetime, str]] = []
    for offer in offers:
        when = observed(offer, sources)
        if when is None:
            return PriceAge(offer.source, None, now)
        dated.append((when, offer.source))
    if not dated:
        raise ValueError("oldest() needs at least one offer")
    when, source = min(dated)
    return PriceAge(source, when, now)


def source_label(key: str, sources: Mapping[str, Mapping]) -> str:
    """'skypilot-azure: skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv @ 098741e7': where a price comes
    from, as far as its source says."""
    source = sources.get(key) or {}
    where = " ".join(str(source[k]) for k in ("repository", "path") if source.get(k))
    commit = str(source.get("commit") or "")[:8]
    if commit:
        where += f" @ {commit}"
    return f"{key}: {where}" if where else key


def refresh_command(cloud: str, regions: Iterable[str] = ()) -> str:
    regions = sorted(set(regions))
    return f"trainfleet catalog refresh --cloud {cloud}" + (f" --regions {','.join(regions)}" if regions else "")


def stale_note(age: PriceAge, what: str, cloud: str, regions: Iterable[str], max_days: float,
               sources: Mapping[str, Mapping]) -> str | None:
    """One line when `what`'s price is undated or older than `max_days`, with the command that updates it."""
    if not age.too_old(max_days):
        return None
    if age.observed is None:
        why = f"is undated ({source_label(age.source, sources)}; the source carries no date)"
    else:
        why = f"was {age.label()}, past the {max_days:g}-day limit ({MAX_AGE_OPTION})"
    return f"the price of {what} {why}: update it with `{refresh_command(cloud, regions)}` and run this again"
