"""Spot rows priced far below their neighbours are priced at the neighbours' price, not bet on.

A spot price under 1/OUTLIER_RATIO of the median of the same instance type's other zones in its region is one
catalog row that far below its neighbours: more often stale, or a pool too small for a fleet, than a bargain.
The planner prices such a zone at that median (the evidence for its own price is one row the rest of the region
contradicts) and says so with the plan; `trainfleet catalog refresh` replaces the row with today's price.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from infra.catalog import Offer
from infra.catalog.neighbours import OUTLIER_RATIO, neighbours_median

OUTLIER_NOTE = "spot priced at its neighbours' median"


def conservative_spot(offers: Iterable[Offer]) -> list[Offer]:
    """The offers, each spot outlier repriced at its neighbours' median (its note says so)."""
    offers = list(offers)
    by_type: dict[tuple, list[Offer]] = defaultdict(list)
    for o in offers:
        if o.spot_usd_per_hour:
            by_type[(o.cloud, o.region, o.instance_type)].append(o)
    out = []
    for o in offers:
        found = neighbours_median(o, by_type[(o.cloud, o.region, o.instance_type)]) if o.spot_usd_per_hour else None
        if found and found[0] >= OUTLIER_RATIO * o.spot_usd_per_hour:
            o = replace(o, spot_usd_per_hour=found[0], note=f"{OUTLIER_NOTE} (its own row: ${o.spot_usd_per_hour}/h)")
        out.append(o)
    return out
