"""Issue 31 #4: every figure that carries uncertainty carries an 80% interval, from the planner's residuals on the
development set's whole runs, none of which is in any fit (cli/planner/uncertainty.py)."""

from __future__ import annotations

import json
import re

import pytest

from cli.planner.calibration import default_fit
from cli.planner.uncertainty import PLAN_INTERVAL
from cli.planner.validation import load_runs, replay_run
from infra.catalog import default_catalog
from tests.conftest import run_in_process


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks at position (n - 1) p (the 'inclusive' definition)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * p
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def test_the_interval_is_the_10th_to_90th_percentile_of_the_whole_runs_ratios():
    runs, fit, accelerators = load_runs(), default_fit(), default_catalog().accelerators
    assert len(runs) >= 10
    ratios = [run.device_hours / replay_run(run, fit, accelerators).predicted_device_hours for run in runs]
    assert PLAN_INTERVAL.low == pytest.approx(percentile(ratios, 0.1), abs=0.005)
    assert PLAN_INTERVAL.high == pytest.approx(percentile(ratios, 0.9), abs=0.005)
    assert PLAN_INTERVAL.median == pytest.approx(percentile(ratios, 0.5), abs=0.005)
    # the interval lies between the smallest and largest ratio: it is no wider than the evidence
    assert min(ratios) < PLAN_INTERVAL.low < 1 < PLAN_INTERVAL.high < max(ratios)


def plan(capsys, *args: str) -> dict:
    code, out, err = run_in_process(capsys, "plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_every_plan_shown_carries_the_interval_on_hours_device_hours_and_cost(capsys):
    data = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")
    for p in [data["best"], *data["alternatives"], *data["frontier"]]:
        for key in ("wallclock_hours", "device_hours", "expected_cost_usd"):
            low, point, high = p[f"{key}_low"], p[key], p[f"{key}_high"]
            assert low < point < high
            assert low == pytest.approx(point * PLAN_INTERVAL.low, rel=1e-3, abs=0.1)
            assert high == pytest.approx(point * PLAN_INTERVAL.high, rel=1e-3, abs=0.1)
        # device-hours are billed ones: a spot fleet without a placement score holds 7.9% of its nodes while it
        # waits for the rest before the start (capacity.py)
        unheld_h = (1 - 0.079) * p["capacity"]["expected_wait_minutes"] / 60 if p["capacity"]["score"] is None else 0
        assert p["device_hours"] == pytest.approx((p["wallclock_hours"] - unheld_h) * p["devices"], rel=1e-3)
    assert any(line.startswith("80% interval x0.86 to x1.87") and "median x1.25" in line
               for line in data["best"]["assumptions"])


def test_a_plan_whose_upper_end_passes_the_deadline_says_so_with_the_deadline_that_keeps_it_inside(capsys):
    data = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")
    high = data["best"]["wallclock_hours_high"]
    assert high > 72
    (note,) = [n for n in data["notes"] if "interval's upper end" in n]
    assert f"{high:,.0f} h, past the 72 h deadline" in note and f"--deadline {72 / PLAN_INTERVAL.high:.0f}h" in note
    # with that deadline the plan's upper end is inside the asked-for 72 h, and no note is printed
    tighter = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", f"{72 / PLAN_INTERVAL.high:.0f}h")
    assert tighter["best"]["wallclock_hours_high"] <= 72
    assert not [n for n in tighter["notes"] if "interval's upper end" in n and "72 h" in n]


def test_a_plan_that_meets_the_deadline_only_by_the_models_figure_says_what_the_runs_median_error_makes_it(capsys):
    """Published whole runs took a median x1.25 of the planner's figure; no constant absorbs that, the plan says it."""
    data = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", "54h")
    wall = data["best"]["wallclock_hours"]
    assert wall <= 54 < wall * PLAN_INTERVAL.median
    (note,) = [n for n in data["notes"] if "median x" in n]
    assert f"{wall * PLAN_INTERVAL.median:,.0f} h, past the 54 h deadline" in note
    at_median = f"{54 / PLAN_INTERVAL.median:.0f}h"
    assert f"--deadline {at_median} to meet it at the median" in note
    tighter = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", at_median)
    assert tighter["best"]["wallclock_hours"] * PLAN_INTERVAL.median <= 54
    assert not [n for n in tighter["notes"] if "median x" in n and "54 h" in n]


def test_the_tables_and_estimate_show_the_range(capsys):
    best = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")["best"]
    code, out, _ = run_in_process(capsys, "plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h",
                                  "--wide")  # fmt: skip
    low, high = best["wallclock_hours_low"], best["wallclock_hours_high"]
    assert code == 0 and f"80% interval {low:.1f}-{high:.1f} h" in out
    runners_up = out.split("Runners-up")[1]
    assert "80% interval" in runners_up and re.search(r"\d+-\d+ h, \$[\d.]+K-\$[\d.]+K", runners_up)
    code, out, err = run_in_process(capsys, "estimate", "--params", "6.7B", "--tokens", "1000B", "--accelerator",
                                    "A100-80GB", "--devices", "2048", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["device_hours_low"] < d["gpu_hours"] < d["device_hours_high"]
    assert d["cost_usd_low"] == pytest.approx(d["cost_usd"] * PLAN_INTERVAL.low, abs=0.01)
    assert d["wallclock_hours_high"] == pytest.approx(d["wallclock_hours"] * PLAN_INTERVAL.high, rel=1e-4)


def test_the_held_out_runs_are_only_the_families_no_fit_sees():
    from infra.catalog.loader import DATA_DIR

    held = load_runs(DATA_DIR / "calibration" / "held_out_runs.csv")
    assert len(held) >= 4  # the replayable ones: a device count and metered hours
    for run in held:
        assert any(family in run.name.lower() for family in ("llama", "opt", "bloom", "mpt")), run.name
    assert not {r.name for r in held} & {r.name for r in load_runs()}
