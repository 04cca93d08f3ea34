"""Human output for the preview and the diff (Rich tables), and the cost guardrail.

The preview follows `infracost breakdown`: a row per resource, its cost components under it with
monthly quantity, unit and cost, and where each price comes from listed once under the table as
numbered notes ([1], [2], ...), so a row stays one line at 80 columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console, Group
from rich.text import Text

from cli.output import Col, Footnotes, money, table
from cli.planner.uncertainty import PLAN_INTERVAL
from cli.preview.diff import CostDiff
from cli.preview.markdown import OP_LABEL
from cli.preview.model import FREE, Estimate, PricedResource
from infra.catalog.price_age import DEFAULT_MAX_AGE_DAYS, PriceAge
from infra.errors import TrainfleetError

CLOUD_OF_PROVIDER = {"aws": "aws", "gcp": "gcp", "azure-native": "azure", "azure": "azure"}  # type token prefix


def type_label(token: str) -> str:
    """A Pulumi type token as `pulumi preview` shows it: aws:s3/bucket:Bucket -> aws:s3:Bucket.

    The module's last path segment is dropped when it is the type name camelCased, as Pulumi's own
    display does (pulumi/pulumi pkg/backend/display/progress.go, simplifyTypeName).
    """
    parts = token.split(":")
    if len(parts) != 3 or not parts[2] or "/" not in parts[1]:
        return token
    module, _, file = parts[1].rpartition("/")
    if file != parts[2][:1].lower() + parts[2][1:]:
        return token
    return f"{parts[0]}:{module}:{parts[2]}"


def _qty(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _branch(i: int, n: int) -> str:
    return "└─" if i == n - 1 else "├─"


def price_age_lines(est: Estimate, max_days: float, now: datetime | None = None) -> list[str]:
    """The age of the oldest catalog price behind each cloud's instances, and a note for each cloud whose oldest is
    undated or older than `max_days`, with the command that updates it."""
    from infra.catalog import default_catalog
    from infra.catalog.offer_rules import parse_time
    from infra.catalog.price_age import stale_note

    now = now or datetime.now(UTC)
    by_cloud: dict[str, tuple[PriceAge, str]] = {}
    for r in est.by_status("priced"):
        provider = r.resource.type.split(":")[0]
        cloud = CLOUD_OF_PROVIDER.get(provider, provider)
        for c in r.components:
            if not c.source.startswith("catalog") or c.unit_price is None:
                continue
            key = c.source.removeprefix("catalog:").split(",")[0]
            age = PriceAge(key, parse_time(c.as_of) if c.as_of else None, now)
            held = by_cloud.get(cloud)
            if held is None or _older(age, held[0]):
                by_cloud[cloud] = (age, c.name)
    sources = default_catalog().sources
    out = [f"Instance prices ({cloud}): oldest {age.label()} ({age.source})" for cloud, (age, _) in
           sorted(by_cloud.items())]  # fmt: skip
    for cloud, (age, name) in sorted(by_cloud.items()):
        note = stale_note(age, name, cloud, (), max_days, sources)
        if note:
            out.append("note: " + note)
    return out


def _older(a: PriceAge, b: PriceAge) -> bool:
    return b.observed is not None and (a.observed is None or a.observed < b.observed)


def estimate_renderable(est: Estimate, *, show_free: bool = False, wide: bool = False,
                        max_price_age: float = DEFAULT_MAX_AGE_DAYS) -> Group:
    """Priced and unpriced resources with their components; free ones listed only with `show_free`."""
    notes = Footnotes()
    rows: list[tuple] = []
    ordered = sorted(est.resources, key=lambda r: (r.status == FREE, -(r.monthly_cost or 0), r.resource.type))
    for r in ordered:
        if r.status == FREE and not show_free:
            continue
        if r.status == FREE:
            cost = job = "free"
        elif r.status == "priced":
            cost, job = money(r.monthly_cost), money(r.job_cost)
        else:  # not priced / not estimable: never shown as $0
            cost = job = r.status
        # the note marker follows the text it annotates, as a footnote does: no column of its own
        name = Text(r.resource.name, style="bold")
        if r.reason and r.status != "priced":
            name.append(" " + notes.ref(f"{r.status}: {r.reason}"))
        rows.append((name, type_label(r.resource.type), "", "", "", cost, job))
        for i, c in enumerate(r.components):
            price = "?" if c.unit_price is None else f"${c.unit_price:,.4f}"
            source = notes.ref(c.source + (f"; {c.note}" if c.note else ""))
            rows.append((f"{_branch(i, len(r.components))} {c.name} {source}", "", _qty(c.quantity), c.unit, price,
                         money(c.monthly_cost), money(c.job_cost)))  # fmt: skip
    t = table(
        f"{est.stack}: {len(est.resources)} resources ({est.origin})",
        [Col("resource", wrap=True), Col("type", drop=3), Col("monthly qty", "right"), Col("unit"),
         Col("price", "right", drop=2), Col("monthly", "right"), Col("job_hours", "right", drop=1)],
        rows,
        wide=wide,
    )  # fmt: skip
    counts = {s: len(est.by_status(s)) for s in ("priced", "free", "not priced", "not estimable")}
    lines = [
        Text(
            f"Monthly run-rate: {money(est.monthly_total)}   at list price over job_hours "
            f"{est.usage['job_hours'].value:g} h: {money(est.job_total)}"
            + ("" if est.complete else "   (lower bound: some resources have no price)"),
            style="bold",
        ),
        Text(", ".join(f"{n} {s}" for s, n in counts.items())),
    ]
    if not show_free and counts["free"]:
        by_type: dict[str, int] = {}
        for r in est.by_status(FREE):
            label = type_label(r.resource.type)
            by_type[label] = by_type.get(label, 0) + 1
        listed = ", ".join(f"{n} x {t}" if n > 1 else t for t, n in sorted(by_type.items()))
        lines.append(Text(f"Free (no charge of their own; --all lists each with why): {listed}"))
    if est.unknown:
        lines.append(Text(f"Unknown cost, left out of the totals: {unknown_summary(est)}", style="yellow"))
    if est.absent:
        lines.append(Text(f"The document leaves out {est.absent} unchanged resources (no --show-sames): totals "
                          "cover only what it lists", style="yellow"))  # fmt: skip
    lines += expected_lines(est)
    lines += [Text(line, style="yellow" if line.startswith("note:") else "") for line in
              price_age_lines(est, max_price_age)]  # fmt: skip
    lines.append(Text("Usage assumptions (--usage-file overrides):"))
    lines += [Text(f"  {k} = {v.value:g} {v.unit}  ({v.source})") for k, v in est.usage.items()]
    if est.budget_usd is not None:
        lines.append(Text(f"Budget: {money(est.budget_usd)}/month (trainfleet:budget.monthly_limit_usd)"))
    return Group(t, notes.renderable("sources:"), *lines)


def expected_lines(est: Estimate) -> list[Text]:
    """Each fleet's planned job: list price with nothing going wrong vs expected with interruptions."""
    out = []
    for e in est.expected:
        low, high = PLAN_INTERVAL.around(e.expected_job_usd)
        out.append(Text(
            f"Expected planned job, fleet {e.fleet}: {money(e.expected_job_usd)} over {e.wall_hours:,.1f} h "
            f"(80% range {money(low)} to {money(high)}; list {money(e.list_job_usd)} over "
            f"{e.ideal_hours:,.1f} h with no interruption; {e.interruptions:,.1f} interruptions and failures "
            "expected)", style="bold",
        ))  # fmt: skip
        out += [Text(f"  {a}") for a in e.assumptions]
    if est.expected_note:
        out.append(Text(f"No expected cost for {est.expected_note}", style="yellow"))
    return out


