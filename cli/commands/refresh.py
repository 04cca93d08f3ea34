"""`trainfleet catalog refresh|status`: live prices into the user overlay, and where each price comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.commands.catalog import catalog_app
from cli.output import Col, Footnotes, WideOpt, console, err_console, print_json, show, table

OverlayOption = Annotated[
    Path | None,
    typer.Option(
        "--overlay",
        help="overlay CSV (default: $TRAINFLEET_HOME/catalog-overlay.csv or ~/.config/trainfleet/catalog-overlay.csv)",
    ),
]


@catalog_app.command("refresh")
def refresh_command(
    cloud: Annotated[str, typer.Option(help="aws, azure or gcp")],
    regions: Annotated[
        str | None,
        typer.Option(help="comma-separated, e.g. us-east-1,us-west-2 (default: every catalog region)"),
    ] = None,
    overlay: OverlayOption = None,
    parallel: Annotated[int, typer.Option(min=1, max=32, help="regions fetched at once")] = 4,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of a table.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Fetch today's prices from the cloud's price APIs into your catalog overlay (the snapshot stays the fallback)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from infra.catalog.refresh.overlay import overlay_path
    from infra.catalog.refresh.run import refresh

    path = overlay_path(overlay)
    from cli.options import comma_list

    wanted = comma_list(regions, "--regions", "us-east-1,us-west-2") if regions is not None else None
    progress = Progress(
        TextColumn(f"refresh {cloud}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console.rich(),
        transient=True,  # the bar while it runs; the table stays
    )
    task = None

    def on_start(chosen: list[str]) -> None:
        nonlocal task
        progress.start()
        task = progress.add_task("", total=len(chosen))

    def on_region(result) -> None:
        state = "ok" if result.ok else "FAILED"
        progress.update(task, advance=1, description=f"{result.region} {state}")

    try:
        report = refresh(cloud, wanted, path, on_start=on_start, on_region=on_region, parallel=parallel)
    finally:
        progress.stop()
    if json_out:
        print_json(report.to_json())
    else:
        for note in report.notes:
            console.print(f"note: {note}", highlight=False)
        notes = Footnotes()  # errors and notes can be long (URLs, API messages): listed under the table
        show(
            table(
                f"{cloud} price refresh as of {report.as_of}",
                [
                    Col("region"),
                    Col("result"),
                    Col("offers", "right"),
                    Col("seconds", "right", drop=1),
                    Col("detail"),
                ],
                [
                    (
                        r.region,
                        "ok" if r.ok else "failed",
                        r.offers,
                        f"{r.seconds:.2f}",
                        notes.ref(r.error or r.note),
                    )
                    for r in report.regions
                ],
                wide=wide,
            ),
            wide=wide,
        )
        console.print(notes.renderable())
        ok = len(report.regions) - len(report.failed)
        console.print(
            f"{ok} of {len(report.regions)} regions refreshed in {report.seconds:.2f} s; "
            f"overlay {report.overlay} holds {report.overlay_rows} rows"
            + (f"; {len(report.failed)} failed regions keep their previous prices" if report.failed else ""),
            highlight=False,
        )
    if report.failed:
        raise typer.Exit(1)


@catalog_app.command("status")
def status_command(
    cloud: Annotated[str | None, typer.Option(help="aws, gcp or azure")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of a table.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Which prices come from the embedded snapshot and which from a refresh, and how old they are."""
    from infra.catalog import default_catalog
    from infra.catalog.refresh.overlay import overlay_path
    from infra.catalog.refresh.status import age_label, status_rows, summary
    from infra.errors import TrainfleetError, did_you_mean, shown

    if cloud is not None and cloud not in ("aws", "gcp", "azure"):
        raise TrainfleetError(
            f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, ['aws', 'gcp', 'azure'])}; use aws, gcp or azure"
        )
    rows = status_rows(default_catalog(), cloud)
    info = summary(rows, overlay_path())
    if json_out:
        print_json({**info, "groups": [r.to_json() for r in rows]})
        return
    show(
        table(
            "prices in use, per cloud, region and source",
            [
                Col("cloud", drop=1),
                Col("region"),
                Col("source"),
                Col("from"),
                Col("offers", "right"),
                Col("age", "right"),
                Col("as of", drop=2),
            ],
            [(r.cloud, r.region, r.source, r.kind, r.offers, age_label(r.age_hours), r.as_of) for r in rows],
            wide=wide,
        ),
        wide=wide,
    )
    where = info["overlay"] if info["overlay_exists"] else f"{info['overlay']} (none yet)"
    console.print(
        f"{info['from_refresh']} of {info['offers']} offers from a refresh, {info['from_snapshot']} from the "
        f"embedded snapshot; overlay: {where}",
        highlight=False,
    )
