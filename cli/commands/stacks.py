"""`trainfleet stacks check`: run the Pulumi program for every stack file under Pulumi's mock runtime.

No Pulumi CLI, no credentials, nothing created: the same program `pulumi up` runs, answered by
`infra.mock_runtime`, listing what each stack declares, and the steps a fresh account needs by hand before
its first `pulumi up` (infra/first_deploy.py). A stack file that does not validate, a config the
program rejects, or a declared resource that breaks a provider rule (infra/rules: a cluster placement group
over two zones, an invalid storage account name, ...) is one line on stderr naming the resource, the rule
and the fix, and exit code 2. Rules' warnings print as `warning:` lines on stderr and pass.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import app
from cli.output import Col, WideOpt, money, print_json, show, table

stacks_app = typer.Typer(
    help="Check the stack files in stacks/ against the Pulumi program.", no_args_is_help=True
)
app.add_typer(stacks_app, name="stacks")


def check_stacks(stack: str | None = None, start: Path | None = None, progress=None) -> list[dict[str, Any]]:
    """Validate the stack file(s), run the program for each under mocks, summarise what it declares."""
    from infra.errors import ConfigError
    from infra.stack_file import list_stack_files, read_stack_file, stack_path, stacks_dir

    if stack is not None:
        paths = [stack_path(stack, start)]
    else:
        paths = list_stack_files(start)
        if not paths:
            raise ConfigError(f"no stack files (Pulumi.<env>.yaml) in {stacks_dir(start)}")
    # Every file validates before any program runs, so a typo fails fast and alone.
    files = [read_stack_file(p) for p in paths]

    from infra.first_deploy import first_deploy_steps
    from infra.mock_runtime import run_program

    results = []
    for sf in files:
        if progress is not None:
            progress(sf.env)
        try:
            run = run_program(sf.env, sf.config)
        except ConfigError as exc:
            raise ConfigError(f"{sf.path}: {exc.message}") from None
        cloud = run.cloud_resources
        results.append(
            {
                "stack": sf.env,
                "file": str(sf.path),
                "clouds": sorted({f.cloud for f in sf.config.fleets}),
                "fleets": [f.name for f in sf.config.fleets],
                "resources": len(cloud),
                "components": sum(1 for r in run.resources if r.type.startswith("trainfleet:")),
                "by_type": _counts(cloud),
                "hourly_price_usd": run.exports.get("hourly_price_usd"),
                "warnings": [w.line for w in run.warnings],
                "first_deploy_steps": [step.line for step in first_deploy_steps(run)],
                "exports": run.exports,
            }
        )
    return results


def _relative(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def _counts(resources) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in resources:
        counts[r.type] = counts.get(r.type, 0) + 1
    return dict(sorted(counts.items()))


@stacks_app.command("check")
def check_command(
    stack: Annotated[
        str | None, typer.Option("--stack", "-s", help="only this stack (name such as prod, or a file path)")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of a table.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Run the program for each stacks/Pulumi.*.yaml under Pulumi's mock runtime; count what it declares."""
    status = None
    if sys.stderr.isatty() and not json_out:
        from rich.console import Console

        status = Console(stderr=True).status("running the program under mocks")
        status.start()
    try:
        results = check_stacks(
            stack, progress=(lambda env: status.update(f"stack {env}")) if status else None
        )
    finally:
        if status is not None:
            status.stop()
    for r in results:
        for line in r["warnings"]:
            print(f"warning: stack {r['stack']}: {line}", file=sys.stderr)
    if json_out:
        print_json([{k: v for k, v in r.items() if k != "exports"} for r in results])
        return
    show(
        table(
            f"{len(results)} stack{'s' if len(results) != 1 else ''}: resources declared under Pulumi's mock runtime",
            [
                Col("stack"),
                Col("clouds"),
                Col("fleets"),
                Col("resources", "right"),
                Col("components", "right", drop=3),
                Col("price/hour", "right"),
                Col("file", drop=2),
            ],
            [
                (
                    r["stack"],
                    ", ".join(r["clouds"]),
                    ", ".join(r["fleets"]),
                    r["resources"],
                    r["components"],
                    money(r["hourly_price_usd"]),
                    _relative(r["file"]),
                )
                for r in results
            ],
            wide=wide,
        ),
        wide=wide,
    )
    _print_first_deploy_steps(results)


def _print_first_deploy_steps(results: list[dict[str, Any]]) -> None:
    """What a fresh account needs done by hand before each stack's first `pulumi up` (infra/first_deploy.py)."""
    for r in results:
        if r["first_deploy_steps"]:
            print(f"\nBefore the first `pulumi up` of {r['stack']} (once per account; skip any already done):")
            for line in r["first_deploy_steps"]:
                print(f"  {line}")
