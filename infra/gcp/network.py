"""trainfleet:gcp:Network — the VPC network and subnet a fleet runs in.

Either the network (and subnet) named in config, or a minimal new custom-mode network: one regional
subnet (GCP subnets span every zone of a region) with Private Google Access so nodes reach Cloud
Storage without public addresses, and Cloud NAT for outbound traffic. GCP networks deny all ingress
unless a firewall rule admits it; the fleet's rules admit only its own members.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


@dataclass
class NetworkArgs:
    region: str
    network: str | None = None  # an existing network's name or self link; None creates one
    subnetwork: str | None = None  # an existing subnet in `region`
    cidr: str = "10.42.0.0/20"


class Network(pulumi.ComponentResource):
    network: pulumi.Output[str]
    subnetwork: pulumi.Output[str | None]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.created = args.network is None
        if args.network is not None:
            self.network = pulumi.Output.from_input(args.network)
            self.subnetwork = pulumi.Output.from_input(args.subnetwork)
            self.register_outputs({"network": self.network, "subnetwork": self.subnetwork})
            return
        network = gcp.compute.Network(
            f"{name}",
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            description="trainfleet: private training network",
            opts=child,
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-{args.region}",
            network=network.id,
            region=args.region,
            ip_cidr_range=args.cidr,
            private_ip_google_access=True,
            opts=child,
        )
        router = gcp.compute.Router(f"{name}-router", network=network.id, region=args.region, opts=child)
        gcp.compute.RouterNat(
            f"{name}-nat",
            router=router.name,
            region=args.region,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[
                gcp.compute.RouterNatSubnetworkArgs(
                    name=subnet.id, source_ip_ranges_to_nats=["ALL_IP_RANGES"]
                )
            ],
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=child,
        )
        self.network = network.self_link
        self.subnetwork = subnet.self_link
        self.register_outputs({"network": self.network, "subnetwork": self.subnetwork})
