"""AWS pricing functions, one per Pulumi type token (pulumi-aws input names, camelCase on the wire)."""

from __future__ import annotations

import json
import math
import os
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
    fleet_of,
    free,
    get,
    hourly_component,
    is_secret,
    is_unknown,
    number,
    prices,
    storage_component,
    transfer_component,
)
from cli.preview.pricing.checkpoints import Retention, checkpoint_components, declared_retention
from cli.preview.pricing.rates import AS_OF_YEAR, rate
from infra.config import TAG_FLEET

_EBS_RATES = {  # storage, per GB-month (https://aws.amazon.com/ebs/pricing/)
    "gp3": "aws-ebs-gp3",
    "gp2": "aws-ebs-gp2",
    "io2": "aws-ebs-io2",
    "io1": "aws-ebs-io1",
    "st1": "aws-ebs-st1",
    "sc1": "aws-ebs-sc1",
}
_GP3_FREE_IOPS = 3000.0  # gp3 includes 3,000 IOPS and 125 MB/s in its storage price
_GP3_FREE_MBPS = 125.0
# io2 bills a volume's provisioned IOPS in tiers: up to 32,000, 32,001-64,000, above 64,000
_IO2_TIERS = ((0.0, 32000.0, "aws-ebs-io2-iops-1", "up to 32,000"),
              (32000.0, 64000.0, "aws-ebs-io2-iops-2", "32,001-64,000"),
              (64000.0, math.inf, "aws-ebs-io2-iops-3", "above 64,000"))  # fmt: skip
_DEFAULT_ROOT_GB = 8.0  # an AMI's root volume when the template names no size


def _ebs_volume(
    ctx: PricingContext,
    inputs: dict[str, Any],
    prefix: str,
    region: str,
    *,
    keys: tuple[str, str] = ("volumeSize", "volumeType"),
    default_gb: float | None = None,
    default_type: str = "gp3",
    type_note: str = "",
    count: int = 1,
    with_nodes: bool = False,
    label: str = "",
) -> list[CostComponent]:
    """One EBS volume's charges, each its own component: storage (GB-month), provisioned IOPS (gp3 above 3,000;
    io1 all of them; io2 all of them, in its three tiers) and gp3 throughput above 125 MB/s, x `count` nodes.

    `inputs[prefix]` holds the volume's settings (prefix "" for the inputs themselves); `keys` names its size and
    type fields (`size`/`type` on aws:ebs/volume, `volumeSize`/`volumeType` in block devices)."""

    def at(field: str) -> str:
        return f"{prefix}.{field}" if prefix else field

    size_key, type_key = keys
    set_type = get(inputs, at(type_key))
    kind = set_type or default_type
    size = number(inputs, at(size_key), default_gb)
    if set_type is None and type_note:
        type_note = type_note.format(kind=kind)
    else:
        type_note = ""
    nodes = f" x {count} node{'s' if count != 1 else ''}" if with_nodes else ""
    where = f" {label}" if label else ""
    rate_id = _EBS_RATES.get(kind)
    # no rate: "standard" (magnetic) also bills per million I/O requests, and no usage figure gives those
    if rate_id is None:
        return [CostComponent(f"EBS {kind}{where} volume", "GB-month", size * count, None, "rate",
                              note=f"no rate for EBS {kind}")]  # fmt: skip
    out = [storage_component(ctx, f"EBS {kind}{where} {size:g} GB{nodes}", size * count, rate_id, region,
                    with_nodes=with_nodes, note=type_note)]  # fmt: skip
    if kind == "gp3":
        iops = number(inputs, at("iops"), _GP3_FREE_IOPS)
        mbps = number(inputs, at("throughput"), _GP3_FREE_MBPS)
        if iops > _GP3_FREE_IOPS:
            extra = iops - _GP3_FREE_IOPS
            out.append(storage_component(ctx, f"EBS gp3{where} IOPS above 3,000 ({extra:,.0f}{nodes})", extra * count,
                                "aws-ebs-gp3-iops", region, with_nodes=with_nodes))  # fmt: skip
        if mbps > _GP3_FREE_MBPS:
            extra = mbps - _GP3_FREE_MBPS
            out.append(storage_component(ctx, f"EBS gp3{where} throughput above 125 MB/s ({extra:,.0f} MB/s{nodes})",
                                extra * count, "aws-ebs-gp3-throughput", region, with_nodes=with_nodes))  # fmt: skip
    elif kind == "io1":
        iops = number(inputs, at("iops"))  # required for io1: no default to guess
        out.append(storage_component(ctx, f"EBS io1{where} provisioned IOPS ({iops:,.0f}{nodes})", iops * count,
                            "aws-ebs-io1-iops", region, with_nodes=with_nodes))  # fmt: skip
    elif kind == "io2":
        iops = number(inputs, at("iops"))  # required for io2
        for low, high, tier_rate, tier in _IO2_TIERS:
            in_tier = min(iops, high) - low
            if in_tier > 0:
                out.append(storage_component(ctx, f"EBS io2{where} IOPS {tier} ({in_tier:,.0f}{nodes})", in_tier * count,
                                    tier_rate, region, with_nodes=with_nodes))  # fmt: skip
    return out


