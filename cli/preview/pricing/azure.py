"""Azure pricing functions, one per Pulumi type token (pulumi-azure-native input names)."""

from __future__ import annotations

import math

from cli.preview.model import CostComponent, Resource
from cli.preview.pricing.base import (
    Free,
    PricingContext,
    declared_size,
    elements,
    fleet_components,
    free,
    get,
    hourly_component,
    number,
    prices,
    storage_component,
    transfer_component,
    uploaded_bytes,
)
from cli.preview.pricing.checkpoints import Retention, checkpoint_components, declared_retention
from cli.preview.pricing.rates import AS_OF_YEAR, AZURE_DISK_TIERS, AZURE_DISK_URL
from infra.config import TAG_FLEET
from infra.naming import AZURE_NODE_FILES_CONTAINER


def _disk(ctx: PricingContext, r: Resource, nodes: int, location: str) -> list[CostComponent]:
    disk = get(r.inputs, "virtualMachineProfile.storageProfile.osDisk", {}) or {}
    if not disk:
        return []
    size = number(disk, "diskSizeGB", 30)
    kind = get(disk, "managedDisk.storageAccountType", "StandardSSD_LRS")
    if get(disk, "diffDiskSettings.option") == "Local":
        return []  # ephemeral OS disk on the VM's local storage: included in the VM price
    tiers = AZURE_DISK_TIERS.get(kind)
    fits = [(gb, usd) for gb, usd in tiers or [] if gb >= size]
    if not fits:
        return [
            CostComponent(
                f"{kind} OS disk", "disk-month", nodes, None, "rate", note=f"no tier for {kind} {size:g} GB"
            )
        ]
    tier_gb, usd = fits[0]
    per_fleet_month = nodes * ctx.hours_per_month / 730.0
    return [
        CostComponent(
            f"{kind} OS disk {size:g} GB ({tier_gb} GB tier) x {nodes}",
            "disk-month",
            per_fleet_month,
            usd,
            "rate:azure-managed-disk",
            job_quantity=nodes * ctx.job_hours / 730.0,
            note="" if location == "eastus" else f"eastus list price used for {location}; {AZURE_DISK_URL}",
            as_of=AS_OF_YEAR,
        )
    ]


_NICS = "virtualMachineProfile.networkProfile.networkInterfaceConfigurations"


def _public_ips(ctx: PricingContext, r: Resource, nodes: int, location: str) -> list[CostComponent]:
    """A public IPv4 per instance for each IP configuration with a publicIPAddressConfiguration, billed for as
    long as the instances run."""
    per_node = sum(
        1
        for n, _ in enumerate(elements(r.inputs, _NICS))
        for ip in elements(r.inputs, f"{_NICS}.{n}.ipConfigurations")
        if ip.get("publicIPAddressConfiguration") is not None
    )
    if per_node == 0 or nodes <= 0:
        return []
    count = per_node * nodes
    return [
        hourly_component(ctx, f"public IPv4 x {count}", count, "azure-public-ip", location, with_nodes=True)
    ]


