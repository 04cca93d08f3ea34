"""A picture of the plan's choice: the cost/time frontier, the best plan and the runners-up.

`write_svg` draws the `plan --json` dict with matplotlib into an SVG file; `text_plot` draws the same points
as characters for a terminal. matplotlib is imported only when an SVG is drawn: a plan without --plot never loads it.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from infra.errors import TrainfleetError, shown

NO_INTERVAL = "no interval: the planner gives point estimates"
WITH_INTERVAL = "bars: the 80% interval of wall-clock hours and cost"
LOG_SPAN = 10  # an axis whose values span more than this factor is drawn on a log scale
BOUNDS = ("wallclock_hours_low", "wallclock_hours_high", "expected_cost_usd_low", "expected_cost_usd_high")
RUNNER_MARKERS = ("s", "^", "D", "v", "P", "X", "p", "h", "<", ">")


def check_target(value: str, json_out: bool) -> Path | None:
    """The --plot value checked before the search: None for the terminal ("-"), else the SVG path."""
    from infra.atomic import check_target as check_writable

    if value == "-":
        if json_out:
            raise TrainfleetError("--plot - would mix a text picture into the JSON on stdout; "
                                  "use --plot FILE.svg with --json, or drop --json")  # fmt: skip
        return None
    path = Path(value)
    if path.suffix.lower() != ".svg":
        raise TrainfleetError(f"--plot {shown(value, 160)} is not an .svg file; name a FILE.svg, or - for the terminal")
    check_writable(path, "--plot")
    return path


def label(p: dict) -> str:
    return f"{p['nodes']} x {p['instance_type']} ({p['purchase']})"


def _key(p: dict) -> tuple:
    return (p["cloud"], p["region"], p["instance_type"], p["nodes"], p["purchase"], p["wallclock_hours"],
            p["expected_cost_usd"])  # fmt: skip


def _distinct(out: dict) -> list[dict]:
    """Every plan once: the best, the runners-up, then the frontier plans that are neither."""
    seen: dict[tuple, dict] = {}
    for p in [out["best"], *out["alternatives"], *out["frontier"]]:
        seen.setdefault(_key(p), p)
    return list(seen.values())


def log_scale(values: list[float]) -> bool:
    return min(values) > 0 and max(values) / min(values) > LOG_SPAN


def _scale_word(log: bool) -> str:
    return "log scale" if log else "linear scale"


def _has_interval(p: dict) -> bool:
    return all(isinstance(p.get(k), int | float) for k in BOUNDS)


def svg_bytes(out: dict, job: str, objective: str) -> bytes:
    """The SVG of the choice; the same `out` gives the same bytes (fixed hash salt, no date)."""
    import matplotlib

    # svg.fonttype none: text stays text (searchable, and no glyph paths whose ids could vary)
    with matplotlib.rc_context({"svg.hashsalt": "trainfleet-plan", "svg.fonttype": "none"}):
        buf = io.BytesIO()
        figure(out, job, objective).savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def figure(out: dict, job: str, objective: str):
    """The matplotlib Figure (Agg canvas) of the choice."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    plans = _distinct(out)
    hours = [p["wallclock_hours"] for p in plans]
    costs = [p["expected_cost_usd"] for p in plans]
    log_x, log_y = log_scale(hours), log_scale(costs)
    fig = Figure(figsize=(10, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log" if log_x else "linear")
    ax.set_yscale("log" if log_y else "linear")
    front = sorted(out["frontier"], key=lambda p: p["wallclock_hours"])
    ax.step([p["wallclock_hours"] for p in front], [p["expected_cost_usd"] for p in front], where="post",
            color="0.45", marker="o", markersize=6, markerfacecolor="white", zorder=2,
            label="frontier: no plan is both faster and cheaper", gid="frontier")  # fmt: skip
    for i, p in enumerate(out["alternatives"], 1):
        ax.plot([p["wallclock_hours"]], [p["expected_cost_usd"]], linestyle="none",
                marker=RUNNER_MARKERS[(i - 1) % len(RUNNER_MARKERS)], markersize=9, color=f"C{i % 10}",
                zorder=5, label=f"runner-up {i}: {label(p)} {p['cloud']} {p['region']}", gid=f"runner-up-{i}")  # fmt: skip
    b = out["best"]
    ax.plot([b["wallclock_hours"]], [b["expected_cost_usd"]], linestyle="none", marker="*", markersize=20,
            color="C3", markeredgecolor="black", zorder=4,
            label=f"best: {label(b)} {b['cloud']} {b['region']}", gid="best")  # fmt: skip
    ranged = [p for p in plans if _has_interval(p)]
    if ranged:
        bars = ax.errorbar(
            [p["wallclock_hours"] for p in ranged], [p["expected_cost_usd"] for p in ranged],
            xerr=[[p["wallclock_hours"] - p["wallclock_hours_low"] for p in ranged],
                  [p["wallclock_hours_high"] - p["wallclock_hours"] for p in ranged]],
            yerr=[[p["expected_cost_usd"] - p["expected_cost_usd_low"] for p in ranged],
                  [p["expected_cost_usd_high"] - p["expected_cost_usd"] for p in ranged]],
            fmt="none", ecolor="0.7", elinewidth=1, capsize=3, zorder=1,
        )  # fmt: skip
        x_bars, y_bars = bars.lines[2]
        x_bars.set_gid("interval-hours")
        y_bars.set_gid("interval-cost")
    missing = len(plans) - len(ranged)
    caption = (NO_INTERVAL if not ranged else
               f"{WITH_INTERVAL}; none on {missing} of {len(plans)} plans (point estimates)" if missing else
               WITH_INTERVAL)  # fmt: skip
    fig.text(0.01, 0.005, caption, fontsize=8, color="0.3", ha="left", va="bottom", gid="caption")
    ax.set_xlabel(f"wall-clock hours, expected ({_scale_word(log_x)})")
    ax.set_ylabel(f"expected cost, USD ({_scale_word(log_y)})")
    ax.yaxis.set_major_formatter(StrMethodFormatter("${x:,.0f}"))
    ax.set_title(f"{job}, objective {objective}", fontsize=11)
    ax.grid(True, which="major", color="0.92")
    ax.legend(fontsize=8, loc="upper right")
    _annotate(ax, fig, plans)
    return fig


def _annotate(ax, fig, plans: list[dict]) -> None:
    """'N x instance (purchase)' beside each point: the first of a few places beside it (right, left, then a
    line further up or down) that overlaps no earlier label or point and stays inside the axes."""
    fig.canvas.draw()  # fixes the limits and the layout, so points map to pixels
    pt = fig.dpi / 72
    box = ax.get_window_extent()
    points = ax.transData.transform([(p["wallclock_hours"], p["expected_cost_usd"]) for p in plans])
    taken = [(x - 5 * pt, x + 5 * pt, y - 5 * pt, y + 5 * pt) for x, y in points]  # the markers
    placed: list[tuple[str, float, float]] = []
    for p, (px, py) in zip(plans, points, strict=True):
        text = label(p)
        if any(t == text and abs(x - px) < 3 and abs(y - py) < 3 for t, x, y in placed):
            continue  # the same words on the same spot (one fleet in two regions): once is enough
        width, height = len(text) * 4.1 * pt, 8 * pt  # 7 pt text
        spots = [(side, dy) for dy in (0, 9, -9, 18, -18, 27, -27) for side in (1, -1)]
        for side, dy in spots:
            x0 = px + 8 * pt if side > 0 else px - 8 * pt - width
            y = py + dy * pt
            rect = (x0, x0 + width, y - height / 2, y + height / 2)
            inside = box.x0 <= rect[0] and rect[1] <= box.x1 and box.y0 <= rect[2] and rect[3] <= box.y1
            if inside and not any(a < rect[1] and rect[0] < b and c < rect[3] and rect[2] < d for a, b, c, d in taken):
                break
        else:
            side, dy = 1, 0
        taken.append(rect)
        placed.append((text, px, py))
        ax.annotate(text, (p["wallclock_hours"], p["expected_cost_usd"]), xytext=(8 * side, dy),
                    textcoords="offset points", fontsize=7, color="0.2", va="center",
                    ha="left" if side > 0 else "right",
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})  # fmt: skip


def write_svg(out: dict, path: Path, job: str, objective: str) -> Path:
    """Draw and write the SVG whole (a temp file in the same folder, renamed over `path`)."""
    from infra.atomic import write_file

    return write_file(path, svg_bytes(out, job, objective), what="--plot")


# ---- the terminal picture ----------------------------------------------------------------------------------------


def _compact(value: float, money: bool) -> str:
    sign = "$" if money else ""
    for unit, size in (("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{sign}{value / size:.3g}{unit}"
    return f"{sign}{value:.3g}" if value < 100 else f"{sign}{value:,.0f}"


def _mapper(lo: float, hi: float, log: bool, cells: int):
    """value -> cell index 0..cells-1, and cell index -> value (for the ticks)."""
    f = math.log if log else (lambda v: v)
    a, b = f(lo), f(hi)
    span = (b - a) or 1.0

    def to_cell(v: float) -> int:
        return min(cells - 1, max(0, round((f(v) - a) / span * (cells - 1))))

    def to_value(i: int) -> float:
        t = a + span * i / max(1, cells - 1)
        return math.exp(t) if log else t

    return to_cell, to_value


def text_plot(out: dict, width: int = 72, height: int = 20) -> str:
    """The frontier as characters: '*' the best plan, 1-9 the runners-up, 'o' the other frontier plans; a legend
    below names each. No line is wider than `width`."""
    width = max(30, min(72, width))
    best, alts = out["best"], out["alternatives"]
    marked = [("*", best)] + [(str(i) if i < 10 else "+", p) for i, p in enumerate(alts, 1)]
    keys = {_key(p) for _, p in marked}
    marked += [("o", p) for p in sorted(out["frontier"], key=lambda p: p["wallclock_hours"]) if _key(p) not in keys]
    hours = [p["wallclock_hours"] for _, p in marked]
    costs = [p["expected_cost_usd"] for _, p in marked]
    log_x, log_y = log_scale(hours), log_scale(costs)
    rows = height - 3  # the x axis line, its ticks and its title under the plot
    y_cell, y_value = _mapper(min(costs), max(costs), log_y, rows)
    y_ticks = {r: _compact(y_value(rows - 1 - r), True) for r in (0, rows // 3, 2 * rows // 3, rows - 1)}
    gutter = max(len(t) for t in y_ticks.values()) + 1
    cols = width - gutter - 1
    x_cell, x_value = _mapper(min(hours), max(hours), log_x, cols)
    grid = [[" "] * cols for _ in range(rows)]
    under: dict[int, str] = {}  # marked index -> the symbol drawn over it
    owner: dict[tuple[int, int], str] = {}
    for i, (sym, p) in enumerate(marked):  # the best first, so it is never hidden
        cell = (rows - 1 - y_cell(p["expected_cost_usd"]), x_cell(p["wallclock_hours"]))
        if cell in owner:
            under[i] = owner[cell]
            continue
        owner[cell] = sym
        grid[cell[0]][cell[1]] = sym
    lines = [f"{'cost (USD, ' + _scale_word(log_y) + ')':>{gutter + 10}}"]
    for r, row in enumerate(grid):
        lines.append(f"{y_ticks.get(r, ''):>{gutter - 1}} |{''.join(row)}".rstrip())
    lines.append(" " * gutter + "+" + "-" * cols)
    ticks = [" "] * (cols + 8)
    for c in (0, cols // 3, 2 * cols // 3, cols - 1):
        text = _compact(x_value(c), False)
        start = min(c, cols - len(text))
        ticks[start:start + len(text)] = text
    lines.append((" " * (gutter + 1) + "".join(ticks)).rstrip()[:width])
    lines.append(f"{'wall-clock hours (' + _scale_word(log_x) + ')':>{min(width, gutter + cols)}}")
    for i, (sym, p) in enumerate(marked):
        hidden = f" (under {under[i]})" if i in under else ""
        lines.append(_legend(sym, p, hidden, width))
    return "\n".join(lines)


def _legend(sym: str, p: dict, hidden: str, width: int) -> str:
    """'* 32 x Standard_ND96asr_v4 (spot) 71.1 h $6.2K azure eastus': the later parts only as width allows."""
    head = f"{sym} {label(p)}"
    parts = [hidden, f" {p['wallclock_hours']:,.1f} h {_compact(p['expected_cost_usd'], True)}",
             f" {p['cloud']} {p['region']}"]  # in the order they are dropped last to first
    kept = [bool(hidden)] + [False, False]
    for i in (1, 2):
        if len(head) + sum(len(q) for q, k in zip(parts, kept, strict=True) if k) + len(parts[i]) <= width:
            kept[i] = True
    line = head + "".join(part for i, part in enumerate(parts[1:], 1) if kept[i]) + (hidden if kept[0] else "")
    return line if len(line) <= width else line[: width - 3] + "..."
