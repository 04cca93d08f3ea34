"""The plan a user would pick by spot price alone, priced under the planner's full model for comparison.

The cheapest-price spot pick: of the catalog's spot rows the request allows on the chosen plan's accelerator (same hardware class)
and the node counts the search kept, the one with the lowest list cost: the row's own USD per node-hour x nodes
x the hours of work, evaluation and data-loader stalls included, among those meeting the deadline on those hours.
Interruptions, lost work, restarts, waiting for capacity and a row's distance from its neighbours play no
part in the choice. It is then priced under the same model as the chosen plan (`optimizer.candidate`:
interruptions, failures, checkpoints, restarts, capacity, outlier rows at their neighbours' price), so the two
costs compare like for like. benchmarks/plan_capacity.py prints the chosen plan against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cli.planner.optimizer import Candidate, Search, Stats, candidate, filtered_offers, hardware_for
from cli.planner.outliers import conservative_spot
from infra.catalog import Accelerator, Offer
from infra.catalog.capacity import PlacementScores


def cheapest_price_spot_pick(result: Search, offers: Iterable[Offer], accelerators: dict[str, Accelerator],
                             accelerator: str, scores: PlacementScores | None = None) -> Candidate | None:  # fmt: skip
    """The cheapest-price spot plan on `accelerator` (see the module doc), priced by the planner's model."""
    req = result.request
    deadline = req.deadline_hours if req.deadline_hours is not None else math.inf
    setups = {}  # (hardware, nodes) -> (setup, hours of work, evaluation and stalls): what the search found for them
    for b in result.blocks:
        hours = b.rel.worked_hours
        if b.hw.accelerator == accelerator and hours <= deadline:
            setups[b.hw, b.nodes] = (b.setup, hours)
    rows = [o for o in filtered_offers(offers, req, Stats()) if o.accelerator == accelerator and o.spot_usd_per_hour]
    modelled = {(o.cloud, o.region, o.zone, o.instance_type): o for o in conservative_spot(rows)}
    best, best_key = None, None
    for o in rows:
        hw = hardware_for(o, accelerators.get(o.accelerator), req.workload.precision)
        for (shw, nodes), (setup, hours) in setups.items():
            if shw != hw:
                continue
            key = (o.spot_usd_per_hour * nodes * hours, o.cloud, o.region, o.zone, o.instance_type, nodes)
            if best_key is None or key < best_key:
                best, best_key = (o, hw, nodes, setup), key
    if best is None:
        return None
    o, hw, nodes, setup = best
    priced = modelled[(o.cloud, o.region, o.zone, o.instance_type)]
    return candidate(req, priced, "spot", (o.zone,) if o.zone else (), nodes, hw, setup, scores=scores)
