"""trainfleet:aws:GaudiGroup — a spot fleet of Intel Gaudi (dl1.24xlarge) nodes.

Same group, role and network as a GPU fleet, but booted from a Habana deep-learning AMI (Intel Gaudi driver,
SynapseAI and Habana's PyTorch) that the stack pins by id (`fleets[].image`). Not looked up by name: the
Habana DLAMI line is old (no release in the DLAMI release notes read 2026-11-24) and AWS deprecates public
AMIs within two years of creation, so a name filter finds nothing, or only deprecated images
(infra/node_env.py). A pinned id is found even once deprecated (SpotFleet looks it up with
include_deprecated), so nodes replaced mid-run boot the same image. The image must carry Intel Gaudi software
GAUDI_SOFTWARE_VERSION: the boot script refuses any other PyTorch.
"""

from __future__ import annotations

import dataclasses

import pulumi

from infra.aws.fleet import SpotFleet, SpotFleetArgs
from infra.errors import ConfigError
from infra.node_env import GAUDI_SOFTWARE_VERSION, HABANA_AMI_NAME

GAUDI_INSTANCE_PREFIXES = ("dl1.",)
# How to find an id to pin (any region: --region); --include-deprecated, as the line's images are deprecated.
FIND_HABANA_AMI = (
    "aws ec2 describe-images --owners amazon --include-deprecated "
    f"--filters 'Name=name,Values={HABANA_AMI_NAME}' --query 'Images[].[ImageId,Name,DeprecationTime]'"
)


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
        if not args.image_id:
            raise ConfigError(
                f"fleet {name!r}: a Gaudi fleet boots an AMI pinned by id: set fleets[].image to a Habana AMI "
                f"with Intel Gaudi software {GAUDI_SOFTWARE_VERSION} (find one: {FIND_HABANA_AMI}); the "
                "Habana DLAMI line is old, so a name filter finds none or only deprecated images"
            )
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
