"""trainfleet:aws:SpotFleet — an auto scaling group of training nodes bought on the spot market.

Launch template: IMDSv2 required, encrypted gp3 root volume, the node role's instance profile, the
rendered user-data, no public address, EFA on the primary interface where every allowed type has
it. Auto scaling group: a mixed-instances policy with the on-demand base/percentage from the config,
spot allocation price-capacity-optimized, capacity rebalancing, the fallback types as overrides. A
multi-node fleet gets a cluster placement group, which lives in one zone, so its subnets are in one zone
(infra/rules/aws.py holds that); a single node may spread over several. With EFA, one EFA interface per
network card of each type (p4d: 4, p5: 32), a launch template per card layout. The security group admits
only its own members, plus SSH from the CIDRs the config names (none by default). The group is created empty
and its desired capacity is `start_run`'s and the node agent's (ignore_changes): no `pulumi up` relaunches a
finished job or resizes a running one. The termination lifecycle hook is a resource of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import pulumi
import pulumi_aws as aws

from infra.catalog.network_cards import network_cards
from infra.node_env import AWS_GPU_AMI_NAME
from infra.placement import shares_cluster_placement_group

# AWS's Base OSS Deep Learning AMI (Ubuntu 24.04), by Amazon: the NVIDIA driver, CUDA, EFA and NCCL, no PyTorch;
# the nodes install the torch infra/node_env.py pins into their venv (the published names: node_env).
GPU_AMI_NAME = AWS_GPU_AMI_NAME
AMI_OWNERS = ["amazon"]
SPOT_ALLOCATION_STRATEGY = "price-capacity-optimized"
# The group's own terminations (scale-in, rebalancing, health) come with no spot notice: this hook holds a node
# in Terminating:Wait so its agent can checkpoint (it watches IMDS autoscaling/target-lifecycle-state and then
# completes the action). The agent's ASG_HOOK_NAME / ASG_HOOK_S are the same (tests/test_provider_rules.py).
TERMINATION_HOOK = "trainfleet-checkpoint"
TERMINATION_HOOK_S = 600
SSH_PORT = 22


@dataclass
class SpotFleetArgs:
    region: str
    group_name: str
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[list[str]]
    instance_type: str
    nodes: int
    instance_profile_arn: pulumi.Input[str]
    user_data: pulumi.Input[str]  # base64, as the launch template wants it
    tags: dict[str, str]
    fallback_instance_types: list[str] = field(default_factory=list)
    on_demand_base: int = 0
    on_demand_percentage_above_base: int = 0
    max_price: float | None = None  # USD/hour; None or -1: up to the on-demand price
    image_id: str | None = None  # an AMI id; None: the newest AMI matching image_name_filter
    image_name_filter: str = GPU_AMI_NAME
    image_owners: list[str] = field(default_factory=lambda: list(AMI_OWNERS))  # whose AMIs the filter looks at
    root_volume_gb: int = 200
    ssh_cidrs: list[str] = field(default_factory=list)
    efa: bool = False
    node_assets: dict[str, str] = field(default_factory=dict)  # bucket key -> text, fetched at boot
    assets_bucket: pulumi.Input[str] | None = None


def network_interfaces(cards: int, security_group: pulumi.Input[str], *, efa: bool) -> list:
    """The launch template's interfaces: the primary one on card 0 (device 0), and with EFA one more EFA
    interface on each further network card (device 1), as EC2's EFA guide launches p4d/p5 instances
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html). No public address: a
    single interface says so; with several, EC2 assigns none and refuses the setting itself
    (AssociatePublicIpAddress: "You cannot specify more than one network interface in the request",
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceNetworkInterfaceSpecification.html)."""
    count = cards if efa else 1
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            device_index=0 if card == 0 else 1,
            network_card_index=card,
            interface_type="efa" if efa else None,
            security_groups=[security_group],
            associate_public_ip_address="false" if count == 1 else None,
            delete_on_termination="true",
        )
        for card in range(count)
    ]


def spot_max_price(max_price: float | None) -> str | None:
    """The group's spotMaxPrice: the stack's USD/hour cap as a plain decimal string, exactly as given (never
    rounded: 1.23456 must not become a higher 1.2346, nor 0.00004 a "0.0000"). None for no cap or -1, which
    leaves the provider's default "": up to the on-demand price."""
    if max_price is None or max_price == -1:
        return None
    return format(Decimal(repr(float(max_price))), "f")


