"""trainfleet:gcp:BillingExport — the BigQuery dataset Cloud Billing exports detailed cost into.

The export itself cannot be switched on through an API: it is a console setting of the billing account
(Billing > Billing export > BigQuery export). The component declares the dataset and says so in its
`instructions` output, which the program exports.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

CONSOLE_STEP = (
    "Switch on the export in the console: Billing > Billing export > BigQuery export > Detailed usage "
    "cost > dataset {dataset} in project {project}. It cannot be enabled by API."
)


@dataclass
class BillingExportArgs:
    dataset_id: str
    location: str  # BigQuery location, e.g. US or a region
    labels: dict[str, str]


class BillingExport(pulumi.ComponentResource):
    dataset_id: pulumi.Output[str]
    instructions: pulumi.Output[str]

    def __init__(self, name: str, args: BillingExportArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:BillingExport", name, None, opts)
        dataset = gcp.bigquery.Dataset(
            f"{name}",
            dataset_id=args.dataset_id,
            friendly_name="trainfleet billing export",
            description="Cloud Billing detailed usage cost export (switched on in the console)",
            location=args.location,
            delete_contents_on_destroy=False,
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.dataset_id = dataset.dataset_id
        self.instructions = pulumi.Output.all(dataset.dataset_id, dataset.project).apply(
            lambda v: CONSOLE_STEP.format(dataset=v[0], project=v[1])
        )
        self.register_outputs({"dataset_id": self.dataset_id, "instructions": self.instructions})