def _launch_template(r: Resource, ctx: PricingContext, spec: dict[str, Any] | None) -> Resource | None:
    """The launch template a group or fleet uses: by id or name, else its sibling template (one, or several that
    declare the same volumes, as a fleet's per-network-card templates do, so any of them prices the disks)."""
    spec = spec or {}
    for key in ("id", "launchTemplateId"):
        found = ctx.by_id(spec.get(key))
        if found is not None:
            return found
    name = spec.get("name") or spec.get("launchTemplateName")
    if isinstance(name, str) and not is_unknown(name):
        for cand in ctx.resources:
            if cand.type == LAUNCH_TEMPLATE and name in (cand.inputs.get("name"), cand.outputs.get("name")):
                return cand
    siblings = ctx.related(r, LAUNCH_TEMPLATE)
    volumes = {
        json.dumps(_template_part(t, lambda inputs: elements(inputs, "blockDeviceMappings")), sort_keys=True)
        for t in siblings
    }
    return siblings[0] if siblings and len(volumes) == 1 else None


def _subnet_zones(ctx: PricingContext, subnet_ids: list[Any]) -> tuple[list[str], str]:
    """AZ ids of the group's subnets (the catalog prices spot per AZ id), and a note if unresolved."""
    zones: list[str] = []
    for sid in subnet_ids:
        subnet = ctx.by_id(sid)
        if subnet is None:
            return (
                [],
                "the group's subnets are not declared here (or unknown until apply); spot priced over every zone of the region",
            )
        zone = subnet.inputs.get("availabilityZoneId") or subnet.outputs.get("availabilityZoneId")
        if not zone or is_unknown(zone):
            return [], "subnet AZ ids unknown; spot priced over every zone of the region"
        zones.append(zone)
    return sorted(set(zones)), ""


def _template_part(lt: Resource, walk: Any) -> Any:
    """Runs `walk` on a launch template's inputs; an input it cannot know says which template it is on."""
    try:
        return walk(lt.inputs)
    except NotEstimable as exc:
        raise NotEstimable(f"launch template {lt.name}: {exc}") from None


def _root_volume(ctx: PricingContext, lt: Resource | None, nodes: int, region: str) -> list[CostComponent]:
    """Every EBS volume of the template's block device mappings, x nodes, prorated by the fleet's hours (a node's
    volumes live as long as the node)."""
    if lt is None or nodes <= 0:
        return []

    def walk(inputs: dict[str, Any]) -> list[CostComponent]:
        out = []
        for n in range(len(elements(inputs, "blockDeviceMappings"))):
            if not get(inputs, f"blockDeviceMappings.{n}.ebs"):
                continue  # instance-store mapping: included in the instance price
            out += _ebs_volume(ctx, inputs, f"blockDeviceMappings.{n}.ebs", region, default_gb=_DEFAULT_ROOT_GB,
                               count=nodes, with_nodes=True)  # fmt: skip
        return out

    return _template_part(lt, walk)


def _is_true(value: Any) -> bool:
    return value in (True, "true")


