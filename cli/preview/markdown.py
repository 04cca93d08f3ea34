"""The pull-request comment: a cost diff in GitHub markdown, with a hidden marker per stack.

The marker (`<!-- trainfleet-cost-diff:<stack> -->`) lets a workflow find and update its own comment
instead of adding a new one on every push. The comment is written to be read in ten seconds:

1. the summary, always first and always whole: monthly before -> after (delta, %), the planned job and its
   expected cost with interruptions per fleet, the monthly budget and the guardrail (before -> after when
   either changes), what is left out of the totals (not priced / not estimable, counted by type; resources a
   preview document leaves out), the infra counts, and every free resource the change touches on one line;
2. details, folded: the changed resources that cost something (one row each), their cost split by component
   (base -> head per component), and the changed inputs (user data decoded and summarised as a line diff,
   never dumped);
3. the assumptions (usage figures, the expected-cost model's assumptions), folded.

GitHub rejects comment bodies over 65,536 characters. When the whole would not fit, the details are cut
first (each section to a fair share of the room, whole lines, largest cost change first), the assumptions
only after them, and the summary never; the cut is said in the comment.

A diff that changes nothing (no resource added, removed, changed or replaced, no cost moved) renders as a
short "no cost change" body with the same marker, so the workflow replaces a stale comment rather than
leaving old numbers up; it carries NO_CHANGE_TAG so a poster can tell it needs no new comment of its own.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import gzip
import hashlib
import re
import zlib
from typing import Any

from cli.planner.uncertainty import PLAN_INTERVAL
from cli.preview.diff import CostDiff, DiffRow, ExpectedChange, InputChange, cents_delta
from cli.preview.model import FREE, PRICED, CostComponent, Estimate, FleetExpectation, PricedResource

GITHUB_COMMENT_LIMIT = 65_536
MARKER_PREFIX = "<!-- trainfleet-cost-diff:"
# The second line of a body that says the stack's cost did not change: such a body replaces an earlier
# comment of the stack, but is not worth a new comment (cost-comment.js and github_comment.decide).
NO_CHANGE_TAG = "<!-- trainfleet-no-cost-change -->"
OP_LABEL = {
    "create": "added",
    "delete": "removed",
    "update": "changed",
    "replace": "replaced",
    "same": "unchanged",
}
CUT_NOTE_ROOM = 400  # characters kept for the truncation note


def marker(stack: str) -> str:
    return f"{MARKER_PREFIX}{stack} -->"


def _money(value: float | None) -> str:
    """A known amount; an unknown one is "unknown" here, and callers that know why say why (its status)."""
    return "unknown" if value is None else f"${value:,.2f}"


def _delta(value: float | None) -> str:
    if value is None:
        return "unknown"
    if abs(value) < 0.005:
        return "$0.00"
    return f"{'+' if value > 0 else '-'}${abs(value):,.2f}"


def _pct(base: float, delta: float) -> str:
    if abs(base) < 0.005:
        return ""
    return f", {'+' if delta >= 0 else ''}{delta / base * 100:,.1f}%"


def _cell(value: Any, limit: int = 60) -> str:
    """A value for a table cell or inline code: one line, no pipe or backtick, at most `limit` characters (a
    value, not prose: cut where the limit falls, marked with …)."""
    text = "∅" if value is None else str(value)
    text = " ".join(text.split()).replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _words(value: str, limit: int = 300) -> str:
    """Prose (a reason, an assumption, a source) on one line: whole words only; past `limit` characters it
    ends at the last whole word, marked with …."""
    text = " ".join(value.split()).replace("|", "\\|").replace("`", "'")
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + " …"


def _type_label(token: str) -> str:
    from cli.preview.report import type_label  # report imports this module: imported when first used

    return type_label(token)


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


# ---- one row's sides -----------------------------------------------------------------------------------


def _side_cell(side: PricedResource | None) -> str:
    """A side's monthly cost as the table shows it: — (no such side), free, $x, or its status."""
    if side is None:
        return "—"
    if side.status == FREE:
        return "free"
    cost = side.monthly_cost
    return side.status if cost is None else _money(cost)  # not priced / not estimable, never "$0"


def _unknown_side(row: DiffRow) -> PricedResource | None:
    """The side whose cost is unknown (head first), or None when both are known."""
    for side in (row.head, row.base):
        if side is not None and side.monthly_cost is None:
            return side
    return None


def _row_cost(row: DiffRow) -> str:
    side = _unknown_side(row)
    if row.delta is None and side is not None:
        return f"{side.status}: {_words(side.reason, 90)}"
    return _delta(row.delta)


