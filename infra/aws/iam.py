"""trainfleet:aws:NodeRole — what a training node may do, and nothing more.

Read and write its own checkpoint prefix in its own bucket; describe instances (peer discovery:
EC2 has no resource-level scoping for Describe*); set the desired capacity of its own auto scaling
group only (the node agent scales the group to zero when the job ends). The group ARN is built from
the deterministic group name, so the policy exists before the group and there is no cycle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

CHECKPOINT_OBJECT_ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]


def node_policy(bucket_arn: str, prefix: str, group_arn: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListCheckpointPrefix",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
                "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
            },
            {
                "Sid": "ReadWriteCheckpoints",
                "Effect": "Allow",
                "Action": CHECKPOINT_OBJECT_ACTIONS,
                "Resource": f"{bucket_arn}/{prefix}*",
            },
            {
                "Sid": "DiscoverPeers",
                "Effect": "Allow",
                "Action": "ec2:DescribeInstances",
                "Resource": "*",
            },
            {
                "Sid": "ScaleOwnGroup",
                "Effect": "Allow",
                # The node agent scales to zero with SetDesiredCapacity (the group's MinSize is already 0), and
                # keeps a termination waiting while its checkpoint goes up (RecordLifecycleActionHeartbeat) and lets
                # it proceed once the checkpoint is safe (CompleteLifecycleAction).
                # Never UpdateAutoScalingGroup: that could raise MaxSize or swap the launch template.
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:CompleteLifecycleAction",
                    "autoscaling:RecordLifecycleActionHeartbeat",
                ],
                "Resource": group_arn,
            },
        ],
    }


@dataclass
class NodeRoleArgs:
    region: str
    bucket_arn: pulumi.Input[str]
    prefix: str  # checkpoint key prefix, ends with "/"
    group_name: str
    tags: dict[str, str]


class NodeRole(pulumi.ComponentResource):
    role_name: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    instance_profile_arn: pulumi.Output[str]

    def __init__(self, name: str, args: NodeRoleArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:aws:NodeRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            description=f"trainfleet nodes of {args.group_name}",
            tags=args.tags,
            opts=child,
        )
        identity = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=self))
        group_arn = identity.account_id.apply(
            lambda account: (
                f"arn:aws:autoscaling:{args.region}:{account}:autoScalingGroup:*:"
                f"autoScalingGroupName/{args.group_name}"
            )
        )
        policy = pulumi.Output.all(args.bucket_arn, group_arn).apply(
            lambda v: json.dumps(node_policy(v[0], args.prefix, v[1]))
        )
        aws.iam.RolePolicy(f"{name}-policy", role=role.name, policy=policy, opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=child)
        self.role_name = role.name
        self.role_arn = role.arn
        self.instance_profile_arn = profile.arn
        self.register_outputs(
            {
                "role_name": self.role_name,
                "role_arn": self.role_arn,
                "instance_profile_arn": self.instance_profile_arn,
            }
        )
