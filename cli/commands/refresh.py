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
    parallel: Annotated[
        int, typer.Option(min=1, max=32, help="regions fetched at once (gcp --capacity: machine type and zone pairs)")
    ] = 4,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of a table.")
    ] = False,
    wide: WideOpt = False,
    placement_scores: Annotated[
        bool,
        typer.Option(
            "--placement-scores",
            help="instead of prices, fetch AWS spot placement scores (obtainable spot capacity per region/zone) "
            "into $TRAINFLEET_HOME/placement-scores.json",
        ),
    ] = False,
    instance_types: Annotated[
        str | None,
        typer.Option(
            help="with --placement-scores: comma-separated, e.g. p5.48xlarge (default: every catalog type)"
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="with --placement-scores: node counts to score, e.g. 1,8,64 (default: 1,2,4,...,64)"
        ),
    ] = None,
    max_configurations: Annotated[
        int,
        typer.Option(
            min=1, max=1000, help="with --placement-scores: most requests sent (AWS limits new ones per 24 h)"
        ),
    ] = 10,
    capacity: Annotated[
        bool,
        typer.Option(
            "--capacity",
            help="instead of prices, fetch what the cloud publishes about spot interruptions into $TRAINFLEET_HOME "
            "(AWS: Spot Instance Advisor buckets; Azure: Resource Graph eviction rates; GCP: capacityHistory "
            "preemption history)",
        ),
    ] = False,
) -> None:
    """Fetch today's prices from the cloud's price APIs into your catalog overlay (the snapshot stays the fallback)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if capacity:
        if placement_scores or regions is not None or instance_types is not None or nodes is not None:
            from infra.errors import TrainfleetError

            raise TrainfleetError("--capacity fetches every catalog type in every region the feed has; leave out "
                                  "--placement-scores, --regions, --instance-types and --nodes")  # fmt: skip
        return _interruption_refresh(cloud, json_out, parallel)
    if placement_scores:
        return _placement_refresh(cloud, regions, instance_types, nodes, max_configurations, json_out, wide)
    if instance_types is not None or nodes is not None:
        from infra.errors import TrainfleetError

        raise TrainfleetError(
            "--instance-types and --nodes go with --placement-scores; add it, or leave them out"
        )

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


# Placement-score APIs of the other clouds, named in the one-line refusal (tests/fixtures/placement/PROVENANCE.md).
_OTHER_PLACEMENT_APIS = {
    "gcp": "GCP's Compute Engine capacity advice (advice.capacity, an obtainability score 0.0-1.0) is not "
    "supported yet",
}


def _interruption_refresh(cloud: str, json_out: bool, parallel: int) -> None:
    """`catalog refresh --cloud CLOUD --capacity`: what the cloud publishes about spot interruptions, dated, into
    $TRAINFLEET_HOME (AWS: the Spot Advisor's buckets; Azure: Resource Graph's eviction rates; GCP: the preemption
    history of advice.capacityHistory). A refusal leaves the previous file as it was."""
    from infra.catalog import advisor, azure_eviction, gcp_preemption
    from infra.catalog.refresh.http import FetchError
    from infra.errors import TrainfleetError, did_you_mean, shown

    fetchers = {"aws": _aws_capacity, "azure": _azure_capacity, "gcp": _gcp_capacity}
    paths = {"aws": advisor.advisor_path, "azure": azure_eviction.eviction_path, "gcp": gcp_preemption.history_path}
    if cloud not in fetchers:
        raise TrainfleetError(f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, list(fetchers))}; "
                              "use aws, azure or gcp")  # fmt: skip
    try:
        summary, line = fetchers[cloud](parallel)
    except FetchError as exc:
        err_console.print(f"error: {exc}; {paths[cloud]()} is unchanged", highlight=False, markup=False)
        raise typer.Exit(1) from None
    if json_out:
        print_json(summary)
    else:
        console.print(line, highlight=False)


def _catalog_types(cloud: str) -> list[str]:
    from infra.catalog.loader import snapshot_offers

    return sorted({o.instance_type for o in snapshot_offers() if o.cloud == cloud})


def _aws_capacity(parallel: int) -> tuple[dict, str]:
    from infra.catalog.advisor import advisor_path
    from infra.catalog.refresh.advisor import advisor_url, fetch_buckets, write_refresh

    url, path = advisor_url(), advisor_path()
    buckets = fetch_buckets(_catalog_types("aws"), url)
    fetched_at = write_refresh(path, buckets, url)
    summary = {"path": str(path), "fetched_at": fetched_at, "source": url, "buckets": len(buckets),
               "instance_types": len({t for _, t in buckets}), "regions": len({r for r, _ in buckets})}  # fmt: skip
    return summary, (f"wrote {summary['buckets']} interruption buckets ({summary['instance_types']} instance types "
                     f"in {summary['regions']} regions) as of {fetched_at} to {path}")  # fmt: skip


def _azure_capacity(parallel: int) -> tuple[dict, str]:
    from infra.catalog.azure_eviction import eviction_path
    from infra.catalog.refresh.azure_eviction import fetch_rates, resources_url, write_refresh

    path, url = eviction_path(), resources_url()
    rates = fetch_rates(_catalog_types("azure"))
    fetched_at = write_refresh(path, rates, url)
    summary = {"path": str(path), "fetched_at": fetched_at, "source": url, "rates": len(rates),
               "sizes": len({s for _, s in rates}), "regions": len({r for r, _ in rates})}  # fmt: skip
    return summary, (f"wrote {summary['rates']} eviction rates per hour ({summary['sizes']} sizes in "
                     f"{summary['regions']} regions, 28 trailing days) as of {fetched_at} to {path}")  # fmt: skip


def _gcp_capacity(parallel: int) -> tuple[dict, str]:
    from infra.catalog.gcp_preemption import history_path
    from infra.catalog.loader import snapshot_offers
    from infra.catalog.refresh.gcp_preemption import compute_url, fetch_history, write_refresh

    path = history_path()
    pairs = {(o.zone, o.instance_type) for o in snapshot_offers() if o.cloud == "gcp" and o.spot_usd_per_hour}
    result, project = fetch_history(pairs, parallel)
    fetched_at = write_refresh(path, result, compute_url(), project)
    answered = {(z, t) for z, t, *_ in result.records}
    summary = {"path": str(path), "fetched_at": fetched_at, "project": project, "asked": len(pairs),
               "answered": len(answered), "records": len(result.records), "skipped": len(result.skipped),
               "first_skip": result.skipped[0] if result.skipped else None}  # fmt: skip
    skipped = f"; {len(result.skipped)} left out, first: {result.skipped[0]}" if result.skipped else ""
    return summary, (f"wrote {summary['records']} preemption records for {len(answered)} of {len(pairs)} machine "
                     f"types and zones (project {project}) as of {fetched_at} to {path}{skipped}")  # fmt: skip


def _placement_refresh(
    cloud: str, regions: str | None, instance_types: str | None, nodes: str | None, max_configurations: int,
    json_out: bool, wide: bool,
) -> None:  # fmt: skip
    """`catalog refresh --cloud aws|azure --placement-scores`: EC2 GetSpotPlacementScores (or Azure's Spot Placement
    Score) into the placement file."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from cli.options import comma_list
    from infra.catalog.refresh.placement import DEFAULT_NODES, parse_nodes, refresh_placement_scores
    from infra.errors import TrainfleetError, did_you_mean, shown

    if cloud in _OTHER_PLACEMENT_APIS:
        raise TrainfleetError(
            f"--placement-scores reads AWS's and Azure's spot placement scores; {_OTHER_PLACEMENT_APIS[cloud]}; "
            "use --cloud aws or azure, or leave --placement-scores out to refresh prices"
        )
    if cloud not in ("aws", "azure"):
        raise TrainfleetError(
            f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, ['aws', 'gcp', 'azure'])}; "
            "--placement-scores works with --cloud aws or azure"
        )
    wanted_regions = comma_list(regions, "--regions", "us-east-1,us-west-2") if regions is not None else None
    wanted_types = (
        comma_list(instance_types, "--instance-types", "p5.48xlarge") if instance_types is not None else None
    )
    counts = parse_nodes(comma_list(nodes, "--nodes", "1,8,64")) if nodes is not None else list(DEFAULT_NODES)
    if cloud == "azure":
        return _azure_placement_refresh(wanted_regions, wanted_types, counts, json_out)
    progress = Progress(
        TextColumn("placement scores"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=err_console.rich(), transient=True,
    )  # fmt: skip
    task = None

    def on_start(total: int) -> None:
        nonlocal task
        progress.start()
        task = progress.add_task("", total=total)

    def on_request(result) -> None:
        if task is not None:
            state = "FAILED" if result.error else "ok"
            progress.update(task, advance=1, description=f"{result.request.label()} {state}")

    try:
        report = refresh_placement_scores(
            instance_types=wanted_types, nodes=counts, regions=wanted_regions,
            max_configurations=max_configurations, on_start=on_start, on_request=on_request,
        )  # fmt: skip
    finally:
        progress.stop()
    if json_out:
        print_json(report.to_json())
    else:
        notes = Footnotes()
        show(
            table(
                f"aws spot placement scores as of {report.fetched_at} (asked in {report.endpoint_region})",
                [Col("instance type"), Col("nodes", "right"), Col("scores"), Col("result"), Col("rows", "right"),
                 Col("detail")],
                [
                    (r.request.instance_type, r.request.target_capacity,
                     "per AZ" if r.request.single_az else "per region", "failed" if r.error else "ok", r.rows,
                     notes.ref(r.error))
                    for r in report.results
                ],
                wide=wide,
            ),
            wide=wide,
        )  # fmt: skip
        console.print(notes.renderable())
        console.print(
            f"{report.rows_written} scores from {len(report.results) - len(report.failed)} of "
            f"{len(report.results)} requests; {report.path} holds {report.file_rows} scores",
            highlight=False,
        )
        for line in report.not_sent:
            console.print(f"not fetched: {line}", highlight=False)
    if report.failed:
        raise typer.Exit(1)


def _azure_placement_refresh(regions: list[str] | None, types: list[str] | None, counts: list[int],
                             json_out: bool) -> None:  # fmt: skip
    """`catalog refresh --cloud azure --placement-scores`: Azure's levels, regional, into the placement file."""
    from infra.catalog.loader import snapshot_offers
    from infra.catalog.model import NOT_DEEPSPEED
    from infra.catalog.refresh.azure_placement import refresh_azure_placement
    from infra.catalog.refresh.http import FetchError
    from infra.errors import TrainfleetError

    regions_by_size: dict[str, set[str]] = {}
    for o in snapshot_offers():
        if (o.cloud == "azure" and o.accelerator and o.accelerator not in NOT_DEEPSPEED and o.spot_usd_per_hour
                and (regions is None or o.region in regions) and (types is None or o.instance_type in types)):  # fmt: skip
            regions_by_size.setdefault(o.instance_type, set()).add(o.region)
    if not regions_by_size:
        raise TrainfleetError("no Azure spot size in the catalog matches --regions and --instance-types; see "
                              "`trainfleet catalog list --cloud azure --purchase spot`")  # fmt: skip
    try:
        report = refresh_azure_placement(regions_by_size, counts)
    except FetchError as exc:
        err_console.print(f"error: {exc}; nothing was written", highlight=False, markup=False)
        raise typer.Exit(1) from None
    if json_out:
        print_json(report.to_json())
    else:
        levels = ", ".join(f"{n} {level}" for level, n in sorted(report.levels.items())) or "none"
        console.print(f"azure spot placement scores as of {report.fetched_at}: {report.requests} requests, answers "
                      f"{levels}; {len(report.rows)} kept (DataNotFoundOrStale is not); {report.path} holds "
                      f"{report.file_rows} scores", highlight=False)  # fmt: skip
        for failure in report.failures:
            err_console.print(f"failed: {failure}", highlight=False, markup=False)
    if report.failures:
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
    from infra.catalog.refresh.status import age_label, interruption_rows, status_rows, summary
    from infra.errors import TrainfleetError, did_you_mean, shown

    if cloud is not None and cloud not in ("aws", "gcp", "azure"):
        raise TrainfleetError(
            f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, ['aws', 'gcp', 'azure'])}; use aws, gcp or azure"
        )
    catalog = default_catalog()
    rows = status_rows(catalog, cloud)
    info = summary(rows, overlay_path())
    interruptions = interruption_rows(catalog, cloud)
    if json_out:
        print_json({**info, "groups": [r.to_json() for r in rows], "interruption": [r.to_json() for r in interruptions]})
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
    show(
        table(
            "spot interruption rates in use, per cloud and source",
            [Col("cloud"), Col("source"), Col("rate"), Col("offers", "right"), Col("age", "right"),
             Col("beside it", drop=1)],
            [(r.cloud, r.source or "none", r.rate, r.offers,
              age_label(r.age_hours) if r.as_of else "undated" if r.rate == "published" else "n/a",
              f"{r.with_evidence} with GCP's preempted share" if r.with_evidence else "")
             for r in interruptions],
            wide=wide,
        ),
        wide=wide,
    )  # fmt: skip
    where = info["overlay"] if info["overlay_exists"] else f"{info['overlay']} (none yet)"
    console.print(
        f"{info['from_refresh']} of {info['offers']} offers from a refresh, {info['from_snapshot']} from the "
        f"embedded snapshot; overlay: {where}",
        highlight=False,
    )