def diff_renderable(diff: CostDiff, *, wide: bool = False) -> Group:
    s = diff.summary()
    notes = Footnotes()
    rows: list[tuple] = []
    shown = [r for r in diff.rows if r.op != "same"] or []
    shown.sort(key=lambda r: (-(abs(r.delta) if r.delta is not None else float("inf")), r.urn))
    for r in shown:
        if r.delta is not None:
            delta = _signed(r.delta)
        else:
            side = r.head or r.base
            delta = f"unknown {notes.ref(f'{r.status}: {side.reason}' if side else r.status)}"
        rows.append((Text(r.name, style="bold"), type_label(r.type), OP_LABEL.get(r.op, r.op), _side(r.base),
                     _side(r.head), delta))  # fmt: skip
        changes = r.changes[:12]
        for i, c in enumerate(changes):
            last = i == len(changes) - 1 and len(r.changes) <= 12
            text = f"{'└─' if last else '├─'} {c.path}: {_short(c.base)} → {_short(c.head)}"
            rows.append((text, "", "", "", "", ""))
        if len(r.changes) > 12:
            rows.append((f"└─ … {len(r.changes) - 12} more changed inputs", "", "", "", "", ""))
    t = table(
        f"{diff.stack}: {diff.base_label} → {diff.head_label}",
        [Col("resource", wrap=True), Col("type", drop=2), Col("change"), Col("base $/mo", "right", drop=1),
         Col("head $/mo", "right", drop=1), Col("Δ $/mo", "right")],
        rows,
        wide=wide,
    )  # fmt: skip
    expected = s["expected_job_usd"]
    lines = [
        Text(
            f"Monthly run-rate: {money(diff.base.monthly_total)} → {money(diff.head.monthly_total)} "
            f"({_signed(s['monthly_delta'])})"
            + (f"   expected job with interruptions: {money(expected['base'])} → {money(expected['head'])} "
               f"({_signed(expected['delta'])})" if expected["delta"] is not None else ""),
            style="bold",
        ),  # fmt: skip
        Text(
            f"Infra: {s['added']} added, {s['changed']} changed, {s['replaced']} replaced, {s['removed']} removed, "
            f"{s['unchanged']} unchanged"
            + "".join(
                f"; {s[key]} changed resource(s) {status}"
                for key, status in (("not_priced_changes", "not priced"), ("not_estimable_changes", "not estimable"))
                if s[key]
            )
        ),
    ]
    return Group(t, notes.renderable(), *lines)


