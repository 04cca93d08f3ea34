"""`trainfleet plan --plot`: the frontier drawn, read back from the SVG it wrote (positions from the drawing,
expected order and values from the plan's JSON), and the terminal picture."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from cli.planner.plot import NO_INTERVAL, svg_bytes, text_plot
from tests.conftest import REPO, one_line_error, run_in_process

QUICK = ("plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")
NS = {"svg": "http://www.w3.org/2000/svg", "xlink": "http://www.w3.org/1999/xlink"}
HREF = "{http://www.w3.org/1999/xlink}href"


def plan_with_svg(capsys, path) -> dict:
    code, out, err = run_in_process(capsys, *QUICK, "--plot", str(path), "--json")
    assert code == 0, err
    assert err.strip() == f"wrote {path}"  # on stderr: stdout is the JSON alone
    return json.loads(out)


def group(root, gid: str):
    found = root.findall(f".//svg:g[@id='{gid}']", NS)
    assert len(found) <= 1, gid
    return found[0] if found else None


def centres(root, gid: str) -> list[tuple[float, float]]:
    """The marker centres of one artist: matplotlib writes each marker as a <use x= y=>."""
    g = group(root, gid)
    assert g is not None, f"no group {gid!r} in the SVG"
    return [(float(u.get("x")), float(u.get("y"))) for u in g.iter("{http://www.w3.org/2000/svg}use")]


def texts(root) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def bars(root, gid: str) -> list[tuple[float, float, float, float]]:
    """Each error bar of a LineCollection as (x1, y1, x2, y2)."""
    g = group(root, gid)
    out = []
    for path in g.iter("{http://www.w3.org/2000/svg}path"):
        nums = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
        assert len(nums) == 4, path.get("d")
        out.append(tuple(nums))
    return out


def scale_of(root, axis_words: str) -> str:
    (label,) = [t for t in texts(root) if t.startswith(axis_words)]
    return "log" if "(log scale)" in label else "linear"


def assert_affine(values: list[float], pixels: list[float], log: bool, flipped: bool = False) -> None:
    """The drawn positions are the values on the axis's scale: one offset and one factor for all of them."""
    v = [math.log(x) if log else x for x in values]
    a, b = min(range(len(v)), key=v.__getitem__), max(range(len(v)), key=v.__getitem__)
    assert v[a] < v[b]
    for vi, pi in zip(v, pixels, strict=True):
        expected = pixels[a] + (vi - v[a]) / (v[b] - v[a]) * (pixels[b] - pixels[a])
        assert pi == pytest.approx(expected, abs=0.05), (values, pixels)
    assert (pixels[b] < pixels[a]) == flipped  # SVG's y grows downwards: a larger cost is drawn higher


def key(p: dict) -> tuple:
    return (p["cloud"], p["region"], p["instance_type"], p["nodes"], p["purchase"], p["wallclock_hours"],
            p["expected_cost_usd"])  # fmt: skip


