"""Refreshed AWS Spot Instance Advisor buckets, as the catalog reads them: the file, its date, and the offers it
updates. `catalog refresh --cloud aws --capacity` writes it (infra/catalog/refresh/advisor.py has the feed).

$TRAINFLEET_HOME/spot-advisor.json: {"format": 1, "fetched_at", "source", "buckets": [[region, type, r], ...]},
r the feed's range index 0..4 (share of a type's spot instances interrupted in the trailing month). The catalog
applies it over the snapshot's 2025-06-28 buckets; its fetched_at is the buckets' date.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from infra.catalog.dated_file import read_dated
from infra.catalog.model import INTERRUPTION_BUCKETS, Offer

ADVISOR_NAME = "spot-advisor.json"
SOURCE = "aws-spot-advisor-refresh"


@dataclass(frozen=True)
class AdvisorRefresh:
    fetched_at: str  # UTC ISO time
    source: str  # the URL read
    buckets: dict[tuple[str, str], int]  # (region, instance type) -> 0..4

    def source_entry(self) -> dict:
        """This refresh as a sources.json entry: what `catalog show` prints beside a bucket."""
        return {
            "what": "AWS Spot Instance Advisor interruption buckets (share of spot instances interrupted in the "
            "trailing month: <5%, 5-10%, 10-15%, 15-20%, >20%), Linux",
            "origin": f"trainfleet catalog refresh --cloud aws --capacity, from {self.source}",
            "as_of": self.fetched_at,
        }


def advisor_path() -> Path:
    from infra.catalog.refresh.overlay import trainfleet_home

    return trainfleet_home() / ADVISOR_NAME


def read_refresh(path: Path) -> AdvisorRefresh | None:
    """The refresh in `path`, None when there is none; one line naming the file and the fix when it is corrupt."""

    def parse(body: dict) -> AdvisorRefresh:
        buckets = {}
        for region, itype, bucket in body["buckets"]:
            if bucket not in INTERRUPTION_BUCKETS or not isinstance(region, str) or not isinstance(itype, str):
                raise ValueError(f"bad row {[region, itype, bucket]}")
            buckets[(region, itype)] = bucket
        return AdvisorRefresh(str(body["fetched_at"]), str(body["source"]), buckets)

    return read_dated(path, "spot advisor refresh", "aws", parse)


def apply_refreshed(offers: Iterable[Offer], refresh: AdvisorRefresh) -> list[Offer]:
    """AWS offers with the refreshed bucket of their (region, type) where the feed has one; the rest unchanged."""
    out = []
    for o in offers:
        bucket = refresh.buckets.get((o.region, o.instance_type)) if o.cloud == "aws" else None
        out.append(
            o if bucket is None else replace(o, interruption_bucket=bucket, interruption_source=SOURCE)
        )
    return out
