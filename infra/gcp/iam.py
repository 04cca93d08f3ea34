"""trainfleet:gcp:NodeServiceAccount — a dedicated service account for a fleet's nodes.

Object read/write in its own bucket under its own checkpoint prefix (an IAM condition on the object
name; listing is a bucket-level permission); and a custom role limited by an IAM condition to its own
managed instance group (get, listManagedInstances, resize to zero) and its own instances (peer IPs).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

NODE_PERMISSIONS = [
    "compute.instanceGroupManagers.get",  # listManagedInstances: who are my peers
    "compute.instanceGroupManagers.update",  # resize to zero when the job ends
    "compute.instances.get",  # a peer's internal IP
]
NODE_SCOPES = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/compute",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring.write",
]


def checkpoint_condition(bucket: str, prefix: str) -> str:
    return (
        f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}") || '
        f'resource.type == "storage.googleapis.com/Bucket"'
    )


def group_condition(project: str, region: str, group: str) -> str:
    return (
        f'resource.name == "projects/{project}/regions/{region}/instanceGroupManagers/{group}" || '
        f'(resource.type == "compute.googleapis.com/Instance" && '
        f'resource.name.extract("/instances/{{name}}").startsWith("{group}-"))'
    )


@dataclass
class NodeServiceAccountArgs:
    account_id: str
    role_id: str
    region: str
    group_name: str
    bucket: pulumi.Input[str]
    prefix: str


class NodeServiceAccount(pulumi.ComponentResource):
    email: pulumi.Output[str]
    project: pulumi.Output[str]

    def __init__(self, name: str, args: NodeServiceAccountArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:NodeServiceAccount", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project = gcp.organizations.get_client_config_output(opts=pulumi.InvokeOptions(parent=self)).project
        account = gcp.serviceaccount.Account(
            f"{name}-sa",
            account_id=args.account_id,
            display_name=f"trainfleet nodes of {args.group_name}",
            opts=child,
        )
        gcp.storage.BucketIAMMember(
            f"{name}-checkpoints",
            bucket=args.bucket,
            role="roles/storage.objectUser",
            member=account.member,
            condition=gcp.storage.BucketIAMMemberConditionArgs(
                title="own checkpoint prefix",
                expression=pulumi.Output.from_input(args.bucket).apply(
                    lambda b: checkpoint_condition(b, args.prefix)
                ),
            ),
            opts=child,
        )
        role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            role_id=args.role_id,
            title=f"trainfleet node {args.group_name}",
            description="peer discovery and scale-to-zero of its own instance group",
            permissions=NODE_PERMISSIONS,
            project=project,
            opts=child,
        )
        gcp.projects.IAMMember(
            f"{name}-group",
            project=project,
            role=role.name,
            member=account.member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title="own instance group",
                expression=project.apply(lambda p: group_condition(p, args.region, args.group_name)),
            ),
            opts=child,
        )
        self.email = account.email
        self.project = project
        self.register_outputs({"email": self.email})
