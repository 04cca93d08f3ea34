"""Rules: a fleet's capacity is the node agent's once the group exists.

The agent scales its group to zero when the job ends (AWS SetDesiredCapacity, GCP resize, Azure sku.capacity);
`pulumi up --refresh` reads that 0 back and, unless the capacity is declared with ignore_changes, sets it to
the declared node count again: every GPU node relaunches for a job that has finished.
"""

from __future__ import annotations

from infra.rules import Finding, rule, where

IGNORE_CHANGES = "https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/"
# type token -> the capacity property path, as ignore_changes names it
CAPACITY = {
    "aws:autoscaling/group:Group": "desiredCapacity",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": "targetSize",
    "azure-native:compute:VirtualMachineScaleSet": "sku.capacity",
}


def _declared(inputs: dict, path: str) -> object:
    value: object = inputs
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


@rule("capacity-ignores-drift", IGNORE_CHANGES)
def capacity_is_the_agents(run):
    for token, path in CAPACITY.items():
        for group in run.of_type(token):
            if _declared(group.inputs, path) is not None and path not in group.ignore_changes:
                yield Finding(
                    "capacity-ignores-drift",
                    where(group),
                    f"{path} is declared without ignore_changes: a refresh relaunches a fleet the job scaled to zero",
                    f'declare it with ResourceOptions(ignore_changes=["{path}"])',
                )
