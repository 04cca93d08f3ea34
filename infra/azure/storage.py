"""trainfleet:azure:CheckpointStorage — a storage account and container for a fleet's checkpoints.

No public blob access, TLS 1.2 minimum, HTTPS only, shared keys off (nodes use their managed
identity), encrypted at rest, blob versioning and soft delete on, and a lifecycle policy that deletes
replaced versions after `checkpoint.retention_days`.

(The node files go to an account of their own: infra/azure/node_files.py.)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure_native

CONTAINER = "checkpoints"
SOFT_DELETE_DAYS = 7


ACCOUNT_LOGICAL_MAX = 16  # azure-native appends 8 hex characters; account names hold at most 24


def account_logical_name(name: str) -> str:
    """The storage account's Pulumi name. azure-native autonames a top-level resource `<logical name><8 hex>`
    and strips nothing (pulumi-azure-native#3665, #519), while an account name is 3-24 lowercase letters and
    digits (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules#microsoftstorage):
    so only those characters, at most 16 (a long name keeps a short hash of the whole to stay unique)."""
    cleaned = re.sub(r"[^a-z0-9]", "", name.lower())
    if len(cleaned) <= ACCOUNT_LOGICAL_MAX:
        return cleaned
    return cleaned[: ACCOUNT_LOGICAL_MAX - 4] + hashlib.sha256(name.encode()).hexdigest()[:4]


def harden_account(
    name: str,
    resource_group_name: pulumi.Input[str],
    location: str,
    tags: dict[str, str],
    parent: pulumi.Resource,
    *,
    shared_key_access: bool = False,
) -> azure_native.storage.StorageAccount:
    """A StorageV2 account with the settings every trainfleet account gets, and versioned blobs."""
    child = pulumi.ResourceOptions(parent=parent)
    account = azure_native.storage.StorageAccount(
        account_logical_name(name),
        resource_group_name=resource_group_name,
        location=location,
        kind="StorageV2",
        sku=azure_native.storage.SkuArgs(name="Standard_LRS"),
        access_tier=azure_native.storage.AccessTier.HOT,
        allow_blob_public_access=False,
        minimum_tls_version="TLS1_2",
        enable_https_traffic_only=True,
        allow_shared_key_access=shared_key_access,
        encryption=azure_native.storage.EncryptionArgs(
            key_source="Microsoft.Storage",
            services=azure_native.storage.EncryptionServicesArgs(
                blob=azure_native.storage.EncryptionServiceArgs(enabled=True, key_type="Account")
            ),
        ),
        tags=tags,
        opts=child,
    )
    azure_native.storage.BlobServiceProperties(
        f"{name}-blob",
        resource_group_name=resource_group_name,
        account_name=account.name,
        blob_services_name="default",
        is_versioning_enabled=True,
        delete_retention_policy=azure_native.storage.DeleteRetentionPolicyArgs(
            enabled=True, days=SOFT_DELETE_DAYS
        ),
        container_delete_retention_policy=azure_native.storage.DeleteRetentionPolicyArgs(
            enabled=True, days=SOFT_DELETE_DAYS
        ),
        opts=child,
    )
    return account


def lifecycle_policy(
    name: str,
    resource_group_name: pulumi.Input[str],
    account_name: pulumi.Input[str],
    container: str,
    retention_days: int,
    parent: pulumi.Resource,
) -> azure_native.storage.ManagementPolicy:
    return azure_native.storage.ManagementPolicy(
        f"{name}-lifecycle",
        resource_group_name=resource_group_name,
        account_name=account_name,
        management_policy_name="default",
        policy=azure_native.storage.ManagementPolicySchemaArgs(
            rules=[
                azure_native.storage.ManagementPolicyRuleArgs(
                    name="expire-replaced-versions",
                    enabled=True,
                    type="Lifecycle",
                    definition=azure_native.storage.ManagementPolicyDefinitionArgs(
                        actions=azure_native.storage.ManagementPolicyActionArgs(
                            version=azure_native.storage.ManagementPolicyVersionArgs(
                                delete=azure_native.storage.DateAfterCreationArgs(
                                    days_after_creation_greater_than=retention_days
                                )
                            )
                        ),
                        filters=azure_native.storage.ManagementPolicyFilterArgs(
                            blob_types=["blockBlob"], prefix_match=[f"{container}/"]
                        ),
                    ),
                )
            ]
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )


@dataclass
class CheckpointStorageArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    retention_days: int
    tags: dict[str, str]


class CheckpointStorage(pulumi.ComponentResource):
    account_name: pulumi.Output[str]
    container_name: pulumi.Output[str]
    container_id: pulumi.Output[str]
    bucket: pulumi.Output[str]  # "account/container", as the node agent takes it
    url: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointStorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:CheckpointStorage", name, None, opts)
        account = harden_account(name, args.resource_group_name, args.location, args.tags, self)
        container = azure_native.storage.BlobContainer(
            f"{name}-container",
            resource_group_name=args.resource_group_name,
            account_name=account.name,
            container_name=CONTAINER,
            public_access=azure_native.storage.PublicAccess.NONE,
            opts=pulumi.ResourceOptions(parent=self),
        )
        lifecycle_policy(name, args.resource_group_name, account.name, CONTAINER, args.retention_days, self)
        self.account_name = account.name
        self.container_name = container.name
        self.container_id = container.id
        self.bucket = pulumi.Output.concat(account.name, "/", CONTAINER)
        self.url = pulumi.Output.concat("https://", account.name, ".blob.core.windows.net/", CONTAINER)
        self.register_outputs({"bucket": self.bucket, "url": self.url, "container_id": self.container_id})
