"""trainfleet:azure:NodeIdentity — the managed identity a fleet's VMs run as.

Storage Blob Data Contributor on its own container only, further limited by an ABAC condition to
blobs under its own checkpoint prefix; Storage Blob Data Reader on its node-files container
(infra/azure/node_files.py), under the same prefix, for trainfleet-fetch.py at boot. The right to see
its own scale set's members and to empty it is granted by the fleet (the scale set must exist before a role can
be assigned on it, infra/azure/fleet.py "-own-group"); the custom role for that is declared here.

The node empties its scale set by deleting its instances (Virtual Machine Scale Sets - Delete Instances,
POST .../virtualMachineScaleSets/{name}/delete with the instance ids it listed), not by writing the scale set:
`Microsoft.Compute/virtualMachineScaleSets/write` would let it rewrite the whole model (image, custom data,
identity, size, capacity up). `delete/action` "Deletes the instances of the Virtual Machine Scale Set"
(https://learn.microsoft.com/azure/role-based-access-control/permissions/compute#microsoftcompute): it can lower
the capacity of its own scale set, never raise it or change anything else. Nothing in the agent needs more
(templates/agent/trainfleet_agent/membership.py; tests/test_node_least_privilege.py holds the two together).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure_native

STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
STORAGE_BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
BLOB = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
# Exactly the agent's ARM calls, on its own scale set (the assignment's scope), each the action ARM authorizes it as
# (https://learn.microsoft.com/azure/role-based-access-control/permissions/compute#microsoftcompute):
GROUP_ACTIONS = [
    # peers: Network Interface In VM SS - List Virtual Machine Scale Set Network Interfaces
    "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",
    # scale-to-zero: Virtual Machine Scale Set VMs - List (the instance ids to delete)
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    # scale-to-zero: Virtual Machine Scale Sets - Delete Instances ("Deletes the instances of the VMSS")
    "Microsoft.Compute/virtualMachineScaleSets/delete/action",
]


# The Storage Blob Data Contributor data actions that name one blob (and so carry its path).
PATH_ACTIONS = ("read", "write", "delete", "add/action", "move/action")
LIST = "Blob.List"


def prefix_condition(prefix: str) -> str:
    """ABAC: blob data actions only under `prefix`, listing included.

    List Blobs is `blobs/read` with sub-operation Blob.List, and carries no blob path: a condition on the path
    alone cannot be evaluated for it and denies, so restore and prune would get 403. Listing is instead
    limited by the request's `prefix`, as Microsoft's "read or list blobs with a path" example does
    (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples#example-read-write-or-delete-blobs-in-named-containers-with-a-path,
    https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#list-blobs)."""
    read, others = f"{BLOB}/read", [f"{BLOB}/{a}" for a in PATH_ACTIONS if a != "read"]
    # The shape of Microsoft's examples: for each action, !(ActionMatches ...), joined with AND.
    not_by_path = " AND ".join(
        [f"!(ActionMatches{{'{read}'}} AND NOT SubOperationMatches{{'{LIST}'}})"]
        + [f"!(ActionMatches{{'{a}'}})" for a in others]
    )
    return (
        f"(({not_by_path}) OR (@Resource[{BLOB}:path] StringStartsWith '{prefix}'))"
        f" AND ((!(ActionMatches{{'{read}'}} AND SubOperationMatches{{'{LIST}'}}))"
        f" OR (@Request[{BLOB}:prefix] StringStartsWith '{prefix}'))"
    )


@dataclass
class NodeIdentityArgs:
    resource_group_name: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    location: str
    container_id: pulumi.Input[str]
    prefix: str
    group_name: str
    role_seed: str  # makes the custom role's id deterministic per stack and fleet
    tags: dict[str, str]
    files_container_id: pulumi.Input[str] | None = None  # the fleet's node files (NodeFiles), read at boot


class NodeIdentity(pulumi.ComponentResource):
    identity_id: pulumi.Output[str]
    principal_id: pulumi.Output[str]
    client_id: pulumi.Output[str]
    group_role_id: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:NodeIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        client = azure_native.authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        identity = azure_native.managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group_name,
            location=args.location,
            tags=args.tags,
            opts=child,
        )

        def built_in(role: str) -> pulumi.Output[str]:
            return client.subscription_id.apply(
                lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role}"
            )

        def prefix_role(suffix: str, role: str, container_id, what: str) -> None:
            """A data-plane role on one container, limited to the job's prefix by the ABAC condition."""
            azure_native.authorization.RoleAssignment(
                f"{name}-{suffix}",
                principal_id=identity.principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=built_in(role),
                scope=container_id,
                condition=prefix_condition(args.prefix),
                condition_version="2.0",
                description=f"trainfleet {args.group_name}: {what}",
                opts=child,
            )

        prefix_role("checkpoints", STORAGE_BLOB_DATA_CONTRIBUTOR, args.container_id, "own checkpoint prefix")
        if args.files_container_id is not None:
            prefix_role("node-files", STORAGE_BLOB_DATA_READER, args.files_container_id, "read own node files")
        role = azure_native.authorization.RoleDefinition(
            f"{name}-group-role",
            role_definition_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"trainfleet:{args.role_seed}")),
            role_name=f"trainfleet node {args.role_seed}",
            description="peer discovery and deleting the instances of its own scale set (scale to zero)",
            role_type="CustomRole",
            scope=args.resource_group_id,
            assignable_scopes=[args.resource_group_id],
            permissions=[azure_native.authorization.PermissionArgs(actions=GROUP_ACTIONS)],
            opts=child,
        )
        self.identity_id = identity.id
        self.principal_id = identity.principal_id
        self.client_id = identity.client_id
        self.group_role_id = role.id
        self.register_outputs({"identity_id": self.identity_id, "principal_id": self.principal_id})