def _is_free(row: DiffRow) -> bool:
    """Every side the row has is free: no charge of its own before or after."""
    sides = [s for s in (row.base, row.head) if s is not None]
    return bool(sides) and all(s.status == FREE for s in sides)


def has_changes(diff: CostDiff) -> bool:
    """Whether the diff changes anything: a resource added, removed, changed or replaced, or a cost moved."""
    if any(r.op != "same" for r in diff.rows):
        return True
    if any(r.delta is not None and abs(r.delta) >= 0.005 for r in diff.rows):
        return True
    expected = diff.expected_delta
    return abs(diff.monthly_delta) >= 0.005 or abs(diff.list_job_delta) >= 0.005 or bool(expected)


def changed_rows(diff: CostDiff) -> list[DiffRow]:
    """Rows the change touches (op other than same, or a cost that moved), largest cost change first,
    unknown deltas before all."""
    rows = [r for r in diff.rows if r.op != "same" or (r.delta is not None and abs(r.delta) >= 0.005)]
    rows.sort(key=lambda r: (-(abs(r.delta) if r.delta is not None else float("inf")), r.urn))
    return rows


# ---- free resources: one line ----------------------------------------------------------------------------

# (a piece of the free reason, lower-cased; the short label) in order: the first that matches names the group
FREE_LABELS = (
    ("read, not managed", "read-only"),
    ("component:", "component"),
    ("provider is configuration", "provider"),
    ("iam", "IAM"),
    ("identit", "IAM"),
    ("role assignment", "IAM"),
    ("networking", "networking"),
    ("template", "template"),
    ("attaching a volume", "attachment"),
    ("topic", "alerting"),
    ("eventbridge", "alerting"),
    ("budget", "budget"),
    ("cost allocation tag", "cost tags"),
    ("report", "billing export"),
    ("billing export", "billing export"),
    ("bucket configuration", "storage config"),
    ("storage configuration", "storage config"),
    ("random values", "random/local"),
    ("no billable component", "nothing billable"),
)


def free_label(side: PricedResource) -> str:
    """A short group name for a free resource: from why it is free, else its type's module (aws:s3 -> s3)."""
    reason = side.reason.lower()
    for piece, label in FREE_LABELS:
        if piece in reason:
            return label
    parts = side.resource.type.split(":")
    if len(parts) != 3:
        return side.resource.type
    module = parts[1].split("/")[0]
    return parts[0] if module in ("", "index") else module  # random:index/... -> random


def free_line(rows: list[DiffRow]) -> str:
    """Every free resource among `rows` on one line: '17 free resources (...): 9 IAM, 5 networking, ...'."""
    free = [r for r in rows if _is_free(r)]
    if not free:
        return ""
    groups: dict[str, int] = {}
    for r in free:
        label = free_label(r.head or r.base)  # type: ignore[arg-type]
        groups[label] = groups.get(label, 0) + 1
    listed = ", ".join(f"{n} {label}" for label, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"{_plural(len(free), 'free resource')} changed (no charge of their own, not in the table): {listed}"
    )


# ---- the summary --------------------------------------------------------------------------------------------


def _short_of(est: Estimate) -> str:
    """Why a total is a lower bound: '' when it is not."""
    parts = []
    if est.unknown:
        parts.append(f"{_plural(len(est.unknown), 'resource')} without a price")
    if est.absent:
        parts.append(f"{est.absent} unchanged left out of the document")
    return f" (a lower bound: {', '.join(parts)})" if parts else ""


def _budget_state(est: Estimate) -> tuple[tuple, str] | None:
    """((limit, over), text) against trainfleet:budget.monthly_limit_usd, or None without a budget."""
    limit = est.budget_usd
    if limit is None:
        return None
    total = est.monthly_total
    if total > limit:
        return (limit, True), f"🛑 **over by {_money(total - limit)}**"
    return (limit, False), f"within ({_money(limit - total)} to spare){_short_of(est)}"


def _guardrail_state(est: Estimate) -> tuple[tuple, str] | None:
    """((limit, outcome), text) against trainfleet:budget.fail_above_usd (report.check_guardrail's rule),
    or None without a guardrail."""
    limit = est.guardrail_usd
    if limit is None:
        return None
    total = est.monthly_total
    if est.absent:
        return (limit, "unchecked"), f"not checked: the document leaves out {est.absent} unchanged resources"
    if total > limit:
        return (limit, "fails"), f"🛑 **fails** (over by {_money(total - limit)})"
    return (limit, "pass"), f"pass{_short_of(est)}"


