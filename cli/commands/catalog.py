"""`trainfleet catalog list|show`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.app import app
from cli.catalog import CatalogFilter, region_rows, show_instance
from cli.options import MaxPriceAgeOpt, finite_float
from cli.output import Col, Footnotes, WideOpt, console, money, print_json, show, table

catalog_app = typer.Typer(help="Browse the embedded price and hardware catalog.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for machines instead of a table.")]


@catalog_app.command("list")
def list_command(
    cloud: Annotated[str | None, typer.Option(help="aws, gcp or azure")] = None,
    region: Annotated[str | None, typer.Option(help="e.g. us-east-1")] = None,
    accelerator: Annotated[
        str | None, typer.Option(help="normalised name, e.g. A100-80GB, H100-80GB")
    ] = None,
    min_memory: Annotated[
        float | None,
        typer.Option(parser=finite_float("--min-memory", minimum=0, maximum=10_000, example="80"),
                     help="minimum GiB per accelerator"),
    ] = None,
    purchase: Annotated[
        str | None, typer.Option(help="spot or on-demand: only offers with that price")
    ] = None,
    json_out: JsonFlag = False,
    wide: WideOpt = False,
) -> None:
    """Instance types per region: accelerators, prices (on-demand; cheapest zone for spot), interruption."""
    from infra.catalog import default_catalog

    f = CatalogFilter(cloud, region, accelerator, min_memory, purchase)
    rows = region_rows(default_catalog(), f)
    if json_out:
        print_json([r.to_json() for r in rows])
        return
    # At 80 columns: where, what and the two prices; zone, interruption and cloud as width allows.
    show(
        table(
            f"{len(rows)} offers (prices USD/hour per node)",
            [
                Col("cloud", drop=4),
                Col("region"),
                Col("instance type"),
                Col("accelerators", drop=1),
                Col("on-demand", "right"),
                Col("spot", "right"),
                Col("cheapest spot zone", drop=3),
                Col("interruption", drop=2),
            ],
            [
                (
                    r.cloud,
                    r.region,
                    r.instance_type,
                    f"{r.accelerators_per_node} x {r.accelerator or '?'} ({r.accelerator_memory_gib:g} GiB)",
                    money(r.on_demand_usd_per_hour, 3),
                    money(r.spot_usd_per_hour, 3),
                    r.cheapest_spot_zone,
                    r.interruption,
                )
                for r in rows
            ],
            wide=wide,
        ),
        wide=wide,
    )


@catalog_app.command("show")
def show_command(
    instance_type: Annotated[str, typer.Argument(help="e.g. p4de.24xlarge")],
    region: Annotated[str | None, typer.Option(help="only this region")] = None,
    json_out: JsonFlag = False,
    wide: WideOpt = False,
) -> None:
    """One instance type across regions and zones, with where every price comes from."""
    from infra.catalog import default_catalog

    info = show_instance(default_catalog(), instance_type, region)
    if json_out:
        print_json(info)
        return
    peaks = ", ".join(f"{p} {v:g}" for p, v in info["peak_tflops"].items()) or "unknown"
    net = f"{info['network_gbps']:g} Gbit/s {info['fabric']}".strip() if info["network_gbps"] else "unknown"
    console.print(
        f"[bold]{instance_type}[/] ({info['cloud']}): {info['accelerators_per_node']} x {info['accelerator']} "
        f"{info['accelerator_memory_gib']:g} GiB, {info['vcpus']:g} vCPU, {info['memory_gib']:g} GiB RAM, "
        f"network {net}; peak TFLOP/s per accelerator: {peaks}"
    )
    # Provenance as numbered notes under the table: each source (and note) listed once.
    notes, used, marks = Footnotes(), {o["source"] for o in info["offers"]}, {}
    for key in sorted(info["sources"], key=lambda k: k not in used):  # price sources first
        src = info["sources"][key]
        detail = ", ".join(f"{k}: {v}" for k, v in src.items() if k != "what")
        marks[key] = notes.ref(f"{key}: {src.get('what', '')} ({detail})")
    show(
        table(
            None,
            [
                Col("region"),
                Col("zone"),
                Col("on-demand", "right"),
                Col("spot", "right"),
                # the sources no price row names are where the interruption rates come from
                Col(" ".join(["interruption", *(m for k, m in marks.items() if k not in used)]), drop=1),
                Col("source"),
            ],
            [
                (
                    o["region"],
                    o["zone"],
                    money(o["on_demand_usd_per_hour"], 4),
                    money(o["spot_usd_per_hour"], 4),
                    " ".join(filter(None, [o["interruption"], notes.ref(o["interruption_evidence"] or "")])),
                    " ".join(filter(None, [marks.get(o["source"], o["source"]), notes.ref(o["note"])])),
                )
                for o in info["offers"]
            ],  # fmt: skip
            wide=wide,
        ),
        wide=wide,
    )
    console.print(notes.renderable("sources:"))


@catalog_app.command("check")
def check_command(
    cloud: Annotated[str | None, typer.Option(help="aws, gcp or azure")] = None,
    rule: Annotated[
        str | None, typer.Option(help="list the rows of this rule (see the summary for the rules)")
    ] = None,
    max_price_age: MaxPriceAgeOpt = 90.0,
    json_out: JsonFlag = False,
    wide: WideOpt = False,
) -> None:
    """Rows whose prices or hardware facts are doubtful or missing, rule by rule, and what plans do with them."""
    from cli.catalog import CatalogFilter, check_filter
    from infra.catalog import default_catalog
    from infra.catalog.checks import RULE_KEYS, RULES, check, counts
    from infra.errors import TrainfleetError, did_you_mean, shown

    catalog = default_catalog()
    check_filter(catalog, CatalogFilter(cloud=cloud))
    offers = catalog.offers(cloud=cloud)
    if rule is not None and rule not in RULE_KEYS:
        raise TrainfleetError(f"--rule {shown(rule)} is not a rule{did_you_mean(rule, list(RULE_KEYS))}; "
                              f"use one of {', '.join(RULE_KEYS)}")  # fmt: skip
    findings = check(offers, catalog.sources, max_price_age)
    per_rule = counts(findings)
    if json_out:
        print_json({
            "offers": len(offers),
            "max_price_age_days": max_price_age,
            "rules": [{"rule": r.key, "rows": per_rule[r.key], "means": r.means, "action": r.action} for r in RULES],
            "findings": [f.to_json() for f in findings if rule is None or f.rule == rule],
        })  # fmt: skip
        return
    if rule is None:
        show(table(
            f"{len(offers)} offers checked ({cloud or 'every cloud'})",
            [Col("rule"), Col("rows", "right"), Col("what trainfleet does", wrap=True), Col("rows flagged", drop=1)],
            [(r.key, f"{per_rule[r.key]:,}", r.action, r.means) for r in RULES],
            wide=wide,
        ), wide=wide)  # fmt: skip
        console.print("[dim]--rule RULE lists a rule's rows; --json lists every row[/]")
        return
    listed = [f for f in findings if f.rule == rule]
    show(table(
        f"{rule}: {len(listed):,} rows",
        [Col("cloud", drop=2), Col("region"), Col("zone", drop=1), Col("instance type"), Col("detail", wrap=True)],
        [(f.offer.cloud, f.offer.region, f.offer.zone, f.offer.instance_type, f.detail) for f in listed],
        wide=wide,
    ), wide=wide)  # fmt: skip
