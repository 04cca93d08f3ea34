"""The stack's budget guardrail, inside Pulumi: price what the stack declares, fail above the limit.

Pricing is trainfleet's own (cli/preview/pricing: one function per type token, `price_all` over a
`PricingContext`), so `pulumi preview --policy-pack policy` and `trainfleet preview` agree. What is priced is
the resources Pulumi hands a stack policy: their properties as the engine knows them at the end of the
preview (planned outputs, which carry the inputs); a value unknown until apply makes that resource "not
estimable", so the total is then a lower bound (as `trainfleet preview --pulumi-json` reports it).

Where the limit and the stack config come from (first that applies):
  limit   policy config `failAboveUsd`, else the stack's `trainfleet:budget.fail_above_usd`;
          neither: the policy does not apply to this stack.
  config  (usage figures: job hours, checkpoint GB; regions; fleet zones)
          1. policy config `stackFile`: a stack file (relative paths from the project root);
          2. the stack config Pulumi gives the policy pack (`pulumi.Config("trainfleet")`, as infra/__main__.py
             reads it; the engine passes stack config and stack name to policy packs);
          3. policy config `stack`, else the running stack's name: `stacks/Pulumi.<stack>.yaml` via
             infra.stack_file.
  usage   policy config `usageFile` (the `trainfleet preview --usage-file` format), else the stack's defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.config import NAMESPACE, SECTIONS, StackConfig
from infra.errors import ConfigError, TrainfleetError

from .props import plain

NAME = "stack-budget-guardrail"
ROOT = Path(__file__).resolve().parents[2]  # the project root: policy/trainfleet_policies/budget.py
PROVIDER_KEYS = ("aws:region", "gcp:region", "gcp:project", "azure-native:location")

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "failAboveUsd": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "monthly USD limit; overrides the stack's trainfleet:budget.fail_above_usd",
        },
        "stackFile": {"type": "string", "description": "stack file to read the stack config from"},
        "stack": {"type": "string", "description": "stack name: read stacks/Pulumi.<stack>.yaml"},
        "usageFile": {
            "type": "string",
            "description": "usage figures, as for `trainfleet preview --usage-file`",
        },
    }
)


@dataclass
class StackSource:
    stack: str
    config: StackConfig | None
    other_config: dict[str, Any] = field(default_factory=dict)
    where: str = ""


def _project_path(value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else ROOT / path


def _engine_config() -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainfleet sections, provider keys) from the stack config the engine gave this process."""
    config = pulumi.Config(NAMESPACE)
    try:
        sections = {key: value for key in SECTIONS if (value := config.get_object(key)) is not None}
    except pulumi.ConfigTypeError as exc:  # a trainfleet key that is not a plain value or JSON
        raise ConfigError(f"the stack's Pulumi config: {exc}") from None
    other: dict[str, Any] = {}
    for key in PROVIDER_KEYS:
        namespace, _, name = key.partition(":")
        value = pulumi.Config(namespace).get(name)
        if value is not None:
            other[key] = value
    return sections, other


def _running_stack() -> str:
    """The stack being previewed or updated: the engine runs a policy pack with PULUMI_STACK set (what
    pulumi_policy's own runtime settings read)."""
    return os.environ.get("PULUMI_STACK", "")


def resolve_stack(policy_config: dict[str, Any]) -> StackSource:
    """The stack config to price with (ConfigError when a named source cannot be read)."""
    from infra.stack_file import read_stack_file, stack_name, stack_path

    if policy_config.get("stackFile"):
        path = _project_path(str(policy_config["stackFile"]))
        stack_file = read_stack_file(path)
        return StackSource(stack_name(path), stack_file.config, stack_file.other_config, str(path))
    sections, other = _engine_config()
    if sections and not policy_config.get("stack"):
        stack = _running_stack() or "stack"
        return StackSource(stack, StackConfig.from_sections(sections), other, "the stack's Pulumi config")
    stack = str(policy_config.get("stack") or _running_stack())
    if not stack:
        return StackSource("", None, {}, "no stack config")
    path = stack_path(stack, ROOT)
    stack_file = read_stack_file(path)
    return StackSource(stack, stack_file.config, stack_file.other_config, str(path))


def _is_component(type_token: str) -> bool:
    """trainfleet's components and the stack are groupings, priced through their children."""
    return type_token.startswith("trainfleet:") or type_token == "pulumi:pulumi:Stack"


