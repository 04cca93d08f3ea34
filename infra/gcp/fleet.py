"""trainfleet:gcp:SpotFleet — a regional managed instance group of Spot VMs.

Instance template: Spot provisioning with the configured termination action, host maintenance
TERMINATE (GPUs cannot live-migrate), shielded VM (vTPM, integrity monitoring), no external address,
the fleet's own service account with narrow scopes, user-data in the `user-data` metadata key, OS Login
on and project-wide SSH keys blocked. Accelerator-optimized machine types (a2/a3/a4/g2) come with
their GPUs attached. The group spreads over the configured zones; a multi-node group keeps all its
VMs in one zone (ANY_SINGLE_ZONE) so NCCL traffic stays local. Firewall: members admit members (by
network tag), SSH only from the CIDRs the config names. The node files too big for user-data (the agent, the
example trainer) are objects in the checkpoint bucket, under the fleet's prefix, which the nodes fetch at boot
with their service account and check against the sha256 the user-data pins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.gcp.iam import NODE_SCOPES
from infra.node_env import GCP_DL_IMAGE

# Google's Deep Learning VM base image family (driver 580, CUDA, Ubuntu 24.04; no PyTorch: the nodes install the
# torch infra/node_env.py pins, where the published family list it was checked against is cited).
DL_IMAGE = GCP_DL_IMAGE
HYPERDISK_ONLY = ("a3-megagpu", "a3-ultragpu", "a4-")
SSH_PORT = "22"


@dataclass
class SpotFleetArgs:
    region: str
    zones: list[str]
    group_name: str
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str | None]
    machine_type: str
    nodes: int
    service_account_email: pulumi.Input[str]
    user_data: pulumi.Input[str]  # plain cloud-config text
    labels: dict[str, str]
    spot: bool = True
    termination_action: str = "DELETE"
    image: str | None = None
    root_volume_gb: int = 200
    ssh_cidrs: list[str] = field(default_factory=list)
    node_assets: dict[str, str] = field(default_factory=dict)  # bucket key -> text, fetched at boot
    assets_bucket: pulumi.Input[str] | None = None
    # tagKeys/N -> tagValues/M bound to the group at creation: what the node's group role is conditioned on
    # (infra/gcp/iam.py limit_to_tagged_group); None: no tags.
    resource_manager_tags: pulumi.Input[dict[str, str]] | None = None


class SpotFleet(pulumi.ComponentResource):
    group_name: pulumi.Output[str]
    instance_group: pulumi.Output[str]

    def __init__(self, name: str, args: SpotFleetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:SpotFleet", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tag = args.group_name

        gcp.compute.Firewall(
            f"{name}-members",
            network=args.network,
            direction="INGRESS",
            priority=1000,
            source_tags=[tag],
            target_tags=[tag],
            allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
            description=f"trainfleet {args.group_name}: members only",
            opts=child,
        )
        if args.ssh_cidrs:
            gcp.compute.Firewall(
                f"{name}-ssh",
                network=args.network,
                direction="INGRESS",
                priority=1000,
                source_ranges=list(args.ssh_cidrs),
                target_tags=[tag],
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[SSH_PORT])],
                description="SSH from fleet.ssh_cidrs",
                opts=child,
            )

        # Node files too big for user-data; nodes fetch them with their service account and check their sha256.
        for key, text in sorted(args.node_assets.items()):
            if args.assets_bucket is None:
                raise ValueError("node_assets need assets_bucket")
            # Named by content (the key holds its hash) and kept on delete: nodes still booting from an
            # older instance template fetch the files it pins.
            gcp.storage.BucketObject(
                f"{name}-asset-{key.rsplit('/', 2)[-2]}-{key.rsplit('/', 1)[-1]}",
                bucket=args.assets_bucket,
                name=key,
                # An asset, not `content`: pulumi-gcp makes `content` a secret, so a preview could not size
                # (price) the object; the text is no secret.
                source=pulumi.StringAsset(text),
                content_type="text/plain; charset=utf-8",
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )

        scheduling = (
            gcp.compute.InstanceTemplateSchedulingArgs(
                provisioning_model="SPOT",
                preemptible=True,
                automatic_restart=False,
                on_host_maintenance="TERMINATE",
                instance_termination_action=args.termination_action,
            )
            if args.spot
            else gcp.compute.InstanceTemplateSchedulingArgs(
                provisioning_model="STANDARD", automatic_restart=True, on_host_maintenance="TERMINATE"
            )
        )
        template = gcp.compute.InstanceTemplate(
            f"{name}-template",
            region=args.region,
            machine_type=args.machine_type,
            description=f"trainfleet {args.group_name}",
            disks=[
                gcp.compute.InstanceTemplateDiskArgs(
                    boot=True,
                    auto_delete=True,
                    source_image=args.image or DL_IMAGE,
                    disk_size_gb=args.root_volume_gb,
                    disk_type="hyperdisk-balanced"
                    if args.machine_type.startswith(HYPERDISK_ONLY)
                    else "pd-ssd",
                    labels=args.labels,
                )
            ],
            network_interfaces=[
                # No access_configs: no external IP; outbound through Cloud NAT.
                gcp.compute.InstanceTemplateNetworkInterfaceArgs(
                    network=args.network, subnetwork=args.subnetwork
                )
            ],
            scheduling=scheduling,
            shielded_instance_config=gcp.compute.InstanceTemplateShieldedInstanceConfigArgs(
                enable_secure_boot=False,  # the NVIDIA driver modules of DL images are not signed for it
                enable_vtpm=True,
                enable_integrity_monitoring=True,
            ),
            service_account=gcp.compute.InstanceTemplateServiceAccountArgs(
                email=args.service_account_email, scopes=NODE_SCOPES
            ),
            metadata={
                "user-data": args.user_data,
                "enable-oslogin": "TRUE",
                "block-project-ssh-keys": "TRUE",
            },
            tags=[tag],
            labels=args.labels,
            opts=child,
        )
        multi_node = args.nodes > 1
        group = gcp.compute.RegionInstanceGroupManager(
            f"{name}-mig",
            name=args.group_name,
            base_instance_name=args.group_name,
            region=args.region,
            versions=[
                gcp.compute.RegionInstanceGroupManagerVersionArgs(
                    name="primary", instance_template=template.self_link_unique
                )
            ],
            # Created empty: a run starts with the fleet's `start_run` command (README "Starting a run"); a zero GPU
            # quota then fails that resize with GCP's own message instead of a group that creates nothing.
            target_size=0,
            distribution_policy_zones=list(args.zones),
            distribution_policy_target_shape="ANY_SINGLE_ZONE" if multi_node else "ANY",
            update_policy=gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs(
                type="OPPORTUNISTIC",
                minimal_action="REPLACE",
                instance_redistribution_type="NONE",
                max_surge_fixed=0,
                max_unavailable_fixed=max(len(args.zones), 1),
            ),
            wait_for_instances=False,
            params=gcp.compute.RegionInstanceGroupManagerParamsArgs(resource_manager_tags=args.resource_manager_tags)
            if args.resource_manager_tags is not None
            else None,
            # The size is `start_run`'s and the node agent's (it resizes to 0 when the job ends): with ignore_changes
            # an update never resizes (the provider calls resize only when targetSize changed).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["targetSize"]),
        )
        self.group_name = group.name
        self.instance_group = group.instance_group
        self.register_outputs({"group_name": self.group_name, "instance_group": self.instance_group})
