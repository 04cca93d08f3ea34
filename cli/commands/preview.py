"""`trainfleet preview` and `trainfleet diff`: what a stack costs, and what a change costs."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cli.app import app
from cli.options import MaxPriceAgeOpt, finite_float
from cli.output import WideOpt, error_line, print_json, show
from infra.errors import TrainfleetError
from infra.units import MAX_USD

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for machines instead of a table.")]
FailOnUnpricedOpt = Annotated[
    bool,
    typer.Option(
        "--fail-on-unpriced",
        help="exit 1 when any resource is not priced or not estimable (the guardrail fails closed)",
    ),
]
UsageOpt = Annotated[
    Path | None,
    typer.Option(
        "--usage-file", help="YAML usage figures: job_hours, checkpoint_gb, egress_gb_per_month, ..."
    ),
]


class Format(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


@app.command("preview")
def preview_command(
    stack: Annotated[
        str | None, typer.Option("--stack", "-s", help="stack name (stacks/Pulumi.NAME.yaml) or file")
    ] = None,
    pulumi_json: Annotated[
        Path | None, typer.Option("--pulumi-json", help="price a `pulumi preview --json` document instead")
    ] = None,
    fail_above: Annotated[
        float | None,
        typer.Option(
            "--fail-above",
            help="exit 1 when the monthly estimate exceeds this many USD",
            parser=finite_float("--fail-above", minimum=0, maximum=MAX_USD, example="5000"),
        ),
    ] = None,
    fail_on_unpriced: FailOnUnpricedOpt = False,
    usage_file: UsageOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="also list each free resource and why it is free")
    ] = False,
    max_price_age: MaxPriceAgeOpt = 90.0,
    json_out: JsonFlag = False,
    wide: WideOpt = False,
) -> None:
    """Price every resource the program declares for a stack (offline), or a real preview document."""
    from cli.preview.report import check_guardrail, check_unpriced, diff_renderable, estimate_renderable

    if pulumi_json is None and stack is None:
        raise TrainfleetError("give --stack NAME (price the program offline) or --pulumi-json FILE")
    if pulumi_json is not None:
        from cli.preview.diff import diff_one_preview

        diff = diff_one_preview(pulumi_json, _terms_for(stack, usage_file))
        estimate = diff.head
        if json_out:
            print_json({"estimate": estimate.to_json(), "diff": diff.to_json()})
        else:
            show(estimate_renderable(estimate, show_free=show_all, wide=wide, max_price_age=max_price_age), wide=wide)
            show(diff_renderable(diff, wide=wide), wide=wide)
    else:
        from cli.preview.engine import estimate_stack

        with _status(not json_out, f"running the program offline for {stack} ..."):
            estimate = estimate_stack(stack, usage_file)  # type: ignore[arg-type]
        if json_out:
            print_json(estimate.to_json())
        else:
            show(estimate_renderable(estimate, show_free=show_all, wide=wide, max_price_age=max_price_age), wide=wide)
    breach = check_guardrail(estimate, fail_above)
    unpriced = check_unpriced(estimate) if fail_on_unpriced else None
    for message in (breach.message if breach else None, unpriced):
        if message:
            error_line(message)
    if breach is not None or unpriced is not None:
        raise typer.Exit(1)


@app.command("diff")
def diff_command(
    base: Annotated[
        str, typer.Option("--base", help="git ref (with --stack), a base stack file, or a base preview JSON")
    ],
    head: Annotated[
        Path | None,
        typer.Option(
            "--head", help="head stack file or preview JSON (default: the stack file in the working tree)"
        ),
    ] = None,
    stack: Annotated[str | None, typer.Option("--stack", "-s", help="stack name or file")] = None,
    fmt: Annotated[
        Format, typer.Option("--format", "-f", help="table, json or markdown (a PR comment)")
    ] = Format.table,
    usage_file: UsageOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write to this file instead of stdout")
    ] = None,
    wide: WideOpt = False,
) -> None:
    """Cost delta per resource and in total, plus the infra summary, between two versions of a stack."""
    from cli.preview.diff import diff_estimates, diff_preview_files, git_show
    from cli.preview.engine import estimate_stack, estimate_text
    from cli.preview.model import Estimate
    from infra.stack_file import stack_name, stack_path

    if output is not None:
        from infra.atomic import check_target

        check_target(output, "--output")  # a folder or a missing folder: refused before the work
    base_path = Path(base)
    if base.endswith(".json"):
        if head is None or head.suffix != ".json":
            raise TrainfleetError(
                "--base is a preview JSON, so --head must be one too (pulumi preview --json > FILE)"
            )
        diff = diff_preview_files(base_path, head, _terms_for(stack, usage_file))
        command = f"trainfleet diff --base {base} --head {head}{f' --stack {stack}' if stack else ''}"
    elif base.endswith((".yaml", ".yml")) and base_path.is_file():
        head_path = head or (stack_path(stack) if stack else None)
        if head_path is None:
            raise TrainfleetError(
                "--base is a stack file; give --head FILE or --stack NAME for the other side"
            )
        # both sides run as the stack --stack names (its URNs), else as the head file's
        name = stack_name(stack_path(stack)) if stack else stack_name(head_path)
        with _status(fmt == Format.table, "running the program offline twice ..."):
            b = estimate_text(_read(base_path, "--base"), name, str(base_path), usage_file)
            h = estimate_text(_read(head_path, "--head"), name, str(head_path), usage_file)
        diff = diff_estimates(b, h, str(base_path), str(head_path))
        command = f"trainfleet diff --base {base} --head {head_path}{f' --stack {stack}' if stack else ''}"
    else:
        if stack is None:
            raise TrainfleetError(f"--base {base} is a git ref; name the stack with --stack NAME")
        head_path = head or stack_path(stack)
        name = stack_name(head_path)
        text = git_show(base, head_path)
        base_label = f"{base} (no {head_path.name})"
        with _status(fmt == Format.table, "running the program offline ..."):
            if text is None:  # the stack is new in this change: everything is added
                h = estimate_stack(str(head_path), usage_file)
                b = Estimate(name, f"no {head_path.name} at {base}", [], h.usage)
            else:
                b, h, base_label = _price_at_ref(base, head_path, text, name, usage_file)
        diff = diff_estimates(b, h, base_label, f"working tree {head_path.name}")
        command = f"trainfleet diff --base {base} --stack {stack}"
    if fmt == Format.json:
        import json

        text_out = json.dumps(diff.to_json(), indent=2, default=str) + "\n"
    elif fmt == Format.markdown:
        from cli.preview.markdown import render

        text_out = render(diff, command=command)
    else:
        from cli.preview.report import diff_renderable

        if output is None:
            show(diff_renderable(diff, wide=wide), wide=wide)
            return
        import io

        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, width=200).print(diff_renderable(diff))
        text_out = buf.getvalue()
    if output is not None:
        from infra.atomic import write_file

        write_file(output, text_out, what="--output")  # whole or not at all; a folder or full disk: one line
    else:
        import sys

        sys.stdout.write(text_out)


def _price_at_ref(base: str, head_path: Path, text: str, name: str, usage_file: Path | None):
    """(base estimate, head estimate, base label): the base stack text priced by the base commit's own
    program and pricing (a git worktree of REF, run in a subprocess while the head runs here), else, when
    the base's code cannot price itself, by the working tree's program, said in the label and on stderr."""
    from cli.preview.at_ref import base_program
    from cli.preview.engine import estimate_stack, estimate_text

    with base_program(base, head_path, text, usage_file) as run:
        h = estimate_stack(str(head_path), usage_file)
        b = run.estimate()
    if b is not None:
        b.stack = name
        return b, h, f"{base}:{head_path.name} (base program)"
    try:
        b = estimate_text(text, name, f"{base}:{head_path}", usage_file)
    except TrainfleetError as exc:  # still one line: the head program's complaint, with why it was asked
        raise type(exc)(f"{exc} (the base commit's own program could not price it: {run.reason})") from None
    from cli.output import err_console

    err_console.print(
        f"note: {base}'s own program could not price {head_path.name} ({run.reason}); "
        "its base side is priced with the working tree's program",
        markup=False,
        highlight=False,
    )
    return b, h, f"{base}:{head_path.name} (head program)"


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainfleetError(f"{option} {path} cannot be read ({exc}); fix the file or the path") from None


def _terms_for(stack: str | None, usage_file: Path | None):
    """What prices a preview document besides its own config: the usage file, and --stack's name, regions
    and config."""
    from cli.preview.diff import PreviewTerms
    from cli.preview.engine import provider_regions
    from cli.preview.usage import read_usage_file, resolve_usage

    uf = read_usage_file(usage_file) if usage_file else None
    where = str(usage_file or "")
    if stack is None:
        return PreviewTerms(resolve_usage(None, uf, where), usage_file=uf, usage_where=where)
    from infra.stack_file import read_stack_file, stack_name, stack_path

    sf = read_stack_file(stack_path(stack))
    return PreviewTerms(
        resolve_usage(sf.config, uf, where), stack_name(sf.path), provider_regions(sf.config, sf.other_config),
        sf.config, uf, where,
    )  # fmt: skip


class _status:
    """A spinner on stderr while the program runs (not for JSON/markdown output)."""

    def __init__(self, show: bool, text: str):
        self.show, self.text, self._status = show, text, None

    def __enter__(self):
        if self.show:
            from cli.output import err_console

            self._status = err_console.status(self.text)
            self._status.__enter__()
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)
        return False
