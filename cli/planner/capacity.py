"""Whether a spot plan's nodes can be had, and what waiting for them costs.

Evidence: AWS spot placement scores (EC2 GetSpotPlacementScores, fetched by `trainfleet catalog refresh --cloud
aws --placement-scores` into infra/catalog/capacity.py's file). AWS: "Each score reflects how likely it is that
each Region or Availability Zone will succeed at fulfilling the specified target capacity at the time of the
Spot placement score request. A score of 10 means that your Spot capacity request is highly likely to succeed"
(API reference, SpotPlacementScore); "scored on a scale from 1 to 10, with 10 indicating that your Spot request
is highly likely to succeed, and 1 indicating that your Spot request is not likely to succeed" (user guide, "How
Spot placement score works"; AWS's Spot workshop: "not likely to succeed at all"). A score is
for one target capacity: a plan of N nodes reads the score measured for N or more (a score for fewer says
nothing about N). A fleet in one zone (a cluster placement group) reads its zone's single-AZ score; a fleet
that may use every zone of its region reads the regional score.

Model (each assumption is printed with the plan that relies on it):
  q    = (score - 1) / 9: the chance one request for the full set of N nodes succeeds, read linearly between
         AWS's two ends: 1, "not likely to succeed at all", as no chance (no plan is built on such a zone or
         region: the plan moves), 10 as certain. AWS publishes no calibration of its scale.
  a request that fails is tried again every RETRY_S, each try succeeding with chance q, independently:
  wait = RETRY_S (1 - q) / q            expected time to hold the full set (geometric number of failed tries)
  P(full set within t) = 1 - (1 - q)^(floor(t / RETRY_S) + 1)   (a try at once, then every RETRY_S)
  The job waits `wait` before it starts, with the nodes it already holds billing (conservatively: all N),
  and after every lost node, because a replacement must come from the same pool that just shrank
  (conservatively: the N-node score again, not the 1-node one). Interruption hazards stay the catalog's.
Where nothing is measured (no score fetched; GCP and Azure publish no equivalent that can be fetched here),
a conservative default per instance size (accelerators per node) and node count stands in and the plan says so:
  DEFAULT_SINGLE_NODE_SCORE[size] - ceil(log2 N), at least 2 (a guess never rules a plan out; a measurement may)
Large accelerator nodes are the scarcest spot capacity, and each doubling of the set asks the same pool for
twice the nodes. On-demand capacity is taken as available (capacity blocks and reservations are not modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog.capacity import PlacementScores

MAX_SCORE = 10
# A request that failed is tried again after the capacity picture can have changed: the 15 min a replacement
# takes to boot and join (reliability.PROVISION_S) is taken as that time, rather than the Auto Scaling group's
# own faster retries, because a drought outlasts a few retries.
RETRY_S = 900.0
# Assumed single-node score by instance size (accelerators per node) where none was measured.
DEFAULT_SINGLE_NODE_SCORE = ((8, 5), (4, 7), (1, 9))  # (at least this many accelerators, score)
DEFAULT_LEAST_SCORE = 2
HOLD_WITHIN_S = 3600.0  # the horizon the plan's "chance of holding N nodes" is quoted for


@dataclass(frozen=True, slots=True)
class Capacity:
    """The obtainable capacity a spot plan relies on: a measured score or an assumed one."""

    score: int  # 1..10
    nodes: int
    where: str  # the zone, or the region for a regional score
    source: str  # what the score is: a measured placement score (with its date) or the assumed default

    measured: bool = False

    @property
    def q(self) -> float:
        return (self.score - 1) / (MAX_SCORE - 1)

    @property
    def obtainable(self) -> bool:
        return self.q > 0

    @property
    def wait_s(self) -> float:
        """Expected seconds until the full set of nodes is held (infinite when it cannot be had)."""
        return RETRY_S * (1 - self.q) / self.q if self.q > 0 else math.inf

    def held_within(self, seconds: float) -> float:
        """Chance the full set is held within `seconds` of asking: tries at 0, RETRY_S, 2 RETRY_S, ..."""
        return 1 - (1 - self.q) ** (math.floor(seconds / RETRY_S + 1e-9) + 1)

    def explain(self) -> str:
        return (
            f"capacity: {self.source}; chance of holding {f'all {self.nodes} nodes' if self.nodes > 1 else 'the node'} "
            f"within {HOLD_WITHIN_S / 3600:.0f} h {self.held_within(HOLD_WITHIN_S):.0%}, expected wait for a full "
            f"set {self.wait_s / 60:.0f} min before the start and after each lost node (q = (score - 1)/9 per try, "
            f"a try every {RETRY_S / 60:.0f} min)"
        )


FULL = Capacity(MAX_SCORE, 1, "", "on-demand: capacity taken as available", measured=False)


def default_score(accelerators_per_node: int, nodes: int) -> int:
    single = next(score for least, score in DEFAULT_SINGLE_NODE_SCORE if accelerators_per_node >= least)
    return max(DEFAULT_LEAST_SCORE, single - math.ceil(math.log2(nodes)))


def spot_capacity(scores: PlacementScores | None, cloud: str, region: str, zones: tuple[str, ...],
                  instance_type: str, accelerators_per_node: int, nodes: int) -> Capacity:  # fmt: skip
    """The capacity a spot fleet of `nodes` in `zones` of `region` can count on: the measured single-AZ score
    of its one zone, or its region's score when it may use several zones; else the assumed default."""
    zone = zones[0] if len(zones) == 1 else ""
    where = zone or region
    found = scores.lookup(cloud, region, zone, instance_type, nodes) if scores is not None else None
    if found is not None:
        scope = f"zone {zone}" if zone else f"region {region}, any zone"
        return Capacity(found.score, nodes, where,
                        f"placement score {found.score}/10 for {found.target_capacity} x {instance_type} in {scope} "
                        f"({found.source}, {found.as_of})", measured=True)  # fmt: skip
    score = default_score(accelerators_per_node, nodes)
    how = ("measure it with `trainfleet catalog refresh --cloud aws --placement-scores`" if cloud == "aws" else
           f"trainfleet fetches no {cloud} capacity score")  # fmt: skip
    return Capacity(score, nodes, where,
                    f"no placement score for {nodes} x {instance_type} in {where}: assumed {score}/10 (default for "
                    f"a {accelerators_per_node}-accelerator size, less one per doubling of the nodes, at least "
                    f"{DEFAULT_LEAST_SCORE}; {how})")  # fmt: skip
