"""trainfleet:aws:BillingExport — a CUR 2.0 data export (BCM Data Exports) into a private bucket.

The bucket is hardened like a checkpoint bucket, and its policy lets only the billing services of
this account write to it (scoped by aws:SourceAccount and aws:SourceArn). The export writes hourly,
resource-level Parquet that `trainfleet spend` reads, with resource tags so cost can be grouped by
trainfleet-stack / -job / -fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.bucket import harden_bucket

EXPORT_PREFIX = "cur2"
# Data Exports (and the legacy CUR service) live in us-east-1 whatever the bucket's region.
BILLING_REGION = "us-east-1"
CUR2_COLUMNS = [
    "bill_billing_period_start_date",
    "line_item_usage_start_date",
    "line_item_usage_end_date",
    "line_item_line_item_type",
    "line_item_product_code",
    "line_item_usage_type",
    "line_item_operation",
    "line_item_availability_zone",
    "line_item_resource_id",
    "line_item_usage_amount",
    "line_item_unblended_cost",
    "line_item_net_unblended_cost",
    "pricing_term",
    "product_instance_type",
    "product_region_code",
    "resource_tags",
]
CUR2_TABLE = "COST_AND_USAGE_REPORT"


def export_bucket_statements(bucket_arn: str, account: str) -> list[dict]:
    """Let the billing services of `account` (and only those) write reports into the bucket."""
    return [
        {
            "Sid": "AllowBillingDataExports",
            "Effect": "Allow",
            "Principal": {"Service": ["billingreports.amazonaws.com", "bcm-data-exports.amazonaws.com"]},
            "Action": ["s3:PutObject", "s3:GetBucketPolicy"],
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {
                "StringLike": {
                    "aws:SourceAccount": account,
                    "aws:SourceArn": [
                        f"arn:aws:cur:{BILLING_REGION}:{account}:definition/*",
                        f"arn:aws:bcm-data-exports:{BILLING_REGION}:{account}:export/*",
                    ],
                }
            },
        }
    ]


@dataclass
class BillingExportArgs:
    export_name: str
    region: str  # where the bucket lives
    tags: dict[str, str]
    retention_days: int = 400  # replaced report versions; the export overwrites each month's files


class BillingExport(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    export_arn: pulumi.Output[str | None]

    def __init__(self, name: str, args: BillingExportArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:BillingExport", name, None, opts)
        identity = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=self))
        bucket = aws.s3.Bucket(
            f"{name}",
            force_destroy=False,
            region=args.region,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        policy = harden_bucket(
            name,
            bucket,
            args.region,
            self,
            noncurrent_days=args.retention_days,
            extra_statements=export_bucket_statements,
            account=identity.account_id,
        )
        export = aws.bcmdata.Export(
            f"{name}-cur2",
            export=aws.bcmdata.ExportExportArgs(
                name=args.export_name,
                description="trainfleet: hourly resource-level cost with tags (CUR 2.0)",
                data_queries=[
                    aws.bcmdata.ExportExportDataQueryArgs(
                        query_statement=f"SELECT {', '.join(CUR2_COLUMNS)} FROM {CUR2_TABLE}",
                        table_configurations={
                            CUR2_TABLE: {
                                "TIME_GRANULARITY": "HOURLY",
                                "INCLUDE_RESOURCES": "TRUE",
                                "INCLUDE_MANUAL_DISCOUNT_COMPATIBILITY": "FALSE",
                                "INCLUDE_SPLIT_COST_ALLOCATION_DATA": "FALSE",
                            }
                        },
                    )
                ],
                destination_configurations=[
                    aws.bcmdata.ExportExportDestinationConfigurationArgs(
                        s3_destinations=[
                            aws.bcmdata.ExportExportDestinationConfigurationS3DestinationArgs(
                                s3_bucket=bucket.bucket,
                                s3_prefix=EXPORT_PREFIX,
                                s3_region=args.region,
                                s3_output_configurations=[
                                    aws.bcmdata.ExportExportDestinationConfigurationS3DestinationS3OutputConfigurationArgs(
                                        overwrite="OVERWRITE_REPORT",
                                        format="PARQUET",
                                        compression="PARQUET",
                                        output_type="CUSTOM",
                                    )
                                ],
                            )
                        ]
                    )
                ],
                refresh_cadences=[aws.bcmdata.ExportExportRefreshCadenceArgs(frequency="SYNCHRONOUS")],
            ),
            tags=args.tags,
            # The service checks its bucket policy when the export is created.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        self.bucket_name = bucket.bucket
        self.export_arn = export.export.apply(lambda e: e.export_arn if e else None)
        self.register_outputs({"bucket_name": self.bucket_name, "export_arn": self.export_arn})
