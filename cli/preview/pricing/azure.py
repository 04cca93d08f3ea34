"""Azure pricing functions, one per Pulumi type token (pulumi-azure-native input names)."""

from __future__ import annotations

import math

from cli.preview.model import CostComponent, Resource
from cli.preview.pricing.base import (
    Free,
    PricingContext,
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
from cli.preview.pricing.rates import AZURE_DISK_TIERS, AZURE_DISK_URL
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
        )
    ]


@prices("azure-native:compute:VirtualMachineScaleSet")
def scale_set(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    i = r.inputs
    nodes = int(number(i, "sku.capacity", 0))
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
        on_demand_nodes=on_demand, spot_nodes=nodes - on_demand,
    )  # fmt: skip
    return comps + _disk(ctx, r, nodes, location)


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
    gb_key = "billing_export_gb" if billing else "checkpoint_gb"
    what = "billing export data" if billing else "checkpoints"
    comps = [
        storage_component(
            ctx, f"Blob hot LRS ({what})", ctx.use(gb_key), "azure-blob-hot-lrs", location, usage_key=gb_key
        )
    ]
    if not billing:
        comps.append(
            transfer_component(
                ctx, "internet egress", "egress_gb_per_month", "azure-egress-internet", location
            )
        )
    return comps


@prices("azure-native:storage:Blob")
def storage_blob(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """A blob the program uploads (the node files): its own bytes at the hot LRS rate of its account's region."""
    size = uploaded_bytes(r)
    accounts = [a for a in ctx.resources if a.type == "azure-native:storage:StorageAccount"]
    account = next((a for a in accounts if a.outputs.get("name") == r.inputs.get("accountName")), None)
    location = ctx.region(r, "azure", get(account.inputs, "location") if account else None)
    what = f"Blob hot LRS ({size:,} bytes)"
    return [storage_component(ctx, what, size / 1e9, "azure-blob-hot-lrs", location)]


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
    return [
        hourly_component(
            ctx,
            "NAT gateway hours",
            1,
            "azure-nat-gateway-hour",
            ctx.region(r, "azure", get(r.inputs, "location")),
        )
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
