"""The capacity default's constants come from the published spot traces (issue 31 #7).

Each statistic is first checked on a trace worked by hand, then the constants in cli/planner/capacity.py are
recomputed from the vendored traces (tests/fixtures/skypilot_spot_traces/PROVENANCE.md) with loops written here,
independently of cli/planner/capacity_traces.py, and compared with both."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cli.planner import capacity
from cli.planner.capacity_traces import (
    acquire_wait_s,
    at_once_share,
    held_share_while_waiting,
    load_traces,
    losses_from_full,
    recovery_waits_s,
)

ROOT = Path(__file__).parent / "fixtures" / "skypilot_spot_traces"

# --- each statistic on a trace small enough to work by hand -------------------------------------------------

TOY = (0, 2, 4, 4, 1, 4, 3, 0)  # ticks 60 s apart, up to 4 nodes


def test_wait_counts_every_tick_until_the_next_that_holds_enough():
    # for 4: ticks 0..5 wait 2, 1, 0, 0, 1, 0 ticks; ticks 6, 7 never see 4 again and are left out
    assert acquire_wait_s(TOY, 60, 4) == pytest.approx(60 * (2 + 1 + 0 + 0 + 1 + 0) / 6)
    # for 1: tick 0 waits 1, ticks 1-6 none; tick 7 left out
    assert acquire_wait_s(TOY, 60, 1) == pytest.approx(60 * 1 / 7)


def test_at_once_is_the_share_of_those_ticks_holding_enough_already():
    assert at_once_share(TOY, 4) == pytest.approx(3 / 6)  # ticks 2, 3 and 5 of the six told
    assert at_once_share(TOY, 1) == pytest.approx(6 / 7)


def test_held_share_is_what_the_waiting_ticks_held():
    # waiting for 4 at ticks 0, 1 and 4 (held 0, 2 and 1 of 4)
    assert held_share_while_waiting(TOY, 4) == pytest.approx((0 + 2 / 4 + 1 / 4) / 3)


def test_losses_are_counted_from_the_full_count():
    assert losses_from_full(TOY) == [3, 1]  # 4 -> 1 and 4 -> 3; 3 -> 0 starts below full


def test_recovery_is_the_time_back_to_enough_after_a_fall():
    assert recovery_waits_s(TOY, 60, 4) == [60]  # 4 -> 1 -> 4; the fall at tick 6 never recovers
    assert recovery_waits_s(TOY, 60, 2) == [60]  # 4 -> 1 at tick 4, back at 5; the fall to 0 at 7 never


# --- the constants, recomputed from the traces ----------------------------------------------------------------


def _naive_traces() -> list[tuple[str, float, list[int]]]:
    out = []
    for path in sorted(ROOT.glob("*/*-node/*/*.json")):
        doc = json.loads(path.read_text())
        out.append((path.relative_to(ROOT).as_posix(), doc["metadata"]["gap_seconds"], doc["data"]))
    return out


def _naive_wait(gap: float, data: list[int], n: int) -> float:
    """Mean over the ticks that have one, the time to the first later (or same) tick holding >= n."""
    waits = []
    for i in range(len(data)):
        j = next((j for j in range(i, len(data)) if data[j] >= n), None)
        if j is not None:
            waits.append((j - i) * gap)
    return sum(waits) / len(waits)


def test_the_vendored_traces_are_the_published_ones():
    traces = load_traces(ROOT)
    assert len(traces) == 23
    kinds = {(t.kind, t.full) for t in traces}
    assert kinds == {("availability", 1), ("availability", 16), ("preemption", 4)}
    assert sum(t.kind == "availability" and t.full == 1 for t in traces) == 17


def test_single_node_wait_is_the_mean_over_the_single_node_traces():
    singles = [(gap, data) for name, gap, data in _naive_traces() if "availability/1-node" in name]
    mean = sum(_naive_wait(gap, data, 1) for gap, data in singles) / len(singles)
    assert len(singles) == 17
    assert capacity.TRACE_SINGLE_NODE_WAIT_S == pytest.approx(mean, rel=0.005)


def test_nodes_exponent_is_the_growth_from_one_to_sixteen_nodes():
    sixteen = [(gap, data) for name, gap, data in _naive_traces() if "availability/16-node" in name]
    one = sum(_naive_wait(gap, data, 1) for gap, data in sixteen)
    all16 = sum(_naive_wait(gap, data, 16) for gap, data in sixteen)
    assert capacity.TRACE_NODES_EXPONENT == pytest.approx(math.log(all16 / one) / math.log(16), abs=0.001)
    assert capacity.TRACE_MOST_NODES == 16


def test_the_exponent_predicts_the_held_out_four_node_traces_growth():
    """The 4-node preemption traces are in no fit: their zones' mean wait for 4 nodes against for 1."""
    fours = [(gap, data) for name, gap, data in _naive_traces() if "preemption/4-node" in name]
    measured = sum(_naive_wait(g, d, 4) for g, d in fours) / sum(_naive_wait(g, d, 1) for g, d in fours)
    predicted = 4**capacity.TRACE_NODES_EXPONENT
    assert measured == pytest.approx(1.271, abs=0.001)
    assert predicted == pytest.approx(measured, rel=0.03)


def test_held_share_and_nodes_per_event():
    traces = _naive_traces()
    shares = []
    for name, _, data in traces:
        if "availability/16-node" in name:
            waiting = [data[i] / 16 for i in range(len(data)) if data[i] < 16 and max(data[i:]) >= 16]
            shares.append(sum(waiting) / len(waiting))
    assert capacity.TRACE_HELD_SHARE == pytest.approx(sum(shares) / len(shares), abs=0.0005)
    per_zone = []
    for name, _, data in traces:
        if "preemption/4-node" in name:
            lost = [data[i] - data[i + 1] for i in range(len(data) - 1) if data[i] == 4 and data[i + 1] < 4]
            per_zone.append(sum(lost) / len(lost))
    assert len(per_zone) == 3 and min(per_zone) > 1  # every zone lost nodes together
    assert capacity.TRACE_NODES_LOST_AT_4 == pytest.approx(min(per_zone), abs=0.005)


def _naive_at_once(data: list[int], n: int) -> float:
    """Of the ticks that have a later (or same) tick holding >= n, the share that hold >= n themselves."""
    last = max(i for i, count in enumerate(data) if count >= n)  # ticks after it never see n again
    return sum(count >= n for count in data[: last + 1]) / (last + 1)


def test_the_first_try_odds_are_the_share_of_moments_the_nodes_were_there():
    traces = _naive_traces()
    singles = [d for name, _, d in traces if "availability/1-node" in name]
    assert capacity.TRACE_AT_ONCE == pytest.approx(sum(_naive_at_once(d, 1) for d in singles) / 17, abs=0.0005)
    sixteen = [d for name, _, d in traces if "availability/16-node" in name]
    one = sum(_naive_at_once(d, 1) for d in sixteen) / 3
    all16 = sum(_naive_at_once(d, 16) for d in sixteen) / 3
    assert capacity.TRACE_AT_ONCE_EXPONENT == pytest.approx(math.log(one / all16) / math.log(16), abs=0.0005)
    # held out: the 4-node preemption traces' chance for 4 against for 1
    fours = [d for name, _, d in traces if "preemption/4-node" in name]
    measured = sum(_naive_at_once(d, 4) for d in fours) / sum(_naive_at_once(d, 1) for d in fours)
    assert measured == pytest.approx(0.915, abs=0.001)
    assert 4**-capacity.TRACE_AT_ONCE_EXPONENT == pytest.approx(measured, rel=0.03)
