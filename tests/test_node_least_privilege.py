"""Issue 28 #5: a node's identity on GCP and Azure holds exactly what its agent calls, on its own group where the cloud
can say so, as the AWS node role does (tests/test_provider_rules.py test_the_node_role_allows_exactly_the_agents_aws_calls).

The agent's calls are read from its source (every SDK method it calls on the clouds' operation groups), each mapped
to the permission the cloud authorizes it as, from the cloud's own reference:
- Azure, https://learn.microsoft.com/azure/role-based-access-control/permissions/compute#microsoftcompute (the
  operation each REST call is authorized as: List Virtual Machine Scale Set Network Interfaces,
  virtualMachineScaleSets/networkInterfaces/read; Virtual Machine Scale Set VMs - List, virtualMachines/read;
  Virtual Machine Scale Sets - Delete Instances, delete/action, "Deletes the instances of the Virtual Machine Scale
  Set"; Update / Create Or Update, write);
- GCP, the Compute REST reference's "Authorization requires the following IAM permission" of each method
  (listManagedInstances: compute.instanceGroupManagers.get; resize: compute.instanceGroupManagers.update,
  https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize; instances.get:
  compute.instances.get).
tests/test_agent_peers.py runs the agent against control planes that authorize by these same lists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from infra import rules
from infra.azure.identity import GROUP_ACTIONS
from infra.config import StackConfig
from infra.gcp.iam import GROUP_PERMISSIONS, NODE_PERMISSIONS, PEER_PERMISSIONS
from infra.mock_runtime import run_program
from infra.stack_file import read_stack_file
from tests.conftest import STACKS

AGENT = Path(__file__).parents[1] / "templates" / "agent" / "trainfleet_agent"

VMSS = "Microsoft.Compute/virtualMachineScaleSets"
# (operation group, SDK method) -> the action ARM authorizes the request as.
AZURE_SDK_ACTIONS = {
    ("network_interfaces", "list_virtual_machine_scale_set_network_interfaces"): f"{VMSS}/networkInterfaces/read",
    ("network_interfaces", "list_virtual_machine_scale_set_vm_network_interfaces"): (
        f"{VMSS}/virtualMachines/networkInterfaces/read"
    ),
    ("virtual_machine_scale_set_vms", "list"): f"{VMSS}/virtualMachines/read",
    ("virtual_machine_scale_set_vms", "get"): f"{VMSS}/virtualMachines/read",
    ("virtual_machine_scale_set_vms", "begin_delete"): f"{VMSS}/virtualMachines/delete",
    ("virtual_machine_scale_sets", "get"): f"{VMSS}/read",
    ("virtual_machine_scale_sets", "begin_update"): f"{VMSS}/write",
    ("virtual_machine_scale_sets", "begin_create_or_update"): f"{VMSS}/write",
    ("virtual_machine_scale_sets", "begin_delete"): f"{VMSS}/delete",
    ("virtual_machine_scale_sets", "begin_delete_instances"): f"{VMSS}/delete/action",
    ("virtual_machine_scale_sets", "begin_deallocate"): f"{VMSS}/deallocate/action",
}
AZURE_GROUPS = {group for group, _method in AZURE_SDK_ACTIONS}
# instanceGroupManagers / regionInstanceGroupManagers method (as membership.py's _gcp_mig_call names it) -> permission
GCP_MIG_PERMISSIONS = {
    "list_managed_instances": "compute.instanceGroupManagers.get",
    "get": "compute.instanceGroupManagers.get",
    "resize": "compute.instanceGroupManagers.update",
    "delete_instances": "compute.instanceGroupManagers.update",
    "patch": "compute.instanceGroupManagers.update",
}


def _agent_trees():
    for path in sorted(AGENT.glob("*.py")):
        yield ast.parse(path.read_text())


def agent_azure_actions() -> set[str]:
    """The ARM action of every azure-mgmt call in the agent: `<client>.<operation group>.<method>(...)`."""
    found = set()
    for tree in _agent_trees():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in AZURE_GROUPS:
                key = (owner.attr, node.func.attr)
                assert key in AZURE_SDK_ACTIONS, f"the agent calls {key}: add the action ARM authorizes it as"
                found.add(AZURE_SDK_ACTIONS[key])
    return found


def agent_gcp_permissions() -> set[str]:
    """The permission of every google-cloud-compute call in the agent: the MIG methods it hands `_gcp_mig_call` and
    the `instances` client's methods."""
    found = set()
    for tree in _agent_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id == "_gcp_mig_call":
                method = node.args[2]
                assert isinstance(method, ast.Constant) and method.value in GCP_MIG_PERMISSIONS, ast.dump(method)
                found.add(GCP_MIG_PERMISSIONS[method.value])
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                if node.func.value.id == "instances" and node.func.attr == "get":
                    found.add("compute.instances.get")
    return found