def _before_after(what: str, base: tuple[tuple, str] | None, head: tuple[tuple, str] | None) -> str:
    """'Budget $X/month: within ...' or, when the limit or the outcome changes, 'base → head'."""
    if head is None:
        return ""
    (limit, _), text = head
    if base is None or base[0] == head[0]:
        return f"{what} {_money(limit)}/month: {text}"
    (base_limit, _), base_text = base
    if base_limit == limit:
        return f"{what} {_money(limit)}/month: {base_text} → {text}"
    return f"{what}: {_money(base_limit)}/month, {base_text} → {_money(limit)}/month, {text}"


def _hours(value: float) -> str:
    return f"{value:,.1f} h"


def _expected_side(e: FleetExpectation | None, base_has_any: bool) -> str:
    if e is not None:
        return _money(e.expected_job_usd)
    return "none (new fleet)" if base_has_any else "not assessed"


def _expected_fleet_line(c: ExpectedChange, base_assessed: bool) -> str:
    """One fleet: base -> head expected cost and its change, the wall-clock hours and interruptions behind
    it, and, for the head, what interruptions add to the list price of the same work."""
    b, h = c.base, c.head
    if h is None:
        return f"fleet `{_cell(c.fleet, 40)}`: removed (was {_money(b.expected_job_usd)})"  # type: ignore[union-attr]
    cost = _money(h.expected_job_usd)
    if b is not None or base_assessed:
        cost = f"{_expected_side(b, base_assessed)} → {cost} ({_delta(c.delta)})"
    hours = _hours(h.wall_hours) if b is None else f"{_hours(b.wall_hours)} → {_hours(h.wall_hours)}"
    events = f"~{h.interruptions:,.1f}" if b is None else f"~{b.interruptions:,.1f} → ~{h.interruptions:,.1f}"
    added = _pct(h.list_job_usd, h.expected_job_usd - h.list_job_usd).removeprefix(", ")
    low, high = PLAN_INTERVAL.around(h.expected_job_usd)
    return (
        f"fleet `{_cell(c.fleet, 40)}`: **{cost}**; {hours} wall clock, {events} interruptions and failures;"
        f" at head the same work with nothing lost is {_money(h.list_job_usd)} ({_hours(h.ideal_hours)}),"
        f" interruptions add {added or '0%'}; 80% range {_money(low)} to {_money(high)} (the planner's error on"
        " published whole runs)"
    )


def expected_lines(diff: CostDiff) -> list[str]:
    """The planned job's expected cost with interruptions, base -> head: one bullet with one fleet, a total
    with a sub-bullet per fleet otherwise, and why a side has none; nothing when neither side says anything."""
    changes = diff.expected_changes()
    base_assessed = bool(diff.base.expected)
    out = []
    if len(changes) == 1:
        out.append(f"Expected job with interruptions, {_expected_fleet_line(changes[0], base_assessed)}")
    elif changes:
        head_total = diff.expected_total(diff.head)  # the figure the JSON carries, to the cent
        total = _money(head_total) if head_total is not None else "none"
        if base_assessed:
            total = f"{_money(diff.expected_total(diff.base))} → {total} ({_delta(diff.expected_delta)})"
        out.append(f"Expected job with interruptions, all fleets: **{total}**")
        out += [f"  - {_expected_fleet_line(c, base_assessed)}" for c in changes]
    if diff.head.expected_note:
        out.append(f"No expected job cost with interruptions: {_words(diff.head.expected_note, 300)}")
    if changes and not base_assessed and diff.base.expected_note:
        out.append(f"Base: no expected job cost with interruptions: {_words(diff.base.expected_note, 300)}")
    return out


def _list_job_line(diff: CostDiff) -> str:
    """Every resource at list price over `job_hours`, only when job_hours is the stack's planned hours or a
    usage file's: with the default (one month) it is the monthly run-rate under another name."""
    hours = diff.head.usage.get("job_hours")
    if hours is None or hours.source.startswith("default"):
        return ""
    b, h = diff.base.job_total, diff.head.job_total
    if abs(b) < 0.005 and abs(h) < 0.005:
        return ""
    return (
        f"List price of every resource over job_hours {hours.value:,g} h ({_words(hours.source, 80)}), nothing lost:"
        f" {_money(b)} → {_money(h)} ({_delta(cents_delta(b, h))})"
    )


def _unknown_line(diff: CostDiff) -> str:
    from cli.preview.report import unknown_summary

    head, base = unknown_summary(diff.head), unknown_summary(diff.base)
    if not head and not base:
        return ""
    parts = []
    if head:
        parts.append(f"head {head}")
    if base and base != head:
        parts.append(f"base {base}")
    elif base:
        parts.append("base the same")
    unknown = [(r, _unknown_side(r)) for r in changed_rows(diff) if _unknown_side(r) is not None]
    if unknown:
        names = ", ".join(f"`{_cell(r.name, 40)}` ({side.status})" for r, side in unknown[:5])  # type: ignore[union-attr]
        parts.append(f"changed: {names}{' …' if len(unknown) > 5 else ''}")
    return "⚠️ Cost unknown, left out of the totals: " + "; ".join(parts)


