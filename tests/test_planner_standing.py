"""What `trainfleet plan` may skip (cli/planner/standing.py), on plans worked by hand: a fleet is skipped only when
a plan found is no slower and cheaper than it could be (so it cannot stand on the frontier) and its best possible
score is worse than the top-th leader's. Only plans the selection could show set either bar.
tests/test_planner_optimizer.py holds whole searches to the full one."""

from __future__ import annotations

from cli.planner.standing import Shown, Standing


def standing(top: int, objective: str = "cost", time_value: float = 0.0, deadline: float | None = None,
             budget: float | None = None) -> Standing:  # fmt: skip
    return Standing(Shown(top), objective, time_value, deadline, budget)


def test_a_fleet_that_could_stand_on_the_frontier_is_kept_whatever_its_score():
    s = standing(1)
    s.add(10.0, [(100.0, "A")])  # 10 h, $100
    assert not s.can_show(11.0, 101.0)  # slower and dearer than A, and A is the one plan shown
    assert s.can_show(9.0, 500.0)  # faster than anything found: the frontier's fastest end
    assert s.can_show(11.0, 99.0)  # cheaper than anything found
    assert not s.can_show(10.0, 101.0)  # as fast, dearer
    assert s.can_show(10.0, 100.0)  # a tie in hours and cost: identity decides, so it is searched


def test_a_dominated_fleet_is_kept_while_it_could_still_be_a_runner_up():
    s = standing(2)
    s.add(10.0, [(100.0, "A")])
    assert s.can_show(11.0, 101.0)  # dominated by A, but only one leader is found: it could be the second
    s.add(12.0, [(120.0, "B")])  # the second leader: the bar is now $120
    assert s.can_show(11.0, 101.0)  # $101 could still beat B for second place
    assert not s.can_show(13.0, 121.0)


def test_plans_past_the_deadline_set_no_bar():
    s = standing(2, deadline=10.0)
    s.add(5.0, [(10.0, "A")])
    s.add(20.0, [(2.0, "B")])  # cheap but past the deadline: never shown
    assert s.can_show(6.0, 11.0)  # dominated by A, and could be the second plan shown


def test_plans_over_the_budget_set_no_bar():
    s = standing(2, objective="time", budget=50.0)
    s.add(5.0, [(10.0, "A")])
    s.add(1.0, [(60.0, "B")])  # fastest but over the budget: never shown
    assert s.can_show(6.0, 11.0)  # dominated by A, and could be the second fastest shown


def test_the_time_objective_ranks_by_hours():
    s = standing(2, objective="time")
    s.add(5.0, [(100.0, "A")])
    s.add(3.0, [(300.0, "B")])  # the bar: the second fastest, 5 h
    assert not s.can_show(6.0, 150.0)  # slower than both, dearer than A: neither leader nor frontier
    assert s.can_show(4.0, 150.0)  # faster than A: would be second


def test_the_cost_objective_ranks_by_cost_plus_the_value_of_time():
    s = standing(2, time_value=10.0)
    s.add(10.0, [(100.0, "A")])  # scores $100 + 10 x 10 h = $200
    s.add(2.0, [(150.0, "B")])  # $170
    assert not s.can_show(11.0, 105.0)  # $105 + $110 = $215 > $200, and A is faster and cheaper
    assert s.can_show(10.5, 90.0)  # cheaper than A: the frontier


def test_one_key_keeps_its_best_score():
    s = standing(2)
    s.add(10.0, [(100.0, "A"), (300.0, "A")])  # two price points of one leader key
    assert s.can_show(11.0, 101.0)  # still one leader: a second may come from any key


def test_the_frontier_drops_what_a_new_plan_beats():
    s = standing(1)
    s.add(10.0, [(100.0, "A")])
    s.add(12.0, [(120.0, "B")])  # slower and dearer than A: not on the frontier
    s.add(8.0, [(90.0, "C")])  # faster and cheaper than A: A leaves the frontier
    s.add(8.0, [(95.0, "D")])  # as fast as C, dearer: not on it
    assert (s.hours, s.costs) == ([8.0], [90.0])
    assert not s.can_show(9.0, 95.0)  # C is faster and cheaper, and C is the one plan shown
    s.add(20.0, [(50.0, "E")])  # slower and cheaper than C: on the frontier beside it
    assert (s.hours, s.costs) == ([8.0, 20.0], [90.0, 50.0])
    assert s.can_show(19.0, 60.0) and not s.can_show(21.0, 60.0)
