"""trainfleet:azure:NodeFiles — a storage account and container for a fleet's node files.

The agent zipapp and the example trainer are too big for custom data (64 KB of base64). The fleet uploads them
as blobs here (infra/azure/fleet.py) and its nodes fetch them at boot with their managed identity (Storage Blob
Data Reader on this container, infra/azure/identity.py), checking the sha256 their custom data pins
(templates/node/trainfleet-fetch.py.j2).

An account of its own, not the checkpoint account: azure-native's Blob resource uploads with the account's shared
key (it lists the account keys and signs with the first: provider/pkg/resources/customresources/
custom_storage_azidentity.go, newSharedKeyCredential; pulumi-azure-native#2015 and #2948, open), and the
checkpoint account refuses shared keys (403 KeyBasedAuthenticationNotPermitted; infra/rules/azure.py holds that).
Shared keys are on here and the account is otherwise hardened like the checkpoint account (no public blob access,
TLS 1.2, HTTPS only, versioning, soft delete). It holds nothing secret, and a file changed with the key is
refused by the node's sha256 check, so the key gives no way to run code on a node.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure_native

from infra.azure.storage import harden_account
from infra.naming import AZURE_NODE_FILES_CONTAINER

CONTAINER = AZURE_NODE_FILES_CONTAINER


@dataclass
class NodeFilesArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]


class NodeFiles(pulumi.ComponentResource):
    account_name: pulumi.Output[str]
    container_name: pulumi.Output[str]
    container_id: pulumi.Output[str]
    bucket: pulumi.Output[str]  # "account/container", as trainfleet-fetch.py takes it

    def __init__(self, name: str, args: NodeFilesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:NodeFiles", name, None, opts)
        # Shared keys on: azure-native's Blob resource uploads with the account key (see the module docstring).
        account = harden_account(
            name, args.resource_group_name, args.location, args.tags, self, shared_key_access=True
        )
        container = azure_native.storage.BlobContainer(
            f"{name}-container",
            resource_group_name=args.resource_group_name,
            account_name=account.name,
            container_name=CONTAINER,
            public_access=azure_native.storage.PublicAccess.NONE,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.account_name = account.name
        self.container_name = container.name
        self.container_id = container.id
        self.bucket = pulumi.Output.concat(account.name, "/", CONTAINER)
        self.register_outputs({"bucket": self.bucket, "container_id": self.container_id})