def _absent_line(diff: CostDiff) -> str:
    base, head = diff.base.absent, diff.head.absent
    if not base and not head:
        return ""
    if base == head:
        where = f"the preview documents leave out {_plural(head, 'unchanged resource')}"
    else:
        where = "; ".join(
            f"the {which} document leaves out {_plural(n, 'unchanged resource')}"
            for which, n in (("base", base), ("head", head))
            if n
        )
    return f"ℹ️ {where} (written without --show-sames): the totals cover only what they list"


def summary_lines(diff: CostDiff) -> list[str]:
    """The summary: marker, monthly, then one bullet per thing a reviewer needs before the details."""
    s = diff.summary()
    base_m, head_m = diff.base.monthly_total, diff.head.monthly_total
    monthly = cents_delta(base_m, head_m)
    lines = [
        marker(diff.stack),
        f"### `{_cell(diff.stack, 80)}` · **Monthly run-rate: {_money(base_m)} → {_money(head_m)}"
        f" ({_delta(monthly)}{_pct(base_m, monthly)})**",
        "",
    ]
    bullets = [
        *usage_lines(diff),
        declared_size_line(diff),
        fallback_line(diff),
        *expected_lines(diff),
        _list_job_line(diff),
        _before_after("Budget", _budget_state(diff.base), _budget_state(diff.head)),
        _before_after("Guardrail, fail above", _guardrail_state(diff.base), _guardrail_state(diff.head)),
        _unknown_line(diff),
        _absent_line(diff),
        f"Infra: **{s['added']} added, {s['changed']} changed, {s['replaced']} replaced, {s['removed']} removed**"
        f" ({s['unchanged']} unchanged) · base `{_cell(diff.base_label, 80)}` → head `{_cell(diff.head_label, 80)}`",
        free_line(changed_rows(diff)),
    ]
    return lines + [f"- {b}" for b in bullets if b]


def no_change_lines(diff: CostDiff) -> list[str]:
    """The whole body for a diff that changes nothing: it replaces the stack's earlier comment."""
    head_m = diff.head.monthly_total
    bullets = [
        _before_after("Budget", None, _budget_state(diff.head)),
        _before_after("Guardrail, fail above", None, _guardrail_state(diff.head)),
        _unknown_line(diff),
    ]
    return [
        marker(diff.stack),
        NO_CHANGE_TAG,
        f"### `{_cell(diff.stack, 80)}` · no cost change",
        "",
        f"No cost change for this stack at `{_cell(diff.head_label, 80)}`: **Monthly run-rate: {_money(head_m)}** "
        f"(unchanged), no resource added, changed, replaced or removed.",
    ] + [f"- {b}" for b in bullets if b]


# ---- details: resources, components, inputs --------------------------------------------------------------


def _resource_table(rows: list[DiffRow]) -> tuple[list[str], list[str]]:
    """(header, one line per row)."""
    header = [
        "| resource | type | change | base $/mo | head $/mo | Δ $/mo |",
        "|---|---|---|---:|---:|---:|",
    ]
    out = [
        f"| `{_cell(r.name, 50)}` | `{_cell(_type_label(r.type), 50)}` | {OP_LABEL.get(r.op, r.op)} "
        f"| {_side_cell(r.base)} | {_side_cell(r.head)} | {_row_cost(r)} |"
        for r in rows
    ]
    return header, out


def _shape(c: CostComponent) -> str:
    """A component name without its counts: 'p4d.24xlarge spot (1 node)' and '(4 nodes)' are one line."""
    return re.sub(r"\b\d[\d,.]*(?: nodes?)?\b", "#", c.name)


def _fleet_shape(c: CostComponent) -> str:
    """A node-hour line without its instance type either: 'spot (#)'; other lines keep their whole shape."""
    return f"{c.unit}: {_shape(c).split(' ', 1)[-1]}" if c.unit == "node-hour" else _shape(c)


