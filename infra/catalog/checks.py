"""`trainfleet catalog check`: the rows a plan should not take at face value, rule by rule.

Each rule names rows that load (offer_rules refuses the impossible ones) but whose figures are doubtful or missing,
and says what trainfleet does with them, so a user sees before they plan which prices and hardware facts are
assumptions. A row stays in the catalog with its flag; a fact corrected from a second source is corrected at build
time (infra/catalog/build.py) and no longer flagged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from infra.catalog.model import Offer
from infra.catalog.neighbours import OUTLIER_RATIO, neighbours_median
from infra.catalog.price_age import PriceAge, oldest, source_date


@dataclass(frozen=True)
class Rule:
    key: str
    means: str  # what the flagged rows have in common
    action: str  # what trainfleet does with them


RULES = (
    Rule("spot-not-below-on-demand", "spot price at or above the same row's on-demand price (the source capped "
         "spot at on-demand, or one of the two is stale)",
         "kept, noted on the row; a spot plan there costs at least the on-demand one and takes at least as long, "
         "so it never ranks above it"),
    Rule("spot-far-below-neighbours", f"spot price under 1/{OUTLIER_RATIO:g} of the median of the same type's "
         "other zones in the region", "plans price the zone at its neighbours' median and say so"),
    Rule("network-unknown", "accelerator row with no inter-node bandwidth in any source trainfleet has",
         "single-node plans are unaffected; multi-node plans assume a slow network and say so"),
    Rule("accelerator-unknown", "the source names no accelerator for this GPU-family row",
         "not planned: no device memory or peak FLOP/s to plan with"),
    Rule("price-missing", "neither an on-demand nor a spot price", "not planned"),
    Rule("price-undated", "the price carries no date (the source has none)",
         "plans, estimates and previews say so beside the figure; `trainfleet catalog refresh` dates it"),
    Rule("price-too-old", "the price was observed longer ago than the limit (--max-price-age)",
         "plans, estimates and previews say so beside the figure; `trainfleet catalog refresh` updates it"),
    Rule("interruption-assumed", "no published interruption rate over time for this row: GCP publishes none (its "
         "preemption history is a share of stopped VMs), Azure's eviction rates are not refreshed",
         "plans assume 10-15%/month and say so, beside GCP's preempted share where `catalog refresh --cloud gcp "
         "--capacity` read it; `catalog refresh --cloud azure --capacity` reads Azure's rates"),
    Rule("interruption-unknown", "no interruption rate for this type and region in any source",
         "plans assume >20%/month and say so"),
    Rule("interruption-too-old", "the interruption rate was published longer ago than the limit "
         "(--max-price-age)", "plans use it; `trainfleet catalog refresh --cloud CLOUD --capacity` updates it"),
)  # fmt: skip
RULE_KEYS = tuple(r.key for r in RULES)


@dataclass(frozen=True)
class Finding:
    rule: str
    offer: Offer
    detail: str

    def to_json(self) -> dict:
        o = self.offer
        return {"rule": self.rule, "cloud": o.cloud, "region": o.region, "zone": o.zone,
                "instance_type": o.instance_type, "source": o.source, "detail": self.detail}  # fmt: skip


def check(offers: Iterable[Offer], sources: Mapping[str, Mapping], max_age_days: float,
          now: datetime | None = None) -> list[Finding]:
    """Every finding of every rule, in RULES' order, then by cloud, region, zone and type."""
    now = now or datetime.now(UTC)
    offers = sorted(offers, key=lambda o: (o.cloud, o.region, o.zone, o.instance_type))
    by_type: dict[tuple[str, str, str], list[Offer]] = defaultdict(list)
    for o in offers:
        by_type[(o.cloud, o.region, o.instance_type)].append(o)
    found: dict[str, list[Finding]] = {key: [] for key in RULE_KEYS}
    for o in offers:
        for rule, detail in _row_findings(o, by_type[(o.cloud, o.region, o.instance_type)], sources, max_age_days,
                                          now):  # fmt: skip
            found[rule].append(Finding(rule, o, detail))
    return [f for key in RULE_KEYS for f in found[key]]


def _row_findings(o: Offer, same_type: list[Offer], sources: Mapping[str, Mapping], max_age_days: float,
                  now: datetime) -> Iterable[tuple[str, str]]:
    spot, on_demand = o.spot_usd_per_hour, o.on_demand_usd_per_hour
    if spot is not None and on_demand is not None and spot >= on_demand:
        yield "spot-not-below-on-demand", f"spot ${spot:,.4f}/h, on-demand ${on_demand:,.4f}/h"
    if spot is not None and (found := neighbours_median(o, same_type)) and found[0] >= OUTLIER_RATIO * spot:
        median, zones = found
        yield "spot-far-below-neighbours", (f"spot ${spot:,.4f}/h, {median / spot:.1f}x under the median "
                                            f"${median:,.4f}/h of {zones} other zone{'s' if zones > 1 else ''}")
    if o.accelerator and o.network_gbps is None:
        yield "network-unknown", f"{o.accelerators_per_node} x {o.accelerator}, no network figure"
    if not o.accelerator:
        yield "accelerator-unknown", "no accelerator name or count in the source"
    yield from _interruption_findings(o, sources, max_age_days, now)
    if spot is None and on_demand is None:
        yield "price-missing", "no price"
        return
    age = oldest([o], sources, now)
    if age.observed is None:
        yield "price-undated", f"source {o.source}"
    elif age.too_old(max_age_days):
        yield "price-too-old", age.label()


def _interruption_findings(o: Offer, sources: Mapping[str, Mapping], max_age_days: float,
                           now: datetime) -> Iterable[tuple[str, str]]:  # fmt: skip
    if o.interruption_assumed:
        yield "interruption-assumed", o.interruption_label + (f"; {o.interruption_evidence}"
                                                              if o.interruption_evidence else "")
    elif o.interruption is None:
        yield "interruption-unknown", "no bucket"
    else:
        published = PriceAge(o.interruption_source, source_date(sources.get(o.interruption_source) or {}), now)
        if published.observed is not None and published.too_old(max_age_days):
            yield "interruption-too-old", f"{o.interruption_label}, {published.label('published')}"


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """Rows per rule, every rule listed (0 where none)."""
    out = dict.fromkeys(RULE_KEYS, 0)
    for f in findings:
        out[f.rule] += 1
    return out
