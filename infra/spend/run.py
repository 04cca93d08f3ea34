"""Gather a stack's actual cost from each cloud its fleets run on, and set it beside the plan."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

from infra.config import TAG_STACK
from infra.errors import TrainfleetError, shown
from infra.spend.report import SpendReport
from infra.stack_file import read_stack_file, stack_path


def parse_day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise TrainfleetError(f"{option} {shown(text)} is not a date; use YYYY-MM-DD, e.g. 2026-11-01") from None


def gcp_table(stack: str, other_config: dict, override: str | None) -> tuple[str, str]:
    """(project that runs the query, `project.dataset.table` of the billing export)."""
    from infra.spend.gcp import EXPORT_TABLE, dataset_id

    project = (
        other_config.get("gcp:project")
        or os.environ.get("GOOGLE_CLOUD_PROJECT")
        or os.environ.get("CLOUDSDK_CORE_PROJECT")
    )
    if override:
        parts = override.split(".")
        if len(parts) != 3 or not all(parts):
            raise TrainfleetError(f"--gcp-billing-table {shown(override)} must be project.dataset.table")
        return project or parts[0], override
    if not project:
        raise TrainfleetError(
            "no GCP project for the billing export query: set gcp:project in the stack file "
            "(`pulumi config set gcp:project ID`) or GOOGLE_CLOUD_PROJECT"
        )
    return project, f"{project}.{dataset_id(stack)}.{EXPORT_TABLE}"


def stack_spend(
    stack: str,
    since: date,
    until: date | None = None,
    *,
    gcp_billing_table: str | None = None,
    clouds: list[str] | None = None,
    start: Path | None = None,
) -> SpendReport:
    until = until or date.today()
    if until < since:
        raise TrainfleetError(f"--until {until} is before --since {since}")
    stack_file = read_stack_file(stack_path(stack, start), check_catalog=False)
    name = stack_file.env
    config = stack_file.config
    used = sorted({f.cloud for f in config.fleets})
    chosen = [c for c in used if clouds is None or c in clouds]
    if clouds and not chosen:
        raise TrainfleetError(
            f"stack {name} has no fleets on {', '.join(clouds)}; its fleets run on {', '.join(used)}"
        )
    report = SpendReport(
        name, since, until, f"{TAG_STACK}={name}", clouds=chosen,
        planned_cost_usd=config.job.planned_cost_usd, planned_hours=config.job.planned_hours,
    )  # fmt: skip
    if "aws" in chosen:
        from infra.spend.aws import aws_costs

        lines = aws_costs(TAG_STACK, name, since, until)
        if not lines:
            report.notes.append(
                f"AWS Cost Explorer has no cost tagged {TAG_STACK}={name}; if the stack ran, activate "
                f"{TAG_STACK} under Billing > Cost allocation tags (it applies from activation on, after up to 24 h)"
            )
        report.lines += lines
    if "gcp" in chosen:
        from infra.spend.gcp import gcp_costs

        if not config.billing_export.enabled and not gcp_billing_table:
            raise TrainfleetError(
                f"stack {name} has billing_export.enabled: false, so there is no BigQuery billing export to read; "
                f"set trainfleet:billing_export {{enabled: true}} and `pulumi up`, or pass --gcp-billing-table"
            )
        project, table = gcp_table(name, stack_file.other_config, gcp_billing_table)
        report.lines += gcp_costs(project, table, TAG_STACK, name, since, until)
    if "azure" in chosen:
        from infra.spend.azure import azure_costs

        subscription = stack_file.other_config.get("azure-native:subscriptionId") or os.environ.get(
            "AZURE_SUBSCRIPTION_ID"
        )
        if not subscription:
            raise TrainfleetError(
                "no Azure subscription: set azure-native:subscriptionId in the stack file or AZURE_SUBSCRIPTION_ID"
            )
        report.lines += azure_costs(str(subscription), TAG_STACK, name, since, until)
    check_currencies(report)
    if config.job.planned_cost_usd is None:
        report.notes.append(
            "the stack has no planned cost (job.planned_cost_usd); run `trainfleet plan` to record one"
        )
    return report


def check_currencies(report: SpendReport) -> None:
    """Cost billed in different currencies is never added up (trainfleet converts no currency), and cost
    billed in another currency than USD is not set against the plan's USD estimate."""
    clouds_by_currency: dict[str, set[str]] = {}
    for line in report.lines:
        clouds_by_currency.setdefault(line.currency, set()).add(line.cloud)
    if len(clouds_by_currency) > 1:
        found = "; ".join(
            f"{currency} from {', '.join(sorted(clouds))}"
            for currency, clouds in sorted(clouds_by_currency.items())
        )
        raise TrainfleetError(
            f"cost is billed in more than one currency ({found}) and trainfleet does not convert currencies; "
            "run `trainfleet spend` once per cloud with --cloud (on GCP, once per export table with --gcp-billing-table)"
        )
    if clouds_by_currency and "USD" not in clouds_by_currency and report.planned_cost_usd is not None:
        (currency,) = clouds_by_currency
        report.notes.append(
            f"cost is billed in {currency} and the plan estimate is in USD, so they are not compared "
            "(trainfleet does not convert currencies)"
        )
        report.planned_cost_usd = None