def pair_components(
    base: list[CostComponent], head: list[CostComponent]
) -> list[tuple[CostComponent | None, CostComponent | None]]:
    """Base and head components matched by name, then by name without its numbers (a node count or a size in
    the name), when that is unambiguous; the rest alone. In head order, then the base's left over."""
    pairs: dict[int, CostComponent | None] = {}  # head index -> base component
    left = list(range(len(base)))
    for j, h in enumerate(head):
        i = next((i for i in left if base[i].name == h.name), None)
        if i is not None:
            pairs[j] = base[i]
            left.remove(i)
    # then by the name without its counts, then (a fleet line: "TYPE PURCHASE (N nodes)") without its
    # instance type either, so p4de.24xlarge spot -> p5.48xlarge spot reads as one line changing
    for shape in (_shape, _fleet_shape):
        for j, h in enumerate(head):
            if j in pairs:
                continue
            same_shape = [i for i in left if shape(base[i]) == shape(h)]
            heads_alike = [k for k, o in enumerate(head) if k not in pairs and shape(o) == shape(h)]
            if len(same_shape) == 1 and len(heads_alike) == 1:
                pairs[j] = base[same_shape[0]]
                left.remove(same_shape[0])
    out: list[tuple[CostComponent | None, CostComponent | None]] = [
        (pairs.get(j), h) for j, h in enumerate(head)
    ]
    return out + [(base[i], None) for i in left]


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _price(value: float) -> str:
    """A unit price with the decimals it has (at least 2, at most 6): $27.44705, $0.045, $0.08."""
    whole, _, cents = f"{value:,.6f}".partition(".")
    return f"${whole}.{cents.rstrip('0').ljust(2, '0')}"


def _unit_price(c: CostComponent) -> str:
    """'$0.045 per GB'."""
    return f"{_price(c.unit_price)} per {c.unit}"  # type: ignore[arg-type]


def _depends(c: CostComponent) -> str:
    keys = ", ".join(c.usage_keys)
    return f"depends on usage: {_unit_price(c)} ({keys} = 0; a usage file sets it)"


def _component_cost(c: CostComponent) -> str:
    """'3,650 node-hour × $8.6505 = $31,574.32', or why there is no figure."""
    if c.monthly_cost is None:
        return "no price"
    if c.usage_based and c.quantity == 0 and c.unit_price:
        return _depends(c)
    if c.quantity is None or c.unit_price is None:
        return _money(c.monthly_cost)
    return f"{_number(c.quantity)} {c.unit} × {_price(c.unit_price)} = {_money(c.monthly_cost)}"


def _usage_tag(c: CostComponent) -> str:
    return f" · usage-based ({', '.join(c.usage_keys)})" if c.usage_based and c.quantity else ""


def _range_text(c: CostComponent) -> str:
    """' · may launch A or B: $low to $high', for a line whose group may launch other instance types."""
    span = c.monthly_range
    if span is None:
        return ""
    return f" · may launch {' or '.join(c.range_types)}: {_money(span[0])} to {_money(span[1])}"


def _resource_types(r: PricedResource) -> tuple[str, ...]:
    return next((c.range_types for c in r.components if c.range_types), ())


def _component_line(b: CostComponent | None, h: CostComponent | None) -> str:
    """One cost line, base -> head: quantity × unit price = cost on each side, the change, and whether it
    rests on usage figures or may launch other types."""
    if b is None and h is not None:
        return f"{_cell(h.name, 70)}: {_component_cost(h)} (new){_usage_tag(h)}{_range_text(h)}"
    if h is None and b is not None:
        return f"{_cell(b.name, 70)}: removed (was {_component_cost(b)})"
    assert b is not None and h is not None
    name = _cell(h.name, 70) if b.name == h.name else f"{_cell(b.name, 60)} → {_cell(h.name, 60)}"
    tail = f"{_usage_tag(h)}{_range_text(h)}"
    if b.monthly_cost is not None and h.monthly_cost is not None:
        d = cents_delta(b.monthly_cost, h.monthly_cost)
        if abs(d) < 0.005:
            return f"{name}: {_component_cost(h)} (unchanged){tail}"
        return f"{name}: {_component_cost(b)} → {_component_cost(h)} ({_delta(d)}){tail}"
    return f"{name}: {_component_cost(b)} → {_component_cost(h)}"


def usage_lines(diff: CostDiff) -> list[str]:
    """The monthly run-rate split into fixed and usage-based, base -> head; and the usage nobody set, each
    with its unit price instead of a $0.00."""
    b, h = diff.base, diff.head
    out = []
    if b.usage_based_total or h.usage_based_total:
        keys = sorted({k for r in h.resources for c in r.components if c.usage_based and c.quantity for k in c.usage_keys})
        out.append(
            f"Fixed {_money(b.fixed_total)} → {_money(h.fixed_total)} ({_delta(cents_delta(b.fixed_total, h.fixed_total))})"
            f" · usage-based {_money(b.usage_based_total)} → {_money(h.usage_based_total)}"
            f" ({_delta(cents_delta(b.usage_based_total, h.usage_based_total))}), resting on {', '.join(keys)}"
            " (assumptions below; `--usage-file` sets them)"
        )  # fmt: skip
    depends = h.depends_on_usage()
    if depends:
        listed = "; ".join(f"{_cell(c.name, 60)} {_unit_price(c)} ({', '.join(c.usage_keys)})" for c in depends)
        out.append(f"Depends on usage, not in the totals (usage 0 by default): {listed}")
    return out