def _side(side: PricedResource | None) -> str:
    if side is None:
        return "—"
    return "free" if side.status == FREE else money(side.monthly_cost)


def _signed(value: float) -> str:
    if abs(value) < 0.005:
        return "$0.00"
    return ("+" if value > 0 else "-") + money(abs(value))


def _short(value: object, limit: int = 24) -> str:
    text = "∅" if value is None else " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class GuardrailBreach:
    limit: float
    where: str  # "--fail-above" or "trainfleet:budget.fail_above_usd"
    message: str


def unknown_summary(est: Estimate) -> str:
    """'2 not priced (aws:ecs/service:Service x2), 1 not estimable (...)', or '' when every cost is known."""
    parts = []
    for status, types in est.unknown_by_type().items():
        listed = ", ".join(t if n == 1 else f"{t} x{n}" for t, n in list(types.items())[:4])
        extra = len(types) - 4
        more = f", +{extra} more type{'s' if extra > 1 else ''}" if extra > 0 else ""
        parts.append(f"{sum(types.values())} {status} ({listed}{more})")
    return ", ".join(parts)


def check_unpriced(est: Estimate) -> str | None:
    """--fail-on-unpriced: the message when any resource's cost is unknown (the guardrail fails closed)."""
    if not est.unknown:
        return None
    return (
        f"stack {est.stack}: {unknown_summary(est)}; their cost is unknown, so the guardrail cannot pass "
        "(--fail-on-unpriced): add a usage figure, price the type, or drop the flag"
    )


def check_guardrail(est: Estimate, fail_above: float | None) -> GuardrailBreach | None:
    """The monthly estimate against --fail-above (else the stack's budget.fail_above_usd)."""
    if fail_above is not None:
        limit, where = fail_above, "--fail-above"
    elif est.guardrail_usd is not None:
        limit, where = est.guardrail_usd, f"{est.stack}'s trainfleet:budget.fail_above_usd"
    else:
        return None
    if est.absent:
        raise TrainfleetError(
            f"the preview document leaves out {est.absent} unchanged resources, so its total is not the stack's "
            f"and the guardrail ({where}) cannot be checked; run `pulumi preview --json --show-sames`"
        )
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
