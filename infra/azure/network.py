"""trainfleet:azure:Network — the resource group, virtual network and security group a fleet runs in.

Either the VNet and subnet named in config, or a minimal new VNet: one subnet (Azure subnets span the
region's zones) with no default outbound access, outbound through a NAT gateway, and a service
endpoint for Storage. The network security group admits traffic from the fleet's subnet only (plus
SSH from the CIDRs the config names) and denies every other inbound flow explicitly, overriding
Azure's default allow-from-VirtualNetwork rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azure_native

from infra.errors import ConfigError

DENY_ALL_PRIORITY = 4000


@dataclass
class NetworkArgs:
    location: str
    tags: dict[str, str]
    zones: list[str] = field(default_factory=list)
    vnet_id: str | None = None  # an existing VNet; its subnet must be named too
    subnet_id: str | None = None
    cidr: str = "10.42.0.0/16"
    subnet_prefix: str = "10.42.0.0/20"
    ssh_cidrs: list[str] = field(default_factory=list)


def existing_subnet_prefix(subnet_id: str, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The address prefix of an existing subnet, looked up from its resource id."""
    parts = subnet_id.strip("/").split("/")
    try:
        group = parts[parts.index("resourceGroups") + 1]
        vnet = parts[parts.index("virtualNetworks") + 1]
        subnet = parts[parts.index("subnets") + 1]
    except (ValueError, IndexError):
        raise ConfigError(
            f"network.subnets: {subnet_id!r} is not a subnet resource id "
            "(/subscriptions/.../resourceGroups/RG/providers/Microsoft.Network/virtualNetworks/VNET/subnets/NAME)"
        ) from None
    found = azure_native.network.get_subnet_output(
        resource_group_name=group,
        virtual_network_name=vnet,
        subnet_name=subnet,
        opts=pulumi.InvokeOptions(parent=parent),
    )
    return found.apply(lambda s: s.address_prefix or (s.address_prefixes or ["VirtualNetwork"])[0])


def security_rules(
    source: pulumi.Input[str], ssh_cidrs: list[str]
) -> list[azure_native.network.SecurityRuleArgs]:
    rules = [
        azure_native.network.SecurityRuleArgs(
            name="allow-fleet-subnet",
            priority=100,
            direction="Inbound",
            access="Allow",
            protocol="*",
            source_address_prefix=source,
            source_port_range="*",
            destination_address_prefix=source,
            destination_port_range="*",
            description="fleet members talk to each other on every port",
        )
    ]
    for i, cidr in enumerate(ssh_cidrs):
        rules.append(
            azure_native.network.SecurityRuleArgs(
                name=f"allow-ssh-{i}",
                priority=200 + i,
                direction="Inbound",
                access="Allow",
                protocol="Tcp",
                source_address_prefix=cidr,
                source_port_range="*",
                destination_address_prefix="*",
                destination_port_range="22",
                description="SSH from fleet.ssh_cidrs",
            )
        )
    rules.append(
        azure_native.network.SecurityRuleArgs(
            name="deny-all-inbound",
            priority=DENY_ALL_PRIORITY,
            direction="Inbound",
            access="Deny",
            protocol="*",
            source_address_prefix="*",
            source_port_range="*",
            destination_address_prefix="*",
            destination_port_range="*",
            description="nothing else gets in (overrides the default allow-VirtualNetwork rule)",
        )
    )
    return rules


class Network(pulumi.ComponentResource):
    resource_group_name: pulumi.Output[str]
    resource_group_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    nsg_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:azure:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.created = args.vnet_id is None
        group = azure_native.resources.ResourceGroup(
            f"{name}-rg", location=args.location, tags=args.tags, opts=child
        )
        if args.vnet_id is not None:
            if args.subnet_id is None:
                raise ValueError("an existing VNet needs the subnet id to use")  # infra/program.py checks first
            source: pulumi.Input[str] = existing_subnet_prefix(args.subnet_id, self)
        else:
            source = args.subnet_prefix
        nsg = azure_native.network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=group.name,
            location=args.location,
            security_rules=security_rules(source, args.ssh_cidrs),
            tags=args.tags,
            opts=child,
        )
        if args.vnet_id is not None:
            subnet_id = pulumi.Output.from_input(args.subnet_id or "")
        else:
            vnet = azure_native.network.VirtualNetwork(
                f"{name}-vnet",
                resource_group_name=group.name,
                location=args.location,
                address_space=azure_native.network.AddressSpaceArgs(address_prefixes=[args.cidr]),
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
            )
            ip = azure_native.network.PublicIPAddress(
                f"{name}-nat-ip",
                resource_group_name=group.name,
                location=args.location,
                sku=azure_native.network.PublicIPAddressSkuArgs(name="Standard", tier="Regional"),
                public_ip_allocation_method="Static",
                public_ip_address_version="IPv4",
                tags=args.tags,
                opts=child,
            )
            nat = azure_native.network.NatGateway(
                f"{name}-nat",
                resource_group_name=group.name,
                location=args.location,
                sku=azure_native.network.NatGatewaySkuArgs(name="Standard"),
                public_ip_addresses=[azure_native.network.SubResourceArgs(id=ip.id)],
                idle_timeout_in_minutes=10,
                tags=args.tags,
                opts=child,
            )
            subnet = azure_native.network.Subnet(
                f"{name}-subnet",
                resource_group_name=group.name,
                virtual_network_name=vnet.name,
                address_prefix=args.subnet_prefix,
                network_security_group=azure_native.network.NetworkSecurityGroupArgs(id=nsg.id),
                nat_gateway=azure_native.network.SubResourceArgs(id=nat.id),
                service_endpoints=[
                    azure_native.network.ServiceEndpointPropertiesFormatArgs(service="Microsoft.Storage")
                ],
                default_outbound_access=False,
                opts=child,
            )
            subnet_id = subnet.id
        self.resource_group_name = group.name
        self.resource_group_id = group.id
        self.subnet_id = subnet_id
        self.nsg_id = nsg.id
        self.register_outputs(
            {
                "resource_group_name": self.resource_group_name,
                "subnet_id": self.subnet_id,
                "nsg_id": self.nsg_id,
            }
        )
