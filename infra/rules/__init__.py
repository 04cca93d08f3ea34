"""Provider constraints the program relies on: one rule per documented constraint, each citing its doc.

A rule looks at what a program run declared (`infra.mock_runtime.ProgramRun`: every resource with its
inputs, outputs and options) and reports `Finding`s. `run_program` enforces them, so `trainfleet stacks
check`, `trainfleet preview` and every test that runs the program refuse a stack a cloud would refuse,
with one line naming the resource, the rule and the fix, before any cloud sees it.

Errors are constraints the cloud enforces (the create call fails, or the resource cannot work as
declared). Warnings are things that may be fine but a user should decide knowingly (an AMI filter that
could match deprecated images).

Rules live in one module per concern (`aws`, `gcp`, `azure`, `names`); each registers itself with `@rule`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from infra.errors import ConfigError

if TYPE_CHECKING:
    from infra.mock_runtime import DeclaredResource, ProgramRun

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's id, e.g. aws-placement-group-one-zone
    resource: str  # type token and logical name, e.g. aws:autoscaling/group:Group main-asg
    problem: str
    fix: str
    severity: Severity = "error"

    @property
    def line(self) -> str:
        return f"{self.resource}: {self.problem} (rule {self.rule}); {self.fix}"


@dataclass(frozen=True)
class Rule:
    id: str
    doc: str  # where the constraint is documented
    check: Callable[[ProgramRun], Iterable[Finding]]


RULES: dict[str, Rule] = {}


def rule(rule_id: str, doc: str):
    """Register `check(run) -> findings` as the rule `rule_id`, documented at `doc`."""

    def register(check: Callable[[ProgramRun], Iterable[Finding]]):
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} is registered twice")
        RULES[rule_id] = Rule(rule_id, doc, check)
        return check

    return register


def where(resource: DeclaredResource) -> str:
    return f"{resource.type} {resource.name}"


def _load() -> None:
    # Importing a rule module registers its rules.
    from infra.rules import aws, azure, capacity, gcp, images, names  # noqa: F401


def check(run: ProgramRun, only: Iterable[str] | None = None) -> list[Finding]:
    """Every finding of every rule (or only the rules named) over one program run, in rule order and, within a
    rule, by resource: Pulumi registers a program's components concurrently, so declaration order varies from
    run to run, and the error a user is shown first must not."""
    _load()
    selected = [RULES[r] for r in only] if only is not None else list(RULES.values())
    return [finding for r in selected for finding in sorted(r.check(run), key=lambda f: (f.resource, f.problem))]


def enforce(run: ProgramRun) -> list[Finding]:
    """Raise a ConfigError for the first error (one line: resource, rule, fix); return the warnings."""
    findings = check(run)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"stack {run.stack}: {errors[0].line}{more}")
    return [f for f in findings if f.severity == "warning"]
