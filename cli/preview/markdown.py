"""The pull-request comment: a cost diff in GitHub markdown, with a hidden marker per stack.

The marker (`<!-- trainfleet-cost-diff:<stack> -->`) lets a workflow find and update its own comment
instead of adding a new one on every push. GitHub rejects comment bodies over 65,536 characters; the
summary always comes first and is always kept, the per-resource tables are cut row by row when the
whole would not fit, and the cut is said in the comment.
"""

from __future__ import annotations

from typing import Any

from cli.preview.diff import CostDiff, DiffRow
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED

GITHUB_COMMENT_LIMIT = 65_536
MARKER_PREFIX = "<!-- trainfleet-cost-diff:"
OP_LABEL = {
    "create": "added",
    "delete": "removed",
    "update": "changed",
    "replace": "replaced",
    "same": "unchanged",
}


def marker(stack: str) -> str:
    return f"{MARKER_PREFIX}{stack} -->"


def _money(value: float | None) -> str:
    return "not estimable" if value is None else f"${value:,.2f}"


def _delta(value: float | None) -> str:
    if value is None:
        return "not estimable"
    if abs(value) < 0.005:
        return "$0.00"
    return f"{'+' if value > 0 else '-'}${abs(value):,.2f}"


def _pct(base: float, delta: float) -> str:
    if abs(base) < 0.005:
        return ""
    return f" ({'+' if delta >= 0 else ''}{delta / base * 100:.1f}%)"


def _cell(value: Any, limit: int = 60) -> str:
    text = "∅" if value is None else str(value)
    text = " ".join(text.split()).replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row_cost(row: DiffRow) -> str:
    if row.status in (NOT_PRICED, NOT_ESTIMABLE) and row.delta is None:
        side = row.head or row.base
        return f"{row.status}: {_cell(side.reason if side else '', 70)}"
    return _delta(row.delta)


def summary_lines(diff: CostDiff) -> list[str]:
    s = diff.summary()
    base_m, head_m = diff.base.monthly_total, diff.head.monthly_total
    lines = [
        marker(diff.stack),
        f"### trainfleet cost diff: `{diff.stack}`",
        "",
        f"**Monthly: {_money(base_m)} → {_money(head_m)} ({_delta(diff.monthly_delta)}{_pct(base_m, diff.monthly_delta)})**"
        f" · planned job: {_money(diff.base.job_total)} → {_money(diff.head.job_total)} ({_delta(diff.job_delta)})",
        "",
        f"Infra: **{s['added']} added, {s['changed']} changed, {s['replaced']} replaced, {s['removed']} removed**"
        f" ({s['unchanged']} unchanged) · base `{_cell(diff.base_label, 80)}` → head `{_cell(diff.head_label, 80)}`",
    ]
    unknown = diff.unknown_rows
    if unknown:
        names = ", ".join(f"`{r.name}`" for r in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        lines += [
            "",
            f"> ⚠️ {len(unknown)} changed resource(s) not priced or not estimable, left out of the totals: {names}",
        ]
    elif not s["complete"]:
        lines += ["", "> ⚠️ Some unchanged resources are not priced; totals leave them out."]
    guard = diff.head.guardrail_usd
    if guard is not None and head_m > guard:
        lines += [
            "",
            f"> 🛑 Head estimate {_money(head_m)}/month exceeds this stack's guardrail {_money(guard)}.",
        ]
    return lines


def _resource_table(rows: list[DiffRow]) -> list[str]:
    out = [
        "| resource | type | change | base $/mo | head $/mo | Δ $/mo |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        base = "—" if r.base is None else (_money(r.base_monthly) if r.base.status != FREE else "free")
        head = "—" if r.head is None else (_money(r.head_monthly) if r.head.status != FREE else "free")
        out.append(
            f"| `{_cell(r.name, 50)}` | `{_cell(r.type, 60)}` | {OP_LABEL.get(r.op, r.op)} | {base} | {head} | {_row_cost(r)} |"
        )
    return out


def _input_lines(rows: list[DiffRow]) -> list[str]:
    out = []
    for r in rows:
        for c in r.changes:
            out.append(
                f"- `{_cell(r.name, 50)}` `{_cell(c.path, 70)}`: `{_cell(c.base)}` → `{_cell(c.head)}`"
            )
    return out


def _usage_lines(diff: CostDiff) -> list[str]:
    return [f"- `{k}` = {v.value:g} {v.unit} ({_cell(v.source, 140)})" for k, v in diff.head.usage.items()]


def render(diff: CostDiff, limit: int = GITHUB_COMMENT_LIMIT, command: str = "") -> str:
    """The comment body; never longer than `limit` characters, the summary always kept whole."""
    head = summary_lines(diff)
    footer = [
        "",
        "<sub>Prices: embedded catalog (instances) and list prices (storage, transfer); "
        f"see `trainfleet catalog show`. {('Reproduce: `' + command + '`') if command else ''}</sub>",
    ]
    changed = [r for r in diff.rows if r.op != "same" or (r.delta is not None and abs(r.delta) > 0.005)]
    changed.sort(key=lambda r: -(abs(r.delta) if r.delta is not None else float("inf")))
    inputs = _input_lines([r for r in changed if r.changes])
    sections = [
        (
            f"Cost by resource ({len(changed)} changed)",
            _resource_table(changed) if changed else ["No resource changes."],
        ),
        (f"Changed inputs ({len(inputs)})", inputs or ["No input changes."]),
        ("Usage assumptions", _usage_lines(diff)),
    ]
    body = list(head)
    budget = limit - len("\n".join(head + footer)) - 400  # room for the truncation notes and tags
    cut = 0
    for title, lines in sections:
        opener = ["", f"<details><summary>{title}</summary>", ""]
        closer = ["", "</details>"]
        cost = len("\n".join(opener + closer)) + 1
        if cost > budget:
            cut += len(lines)
            continue
        budget -= cost
        kept = []
        for i, line in enumerate(lines):
            need = len(line) + 1
            if need > budget:
                cut += len(lines) - i
                break
            kept.append(line)
            budget -= need
        body += opener + kept + closer
    if cut:
        body += [
            "",
            f"> ✂️ {cut} line(s) cut to stay under GitHub's {limit:,}-character comment limit; "
            "run the command with `--format json` for everything.",
        ]
    text = "\n".join(body + footer) + "\n"
    if len(text) > limit:  # cannot happen unless the summary alone is over the limit
        text = text[: limit - 1]
    return text


def find_marker(body: str) -> str | None:
    """The stack named by a comment's marker, if it has one."""
    start = body.find(MARKER_PREFIX)
    if start < 0:
        return None
    end = body.find(" -->", start)
    return body[start + len(MARKER_PREFIX) : end] if end > 0 else None
