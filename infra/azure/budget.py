"""trainfleet:azure:Budget — a monthly consumption budget on the subscription for the stack's tagged spend.

Actual-cost notifications at every configured threshold and a forecasted one at the highest; Azure
allows five notifications per budget, so more thresholds spill into a second budget.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure_native

from infra.config import TAG_STACK

MAX_NOTIFICATIONS_PER_BUDGET = 5


def month_start(today: dt.date | None = None) -> str:
    today = today or dt.datetime.now(dt.UTC).date()
    return f"{today:%Y-%m}-01T00:00:00Z"


@dataclass
class BudgetArgs:
    name: str
    stack: str
    limit_usd: float
    thresholds_percent: list[float]
    recipients: list[str]


class Budget(pulumi.ComponentResource):
    budget_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:Budget", name, None, opts)
        client = azure_native.authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        ordered = sorted(set(args.thresholds_percent))
        pairs = [("Actual", t) for t in ordered] + [("Forecasted", ordered[-1])]
        chunks = [
            pairs[i : i + MAX_NOTIFICATIONS_PER_BUDGET]
            for i in range(0, len(pairs), MAX_NOTIFICATIONS_PER_BUDGET)
        ]
        budgets = []
        for n, chunk in enumerate(chunks):
            budgets.append(
                azure_native.consumption.Budget(
                    name if n == 0 else f"{name}-{n + 1}",
                    budget_name=args.name if n == 0 else f"{args.name}-{n + 1}",
                    scope=client.subscription_id.apply(lambda sub: f"/subscriptions/{sub}"),
                    amount=args.limit_usd,
                    category="Cost",
                    time_grain="Monthly",
                    time_period=azure_native.consumption.BudgetTimePeriodArgs(start_date=month_start()),
                    filter=azure_native.consumption.BudgetFilterArgs(
                        tags=azure_native.consumption.BudgetComparisonExpressionArgs(
                            name=TAG_STACK, operator="In", values=[args.stack]
                        )
                    ),
                    notifications={
                        f"{kind.lower()}-{t:g}-percent".replace(
                            ".", "_"
                        ): azure_native.consumption.NotificationArgs(
                            enabled=True,
                            operator="GreaterThan",
                            threshold=t,
                            threshold_type=kind,
                            contact_emails=list(args.recipients),
                        )
                        for kind, t in chunk
                    },
                    # The start month is fixed when the budget is created; later runs must not move it.
                    opts=pulumi.ResourceOptions(parent=self, ignore_changes=["timePeriod"]),
                )
            )
        self.budget_ids = pulumi.Output.all(*[b.id for b in budgets])
        self.register_outputs({"budget_ids": self.budget_ids})
