"""Private, encrypted object storage on every cloud.

Resource policy (each resource as declared, before it is created):
  AWS   BucketPublicAccessBlock: all four switches true. BucketServerSideEncryptionConfiguration: every rule
        encrypts by default with SSE-S3 or SSE-KMS. Bucket / BucketAcl: no public canned ACL.
  GCP   storage Bucket: uniformBucketLevelAccess true, publicAccessPrevention "enforced". Bucket IAM: no
        allUsers / allAuthenticatedUsers member.
  Azure StorageAccount: allowBlobPublicAccess false, enableHttpsTrafficOnly true, minimumTlsVersion TLS1_2,
        encryption with the blob service enabled. BlobContainer: publicAccess None.
Stack policy: every aws:s3 Bucket the program declares has such a public access block and such an
encryption configuration (the S3 settings are separate resources, so only the whole stack shows a bucket
that has none).
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from .base import resource_policy
from .props import dig, is_map, is_unknown, listed, plain

NAME = "private-encrypted-storage"
STACK_NAME = "aws-s3-buckets-blocked-and-encrypted"

S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
S3_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
S3_ACLS = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
PUBLIC_ACCESS_SWITCHES = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/acl-overview.html#canned-acl
PUBLIC_CANNED_ACLS = ("public-read", "public-read-write", "authenticated-read")
# https://docs.aws.amazon.com/AmazonS3/latest/API/API_ServerSideEncryptionByDefault.html
SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")

GCS_BUCKET = "gcp:storage/bucket:Bucket"
GCS_BUCKET_IAM = (
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding",
)
# https://cloud.google.com/storage/docs/public-access-prevention
PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")

AZURE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_CONTAINER = "azure-native:storage:BlobContainer"
AZURE_TLS_OK = ("TLS1_2", "TLS1_3")
AZURE_KEY_SOURCES = ("Microsoft.Storage", "Microsoft.Keyvault")


def _public_access_block(props: Any) -> list[str]:
    off = [k for k in PUBLIC_ACCESS_SWITCHES if dig(props, k) is not True]
    if not off:
        return []
    return [f"public access block leaves {', '.join(off)} unset or false; all four must be true"]


def _encryption(props: Any) -> list[str]:
    rules = listed(dig(props, "rules"))
    if not rules:
        return ["server-side encryption configuration has no rule"]
    out = []
    for i, rule in enumerate(rules):
        algorithm = dig(rule, "applyServerSideEncryptionByDefault.sseAlgorithm")
        if algorithm not in SSE_ALGORITHMS:
            out.append(
                f"rules[{i}].applyServerSideEncryptionByDefault.sseAlgorithm is {algorithm!r}; "
                f"use one of {', '.join(SSE_ALGORITHMS)}"
            )
    return out


def _canned_acl(props: Any) -> list[str]:
    acl = dig(props, "acl")
    if acl in PUBLIC_CANNED_ACLS:
        return [f"canned ACL {acl!r} makes the bucket's objects readable outside the account"]
    return []


def _gcs_bucket(props: Any) -> list[str]:
    out = []
    if dig(props, "uniformBucketLevelAccess") is not True:
        out.append("uniformBucketLevelAccess must be true (object ACLs off; IAM alone grants access)")
    prevention = dig(props, "publicAccessPrevention")
    if prevention != "enforced":
        out.append(f'publicAccessPrevention is {prevention!r}; it must be "enforced"')
    return out


def _gcs_bucket_iam(props: Any) -> list[str]:
    members = listed(dig(props, "member")) + listed(dig(props, "members"))
    public = [m for m in members if m in PUBLIC_MEMBERS]
    return [f"grants {dig(props, 'role')!r} to {m}: the bucket would be public" for m in public]


def _azure_account(props: Any) -> list[str]:
    out = []
    if dig(props, "allowBlobPublicAccess") is not False:
        out.append("allowBlobPublicAccess must be false")
    if dig(props, "enableHttpsTrafficOnly") is not True:
        out.append("enableHttpsTrafficOnly must be true (HTTPS only)")
    tls = dig(props, "minimumTlsVersion")
    if tls not in AZURE_TLS_OK:
        out.append(f'minimumTlsVersion is {tls!r}; it must be "TLS1_2" (Azure\'s default is TLS 1.0)')
    encryption = dig(props, "encryption")
    if not is_map(encryption):
        out.append("encryption is not declared; declare it with services.blob.enabled = true")
    else:
        if dig(encryption, "services.blob.enabled") is not True:
            out.append("encryption.services.blob.enabled must be true")
        source = dig(encryption, "keySource", "Microsoft.Storage")
        if source not in AZURE_KEY_SOURCES:
            out.append(f"encryption.keySource is {source!r}; use Microsoft.Storage or Microsoft.Keyvault")
    return out


def _azure_container(props: Any) -> list[str]:
    access = dig(props, "publicAccess", "None")
    if access != "None":
        return [f'publicAccess is {access!r}; containers must be private ("None")']
    return []


def storage_findings(resource_type: str, props: Any) -> list[str]:
    if resource_type == S3_PUBLIC_ACCESS_BLOCK:
        return _public_access_block(props)
    if resource_type in S3_ENCRYPTION:
        return _encryption(props)
    if resource_type in S3_BUCKETS or resource_type in S3_ACLS:
        return _canned_acl(props)
    if resource_type == GCS_BUCKET:
        return _gcs_bucket(props)
    if resource_type in GCS_BUCKET_IAM:
        return _gcs_bucket_iam(props)
    if resource_type == AZURE_ACCOUNT:
        return _azure_account(props)
    if resource_type == AZURE_CONTAINER:
        return _azure_container(props)
    return []


POLICY = resource_policy(
    NAME,
    "Buckets and storage accounts are private and encrypted: S3 public access blocks all true and default "
    "encryption SSE-S3/SSE-KMS (https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html, "
    "https://docs.aws.amazon.com/AmazonS3/latest/userguide/default-bucket-encryption.html); GCS uniform "
    "bucket-level access and public access prevention enforced "
    "(https://cloud.google.com/storage/docs/uniform-bucket-level-access, "
    "https://cloud.google.com/storage/docs/public-access-prevention); Azure storage accounts with no public "
    "blob access, HTTPS only, TLS 1.2 minimum and encryption on "
    "(https://learn.microsoft.com/azure/storage/common/security-recommendations).",
    storage_findings,
)


# ------------------------------------------------------------------------------------------- stack policy


def _targets(resource: PolicyResource, props: dict[str, Any]) -> set[str]:
    """What a bucket-settings resource points at: URNs of the resources its `bucket` input came from (the
    engine's property dependencies, known even in a preview) and the bucket name or id it holds."""
    out = {dep.urn for dep in (resource.property_dependencies or {}).get("bucket", [])}
    bucket = props.get("bucket")
    if isinstance(bucket, str) and not is_unknown(bucket):
        out.add(bucket)
    return out


def _bucket_keys(resource: PolicyResource, props: dict[str, Any]) -> set[str]:
    keys = {resource.urn}
    for key in ("id", "bucket"):
        value = props.get(key)
        if isinstance(value, str) and value and not is_unknown(value):
            keys.add(value)
    return keys


def s3_bucket_findings(resources: list[PolicyResource]) -> list[tuple[str, str]]:
    """(urn, message) for each S3 bucket without a full public access block or default encryption."""
    blocked: set[str] = set()
    encrypted: set[str] = set()
    buckets = []
    for r in resources:
        props = plain(r.props)
        if r.resource_type in S3_BUCKETS:
            buckets.append((r, props))
        elif r.resource_type == S3_PUBLIC_ACCESS_BLOCK and not _public_access_block(props):
            blocked |= _targets(r, props)
        elif r.resource_type in S3_ENCRYPTION and not _encryption(props):
            encrypted |= _targets(r, props)
    out = []
    for bucket, props in buckets:
        keys = _bucket_keys(bucket, props)
        missing = []
        if not keys & blocked:
            missing.append("a BucketPublicAccessBlock with all four settings true")
        if not keys & encrypted:
            missing.append("a BucketServerSideEncryptionConfiguration (SSE-S3 or SSE-KMS)")
        if missing:
            out.append((bucket.urn, f"S3 bucket {bucket.name} has no {' and no '.join(missing)}"))
    return out


def validate_s3_buckets(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for urn, message in s3_bucket_findings(list(args.resources)):
        report_violation(message, urn)


STACK_POLICY = StackValidationPolicy(
    name=STACK_NAME,
    description=(
        "Every S3 bucket the program declares has its own public access block (all four settings true) and "
        "default encryption. Follows https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html "
        "and https://docs.aws.amazon.com/AmazonS3/latest/userguide/default-bucket-encryption.html."
    ),
    validate=validate_s3_buckets,
    enforcement_level=EnforcementLevel.MANDATORY,
)