def test_the_svg_draws_the_plans_json_frontier_best_and_runners_up(capsys, tmp_path):
    path = tmp_path / "choice.svg"
    plan = plan_with_svg(capsys, path)
    root = ET.parse(path).getroot()
    best, alts, front = plan["best"], plan["alternatives"], plan["frontier"]
    assert alts and len(front) >= 3  # the quick start has something to compare

    (best_at,) = centres(root, "best")  # (a) the best plan, once
    for i in range(1, len(alts) + 1):  # (b) one marker per runner-up, none more
        assert len(centres(root, f"runner-up-{i}")) == 1
    assert group(root, f"runner-up-{len(alts) + 1}") is None

    points = centres(root, "frontier")  # (c) one point per frontier plan
    assert len(points) == len(front)
    # (d) left to right in the drawing is shortest to longest in the JSON, and placed to scale on both axes
    by_x = sorted(range(len(points)), key=lambda i: points[i][0])
    ordered = sorted(front, key=lambda p: p["wallclock_hours"])
    assert [p["wallclock_hours"] for p in ordered] == sorted(p["wallclock_hours"] for p in front)
    xs = [points[i][0] for i in by_x]
    ys = [points[i][1] for i in by_x]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    log_x, log_y = scale_of(root, "wall-clock hours") == "log", scale_of(root, "expected cost") == "log"
    assert_affine([p["wallclock_hours"] for p in ordered], xs, log_x)
    assert_affine([p["expected_cost_usd"] for p in ordered], ys, log_y, flipped=True)
    if key(best) in {key(p) for p in front}:  # the star sits on its own frontier point
        where = [key(p) for p in ordered].index(key(best))
        assert best_at == pytest.approx((xs[where], ys[where]), abs=0.01)

    # (e) this planner gives every plan an interval: one bar each way per distinct plan, no "no interval" caption
    distinct = {key(p): p for p in [best, *alts, *front]}
    assert all("wallclock_hours_low" in p for p in distinct.values())
    assert len(bars(root, "interval-hours")) == len(distinct) == len(bars(root, "interval-cost"))
    (caption,) = texts(group(root, "caption"))
    assert NO_INTERVAL not in caption and "80% interval" in caption

    words = texts(root)
    assert any("llama-7b" in t and "200B tokens" in t and "objective cost" in t for t in words)
    for p in distinct.values():  # each point's label
        assert f"{p['nodes']} x {p['instance_type']} ({p['purchase']})" in words


def test_the_same_plan_draws_the_same_bytes(capsys, tmp_path):
    one, two = tmp_path / "one.svg", tmp_path / "two.svg"
    plan_with_svg(capsys, one)
    plan_with_svg(capsys, two)
    assert one.read_bytes() == two.read_bytes()  # (f)
    assert b"<dc:date>" not in one.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.svg", "two.svg"]  # no temp file left beside


def plans_with_intervals(hours=(10.0, 20.0, 40.0), costs=(300.0, 200.0, 150.0)) -> dict:
    plans = [
        {"wallclock_hours": h, "expected_cost_usd": c, "nodes": n, "instance_type": t, "purchase": "spot",
         "cloud": "aws", "region": "us-east-1",
         "wallclock_hours_low": h * 0.5, "wallclock_hours_high": h * 1.25,
         "expected_cost_usd_low": c * 0.75, "expected_cost_usd_high": c * 1.5}
        for h, c, n, t in zip(hours, costs, (8, 4, 2), ("p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge"), strict=True)
    ]  # fmt: skip
    return {"best": plans[2], "alternatives": [plans[1], plans[0]], "frontier": plans}


@pytest.mark.parametrize("hours, costs, scale", [
    ((10.0, 20.0, 40.0), (300.0, 200.0, 150.0), "linear"),
    ((2.0, 20.0, 400.0), (9000.0, 700.0, 150.0), "log"),
])  # fmt: skip
def test_intervals_are_drawn_as_bars_from_low_to_high(hours, costs, scale):
    data = plans_with_intervals(hours, costs)
    root = ET.fromstring(svg_bytes(data, "test job", "cost"))
    assert scale_of(root, "wall-clock hours") == scale_of(root, "expected cost") == scale
    log = scale == "log"
    points = centres(root, "frontier")
    fx = lambda v: math.log(v) if log else v  # noqa: E731
    px_x = (points[2][0] - points[0][0]) / (fx(hours[2]) - fx(hours[0]))
    px_y = (points[2][1] - points[0][1]) / (fx(costs[2]) - fx(costs[0]))
    x_bars, y_bars = bars(root, "interval-hours"), bars(root, "interval-cost")
    assert len(x_bars) == len(y_bars) == 3
    for p, (x, y) in zip(data["frontier"], points, strict=True):
        (xb,) = [b for b in x_bars if b[1] == pytest.approx(y, abs=0.01)]  # the horizontal bar through the point
        assert sorted([xb[0], xb[2]]) == pytest.approx(
            [x + (fx(p["wallclock_hours_low"]) - fx(p["wallclock_hours"])) * px_x,
             x + (fx(p["wallclock_hours_high"]) - fx(p["wallclock_hours"])) * px_x], abs=0.05)
        (yb,) = [b for b in y_bars if b[0] == pytest.approx(x, abs=0.01)]
        assert sorted([yb[1], yb[3]]) == pytest.approx(sorted(
            [y + (fx(p["expected_cost_usd_low"]) - fx(p["expected_cost_usd"])) * px_y,
             y + (fx(p["expected_cost_usd_high"]) - fx(p["expected_cost_usd"])) * px_y]), abs=0.05)
    assert not any(NO_INTERVAL in t for t in texts(root))