def declared_size_line(diff: CostDiff) -> str:
    """Groups priced at the nodes their stack declares rather than the size input the document shows (kept by
    ignore_changes: the agent's, 0 after a finished job), so the reviewer knows which figure is which."""
    found = []
    for r in diff.head.resources:
        said = next((c.declared_size for c in r.components if c.declared_size), "")
        if said:
            found.append(f"`{_cell(r.resource.name, 40)}` at {_words(said, 240)}")
    return "Fleet size: " + "; ".join(found) if found else ""


def fallback_line(diff: CostDiff) -> str:
    """The monthly run-rate over the instance types the head's groups may launch, when any may launch more
    than one (the figures above price each group at its first type)."""
    span = diff.head.monthly_range
    if span is None:
        return ""
    groups = ", ".join(
        f"`{_cell(r.resource.name, 40)}` may launch {' or '.join(_resource_types(r))}"
        for r in diff.head.resources if r.monthly_range
    )  # fmt: skip
    return (
        f"Fallback instance types: {groups}, so the head's monthly run-rate is {_money(span[0])} to "
        f"{_money(span[1])} (cheapest to dearest it may launch; priced above at each group's first type)"
    )


def component_lines(rows: list[DiffRow]) -> list[list[str]]:
    """Per changed resource with two or more cost components on a side: a nested list, base -> head per
    component. One block of lines per resource (a block is kept or cut whole)."""
    blocks = []
    for r in rows:
        base = r.base.components if r.base is not None and r.base.status == PRICED else []
        head = r.head.components if r.head is not None and r.head.status == PRICED else []
        if max(len(base), len(head)) < 2:
            continue
        block = [f"- `{_cell(r.name, 50)}` ({OP_LABEL.get(r.op, r.op)}, {_row_cost(r)})"]
        block += [f"  - {_component_line(b, h)}" for b, h in pair_components(base, head)]
        blocks.append(block)
    return blocks


# user data: the inputs that carry a boot script or cloud-init document, base64 (AWS userData, Azure
# customData) or plain (GCP metadata user-data / startup-script)
USER_DATA_KEYS = {
    "userdata",
    "userdatabase64",
    "user_data",
    "user_data_base64",
    "customdata",
    "custom_data",
    "user-data",
    "startup-script",
}
MAX_DECODED = 4 * 1024 * 1024


def is_user_data(path: str) -> bool:
    last = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
    return last.lower() in USER_DATA_KEYS


def _text(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(ch) < 32 and ch not in "\t\n\r\f" for ch in text):
        return None
    return text


def decode_payload(value: Any) -> tuple[str, str | None, bytes]:
    """(how it was encoded, its text or None when it is not text, its bytes) of a user-data value: base64
    when it is valid base64 of UTF-8 text (or of gzip of it, as cloud-init accepts), else the string as is.
    A value that is absent is empty."""
    if value is None:
        return "", "", b""
    s = value if isinstance(value, str) else str(value)
    compact = "".join(s.split())
    if compact and len(compact) % 4 == 0 and re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", compact):
        try:
            raw = base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError):
            raw = None
        if raw is not None:
            if raw[:2] == b"\x1f\x8b":
                try:
                    inflated = gzip.decompress(raw)[:MAX_DECODED]
                except (OSError, EOFError, zlib.error):
                    inflated = None
                if inflated is not None and (text := _text(inflated)) is not None:
                    return "gzip+base64", text, inflated
                return "base64", None, raw
            text = _text(raw)
            if text is not None:
                return "base64", text, raw
            if not re.search(r"[^A-Za-z0-9]", s) and len(compact) < 16:
                return "", s, s.encode()  # a short word that merely happens to be valid base64
            return "base64", None, raw
    return "", s, s.encode()


def _kind(text: str | None) -> str:
    if text is None:
        return "binary"
    first = text.lstrip().split("\n", 1)[0].strip().lower()
    if not text.strip():
        return "empty"
    if first.startswith("#cloud-config"):
        return "cloud-config"
    if first.startswith("#cloud-boothook"):
        return "cloud-boothook"
    if first.startswith("#!"):
        return "script"
    if first.startswith("content-type: multipart"):
        return "cloud-init multipart"
    return "text"