def _public_ips(ctx: PricingContext, lt: Resource | None, nodes: int, region: str) -> list[CostComponent]:
    if lt is None or nodes <= 0:
        return []

    def public(inputs: dict[str, Any]) -> bool:
        nics = elements(inputs, "networkInterfaces")
        return any(
            _is_true(get(inputs, f"networkInterfaces.{n}.associatePublicIpAddress")) for n in range(len(nics))
        )

    if not _template_part(lt, public):
        return []
    return [
        hourly_component(ctx, f"public IPv4 x {nodes}", nodes, "aws-public-ipv4", region, with_nodes=True)
    ]


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


@prices("aws:autoscaling/group:Group")
def autoscaling_group(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """Nodes = desired capacity; split into on-demand and spot the way the group does. A group with no desired
    capacity is sized by its scaling policies, anywhere up to maxSize: priced at maxSize, the most it can run,
    and the note says so (pricing it at minSize, or free, would be the cheapest guess, not an estimate)."""
    i = r.inputs
    sized = declared = ""
    fleet = next((t.get("value") for t in elements(i, "tags") if t.get("key") == TAG_FLEET), None)
    if get(i, "desiredCapacity") is not None:
        nodes, declared = declared_size(ctx, fleet, int(number(i, "desiredCapacity")), "desiredCapacity")
    else:
        nodes, sized = autoscaled_nodes(r, ctx, "desiredCapacity", lambda: (int(number(i, "maxSize")), "maxSize"))
    if nodes == 0:
        raise Free("desired capacity 0: no nodes run")
    mip = get(i, "mixedInstancesPolicy")
    if mip:
        spec = get(mip, "launchTemplate.launchTemplateSpecification", {})
        lt = _launch_template(r, ctx, spec)
        overrides = elements(i, "mixedInstancesPolicy.launchTemplate.overrides")
        instance_type = _first_instance_type(overrides, "mixedInstancesPolicy.launchTemplate.overrides")
        fallbacks = tuple(
            t for o in overrides if isinstance(t := o.get("instanceType"), str)
            and t != instance_type and not is_unknown(t) and not is_secret(t)
        )  # fmt: skip
        dist = get(mip, "instancesDistribution", {}) or {}
        base = int(number(dist, "onDemandBaseCapacity", 0))
        pct = int(number(dist, "onDemandPercentageAboveBaseCapacity", 100))  # AWS default: 100
        on_demand = min(nodes, base + math.ceil(max(nodes - base, 0) * pct / 100))
    else:
        lt = _launch_template(r, ctx, get(i, "launchTemplate", {}))
        instance_type, fallbacks = None, ()
        market = get(lt.inputs, "instanceMarketOptions.marketType") if lt else None
        on_demand = 0 if market == "spot" else nodes
    if instance_type is None and lt is not None:
        instance_type = get(lt.inputs, "instanceType")
    if not instance_type:
        raise NotEstimable("instance type unknown: no override and no resolvable launch template")
    region = ctx.region(r, "aws", get(i, "region"))
    zones, note = _subnet_zones(ctx, elements(i, "vpcZoneIdentifiers", ids=True))
    stack_fleet = fleet_of(ctx, fleet)
    if not zones and stack_fleet is not None and stack_fleet.zones:
        zones, note = list(stack_fleet.zones), ""
    comps = fleet_components(
        ctx, cloud="aws", region=region, zones=zones, instance_type=instance_type,
        on_demand_nodes=on_demand, spot_nodes=nodes - on_demand, fallback_types=fallbacks,
        note="; ".join(n for n in (sized, note) if n), declared=declared,
    )  # fmt: skip
    return comps + _root_volume(ctx, lt, nodes, region) + _public_ips(ctx, lt, nodes, region)


@prices("aws:ec2/fleet:Fleet")
def ec2_fleet(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    i = r.inputs
    total = int(number(i, "targetCapacitySpecification.totalTargetCapacity"))
    default_type = get(i, "targetCapacitySpecification.defaultTargetCapacityType", "on-demand")
    od = get(i, "targetCapacitySpecification.onDemandTargetCapacity")
    spot = get(i, "targetCapacitySpecification.spotTargetCapacity")
    if od is None and spot is None:
        on_demand = total if default_type == "on-demand" else 0
    elif od is not None:
        on_demand = min(total, int(od))
    else:
        on_demand = max(0, total - int(spot))
    configs = elements(i, "launchTemplateConfigs")  # the first config prices the fleet
    spec = get(i, "launchTemplateConfigs.0.launchTemplateSpecification") if configs else None
    lt = _launch_template(r, ctx, spec)
    overrides = elements(i, "launchTemplateConfigs.0.overrides") if configs else []
    instance_type = _first_instance_type(overrides, "launchTemplateConfigs.0.overrides")
    if instance_type is None and lt is not None:
        instance_type = get(lt.inputs, "instanceType")
    if not instance_type:
        raise NotEstimable("instance type unknown")
    region = ctx.region(r, "aws", get(i, "region"))
    zones, _ = _subnet_zones(ctx, [o.get("subnetId") for o in overrides if o.get("subnetId")])
    comps = fleet_components(
        ctx, cloud="aws", region=region, zones=zones, instance_type=instance_type,
        on_demand_nodes=on_demand, spot_nodes=total - on_demand,
    )  # fmt: skip
    return comps + _root_volume(ctx, lt, total, region) + _public_ips(ctx, lt, total, region)


def _first_instance_type(overrides: list[dict[str, Any]], path: str) -> str | None:
    """The first override that names an instance type (the group's or fleet's first choice)."""
    for n, override in enumerate(overrides):
        instance_type = override.get("instanceType")
        if is_secret(instance_type):
            raise NotEstimable(f"input {path}[{n}].instanceType is a secret")
        if is_unknown(instance_type):
            raise NotEstimable(f"input {path}[{n}].instanceType is unknown until apply")
        if instance_type:
            return instance_type
    return None


@prices("aws:ec2/instance:Instance")
def ec2_instance(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    i = r.inputs
    lt = _launch_template(r, ctx, get(i, "launchTemplate", {})) if get(i, "launchTemplate") else None
    instance_type = get(i, "instanceType") or (get(lt.inputs, "instanceType") if lt else None)
    if not instance_type:
        raise NotEstimable("instance type unknown")
    spot = get(i, "instanceMarketOptions.marketType") == "spot"
    region = ctx.region(r, "aws", get(i, "region"))
    comps = fleet_components(
        ctx, cloud="aws", region=region, zones=[], instance_type=instance_type,
        on_demand_nodes=0 if spot else 1, spot_nodes=1 if spot else 0,
    )  # fmt: skip
    # The root volume's type defaults to the AMI's (pulumi-aws InstanceRootBlockDevice): priced as gp3 then.
    comps += _ebs_volume(ctx, i, "rootBlockDevice", region, default_gb=_DEFAULT_ROOT_GB, label="root",
                         type_note="volumeType not set: the AMI's type, priced as {kind}")  # fmt: skip
    # Extra volumes default to gp2 (pulumi-aws InstanceEbsBlockDevice: "Defaults to `gp2`").
    for n, device in enumerate(elements(i, "ebsBlockDevices")):
        name = device.get("deviceName")
        label = (
            name if isinstance(name, str) and not is_unknown(name) and not is_secret(name) else f"volume {n}"
        )
        comps += _ebs_volume(ctx, i, f"ebsBlockDevices.{n}", region, default_type="gp2", label=label)
    if _is_true(get(i, "associatePublicIpAddress")):
        # an auto-assigned public IPv4 is released when the instance stops: it follows the instance's hours
        comps.append(
            hourly_component(ctx, "public IPv4 address", 1, "aws-public-ipv4", region, with_nodes=True)
        )
    return comps


@prices("aws:ebs/volume:Volume")
def ebs_volume(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """A standalone volume exists all month, attached or not: storage, plus provisioned IOPS and throughput."""
    i = r.inputs
    if get(i, "size") is None and get(i, "snapshotId") is not None:
        raise NotEstimable("input size is not set: the volume takes its snapshot's size, not known here")
    region = ctx.region(r, "aws", get(i, "region"))
    # pulumi-aws Volume.type: "Can be standard, gp2, gp3, io1, io2, sc1 or st1 (Default: gp2)"
    return _ebs_volume(ctx, i, "", region, keys=("size", "type"), default_type="gp2",
                       type_note="type not set: the provider's default, {kind}")  # fmt: skip


def _is_billing_bucket(r: Resource, ctx: PricingContext) -> bool:
    """A bucket a billing export (CUR / data export) writes into holds billing data, not checkpoints."""
    names = {
        v
        for v in (r.id, r.inputs.get("bucket"), r.outputs.get("bucket"), r.outputs.get("id"))
        if isinstance(v, str)
    }
    for other in ctx.resources:
        if other.type in ("aws:cur/reportDefinition:ReportDefinition", "aws:bcmdata/export:Export"):
            if names & set(_strings(other.inputs)):
                return True
    return False


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@prices("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
def s3_bucket(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    region = ctx.region(r, "aws", get(r.inputs, "region"))
    if _is_billing_bucket(r, ctx):
        return [
            storage_component(ctx, "S3 Standard storage (billing export data)", ctx.use("billing_export_gb"),
                              "aws-s3-standard", region, usage_key="billing_export_gb", gb=True),
        ]  # fmt: skip
    return [
        *checkpoint_components(
            ctx, retention=_s3_retention(r, ctx), storage_rate="aws-s3-standard", write_rate="aws-s3-put",
            region=region, label="S3 Standard",
        ),
        transfer_component(
            ctx, "data transfer out to the internet", "egress_gb_per_month", "aws-egress-internet", region
        ),
    ]  # fmt: skip


_VERSIONING = ("aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketVersioningV2:BucketVersioningV2")
_LIFECYCLE = (
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2",
)


def _of_bucket(bucket: Resource, ctx: PricingContext, tokens: tuple[str, ...]) -> list[Resource]:
    """The bucket's configuration resources of these types: by its `bucket` input naming the bucket, else the
    bucket's siblings (a preview's create step names the bucket by an id unknown until apply)."""
    names = {
        v
        for v in (
            bucket.id,
            bucket.inputs.get("bucket"),
            bucket.outputs.get("bucket"),
            bucket.outputs.get("id"),
        )
        if isinstance(v, str) and v and not is_unknown(v)
    }
    named = [o for o in ctx.resources if o.type in tokens and o.inputs.get("bucket") in names]
    return named or [o for t in tokens for o in ctx.related(bucket, t)]


def _s3_retention(bucket: Resource, ctx: PricingContext) -> Retention:
    """Versioning and the NoncurrentVersionExpiration the stack declares for the bucket (the separate resources
    of pulumi-aws, or the legacy inline `versioning` and `lifecycleRules` of aws:s3/bucket:Bucket)."""
    versioned = get(bucket.inputs, "versioning.enabled", False) is True or any(
        get(v.inputs, "versioningConfiguration.status") == "Enabled"
        for v in _of_bucket(bucket, ctx, _VERSIONING)
    )
    if not versioned:
        return Retention(False, None, "versioning off")
    days = [
        (number(rule, "noncurrentVersionExpiration.days"), f"lifecycleRules[{n}]")
        for n, rule in enumerate(elements(bucket.inputs, "lifecycleRules"))
        if get(rule, "enabled", True) and get(rule, "noncurrentVersionExpiration.days") is not None
    ]
    for config in _of_bucket(bucket, ctx, _LIFECYCLE):
        for n, rule in enumerate(elements(config.inputs, "rules")):
            if (
                get(rule, "status") == "Enabled"
                and get(rule, "noncurrentVersionExpiration.noncurrentDays") is not None
            ):
                days.append(
                    (number(rule, "noncurrentVersionExpiration.noncurrentDays"), f"{config.name} rules[{n}]")
                )
    return declared_retention(days, "versioning on, no NoncurrentVersionExpiration")


@prices("aws:s3/bucketObjectv2:BucketObjectv2", "aws:s3/bucketObject:BucketObject")
def s3_object(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """An object the program uploads (scripts, configs): its own bytes at the S3 Standard rate."""
    content = get(r.inputs, "content")
    if isinstance(content, str):
        size = len(content.encode())
    else:
        source = get(r.inputs, "source")
        try:
            size = os.path.getsize(source) if isinstance(source, str) else None
        except OSError:
            size = None
        if size is None:
            raise NotEstimable("object size unknown: no inline content and no readable source file")
    gb = size / 1e9
    region = ctx.region(r, "aws", get(r.inputs, "region"))
    c = storage_component(ctx, f"S3 Standard storage ({size:,} bytes)", gb, "aws-s3-standard", region, gb=True)
    return [c]


@prices("aws:ec2/natGateway:NatGateway")
def nat_gateway(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    region = ctx.region(r, "aws")
    if get(r.inputs, "connectivityType") == "private":
        pass  # private NAT gateways bill the same hourly and per-GB rates
    return [
        hourly_component(ctx, "NAT gateway hours", 1, "aws-nat-gateway-hour", region),
        transfer_component(ctx, "NAT data processed", "nat_gb_per_month", "aws-nat-gateway-gb", region),
    ]


@prices("aws:ec2/eip:Eip")
def elastic_ip(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    return [hourly_component(ctx, "public IPv4 address", 1, "aws-public-ipv4", ctx.region(r, "aws"))]


@prices("aws:ec2/vpcEndpoint:VpcEndpoint")
def vpc_endpoint(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    kind = get(r.inputs, "vpcEndpointType", "Gateway")
    if kind == "Gateway":
        raise Free("gateway endpoints (S3, DynamoDB) carry no charge")
    azs = max(1, len(elements(r.inputs, "subnetIds", ids=True)))
    return [
        hourly_component(
            ctx, f"interface endpoint x {azs} AZ", azs, "aws-vpc-endpoint-interface", ctx.region(r, "aws")
        )
    ]


@prices("aws:cloudwatch/metricAlarm:MetricAlarm")
def metric_alarm(r: Resource, ctx: PricingContext) -> list[CostComponent]:

    unit = rate("aws-cloudwatch-alarm").usd
    return [
        CostComponent(
            "standard-resolution alarm",
            "alarm-month",
            1,
            unit,
            "rate:aws-cloudwatch-alarm",
            job_quantity=ctx.job_fraction,
            as_of=AS_OF_YEAR,
        )
    ]


free(
    "a launch template costs nothing; the instances it launches are priced on their group",
    LAUNCH_TEMPLATE,
)
free(
    "attaching a volume carries no charge; the volume is priced on its own",
    "aws:ec2/volumeAttachment:VolumeAttachment",
)
free(
    "networking configuration with no hourly or data charge",
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/securityGroupRule:SecurityGroupRule",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/egressOnlyInternetGateway:EgressOnlyInternetGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/route:Route",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/mainRouteTableAssociation:MainRouteTableAssociation",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
    "aws:ec2/placementGroup:PlacementGroup",
    "aws:ec2/keyPair:KeyPair",
)
free(
    "a lifecycle hook carries no charge (the node it holds is priced on its group)",
    "aws:autoscaling/lifecycleHook:LifecycleHook",
)
free(
    "IAM carries no charge",
    "aws:iam/role:Role",
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/instanceProfile:InstanceProfile",
    "aws:iam/serviceLinkedRole:ServiceLinkedRole",
)
free(
    "bucket configuration; the bucket's storage is priced on the bucket",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketVersioningV2:BucketVersioningV2",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketAclV2:BucketAclV2",
    "aws:s3/bucketAcl:BucketAcl",
    "aws:s3/bucketNotification:BucketNotification",
)
free(
    "AWS Budgets without actions carry no charge",
    "aws:budgets/budget:Budget",
)
free(
    "activating a cost allocation tag carries no charge "
    "(https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html)",
    "aws:costexplorer/costAllocationTag:CostAllocationTag",
)
free(
    "report delivery is free; the report files are stored (and priced) in their bucket",
    "aws:cur/reportDefinition:ReportDefinition",
    "aws:bcmdata/export:Export",
)
free(
    "SNS topics and email subscriptions for alerts fall within the free tier",
    "aws:sns/topic:Topic",
    "aws:sns/topicSubscription:TopicSubscription",
    "aws:sns/topicPolicy:TopicPolicy",
)
free(
    "EventBridge rules on AWS service events carry no charge",
    "aws:cloudwatch/eventRule:EventRule",
    "aws:cloudwatch/eventTarget:EventTarget",
)
free("a provider is configuration, not a cloud resource", "pulumi:providers:aws")
