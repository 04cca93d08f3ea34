"""`pulumi preview --json` documents as the real engine writes them, made from the program run under mocks.

No Pulumi CLI can run here, so a test that needs a real-shaped document of one of our stacks builds it the
way the engine would, from what the program registers (infra/mock_runtime.run_program) and a deployed
state. What this follows, from pulumi/pulumi:

- `pkg/resource/deploy/step_generator.go`, `processIgnoreChanges`: "sets the value for each ignoreChanges
  property in inputs to the value from oldInputs", before the diff; so a property declared with
  ignore_changes keeps its deployed value in newState, and a change of it alone is a `same` step;
- `pkg/engine/events.go`, `preludeEvent`: the stack config goes into the document as a map of strings, each
  value through `config.Value.Value(NewBlindingDecrypter())`: an object or list value as its JSON text;
- `pkg/backend/display/json.go`, `ShowPreviewDigest`: steps with `op`, `urn`, `oldState`, `newState`,
  `diffReasons`; `changeSummary` counts every op; `--show-sames` decides whether `same` steps are listed.

The deployed state is what the node agent leaves after a run: the fleet's group scaled to 0 (AWS
SetDesiredCapacity, GCP resize, Azure sku.capacity; read back by `pulumi refresh`).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from infra.config import StackConfig
from infra.mock_runtime import DeclaredResource, run_program
from infra.stack_file import parse_stack_text

STACKS = Path(__file__).resolve().parent.parent / "stacks"
# The size input of each fleet group type, which the node agent owns once the group exists.
GROUP_SIZE = {
    "aws:autoscaling/group:Group": "desiredCapacity",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": "targetSize",
    "azure-native:compute:VirtualMachineScaleSet": "sku.capacity",
}


def stack_text(stack: str, nodes: int | None = None, instance_type: str | None = None) -> str:
    """A shipped stack file's text, its first fleet's `nodes` / `instance_type` changed as a pull request would
    (a new instance type that was a fallback swaps places with the old one: p4de with fallback p5 -> p5 with
    fallback p4de)."""
    text = (STACKS / f"Pulumi.{stack}.yaml").read_text()
    sections, _, _ = parse_stack_text(text, stack)
    fleet = sections["fleets"][0]
    if nodes is not None:
        text = text.replace(f"    nodes: {fleet['nodes']}\n", f"    nodes: {nodes}\n", 1)
    if instance_type is not None:
        old = fleet["instance_type"]
        text = text.replace(f"instance_type: {old}\n", f"instance_type: {instance_type}\n", 1)
        fallbacks = fleet.get("fallback_instance_types") or []
        if instance_type in fallbacks:
            swapped = [old if t == instance_type else t for t in fallbacks]
            text = text.replace(f"fallback_instance_types: [{', '.join(fallbacks)}]",
                                f"fallback_instance_types: [{', '.join(swapped)}]", 1)  # fmt: skip
    return text


@functools.cache
def declared(stack: str, text: str) -> tuple[list[DeclaredResource], dict[str, str]]:
    """What the program registers for this stack text, and the document's `config` map for it (one program run
    per text in a process: nothing here changes what it returns)."""
    sections, other, _ = parse_stack_text(text, stack)
    run = run_program(stack, StackConfig.from_sections(sections))
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in other.items()}
    config.update({f"trainfleet:{k}": json.dumps(v) for k, v in sections.items()})
    return [r for r in run.resources if r.type != "pulumi:pulumi:Stack"], config


def _state(r: DeclaredResource, inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": r.type, "urn": r.urn, "custom": r.custom, "id": r.id or "", "parent": r.parent or "",
        "inputs": inputs, "outputs": r.outputs,
    }  # fmt: skip


def _path(inputs: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    *parents, last = path.split(".")
    node: Any = inputs
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), last


def reset_ignored(inputs: dict[str, Any], old: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """processIgnoreChanges: each ignored path takes the old inputs' value (deleted when the old has none)."""
    out = copy.deepcopy(inputs)
    for path in paths:
        old_parent, key = _path(old, path)
        new_parent, _ = _path(out, path)
        if new_parent is None:
            continue
        if old_parent is not None and key in old_parent:
            new_parent[key] = copy.deepcopy(old_parent[key])
        else:
            new_parent.pop(key, None)
    return out


def deployed_after_run(resources: list[DeclaredResource]) -> dict[str, dict[str, Any]]:
    """URN -> state as deployed, after the job ended and the agent scaled its group to 0 (then refreshed)."""
    state = {}
    for r in resources:
        inputs = copy.deepcopy(r.inputs)
        if r.type in GROUP_SIZE:
            parent, key = _path(inputs, GROUP_SIZE[r.type])
            assert parent is not None and key in parent, (r.urn, GROUP_SIZE[r.type])
            parent[key] = 0
        state[r.urn] = _state(r, inputs)
    return state


def preview(
    deployed: dict[str, dict[str, Any]], resources: list[DeclaredResource], config: dict[str, str],
    *, show_sames: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The document `pulumi preview --json [--show-sames]` writes for this program against `deployed`."""
    steps, counts = [], {"same": 0, "update": 0, "create": 0, "delete": 0}
    for r in resources:
        old = deployed.get(r.urn)
        if old is None:
            steps.append({"op": "create", "urn": r.urn, "newState": _state(r, r.inputs)})
            counts["create"] += 1
            continue
        inputs = reset_ignored(r.inputs, old["inputs"], r.ignore_changes)
        new = {**_state(r, inputs), "outputs": old["outputs"], "id": old["id"]}
        changed = sorted(k for k in set(inputs) | set(old["inputs"]) if inputs.get(k) != old["inputs"].get(k))
        op = "update" if changed else "same"
        counts[op] += 1
        if op == "same" and not show_sames:
            continue
        steps.append({"op": op, "urn": r.urn, "oldState": old, "newState": new, "diffReasons": changed})
    names = {r.urn for r in resources}
    for urn, old in deployed.items():
        if urn not in names:
            steps.append({"op": "delete", "urn": urn, "oldState": old})
            counts["delete"] += 1
    return {"config": config, "steps": steps, "changeSummary": {k: v for k, v in counts.items() if v}}
