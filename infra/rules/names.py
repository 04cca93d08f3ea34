"""Rules: resource names, per type, as each cloud's API documents them.

The name checked is the one the provider would send: the mock runtime names resources the way each
provider autonames them (infra/mock_runtime.py), so an autonamed storage account is checked as
azure-native would really name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.rules import Finding, rule, where

AWS_S3 = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"
AWS_IAM = "https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateRole.html"
AWS_ASG = "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html"
AWS_BUDGET = "https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_Budget.html"
GCP_COMPUTE = "https://cloud.google.com/compute/docs/naming-resources#resource-name-format"
GCP_BUCKET = "https://cloud.google.com/storage/docs/buckets#naming"
GCP_SA = "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create"
GCP_ROLE = "https://cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create"
GCP_LABELS = "https://cloud.google.com/compute/docs/labeling-resources#requirements"
AZURE_NAMES = "https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules"
GCP_OBJECT = "https://cloud.google.com/storage/docs/objects#naming"
AZURE_BLOB = (
    "https://learn.microsoft.com/rest/api/storageservices/naming-and-referencing-containers--blobs--and-metadata"
    "#blob-names"
)


@dataclass(frozen=True)
class NameRule:
    field: str  # output property holding the physical name
    pattern: str  # full match
    says: str  # the constraint in words, for the message
    doc: str


_RFC1035 = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
NAME_RULES: dict[str, NameRule] = {
    "aws:s3/bucket:Bucket": NameRule(
        "bucket", r"(?!xn--|sthree-)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](?<!-s3alias)(?<!--ol-s3)",
        "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit", AWS_S3),
    "aws:s3/bucketV2:BucketV2": NameRule(
        "bucket", r"(?!xn--|sthree-)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]",
        "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit", AWS_S3),
    "aws:iam/role:Role": NameRule("name", r"[\w+=,.@-]{1,64}", "1-64 of letters, digits and +=,.@_-", AWS_IAM),
    "aws:iam/instanceProfile:InstanceProfile": NameRule(
        "name", r"[\w+=,.@-]{1,128}", "1-128 of letters, digits and +=,.@_-", AWS_IAM),
    "aws:autoscaling/group:Group": NameRule("name", r"[^:]{1,255}", "1-255 characters, no colon", AWS_ASG),
    "aws:budgets/budget:Budget": NameRule("name", r"[^:\\]{1,100}", "1-100 characters, no : or \\", AWS_BUDGET),
    "gcp:storage/bucket:Bucket": NameRule(
        "name", r"(?!goog)[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]",
        "3-63 lowercase letters, digits, _ . -, starting and ending with a letter or digit", GCP_BUCKET),
    "gcp:serviceaccount/account:Account": NameRule(
        "accountId", r"[a-z](?:[-a-z0-9]{4,28}[a-z0-9])", "6-30 of a-z 0-9 -, starting with a letter", GCP_SA),
    "gcp:projects/iAMCustomRole:IAMCustomRole": NameRule(
        "roleId", r"[a-zA-Z0-9_.]{3,64}", "3-64 letters, digits, _ and .", GCP_ROLE),
    "azure-native:storage:StorageAccount": NameRule(
        "name", r"[a-z0-9]{3,24}", "3-24 lowercase letters and digits only", f"{AZURE_NAMES}#microsoftstorage"),
    "azure-native:storage:BlobContainer": NameRule(
        "name", r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", "3-63 lowercase letters, digits and single hyphens",
        f"{AZURE_NAMES}#microsoftstorage"),
    "azure-native:resources:ResourceGroup": NameRule(
        "name", r"[-\w.()]{0,89}[-\w()]", "1-90 letters, digits, _ - . ( ), not ending with a period",
        f"{AZURE_NAMES}#microsoftresources"),
    "azure-native:compute:VirtualMachineScaleSet": NameRule(
        "name", r"[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}[a-zA-Z0-9_]|[a-zA-Z0-9]",
        "1-64 letters, digits, _ . -, starting with a letter or digit, not ending with . or -",
        f"{AZURE_NAMES}#microsoftcompute"),
    "azure-native:managedidentity:UserAssignedIdentity": NameRule(
        "name", r"[a-zA-Z0-9][a-zA-Z0-9_-]{2,127}", "3-128 letters, digits, _ and -, starting with a letter or digit",
        f"{AZURE_NAMES}#microsoftmanagedidentity"),
    "azure-native:network:VirtualNetwork": NameRule(
        "name", r"[a-zA-Z0-9](?:[\w.-]{0,62}\w)?", "2-64 letters, digits, _ . -", f"{AZURE_NAMES}#microsoftnetwork"),
    "azure-native:network:NetworkSecurityGroup": NameRule(
        "name", r"[a-zA-Z0-9](?:[\w.-]{0,78}\w)?", "1-80 letters, digits, _ . -", f"{AZURE_NAMES}#microsoftnetwork"),
    # Object and blob names (the node files' keys are ASCII, so characters are bytes): GCS 1-1024 bytes, no line
    # breaks, not . or .., not under .well-known/acme-challenge/; Azure 1-1024 characters in at most 254 segments.
    "gcp:storage/bucketObject:BucketObject": NameRule(
        "name", r"(?!\.{1,2}$)(?!\.well-known/acme-challenge/)[^\r\n]{1,1024}",
        "1-1024 bytes, no line breaks, not . or .., not under .well-known/acme-challenge/", GCP_OBJECT),
    "azure-native:storage:Blob": NameRule(
        "name", r"(?!(?:[^/]*/){254}).{1,1024}", "1-1024 characters in at most 254 path segments", AZURE_BLOB),
}  # fmt: skip
# Compute Engine resources share one format: RFC 1035, 1-63 characters.
NAME_RULES.update(
    {
        f"gcp:compute/{module}:{kind}": NameRule(
            "name", _RFC1035, "1-63 lowercase letters, digits, hyphens, starting with a letter (RFC 1035)", GCP_COMPUTE
        )
        for module, kind in [
            ("regionInstanceGroupManager", "RegionInstanceGroupManager"),
            ("instanceTemplate", "InstanceTemplate"),
            ("firewall", "Firewall"),
            ("network", "Network"),
            ("subnetwork", "Subnetwork"),
            ("router", "Router"),
            ("routerNat", "RouterNat"),
        ]
    }
)


def _fix(token: str) -> str:
    if token == "azure-native:storage:StorageAccount":
        return "give the account a logical name of lowercase letters and digits only (infra/azure/storage.py account_logical_name)"
    return "shorten or rename the fleet or stack (infra/naming.py builds the names)"


@rule("resource-name-format", AZURE_NAMES)
def names_follow_each_type_rules(run):
    for r in run.cloud_resources:
        spec = NAME_RULES.get(r.type)
        value = r.outputs.get(spec.field) if spec else None
        if spec is None or not isinstance(value, str):
            continue
        if not re.fullmatch(spec.pattern, value):
            yield Finding(
                "resource-name-format",
                where(r),
                f"name {value!r} is not a valid name for this type: {spec.says} ({spec.doc})",
                _fix(r.type),
            )


_GCP_LABEL_KEY = r"[a-z][a-z0-9_-]{0,62}"
_GCP_LABEL_VALUE = r"[a-z0-9_-]{0,63}"


@rule("gcp-label-format", GCP_LABELS)
def gcp_labels_follow_the_format(run):
    for r in run.cloud_resources:
        # A notification channel's `labels` are its settings (email_address), not resource labels.
        if not r.type.startswith("gcp:") or r.type.startswith("gcp:monitoring/notificationChannel"):
            continue
        labels = r.inputs.get("labels")
        if not isinstance(labels, dict):
            continue
        for key, value in labels.items():
            if not re.fullmatch(_GCP_LABEL_KEY, key) or not (
                isinstance(value, str) and re.fullmatch(_GCP_LABEL_VALUE, value)
            ):
                yield Finding(
                    "gcp-label-format",
                    where(r),
                    f"label {key!r}: {value!r} breaks GCP's label format (keys [a-z][a-z0-9_-], values "
                    f"[a-z0-9_-], at most 63 characters; {GCP_LABELS})",
                    "use infra/naming.py gcp_labels to build labels from tags",
                )
