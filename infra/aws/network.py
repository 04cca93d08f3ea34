"""trainfleet:aws:Network — the VPC and subnets a fleet runs in.

Either an existing VPC named in config (its subnets named, or looked up in the fleet's zones), or a
minimal new one: a private subnet per zone with no public addresses, outbound through one NAT
gateway, S3 reached through a gateway endpoint (checkpoint traffic never crosses the NAT), and the
VPC's default security group stripped of every rule. Nothing admits inbound traffic from the internet.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass
class NetworkArgs:
    region: str
    zones: list[str]  # availability-zone ids such as use1-az4
    tags: dict[str, str]
    vpc_id: str | None = None  # an existing VPC; None creates a new one
    subnet_ids: list[str] = field(default_factory=list)  # existing subnets; empty: look up by zone
    cidr: str = "10.42.0.0/16"


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.created = args.vpc_id is None
        if args.vpc_id is not None:
            self.vpc_id = pulumi.Output.from_input(args.vpc_id)
            if args.subnet_ids:
                self.subnet_ids = pulumi.Output.from_input(list(args.subnet_ids))
            else:
                found = aws.ec2.get_subnets_output(
                    region=args.region,
                    filters=[
                        aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[args.vpc_id]),
                        aws.ec2.GetSubnetsFilterArgs(name="availability-zone-id", values=list(args.zones)),
                    ],
                    opts=pulumi.InvokeOptions(parent=self),
                )
                self.subnet_ids = found.ids
            self.register_outputs({"vpc_id": self.vpc_id, "subnet_ids": self.subnet_ids})
            return

        block = ipaddress.ip_network(args.cidr)
        blocks = list(block.subnets(new_prefix=20))
        if len(args.zones) + 1 > len(blocks):
            raise ValueError(f"{args.cidr} has room for {len(blocks) - 1} zones, not {len(args.zones)}")
        tags = dict(args.tags)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,
            region=args.region,
            tags={**tags, "Name": name},
            opts=child,
        )
        # The default security group admits its members and everything outbound; strip it bare.
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg",
            vpc_id=vpc.id,
            ingress=[],
            egress=[],
            region=args.region,
            tags=tags,
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, region=args.region, tags=tags, opts=child)
        public = aws.ec2.Subnet(
            f"{name}-nat-subnet",
            vpc_id=vpc.id,
            cidr_block=str(blocks[-1]),
            availability_zone_id=args.zones[0],
            map_public_ip_on_launch=False,
            region=args.region,
            tags={**tags, "Name": f"{name}-nat"},
            opts=child,
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            region=args.region,
            tags=tags,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-nat-subnet-rt",
            subnet_id=public.id,
            route_table_id=public_rt.id,
            region=args.region,
            opts=child,
        )
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", region=args.region, tags=tags, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=eip.id,
            subnet_id=public.id,
            connectivity_type="public",
            region=args.region,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
            region=args.region,
            tags=tags,
            opts=child,
        )
        subnets = []
        for i, zone in enumerate(args.zones):
            subnet = aws.ec2.Subnet(
                f"{name}-{zone}",
                vpc_id=vpc.id,
                cidr_block=str(blocks[i]),
                availability_zone_id=zone,
                map_public_ip_on_launch=False,
                region=args.region,
                tags={**tags, "Name": f"{name}-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-{zone}-rt",
                subnet_id=subnet.id,
                route_table_id=private_rt.id,
                region=args.region,
                opts=child,
            )
            subnets.append(subnet)
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_rt.id],
            region=args.region,
            tags=tags,
            opts=child,
        )
        self.vpc_id = vpc.id
        self.subnet_ids = pulumi.Output.all(*[s.id for s in subnets])
        self.register_outputs({"vpc_id": self.vpc_id, "subnet_ids": self.subnet_ids})
