"""`trainfleet catalog status`: where every price in use comes from, and how old it is."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from infra.catalog.loader import Catalog
from infra.catalog.offer_rules import parse_time
from infra.catalog.price_age import source_date, utc_text
from infra.catalog.refresh.overlay import REFRESH_SOURCES


@dataclass
class SourceRow:
    cloud: str
    region: str
    source: str
    kind: str  # "snapshot" (embedded) or "refresh" (user overlay)
    offers: int
    as_of: str  # oldest observation in the group (refresh) or the snapshot's own note
    age_hours: float | None  # None: unknown (the snapshot carries no date)

    def to_json(self) -> dict:
        return asdict(self)


def age_label(hours: float | None) -> str:
    if hours is None:
        return "unknown"
    if hours < 1:
        return f"{hours * 60:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.0f} days"


def status_rows(catalog: Catalog, cloud: str | None = None, now: datetime | None = None) -> list[SourceRow]:
    now = now or datetime.now(UTC)
    groups: dict[tuple[str, str, str], list] = {}
    for o in catalog.all_offers:
        if cloud is None or o.cloud == cloud:
            groups.setdefault((o.cloud, o.region, o.source), []).append(o)
    rows = []
    for (c, region, source), offers in sorted(groups.items()):
        refreshed = source in REFRESH_SOURCES
        times = [t for t in (parse_time(o.as_of) for o in offers if o.as_of) if t is not None]
        if times:
            oldest = min(times)
            as_of, age = utc_text(oldest), (now - oldest).total_seconds() / 3600
        else:
            note = str(catalog.sources.get(source, {}).get("as_of", "unknown"))
            as_of, age = note.split(";")[0].strip(), None
        rows.append(
            SourceRow(c, region, source, "refresh" if refreshed else "snapshot", len(offers), as_of, age)
        )
    return rows


def summary(rows: list[SourceRow], overlay: Path) -> dict:
    refreshed = sum(r.offers for r in rows if r.kind == "refresh")
    total = sum(r.offers for r in rows)
    ages = [r.age_hours for r in rows if r.age_hours is not None]
    return {
        "overlay": str(overlay),
        "overlay_exists": overlay.is_file(),
        "offers": total,
        "from_refresh": refreshed,
        "from_snapshot": total - refreshed,
        "oldest_refresh_hours": round(max(ages), 3) if ages else None,
    }


@dataclass
class InterruptionRow:
    """Where one cloud's interruption rates come from: one source, how many offers use it, how old it is."""

    cloud: str
    source: str  # an interruption source key (sources.json or a capacity refresh), "assumed-interruption", or ""
    offers: int
    rate: str  # "published", "assumed" or "unknown"
    as_of: str | None  # when the source published or was fetched; None: no date
    age_hours: float | None
    with_evidence: int  # offers with published evidence beside an assumed rate (GCP's preempted share)

    def to_json(self) -> dict:
        return asdict(self)


def interruption_rows(catalog: Catalog, cloud: str | None = None, now: datetime | None = None) -> list[InterruptionRow]:
    """Per cloud and interruption source: the offers whose spot interruption rate comes from it, and its age."""
    now = now or datetime.now(UTC)
    groups: dict[tuple[str, str], list] = {}
    for o in catalog.all_offers:
        if (cloud is None or o.cloud == cloud) and o.spot_usd_per_hour:
            groups.setdefault((o.cloud, o.interruption_source), []).append(o)
    rows = []
    for (c, source), offers in sorted(groups.items()):
        when = source_date(catalog.sources.get(source) or {}) if source else None
        rate = "unknown" if offers[0].interruption is None else "assumed" if offers[0].interruption_assumed else (
            "published")  # fmt: skip
        rows.append(InterruptionRow(c, source, len(offers), rate, utc_text(when) if when else None,
                                    (now - when).total_seconds() / 3600 if when else None,
                                    sum(bool(o.interruption_evidence) for o in offers)))  # fmt: skip
    return rows
