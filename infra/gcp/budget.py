"""trainfleet:gcp:Budget — a Cloud Billing budget on the project, for the stack's labelled spend.

One email notification channel per recipient; a threshold rule at every configured percentage on
current spend, and at the highest one also on forecasted spend.

With user credentials (`gcloud auth application-default login`, the common way) the Billing Budget API answers
403 "Your application is authenticating by using local Application Default Credentials. The
billingbudgets.googleapis.com API requires a quota project, which is not set by default": pulumi-gcp's Budget
docs say to set `billing_project` and `user_project_override` on the provider. The component does that on a
provider of its own (the stack's project as the quota project), so no stack has to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.config import TAG_STACK


@dataclass
class BudgetArgs:
    display_name: str
    stack_label: str  # value of the trainfleet-stack label
    limit_usd: float
    thresholds_percent: list[float]
    recipients: list[str]
    labels: dict[str, str]
    after: list[pulumi.Resource] = field(default_factory=list)  # what the project lookup waits for (its APIs)


class Budget(pulumi.ComponentResource):
    budget_name: pulumi.Output[str]

    def __init__(self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:Budget", name, None, opts)
        stack_project = gcp.organizations.get_client_config_output(opts=pulumi.InvokeOptions(parent=self)).project
        quota_project = gcp.Provider(
            f"{name}-quota-project",
            project=stack_project,
            billing_project=stack_project,
            user_project_override=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=quota_project)
        project = gcp.organizations.get_project_output(
            opts=pulumi.InvokeOutputOptions(parent=self, provider=quota_project, depends_on=args.after)
        )
        channels = [
            gcp.monitoring.NotificationChannel(
                f"{name}-email-{i}",
                display_name=f"trainfleet budget: {email}",
                type="email",
                labels={"email_address": email},
                user_labels=args.labels,
                opts=child,
            )
            for i, email in enumerate(args.recipients)
        ]
        ordered = sorted(set(args.thresholds_percent))
        rules = [
            gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t / 100, spend_basis="CURRENT_SPEND")
            for t in ordered
        ] + [
            gcp.billing.BudgetThresholdRuleArgs(
                threshold_percent=ordered[-1] / 100, spend_basis="FORECASTED_SPEND"
            )
        ]
        units, cents = divmod(round(args.limit_usd * 100), 100)
        budget = gcp.billing.Budget(
            f"{name}",
            billing_account=project.billing_account,
            display_name=args.display_name,
            amount=gcp.billing.BudgetAmountArgs(
                specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(
                    currency_code="USD", units=str(units), nanos=cents * 10_000_000
                )
            ),
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(
                projects=[project.number.apply(lambda n: f"projects/{n}")],
                labels={TAG_STACK: args.stack_label},
                calendar_period="MONTH",
            ),
            threshold_rules=rules,
            all_updates_rule=gcp.billing.BudgetAllUpdatesRuleArgs(
                monitoring_notification_channels=[c.id for c in channels],
                disable_default_iam_recipients=False,
            ),
            opts=child,
        )
        self.budget_name = budget.name
        self.register_outputs({"budget_name": self.budget_name})
