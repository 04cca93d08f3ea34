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
    fleet_components,
    free,
    get,
    hourly_component,
    is_unknown,
    number,
    prices,
    storage_component,
    transfer_component,
)
from infra.config import TAG_FLEET

_EBS_RATES = {
    "gp3": "aws-ebs-gp3",
    "gp2": "aws-ebs-gp2",
    "io2": "aws-ebs-io2",
    "io1": "aws-ebs-io2",
    "st1": "aws-ebs-st1",
}
_DEFAULT_ROOT_GB = 8.0  # an AMI's root volume when the template names no size


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
    volumes = {json.dumps(get(t.inputs, "blockDeviceMappings", None), sort_keys=True) for t in siblings}
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


def _root_volume(ctx: PricingContext, lt: Resource | None, nodes: int, region: str) -> list[CostComponent]:
    if lt is None or nodes <= 0:
        return []
    out = []
    for bdm in get(lt.inputs, "blockDeviceMappings", []) or []:
        ebs = bdm.get("ebs") or {}
        if not ebs:
            continue  # instance-store mapping: included in the instance price
        size = number(ebs, "volumeSize", _DEFAULT_ROOT_GB)
        kind = get(ebs, "volumeType", "gp3") or "gp3"
        rate_id = _EBS_RATES.get(kind)
        if rate_id is None:
            out.append(
                CostComponent(
                    f"EBS {kind} volume",
                    "GB-month",
                    size * nodes,
                    None,
                    "rate",
                    note=f"no rate for EBS {kind}",
                )
            )
            continue
        c = storage_component(
            ctx,
            f"EBS {kind} {size:g} GB x {nodes} node{'s' if nodes != 1 else ''}",
            size * nodes,
            rate_id,
            region,
        )
        # a node's volume lives as long as the node: prorate by fleet hours, not calendar hours
        c.quantity = size * nodes * ctx.hours_per_month / 730.0
        c.monthly_cost = c.quantity * c.unit_price
        c.job_quantity = size * nodes * ctx.job_hours / 730.0
        c.job_cost = c.job_quantity * c.unit_price
        out.append(c)
    return out


def _public_ips(ctx: PricingContext, lt: Resource | None, nodes: int, region: str) -> list[CostComponent]:
    if lt is None or nodes <= 0:
        return []
    public = any(
        ni.get("associatePublicIpAddress") in (True, "true")
        for ni in get(lt.inputs, "networkInterfaces", []) or []
    )
    if not public:
        return []
    return [
        hourly_component(ctx, f"public IPv4 x {nodes}", nodes, "aws-public-ipv4", region, with_nodes=True)
    ]


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


@prices("aws:autoscaling/group:Group")
def autoscaling_group(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    """Nodes = desired capacity (else min size); split into on-demand and spot the way the group does."""
    i = r.inputs
    nodes = int(number(i, "desiredCapacity", number(i, "minSize", 0)))
    if nodes == 0:
        raise Free("desired capacity 0: no nodes run")
    mip = get(i, "mixedInstancesPolicy")
    if mip:
        spec = get(mip, "launchTemplate.launchTemplateSpecification", {})
        lt = _launch_template(r, ctx, spec)
        overrides = get(mip, "launchTemplate.overrides", []) or []
        instance_type = next((o.get("instanceType") for o in overrides if o.get("instanceType")), None)
        dist = get(mip, "instancesDistribution", {}) or {}
        base = int(number(dist, "onDemandBaseCapacity", 0))
        pct = int(number(dist, "onDemandPercentageAboveBaseCapacity", 100))  # AWS default: 100
        on_demand = min(nodes, base + math.ceil(max(nodes - base, 0) * pct / 100))
    else:
        lt = _launch_template(r, ctx, get(i, "launchTemplate", {}))
        instance_type = None
        market = get(lt.inputs, "instanceMarketOptions.marketType") if lt else None
        on_demand = 0 if market == "spot" else nodes
    if instance_type is None and lt is not None:
        instance_type = get(lt.inputs, "instanceType")
    if not instance_type:
        raise NotEstimable("instance type unknown: no override and no resolvable launch template")
    region = ctx.region(r, "aws", get(i, "region"))
    zones, note = _subnet_zones(ctx, get(i, "vpcZoneIdentifiers", []) or [])
    if not zones:
        fleet = next((t.get("value") for t in get(i, "tags", []) or [] if t.get("key") == TAG_FLEET), None)
        if ctx.fleet_zones.get(fleet):
            zones, note = ctx.fleet_zones[fleet], ""
    comps = fleet_components(
        ctx, cloud="aws", region=region, zones=zones, instance_type=instance_type,
        on_demand_nodes=on_demand, spot_nodes=nodes - on_demand,
    )  # fmt: skip
    if note:
        for c in comps:
            c.note = f"{note}; {c.note}"
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
    config = (get(i, "launchTemplateConfigs", []) or [{}])[0]
    lt = _launch_template(r, ctx, config.get("launchTemplateSpecification"))
    overrides = config.get("overrides") or []
    instance_type = next((o.get("instanceType") for o in overrides if o.get("instanceType")), None)
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
    return comps + _root_volume(ctx, lt, total, region)


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
    size = number(i, "rootBlockDevice.volumeSize", _DEFAULT_ROOT_GB)
    kind = get(i, "rootBlockDevice.volumeType", "gp3")
    comps.append(
        storage_component(
            ctx, f"EBS {kind} root {size:g} GB", size, _EBS_RATES.get(kind, "aws-ebs-gp3"), region
        )
    )
    return comps


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
        gb_key, what = "billing_export_gb", "billing export data"
    else:
        gb_key, what = "checkpoint_gb", "checkpoints"
    gb = ctx.use(gb_key)
    comps = [
        storage_component(
            ctx, f"S3 Standard storage ({what})", gb, "aws-s3-standard", region, usage_key=gb_key
        )
    ]
    if gb_key == "checkpoint_gb":
        comps.append(
            transfer_component(
                ctx, "data transfer out to the internet", "egress_gb_per_month", "aws-egress-internet", region
            )
        )
    return comps


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
    c = storage_component(ctx, f"S3 Standard storage ({size:,} bytes)", gb, "aws-s3-standard", region)
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
    azs = max(1, len(get(r.inputs, "subnetIds", []) or []))
    return [
        hourly_component(
            ctx, f"interface endpoint x {azs} AZ", azs, "aws-vpc-endpoint-interface", ctx.region(r, "aws")
        )
    ]


@prices("aws:cloudwatch/metricAlarm:MetricAlarm")
def metric_alarm(r: Resource, ctx: PricingContext) -> list[CostComponent]:
    from cli.preview.pricing.rates import rate

    unit = rate("aws-cloudwatch-alarm").usd
    return [
        CostComponent(
            "standard-resolution alarm",
            "alarm-month",
            1,
            unit,
            "rate:aws-cloudwatch-alarm",
            job_quantity=ctx.job_fraction,
        )
    ]


free(
    "a launch template costs nothing; the instances it launches are priced on their group",
    LAUNCH_TEMPLATE,
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