class SpotFleet(pulumi.ComponentResource):
    group_name: pulumi.Output[str]
    group_arn: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    image_id: pulumi.Output[str]

    def __init__(self, name: str, args: SpotFleetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:SpotFleet", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        region, tags = args.region, dict(args.tags)

        filters = (
            [aws.ec2.GetAmiFilterArgs(name="image-id", values=[args.image_id])]
            if args.image_id
            else [
                aws.ec2.GetAmiFilterArgs(name="name", values=[args.image_name_filter]),
                aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
                aws.ec2.GetAmiFilterArgs(name="state", values=["available"]),
            ]
        )
        ami = aws.ec2.get_ami_output(
            most_recent=True,
            owners=None if args.image_id else args.image_owners,
            # DescribeImages leaves deprecated AMIs out unless asked: a name filter must never pick one (AWS
            # deprecates public AMIs within two years); an id the stack pins is found even once deprecated.
            include_deprecated=bool(args.image_id),
            filters=filters,
            region=region,
            opts=pulumi.InvokeOptions(parent=self),
        )

        sg = aws.ec2.SecurityGroup(
            f"{name}-sg",
            description=f"trainfleet {args.group_name}: members only",
            vpc_id=args.vpc_id,
            region=region,
            tags={**tags, "Name": args.group_name},
            opts=child,
        )
        # NCCL/EFA and torch.distributed need every port between members, both ways; nothing else.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-from-members",
            security_group_id=sg.id,
            referenced_security_group_id=sg.id,
            ip_protocol="-1",
            description="all traffic from fleet members",
            region=region,
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-to-members",
            security_group_id=sg.id,
            referenced_security_group_id=sg.id,
            ip_protocol="-1",
            description="all traffic to fleet members (EFA needs it)",
            region=region,
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-outbound",
            security_group_id=sg.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1",
            description="outbound: packages, images, object storage",
            region=region,
            opts=child,
        )
        for i, cidr in enumerate(args.ssh_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-ssh-{i}",
                security_group_id=sg.id,
                cidr_ipv4=cidr,
                ip_protocol="tcp",
                from_port=SSH_PORT,
                to_port=SSH_PORT,
                description=f"SSH from {cidr} (fleet.ssh_cidrs)",
                region=region,
                opts=child,
            )

        # Node files too big for user-data; the node fetches them with its role and checks their sha256.
        for key, text in sorted(args.node_assets.items()):
            if args.assets_bucket is None:
                raise ValueError("node_assets need assets_bucket")
            # Named by content (the key holds its hash) and kept on delete: nodes still booting from an
            # older launch template fetch the files it pins.
            aws.s3.BucketObjectv2(
                f"{name}-asset-{key.rsplit('/', 2)[-2]}-{key.rsplit('/', 1)[-1]}",
                bucket=args.assets_bucket,
                key=key,
                content=text,
                content_type="text/plain; charset=utf-8",
                server_side_encryption="AES256",
                region=region,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )

        placement = None
        if shares_cluster_placement_group("aws", args.nodes):
            placement = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", region=region, tags=tags, opts=child
            )

        tag_specs = [
            aws.ec2.LaunchTemplateTagSpecificationArgs(
                resource_type=kind, tags={**tags, "Name": args.group_name}
            )
            for kind in ("instance", "volume", "network-interface")
        ]
        types = [args.instance_type, *args.fallback_instance_types]

        def cards_of(instance_type: str) -> int:
            return network_cards(instance_type) if args.efa else 1

        # One EFA interface per network card (a launch template cannot differ per override, so each distinct
        # card count gets its own template and each override names the template for its type).
        layouts = sorted({cards_of(t) for t in types})
        templates: dict[int, aws.ec2.LaunchTemplate] = {}
        for cards in layouts:
            suffix = "" if cards == layouts[0] else f"-{cards}cards"
            templates[cards] = aws.ec2.LaunchTemplate(
                f"{name}-lt{suffix}",
                description=f"trainfleet {args.group_name}"
                + (f" ({cards} network cards)" if args.efa else ""),
                image_id=ami.id,
                update_default_version=True,
                ebs_optimized="true",
                iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=args.instance_profile_arn),
                metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                    http_endpoint="enabled",
                    http_tokens="required",  # IMDSv2 only
                    http_put_response_hop_limit=2,  # containers on the node reach IMDS too
                    instance_metadata_tags="enabled",
                ),
                block_device_mappings=[
                    aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                        device_name=ami.root_device_name,
                        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                            volume_size=args.root_volume_gb,
                            volume_type="gp3",
                            encrypted="true",
                            delete_on_termination="true",
                        ),
                    )
                ],
                network_interfaces=network_interfaces(cards, sg.id, efa=args.efa),
                user_data=args.user_data,
                tag_specifications=tag_specs,
                region=region,
                tags=tags,
                opts=child,
            )
        primary = templates[cards_of(args.instance_type)]

        def spec(template: aws.ec2.LaunchTemplate):
            return aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                launch_template_id=template.id, version="$Latest"
            )

        purchase = aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
            on_demand_base_capacity=args.on_demand_base,
            on_demand_percentage_above_base_capacity=args.on_demand_percentage_above_base,
            on_demand_allocation_strategy="prioritized",
            spot_allocation_strategy=SPOT_ALLOCATION_STRATEGY,
            spot_max_price=spot_max_price(args.max_price),
        )
        overrides = [
            aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(
                instance_type=t,
                launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideLaunchTemplateSpecificationArgs(
                    launch_template_id=templates[cards_of(t)].id, version="$Latest"
                )
                if len(templates) > 1
                else None,
            )
            for t in types
        ]
        group = aws.autoscaling.Group(
            f"{name}-asg",
            name=args.group_name,
            min_size=0,
            max_size=args.nodes,
            # Created empty: a run starts with the fleet's `start_run` command (README "Starting a run"), once the
            # termination hook below exists, so no node ever runs without it, and a zero quota fails that command
            # with AWS's own message instead of a group that launches nothing.
            desired_capacity=0,
            vpc_zone_identifiers=args.subnet_ids,
            capacity_rebalance=True,
            mixed_instances_policy=aws.autoscaling.GroupMixedInstancesPolicyArgs(
                instances_distribution=purchase,
                launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=spec(primary),
                    overrides=overrides,
                ),
            ),
            placement_group=placement.name if placement else None,
            health_check_type="EC2",
            # Spot capacity may take a while; `pulumi up` should not fail waiting for it.
            wait_for_capacity_timeout="0",
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                for k, v in sorted({**tags, "Name": args.group_name}.items())
            ],
            region=region,
            # The capacity is `start_run`'s and the node agent's (it sets 0 when the job ends): with ignore_changes
            # the update never carries DesiredCapacity (terraform-provider-aws sends only what changed).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["desiredCapacity"]),
        )
        # Its own resource, not the group's initial_lifecycle_hooks, which AWS applies only when a group is created:
        # PutLifecycleHook creates or updates, so a group deployed before the hook gets it, and a new heartbeat
        # reaches a running group.
        aws.autoscaling.LifecycleHook(
            f"{name}-termination-hook",
            name=TERMINATION_HOOK,
            autoscaling_group_name=group.name,
            lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
            heartbeat_timeout=TERMINATION_HOOK_S,
            default_result="CONTINUE",  # a node that never answers is still terminated
            region=region,
            opts=child,
        )
        self.group_name = group.name
        self.group_arn = group.arn
        self.security_group_id = sg.id
        self.launch_template_id = primary.id
        self.image_id = ami.id
        self.register_outputs(
            {
                "group_name": self.group_name,
                "group_arn": self.group_arn,
                "security_group_id": self.security_group_id,
                "launch_template_id": self.launch_template_id,
                "image_id": self.image_id,
            }
        )
