"""`trainfleet stacks check`: run the Pulumi program for every stack file under Pulumi's mock runtime.

No Pulumi CLI, no credentials, nothing created: the same program `pulumi up` runs, answered by
`infra.mock_runtime`, listing what each stack declares, and the steps a fresh account needs by hand before
its first `pulumi up` (infra/first_deploy.py). A stack file that does not validate, a config the
program rejects, or a declared resource that breaks a provider rule (infra/rules: a cluster placement group
over two zones, an invalid storage account name, ...) is one line on stderr naming the resource, the rule
and the fix, and exit code 2. Rules' warnings print as `warning:` lines on stderr and pass. Per fleet it also sizes
the disk a node needs for its checkpoints (infra/disk_need.py) and the trainer's stop grace; a root volume short of
that disk is the same kind of one-line error, naming the root_volume_gb that holds it.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import app
from cli.output import Col, WideOpt, money, output_width, print_json, show, table

stacks_app = typer.Typer(
    help="Check the stack files in stacks/ against the Pulumi program.", no_args_is_help=True
)
app.add_typer(stacks_app, name="stacks")


def check_stacks(stack: str | None = None, start: Path | None = None, progress=None) -> list[dict[str, Any]]:
    """Validate the stack file(s), run the program for each under mocks, summarise what it declares, what a
    fresh account needs by hand first and the quotas its fleets need at full size."""
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
    from infra.quotas import quota_needs

    results = []
    for sf in files:
        if progress is not None:
            progress(sf.env)
        try:
            run = run_program(sf.env, sf.config)
        except ConfigError as exc:
            raise ConfigError(f"{sf.path}: {exc.message}") from None
        disk = disk_rows(sf.env, sf.config)
        if short := next((d for d in disk if d["short"]), None):
            raise ConfigError(f"{sf.path}: stack {sf.env}: {short['problem']}")
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
                "quota_needs": quota_needs(sf.config, gcp_project=sf.other_config.get("gcp:project")),
                "gcp_project": sf.other_config.get("gcp:project"),
                "exports": run.exports,
                "disk": disk,
            }
        )
    return results


def disk_rows(stack: str, config) -> list[dict[str, Any]]:
    """Per fleet, the disk each node needs for its checkpoints (infra/disk_need.py) against its root volume, and the
    trainer's stop grace; `problem` names the fix when the volume is short."""
    from infra.disk_need import FILESYSTEM_USABLE, GB, SOFTWARE_BYTES, disk_need, stop_grace_s

    rows = []
    for i, fleet in enumerate(config.fleets):
        need = disk_need(config, fleet)
        gib, have, grace = need.volume_gib, fleet.root_volume_gb, stop_grace_s(need.saved_bytes)
        # ext4's share: its reserved blocks, inode tables and journal (FILESYSTEM_USABLE)
        terms = f"{need.terms()} + {SOFTWARE_BYTES / GB:.0f} GB image and venvs, + ext4's {1 - FILESYSTEM_USABLE:.0%}"
        line = f"{stack}/{fleet.name}: root_volume_gb {gib:,} needed, {have:,} set: {terms}; stop grace {grace} s"
        problem = (
            f"fleets[{i}] ({fleet.name}): a node needs a {gib:,} GiB disk for its checkpoints ({terms}), more than its "
            f"{have:,} GiB root volume: a save would fail with the disk full and the job fall back a whole interval, "
            f"and the node's boot refuses to launch; raise fleets[{i}].root_volume_gb to {gib:,}"
            + (" or lower checkpoint.keep_last" if need.keep_last > 1 else "")
        )
        rows.append(
            {
                "fleet": fleet.name,
                "needed_gib": gib,
                "root_volume_gb": have,
                "short": gib > have,
                "keep_last": need.keep_last,
                "step_bytes": need.step_bytes,
                "restore_bytes": need.restore_bytes,
                "conversion_bytes": need.conversion_bytes,
                "offload_bytes": need.offload_bytes,
                "software_bytes": SOFTWARE_BYTES,
                "checkpoint_bytes": need.checkpoint_bytes,
                "stop_grace_s": grace,
                "line": line,
                "problem": problem if gib > have else None,
            }
        )
    return rows


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
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Read the current quota limits with your credentials (AWS Service Quotas, GCP regions API, "
            "Azure usages API); exit 1 if any falls short.",
        ),
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Run the program for each stacks/Pulumi.*.yaml under Pulumi's mock runtime; count what it declares, name
    what a fresh account needs first and the quotas each fleet needs."""
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
    checks = _read_quota_limits(results) if live else {}
    if json_out:
        print_json([_json_row(r, checks.get(r["stack"])) for r in results])
    else:
        _print_table(results, wide)
        _print_disk(results)
        _print_first_deploy_steps(results)
        _print_quotas(results, checks)
    if any(c.status == "short" for stack_checks in checks.values() for c in stack_checks):
        raise typer.Exit(1)


def _read_quota_limits(results: list[dict[str, Any]]) -> dict[str, list]:
    """Each stack's quota needs against the limits its cloud accounts have now (cli/quota_limits.py)."""
    from cli.quota_limits import read_limits

    return {r["stack"]: read_limits(r["quota_needs"], gcp_project=r["gcp_project"]) for r in results}


