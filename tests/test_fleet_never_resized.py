"""Issue 28 #3 and #8: no `pulumi up`, plain or refreshed, changes a fleet's size; a run starts with `start_run`.

Each cloud's group is deployed, its job runs and the agent scales it to zero (or it is still running), then a tag
and the user data change and `pulumi up` runs again. What would go to the cloud is worked out from the program's
second run the way the engine and each provider build their requests:

- the engine (pulumi/pulumi `pkg/resource/deploy/step_generator.go`, processIgnoreChanges): an ignored input takes
  its old value, and is dropped when the old inputs have none (tests/preview_documents.py `reset_ignored`);
- `pulumi refresh` (and `up --refresh`) reads the live size back into the old inputs;
- AWS, terraform-provider-aws `internal/service/autoscaling/group.go` resourceGroupUpdate: UpdateAutoScalingGroup
  carries DesiredCapacity only `if d.HasChange("desired_capacity")`;
- GCP, terraform-provider-google `resource_compute_region_instance_group_manager.go` Update: the group is
  resized only `if d.HasChange("target_size")`;
- Azure, azure-native: an update is a PUT of the whole body the (ignore-processed) inputs make, so a capacity in
  the inputs goes out on every update; a `sku` without capacity keeps the scale set's size (Azure/aks-engine#2183).

The size a request carries must be none, in every case: a finished job stays at zero, a running one keeps its
nodes. Deployments made before this change (created at `nodes`, the size under ignore_changes) are covered too.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from infra.config import StackConfig
from infra.mock_runtime import DeclaredResource, ProgramRun, run_program
from infra.stack_file import read_stack_file
from tests.conftest import STACKS
from tests.preview_documents import GROUP_SIZE, reset_ignored

GROUP_OF = {
    "prod": "aws:autoscaling/group:Group",
    "gcp-dev": "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
    "azure-dev": "azure-native:compute:VirtualMachineScaleSet",
}
USER_DATA = {  # where each cloud's user data goes
    "prod": ("aws:ec2/launchTemplate:LaunchTemplate", "userData"),
    "gcp-dev": ("gcp:compute/instanceTemplate:InstanceTemplate", "metadata.user-data"),
    "azure-dev": ("azure-native:compute:VirtualMachineScaleSet", "virtualMachineProfile.osProfile.customData"),
}
LIVE_RUNNING = 3


def _get(inputs: dict[str, Any], path: str) -> Any:
    node: Any = inputs
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(inputs: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = inputs
    for part in parents:
        node = node[part]
    node[last] = value


def _config(env: str, *, changed: bool) -> StackConfig:
    config = read_stack_file(STACKS / f"Pulumi.{env}.yaml").config
    if not changed:
        return config
    sections = config.to_sections()
    sections["tags"] = {**sections["tags"], "cost-center": "ml-4711"}  # a tag on every resource
    sections["checkpoint"] = {**sections["checkpoint"], "interval_minutes": 45}  # reaches the user data
    return StackConfig.from_sections(sections)


@functools.cache
def _run(env: str, *, changed: bool, exists: bool) -> ProgramRun:
    """The program's run on a first deployment, or again once the fleet's group exists."""
    group_name = None
    if exists:
        group_name = _group(env, changed=False, exists=False).inputs.get("vmScaleSetName")
    scale_sets = {group_name: LIVE_RUNNING} if group_name else None
    return run_program(env, _config(env, changed=changed), scale_sets=scale_sets)


def _group(env: str, *, changed: bool, exists: bool) -> DeclaredResource:
    (group,) = _run(env, changed=changed, exists=exists).of_type(GROUP_OF[env])
    return group


def _user_data(env: str, *, changed: bool, exists: bool) -> str:
    token, path = USER_DATA[env]
    carrier = _run(env, changed=changed, exists=exists).of_type(token)[0]
    return _get(carrier.inputs, path)


def _old_inputs(env: str, *, previous_version: bool) -> dict[str, Any]:
    """The state's inputs after the first `pulumi up`: this program's, or the previous version's, which created
    the group at `nodes` and kept the size under ignore_changes."""
    group = _group(env, changed=False, exists=False)
    inputs = copy.deepcopy(group.inputs)
    if previous_version:
        nodes = read_stack_file(STACKS / f"Pulumi.{env}.yaml").config.fleets[0].nodes
        _set(inputs, GROUP_SIZE[group.type], nodes)
    return inputs


def _request_size(token: str, new: dict[str, Any], old: dict[str, Any]) -> Any:
    """The size the provider's update request carries, or None."""
    path = GROUP_SIZE[token]
    if token == "azure-native:compute:VirtualMachineScaleSet":
        return _get(new, path)  # the whole body goes out
    return _get(new, path) if _get(new, path) != _get(old, path) else None  # only a changed size goes out


@pytest.mark.parametrize("env", ["prod", "gcp-dev", "azure-dev"])
@pytest.mark.parametrize("live", [0, LIVE_RUNNING], ids=["finished", "running"])
@pytest.mark.parametrize("refreshed", [False, True], ids=["plain", "refreshed"])
@pytest.mark.parametrize("previous_version", [False, True], ids=["deployed-now", "deployed-before"])
def test_an_update_request_never_carries_the_fleet_size(env, live, refreshed, previous_version):
    first = _group(env, changed=False, exists=False)
    path = GROUP_SIZE[first.type]
    assert _get(first.inputs, path) == 0, "a group is created empty: a run starts with start_run"

    old = _old_inputs(env, previous_version=previous_version)
    if refreshed and _get(old, path) is not None:
        _set(old, path, live)  # refresh reads the agent's (or start_run's) size back
    declared = _group(env, changed=True, exists=True)
    new = reset_ignored(declared.inputs, old, declared.ignore_changes)

    assert new != old, "the tag and user-data change must reach the group, or this test proves nothing"
    assert _user_data(env, changed=True, exists=True) != _user_data(env, changed=False, exists=False)
    assert _request_size(first.type, new, old) is None


def test_a_first_deployment_creates_every_group_empty_and_start_run_sizes_it():
    for env, token in GROUP_OF.items():
        config = read_stack_file(STACKS / f"Pulumi.{env}.yaml").config
        run = run_program(env, config)
        (group,) = run.of_type(token)
        assert _get(group.inputs, GROUP_SIZE[token]) == 0, env
        fleet = config.fleets[0]
        assert run.exports["fleets"][fleet.name]["start_run"].endswith(f" {fleet.nodes}"), env


def test_azure_asks_for_its_scale_set_and_fails_on_any_answer_but_not_found():
    """A lookup that fails for another reason (throttling, a missing permission) must fail the update, never be
    taken as "absent": that would send capacity 0 to a running job."""
    import infra.mock_runtime as mock_runtime

    config = read_stack_file(STACKS / "Pulumi.azure-dev.yaml").config
    real = mock_runtime._get_scale_set

    def throttled(args, scale_sets):
        raise mock_runtime.InvokeFailure("RESPONSE 429: 429 Too Many Requests\nERROR CODE: TooManyRequests")

    mock_runtime._get_scale_set = throttled
    try:
        with pytest.raises(Exception, match="TooManyRequests"):
            run_program("azure-dev", config)
    finally:
        mock_runtime._get_scale_set = real
