"""Rules: GCP. IAM conditions that name a resource IAM cannot see, and Spot and GPU scheduling."""

from __future__ import annotations

import re

from infra.catalog.sold import on_demand_sold
from infra.rules import Finding, rule, where

CONDITION_ATTRIBUTES = "https://cloud.google.com/iam/docs/conditions-resource-attributes"
RESERVATION_BOUND = "https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms"

# Resource types whose resource.name / resource.type IAM conditions can test, for the services the program
# grants on (conditions-resource-attributes, "Resource type values" and "Resource name values" tables,
# read 2026-11-24). Compute Engine's list does not include instance groups or instance group managers.
SUPPORTED_TYPES = {
    "compute.googleapis.com/Disk",
    "compute.googleapis.com/Image",
    "compute.googleapis.com/Instance",
    "compute.googleapis.com/InstanceTemplate",
    "compute.googleapis.com/MachineImage",
    "compute.googleapis.com/RegionDisk",
    "compute.googleapis.com/Snapshot",
    "storage.googleapis.com/Bucket",
    "storage.googleapis.com/Object",
}
# The collection in a resource name -> its type.
COLLECTIONS = {
    "disks": "compute.googleapis.com/Disk",
    "images": "compute.googleapis.com/Image",
    "instances": "compute.googleapis.com/Instance",
    "instanceTemplates": "compute.googleapis.com/InstanceTemplate",
    "machineImages": "compute.googleapis.com/MachineImage",
    "snapshots": "compute.googleapis.com/Snapshot",
    "instanceGroupManagers": "compute.googleapis.com/InstanceGroupManager",
    "instanceGroups": "compute.googleapis.com/InstanceGroup",
    "autoscalers": "compute.googleapis.com/Autoscaler",
    "objects": "storage.googleapis.com/Object",
    "buckets": "storage.googleapis.com/Bucket",
}
IAM_MEMBERS = ("gcp:projects/iAMMember:IAMMember", "gcp:storage/bucketIAMMember:BucketIAMMember")


def condition_types(expression: str) -> set[str]:
    """The resource types an IAM condition expression tests, by resource.type or by a resource.name path."""
    types = set(re.findall(r'resource\.type\s*==\s*"([^"]+)"', expression))
    for literal in re.findall(r'resource\.name[^"]*"([^"]+)"', expression):
        # The last collection the path names is the resource's own type (buckets/B/objects/O: an Object).
        collections = [s for s in literal.split("/") if s in COLLECTIONS]
        if collections:
            types.add(COLLECTIONS[collections[-1]])
    return types


@rule("gcp-iam-condition-resource-type", CONDITION_ATTRIBUTES)
def conditions_name_supported_types(run):
    """"Resource attributes are available for the Google Cloud services and resource types that are listed on
    this page. Other services and resource types do not recognize resource attributes": a condition on one
    of them never matches, and the permission is denied."""
    for member in (r for token in IAM_MEMBERS for r in run.of_type(token)):
        expression = (member.inputs.get("condition") or {}).get("expression")
        if not isinstance(expression, str):
            continue
        unsupported = sorted(condition_types(expression) - SUPPORTED_TYPES)
        if unsupported:
            yield Finding(
                "gcp-iam-condition-resource-type",
                where(member),
                f"the IAM condition tests {', '.join(unsupported)}, a resource type IAM conditions do not "
                "support: the grant never applies there",
                "grant those permissions without a condition in a role of their own (infra/gcp/iam.py)",
            )


TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
SPOT = "https://cloud.google.com/compute/docs/instances/spot#limitations"
GPU_HOST_MAINTENANCE = "https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance"
ACCELERATOR_OPTIMIZED = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")


@rule("gcp-spot-scheduling", SPOT)
def spot_and_gpu_scheduling(run):
    """Spot VMs cannot restart automatically or live-migrate (preemptible, automaticRestart false, host maintenance
    TERMINATE), and a VM with GPUs attached cannot live-migrate either: onHostMaintenance must be TERMINATE."""
    for template in run.of_type(TEMPLATE):
        scheduling = template.inputs.get("scheduling") or {}
        gpus = str(template.inputs.get("machineType", "")).startswith(ACCELERATOR_OPTIMIZED) or bool(
            template.inputs.get("guestAccelerators")
        )
        problems = []
        if scheduling.get("provisioningModel") == "SPOT":
            if scheduling.get("preemptible") is not True:
                problems.append("Spot needs preemptible: true")
            if scheduling.get("automaticRestart") is not False:
                problems.append("Spot VMs cannot restart automatically (automaticRestart: false)")
            if scheduling.get("instanceTerminationAction") not in ("STOP", "DELETE"):
                problems.append("Spot needs instanceTerminationAction STOP or DELETE")
        if (gpus or scheduling.get("provisioningModel") == "SPOT") and scheduling.get("onHostMaintenance") != "TERMINATE":
            problems.append("GPU and Spot VMs cannot live-migrate (onHostMaintenance: TERMINATE)")
        for problem in problems:
            yield Finding(
                "gcp-spot-scheduling",
                where(template),
                problem,
                "build the scheduling block as infra/gcp/fleet.py does for spot and standard VMs",
            )


@rule("gcp-standard-provisioning-sold", RESERVATION_BOUND)
def standard_provisioning_is_sold(run):
    """A4X, A4 and A3 Ultra have no standard (on-demand) provisioning model: a template asking for one is refused
    by Compute Engine, so only Spot (or a reservation, which trainfleet does not declare) can run them."""
    for template in run.of_type(TEMPLATE):
        machine = str(template.inputs.get("machineType", ""))
        model = (template.inputs.get("scheduling") or {}).get("provisioningModel", "STANDARD")
        if model != "SPOT" and not on_demand_sold("gcp", machine):
            yield Finding(
                "gcp-standard-provisioning-sold",
                where(template),
                f"{machine} is sold only reservation-bound, flex-start or Spot, never on demand (STANDARD)",
                "set the fleet's purchase: spot, or choose a type sold on demand (e.g. a3-highgpu-8g)",
            )


TAGS_ACCESS = "https://cloud.google.com/iam/docs/tags-access-control"
GROUP_WRITE = "compute.instanceGroupManagers.update"


@rule("gcp-node-group-access", TAGS_ACCESS)
def node_group_access_is_the_projects(run):
    """A node's role to resize its group, granted on the project without a condition, reaches every managed
    instance group of the project: IAM conditions cannot name a group (CONDITION_ATTRIBUTES), only a tag bound to
    it (fleets[].gcp_group_access: group-tag). Said as a warning: the stack works, with more reach than it needs."""
    roles = {r.outputs.get("name"): r for r in run.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")}
    for member in run.of_type("gcp:projects/iAMMember:IAMMember"):
        role = roles.get(member.inputs.get("role"))
        if role is None or GROUP_WRITE not in (role.inputs.get("permissions") or []) or member.inputs.get("condition"):
            continue
        yield Finding(
            "gcp-node-group-access",
            where(member),
            f"{member.inputs.get('member')} may list and resize every managed instance group of the project "
            f"({GROUP_WRITE} without a condition), not only its own",
            "run each training fleet in a project of its own, or set the fleet's gcp_group_access: group-tag when "
            "its group is created (a tag bound to the group, and the grant conditioned on it)",
            severity="warning",
        )
