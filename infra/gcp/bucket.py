"""trainfleet:gcp:CheckpointBucket — a regional Cloud Storage bucket for a fleet's checkpoints.

Uniform bucket-level access (no object ACLs), public access prevention enforced, versioning on,
encrypted at rest (Google-managed keys), and a lifecycle that deletes replaced versions after
`checkpoint.retention_days` and aborts incomplete multipart uploads.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

ABORT_INCOMPLETE_UPLOADS_DAYS = 1


@dataclass
class CheckpointBucketArgs:
    region: str
    retention_days: int
    labels: dict[str, str]
    bucket_name: str | None = None  # None: Pulumi names it (logical name plus a random suffix)


class CheckpointBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    url: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:CheckpointBucket", name, None, opts)
        bucket = gcp.storage.Bucket(
            f"{name}",
            name=args.bucket_name,
            location=args.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        with_state="ARCHIVED", days_since_noncurrent_time=args.retention_days
                    ),
                ),
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="AbortIncompleteMultipartUpload"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=ABORT_INCOMPLETE_UPLOADS_DAYS),
                ),
            ],
            force_destroy=False,
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.bucket_name = bucket.name
        self.url = bucket.url
        self.register_outputs({"bucket_name": self.bucket_name, "url": self.url})
