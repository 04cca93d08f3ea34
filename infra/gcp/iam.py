"""trainfleet:gcp:NodeServiceAccount — a dedicated service account for a fleet's nodes.

Object read/write in its own bucket under its own checkpoint prefix (an IAM condition on the object name;
listing is a bucket-level permission). Peers: `compute.instances.get` on its own group's instances only
(an IAM condition on the instance name; Instance is a resource type IAM conditions support).

The group: exactly the two permissions the agent's calls need, each the one the REST reference names for it
("Authorization requires the following IAM permission on the specified resource instanceGroupManager"):
`compute.instanceGroupManagers.get` for listManagedInstances (peers) and `compute.instanceGroupManagers.update`
for resize (scale to zero, https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize).
What limits them to the node's own group:
- not a resource-level policy: instance group managers have none (no compute.instanceGroupManagers.setIamPolicy
  permission, no pulumi-gcp InstanceGroupManagerIAM* resource, unlike instances, disks or images);
- not a condition on the name: IAM conditions recognise resource attributes only for the types listed in
  https://cloud.google.com/iam/docs/conditions-resource-attributes, and instanceGroupManagers is not one of them,
  so such a condition denies listManagedInstances and resize and the GPUs keep billing (infra/rules/gcp.py);
- a Resource Manager tag can: a MIG can carry tags (InstanceGroupManager `params.resourceManagerTags`, bound at
  insert, https://cloud.google.com/compute/docs/tag-resources), and an allow condition can test a resource's tags
  (`resource.matchTagId`, https://cloud.google.com/iam/docs/tags-access-control). With `limit_to_tagged_group`
  this component creates a tag key and value of the fleet's own and grants the group role only where the
  resource carries them; the fleet must then bind `group_tags` to its MIG (RegionInstanceGroupManager
  `params=...ParamsArgs(resource_manager_tags=group_tags)`, or a tags.LocationTagBinding for a MIG that exists),
  or the node cannot scale its group to zero.
Without it the two permissions are granted on the project without a condition, in a role holding nothing else,
and rule gcp-node-group-access (infra/rules/gcp.py) warns what that lets a node do: run each training fleet in a
project of its own, or set fleets[].gcp_group_access: group-tag when the group is created.
Either way `update` on a group is all of a MIG's writes (resize to any size, delete, abandon or recreate its
instances): no IAM condition can bound the size a resize asks for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

# Exactly what the agent's group calls need (see above), in a role holding nothing else.
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


def group_tag_condition(tag_key: str, tag_value: str) -> str:
    """The resource carries the fleet's own tag (ids `tagKeys/N`, `tagValues/M`): only its own MIG does."""
    return f'resource.matchTagId("{tag_key}", "{tag_value}")'


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
    # Grant the group role only on resources tagged with the fleet's own tag (created here, `group_tags`), which the
    # fleet must bind to its MIG; off: the role is granted on the whole project (rule gcp-node-group-access warns).
    limit_to_tagged_group: bool = False


class NodeServiceAccount(pulumi.ComponentResource):
    email: pulumi.Output[str]
    project: pulumi.Output[str]
    group_tags: pulumi.Output[dict[str, str]] | None  # tagKeys/N -> tagValues/M, for the MIG's resourceManagerTags

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
        group_condition: pulumi.Input[str] | None = None
        self.group_tags = None
        if args.limit_to_tagged_group:
            key = gcp.tags.TagKey(
                f"{name}-group-key",
                parent=project.apply(lambda p: f"projects/{p}"),
                short_name=args.role_id,
                description=f"trainfleet: the managed instance group of {args.group_name}",
                opts=child,
            )
            # pulumi-gcp's `name` of a tag key / value is its numeric id; IAM and Compute name it tagKeys/N, tagValues/M.
            key_id = key.name.apply(lambda n: f"tagKeys/{n}")
            value = gcp.tags.TagValue(
                f"{name}-group-value",
                parent=key_id,
                short_name=args.group_name,
                description=f"trainfleet: {args.group_name} itself, whose nodes may list and resize it",
                opts=child,
            )
            value_id = value.name.apply(lambda n: f"tagValues/{n}")
            group_condition = pulumi.Output.all(key_id, value_id).apply(lambda kv: group_tag_condition(*kv))
            self.group_tags = pulumi.Output.all(key_id, value_id).apply(lambda kv: {kv[0]: kv[1]})
            group_purpose = "see and resize its own instance group (tagged)"
        else:
            group_purpose = "see and resize instance groups (no IAM condition can name one)"
        roles = {
            "group": (GROUP_PERMISSIONS, group_purpose, group_condition),
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
                else gcp.projects.IAMMemberConditionArgs(
                    title="own instance group" if kind == "peers" else "own tagged instance group",
                    expression=condition,
                ),
                opts=child,
            )
        self.email = account.email
        self.project = project
        outputs: dict[str, pulumi.Input[Any]] = {"email": self.email}
        if self.group_tags is not None:
            outputs["group_tags"] = self.group_tags
        self.register_outputs(outputs)
