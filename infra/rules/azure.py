"""Rules: Azure. What ARM refuses for a scale set, and what a role-assignment condition cannot evaluate."""

from __future__ import annotations

import re

from infra.rules import Finding, rule, where
from infra.rules.abac import Request, allows, blob_attributes

VMSS = "azure-native:compute:VirtualMachineScaleSet"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
BLOB = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"

VMSS_API = "https://learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/create-or-update"
SPOT = "https://learn.microsoft.com/azure/virtual-machine-scale-sets/use-spot"
LIST_BLOBS = "https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#list-blobs"
BLOB_SHARED_KEY = "https://github.com/pulumi/pulumi-azure-native/issues/2015"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_RESOURCE = "azure-native:storage:Blob"


def _profile(vmss) -> dict:
    return vmss.inputs.get("virtualMachineProfile") or {}


@rule("azure-delete-option-flexible-only", VMSS_API)
def os_disk_delete_option_is_flexible_only(run):
    """VirtualMachineScaleSetOSDisk.deleteOption: "This feature is available for VMSS with Flexible
    OrchestrationMode only"; a Uniform scale set's disks go with their VMs anyway."""
    for vmss in run.of_type(VMSS):
        mode = vmss.inputs.get("orchestrationMode") or "Uniform"
        os_disk = (_profile(vmss).get("storageProfile") or {}).get("osDisk") or {}
        if mode == "Uniform" and "deleteOption" in os_disk:
            yield Finding(
                "azure-delete-option-flexible-only",
                where(vmss),
                "osDisk.deleteOption is a Flexible-orchestration setting, and this scale set is Uniform",
                "remove delete_option (a Uniform scale set deletes a VM's managed OS disk with the VM)",
            )


@rule("azure-spot-settings", SPOT)
def spot_settings_go_together(run):
    """Spot VMs need an eviction policy (Deallocate or Delete) and take a max price (-1: up to pay-as-you-go);
    Regular VMs take neither."""
    for vmss in run.of_type(VMSS):
        profile = _profile(vmss)
        priority = profile.get("priority") or "Regular"
        eviction, billing = profile.get("evictionPolicy"), profile.get("billingProfile")
        price = (billing or {}).get("maxPrice")
        problem = None
        if priority == "Spot" and eviction not in ("Deallocate", "Delete"):
            problem = f"Spot VMs need evictionPolicy Deallocate or Delete, not {eviction!r}"
        elif priority == "Spot" and price is not None and price != -1 and not price > 0:
            problem = f"billingProfile.maxPrice {price!r} is neither -1 nor a positive price"
        elif priority != "Spot" and (eviction is not None or billing is not None):
            problem = f"{priority} VMs take no evictionPolicy or billingProfile"
        if problem:
            yield Finding(
                "azure-spot-settings", where(vmss), problem, "set purchase: spot, or leave max_price empty"
            )


def _listing_prefixes(condition: str) -> list[str]:
    return re.findall(rf"@Resource\[{re.escape(BLOB)}:path\] StringStartsWith '([^']*)'", condition)


@rule("azure-abac-blob-list", LIST_BLOBS)
def blob_conditions_let_nodes_list_their_prefix(run):
    """List Blobs (blobs/read, sub-operation Blob.List) carries no blob path; a condition that limits reads by
    path must treat listing separately (by the request's prefix), or every listing is denied."""
    for assignment in run.of_type(ROLE_ASSIGNMENT):
        condition = assignment.inputs.get("condition")
        if not isinstance(condition, str):
            continue
        for prefix in _listing_prefixes(condition):
            listing = Request(f"{BLOB}/read", "Blob.List", blob_attributes(list_prefix=prefix))
            if not allows(condition, listing):
                yield Finding(
                    "azure-abac-blob-list",
                    where(assignment),
                    f"the condition limits blobs by path, which List Blobs does not carry: listing {prefix!r} "
                    "is denied, so restore and prune get 403",
                    "exclude SubOperationMatches{'Blob.List'} from the path clause and limit listing by "
                    "@Request[...blobs:prefix] (infra/azure/identity.py prefix_condition)",
                )


@rule("azure-blob-upload-needs-shared-key", BLOB_SHARED_KEY)
def blobs_go_to_accounts_that_take_the_shared_key(run):
    """azure-native's Blob resource uploads with the account's shared key: it lists the account keys and signs
    with the first (provider/pkg/resources/customresources/custom_storage_azidentity.go,
    newSharedKeyCredential); an account with allowSharedKeyAccess false answers 403
    KeyBasedAuthenticationNotPermitted (issue above, still open; also #2948)."""
    accounts = {a.outputs.get("name"): a for a in run.of_type(STORAGE_ACCOUNT)}
    for blob in run.of_type(BLOB_RESOURCE):
        account = accounts.get(blob.inputs.get("accountName"))
        if account is not None and account.inputs.get("allowSharedKeyAccess") is False:
            yield Finding(
                "azure-blob-upload-needs-shared-key",
                where(blob),
                f"it uploads into storage account {account.name}, which refuses shared-key requests, and "
                "azure-native uploads blobs with the account key (403 KeyBasedAuthenticationNotPermitted)",
                "upload into an account with shared keys on (infra/azure/node_files.py) or keep the data out "
                "of Pulumi",
            )
