"""Run the Pulumi program for a stack offline, under `pulumi.runtime.set_mocks`, and capture every resource.

No Pulumi CLI, no cloud, no credentials: the program's resource registrations go to a mock monitor
that records each one (type token, name, parent, inputs, mock outputs). The program itself is
`infra.program.declare(stack, config)`, the same code `pulumi up` runs.

The mock runtime is the program's own (`infra.mock_runtime.run_program`): it answers like the clouds
would (ids, ARNs, self links) and records every registration; this module turns what it recorded
into `Resource`s and prices them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cli.preview.model import Estimate, Resource, UsageValue
from infra.config import StackConfig
from infra.errors import TrainfleetError


class PreviewError(TrainfleetError):
    """The program could not be run offline for this stack."""


def run_program(stack: str, config: StackConfig) -> list[Resource]:
    """Every resource `infra.program.declare(stack, config)` registers under the mock runtime, in order."""
    try:
        from infra.mock_runtime import run_program as run_mocked
    except ImportError as exc:
        raise PreviewError(f"the Pulumi program's mock runtime cannot be imported: {exc}") from None
    try:
        run = run_mocked(stack, config)
    except TrainfleetError:
        raise
    except ImportError as exc:
        raise PreviewError(f"the Pulumi program (infra/program.py) cannot be imported: {exc}") from None
    except Exception as exc:  # a program bug, or an input the provider SDK rejects
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise PreviewError(
            f"the program failed for stack {stack!r} under mocks: {type(exc).__name__}: {message}"
        ) from exc
    return [
        Resource(
            type=r.type,
            name=r.name,
            urn=r.urn,
            parent=r.parent or "",
            inputs=r.inputs or {},
            outputs=r.outputs or {},
            id=r.id or "",
            custom=r.custom,
        )
        for r in run.resources
        if r.type != "pulumi:pulumi:Stack"
    ]


def provider_regions(config: StackConfig, other_config: dict[str, Any] | None) -> dict[str, str]:
    """cloud -> region, from provider config keys, else the stack's first fleet on that cloud."""
    regions: dict[str, str] = {}
    for fleet in config.fleets:
        regions.setdefault(fleet.cloud, fleet.region)
    other = other_config or {}
    for cloud, key in (("aws", "aws:region"), ("gcp", "gcp:region"), ("azure", "azure-native:location")):
        if isinstance(other.get(key), str):
            regions[cloud] = other[key]
    return regions


def estimate_config(
    stack: str,
    config: StackConfig,
    other_config: dict[str, Any] | None = None,
    usage_file: Any = None,
    usage_where: str = "",
) -> Estimate:
    """Run the program offline for one stack config and price what it declares."""
    from cli.preview.pricing import PricingContext, price_all
    from cli.preview.usage import resolve_usage
    from infra.catalog import default_catalog

    started = time.perf_counter()
    resources = run_program(stack, config)
    usage = resolve_usage(config, usage_file, usage_where)
    fleets = {f.name: f for f in config.fleets}
    ctx = PricingContext(default_catalog(), usage, resources, provider_regions(config, other_config), fleets)
    estimate = Estimate(stack, "program (offline, pulumi mocks)", price_all(resources, ctx), usage)
    apply_stack_terms(estimate, config, usage)
    estimate.elapsed_s = time.perf_counter() - started
    return estimate


def apply_stack_terms(estimate: Estimate, config: StackConfig, usage: dict[str, UsageValue]) -> None:
    """What the stack config says and the resources do not: the budget, the guardrail, and each fleet's
    expected job cost with interruptions (for the program's estimate and a preview document's alike)."""
    from cli.preview.expected import expected_for

    estimate.expected, estimate.expected_note = expected_for(config, usage)
    if config.budget is not None:
        estimate.guardrail_usd = config.budget.fail_above_usd
        estimate.budget_usd = config.budget.monthly_limit_usd


def estimate_stack(stack: str, usage_file: Path | None = None, start: Path | None = None) -> Estimate:
    """`trainfleet preview --stack NAME`: read stacks/Pulumi.NAME.yaml, run the program, price it."""
    from cli.preview.usage import read_usage_file
    from infra.stack_file import read_stack_file, stack_name, stack_path

    path = stack_path(stack, start)
    stack_file = read_stack_file(path)
    usage = read_usage_file(usage_file) if usage_file else None
    return estimate_config(
        stack_name(path), stack_file.config, stack_file.other_config, usage, str(usage_file or "")
    )


def estimate_text(text: str, stack: str, where: str, usage_file: Path | None = None) -> Estimate:
    """Price a stack file's text (e.g. `git show REF:stacks/Pulumi.prod.yaml`)."""
    from cli.preview.usage import read_usage_file
    from infra.stack_file import parse_stack_text

    sections, other, _ = parse_stack_text(text, where)
    try:
        config = StackConfig.from_sections(sections)
    except TrainfleetError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    usage = read_usage_file(usage_file) if usage_file else None
    return estimate_config(stack, config, other, usage, str(usage_file or ""))
