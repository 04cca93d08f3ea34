"""The chosen plan against a cheapest-price spot pick, both priced under the same model.

    .venv/bin/python benchmarks/plan_capacity.py [--placement-scores FILE]

For each job: the plan `trainfleet plan` chooses (expected cost: interruptions, failures, checkpoints, restarts,
waiting for spot capacity) and the spot plan a user would pick by price alone on the same accelerator
(cli/planner/baseline.py), priced under that same model. Prints both, the ratio pick / chosen, and where each
one's capacity figure comes from. Without --placement-scores it reads the user's refreshed file if there is one,
else every spot plan carries the assumed default capacity (cli/planner/capacity.py), and says so.

Then a labelled scenario, not evidence: where the chosen plan is an AWS spot fleet, placement scores that rate
its zone 2/10 and every other zone selling that type 9/10 for any node count, to show what a measured score
does to the choice and to the price-only pick.
"""

from __future__ import annotations

import argparse
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
    cap = f"capacity {c.capacity.score}/10 {'measured' if c.capacity.measured else 'assumed'}" \
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


def scenario_scores(chosen, catalog):
    from infra.catalog.capacity import PlacementScore, PlacementScores

    o = chosen.offer
    places = sorted({(x.region, x.zone) for x in catalog.offers(cloud="aws", instance_type=o.instance_type) if x.zone})
    return PlacementScores(PlacementScore("aws", region, z, o.instance_type, 1024, 2 if z in chosen.zones else 9,
                                          "scenario", "benchmarks/plan_capacity.py") for region, z in places)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