@prices("azure-native:compute:VirtualMachineScaleSet")
def scale_set(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    i = r.inputs
    fleet = get(i, f"tags.{TAG_FLEET}")
    nodes, declared = declared_size(ctx, fleet, int(number(i, "sku.capacity", 0)), "sku.capacity")
    if nodes == 0:
        raise Free("capacity 0: no nodes run")
    size = get(i, "sku.name", required=True)
    location = ctx.region(r, "azure", get(i, "location"))
    mix = get(i, "priorityMixPolicy")
    if mix:
        base = int(number(mix, "baseRegularPriorityCount", 0))
        pct = int(number(mix, "regularPriorityPercentageAboveBase", 0))
        on_demand = min(nodes, base + math.ceil(max(nodes - base, 0) * pct / 100))
    else:
        spot = get(i, "virtualMachineProfile.priority", "Regular") in ("Spot", "Low")
        on_demand = 0 if spot else nodes
    comps = fleet_components(
        ctx, cloud="azure", region=location, zones=[], instance_type=size,
        on_demand_nodes=on_demand, spot_nodes=nodes - on_demand, declared=declared,
    )  # fmt: skip
    return comps + _disk(ctx, r, nodes, location) + _public_ips(ctx, r, nodes, location)


def _holds_node_files(account: Resource, ctx: PricingContext) -> bool:
    """A fleet's node-files account (infra/azure/node_files.py): its container beside it is node-files."""
    return any(
        c.inputs.get("containerName") == AZURE_NODE_FILES_CONTAINER
        for c in ctx.related(account, "azure-native:storage:BlobContainer")
    )


@prices("azure-native:storage:StorageAccount")
def storage_account(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    if _holds_node_files(r, ctx):
        raise Free("holds only the node files, each priced as its own blob (azure-native:storage:Blob)")
    location = ctx.region(r, "azure", get(r.inputs, "location"))
    billing = any(
        o.type == "azure-native:costmanagement:Export" and (r.id and r.id in str(o.inputs))
        for o in ctx.resources
    )
    if billing:
        return [
            storage_component(ctx, "Blob hot LRS (billing export data)", ctx.use("billing_export_gb"),
                              "azure-blob-hot-lrs", location, usage_key="billing_export_gb", gb=True),
        ]  # fmt: skip
    return [
        *checkpoint_components(
            ctx, retention=_blob_retention(r, ctx), storage_rate="azure-blob-hot-lrs",
            write_rate="azure-blob-hot-write", region=location, label="Blob hot LRS",
        ),
        transfer_component(ctx, "internet egress", "egress_gb_per_month", "azure-egress-internet", location),
    ]  # fmt: skip


def _of_account(account: Resource, ctx: PricingContext, type_token: str) -> list[Resource]:
    """Resources of a type that name this storage account (accountName), else its siblings of that type."""
    names = {
        v for v in (account.inputs.get("accountName"), account.outputs.get("name")) if isinstance(v, str)
    }
    named = [o for o in ctx.resources if o.type == type_token and o.inputs.get("accountName") in names]
    return named or ctx.related(account, type_token)


def _blob_retention(account: Resource, ctx: PricingContext) -> Retention:
    """Blob versioning, the management policy's version delete rule and soft delete, as the stack declares them
    (https://learn.microsoft.com/azure/storage/blobs/versioning-overview; a version the policy deletes is then
    soft-deleted for deleteRetentionPolicy.days more: soft-delete-blob-overview)."""
    props = _of_account(account, ctx, "azure-native:storage:BlobServiceProperties")
    if not any(get(p.inputs, "isVersioningEnabled", False) for p in props):
        return Retention(False, None, "blob versioning off")
    days = []
    for policy in _of_account(account, ctx, "azure-native:storage:ManagementPolicy"):
        for n, rule in enumerate(elements(policy.inputs, "policy.rules")):
            if get(rule, "enabled", True) is False:
                continue
            after = get(rule, "definition.actions.version.delete.daysAfterCreationGreaterThan")
            if after is not None:
                days.append((float(after), f"{policy.name} rule {n}"))
    soft = max((number(p.inputs, "deleteRetentionPolicy.days", 0) for p in props
                if get(p.inputs, "deleteRetentionPolicy.enabled", False)), default=0.0)  # fmt: skip
    return declared_retention(days, "blob versioning on, no version delete rule", soft)


@prices("azure-native:storage:Blob")
def storage_blob(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """A blob the program uploads (the node files): its own bytes at the hot LRS rate of its account's region."""
    size = uploaded_bytes(r)
    accounts = [a for a in ctx.resources if a.type == "azure-native:storage:StorageAccount"]
    account = next((a for a in accounts if a.outputs.get("name") == r.inputs.get("accountName")), None)
    location = ctx.region(r, "azure", get(account.inputs, "location") if account else None)
    what = f"Blob hot LRS ({size:,} bytes)"
    return [storage_component(ctx, what, size / 1e9, "azure-blob-hot-lrs", location, gb=True)]


@prices("azure-native:network:PublicIPAddress")
def public_ip(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    return [
        hourly_component(
            ctx,
            "public IPv4 address",
            1,
            "azure-public-ip",
            ctx.region(r, "azure", get(r.inputs, "location")),
        )
    ]


@prices("azure-native:network:NatGateway")
def nat_gateway(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    location = ctx.region(r, "azure", get(r.inputs, "location"))
    return [
        hourly_component(ctx, "NAT gateway hours", 1, "azure-nat-gateway-hour", location),
        transfer_component(ctx, "NAT data processed", "nat_gb_per_month", "azure-nat-gateway-gb", location),
    ]


free(
    "networking configuration with no hourly or data charge",
    "azure-native:network:VirtualNetwork",
    "azure-native:network:Subnet",
    "azure-native:network:NetworkSecurityGroup",
    "azure-native:network:SecurityRule",
    "azure-native:network:RouteTable",
    "azure-native:compute:ProximityPlacementGroup",
)
free(
    "resource groups, identities and role assignments carry no charge",
    "azure-native:resources:ResourceGroup",
    "azure-native:managedidentity:UserAssignedIdentity",
    "azure-native:authorization:RoleAssignment",
    "azure-native:authorization:RoleDefinition",
)
free(
    "storage configuration; the data is priced on its storage account",
    "azure-native:storage:BlobContainer",
    "azure-native:storage:ManagementPolicy",
    "azure-native:storage:BlobServiceProperties",
)
free(
    "Cost Management budgets and exports carry no charge; an export's files are priced on its storage account",
    "azure-native:consumption:Budget",
    "azure-native:costmanagement:Export",
    "azure-native:monitor:ActionGroup",
)
free("a provider is configuration, not a cloud resource", "pulumi:providers:azure-native")
