"""trainfleet:gcp:NodeServiceAccount — a dedicated service account for a fleet's nodes.

Object read/write in its own bucket under its own checkpoint prefix (an IAM condition on the object name;
listing is a bucket-level permission). Peers: `compute.instances.get` on its own group's instances only
(an IAM condition on the instance name; Instance is a resource type IAM conditions support).

The managed instance group itself cannot be named in a condition: IAM conditions recognise resource
attributes only for the types listed in https://cloud.google.com/iam/docs/conditions-resource-attributes,
and instanceGroupManagers is not one of them, so a condition on it denies `listManagedInstances` (peer
discovery) and `resize` (scale to zero) while the GPUs keep billing. Those two permissions are therefore
granted on the project without a condition, in a role holding nothing else: a node can see and resize the
project's managed instance groups. Run training in a project of its own to keep that to the job's groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# What IAM conditions cannot limit to one group (see above): granted project-wide, nothing else in the role.
GROUP_PERMISSIONS = [
    "compute.instanceGroupManagers.get",  # listManagedInstances: who are my peers
    "compute.instanceGroupManagers.update",  # resize to zero when the job ends
]
PEER_PERMISSIONS = ["compute.instances.get"]  # a peer's internal IP; limited to the group's instances
NODE_PERMISSIONS = GROUP_PERMISSIONS + PEER_PERMISSIONS
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


def peer_condition(group: str) -> str:
    """The group's own instances: a MIG names them `<base instance name>-<4 characters>`."""
    return (
        f'resource.type == "compute.googleapis.com/Instance" && '
        f'resource.name.extract("/instances/{{name}}").startsWith("{group}-")'
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
        roles = {
            "group": (GROUP_PERMISSIONS, "see and resize instance groups (no IAM condition can name one)", None),
            "peers": (PEER_PERMISSIONS, "read its own group's instances", peer_condition(args.group_name)),
        }
        for kind, (permissions, purpose, condition) in roles.items():
            role = gcp.projects.IAMCustomRole(
                f"{name}-{kind}-role",
                role_id=f"{args.role_id}_{kind}",
                title=f"trainfleet node {args.group_name} {kind}",
                description=f"trainfleet nodes: {purpose}",
                permissions=permissions,
                project=project,
                opts=child,
            )
            gcp.projects.IAMMember(
                f"{name}-{kind}",
                project=project,
                role=role.name,
                member=account.member,
                condition=None
                if condition is None
                else gcp.projects.IAMMemberConditionArgs(title="own instance group", expression=condition),
                opts=child,
            )
        self.email = account.email
        self.project = project
        self.register_outputs({"email": self.email})
