"""Least privilege for the nodes' identities.

AWS (aws:iam/rolePolicy, aws:iam/policy, aws:iam/role inlinePolicies): in every Allow statement,
  * no "*" action, no service-wide wildcard ("s3:*"), no NotAction (it allows everything it does not name);
  * no action, wildcards expanded, that matches autoscaling:UpdateAutoScalingGroup,
    autoscaling:CreateAutoScalingGroup, ec2:RunInstances or any iam: action (a node must not resize
    anything but its own group's desired capacity, launch instances, or change IAM);
  * every S3 object action (GetObject, PutObject, ...) scoped to "arn:aws:s3:::BUCKET/PREFIX..." with a
    non-empty key prefix before any wildcard: not "*", not "BUCKET/*", no NotResource.
  Role attachments (rolePolicyAttachment, role managedPolicyArns) of AWS's broad managed policies fail.
GCP: project / folder / organization IAM members, bindings and policies grant no basic role (roles/owner,
  roles/editor, roles/viewer) and no predefined Compute role that administers instance groups
  (roles/compute.admin, roles/compute.instanceAdmin, roles/compute.instanceAdmin.v1); custom roles hold no
  *.setIamPolicy and no iam.* permission, no wildcard, and no compute.* permission but the node's own:
  compute.instanceGroupManagers.get (listManagedInstances), compute.instanceGroupManagers.update (resize) and
  compute.instances.get (a peer's address), each the permission the Compute REST reference names for the call.
Azure: role definitions have no "*" (or provider-wide "Microsoft.X/*") action or data action and nothing that
  matches Microsoft.Authorization role assignment/definition writes; every action is one a node may hold on its
  own scale set: reading it and its instances and network interfaces, and deleting its instances
  (`virtualMachineScaleSets/delete/action`, which can only lower its capacity); never
  `virtualMachineScaleSets/write` (it rewrites the whole scale set: model, custom data, identity, capacity up) or
  `virtualMachineScaleSets/delete` (the scale set itself). No role assignment of Owner, Contributor or User
  Access Administrator.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from .base import resource_policy
from .props import dig, is_map, json_document, listed

NAME = "least-privilege-node-roles"

AWS_POLICY_DOCUMENTS = ("aws:iam/rolePolicy:RolePolicy", "aws:iam/policy:Policy")
AWS_ROLE = "aws:iam/role:Role"
AWS_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"

# Actions a node role must never be granted, lower case (IAM action names are case-insensitive:
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_action.html).
FORBIDDEN_AWS_ACTIONS = (
    "autoscaling:updateautoscalinggroup",
    "autoscaling:createautoscalinggroup",
    "ec2:runinstances",
    "iam:*",
)
# AWS managed policies far wider than a node needs.
BROAD_AWS_MANAGED = (
    "AdministratorAccess",
    "PowerUserAccess",
    "IAMFullAccess",
    "AmazonEC2FullAccess",
    "AmazonS3FullAccess",
    "AutoScalingFullAccess",
)
# Object-level S3 actions (resource type "object" in
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html), to expand a wildcard
# action against; besides these, any s3 action named "...Object..." but not "...Bucket..." is object-level.
S3_OBJECT_ACTIONS = (
    "s3:getobject",
    "s3:getobjectversion",
    "s3:putobject",
    "s3:deleteobject",
    "s3:deleteobjectversion",
    "s3:restoreobject",
    "s3:getobjectacl",
    "s3:putobjectacl",
    "s3:getobjecttagging",
    "s3:putobjecttagging",
    "s3:abortmultipartupload",
    "s3:listmultipartuploadparts",
)
_S3_OBJECT_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::(?P<bucket>[^/*?]+)/(?P<key>.+)$")
_S3_BUCKET_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::[^/*?]+$")

GCP_IAM = (
    "gcp:projects/iAMMember:IAMMember",
    "gcp:projects/iAMBinding:IAMBinding",
    "gcp:folder/iAMMember:IAMMember",
    "gcp:folder/iAMBinding:IAMBinding",
    "gcp:organizations/iAMMember:IAMMember",
    "gcp:organizations/iAMBinding:IAMBinding",
)
GCP_IAM_POLICIES = (
    "gcp:projects/iAMPolicy:IAMPolicy",
    "gcp:folder/iAMPolicy:IAMPolicy",
    "gcp:organizations/iAMPolicy:IAMPolicy",
)
GCP_CUSTOM_ROLES = (
    "gcp:projects/iAMCustomRole:IAMCustomRole",
    "gcp:organizations/iAMCustomRole:IAMCustomRole",
)
# https://cloud.google.com/iam/docs/roles-overview#basic
GCP_BASIC_ROLES = ("roles/owner", "roles/editor", "roles/viewer")
# Predefined roles with instanceGroupManagers.create/delete/update and instances.create/setMetadata among others
# (https://cloud.google.com/compute/docs/access/iam): far wider than a node's own group.
GCP_BROAD_COMPUTE_ROLES = ("roles/compute.admin", "roles/compute.instanceAdmin", "roles/compute.instanceAdmin.v1")
# The Compute permissions a node's custom roles may hold: what the agent's calls need, nothing else
# (regionInstanceGroupManagers methods are authorized with the instanceGroupManagers permissions).
GCP_NODE_COMPUTE_PERMISSIONS = frozenset(
    {
        "compute.instanceGroupManagers.get",  # instanceGroupManagers.listManagedInstances
        "compute.instanceGroupManagers.update",  # instanceGroupManagers.resize
        "compute.instances.get",  # instances.get: a peer's networkIP
    }
)

AZURE_ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
AZURE_ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles (privileged administrator roles)
AZURE_PRIVILEGED_ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
    "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
}
FORBIDDEN_AZURE_ACTIONS = (
    "microsoft.authorization/roleassignments/write",
    "microsoft.authorization/roledefinitions/write",
    "microsoft.authorization/elevateaccess/action",
    "microsoft.compute/virtualmachinescalesets/write",
    "microsoft.compute/virtualmachinescalesets/delete",
)
# The actions a node's role may hold (lower case), each on its own scale set (the assignment's scope), from
# https://learn.microsoft.com/azure/role-based-access-control/permissions/compute#microsoftcompute: reads of the
# scale set, its instances and their network interfaces (peer discovery), and "Deletes the instances of the
# Virtual Machine Scale Set" (scale to zero: it lowers the capacity, it cannot raise it or change the model).
AZURE_NODE_ACTIONS = frozenset(
    {
        "microsoft.compute/virtualmachinescalesets/read",
        "microsoft.compute/virtualmachinescalesets/virtualmachines/read",
        "microsoft.compute/virtualmachinescalesets/networkinterfaces/read",
        "microsoft.compute/virtualmachinescalesets/virtualmachines/networkinterfaces/read",
        "microsoft.compute/virtualmachinescalesets/delete/action",
    }
)


# ------------------------------------------------------------------------------------------------- AWS


def _grants(pattern: str, action: str) -> bool:
    """Whether an IAM action pattern (with * and ? wildcards) covers `action` (both lower case)."""
    return fnmatch.fnmatchcase(action, pattern) or fnmatch.fnmatchcase(pattern, action)


def _is_s3_object_action(action: str) -> bool:
    service, _, name = action.partition(":")
    if not fnmatch.fnmatchcase("s3", service):
        return False
    return any(_grants(action, a) for a in S3_OBJECT_ACTIONS) or ("object" in name and "bucket" not in name)


def _object_resource_ok(resource: Any) -> bool:
    """A resource S3 object actions may have: objects under a non-empty key prefix of one named bucket, or
    a bucket ARN (which no object action applies to, so it grants nothing)."""
    if not isinstance(resource, str):
        return False
    if _S3_BUCKET_ARN.match(resource):
        return True
    match = _S3_OBJECT_ARN.match(resource)
    if not match:
        return False
    prefix = re.split(r"[*?]", match["key"], maxsplit=1)[0]
    return bool(prefix.strip("/"))


def aws_document_findings(document: Any, where: str = "policy") -> list[str]:
    """Why an IAM policy document (JSON text or object) grants more than a node needs."""
    try:
        doc = json_document(document)
    except ValueError:
        return [f"{where} is not a JSON policy document, so what it grants cannot be checked"]
    if not is_map(doc):
        return [f"{where} is not a JSON policy document object"]
    out = []
    for i, st in enumerate(listed(doc.get("Statement"))):
        if not is_map(st) or st.get("Effect") != "Allow":
            continue
        sid = f"{where} statement {st.get('Sid') or i}"
        if "NotAction" in st:
            out.append(f"{sid}: Allow with NotAction grants every action it does not name")
        if "NotResource" in st:
            out.append(f"{sid}: Allow with NotResource grants every resource it does not name")
        actions = [a.lower() for a in listed(st.get("Action")) if isinstance(a, str)]
        for action in actions:
            service, _, name = action.partition(":")
            if action == "*" or (service and name.strip("*") == ""):
                out.append(f"{sid}: action {action!r} grants a whole service (or every service)")
                continue
            hit = [f for f in FORBIDDEN_AWS_ACTIONS if _grants(action, f)]
            if hit:
                out.append(f"{sid}: action {action!r} grants {hit[0]}, which a node role must not have")
        object_actions = [a for a in actions if _is_s3_object_action(a)]
        if object_actions:
            for resource in [r for r in listed(st.get("Resource")) if not _object_resource_ok(r)]:
                out.append(
                    f"{sid}: S3 object actions {', '.join(object_actions)} on {resource!r}; scope them to "
                    "arn:aws:s3:::BUCKET/PREFIX/* (a key prefix, not the whole bucket)"
                )
    return out


def _aws_findings(resource_type: str, props: Any) -> list[str]:
    if resource_type in AWS_POLICY_DOCUMENTS:
        return aws_document_findings(dig(props, "policy"))
    out = []
    if resource_type == AWS_ROLE:
        for j, inline in enumerate(listed(dig(props, "inlinePolicies"))):
            if dig(inline, "policy") is not None:
                out += aws_document_findings(dig(inline, "policy"), f"inlinePolicies[{j}]")
        arns = listed(dig(props, "managedPolicyArns"))
    elif resource_type == AWS_ATTACHMENT:
        arns = listed(dig(props, "policyArn"))
    else:
        return []
    for arn in arns:
        if isinstance(arn, str) and arn.rsplit("/", 1)[-1] in BROAD_AWS_MANAGED and ":aws:policy/" in arn:
            out.append(f"attaches AWS managed policy {arn}, far wider than a node needs")
    return out


# ------------------------------------------------------------------------------------------------- GCP


def _basic_role(role: Any) -> list[str]:
    if role in GCP_BASIC_ROLES:
        return [f"grants basic role {role}; grant a predefined or custom role with only what the node needs"]
    if role in GCP_BROAD_COMPUTE_ROLES:
        return [
            f"grants {role}, which administers every instance group and instance; grant a custom role with "
            f"only {', '.join(sorted(GCP_NODE_COMPUTE_PERMISSIONS))}"
        ]
    return []


def _gcp_permission_findings(perm: str) -> list[str]:
    if perm.endswith(".setIamPolicy") or perm.startswith("iam."):
        return [f"custom role includes {perm}, which lets the node change who can do what"]
    if "*" in perm:
        return [f"custom role includes {perm!r}: a wildcard, not a permission a node needs"]
    if perm.startswith("compute.") and perm not in GCP_NODE_COMPUTE_PERMISSIONS:
        return [
            f"custom role includes {perm}, beyond what a node needs of Compute Engine "
            f"({', '.join(sorted(GCP_NODE_COMPUTE_PERMISSIONS))})"
        ]
    return []


def _gcp_findings(resource_type: str, props: Any) -> list[str]:
    if resource_type in GCP_IAM:
        return _basic_role(dig(props, "role"))
    if resource_type in GCP_IAM_POLICIES:
        try:
            doc = json_document(dig(props, "policyData", "{}"))
        except ValueError:
            return ["policyData is not JSON, so what it grants cannot be checked"]
        return [
            m
            for b in listed(doc.get("bindings") if is_map(doc) else None)
            for m in _basic_role(dig(b, "role"))
        ]
    if resource_type in GCP_CUSTOM_ROLES:
        return [
            m for perm in listed(dig(props, "permissions")) if isinstance(perm, str) for m in _gcp_permission_findings(perm)
        ]
    return []


# ----------------------------------------------------------------------------------------------- Azure


def _azure_findings(resource_type: str, props: Any) -> list[str]:
    if resource_type == AZURE_ROLE_DEFINITION:
        out = []
        for i, perm in enumerate(listed(dig(props, "permissions"))):
            for key in ("actions", "dataActions"):
                for action in listed(dig(perm, key)):
                    if not isinstance(action, str):
                        continue
                    lowered = action.lower()
                    provider = lowered.split("/", 1)[0]
                    if "*" in provider or (lowered.endswith("/*") and lowered.count("/") == 1):
                        out.append(
                            f"permissions[{i}].{key} has {action!r}: every action of a provider (or all)"
                        )
                        continue
                    hit = [f for f in FORBIDDEN_AZURE_ACTIONS if _grants(lowered, f)]
                    if hit:
                        out.append(f"permissions[{i}].{key} has {action!r}, which grants {hit[0]}")
                    elif key == "actions" and ("*" in lowered or lowered not in AZURE_NODE_ACTIONS):
                        out.append(
                            f"permissions[{i}].{key} has {action!r}, beyond what a node needs on its own scale set "
                            f"({', '.join(sorted(AZURE_NODE_ACTIONS))})"
                        )
        return out
    if resource_type == AZURE_ROLE_ASSIGNMENT:
        role = dig(props, "roleDefinitionId")
        guid = role.rsplit("/", 1)[-1].lower() if isinstance(role, str) else ""
        if guid in AZURE_PRIVILEGED_ROLES:
            return [f"assigns the built-in {AZURE_PRIVILEGED_ROLES[guid]} role; assign a narrow custom role"]
    return []


def iam_findings(resource_type: str, props: Any) -> list[str]:
    package = resource_type.split(":", 1)[0]
    if package == "aws":
        return _aws_findings(resource_type, props)
    if package == "gcp":
        return _gcp_findings(resource_type, props)
    if package == "azure-native":
        return _azure_findings(resource_type, props)
    return []


POLICY = resource_policy(
    NAME,
    "Node identities are least-privilege: AWS policies with no '*' or service-wide actions, none of "
    "autoscaling:UpdateAutoScalingGroup/CreateAutoScalingGroup, ec2:RunInstances, iam:*, and S3 object actions "
    "scoped to a key prefix (https://docs.aws.amazon.com/IAM/latest/UserGuide/best-practices.html#grant-least-privilege, "
    "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html); GCP with no basic "
    "roles or instance-admin roles and custom roles without *.setIamPolicy, iam.* or any compute.* permission but "
    "instanceGroupManagers.get/update and instances.get (https://cloud.google.com/iam/docs/using-iam-securely, "
    "https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize); Azure role "
    "definitions with no '*' actions and no action but reading its own scale set and deleting its instances, never "
    "virtualMachineScaleSets/write (https://learn.microsoft.com/azure/role-based-access-control/best-practices, "
    "https://learn.microsoft.com/azure/role-based-access-control/permissions/compute).",
    iam_findings,
)
