"""`trainfleet events --stack prod`: what happened to a run (membership, conversions, resumes), from its bucket."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.app import app
from cli.output import Col, WideOpt, err_console, print_json, show, table

DEFAULT_LIMIT = 100


@app.command("events")
def events_command(
    stack: Annotated[
        str | None,
        typer.Option("--stack", "-s", help="stack name (stacks/Pulumi.<stack>.yaml) or file"),
    ] = None,
    fleet: Annotated[str | None, typer.Option(help="the stack's fleet (needed when it has several)")] = None,
    cloud: Annotated[
        str | None, typer.Option(help="aws, gcp or azure (without --stack; with it, the fleet's)")
    ] = None,
    bucket: Annotated[
        str | None,
        typer.Option(
            help="bucket name (azure: ACCOUNT/CONTAINER); default the stack's, when the stack file names it"
        ),
    ] = None,
    prefix: Annotated[
        str | None,
        typer.Option(help="checkpoint prefix (default: the fleet's, as its nodes get it)"),
    ] = None,
    limit: Annotated[int, typer.Option(min=0, help="show the newest N events (0: all)")] = DEFAULT_LIMIT,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of the events instead of a table.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """List a run's events (membership changes, conversions, resumes) that its nodes wrote to the bucket."""
    from cli.events import details, list_events, locate

    found = list_events(locate(stack, fleet, cloud, bucket, prefix), limit or None)
    if found.skipped:
        key, why = found.skipped[0]
        more = f" (and {len(found.skipped) - 1} more)" if len(found.skipped) > 1 else ""
        err_console.print(
            f"warning: skipped {len(found.skipped)} object(s) under {found.location.url} that are not "
            f"trainfleet events: {key.rsplit('/', 1)[-1]}: {why}{more}",
            markup=False,
            highlight=False,
        )
    if json_out:
        print_json(found.events)
        return
    if not found.events:
        show(f"no events under {found.location.url}")
        return
    title = f"{len(found.events)} event(s) under {found.location.url}"
    if found.total > len(found.events) + len(found.skipped):
        title += f" (the newest; {found.total} event objects in all, --limit 0 lists every one)"
    show(
        table(
            title,
            [Col("time (UTC)"), Col("node"), Col("event"), Col("details", wrap=True)],
            [
                (e["time"].replace("T", " ").rstrip("Z")[:23], e["node"], e["event"], details(e))
                for e in found.events
            ],
            wide=wide,
        ),
        wide=wide,
    )