def to_preview_resources(resources: list[PolicyResource]) -> list[Any]:
    """The stack policy's resources as cli.preview's `Resource`s (properties as both inputs and outputs)."""
    from cli.preview.model import Resource

    out = []
    for r in resources:
        if r.resource_type == "pulumi:pulumi:Stack":
            continue
        props = plain(r.props)
        parent = r.parent.urn if r.parent is not None else (getattr(r.opts, "parent", None) or "")
        rid = props.get("id")
        out.append(
            Resource(
                type=r.resource_type,
                name=r.name,
                urn=r.urn,
                parent=parent,
                inputs=props,
                outputs=props,
                id=rid if isinstance(rid, str) else "",
                custom=not _is_component(r.resource_type),
            )
        )
    return out


def estimate_for(resources: list[PolicyResource], source: StackSource, usage_path: str | None = None) -> Any:
    """A `cli.preview.model.Estimate` of the stack's resources, priced as `trainfleet preview` prices
    (raises a TrainfleetError for a usage file it cannot read or inputs it cannot price)."""
    from cli.preview.engine import provider_regions
    from cli.preview.model import Estimate
    from cli.preview.pricing import PricingContext, price_all
    from cli.preview.usage import read_usage_file, resolve_usage
    from infra.catalog import default_catalog

    config = source.config
    usage_file = read_usage_file(_project_path(usage_path)) if usage_path else None
    usage = resolve_usage(config, usage_file, usage_path or "")
    regions = provider_regions(config, source.other_config) if config is not None else {}
    # the fleets as the stack declares them: their zones, and their nodes (a group's size input reaches the
    # policy as the engine plans it, with ignore_changes applied: the deployed value, 0 after a finished job)
    fleets = {f.name: f for f in config.fleets} if config is not None else {}
    priced_from = to_preview_resources(resources)
    ctx = PricingContext(default_catalog(), usage, priced_from, regions, fleets)
    budget = config.budget if config is not None else None
    return Estimate(
        stack=source.stack or "stack",
        origin="pulumi policy pack (the engine's resources)",
        resources=price_all(priced_from, ctx),
        usage=usage,
        guardrail_usd=budget.fail_above_usd if budget else None,
        budget_usd=budget.monthly_limit_usd if budget else None,
    )


def budget_findings(resources: list[PolicyResource], policy_config: dict[str, Any]) -> tuple[list[str], str]:
    """(violations, why the policy does not apply). Both empty: the stack is within its guardrail."""
    from cli.preview.report import check_guardrail

    try:
        source = resolve_stack(policy_config)
    except TrainfleetError as exc:
        return [f"the stack config cannot be read, so the stack cannot be priced: {exc}"], ""
    fail_above = policy_config.get("failAboveUsd")
    budget = source.config.budget if source.config is not None else None
    if fail_above is None and (budget is None or budget.fail_above_usd is None):
        return [], (
            f"stack {source.stack or '(unknown)'} sets no trainfleet:budget.fail_above_usd and the policy "
            "config no failAboveUsd"
        )
    try:
        usage_path = policy_config.get("usageFile")
        estimate = estimate_for(resources, source, str(usage_path) if usage_path else None)
    except TrainfleetError as exc:
        return [f"the stack cannot be priced: {exc}"], ""
    breach = check_guardrail(estimate, float(fail_above) if fail_above is not None else None)
    if breach is None:
        return [], ""
    message = breach.message.replace("(--fail-above)", "(policy config failAboveUsd)")
    return [f"{message} (stack config: {source.where})"], ""


def validate_budget(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    violations, not_applicable = budget_findings(list(args.resources), dict(args.get_config() or {}))
    if not_applicable:
        args.not_applicable(not_applicable)
    for message in violations:
        report_violation(message, None)


POLICY = StackValidationPolicy(
    name=NAME,
    description=(
        "The stack's monthly cost, priced by trainfleet's own pricing functions (cli/preview/pricing, as "
        "`trainfleet preview`), stays at or under trainfleet:budget.fail_above_usd (or policy config "
        "failAboveUsd). Follows the Infracost pricing pattern (https://www.infracost.io/docs/) and Pulumi's "
        "stack policies (https://www.pulumi.com/docs/iac/using-pulumi/crossguard/core-concepts/); see "
        "policy/README.md."
    ),
    validate=validate_budget,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=CONFIG_SCHEMA,
)