def test_the_azure_node_role_allows_exactly_the_agents_azure_calls():
    """Peers list the scale set's network interfaces; scale-to-zero lists its instances and deletes them. No
    `virtualMachineScaleSets/write`: the node can no longer rewrite its scale set (model, custom data, capacity up)."""
    sent = agent_azure_actions()
    assert sent == {f"{VMSS}/networkInterfaces/read", f"{VMSS}/virtualMachines/read", f"{VMSS}/delete/action"}
    assert set(GROUP_ACTIONS) == sent
    assert not any("*" in a or a.endswith("/write") or a == f"{VMSS}/delete" for a in GROUP_ACTIONS)


def test_the_gcp_node_roles_allow_exactly_the_agents_gcp_calls():
    sent = agent_gcp_permissions()
    assert sent == {"compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update", "compute.instances.get"}
    assert set(NODE_PERMISSIONS) == sent
    assert set(GROUP_PERMISSIONS) == sent - {"compute.instances.get"} and PEER_PERMISSIONS == ["compute.instances.get"]


@pytest.fixture(scope="module")
def gcp_config():
    return read_stack_file(STACKS / "Pulumi.gcp-dev.yaml").config


def test_a_project_wide_group_grant_says_what_a_node_can_do_beyond_its_group(gcp_config):
    """By default the group role is the project's, unconditioned, and `stacks check` warns what that allows and what
    to do about it (rule gcp-node-group-access)."""
    run = run_program("gcp-dev", gcp_config)
    member = run.one("gcp:projects/iAMMember:IAMMember", "gdev-node-group")
    assert "condition" not in member.inputs
    (warning,) = [w for w in run.warnings if w.rule == "gcp-node-group-access"]
    assert "may list and resize every managed instance group of the project" in warning.line
    assert "project of its own" in warning.line and "gcp_group_access: group-tag" in warning.line
    assert run.of_type("gcp:tags/tagKey:TagKey") == []
    assert "params" not in run.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager").inputs


def test_the_group_grant_can_be_limited_to_the_fleets_tagged_group(gcp_config):
    """fleets[].gcp_group_access: group-tag: a tag key and value of the fleet's own, bound to its MIG at creation,
    and the group role granted only where a resource carries them (`resource.matchTagId`; a condition on an
    instanceGroupManagers name is what rule gcp-iam-condition-resource-type refuses). No warning."""
    sections = gcp_config.to_sections()
    sections["fleets"][0]["gcp_group_access"] = "group-tag"
    run = run_program("gcp-dev", StackConfig.from_sections(sections))
    key = run.one("gcp:tags/tagKey:TagKey")
    value = run.one("gcp:tags/tagValue:TagValue")
    assert key.inputs["parent"] == "projects/trainfleet-mock-project"
    assert key.inputs["shortName"] == "trainfleet_gcp_dev_gdev" and value.inputs["shortName"] == "tf-gcp-dev-gdev"
    key_id, value_id = f"tagKeys/{key.outputs['name']}", f"tagValues/{value.outputs['name']}"
    assert value.inputs["parent"] == key_id and key.outputs["name"].isdigit()
    member = run.one("gcp:projects/iAMMember:IAMMember", "gdev-node-group")
    assert member.inputs["condition"]["expression"] == f'resource.matchTagId("{key_id}", "{value_id}")'
    mig = run.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager")
    assert mig.inputs["params"] == {"resourceManagerTags": {key_id: value_id}}
    assert not [w for w in run.warnings if w.rule == "gcp-node-group-access"]
    role = run.one("gcp:projects/iAMCustomRole:IAMCustomRole", "gdev-node-group-role")
    assert sorted(role.inputs["permissions"]) == sorted(GROUP_PERMISSIONS)
    assert [f for f in rules.check(run, only=["gcp-iam-condition-resource-type"])] == []


def test_group_tag_access_is_for_gcp_fleets_only():
    from infra.errors import ConfigError

    sections = read_stack_file(STACKS / "Pulumi.azure-dev.yaml").config.to_sections()
    sections["fleets"][0]["gcp_group_access"] = "group-tag"
    with pytest.raises((ConfigError, ValueError), match="gcp_group_access applies to GCP fleets only"):
        StackConfig.from_sections(sections)


def test_the_tag_values_are_names_gcp_accepts():
    """Tag key and value short names: 1-63 characters, alphanumeric at both ends, `-_.` and alphanumerics between
    (https://cloud.google.com/resource-manager/docs/tags/tags-creating-and-managing)."""
    import re

    from infra.naming import gcp_role_id, group_name

    short = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        sf = read_stack_file(path)
        for fleet in sf.config.fleets:
            if fleet.cloud == "gcp":
                assert short.match(gcp_role_id(sf.env, fleet)) and short.match(group_name(sf.env, fleet))


def test_pulumi_gcp_has_what_the_tag_limit_needs():
    """The pieces exist in the pulumi-gcp the program pins: tags, and the MIG's insert-time resourceManagerTags."""
    import pulumi_gcp as gcp

    assert gcp.tags.TagKey and gcp.tags.TagValue and gcp.tags.LocationTagBinding
    assert "resource_manager_tags" in gcp.compute.RegionInstanceGroupManagerParamsArgs.__init__.__code__.co_varnames
