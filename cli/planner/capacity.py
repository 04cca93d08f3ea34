"""Whether a spot plan's nodes can be had, and what waiting for them costs.

Evidence: AWS spot placement scores (EC2 GetSpotPlacementScores, fetched by `trainfleet catalog refresh --cloud
aws --placement-scores` into infra/catalog/capacity.py's file), and Azure's Spot Placement Score levels read on
AWS's scale where the two use the same words (`--cloud azure --placement-scores`; capacity.AZURE_LEVEL_SCORE). AWS: "Each score reflects how likely it is that
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
  The job waits `wait` before it starts (billing the nodes it holds meanwhile: all N with a measured score,
  TRACE_HELD_SHARE of them with the traces' wait below), and after every lost event, because a replacement must come from the same pool that just shrank
  (conservatively: the N-node score again, not the 1-node one), with the survivors billing. Interruption
  hazards per node stay the catalog's.
Where nothing is measured (no score fetched; GCP publishes no equivalent, Azure Medium has no number: infra/catalog/capacity.py),
published traces stand in and the plan says so (cli/planner/capacity_traces.py; SkyPilot's spot-traces, the data of
"Can't Be Late", NSDI '24: AWS V100 and K80 spot, 2022-2023, up to 16 nodes):
  wait(N) = TRACE_SINGLE_NODE_WAIT_S x N^TRACE_NODES_EXPONENT
  TRACE_SINGLE_NODE_WAIT_S: the mean wait from a random moment until one node is held, over the 17 single-node
  availability traces (1- and 8-GPU sizes alike: on average they waited as long, 205 and 201 min);
  TRACE_NODES_EXPONENT: how the zones' mean wait grows from 1 to 16 nodes in the 16-node availability traces.
  Held out of both fits, the 4-node preemption traces: their mean wait for 4 nodes is 1.27x their wait for one,
  the exponent says 1.30x; their level (486 min for 4) is 1.8x the formula's (266 min), the spread between zones
  and months the traces show (a single node: 9 min to 23 h).
  The traces' waits are not geometric: they held one node at once 60% of the time and within an hour 72% (16 nodes:
  44% and 59%), a few droughts of many hours making up the mean. So the first try succeeds with the traces' chance
  of holding them at once, q0(N) = TRACE_AT_ONCE x N^-TRACE_AT_ONCE_EXPONENT (the held-out 4-node traces: 0.915 of
  their one-node chance, the exponent says 0.934), and each later try with q1 = RETRY_S (1 - q0) / wait(N), which
  keeps the mean: one node within an hour 64% (the traces 72%; matching only the mean said 30%).
While a job waits for its start, the traces held TRACE_HELD_SHARE of the nodes asked for (16-node traces; the
held-out 4-node traces held 8.3%): that share bills, not all N. Past 16 nodes the exponent is extrapolated.
Nodes are lost together: an interruption event of the 4-node preemption traces took 1.28-1.94 of the 4 nodes a
zone was running (the least is taken: more nodes per event would mean fewer restarts than the evidence shows), as
over 92% of 2,635 co-interruptions in one instance type and zone came within 3 minutes of each other (Kim et al.,
"Spot-and-Scoot: Peeking Into Spot Instance Availability", arXiv 2604.16457, 2026). `nodes_lost_per_event`.
On-demand capacity is taken as available (capacity blocks and reservations are not modelled).
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
# From the vendored spot traces (tests/fixtures/skypilot_spot_traces; tests/test_capacity_traces.py recomputes each):
TRACE_SINGLE_NODE_WAIT_S = 12_280.0  # mean wait for one node over the 17 single-node availability traces (205 min)
TRACE_NODES_EXPONENT = 0.188  # ln(mean wait for 16 / for 1) / ln 16 over the three 16-node availability traces
TRACE_HELD_SHARE = 0.079  # share of the nodes asked for that were held while waiting (16-node traces, mean)
TRACE_NODES_LOST_AT_4 = 1.28  # nodes one interruption event took from 4 running (least of the three zones)
TRACE_MOST_NODES = 16  # the largest count any trace asked for
TRACE_AT_ONCE = 0.597  # share of moments one node was there at once (single-node availability traces, mean)
TRACE_AT_ONCE_EXPONENT = 0.049  # ln(at once for 1 / for 16) / ln 16 over the 16-node availability traces
HOLD_WITHIN_S = 3600.0  # the horizon the plan's "chance of holding N nodes" is quoted for


@dataclass(frozen=True, slots=True)
class Capacity:
    """The obtainable capacity a spot plan relies on: a measured score or an assumed one."""

    score: int | None  # 1..10 measured; None: no score, the traces' wait stands in
    nodes: int
    where: str  # the zone, or the region for a regional score
    source: str  # what the score is: a measured placement score (with its date) or the assumed default

    measured: bool = False
    assumed_wait_s: float = 0.0  # without a score: the traces' expected wait for this many nodes
    first_try: float | None = None  # without a score: the traces' chance the first try holds them; else q

    @property
    def q(self) -> float:
        """The chance each try succeeds (without a score: each try after the first)."""
        if self.score is None:
            return try_odds(self.assumed_wait_s, self.first_try)[1]
        return (self.score - 1) / (MAX_SCORE - 1)

    @property
    def q_first(self) -> float:
        return self.q if self.first_try is None else self.first_try

    @property
    def key(self) -> tuple:
        """What prices the same: one score, or one assumed wait."""
        return (self.score, self.assumed_wait_s)

    @property
    def held_share(self) -> float:
        """Share of the nodes held, and billing, while waiting for the full set before the start."""
        return 1.0 if self.score is not None else TRACE_HELD_SHARE

    def label(self) -> str:
        return f"{self.score}/10" if self.score is not None else f"assumed wait {self.wait_s / 3600:.1f} h"

    @property
    def obtainable(self) -> bool:
        return self.q > 0

    @property
    def wait_s(self) -> float:
        """Expected seconds until the full set of nodes is held (infinite when it cannot be had)."""
        return RETRY_S * (1 - self.q_first) / self.q if self.q > 0 else math.inf

    def held_within(self, seconds: float) -> float:
        """Chance the full set is held within `seconds` of asking: tries at 0, RETRY_S, 2 RETRY_S, ..."""
        return 1 - (1 - self.q_first) * (1 - self.q) ** math.floor(seconds / RETRY_S + 1e-9)

    def explain(self) -> str:
        return (
            f"capacity: {self.source}; chance of holding {f'all {self.nodes} nodes' if self.nodes > 1 else 'the node'} "
            f"within {HOLD_WITHIN_S / 3600:.0f} h {self.held_within(HOLD_WITHIN_S):.0%}, expected wait for a full "
            f"set {self.wait_s / 60:.0f} min before the start and after each lost node ("
            + ("q = (score - 1)/9 per try" if self.score is not None else
               f"the first try {self.q_first:.0%}, as often as the traces had them at once, each later one "
               f"{self.q:.1%}, for the traces' mean wait")
            + f", a try every {RETRY_S / 60:.0f} min)"
            + (f"; while waiting to start, {self.held_share:.0%} of the nodes are held and bill, as in the traces"
               if self.held_share < 1 else "")
        )


FULL = Capacity(MAX_SCORE, 1, "", "on-demand: capacity taken as available", measured=False)


def try_odds(wait_s: float, first_try: float | None = None) -> tuple[float, float]:
    """(q0, q1): the chance the first try for the nodes succeeds and each later one, for an expected wait
    RETRY_S (1 - q0) / q1. Without `first_try` every try is alike: q0 = q1 = RETRY_S / (RETRY_S + wait)."""
    if first_try is None:
        q = RETRY_S / (RETRY_S + wait_s)
        return q, q
    return first_try, (RETRY_S * (1 - first_try) / wait_s if wait_s > 0 else 1.0)


def trace_wait_s(nodes: int) -> float:
    """The spot traces' expected wait to hold `nodes` nodes of one type, asked for at a random moment."""
    return TRACE_SINGLE_NODE_WAIT_S * nodes**TRACE_NODES_EXPONENT