def test_point_estimates_draw_no_bars_and_say_so():
    data = plans_with_intervals()
    for p in data["frontier"]:
        for end in ("wallclock_hours_low", "wallclock_hours_high", "expected_cost_usd_low", "expected_cost_usd_high"):
            del p[end]
    root = ET.fromstring(svg_bytes(data, "test job", "time"))
    assert group(root, "interval-hours") is None and group(root, "interval-cost") is None
    assert texts(group(root, "caption")) == [NO_INTERVAL]
    assert len(centres(root, "frontier")) == 3 and len(centres(root, "best")) == 1


@pytest.mark.parametrize("name", ["missing/choice.svg", "choice.png", "choice", "folder.svg"])
def test_a_bad_plot_path_is_one_line_before_the_search_and_writes_nothing(capsys, tmp_path, monkeypatch, name):
    import cli.planner.optimizer as optimizer

    (tmp_path / "folder.svg").mkdir()
    monkeypatch.setattr(optimizer, "search", lambda *a, **k: pytest.fail("searched before checking --plot"))
    before = sorted(tmp_path.rglob("*"))
    line = one_line_error(capsys, *QUICK, "--plot", str(tmp_path / name))  # (g)
    assert "--plot" in line and name.split("/")[0] in line
    assert sorted(tmp_path.rglob("*")) == before


def test_the_terminal_picture_marks_the_best_and_runners_up_within_the_width(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code, out, err = run_in_process(capsys, *QUICK, "--plot", "-")
    assert code == 0, err
    _, json_out, _ = run_in_process(capsys, *QUICK, "--json")
    plan = json.loads(json_out)
    picture = out[out.index("cost (USD"):].splitlines()  # after the tables
    assert max(len(line) for line in picture) <= 60  # (h)
    grid = [line for line in picture if "|" in line]
    assert sum(line.count("*") for line in grid) == 1
    legend = [line for line in picture if line.startswith("* ")]
    assert len(legend) == 1 and plan["best"]["instance_type"] in legend[0]
    for i, alt in enumerate(plan["alternatives"], 1):
        (line,) = [line for line in picture if line.startswith(f"{i} ")]
        assert f"{alt['nodes']} x {alt['instance_type']}" in line


def test_the_terminal_picture_puts_each_plan_where_its_hours_and_cost_are():
    picture = text_plot(plans_with_intervals(), 72).splitlines()
    grid = [line.split("|", 1)[1] for line in picture if "|" in line]
    where = {ch: (r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch != " "}
    assert set(where) == {"*", "1", "2"}  # every frontier plan is the best or a runner-up here
    # runner-up 2 is the fastest and dearest: top left; the best the slowest and cheapest: bottom right
    assert where["2"] == (0, 0)
    assert where["*"] == (len(grid) - 1, max(len(row) for row in grid) - 1)
    assert where["2"][1] < where["1"][1] < where["*"][1] and where["2"][0] < where["1"][0] < where["*"][0]
    assert "wall-clock hours (linear scale)" in "\n".join(picture)


def test_the_terminal_picture_cannot_go_into_json(capsys):
    line = one_line_error(capsys, *QUICK, "--plot", "-", "--json")  # (i)
    assert "--plot -" in line and "JSON" in line


def test_a_plan_without_plot_does_not_import_matplotlib():
    code = ("import sys\nfrom cli.app import main\ntry:\n    main(['plan', '--params', '1B', '--tokens', '1B', '--json'])\n"
            "except SystemExit:\n    pass\nprint(any(m.startswith('matplotlib') for m in sys.modules), file=sys.stderr)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "False", out.stderr
