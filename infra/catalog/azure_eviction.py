"""Refreshed Azure spot eviction rates, as the catalog reads them: the file, its date, and the offers it updates.
`catalog refresh --cloud azure --capacity` writes it (infra/catalog/refresh/azure_eviction.py has the query).

$TRAINFLEET_HOME/azure-eviction-rates.json: {"format": 1, "fetched_at", "source", "rates": [[region, size, low,
high], ...]}, low and high shares per hour (high null for an open range such as "20+"). Resource Graph gives each
size's eviction rate in a region over the trailing 28 days, quoted per hour (infra/catalog/interruption.py), so
every offer of that size and region takes it in place of the snapshot's labelled 10-15%/month assumption.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from infra.catalog.dated_file import read_dated
from infra.catalog.interruption import InterruptionRate
from infra.catalog.model import Offer

EVICTION_NAME = "azure-eviction-rates.json"
SOURCE = "azure-eviction-rate-refresh"
WINDOW = "28 trailing days"  # spot-vms.md: "eviction rates for the last 28 trailing days" (Resource Graph)


@dataclass(frozen=True)
class EvictionRefresh:
    fetched_at: str  # UTC ISO time
    source: str  # the endpoint queried
    rates: dict[tuple[str, str], InterruptionRate]  # (region, size) -> rate per hour

    def source_entry(self) -> dict:
        """This refresh as a sources.json entry: what `catalog show` prints beside a rate."""
        return {
            "what": "Azure spot eviction rate per size and region, a range quoted per hour over the "
            f"{WINDOW} (Resource Graph SpotResources, microsoft.compute/skuspotevictionrate/location)",
            "origin": f"trainfleet catalog refresh --cloud azure --capacity, from {self.source}",
            "as_of": self.fetched_at,
        }


def eviction_path() -> Path:
    from infra.catalog.refresh.overlay import trainfleet_home

    return trainfleet_home() / EVICTION_NAME


def _share(value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value <= 1) or math.isnan(value):
        raise ValueError(f"{value!r} is not a share between 0 and 1")
    return float(value)


def read_refresh(path: Path) -> EvictionRefresh | None:
    """The refresh in `path`, None when there is none; one line naming the file and the fix when it is corrupt."""

    def parse(body: dict) -> EvictionRefresh:
        rates = {}
        for region, size, low, high in body["rates"]:
            low, high = _share(low), None if high is None else _share(high)
            if not isinstance(region, str) or not isinstance(size, str) or (high is not None and high <= low):
                raise ValueError(f"bad row {[region, size, low, high]}")
            rates[(region, size)] = InterruptionRate(low, high, 1.0)
        return EvictionRefresh(str(body["fetched_at"]), str(body["source"]), rates)

    return read_dated(path, "azure eviction rates", "azure", parse)


def apply_refreshed(offers: Iterable[Offer], refresh: EvictionRefresh) -> list[Offer]:
    """Azure offers with the refreshed rate of their (region, size) where Resource Graph has one; the rest unchanged."""
    evidence = f"Resource Graph, {WINDOW} to {refresh.fetched_at[:10]}"
    out = []
    for o in offers:
        rate = refresh.rates.get((o.region, o.instance_type)) if o.cloud == "azure" else None
        out.append(o if rate is None else replace(o, interruption_rate=rate, interruption_source=SOURCE,
                                                  interruption_evidence=evidence))  # fmt: skip
    return out
