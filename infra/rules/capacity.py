"""Rules: no `pulumi up` sizes a fleet; a run is started by the fleet's `start_run` command.

The node agent scales its group to zero when the job ends (AWS SetDesiredCapacity, GCP resize, Azure
sku.capacity), and `start_run` sizes it for the next run. A size the program declares would undo either:
`pulumi up --refresh` reads the agent's 0 back and sets the declared count again (every GPU node relaunches for
a finished job), or an update shrinks a running one. So every group is created empty, and an update request
never carries its size:

- AWS and GCP: the size is declared 0 with ignore_changes; the providers send a size only when it changed.
- Azure: azure-native updates with a PUT of the whole body, and ignore_changes fills the ignored input with the
  old one, so a capacity under ignore_changes goes out on every update. The capacity is 0 at creation and absent
  from any update instead (infra/azure_scale_set_size.py).
"""

from __future__ import annotations

from infra.rules import Finding, rule, where

IGNORE_CHANGES = "https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/"
# type token -> the size property path, as ignore_changes names it
CAPACITY = {
    "aws:autoscaling/group:Group": "desiredCapacity",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": "targetSize",
    "azure-native:compute:VirtualMachineScaleSet": "sku.capacity",
}
PUT_WHOLE_BODY = {"azure-native:compute:VirtualMachineScaleSet"}


def _declared(inputs: dict, path: str) -> object:
    value: object = inputs
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


@rule("capacity-ignores-drift", IGNORE_CHANGES)
def capacity_is_start_runs(run):
    for token, path in CAPACITY.items():
        for group in run.of_type(token):
            size = _declared(group.inputs, path)
            if size not in (None, 0):
                yield Finding(
                    "capacity-ignores-drift",
                    where(group),
                    f"{path} is declared {size}: `pulumi up` would start a run, and a refresh relaunch a fleet the "
                    "job scaled to zero",
                    f"create the group empty ({path} 0); a run starts with the fleet's start_run command",
                )
            elif token in PUT_WHOLE_BODY and path in group.ignore_changes:
                yield Finding(
                    "capacity-ignores-drift",
                    where(group),
                    f"{path} is under ignore_changes: azure-native PUTs the whole body, so every update sends the "
                    "old capacity and relaunches a fleet the job scaled to zero",
                    f"leave {path} out of the update request (infra/azure_scale_set_size.py), not ignore_changes",
                )
            elif token not in PUT_WHOLE_BODY and size is not None and path not in group.ignore_changes:
                yield Finding(
                    "capacity-ignores-drift",
                    where(group),
                    f"{path} is declared without ignore_changes: a refresh undoes the size start_run set",
                    f'declare it with ResourceOptions(ignore_changes=["{path}"])',
                )