def user_data_summary(path: str, base: Any, head: Any) -> str:
    """'userData (base64 script, 412 → 418 lines): +3 −1 lines; first change (line 7): `- …` `+ …`', or,
    for a payload that is not text, its size and sha256 prefix; never the payload itself."""
    b_enc, b_text, b_raw = decode_payload(base)
    h_enc, h_text, h_raw = decode_payload(head)
    b_kind, h_kind = _kind(b_text), _kind(h_text)
    if base is None or head is None:  # one side only: say what the other is
        enc, kind = (h_enc, h_kind) if base is None else (b_enc, b_kind)
    else:
        enc = b_enc if b_enc == h_enc else f"{b_enc or 'plain'} → {h_enc or 'plain'}"
        kind = b_kind if b_kind == h_kind else f"{b_kind} → {h_kind}"
    what = f"{enc} {kind}".strip()
    if b_text is None or h_text is None:

        def digest(raw: bytes) -> str:
            return hashlib.sha256(raw).hexdigest()[:12]

        return (
            f"`{_cell(path, 70)}` ({what}): {len(b_raw):,} → {len(h_raw):,} bytes,"
            f" sha256 {digest(b_raw)} → {digest(h_raw)}"
        )
    a, z = b_text.splitlines(), h_text.splitlines()
    ops = difflib.SequenceMatcher(None, a, z, autojunk=False).get_opcodes()
    added = sum(j2 - j1 for tag, _, _, j1, j2 in ops if tag in ("insert", "replace"))
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag in ("delete", "replace"))
    head_part = f"`{_cell(path, 70)}` ({what}, {len(a):,} → {len(z):,} lines): +{added} −{removed} lines"
    first = next(((i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ops if tag != "equal"), None)
    if first is None:
        return f"{head_part}; only whitespace or line ends differ"
    i1, i2, j1, j2 = first
    shown = []
    if i2 > i1:
        shown.append(f"`- {_cell(a[i1], 60)}`")
    if j2 > j1:
        shown.append(f"`+ {_cell(z[j1], 60)}`")
    return f"{head_part}; first change (line {j1 + 1}): {' '.join(shown)}"


def _input_line(row: DiffRow, c: InputChange) -> str:
    if is_user_data(c.path) and (isinstance(c.base, str) or isinstance(c.head, str)):
        return f"- `{_cell(row.name, 50)}` {user_data_summary(c.path, c.base, c.head)}"
    return f"- `{_cell(row.name, 50)}` `{_cell(c.path, 160)}`: `{_cell(c.base)}` → `{_cell(c.head)}`"


def input_lines(rows: list[DiffRow]) -> list[str]:
    return [_input_line(r, c) for r in rows for c in r.changes]


# ---- assumptions ---------------------------------------------------------------------------------------------


def assumption_lines(diff: CostDiff) -> list[str]:
    """The usage figures IaC cannot know, then the expected-cost model's assumptions per fleet."""
    out = [f"- `{k}` = {v.value:g} {v.unit} ({_words(v.source, 300)})" for k, v in diff.head.usage.items()]
    for e in diff.head.expected:
        if e.assumptions:
            out.append(f"- expected job cost, fleet `{_cell(e.fleet, 40)}`:")
            out += [f"  - {_words(a, 1000)}" for a in e.assumptions]
    return out


# ---- the whole ---------------------------------------------------------------------------------------------


def _section(title: str, lines: list[str]) -> list[str]:
    return ["", f"<details><summary>{title}</summary>", "", *lines, "", "</details>"]


def _cost(lines: list[str]) -> int:
    """Characters `lines` add to the body, each with its newline."""
    return sum(len(line) + 1 for line in lines)


def _fair_shares(needs: list[int], room: int) -> list[int]:
    """Split `room` among sections: each gets what it needs when that is under an equal share of what is
    left, the others split the rest equally."""
    shares = [0] * len(needs)
    pending = sorted(range(len(needs)), key=lambda i: needs[i])
    left = room
    while pending:
        share = left // len(pending)
        i = pending[0]
        if needs[i] <= share:
            shares[i] = needs[i]
            left -= needs[i]
            pending.pop(0)
            continue
        for j in pending:
            shares[j] = share
        break
    return shares


def _fill(blocks: list[list[str]], room: int) -> int:
    """How many of `blocks` (kept whole, in order) fit in `room` characters."""
    n = 0
    for block in blocks:
        need = _cost(block)
        if need > room:
            break
        room -= need
        n += 1
    return n


def _snapshot(key: str) -> str:
    """A catalog source as the footer names it: 'skypilot-aws (catalogs/v8/aws/vms.csv @ 00148f2a, undated)'."""
    from infra.catalog import default_catalog

    source = default_catalog().sources.get(key) or {}
    where = " @ ".join(x for x in (source.get("path", ""), str(source.get("commit", ""))[:8]) if x)
    as_of = str(source.get("as_of", ""))
    when = as_of if as_of[:4].isdigit() else "undated"
    return f"{key} ({where + ', ' if where else ''}{when})"


def prices_line(diff: CostDiff) -> str:
    """Where the prices of both sides come from and when they were observed: the catalog snapshot each
    instance price rests on, the rate table's date, and the oldest price used (or how many carry no date)."""
    lines = [
        c for est in (diff.base, diff.head) for r in est.resources if r.status == PRICED
        for c in r.components if c.monthly_cost is not None
    ]  # fmt: skip
    catalog = [c for c in lines if c.source.startswith("catalog")]
    keys = sorted({k for c in catalog for k in c.source.removeprefix("catalog:").split(",") if k and k != "catalog"})
    parts = []
    if keys:
        parts.append(f"instances from the catalog: {'; '.join(_snapshot(k) for k in keys)}")
    if any(c.source.startswith("rate") for c in lines):
        parts.append("storage, disks, transfer and addresses from list prices recorded by hand, as of 2025")
    undated = [c for c in lines if not c.as_of]
    if undated:
        oldest = (
            f"oldest price used: undated ({_plural(len(undated), 'price')} of {len(lines):,} carry no date;"
            " `trainfleet catalog refresh` fetches dated ones)"
        )
    elif lines:
        oldest = f"oldest price used: {min(c.as_of for c in lines)}"
    else:
        oldest = ""
    return "; ".join(p for p in (*parts, oldest) if p)


def render(diff: CostDiff, limit: int = GITHUB_COMMENT_LIMIT, command: str = "") -> str:
    """The comment body; never longer than `limit` characters, the summary always kept whole."""
    prices = prices_line(diff)
    footer = [
        "",
        f"<sub>Prices: {prices + '; ' if prices else ''}see `trainfleet catalog show`."
        f"{(' Reproduce: `' + command + '`') if command else ''}</sub>",
    ]
    if not has_changes(diff):
        text = "\n".join(no_change_lines(diff) + footer) + "\n"
        return text if len(text) <= limit else text[: limit - 1]
    head = summary_lines(diff)
    changed = changed_rows(diff)
    priced = [r for r in changed if not _is_free(r)]
    header, table = _resource_table(priced)
    splits = component_lines(priced)
    inputs = input_lines(changed)
    # (title, fixed lines, blocks kept or cut whole, what a block is), the sections with something to show
    details = [
        (f"Cost by resource ({len(priced)} changed", header, [[line] for line in table], "table row"),
        (f"Cost split by component ({_plural(len(splits), 'resource')}", [], splits, "component split"),
        (f"Changed inputs ({len(inputs)}", [], [[line] for line in inputs], "input change"),
    ]
    details = [d for d in details if d[2]]
    assumptions = assumption_lines(diff)

    room = limit - _cost(head + footer) - CUT_NOTE_ROOM
    cuts: list[str] = []
    # the assumptions first: kept whole unless even they do not fit, then cut line by line (last of all)
    a_title = "Usage assumptions"
    a_kept = len(assumptions)
    if assumptions and _cost(_section(a_title, assumptions)) > room:
        a_kept = _fill([[line] for line in assumptions], max(room - _cost(_section(a_title, [])), 0))
        cuts.append(f"{len(assumptions) - a_kept} of {len(assumptions)} assumption lines")
    a_lines = _section(a_title, assumptions[:a_kept]) if a_kept else []
    room -= _cost(a_lines)

    needs = [
        _cost(_section(title + ")", fixed + [x for b in blocks for x in b]))
        for title, fixed, blocks, _ in details
    ]
    shares = _fair_shares(needs, max(room, 0))
    body_details: list[str] = []
    for (title, fixed, blocks, what), share, need in zip(details, shares, needs, strict=True):
        if need <= share:
            body_details += _section(title + ")", fixed + [x for b in blocks for x in b])
            continue
        kept = _fill(blocks, share - _cost(_section(f"{title}, the first {len(blocks):,} shown)", fixed)))
        if kept:
            shown = f"{title}, the first {kept:,} shown)"
            body_details += _section(shown, fixed + [x for b in blocks[:kept] for x in b])
        cuts.append(f"{len(blocks) - kept:,} of {len(blocks):,} {what}s")
    body = head + body_details + a_lines
    if cuts:
        body += [
            "",
            f"> ✂️ {'; '.join(cuts)} cut to stay under GitHub's {limit:,}-character comment limit "
            "(details first, assumptions last); run the command with `--format json` for everything.",
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
