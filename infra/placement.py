"""Where a fleet's nodes may run together, one rule for the planner and the program alike.

Several AWS nodes share a cluster placement group (NCCL/EFA traffic between every step), and "a cluster
placement group is a logical grouping of instances within a single Availability Zone. You cannot specify
multiple Availability Zones and a cluster placement group" (CreateAutoScalingGroup API reference). So such a
fleet is planned, declared and checked (infra/rules/aws.py) in one zone.
"""

from __future__ import annotations


def shares_cluster_placement_group(cloud: str, nodes: int) -> bool:
    """Whether the fleet's nodes share an AWS cluster placement group, and so one zone."""
    return cloud == "aws" and nodes > 1
