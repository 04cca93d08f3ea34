"""Deterministic names: the same stack config always yields the same group, prefix and export names.

User-data needs the group name before the group exists (peer discovery filters on it; the node agent
scales its own group to zero when the job ends), so these names are computed, never generated.
"""

from __future__ import annotations

import hashlib
import re

from infra.config import Fleet, StackConfig
from infra.errors import ConfigError, shown

# Limits: GCP instance-group and Azure scale-set names are the tightest (63/64 characters).
GROUP_NAME_MAX = 63
GCP_ACCOUNT_ID_MAX = 30
BILLING_DATASET_MAX = 1024
# Azure: the container of a fleet's node files (the agent, the example trainer), in a storage account of their
# own (infra/azure/node_files.py); the node fetches them from `<account>/node-files`.
AZURE_NODE_FILES_CONTAINER = "node-files"

# Pulumi's stack-name rule (https://www.pulumi.com/docs/iac/concepts/stacks/): "Stack names may only
# contain alphanumeric characters, hyphens, underscores, or periods"; the CLI also caps them at 100
# characters ("stack names are limited to 100 characters ..."). A name that follows it is shell-safe as it
# is: no quote, space, `$`, backslash or line break can reach a node file or a review file.
# Pulumi's stack-name rule (https://www.pulumi.com/docs/iac/concepts/stacks/); `stack_path` and the
# renderer both check it.
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def check_stack_name(name: str) -> str:
    """`name` if it is a valid Pulumi stack name, else ConfigError (one line naming the stack file)."""
    if not isinstance(name, str) or not STACK_NAME.fullmatch(name):
        raise ConfigError(
            f"stack name {shown(name)} (stacks/Pulumi.<stack>.yaml) is not a Pulumi stack name: use 1 to 100 "
            f"letters, digits, hyphens, underscores or periods"
        )
    return name


def _slug(text: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return re.sub(r"-{2,}", "-", cleaned) or "x"


def _fit(name: str, limit: int) -> str:
    """`name` if it fits, else a prefix plus a short hash of the whole, so long names stay unique."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return name[: limit - 7].rstrip("-") + "-" + digest


def stack_slug(stack: str) -> str:
    """Pulumi stack names may hold dots, underscores and capitals; cloud names mostly may not."""
    return _slug(stack)


def group_name(stack: str, fleet: Fleet) -> str:
    """The ASG / managed instance group / scale set name of a fleet: `tf-<stack>-<fleet>`."""
    return _fit(f"tf-{stack_slug(stack)}-{fleet.name}", GROUP_NAME_MAX)


def group_tag(stack: str, fleet: Fleet) -> str:
    """GCP network tag the fleet's firewall admits (same text as the group name)."""
    return group_name(stack, fleet)


def checkpoint_prefix(stack: str, config: StackConfig) -> str:
    """Key prefix the job's checkpoints live under in the fleet's bucket; the node role is scoped to it."""
    return f"{stack_slug(stack)}/{config.job.name}/"


def resource_name(stack: str, fleet: Fleet | None, kind: str) -> str:
    """Pulumi logical name of a resource (unique per stack)."""
    return f"{fleet.name}-{kind}" if fleet is not None else kind


def gcp_account_id(stack: str, fleet: Fleet) -> str:
    """Service account id: 6-30 characters, [a-z][a-z0-9-]*[a-z0-9]."""
    return _fit(f"tf-{stack_slug(stack)}-{fleet.name}", GCP_ACCOUNT_ID_MAX).rstrip("-")


def gcp_role_id(stack: str, fleet: Fleet) -> str:
    """Custom IAM role id prefix: [a-zA-Z0-9_.], up to 64 characters once a `_group`/`_peers` suffix is added."""
    return _fit(f"trainfleet_{stack_slug(stack)}_{fleet.name}", 58).replace("-", "_")


def billing_export_name(stack: str) -> str:
    """AWS data export / Azure cost export name for a stack."""
    return _fit(f"trainfleet-{stack_slug(stack)}", 64)


def billing_dataset_id(stack: str) -> str:
    """BigQuery dataset id: letters, digits and underscores."""
    return _fit(f"trainfleet_billing_{stack_slug(stack)}", BILLING_DATASET_MAX).replace("-", "_")


def gcp_labels(tags: dict[str, str]) -> dict[str, str]:
    """GCP labels: lowercase keys and values of [a-z0-9_-], at most 63 characters."""
    labels = {}
    for key, value in tags.items():
        k = re.sub(r"[^a-z0-9_-]", "_", key.lower())[:63]
        labels[k] = re.sub(r"[^a-z0-9_-]", "_", value.lower())[:63]
    return labels
