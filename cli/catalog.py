"""`trainfleet catalog list|show`: filter the catalog and summarise offers per region."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from infra.catalog import Catalog, Offer
from infra.catalog.price_age import observed, source_label, utc_text
from infra.errors import TrainfleetError, did_you_mean, shown

PURCHASES = ("spot", "on-demand")


@dataclass(frozen=True)
class CatalogFilter:
    cloud: str | None = None
    region: str | None = None
    accelerator: str | None = None
    min_accelerator_memory_gib: float | None = None
    purchase: str | None = None  # keep only offers with a known price for this purchase option


@dataclass
class RegionRow:
    """An instance type in one region: on-demand is per region, spot is the cheapest zone's."""

    cloud: str
    region: str
    instance_type: str
    accelerator: str
    accelerators_per_node: int
    accelerator_memory_gib: float
    vcpus: float
    memory_gib: float
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    cheapest_spot_zone: str
    zones: list[str] = field(default_factory=list)
    interruption: str = "unknown"
    network_gbps: float | None = None
    fabric: str = ""
    source: str = ""
    # when each price was observed (ISO time; None: undated) and where it comes from (repository, path, commit)
    on_demand_as_of: str | None = None
    spot_as_of: str | None = None
    price_source: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def check_filter(catalog: Catalog, f: CatalogFilter) -> None:
    """Reject values no offer could match, with the allowed values, instead of printing an empty table."""
    if f.cloud is not None and f.cloud not in ("aws", "gcp", "azure"):
        raise TrainfleetError(f"--cloud {shown(f.cloud)} is not a cloud; use one of aws, gcp, azure")
    if f.purchase is not None and f.purchase not in PURCHASES:
        raise TrainfleetError(f"--purchase {shown(f.purchase)} is not allowed; use one of {', '.join(PURCHASES)}")
    if f.accelerator is not None:
        known = sorted({o.accelerator for o in catalog.all_offers if o.accelerator})
        if f.accelerator not in known:
            raise TrainfleetError(
                f"--accelerator {shown(f.accelerator)} is unknown{did_you_mean(f.accelerator, known)}; "
                f"known: {', '.join(known)}"
            )
    if f.region is not None:
        regions = sorted({o.region for o in catalog.all_offers if f.cloud is None or o.cloud == f.cloud})
        if f.region not in regions:
            raise TrainfleetError(
                f"--region {shown(f.region)} has no offers{did_you_mean(f.region, regions)}; "
                f"see `trainfleet catalog list --json` for regions"
            )
    gib = f.min_accelerator_memory_gib
    if gib is not None and (not math.isfinite(gib) or gib < 0):  # nan would filter nothing
        raise TrainfleetError(
            f"--min-memory {shown(gib)} must be a finite, non-negative number of GiB per accelerator, e.g. 80"
        )


def region_rows(catalog: Catalog, f: CatalogFilter) -> list[RegionRow]:
    check_filter(catalog, f)
    groups: dict[tuple[str, str, str], list[Offer]] = {}
    for o in catalog.offers(cloud=f.cloud, region=f.region, accelerator=f.accelerator):
        if (
            f.min_accelerator_memory_gib is not None
            and o.accelerator_memory_gib < f.min_accelerator_memory_gib
        ):
            continue
        if f.purchase is not None and o.price(f.purchase) is None:
            continue
        groups.setdefault((o.cloud, o.region, o.instance_type), []).append(o)
    rows = [_summarise(offers, catalog.sources) for offers in groups.values()]
    return sorted(rows, key=lambda r: (r.cloud, r.accelerator, r.instance_type, r.region))


def _summarise(offers: list[Offer], sources: dict) -> RegionRow:
    spot_known = [o for o in offers if o.spot_usd_per_hour is not None]
    cheapest = min(spot_known, key=lambda o: o.spot_usd_per_hour) if spot_known else offers[0]
    on_demand_known = [o for o in offers if o.on_demand_usd_per_hour is not None]
    cheapest_on_demand = min(on_demand_known, key=lambda o: o.on_demand_usd_per_hour) if on_demand_known else None
    first = offers[0]
    return RegionRow(
        cloud=first.cloud,
        region=first.region,
        instance_type=first.instance_type,
        accelerator=first.accelerator,
        accelerators_per_node=first.accelerators_per_node,
        accelerator_memory_gib=first.accelerator_memory_gib,
        vcpus=first.vcpus,
        memory_gib=first.memory_gib,
        on_demand_usd_per_hour=cheapest_on_demand.on_demand_usd_per_hour if cheapest_on_demand else None,
        spot_usd_per_hour=cheapest.spot_usd_per_hour,
        cheapest_spot_zone=cheapest.zone if spot_known else "",
        zones=sorted(o.zone for o in offers if o.zone),
        interruption=cheapest.interruption_label,
        network_gbps=first.network_gbps,
        fabric=first.fabric,
        source=first.source,
        on_demand_as_of=_observed(cheapest_on_demand, sources) if cheapest_on_demand else None,
        spot_as_of=_observed(cheapest, sources) if spot_known else None,
        price_source=source_label(first.source, sources),
    )


def _observed(offer: Offer, sources: dict) -> str | None:
    when = observed(offer, sources)
    return None if when is None else utc_text(when)


def show_instance(catalog: Catalog, instance_type: str, region: str | None = None) -> dict:
    """One instance type across regions and zones, with the provenance of every price."""
    offers = [o for o in catalog.all_offers if o.instance_type == instance_type]
    if not offers:
        known = catalog.instance_types()
        raise TrainfleetError(
            f"instance type {shown(instance_type)} is not in the catalog{did_you_mean(instance_type, known)}; "
            "see `trainfleet catalog list`"
        )
    if region is not None:
        regions = sorted({o.region for o in offers})
        if region not in regions:
            raise TrainfleetError(
                f"{instance_type} is not offered in {shown(region)}; it is in {', '.join(regions)}"
            )
        offers = [o for o in offers if o.region == region]
    first = offers[0]
    accel = catalog.accelerator(first.accelerator)
    sources = {o.source for o in offers} | {o.interruption_source for o in offers if o.interruption_source}
    if any(o.cloud == "gcp" and o.interruption_evidence for o in offers):
        from infra.catalog.gcp_preemption import SOURCE as GCP_HISTORY

        sources.add(GCP_HISTORY)  # the evidence beside GCP's assumed rate
    return {
        "instance_type": instance_type,
        "cloud": first.cloud,
        "accelerator": first.accelerator,
        "accelerators_per_node": first.accelerators_per_node,
        "accelerator_memory_gib": first.accelerator_memory_gib,
        "vcpus": first.vcpus,
        "memory_gib": first.memory_gib,
        "network_gbps": first.network_gbps,
        "fabric": first.fabric,
        "peak_tflops": accel.peak_tflops if accel else {},
        "offers": [
            {
                "region": o.region,
                "zone": o.zone,
                "on_demand_usd_per_hour": o.on_demand_usd_per_hour,
                "spot_usd_per_hour": o.spot_usd_per_hour,
                "interruption": o.interruption_label,
                "interruption_evidence": o.interruption_evidence or None,  # published, but not a rate (GCP)
                "source": o.source,
                "as_of": _observed(o, catalog.sources),  # None: undated
                "note": o.note,
            }
            for o in sorted(offers, key=lambda o: (o.region, o.zone))
        ],
        "sources": {key: catalog.sources.get(key, {"what": key}) for key in sorted(sources)},
    }
