"""Rules: AWS. What EC2 Auto Scaling, EC2 and Budgets refuse or quietly get wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.catalog.network_cards import network_cards
from infra.rules import Finding, rule, where

if TYPE_CHECKING:
    from infra.mock_runtime import DeclaredResource

GROUP = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"

CREATE_ASG = "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html"
EFA_CARDS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"
NIC_SPEC = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceNetworkInterfaceSpecification.html"


def _cluster_groups(run) -> set[str]:
    return {
        r.outputs.get("name")
        for r in run.of_type(PLACEMENT_GROUP)
        if r.inputs.get("strategy") == "cluster"
    }


@rule("aws-placement-group-one-zone", CREATE_ASG)
def cluster_placement_group_in_one_zone(run):
    """CreateAutoScalingGroup, PlacementGroup: "A cluster placement group is a logical grouping of instances
    within a single Availability Zone. You cannot specify multiple Availability Zones and a cluster
    placement group." """
    clusters = _cluster_groups(run)
    for group in run.of_type(GROUP):
        if group.inputs.get("placementGroup") not in clusters:
            continue
        subnets = list(group.inputs.get("vpcZoneIdentifiers") or [])
        zones = {run.subnet_zones.get(s) for s in subnets}
        if None in zones and len(subnets) > 1:
            yield Finding(
                "aws-placement-group-one-zone",
                where(group),
                f"the group has a cluster placement group and {len(subnets)} subnets whose zones are not known "
                "here; EC2 Auto Scaling refuses several zones with a cluster placement group",
                "make sure fleet.network.subnets are all in one zone",
                severity="warning",
            )
        elif len(zones) > 1:
            yield Finding(
                "aws-placement-group-one-zone",
                where(group),
                f"a cluster placement group lives in one zone, but the group's subnets are in "
                f"{', '.join(sorted(z for z in zones if z))}; CreateAutoScalingGroup refuses it",
                "name one zone in fleets[].zones (several nodes share one cluster placement group)",
            )


def _templates_by_id(run) -> dict[str | None, DeclaredResource]:
    return {r.id: r for r in run.of_type(LAUNCH_TEMPLATE)}


def _template_per_type(group, templates) -> dict[str, DeclaredResource]:
    """Instance type -> the launch template EC2 Auto Scaling launches it with."""
    policy = group.inputs.get("mixedInstancesPolicy") or {}
    launch = policy.get("launchTemplate") or {}
    default = (launch.get("launchTemplateSpecification") or {}).get("launchTemplateId")
    out = {}
    for override in launch.get("overrides") or []:
        spec = override.get("launchTemplateSpecification") or {}
        template = templates.get(spec.get("launchTemplateId") or default)
        if override.get("instanceType") and template is not None:
            out[override["instanceType"]] = template
    return out


@rule("aws-efa-one-per-network-card", EFA_CARDS)
def one_efa_interface_per_network_card(run):
    """An EFA-capable type spreads its bandwidth over its network cards (p4d: 4, p5: 32); each card needs its
    own EFA interface, and a card index the type does not have makes the launch fail."""
    templates = _templates_by_id(run)
    for group in run.of_type(GROUP):
        for instance_type, template in _template_per_type(group, templates).items():
            interfaces = template.inputs.get("networkInterfaces") or []
            efa = [i for i in interfaces if i.get("interfaceType") in ("efa", "efa-only")]
            if not efa:
                continue
            cards = network_cards(instance_type)
            indices = sorted(int(i.get("networkCardIndex") or 0) for i in efa)
            if indices != list(range(cards)):
                yield Finding(
                    "aws-efa-one-per-network-card",
                    where(template),
                    f"{instance_type} has {cards} network card(s) and needs one EFA interface on each "
                    f"(indices 0..{cards - 1}); the launch template has EFA on card(s) {indices}",
                    "give each distinct card count its own launch template (infra/aws/fleet.py network_interfaces)",
                )


@rule("aws-public-ip-one-interface", NIC_SPEC)
def public_ip_setting_needs_one_interface(run):
    """AssociatePublicIpAddress: "You cannot specify more than one network interface in the request"."""
    for template in run.of_type(LAUNCH_TEMPLATE):
        interfaces = template.inputs.get("networkInterfaces") or []
        if len(interfaces) > 1 and any("associatePublicIpAddress" in i for i in interfaces):
            yield Finding(
                "aws-public-ip-one-interface",
                where(template),
                f"associatePublicIpAddress is set on a template with {len(interfaces)} network interfaces; "
                "EC2 refuses it (and assigns no public address to such instances anyway)",
                "leave associatePublicIpAddress out when there are several interfaces",
            )


BUDGET = "aws:budgets/budget:Budget"
TAG_ACTIVATION = "aws:costexplorer/costAllocationTag:CostAllocationTag"
BUDGET_TAGS = "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html"


@rule("aws-budget-tag-active", BUDGET_TAGS)
def budget_tag_is_activated(run):
    """A budget filtered on a user tag counts only spend carrying an *active* cost allocation tag: "After you
    create and apply tags to your resources, you must activate them"; until then the budget sees $0."""
    active = {r.inputs.get("tagKey") for r in run.of_type(TAG_ACTIVATION) if r.inputs.get("status") == "Active"}
    for budget in run.of_type(BUDGET):
        for f in budget.inputs.get("costFilters") or []:
            if f.get("name") != "TagKeyValue":
                continue
            for value in f.get("values") or []:
                key = value.removeprefix("user:").split("$", 1)[0]
                if value.startswith("user:") and key not in active:
                    yield Finding(
                        "aws-budget-tag-active",
                        where(budget),
                        f"the budget counts only spend tagged {key}, and this stack does not activate that "
                        "cost allocation tag: it alerts only once someone activates it (Billing > Cost "
                        "allocation tags)",
                        "once the key has been billed (about a day after the first run) set "
                        "trainfleet:budget.activate_cost_allocation_tag: true, or run `aws ce "
                        f"update-cost-allocation-tags-status --cost-allocation-tags-status TagKey={key},Status=Active`",
                        severity="warning",
                    )
