"""Build refreshed offer rows: hardware facts from the catalog, prices from a cloud's API."""

from __future__ import annotations

from dataclasses import replace

from infra.catalog.model import Offer


def refreshed_row(
    existing: Offer | None,
    template: Offer,
    region: str,
    zone: str,
    on_demand: float | None,
    spot: float | None,
    note: str = "",
) -> Offer:
    """A refreshed row: hardware from the catalog, prices from the API; a price the API lacked keeps the
    existing row's value and says so in the note. Interruption buckets are per region: a type new to
    the region gets none (unknown) rather than another region's."""
    notes = [note] if note else []
    if on_demand is None and existing is not None and existing.on_demand_usd_per_hour is not None:
        on_demand, notes = existing.on_demand_usd_per_hour, [*notes, f"on-demand from {existing.source}"]
    if spot is None and existing is not None and existing.spot_usd_per_hour is not None:
        spot, notes = existing.spot_usd_per_hour, [*notes, f"spot from {existing.source}"]
    base = existing or template
    same_region = base.region == region or base.interruption_assumed  # GCP/Azure: one assumption
    return replace(
        base,
        region=region,
        zone=zone,
        on_demand_usd_per_hour=on_demand,
        spot_usd_per_hour=spot,
        interruption_bucket=base.interruption_bucket if same_region else None,
        interruption_source=base.interruption_source if same_region else "",
        note="; ".join(notes),
    )
