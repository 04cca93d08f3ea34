"""GCP pricing functions, one per Pulumi type token (pulumi-gcp input names)."""

from __future__ import annotations

from typing import Any

from cli.preview.model import CostComponent, Resource
from cli.preview.pricing.base import (
    Free,
    NotEstimable,
    PricingContext,
    autoscaled_nodes,
    declared_size,
    elements,
    fleet_components,
    free,
    get,
    hourly_component,
    is_unknown,
    number,
    prices,
    storage_component,
    transfer_component,
    uploaded_bytes,
)
from cli.preview.pricing.checkpoints import Retention, checkpoint_components, declared_retention
from infra.config import TAG_FLEET

_DISK_RATES = {"pd-balanced": "gcp-pd-balanced", "pd-ssd": "gcp-pd-ssd", "pd-standard": "gcp-pd-standard"}
_TEMPLATES = (
    "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
)


def _template(r: Resource, ctx: PricingContext, ref: Any) -> Resource | None:
    """The instance template a group's version names: by id / self link / name, else its only sibling."""
    if isinstance(ref, str) and not is_unknown(ref):
        found = ctx.by_id(ref)
        if found is not None:
            return found
        for cand in ctx.resources:
            if cand.type in _TEMPLATES and ref in (
                cand.outputs.get("selfLink"),
                cand.outputs.get("selfLinkUnique"),
                cand.outputs.get("name"),
                cand.inputs.get("name"),
            ):
                return cand
    siblings = [s for t in _TEMPLATES for s in ctx.related(r, t)]
    return siblings[0] if len(siblings) == 1 else None


def _is_spot(template: Resource) -> bool:
    sched = get(template.inputs, "scheduling", {}) or {}
    if not isinstance(sched, dict):
        raise TypeError(f"input scheduling is {type(sched).__name__}, not an object")
    return get(sched, "provisioningModel") == "SPOT" or get(sched, "preemptible") in (True, "true")


def _external_ips(ctx: PricingContext, vm: Resource, nodes: int, region: str) -> list[CostComponent]:
    """An ephemeral external IPv4 per access config per node, billed like an in-use address for as long as the
    nodes run; an access config with a `natIp` uses a reserved gcp:compute/address:Address, priced on its own."""
    per_node = 0
    for n, _ in enumerate(elements(vm.inputs, "networkInterfaces")):
        for config in elements(vm.inputs, f"networkInterfaces.{n}.accessConfigs"):
            if not config.get("natIp"):  # set (even unknown until apply): a reserved address
                per_node += 1
    if per_node == 0 or nodes <= 0:
        return []
    spot = _is_spot(vm)
    count = per_node * nodes
    return [
        hourly_component(
            ctx,
            f"external IPv4 x {count}{' (Spot VM rate)' if spot else ''}",
            count,
            "gcp-external-ip-spot" if spot else "gcp-external-ip",
            region,
            with_nodes=True,
        )
    ]


def _disks(ctx: PricingContext, template: Resource, nodes: int, region: str) -> list[CostComponent]:
    out = []
    for n, _ in enumerate(elements(template.inputs, "disks")):
        kind = get(template.inputs, f"disks.{n}.diskType") or "pd-standard"
        if kind == "local-ssd":
            continue  # billed with the machine type where it is bundled
        size = number(template.inputs, f"disks.{n}.diskSizeGb", 10)
        rate_id = _DISK_RATES.get(kind)
        if rate_id is None:
            out.append(
                CostComponent(
                    f"{kind} disk", "GB-month", size * nodes, None, "rate", note=f"no rate for {kind}"
                )
            )
            continue
        out.append(  # disks live as long as their nodes
            storage_component(ctx, f"{kind} {size:g} GB x {nodes} node{'s' if nodes != 1 else ''}", size * nodes,
                              rate_id, region, with_nodes=True)
        )  # fmt: skip
    return out


_AUTOSCALERS = ("gcp:compute/autoscaler:Autoscaler", "gcp:compute/regionAutoscaler:RegionAutoscaler")


