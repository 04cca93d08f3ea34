"""`trainfleet catalog status`: where every price in use comes from, and how old it is."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from infra.catalog.loader import Catalog
from infra.catalog.offer_rules import parse_time
from infra.catalog.price_age import utc_text
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
