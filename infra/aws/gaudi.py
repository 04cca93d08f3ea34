"""trainfleet:aws:GaudiGroup — a spot fleet of Intel Gaudi (dl1.24xlarge) nodes.

Same group, role and network as a GPU fleet, but booted from the Habana deep-learning AMI (SynapseAI
driver and PyTorch), looked up by name, newest first; `fleet.image` overrides it with an AMI id.
"""

from __future__ import annotations

import dataclasses

import pulumi

from infra.aws.fleet import SpotFleet, SpotFleetArgs

# AWS Deep Learning AMI for Habana Gaudi (SynapseAI + PyTorch), published by Amazon.
HABANA_AMI_NAME = "Deep Learning AMI Habana PyTorch * SynapseAI * (Ubuntu *"
GAUDI_INSTANCE_PREFIXES = ("dl1.",)


@dataclasses.dataclass
class GaudiGroupArgs(SpotFleetArgs):
    image_name_filter: str = HABANA_AMI_NAME


class GaudiGroup(pulumi.ComponentResource):
    group_name: pulumi.Output[str]
    group_arn: pulumi.Output[str]
    image_id: pulumi.Output[str]

    def __init__(self, name: str, args: GaudiGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:GaudiGroup", name, None, opts)
        types = [args.instance_type, *args.fallback_instance_types]
        if not all(t.startswith(GAUDI_INSTANCE_PREFIXES) for t in types):
            raise ValueError(f"a Gaudi group runs Gaudi instance types only, not {types}")
        fleet = SpotFleet(
            name,
            SpotFleetArgs(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SpotFleetArgs)}),
            pulumi.ResourceOptions(parent=self),
        )
        self.fleet = fleet
        self.group_name = fleet.group_name
        self.group_arn = fleet.group_arn
        self.security_group_id = fleet.security_group_id
        self.image_id = fleet.image_id
        self.register_outputs(
            {"group_name": self.group_name, "group_arn": self.group_arn, "image_id": self.image_id}
        )