def _group_size(r: Resource, ctx: PricingContext) -> tuple[int, str]:
    """The group's target size; without one an autoscaler sizes it, anywhere up to its maxReplicas. Neither
    a target size nor an autoscaler: the size is unknown."""
    if get(r.inputs, "targetSize") is not None:
        return int(number(r.inputs, "targetSize")), ""

    def max_replicas() -> tuple[int, str]:
        names = {v for v in (r.id, r.outputs.get("selfLink"), r.outputs.get("id"), r.inputs.get("name")) if v}
        scalers = [a for a in ctx.resources if a.type in _AUTOSCALERS and get(a.inputs, "target") in names]
        scalers = scalers or [a for t in _AUTOSCALERS for a in ctx.related(r, t)]
        if len(scalers) != 1:
            raise NotEstimable("no targetSize and no autoscaler that names the group: its size is unknown")
        return int(number(scalers[0].inputs, "autoscalingPolicy.maxReplicas")), "the autoscaler's maxReplicas"

    return autoscaled_nodes(r, ctx, "targetSize", max_replicas)


def _group(r: Resource, ctx: PricingContext, region: str, zones: list[str]) -> list[CostComponent]:
    versions = elements(r.inputs, "versions")
    template = _template(r, ctx, versions[0].get("instanceTemplate") if versions else None)
    nodes, sized = _group_size(r, ctx)
    declared = ""
    if template is not None and not sized:  # a trainfleet fleet's template carries its label
        fleet = get(template.inputs, f"labels.{TAG_FLEET}")
        nodes, declared = declared_size(ctx, fleet, nodes, "targetSize")
    if nodes == 0:
        raise Free("target size 0: no nodes run")
    if template is None:
        raise NotEstimable("instance template unknown")
    machine = get(template.inputs, "machineType", required=True)
    spot = _is_spot(template)
    comps = fleet_components(
        ctx, cloud="gcp", region=region, zones=zones, instance_type=machine,
        on_demand_nodes=0 if spot else nodes, spot_nodes=nodes if spot else 0, note=sized, declared=declared,
    )  # fmt: skip
    return comps + _disks(ctx, template, nodes, region) + _external_ips(ctx, template, nodes, region)


