"""`trainfleet spend`: a stack's actual cost by its tags, beside the plan's estimate."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.app import app
from cli.output import Col, WideOpt, console, money, print_json, show, table


@app.command("spend")
def spend_command(
    stack: Annotated[
        str, typer.Option(help="stack name (stacks/Pulumi.<stack>.yaml) or path to a stack file")
    ],
    since: Annotated[str, typer.Option(help="first day, YYYY-MM-DD")],
    until: Annotated[
        str | None, typer.Option(help="last day, YYYY-MM-DD, inclusive (default: today)")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="only this cloud: aws, gcp or azure")] = None,
    gcp_billing_table: Annotated[
        str | None,
        typer.Option(
            help="project.dataset.table of the BigQuery billing export (default: the stack's dataset)"
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of tables.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Actual cost of a stack (resources tagged trainfleet-stack=<stack>) by service and day, vs the plan."""
    from datetime import date

    from infra.errors import TrainfleetError, did_you_mean, shown
    from infra.spend.run import parse_day, stack_spend

    if cloud is not None and cloud not in ("aws", "gcp", "azure"):
        raise TrainfleetError(
            f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, ['aws', 'gcp', 'azure'])}; use aws, gcp or azure"
        )
    first = parse_day(since, "--since")
    last = parse_day(until, "--until") if until is not None else None
    today = date.today()
    for option, day in (("--since", first), ("--until", last)):
        if day is not None and day > today:  # no cost yet; 9999-12-31 would also overflow the date range
            raise TrainfleetError(f"{option} {day} is in the future; use {today} or earlier")
    report = stack_spend(
        stack, first, last, gcp_billing_table=gcp_billing_table, clouds=[cloud] if cloud else None
    )
    if json_out:
        print_json(report.to_json())
        return
    console.print(
        f"[bold]{report.stack}[/]: cost tagged {report.tag}, {report.since} to {report.until} "
        f"({', '.join(report.clouds)})",
        highlight=False,
    )
    show(
        table(
            "by service",
            [Col("cloud"), Col("service"), Col("cost", "right")],
            [(c, s, in_currency(v, report)) for c, s, v in report.by_service()]
            or [("", "no cost found", in_currency(0.0, report))],
            wide=wide,
        ),
        wide=wide,
    )
    if report.lines:
        clouds = report.clouds
        show(
            table(
                "by day",
                [Col("day"), *(Col(c, "right") for c in clouds), Col("total", "right")],
                [
                    (d, *(in_currency(pc.get(c, 0.0), report) for c in clouds), in_currency(t, report))
                    for d, pc, t in report.by_day()
                ],
                wide=wide,
            ),
            wide=wide,
        )
    actual = f"actual {in_currency(report.actual, report)}"
    if report.planned_cost_usd is None:
        console.print(f"{actual}; plan estimate: none", highlight=False)
    else:
        hours = f", {report.planned_hours:g} h" if report.planned_hours else ""
        sign = "+" if report.difference >= 0 else "-"
        console.print(
            f"{actual} vs plan estimate {money(report.planned_cost_usd)} (job.planned_cost_usd{hours}): "
            f"difference {sign}{money(abs(report.difference))} ({report.difference_percent:+.1f}%)",
            highlight=False,
        )
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)


def in_currency(value: float, report) -> str:
    """`$1,253.50` for a USD bill, `1,253.50 EUR` for any other: a bill is never shown in a currency it is
    not in (`trainfleet spend` refuses a mix of currencies before it gets here)."""
    (currency,) = report.currencies
    return money(value) if currency == "USD" else f"{value:,.2f} {currency}"