def trace_at_once(nodes: int) -> float:
    """The spot traces' chance that `nodes` nodes of one type are there the moment they are asked for."""
    return TRACE_AT_ONCE * nodes**-TRACE_AT_ONCE_EXPONENT


def nodes_lost_per_event(nodes: int) -> float:
    """Nodes of a fleet of `nodes` in one type and zone that one spot interruption event takes, from the traces:
    1 of 1, rising linearly to TRACE_NODES_LOST_AT_4 at 4 and held there (no trace measured more per event)."""
    return 1 + (TRACE_NODES_LOST_AT_4 - 1) * (min(nodes, 4) - 1) / 3


def spot_capacity(scores: PlacementScores | None, cloud: str, region: str, zones: tuple[str, ...],
                  instance_type: str, nodes: int) -> Capacity:  # fmt: skip
    """The capacity a spot fleet of `nodes` in `zones` of `region` can count on: the measured single-AZ score
    of its one zone, or its region's score when it may use several zones; else the assumed default."""
    zone = zones[0] if len(zones) == 1 else ""
    where = zone or region
    found = scores.lookup(cloud, region, zone, instance_type, nodes) if scores is not None else None
    scope = f"zone {zone}" if zone else f"region {region}, any zone"
    if found is not None and found.score is not None:
        said = (f"Azure spot placement score {found.level}, read as {found.score}/10 (the words AWS gives its "
                f"{found.score})" if found.level else f"placement score {found.score}/10")  # fmt: skip
        return Capacity(found.score, nodes, where,
                        f"{said} for {found.target_capacity} x {instance_type} in {scope} "
                        f"({found.source}, {found.as_of})", measured=True)  # fmt: skip
    wait = trace_wait_s(nodes)
    how = {"aws": "measure it with `trainfleet catalog refresh --cloud aws --placement-scores`",
           "azure": "measure it with `trainfleet catalog refresh --cloud azure --placement-scores`"}.get(
        cloud, f"trainfleet fetches no {cloud} capacity score")  # fmt: skip
    if found is not None:  # a level with no number (Azure's Medium): shown, the traces' wait stands in
        how = (f"Azure spot placement score {found.level} for {found.target_capacity} x {instance_type} in {scope} "
               f"({found.as_of}) has no number to read it as")  # fmt: skip
    past = f", extrapolated past the traces' {TRACE_MOST_NODES}" if nodes > TRACE_MOST_NODES else ""
    return Capacity(None, nodes, where,
                    f"{'no number' if found is not None else 'no placement score'} for {nodes} x {instance_type} in "
                    f"{where}: assumed wait {wait / 3600:.1f} h "
                    f"for {nodes} node{'s' if nodes > 1 else ''}, the mean of published AWS spot traces (2022-2023, "
                    f"{TRACE_SINGLE_NODE_WAIT_S / 60:.0f} min for one node x N^{TRACE_NODES_EXPONENT}{past}; zones "
                    f"and months ranged 9 min to 23 h for one node); {how}", assumed_wait_s=wait,
                    first_try=trace_at_once(nodes))  # fmt: skip