@prices("gcp:compute/instanceGroupManager:InstanceGroupManager")
def instance_group_manager(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    zone = get(r.inputs, "zone")
    region = zone.rsplit("-", 1)[0] if isinstance(zone, str) and zone else ctx.region(r, "gcp")
    return _group(r, ctx, region, [zone] if zone else [])


@prices("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager")
def region_instance_group_manager(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    region = ctx.region(r, "gcp", get(r.inputs, "region"))
    return _group(r, ctx, region, elements(r.inputs, "distributionPolicyZones", str))


@prices("gcp:compute/instance:Instance")
def instance(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    zone = get(r.inputs, "zone", required=True)
    region = zone.rsplit("-", 1)[0]
    machine = get(r.inputs, "machineType", required=True)
    spot = _is_spot(r)
    comps = fleet_components(
        ctx, cloud="gcp", region=region, zones=[zone], instance_type=machine,
        on_demand_nodes=0 if spot else 1, spot_nodes=1 if spot else 0,
    )  # fmt: skip
    size = number(r.inputs, "bootDisk.initializeParams.size", 10)
    kind = get(r.inputs, "bootDisk.initializeParams.type", "pd-balanced")
    comps.append(
        storage_component(
            ctx, f"{kind} boot {size:g} GB", size, _DISK_RATES.get(kind, "gcp-pd-balanced"), region
        )
    )
    return comps + _external_ips(ctx, r, 1, region)


@prices("gcp:storage/bucket:Bucket")
def storage_bucket(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    location = get(r.inputs, "location", "")
    region = location.lower() if isinstance(location, str) and location else ctx.region(r, "gcp")
    return [
        *checkpoint_components(
            ctx, retention=_gcs_retention(r), storage_rate="gcp-gcs-standard", write_rate="gcp-gcs-class-a",
            region=region, label="Cloud Storage Standard",
        ),
        transfer_component(ctx, "internet egress", "egress_gb_per_month", "gcp-egress-internet", region),
    ]  # fmt: skip


def _gcs_retention(bucket: Resource) -> Retention:
    """Versioning and the Delete rule for noncurrent objects the bucket declares (daysSinceNoncurrentTime, or
    age on ARCHIVED objects; https://cloud.google.com/storage/docs/lifecycle#conditions)."""
    if not get(bucket.inputs, "versioning.enabled", False):
        return Retention(False, None, "versioning off")
    days = []
    for n, rule in enumerate(elements(bucket.inputs, "lifecycleRules")):
        if get(rule, "action.type") != "Delete":
            continue
        since = get(rule, "condition.daysSinceNoncurrentTime")
        if since is None and get(rule, "condition.withState") == "ARCHIVED":
            since = get(rule, "condition.age")
        if since is not None:
            days.append((float(since), f"lifecycleRules[{n}]"))
    return declared_retention(days, "versioning on, no Delete rule for noncurrent objects")


@prices("gcp:storage/bucketObject:BucketObject")
def storage_object(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """An object the program uploads (the node files): its own bytes at the Cloud Storage Standard rate of its
    bucket's location."""
    size = uploaded_bytes(r)
    bucket = next(
        (
            b
            for b in ctx.resources
            if b.type == "gcp:storage/bucket:Bucket" and b.outputs.get("name") == r.inputs.get("bucket")
        ),
        None,
    )
    location = get(bucket.inputs, "location", "") if bucket else ""
    region = location.lower() if isinstance(location, str) and location else ctx.region(r, "gcp")
    what = f"Cloud Storage Standard ({size:,} bytes)"
    return [storage_component(ctx, what, size / 1e9, "gcp-gcs-standard", region, gb=True)]


@prices("gcp:bigquery/dataset:Dataset")
def bigquery_dataset(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    location = get(r.inputs, "location", "")
    region = location.lower() if isinstance(location, str) and location else ctx.region(r, "gcp")
    gb = ctx.use("billing_export_gb")
    return [
        storage_component(
            ctx,
            "BigQuery active storage (billing export)",
            gb,
            "gcp-bigquery-storage",
            region,
            usage_key="billing_export_gb",
            gb=True,
        )
    ]


@prices("gcp:compute/routerNat:RouterNat")
def router_nat(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    region = ctx.region(r, "gcp", get(r.inputs, "region"))
    vms = 0
    for other in ctx.resources:
        if other.type.startswith("gcp:compute/") and "nstanceGroupManager" in other.type:
            try:
                vms += int(number(other.inputs, "targetSize", 0))
            except NotEstimable:
                continue
    vms = min(max(vms, 1), 32)  # Cloud NAT bills per VM up to 32 VMs per gateway
    return [
        hourly_component(
            ctx,
            f"Cloud NAT for {vms} VM{'s' if vms != 1 else ''}",
            vms,
            "gcp-cloud-nat-vm-hour",
            region,
            with_nodes=True,
        ),
        # billed per GiB processed, both directions, on top of the VM-hours and of any egress charge
        transfer_component(ctx, "NAT data processed", "nat_gb_per_month", "gcp-cloud-nat-gb", region),
    ]


@prices("gcp:compute/address:Address")
def address(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    if get(r.inputs, "addressType", "EXTERNAL") == "INTERNAL":
        raise Free("internal addresses carry no charge")
    return [
        hourly_component(
            ctx, "external IPv4 address", 1, "gcp-external-ip", ctx.region(r, "gcp", get(r.inputs, "region"))
        )
    ]


free(
    "an instance template costs nothing; the instances it launches are priced on their group",
    *_TEMPLATES,
)
free(
    "networking configuration with no hourly or data charge",
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/firewall:Firewall",
    "gcp:compute/router:Router",
    "gcp:compute/route:Route",
    "gcp:compute/resourcePolicy:ResourcePolicy",
)
free(
    "IAM and service accounts carry no charge",
    "gcp:serviceaccount/account:Account",
    "gcp:projects/iAMMember:IAMMember",
    "gcp:projects/iAMBinding:IAMBinding",
    "gcp:projects/iAMCustomRole:IAMCustomRole",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:bigquery/datasetIamMember:DatasetIamMember",
    "gcp:projects/service:Service",
)
free(
    "Cloud Billing budgets and their alerts carry no charge",
    "gcp:billing/budget:Budget",
    "gcp:monitoring/notificationChannel:NotificationChannel",
)
free(
    "the billing export's data is stored (and priced) in its BigQuery dataset",
    "gcp:bigquery/dataTransferConfig:DataTransferConfig",
)
free(
    "Pub/Sub topics for budget alerts stay within the free tier",
    "gcp:pubsub/topic:Topic",
    "gcp:pubsub/subscription:Subscription",
)
free("a provider is configuration, not a cloud resource", "pulumi:providers:gcp")
free(
    "an autoscaler costs nothing by itself; the group it sizes is priced at its maxReplicas",
    *_AUTOSCALERS,
)
