"""Human output for the preview and the diff (Rich tables), and the cost guardrail."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, Group
from rich.markup import escape
from rich.text import Text

from cli.output import money, table
from cli.preview.diff import CostDiff
from cli.preview.markdown import OP_LABEL
from cli.preview.model import FREE, Estimate, PricedResource


def estimate_renderable(est: Estimate, *, show_free: bool = False) -> Group:
    """Priced and unpriced resources with their components; free ones listed only with `show_free`."""
    rows = []
    ordered = sorted(est.resources, key=lambda r: (r.status == FREE, -(r.monthly_cost or 0), r.resource.type))
    for r in ordered:
        if r.status == FREE and not show_free:
            continue
        is_free = r.status == FREE
        rows.append(
            (
                r.resource.name,
                r.resource.type,
                r.status,
                "free" if is_free else money(r.monthly_cost),
                "free" if is_free else money(r.job_cost),
                r.reason,
            )
        )
        for c in r.components:
            qty = "?" if c.quantity is None else f"{c.quantity:,.2f}"
            price = "?" if c.unit_price is None else f"${c.unit_price:,.4f}"
            how = f"{qty} {c.unit} x {price} ({c.source})" + (f"; {c.note}" if c.note else "")
            rows.append((f"  └ {c.name}", "", "", money(c.monthly_cost), money(c.job_cost), how))
    t = table(
        escape(f"{est.stack}: {len(est.resources)} resources ({est.origin})"),
        ["resource", "type", "status", "monthly", "planned job", "how"],
        _escaped(rows),
        justify={"monthly": "right", "planned job": "right"},
    )
    counts = {s: len(est.by_status(s)) for s in ("priced", "free", "not priced", "not estimable")}
    lines = [
        Text(
            f"Monthly: {money(est.monthly_total)}   planned job ({est.usage['job_hours'].value:g} h): "
            f"{money(est.job_total)}"
            + ("" if est.complete else "   (lower bound: some resources have no price)"),
            style="bold",
        ),
        Text(", ".join(f"{n} {s}" for s, n in counts.items())),
    ]
    if not show_free and counts["free"]:
        by_type: dict[str, int] = {}
        for r in est.by_status(FREE):
            by_type[r.resource.type] = by_type.get(r.resource.type, 0) + 1
        listed = ", ".join(f"{n} x {t}" if n > 1 else t for t, n in sorted(by_type.items()))
        lines.append(Text(f"Free (no charge of their own; --all lists each with why): {listed}"))
    lines.append(Text("Usage assumptions (--usage-file overrides):"))
    lines += [Text(f"  {k} = {v.value:g} {v.unit}  ({v.source})") for k, v in est.usage.items()]
    if est.budget_usd is not None:
        lines.append(Text(f"Budget: {money(est.budget_usd)}/month (trainfleet:budget.monthly_limit_usd)"))
    return Group(t, *lines)


def diff_renderable(diff: CostDiff) -> Group:
    s = diff.summary()
    rows = []
    shown = [r for r in diff.rows if r.op != "same"] or []
    shown.sort(key=lambda r: -(abs(r.delta) if r.delta is not None else float("inf")))
    for r in shown:
        reason = "" if r.delta is not None else f"unknown ({r.status}: {(r.head or r.base).reason})"  # type: ignore[union-attr]
        rows.append(
            (
                r.name,
                r.type,
                OP_LABEL.get(r.op, r.op),
                _side(r.base),
                _side(r.head),
                _signed(r.delta) if r.delta is not None else reason,
            )
        )
        for c in r.changes[:12]:
            rows.append((f"  {c.path}", "", "", _short(c.base), _short(c.head), ""))
        if len(r.changes) > 12:
            rows.append((f"  … {len(r.changes) - 12} more changed inputs", "", "", "", "", ""))
    t = table(
        escape(f"{diff.stack}: {diff.base_label} → {diff.head_label}"),
        ["resource", "type", "change", "base $/mo", "head $/mo", "Δ $/mo"],
        _escaped(rows),
        justify={"base $/mo": "right", "head $/mo": "right", "Δ $/mo": "right"},
    )
    lines = [
        Text(
            f"Monthly: {money(diff.base.monthly_total)} → {money(diff.head.monthly_total)} ({_signed(diff.monthly_delta)})"
            f"   planned job: {money(diff.base.job_total)} → {money(diff.head.job_total)} ({_signed(diff.job_delta)})",
            style="bold",
        ),
        Text(
            f"Infra: {s['added']} added, {s['changed']} changed, {s['replaced']} replaced, {s['removed']} removed, "
            f"{s['unchanged']} unchanged"
            + (
                f"; {s['not_estimable_changes']} changed resource(s) not estimable"
                if s["not_estimable_changes"]
                else ""
            )
        ),
    ]
    return Group(t, *lines)


def _side(side: PricedResource | None) -> str:
    if side is None:
        return "—"
    return "free" if side.status == FREE else money(side.monthly_cost)


def _escaped(rows: list[tuple]) -> list[tuple]:
    """Cells as literal text: resource names, reasons and values may hold [brackets] (e.g. [secret])."""
    return [tuple(escape(str(v)) for v in row) for row in rows]


def _signed(value: float) -> str:
    if abs(value) < 0.005:
        return "$0.00"
    return ("+" if value > 0 else "-") + money(abs(value))


def _short(value: object, limit: int = 40) -> str:
    text = "∅" if value is None else " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class GuardrailBreach:
    limit: float
    where: str  # "--fail-above" or "trainfleet:budget.fail_above_usd"
    message: str


def check_guardrail(est: Estimate, fail_above: float | None) -> GuardrailBreach | None:
    """The monthly estimate against --fail-above (else the stack's budget.fail_above_usd)."""
    if fail_above is not None:
        limit, where = fail_above, "--fail-above"
    elif est.guardrail_usd is not None:
        limit, where = est.guardrail_usd, f"{est.stack}'s trainfleet:budget.fail_above_usd"
    else:
        return None
    if est.monthly_total <= limit:
        return None
    drivers = "; ".join(
        f"{r.resource.name} ({r.resource.type}) {money(r.monthly_cost)}/month" for r in est.drivers(3)
    )
    lower = "" if est.complete else f" (a lower bound: {len(est.unknown)} resource(s) have no price)"
    message = (
        f"stack {est.stack}: monthly estimate {money(est.monthly_total)}{lower} exceeds the guardrail "
        f"{money(limit)} ({where}); driven by: {drivers}"
    )
    return GuardrailBreach(limit, where, message)


def print_renderable(console: Console, renderable: Group) -> None:
    console.print(renderable)
