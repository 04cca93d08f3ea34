"""The chosen plan against a cheapest-price spot pick, both priced under the same model.

    .venv/bin/python benchmarks/plan_capacity.py [--placement-scores FILE]

For each job: the plan `trainfleet plan` chooses (expected cost: interruptions, failures, checkpoints, restarts,
waiting for spot capacity) and the spot plan a user would pick by price alone on the same accelerator
(cli/planner/baseline.py), priced under that same model. Prints both, the ratio pick / chosen, and where each
one's capacity figure comes from. Without --placement-scores it reads the user's refreshed file if there is one,
else every spot plan carries the assumed default capacity (cli/planner/capacity.py), and says so.

Then, per job, the plan chosen with capacity ignored (every spot fleet certain to be had at once, nothing lost
together) priced under the full model beside the chosen one: where capacity moves the pick, and by how much.
Then what the published spot traces the default rests on say, with the held-out check (cli/planner/capacity.py).

Then a labelled scenario, not evidence: where the chosen plan is an AWS spot fleet, placement scores that rate
its zone 2/10 and every other zone selling that type 9/10 for any node count, to show what a measured score
does to the choice and to the price-only pick.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOBS = [  # (label, model or params, tokens, method, deadline hours)
    ("7B / 200B tokens, 72 h", "llama-7b", 200e9, "full", 72.0),
    ("13B / 1T tokens, 30 days", "llama-13b", 1e12, "full", 720.0),
    ("70B / 1T tokens, 60 days", "llama-70b", 1e12, "full", 1440.0),
    ("70B LoRA / 5B tokens, 24 h", "llama-70b", 5e9, "lora", 24.0),
]


def describe(c) -> str:
    cap = f"capacity {c.capacity.label()}{', measured' if c.capacity.measured else ''}" \
        if c.purchase == "spot" else "on-demand"
    where = ",".join(c.zones) or c.offer.region
    return (f"{c.nodes} x {c.offer.instance_type} {c.purchase} {c.offer.cloud} {where}: ${c.cost_usd:,.0f} over "
            f"{c.wall_hours:,.1f} h ({cap})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--placement-scores", type=Path, help="a placement-scores.json (default: the user's)")
    args = parser.parse_args()
    from cli.planner.calibration import default_fit
    from cli.planner.optimizer import Request
    from cli.planner.presets import PRESETS
    from cli.planner.workload import Workload
    from infra.catalog import default_catalog
    from infra.catalog.capacity import default_placement_scores, load_placement_scores

    scores = load_placement_scores(args.placement_scores) if args.placement_scores else default_placement_scores()
    catalog, fit = default_catalog(), default_fit()
    print(f"placement scores: {len(scores)} rows" + ("" if len(scores) else
          " (none: every spot plan carries the assumed default capacity)"))  # fmt: skip
    print(f"{'job':30} {'chosen':>12} {'price pick':>12} {'pick/chosen':>11}")
    scenarios = []
    for label, model, tokens, method, deadline in JOBS:
        req = Request(Workload(PRESETS[model], int(tokens), method=method), deadline_hours=deadline)
        chosen = compare(label, req, catalog, fit, scores)
        if chosen is not None and chosen.offer.cloud == "aws" and chosen.purchase == "spot":
            scenarios.append((label, req, scenario_scores(chosen, catalog)))
    print("\ncapacity ignored (every spot fleet certain, no wait) against modelled, both priced by the full model")
    for label, model, tokens, method, deadline in JOBS:
        req = Request(Workload(PRESETS[model], int(tokens), method=method), deadline_hours=deadline)
        moved(label, req, catalog, fit, scores)
    traces()
    print("\nscenario (not evidence): the chosen AWS zone scored 2/10, every other zone of its type 9/10")
    for label, req, what_if in scenarios:
        compare(label, req, catalog, fit, what_if)
    return 0


def compare(label, req, catalog, fit, scores):
    from cli.planner.baseline import cheapest_price_spot_pick
    from cli.planner.optimizer import search

    result = search(req, catalog.all_offers, catalog.accelerators, fit, scores=scores)
    selection = result.select(1)
    if not selection.leaders:
        print(f"{label:30} no plan meets the deadline")
        return None
    chosen = selection.leaders[0]
    pick = cheapest_price_spot_pick(result, catalog.all_offers, catalog.accelerators, chosen.offer.accelerator,
                                    scores)  # fmt: skip
    if pick is None:
        print(f"{label:30} ${chosen.cost_usd:>11,.0f} {'no spot pick':>12}")
        return chosen
    deadline = req.deadline_hours
    late = "" if pick.wall_hours <= deadline else f" (misses the {deadline:g} h deadline)"
    print(f"{label:30} ${chosen.cost_usd:>11,.0f} ${pick.cost_usd:>11,.0f} {pick.cost_usd / chosen.cost_usd:>11.3f}")
    print(f"    chosen:     {describe(chosen)}")
    print(f"    price pick: {describe(pick)}{late}")
    return chosen


class CapacityIgnored:
    """Placement scores that call every spot fleet certain (10/10): the search as if capacity did not matter."""

    def __len__(self) -> int:
        return 1

    def lookup(self, cloud, region, zone, instance_type, nodes):
        from infra.catalog.capacity import PlacementScore

        return PlacementScore(cloud, region, zone, instance_type, nodes, 10, "what-if", "capacity ignored")


def moved(label, req, catalog, fit, scores):
    from cli.planner.optimizer import candidate, search

    modelled = search(req, catalog.all_offers, catalog.accelerators, fit, scores=scores).select(1).leaders
    ignored = search(req, catalog.all_offers, catalog.accelerators, fit, scores=CapacityIgnored()).select(1).leaders
    if not modelled or not ignored:
        print(f"{label:30} no plan meets the deadline {'with' if not modelled else 'without'} capacity modelled")
        return
    chosen, naive = modelled[0], ignored[0]
    if naive.identity() == chosen.identity():
        print(f"{label:30} capacity does not move the pick: {describe(chosen)}")
        return
    # the plan picked with capacity ignored, as the full model prices it (its own zone's default or score)
    real = candidate(req, naive.offer, naive.purchase, naive.zones, naive.nodes, naive.hardware, naive.setup,
                     scores=scores)  # fmt: skip
    late = "" if req.deadline_hours is None or real.wall_hours <= req.deadline_hours else \
        f", misses the {req.deadline_hours:g} h deadline"
    print(f"{label:30} capacity moves the pick: ignoring it picks {naive.nodes} x {naive.offer.instance_type} "
          f"{naive.purchase} ({naive.wall_hours:,.1f} h, ${naive.cost_usd:,.0f} as if certain)")
    print(f"    which the model prices at {real.wall_hours:,.1f} h, ${real.cost_usd:,.0f}{late}")
    print(f"    chosen: {describe(chosen)}")
    if real.cost_usd < math.inf:
        print(f"    ignoring capacity: {real.cost_usd / chosen.cost_usd - 1:+.1%} cost, "
              f"{real.wall_hours - chosen.wall_hours:+,.1f} h against the chosen plan")


def traces():
    import statistics

    from cli.planner import capacity
    from cli.planner.capacity_traces import (
        acquire_wait_s,
        at_once_share,
        load_traces,
        losses_from_full,
        recovery_waits_s,
    )

    found = load_traces(ROOT / "tests" / "fixtures" / "skypilot_spot_traces")
    print("\nthe default's evidence: SkyPilot spot-traces (AWS V100/K80 2022-2023; tests/fixtures/skypilot_spot_traces)")
    singles = [acquire_wait_s(t.counts, t.gap_s, 1) / 60 for t in found if t.full == 1]
    print(f"  wait for one node, {len(singles)} single-node traces: mean {statistics.mean(singles):,.0f} min, median "
          f"{statistics.median(singles):,.0f}, from {min(singles):,.0f} to {max(singles):,.0f} min "
          f"(the planner: {capacity.TRACE_SINGLE_NODE_WAIT_S / 60:,.0f} min)")
    at_once = statistics.mean(at_once_share(t.counts, 1) for t in found if t.full == 1)
    print(f"  one node there at once: {at_once:.1%} of moments (the planner's first try: {capacity.TRACE_AT_ONCE:.1%})")
    for t in found:
        if t.full > 1:
            waits = [acquire_wait_s(t.counts, t.gap_s, n) / 60 for n in (1, t.full)]
            lost = losses_from_full(t.counts)
            print(f"  {t.name:55} {t.days:4.1f} days: wait for 1 {waits[0]:4,.0f} min, for {t.full:2} {waits[1]:4,.0f} "
                  f"min; {len(lost)} falls from full, {statistics.mean(lost):4.1f} nodes each")
    fours = [t for t in found if t.kind == "preemption"]
    measured = sum(acquire_wait_s(t.counts, t.gap_s, 4) for t in fours) / sum(acquire_wait_s(t.counts, t.gap_s, 1)
                                                                              for t in fours)  # fmt: skip
    level = statistics.mean(acquire_wait_s(t.counts, t.gap_s, 4) for t in fours)
    print(f"  held out (4-node preemption traces): wait for 4 / for 1 measured {measured:.3f}, the exponent says "
          f"{4 ** capacity.TRACE_NODES_EXPONENT:.3f}; their wait for 4, {level / 60:,.0f} min, against the "
          f"planner's {capacity.trace_wait_s(4) / 60:,.0f} min")
    held = statistics.mean(at_once_share(t.counts, 4) for t in fours) / statistics.mean(
        at_once_share(t.counts, 1) for t in fours)
    print(f"  held out: 4 nodes there at once {held:.3f} as often as one, the planner says "
          f"{4 ** -capacity.TRACE_AT_ONCE_EXPONENT:.3f}")
    recover = [w for t in fours for w in recovery_waits_s(t.counts, t.gap_s, 4)]
    print(f"  after a loss, back to 4 nodes: {len(recover)} losses, mean {statistics.mean(recover) / 60:,.0f} min, "
          f"median {statistics.median(recover) / 60:,.0f} min (the planner waits {capacity.trace_wait_s(4) / 60:,.0f})")


def scenario_scores(chosen, catalog):
    from infra.catalog.capacity import PlacementScore, PlacementScores

    o = chosen.offer
    places = sorted({(x.region, x.zone) for x in catalog.offers(cloud="aws", instance_type=o.instance_type) if x.zone})
    return PlacementScores(PlacementScore("aws", region, z, o.instance_type, 1024, 2 if z in chosen.zones else 9,
                                          "scenario", "benchmarks/plan_capacity.py") for region, z in places)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