def _need_line(need) -> str:
    return f"{need.label}: {need.needed} {need.unit} ({need.purchase}); {need.fix}"


def _json_row(r: dict[str, Any], checks: list | None) -> dict[str, Any]:
    from dataclasses import asdict

    row = {k: v for k, v in r.items() if k not in ("exports", "quota_needs", "gcp_project")}
    row["quotas"] = [{**asdict(n), "line": _need_line(n)} for n in r["quota_needs"]]
    if checks is not None:
        row["quota_checks"] = [
            {"code": c.need.code, "region": c.need.region, "limit": c.limit, "usage": c.usage,
             "status": c.status, "line": c.line}
            for c in checks
        ]  # fmt: skip
    return row


def _print_quotas(results: list[dict[str, Any]], checks: dict[str, list]) -> None:
    """Per stack, the quotas its fleets need at full size; with --live, each against its current limit."""
    for r in results:
        if not r["quota_needs"]:
            continue
        where = "now" if r["stack"] in checks else "(--live reads the current limits)"
        print()
        _print_item(f"Quotas {r['stack']}'s fleets need at full size, before `start_run` {where}:", "")
        lines = [c.line for c in checks[r["stack"]]] if r["stack"] in checks else map(_need_line, r["quota_needs"])
        for line in lines:
            _print_item(line)


def _print_table(results: list[dict[str, Any]], wide: bool) -> None:
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


def _print_item(line: str, indent: str = "  ") -> None:
    """One heading, step or quota, wrapped at spaces to the output width (a command's words stay whole)."""
    print(textwrap.fill(line, output_width(), initial_indent=indent, subsequent_indent=indent + "  ",
                        break_long_words=False, break_on_hyphens=False))  # fmt: skip


def _print_disk(results: list[dict[str, Any]]) -> None:
    """Each fleet's disk for checkpoints against its root volume (infra/disk_need.py), and the trainer's stop grace."""
    print()
    _print_item(
        "Disk per node for checkpoints (on the root volume, or on a local disk where the image mounts one: the boot "
        "checks whichever holds them, TRAINFLEET_DISK_NEEDED_BYTES):",
        "",
    )
    for r in results:
        for d in r["disk"]:
            _print_item(d["line"])


def _print_first_deploy_steps(results: list[dict[str, Any]]) -> None:
    """What a fresh account needs done by hand before each stack's first `pulumi up` (infra/first_deploy.py)."""
    for r in results:
        if r["first_deploy_steps"]:
            print()
            _print_item(f"Before the first `pulumi up` of {r['stack']} (once per account; skip any already done):", "")
            for line in r["first_deploy_steps"]:
                _print_item(line)
