"""Refreshed GCP Spot preemption history, as the catalog reads it: evidence shown beside the assumed rate.

`catalog refresh --cloud gcp --capacity` writes $TRAINFLEET_HOME/gcp-preemption-history.json (infra/catalog/refresh/
gcp_preemption.py has the API): {"format": 1, "fetched_at", "source", "project", "records": [[zone, machine type,
start, end, preemption rate], ...]}. Compute's advice.capacityHistory defines the preemption rate of an interval as
"(total preempted Spots) / (total Spots that stopped running)": the share of the Spot VMs that stopped which were
preempted rather than stopped by their owner. It says how Spot VMs ended, not how often: with no count of VMs or
of their hours it is no rate per node-hour, so the planner keeps its labelled 10-15%/month assumption for GCP and
prints this share beside it, where a user can weigh it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from infra.catalog.dated_file import read_dated
from infra.catalog.model import Offer
from infra.catalog.offer_rules import parse_time

HISTORY_NAME = "gcp-preemption-history.json"
SOURCE = "gcp-capacity-history-refresh"


@dataclass(frozen=True)
class PreemptionSummary:
    records: int
    mean_share: float  # the intervals' preemption rates, averaged with equal weight (the API gives no counts)
    start: str
    end: str

    def text(self) -> str:
        return (f"GCP capacity history: {self.mean_share:.0%} of the Spot VMs that stopped were preempted (mean of "
                f"{self.records} intervals, {self.start[:10]} to {self.end[:10]}), a share of stops, not a rate")  # fmt: skip


@dataclass(frozen=True)
class PreemptionRefresh:
    fetched_at: str
    source: str
    project: str
    records: dict[tuple[str, str], list[tuple[str, str, float]]]  # (zone, type) -> [(start, end, rate)]

    def summary(self, zone: str, machine_type: str) -> PreemptionSummary | None:
        rows = self.records.get((zone, machine_type))
        if not rows:
            return None
        return PreemptionSummary(len(rows), sum(r for _, _, r in rows) / len(rows), min(s for s, _, _ in rows),
                                 max(e for _, e, _ in rows))  # fmt: skip

    def source_entry(self) -> dict:
        return {
            "what": "GCP Spot preemption history per machine type and zone (Compute advice.capacityHistory): per "
            "interval, preempted Spot VMs / Spot VMs that stopped; evidence shown beside the assumed rate",
            "origin": f"trainfleet catalog refresh --cloud gcp --capacity, project {self.project}, from {self.source}",
            "as_of": self.fetched_at,
        }


def history_path() -> Path:
    from infra.catalog.refresh.overlay import trainfleet_home

    return trainfleet_home() / HISTORY_NAME


def read_refresh(path: Path) -> PreemptionRefresh | None:
    """The refresh in `path`, None when there is none; one line naming the file and the fix when it is corrupt."""

    def parse(body: dict) -> PreemptionRefresh:
        records: dict[tuple[str, str], list[tuple[str, str, float]]] = defaultdict(list)
        for zone, machine_type, start, end, rate in body["records"]:
            if (isinstance(rate, bool) or not isinstance(rate, int | float) or math.isnan(rate)
                    or not 0 <= rate <= 1 or parse_time(str(start)) is None or parse_time(str(end)) is None):  # fmt: skip
                raise ValueError(f"bad record {[zone, machine_type, start, end, rate]}")
            records[(str(zone), str(machine_type))].append((str(start), str(end), float(rate)))
        return PreemptionRefresh(str(body["fetched_at"]), str(body["source"]), str(body.get("project", "")),
                                 dict(records))  # fmt: skip

    return read_dated(path, "gcp preemption history", "gcp", parse)


def apply_refreshed(offers: Iterable[Offer], refresh: PreemptionRefresh) -> list[Offer]:
    """GCP offers with their zone's preemption share as evidence; their rate stays the labelled assumption."""
    out = []
    for o in offers:
        found = refresh.summary(o.zone, o.instance_type) if o.cloud == "gcp" else None
        out.append(o if found is None else replace(o, interruption_evidence=found.text()))
    return out
