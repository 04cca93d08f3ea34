"""How far a plan's time and cost may be from what the run will take: an 80% interval from the planner's error on
whole runs it was not fitted to.

Each published whole run of the development set (training_runs.csv, cli/planner/validation.py) is priced with the
stall share fitted on the other runs (leave one out), and r = reported / predicted device-hours. The interval is
the 10th to 90th percentile of r (statistics.quantiles, n=10, inclusive), applied as factors to a plan's
device-hours, wall-clock hours and expected cost: a whole run's error is an error in its time, and its cost is that
time at the plan's price (checkpoint storage too is priced on the time).

What it covers: the error of the speed, reliability and stall model on dedicated clusters of 96 to 1,024 devices
(13 runs: a rough interval, which is why it is wide). What it does not: spot interruptions' chance (the figures are
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

    def around(self, value: float) -> tuple[float, float]:
        return value * self.low, value * self.high

    def describe(self) -> str:
        return (f"{LEVEL:.0%} interval x{self.low:.2f} to x{self.high:.2f} of each time and cost: the 10th-90th "
                "percentile of reported / predicted device-hours over the development set's whole runs, each "
                "priced with the stall share fitted without it (cli/planner/uncertainty.py); spot interruptions' "
                "chance and price changes are not in it")  # fmt: skip


PLAN_INTERVAL = Interval(0.68, 1.47)


def interval_from_ratios(ratios: list[float]) -> Interval:
    """The LEVEL interval of reported / predicted ratios: their 10th and 90th percentiles."""
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return Interval(deciles[0], deciles[-1])

