"""IMDSv2 only: every AWS launch template and instance requires session tokens for instance metadata."""

from __future__ import annotations

from typing import Any

from .base import resource_policy
from .props import dig

NAME = "aws-imdsv2-required"

# Resources that launch EC2 instances and carry `metadataOptions` (pulumi-aws input names).
IMDS_TYPES = (
    "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:ec2/instance:Instance",
    "aws:ec2/launchConfiguration:LaunchConfiguration",
)


def imds_findings(resource_type: str, props: Any) -> list[str]:
    """Why the resource allows IMDSv1 (empty: it does not)."""
    if resource_type not in IMDS_TYPES:
        return []
    tokens = dig(props, "metadataOptions.httpTokens")
    if tokens == "required":
        return []
    shown = (
        "not set (EC2 then defaults to `optional` unless the AMI is marked v2.0)"
        if tokens is None
        else repr(tokens)
    )
    return [
        f'metadataOptions.httpTokens is {shown}: set it to "required" so instance metadata, and the node '
        "role's credentials with it, answer only IMDSv2 session-token requests"
    ]


POLICY = resource_policy(
    NAME,
    'EC2 launch templates and instances require IMDSv2 (metadataOptions.httpTokens = "required"). '
    "Follows https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-IMDS-new-instances.html and the "
    "pulumi-aws metadataOptions input (https://www.pulumi.com/registry/packages/aws/api-docs/ec2/launchtemplate/).",
    imds_findings,
)
