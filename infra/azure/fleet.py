"""trainfleet:azure:SpotFleet — a virtual machine scale set of Spot VMs.

Uniform orchestration (the node agent lists the scale set's network interfaces for peer discovery and
deletes its instances when the job ends, which takes the capacity to zero), created empty and never resized by `pulumi up`
(infra/azure_scale_set_size.py), Spot priority with eviction Delete, Spot restore, and the max price
from config (-1: up to the on-demand price), a terminate notification long enough for a checkpoint, custom data from the rendered cloud-init, the fleet's
user-assigned managed identity, accelerated networking, no public IP, the network security group on
every NIC, and the custom role for its own scale set assigned to that identity. The node files too big for
custom data (the agent, the example trainer) are blobs in the fleet's node-files container
(infra/azure/node_files.py), which the nodes fetch at boot with their managed identity and check against
the sha256 the custom data pins.

Azure requires an admin key for Linux VMs with password login off. Unless the fleet names SSH CIDRs
there is no way in anyway; the key installed is a public key whose private half was discarded when
it was generated, so nobody can log in with it. Add your own key with `az vmss update` if you open SSH.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azure_native

from infra.azure_scale_set_size import capacity_to_send
from infra.errors import ConfigError
from infra.node_env import AZURE_HPC_IMAGE

# Microsoft's Ubuntu HPC image: NVIDIA driver, CUDA, InfiniBand (OFED), NCCL; no PyTorch, so the nodes install
# the torch infra/node_env.py pins into their venv.
DEFAULT_IMAGE = azure_native.compute.ImageReferenceArgs(
    publisher=AZURE_HPC_IMAGE[0], offer=AZURE_HPC_IMAGE[1], sku=AZURE_HPC_IMAGE[2], version=AZURE_HPC_IMAGE[3]
)
ADMIN_USER = "trainfleet"
LOCKED_ADMIN_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDNbag3x25vFZKKfCOFgcZSPSkVhNOHsIjuJZ1xUhR2x9y2tsrhZs22ARrdBzCDZEYGTovpEwerwS5"
    "PfLa+Si1/MlxDwrdOhWW2D4VK+XeotJcBAxoef+FSKV2mP4EX9pREfkA6kTHFPQ9GpntglQbtOv2pLhNDsA5pz2CuSbU6N2RaiiGNfnHvjHuNmNQmpC"
    "rg+ajsvYKN9TGoC8mEJcATg6tSYk2B6IcD7XrAApyUSmL8UjRmp0J6Em8dnEnY3yY3tk28g1yWwZ/EmfUHkdPIM/j+ILAlBNl52xZguggzqOOlqYkKdM"
    "JZMlSiAYghCTtB3k2uLBi7rejgM+Fk+xfdTH89LS9IiatjdwBX4AImXMjwhEc4lSohcXk1FkOSt+cG2M/VqVy5cV39OAAm5kzAVQoCrfx7UQRpKoHkYHS"
    "mLewJV1W1bqJ6j9UA2bBn9aQjl+7UrnHhQSgZR5G+DYEtlgEfvPLdhrZc7lvtptsdXkoAUKPigjbMbnEmfxBd+ck= trainfleet-no-login"
)
# One placement group keeps InfiniBand connectivity between VMs; it holds at most 100.
SINGLE_PLACEMENT_GROUP_MAX = 100


def image_reference(image: str | None) -> azure_native.compute.ImageReferenceArgs:
    """`publisher:offer:sku:version` (a marketplace URN) or an image resource id; None: the HPC image."""
    if image is None:
        return DEFAULT_IMAGE
    if image.startswith("/"):
        return azure_native.compute.ImageReferenceArgs(id=image)
    parts = image.split(":")
    if len(parts) != 4:
        raise ConfigError(
            f"fleets[].image: {image!r} is not an Azure image; use publisher:offer:sku:version or an image resource id"
        )
    return azure_native.compute.ImageReferenceArgs(
        publisher=parts[0], offer=parts[1], sku=parts[2], version=parts[3]
    )


@dataclass
class SpotFleetArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    group_name: str
    vm_size: str
    nodes: int
    subnet_id: pulumi.Input[str]
    nsg_id: pulumi.Input[str]
    identity_id: pulumi.Input[str]
    principal_id: pulumi.Input[str]
    group_role_id: pulumi.Input[str]
    custom_data: pulumi.Input[str]  # base64 cloud-init
    tags: dict[str, str]
    zones: list[str] = field(default_factory=list)
    spot: bool = True
    max_price: float | None = None
    image: str | None = None
    root_volume_gb: int = 200
    terminate_notice_minutes: int = 5  # the terminate notification's window (5-15, infra/checkpoint_io.py)
    restore_timeout: str = "PT1H"  # how long Spot restore keeps trying to replace evicted VMs (ISO 8601)
    node_assets: dict[str, str] = field(default_factory=dict)  # blob name -> text, fetched at boot
    assets_account_name: pulumi.Input[str] | None = None  # the NodeFiles account and container
    assets_container_name: pulumi.Input[str] | None = None


class SpotFleet(pulumi.ComponentResource):
    group_name: pulumi.Output[str]
    group_id: pulumi.Output[str]

    def __init__(self, name: str, args: SpotFleetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:SpotFleet", name, None, opts)
        # Node files too big for custom data; nodes fetch them with their managed identity, check their sha256.
        for key, text in sorted(args.node_assets.items()):
            if args.assets_account_name is None or args.assets_container_name is None:
                raise ValueError("node_assets need assets_account_name and assets_container_name")
            # Named by content (the name holds its hash) and kept on delete: nodes still booting from an
            # older scale set model fetch the files it pins.
            azure_native.storage.Blob(
                f"{name}-asset-{key.rsplit('/', 2)[-2]}-{key.rsplit('/', 1)[-1]}",
                resource_group_name=args.resource_group_name,
                account_name=args.assets_account_name,
                container_name=args.assets_container_name,
                blob_name=key,
                source=pulumi.StringAsset(text),
                content_type="text/plain; charset=utf-8",
                type=azure_native.storage.BlobType.BLOCK,
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
        compute = azure_native.compute
        profile = compute.VirtualMachineScaleSetVMProfileArgs(
            priority=compute.VirtualMachinePriorityTypes.SPOT if args.spot else compute.VirtualMachinePriorityTypes.REGULAR,
            # Spot only: evicted VMs are deleted; max price -1 means up to the pay-as-you-go price.
            eviction_policy=compute.VirtualMachineEvictionPolicyTypes.DELETE if args.spot else None,
            billing_profile=compute.BillingProfileArgs(
                max_price=-1 if args.max_price in (None, -1) else args.max_price
            )
            if args.spot
            else None,
            os_profile=azure_native.compute.VirtualMachineScaleSetOSProfileArgs(
                computer_name_prefix=args.group_name[:50],
                admin_username=ADMIN_USER,
                custom_data=args.custom_data,
                linux_configuration=azure_native.compute.LinuxConfigurationArgs(
                    disable_password_authentication=True,
                    provision_vm_agent=True,
                    ssh=azure_native.compute.SshConfigurationArgs(
                        public_keys=[
                            azure_native.compute.SshPublicKeyArgs(
                                path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=LOCKED_ADMIN_KEY
                            )
                        ]
                    ),
                ),
            ),
            storage_profile=azure_native.compute.VirtualMachineScaleSetStorageProfileArgs(
                image_reference=image_reference(args.image),
                os_disk=azure_native.compute.VirtualMachineScaleSetOSDiskArgs(
                    create_option="FromImage",
                    caching=azure_native.compute.CachingTypes.READ_WRITE,
                    disk_size_gb=args.root_volume_gb,
                    # No delete_option: a Flexible-orchestration setting; Uniform deletes the disk with its VM.
                    managed_disk=azure_native.compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                        storage_account_type="Premium_LRS"
                    ),
                ),
            ),
            # Scale-in and deletion give the VM a Terminate scheduled event and wait this long before removing
            # it, so its agent checkpoints first (without it they come with no event at all).
            scheduled_events_profile=compute.ScheduledEventsProfileArgs(
                terminate_notification_profile=compute.TerminateNotificationProfileArgs(
                    enable=True, not_before_timeout=f"PT{args.terminate_notice_minutes}M"
                )
            ),
            network_profile=azure_native.compute.VirtualMachineScaleSetNetworkProfileArgs(
                network_interface_configurations=[
                    azure_native.compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                        name=f"{args.group_name}-nic",
                        primary=True,
                        enable_accelerated_networking=True,
                        network_security_group=azure_native.compute.SubResourceArgs(id=args.nsg_id),
                        ip_configurations=[
                            # No public_ip_address_configuration: no public address.
                            azure_native.compute.VirtualMachineScaleSetIPConfigurationArgs(
                                name="primary",
                                primary=True,
                                subnet=azure_native.compute.ApiEntityReferenceArgs(id=args.subnet_id),
                            )
                        ],
                    )
                ]
            ),
        )
        scale_set = azure_native.compute.VirtualMachineScaleSet(
            f"{name}-vmss",
            vm_scale_set_name=args.group_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            orchestration_mode="Uniform",
            # Created empty; on update no capacity at all, so the size stays `start_run`'s and the agent's
            # (infra/azure_scale_set_size.py says why ignore_changes cannot do that on Azure).
            sku=azure_native.compute.SkuArgs(
                name=args.vm_size, tier="Standard", capacity=capacity_to_send(args.resource_group_name, args.group_name, self)
            ),
            overprovision=False,
            single_placement_group=args.nodes <= SINGLE_PLACEMENT_GROUP_MAX,
            platform_fault_domain_count=1,
            zones=list(args.zones) or None,
            upgrade_policy=azure_native.compute.UpgradePolicyArgs(mode=azure_native.compute.UpgradeMode.MANUAL),
            identity=azure_native.compute.VirtualMachineScaleSetIdentityArgs(
                type=azure_native.compute.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[args.identity_id],
            ),
            virtual_machine_profile=profile,
            # An evicted Spot VM (eviction Delete) is replaced when capacity returns, so an elastic job grows back.
            spot_restore_policy=compute.SpotRestorePolicyArgs(enabled=True, restore_timeout=args.restore_timeout)
            if args.spot
            else None,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        azure_native.authorization.RoleAssignment(
            f"{name}-own-group",
            principal_id=args.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=args.group_role_id,
            scope=scale_set.id,
            description=f"trainfleet {args.group_name}: peers and scale-to-zero",
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.group_name = scale_set.name
        self.group_id = scale_set.id
        self.register_outputs({"group_name": self.group_name, "group_id": self.group_id})
