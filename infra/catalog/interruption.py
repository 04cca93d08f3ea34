"""What a published interruption rate means per node-hour, for every cloud that publishes one.

Each cloud states its rate as a range over its own period:
- AWS Spot Instance Advisor: the share of a type's spot instances interrupted in the trailing month, in five
  ranges (<5%, 5-10%, 10-15%, 15-20%, >20%): a month (730 h) is the period.
- Azure Resource Graph (SpotResources, microsoft.compute/skuspotevictionrate/location): an eviction rate range
  per size and region over the last 28 days, "quoted per hour. For example, an eviction rate of 10% means a VM
  has a 10% chance of being evicted within the next hour" (Microsoft Learn, spot-vms.md; provenance in
  tests/fixtures/azure_eviction/PROVENANCE.md): an hour is the period.

A range is taken at its middle, an open top range ("20+", ">20%") at 1.25 times its floor, and a share p per period
T becomes the constant hazard -ln(1 - p) / T per node-hour (the chance of surviving one period is 1 - p).
GCP publishes no rate over time (its capacityHistory preemption rate is a share of the Spot VMs that stopped:
infra/catalog/gcp_preemption.py), so GCP rows keep trainfleet's labelled assumption.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

HOURS_PER_MONTH = 730.0
OPEN_TOP_FACTOR = 1.25  # ">20%" taken as 25%: the planner's worst AWS bucket since the first planner

# AWS Spot Advisor range index -> (low, high) share per month; high None for the open top range.
AWS_BUCKET_RANGES = {0: (0.0, 0.05), 1: (0.05, 0.10), 2: (0.10, 0.15), 3: (0.15, 0.20), 4: (0.20, None)}
_RANGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*(?:-\s*(\d+(?:\.\d+)?)|(\+))\s*%?\s*$")


@dataclass(frozen=True, slots=True)
class InterruptionRate:
    """A published share of nodes interrupted per `period_hours`, as the range the cloud gives."""

    low: float  # share, 0..1
    high: float | None  # None: an open top range ("20+")
    period_hours: float  # 730 for a month, 1 for an hour

    @property
    def taken(self) -> float:
        """The share the planner uses: the range's middle, or 1.25 x the floor of an open range."""
        return (self.low + self.high) / 2 if self.high is not None else self.low * OPEN_TOP_FACTOR

    @property
    def hazard_per_node_hour(self) -> float:
        return -math.log1p(-min(self.taken, 0.999)) / self.period_hours

    @property
    def label(self) -> str:
        """'5-10%/month', '>20%/month', '0-5%/hour', '20+%/hour'."""
        per = "month" if self.period_hours == HOURS_PER_MONTH else "hour" if self.period_hours == 1 else (
            f"{self.period_hours:g} h")  # fmt: skip
        low = f"{self.low * 100:g}"
        if self.high is None:
            return f">{low}%/{per}"
        return f"<{self.high * 100:g}%/{per}" if self.low == 0 and per == "month" else f"{low}-{self.high * 100:g}%/{per}"


def aws_bucket_rate(bucket: int) -> InterruptionRate:
    """The AWS Spot Advisor range `bucket` (0..4) as a monthly rate (offers share one each: model.AWS_BUCKET_RATES)."""
    low, high = AWS_BUCKET_RANGES[bucket]
    return InterruptionRate(low, high, HOURS_PER_MONTH)


def parse_range(text: str) -> tuple[float, float | None]:
    """'0-5', '5-10%', '20+' -> shares (0.0, 0.05), (0.05, 0.10), (0.20, None); ValueError for anything else."""
    m = _RANGE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a range like '5-10' or '20+'")
    low = float(m.group(1)) / 100
    high = None if m.group(3) else float(m.group(2)) / 100
    if low > 1 or (high is not None and not low < high <= 1):
        raise ValueError(f"{text!r} is not a range of percentages, low below high")
    return low, high


WORST_KNOWN = aws_bucket_rate(4)  # what an unknown rate is taken as: the worst AWS bucket, labelled as such
