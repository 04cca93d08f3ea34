"""trainfleet:azure:BillingExport — a daily Cost Management export of actual cost into a private storage account.

The account is hardened like a checkpoint account (no public blob access, TLS 1.2, HTTPS only,
versioning); the export writes month-to-date actual cost as CSV into its `billing` container.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure_native

from infra.azure.storage import harden_account, lifecycle_policy

CONTAINER = "billing"
REPORT_VERSIONS_KEPT_DAYS = 400


def schedule_window(today: dt.date | None = None) -> tuple[str, str]:
    today = today or dt.datetime.now(dt.UTC).date()
    start = dt.date(today.year, today.month, 1) + dt.timedelta(days=32)
    start = dt.date(start.year, start.month, 1)
    return f"{start:%Y-%m-%d}T00:00:00Z", f"{start.year + 5}-{start:%m-%d}T00:00:00Z"


@dataclass
class BillingExportArgs:
    export_name: str
    location: str
    root_folder: str
    tags: dict[str, str]


class BillingExport(pulumi.ComponentResource):
    account_name: pulumi.Output[str]
    export_id: pulumi.Output[str]

    def __init__(self, name: str, args: BillingExportArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:BillingExport", name, None, opts)
        client = azure_native.authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        group = azure_native.resources.ResourceGroup(
            f"{name}-rg", location=args.location, tags=args.tags, opts=pulumi.ResourceOptions(parent=self)
        )
        # Cost Management writes with the account's key, so shared-key access stays on for this account.
        account = harden_account(
            name.replace("-", ""),
            group.name,
            args.location,
            args.tags,
            self,
            shared_key_access=True,
        )
        container = azure_native.storage.BlobContainer(
            f"{name}-container",
            resource_group_name=group.name,
            account_name=account.name,
            container_name=CONTAINER,
            public_access=azure_native.storage.PublicAccess.NONE,
            opts=pulumi.ResourceOptions(parent=self),
        )
        lifecycle_policy(name, group.name, account.name, CONTAINER, REPORT_VERSIONS_KEPT_DAYS, self)
        start, end = schedule_window()
        export = azure_native.costmanagement.Export(
            f"{name}-export",
            export_name=args.export_name,
            scope=client.subscription_id.apply(lambda sub: f"/subscriptions/{sub}"),
            format="Csv",
            definition=azure_native.costmanagement.ExportDefinitionArgs(
                type="ActualCost",
                timeframe="MonthToDate",
                data_set=azure_native.costmanagement.ExportDatasetArgs(granularity="Daily"),
            ),
            delivery_info=azure_native.costmanagement.ExportDeliveryInfoArgs(
                destination=azure_native.costmanagement.ExportDeliveryDestinationArgs(
                    resource_id=account.id, container=CONTAINER, root_folder_path=args.root_folder
                )
            ),
            schedule=azure_native.costmanagement.ExportScheduleArgs(
                status="Active",
                recurrence="Daily",
                recurrence_period=azure_native.costmanagement.ExportRecurrencePeriodArgs(from_=start, to=end),
            ),
            # The schedule window is fixed at creation; later runs must not move it.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[container], ignore_changes=["schedule.recurrencePeriod"]
            ),
        )
        self.account_name = account.name
        self.export_id = export.id
        self.register_outputs({"account_name": self.account_name, "export_id": self.export_id})
