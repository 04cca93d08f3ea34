"""How far a plan's time and cost may be from what the run will take: an 80% interval from the planner's error on
whole runs it was not fitted to.

Each published whole run of the development set (training_runs.csv, cli/planner/validation.py) is priced as
`trainfleet estimate` prices it, and r = reported / predicted device-hours. No part of the planner is fitted to these
runs (the step model is fitted on llm-foundry's benchmark rows and the accelerator families' published throughput,
the overheads beside the steps take published settings and rates), so every r is an error on data the model never
saw. The interval is the 10th to 90th percentile of r (statistics.quantiles, n=10, inclusive), applied as factors
to a plan's device-hours, wall-clock hours and expected cost: a whole run's error is an error in its time, and its
cost is that time at the plan's price (checkpoint storage too is priced on the time).

What it covers: the error of the step, overhead and reliability model on dedicated clusters of 96 to 1,024 devices
(13 runs: a rough interval, which is why it is wide). It is not centred on the plan's figure: the runs took a
median x1.25 of what the planner predicts for them. Where a run also publishes its step throughput, that splits into
its step speed and its time beside the steps (benchmarks/plan_calibration.py); no constant is added to absorb it.
What it does not: spot interruptions' chance (the figures are
expectations), price changes, and scales past the development set's. How often it holds on runs no fit ever saw
(held_out_runs.csv) is measured by benchmarks/plan_calibration.py. tests/test_plan_interval.py recomputes both
factors from the data.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

LEVEL = 0.8


@dataclass(frozen=True, slots=True)
class Interval:
    low: float  # factor on the point figure
    high: float
    median: float = 1.0  # the runs' median factor: where the interval is centred

    def around(self, value: float) -> tuple[float, float]:
        return value * self.low, value * self.high

    def describe(self) -> str:
        return (f"{LEVEL:.0%} interval x{self.low:.2f} to x{self.high:.2f} of each time and cost: the 10th-90th "
                "percentile of reported / predicted device-hours over the development set's whole runs, none of "
                f"them in any fit; they took a median x{self.median:.2f} of the planner's figure "
                "(cli/planner/uncertainty.py); spot interruptions' "
                "chance and price changes are not in it")  # fmt: skip


PLAN_INTERVAL = Interval(0.86, 1.87, 1.25)


def interval_from_ratios(ratios: list[float]) -> Interval:
    """The LEVEL interval of reported / predicted ratios: their 10th and 90th percentiles."""
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return Interval(deciles[0], deciles[-1], statistics.median(ratios))

