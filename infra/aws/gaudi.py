"""trainfleet:aws:GaudiGroup — a spot fleet of Intel Gaudi (dl1.24xlarge) nodes.

Same group, role and network as a GPU fleet, but booted from an AMI with the Intel Gaudi driver, software and
Habana's PyTorch, which the stack pins by id (`fleets[].image`). No such AMI is published: the Habana DLAMI line
left the DLAMI release notes (the images seen carry SynapseAI 0.15 to 1.6, of 2021-2022, and AWS deprecates
public AMIs within two years of creation), and the image must carry Intel Gaudi software GAUDI_SOFTWARE_VERSION,
since the boot script refuses any other PyTorch. So a Gaudi fleet boots the user's own image, built on Ubuntu
22.04 with Intel's installer (BUILD_GAUDI_AMI) and named GAUDI_AMI_NAME in their account, where the program
finds the newest (stacks/Pulumi.gaudi.yaml ships without an id: it names none it cannot vouch for; `stacks
check` names the build as a first-deploy step). `fleets[].image` pins one by id instead, found even once
deprecated (SpotFleet looks it up with include_deprecated), so nodes replaced mid-run boot the same image.
"""

from __future__ import annotations

import dataclasses

import pulumi

from infra.aws.fleet import SpotFleet, SpotFleetArgs
from infra.node_env import GAUDI_AMI_NAME, GAUDI_AMI_PREFIX, GAUDI_SOFTWARE_VERSION

GAUDI_INSTANCE_PREFIXES = ("dl1.",)
# How to get an image to pin: Intel's installer on Ubuntu 22.04 (Support Matrix v1.18.0: Ubuntu 22.04 or 24.04,
# PyTorch 2.4.0), as "Driver and Software Installation" and "Bare Metal Installation" describe it
# (https://docs.habana.ai/en/latest/Installation_Guide/Bare_Metal_Fresh_OS.html, .../Installation_Methods/
# Bare_Metal_Installation.html, read 2026-11-24; the installer of a release is at vault.habana.ai/artifactory/
# gaudi-installer/<release>/habanalabs-installer.sh), then an AMI of that instance in the fleet's region (an AMI
# id holds in one region).
BUILD_GAUDI_AMI = (
    f"on a dl1.24xlarge running Ubuntu 22.04, run Intel's habanalabs-installer.sh {GAUDI_SOFTWARE_VERSION} "
    "(install --type base, install -t dependencies, install --type pytorch), then "
    f"`aws ec2 create-image --instance-id <that instance> --name {GAUDI_AMI_PREFIX}$(date +%Y%m%d)`"
)


@dataclasses.dataclass
class GaudiGroupArgs(SpotFleetArgs):
    # Without fleets[].image: the newest AMI of the deploying account named GAUDI_AMI_NAME, the name the build
    # above gives it (`stacks check` names that step; `pulumi up` fails with EC2's "no results" until it is done).
    image_name_filter: str = GAUDI_AMI_NAME
    image_owners: list[str] = dataclasses.field(default_factory=lambda: ["self"])


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
