"""trainfleet's guardrails as Pulumi policies: one module per concern, each policy citing the doc it follows.

`all_policies()` is the pack's policy list (policy/__main__.py builds the PolicyPack from it).
"""

from __future__ import annotations

from pulumi_policy import Policy

PACK_NAME = "trainfleet-guardrails"


def all_policies() -> list[Policy]:
    from . import budget, iam, imds, ingress, storage, userdata

    return [
        imds.POLICY,
        storage.POLICY,
        storage.STACK_POLICY,
        ingress.POLICY,
        ingress.STACK_POLICY,
        iam.POLICY,
        userdata.POLICY,
        budget.POLICY,
    ]
