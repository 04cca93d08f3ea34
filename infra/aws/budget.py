"""trainfleet:aws:Budget — a monthly cost budget for the stack's AWS spend.

Filtered to resources tagged `trainfleet-stack=<stack>`. A budget filtered on a tag counts only spend
carrying a cost allocation tag that is active, so the component activates it (aws.costexplorer
.CostAllocationTag, kept on delete: the key is account-wide and other stacks' budgets rely on it). AWS
accepts the activation only once the key has appeared on billed resources; see BudgetArgs.activate_tag. Every configured threshold gets an ACTUAL notification, and the
highest one also a FORECASTED one, so the team hears before the money is spent. AWS allows five
notifications per budget; more thresholds spill into a second budget with the same limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.config import TAG_STACK
from infra.errors import ConfigError

MAX_NOTIFICATIONS_PER_BUDGET = 5
MAX_SUBSCRIBERS_PER_NOTIFICATION = 10


@dataclass
class BudgetArgs:
    name: str  # budget name (unique per account)
    stack: str
    limit_usd: float
    thresholds_percent: list[float]
    recipients: list[str]
    activate_tag: bool = True  # declare the tag's activation (false only before the key has been billed)


def notifications(thresholds: list[float], recipients: list[str]) -> list[tuple[str, float]]:
    """(type, threshold) pairs: ACTUAL at every threshold, FORECASTED at the highest."""
    ordered = sorted(set(thresholds))
    return [("ACTUAL", t) for t in ordered] + [("FORECASTED", ordered[-1])]


class Budget(pulumi.ComponentResource):
    budget_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:Budget", name, None, opts)
        if len(args.recipients) > MAX_SUBSCRIBERS_PER_NOTIFICATION:
            raise ConfigError(
                f"trainfleet:budget.recipients: AWS budgets notify at most {MAX_SUBSCRIBERS_PER_NOTIFICATION} "
                f"addresses, not {len(args.recipients)}; use a mailing list"
            )
        pairs = notifications(args.thresholds_percent, args.recipients)
        chunks = [
            pairs[i : i + MAX_NOTIFICATIONS_PER_BUDGET]
            for i in range(0, len(pairs), MAX_NOTIFICATIONS_PER_BUDGET)
        ]
        depends_on: list[pulumi.Resource] = []
        if args.activate_tag:
            depends_on.append(
                aws.costexplorer.CostAllocationTag(
                    f"{name}-tag",
                    tag_key=TAG_STACK,
                    status="Active",
                    opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
                )
            )
        budgets = []
        for n, chunk in enumerate(chunks):
            budgets.append(
                aws.budgets.Budget(
                    f"{name}" if n == 0 else f"{name}-{n + 1}",
                    name=args.name if n == 0 else f"{args.name}-{n + 1}",
                    budget_type="COST",
                    limit_amount=f"{args.limit_usd:.2f}",
                    limit_unit="USD",
                    time_unit="MONTHLY",
                    cost_filters=[
                        aws.budgets.BudgetCostFilterArgs(
                            name="TagKeyValue", values=[f"user:{TAG_STACK}${args.stack}"]
                        )
                    ],
                    notifications=[
                        aws.budgets.BudgetNotificationArgs(
                            comparison_operator="GREATER_THAN",
                            notification_type=kind,
                            threshold=threshold,
                            threshold_type="PERCENTAGE",
                            subscriber_email_addresses=list(args.recipients),
                        )
                        for kind, threshold in chunk
                    ],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
                )
            )
        self.budget_ids = pulumi.Output.all(*[b.id for b in budgets])
        self.budget_names = pulumi.Output.all(*[b.name for b in budgets])
        self.register_outputs({"budget_ids": self.budget_ids, "budget_names": self.budget_names})
