"""trainfleet:aws:CheckpointBucket — where a fleet's checkpoints live.

Versioned (an interrupted upload never destroys the last good checkpoint), encrypted at rest,
public access fully blocked, ACLs disabled, TLS-only bucket policy, and a lifecycle that expires
replaced versions after `checkpoint.retention_days`, removes expired delete markers and aborts
incomplete multipart uploads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

ABORT_INCOMPLETE_UPLOADS_DAYS = 1


def tls_only_statement(bucket_arn: str) -> dict:
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def harden_bucket(
    name: str,
    bucket: aws.s3.Bucket,
    region: str,
    parent: pulumi.Resource,
    *,
    noncurrent_days: int,
    extra_statements: Callable[[str, str], list[dict]] | None = None,
    account: pulumi.Input[str] = "",
) -> aws.s3.BucketPolicy:
    """The settings every trainfleet bucket gets; returns the bucket policy resource."""
    child = pulumi.ResourceOptions(parent=parent)
    aws.s3.BucketOwnershipControls(
        f"{name}-ownership",
        bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
        region=region,
        opts=child,
    )
    block = aws.s3.BucketPublicAccessBlock(
        f"{name}-public-access",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        region=region,
        opts=child,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-encryption",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"
                ),
                bucket_key_enabled=True,
            )
        ],
        region=region,
        opts=child,
    )
    versioning = aws.s3.BucketVersioning(
        f"{name}-versioning",
        bucket=bucket.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
        region=region,
        opts=child,
    )
    aws.s3.BucketLifecycleConfiguration(
        f"{name}-lifecycle",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-replaced-versions",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=noncurrent_days
                ),
                expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(
                    expired_object_delete_marker=True
                ),
            ),
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="abort-incomplete-uploads",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=ABORT_INCOMPLETE_UPLOADS_DAYS
                ),
            ),
        ],
        region=region,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[versioning]),
    )

    def policy(values: list[str]) -> str:
        arn, account_id = values
        statements = [tls_only_statement(arn)] + (
            extra_statements(arn, account_id) if extra_statements else []
        )
        return json.dumps({"Version": "2012-10-17", "Statement": statements})

    return aws.s3.BucketPolicy(
        f"{name}-policy",
        bucket=bucket.id,
        policy=pulumi.Output.all(bucket.arn, account).apply(policy),
        region=region,
        # A policy is only accepted once the public-access block exists (it rejects public ones).
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[block]),
    )


@dataclass
class CheckpointBucketArgs:
    region: str
    retention_days: int
    tags: dict[str, str]
    bucket_name: str | None = None  # None: Pulumi names it (logical name plus a random suffix)


class CheckpointBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    arn: pulumi.Output[str]
    url: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:CheckpointBucket", name, None, opts)
        bucket = aws.s3.Bucket(
            f"{name}",
            bucket=args.bucket_name,
            force_destroy=False,
            region=args.region,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        harden_bucket(name, bucket, args.region, self, noncurrent_days=args.retention_days)
        self.bucket_name = bucket.bucket
        self.arn = bucket.arn
        self.url = bucket.bucket.apply(lambda b: f"s3://{b}")
        self.register_outputs({"bucket_name": self.bucket_name, "arn": self.arn, "url": self.url})
