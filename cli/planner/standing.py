"""Which fleets a plan search may skip: those none of whose plans could be shown.

`trainfleet plan` shows the best plan of each (cloud, region, instance type, purchase), `top` of them, and the
cost/time frontier (`optimizer.Search.select`). Before a fleet's (hardware x node count) DeepSpeed setups are
searched, its hours and cost get a lower bound: an upper bound on every setup's speed gives the useful hours that
every plan's wall and billed hours include, and those hours at the fleet's cheapest price bound its cost (storage
only adds). The speed is bounded twice: quickly, with no communication at all (`optimizer.communication_free_
tokens_per_second`), then, for the fleets that pass, with what no ZeRO stage, layout or overlap can hide
(`optimizer.fastest_tokens_per_second`, `throughput.step_floor_s`). `Standing` keeps what
the plans found so far would show; a fleet whose bound neither beats the `top`-th best score nor escapes the
frontier's plans cannot change what is shown, and `optimizer.search` skips it. Fleets are searched cheapest bound
first, so the plans that show come early. tests/test_planner_optimizer.py holds the shown plans to a search that
skips nothing.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shown:
    """What the caller will select of a search (`Search.select(top, max_hours)`)."""

    top: int
    max_hours: float = math.inf


class Standing:
    """The plans found so far that `Search.select` could show: the best score of each leader key and the frontier
    of (wall hours, cost) among plans meeting the deadline, budget and `max_hours`."""

    def __init__(self, shown: Shown, objective: str, time_value_usd_per_hour: float, deadline_hours: float | None,
                 budget_usd: float | None) -> None:  # fmt: skip
        self.top = shown.top
        self.by_time = objective == "time"
        self.time_value = time_value_usd_per_hour
        self.deadline = min(shown.max_hours, math.inf if deadline_hours is None else deadline_hours)
        self.budget = math.inf if budget_usd is None else budget_usd
        self.best: dict[tuple, float] = {}  # leader key -> the first term of its best score
        self._kth: float | None = None  # the top-th best of `best` (inf while fewer keys), None: to recompute
        self.hours: list[float] = []  # the frontier, fastest first; costs fall strictly along it
        self.costs: list[float] = []

    def first(self, hours: float, cost: float) -> float:
        """The term a plan's score (optimizer.Candidate.score) is ranked by first."""
        return hours if self.by_time else cost + self.time_value * hours

    def add(self, wall_hours: float, points: Iterable[tuple[float, tuple]]) -> None:
        """The plans of one block: its wall hours, and (cost, leader key) per price point."""
        if wall_hours > self.deadline:
            return
        cheapest = math.inf
        for cost, key in points:
            if cost > self.budget:
                continue
            score = self.first(wall_hours, cost)
            if score < self.best.get(key, math.inf):
                self.best[key] = score
                self._kth = None
            cheapest = min(cheapest, cost)
        if cheapest < math.inf:
            self._on_frontier(wall_hours, cheapest)

    def can_show(self, hours_low: float, cost_low: float) -> bool:
        """Whether a plan of at least `hours_low` hours and `cost_low` USD could rank among the top or stand on
        the frontier: it cannot when its score is worse than the top-th best already, and a plan found is no
        slower and no dearer, and faster or cheaper (equal ones tie on identity)."""
        return self.first(hours_low, cost_low) <= self._top_score() or not self._dominated(hours_low, cost_low)

    def _top_score(self) -> float:
        if self._kth is None:
            self._kth = heapq.nsmallest(self.top, self.best.values())[-1] if len(self.best) >= self.top else math.inf
        return self._kth

    def _dominated(self, hours: float, cost: float) -> bool:
        i = bisect_right(self.hours, hours)  # the slowest frontier plan no slower is the cheapest of those
        return i > 0 and (self.costs[i - 1] < cost or (self.costs[i - 1] == cost and self.hours[i - 1] < hours))

    def _on_frontier(self, hours: float, cost: float) -> None:
        i = bisect_right(self.hours, hours)
        if i and self.costs[i - 1] <= cost:
            return  # a plan no slower is no dearer
        start = i - 1 if i and self.hours[i - 1] == hours else i  # as fast but dearer: replaced
        end = i
        while end < len(self.costs) and self.costs[end] >= cost:
            end += 1  # slower and no cheaper: off the frontier
        self.hours[start:end] = [hours]
        self.costs[start:end] = [cost]
