"""One shape for every resource policy: a pure `findings(resource_type, props) -> [message]` function
(what the tests call) wrapped in a mandatory `ResourceValidationPolicy` (what Pulumi calls)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

Findings = Callable[[str, Any], list[str]]


def resource_policy(name: str, description: str, findings: Findings) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in findings(args.resource_type, args.props):
            report_violation(message, args.urn)

    validate.__name__ = f"validate_{name.replace('-', '_')}"
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
    )
