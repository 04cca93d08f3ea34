"""Every declared resource's inputs, for every stack, checked against what the providers define (issue 12).

Three independent checks, each with planted failures that stay here as negative tests:

1. pyright (standard mode, pyrightconfig.json at the repo root) type-checks infra/ against the installed
   pulumi_aws / pulumi_gcp / pulumi_azure_native SDKs: a misspelt keyword argument, a dict literal with a
   key the SDK's `*ArgsDict` TypedDict lacks, a property on the wrong resource, a value of the wrong kind.
   `Union[str, SomeEnum]` inputs accept any string there, hence check 2.
2. The program is run under the mock runtime for every stacks/Pulumi.*.yaml and each captured resource's
   inputs (engine names, plain values) are walked against the SDK's own definitions of its type token
   (tests/provider_sdk.py): every property name exists in the resource's Args class or the nested *Args
   class (their `@pulumi.getter(name=...)` metadata), required inputs are present, values are of a kind the
   SDK allows, and a string given where the SDK types the property `Union[str, SomeEnum]` is a member of
   that enum. JSON documents given as strings where the SDK also types the document (IAM policies) are
   parsed and walked too.
3. pulumi-gcp's schema.json: not obtainable on this machine. The pulumi_gcp wheel ships no schema, the
   repository snapshot lists provider/cmd/pulumi-resource-gcp/schema.json without its content (too large to
   keep), and the only stored copy is v2.11.0 (2020), not the installed 9.x. The checker for it
   (tests/provider_sdk.py `check_against_schema`, property names, types, required inputs, enums, patterns,
   bounds) is tested below on a small schema in pulumi's format, and `python -m tests.provider_sdk vendor gcp
   schema.json ...` vendors the part for the program's types (tests/fixtures/provider_schemas/gcp/README.md)
   once someone with network access takes the file at the installed SDK's tag.
"""

from __future__ import annotations

import collections
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.mock_runtime import DeclaredResource, ProgramRun, run_program
from infra.stack_file import list_stack_files, read_stack_file
from tests import provider_sdk
from tests.conftest import REPO, STACKS
from tests.needs import need
from tests.session_results import once_per_session

STACK_FILES = {p.name.removeprefix("Pulumi.").removesuffix(".yaml"): p for p in list_stack_files(STACKS)}
PYRIGHT_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    """One mock-runtime run of the program per stack file (a few seconds for all of them)."""
    out = {}
    for env, path in STACK_FILES.items():
        stack = read_stack_file(path)
        out[env] = run_program(stack.env, stack.config, enforce_rules=False)
    return out


def _resource(runs: dict[str, ProgramRun], stack: str, token: str) -> DeclaredResource:
    found = runs[stack].of_type(token)
    assert found, f"stack {stack} declares no {token}; the negative test needs one"
    return found[0]


def _shown(violations: list[provider_sdk.Violation], limit: int = 60) -> str:
    lines = [f"  {v.kind}: {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)


def _kinds_and_paths(violations: list[provider_sdk.Violation]) -> set[tuple[str, str]]:
    return {(v.kind, v.path) for v in violations}


# --- 1. pyright against the installed SDKs -------------------------------------------------------------------


def _pyright() -> Path:
    exe = Path(sys.executable).parent / "pyright"
    need(exe.is_file(), f"pyright ({exe})", "pip install -e '.[test]' (the pyright PyPI package)")
    return exe


PLANTED = """\
import pulumi_aws as aws
import pulumi_azure_native as azure_native
import pulumi_gcp as gcp

aws.ec2.LaunchTemplate("lt", instance_typ="p5.48xlarge")  # line 5: misspelt keyword
aws.ec2.LaunchTemplate("lt", metadata_options={"http_tokenz": "required"})  # line 6: TypedDict key
azure_native.compute.VirtualMachineScaleSet("vmss", resource_group_name="rg", eviction_policy="Delete")  # line 7
gcp.storage.Bucket("b", location="US", force_destroy="yes")  # line 8: wrong kind of value
azure_native.compute.VirtualMachineScaleSet("vmss", resource_group_name="rg", orchestration_mode="Unifrom")  # 9
"""


@pytest.fixture(scope="session")
def pyright_report(tmp_path_factory) -> dict:
    """One pyright run per test session (its SDK parsing dominates: ~20 s of CPU, so not once per worker) over
    what pyrightconfig.json includes plus a planted file beside it, with the repo's settings (files named on the
    command line replace `include` only)."""
    report = once_per_session(tmp_path_factory, "pyright-report", _pyright_run)
    return {**report, "_planted": Path(report["_planted"])}


def _pyright_run(folder: Path) -> dict:
    config = json.loads((REPO / "pyrightconfig.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    planted = (folder / "plant.py").resolve()
    planted.write_text(PLANTED)
    started = time.monotonic()
    proc = subprocess.run(
        [str(_pyright()), "--outputjson", "--project", str(REPO / "pyrightconfig.json")]
        + [str(REPO / path) for path in config["include"]]
        + [str(planted)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=PYRIGHT_TIMEOUT_S,
    )
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(
            f"pyright gave no JSON report (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}",
            pytrace=False,
        )
    report["_wall_s"] = round(time.monotonic() - started, 1)
    report["_stderr"] = proc.stderr
    report["_planted"] = str(planted)
    return report


def _errors(report: dict) -> list[dict]:
    return [d for d in report.get("generalDiagnostics", []) if d.get("severity") == "error"]


def _format(diagnostic: dict, root: Path) -> str:
    file = Path(diagnostic.get("file", "?"))
    try:
        file = file.relative_to(root)
    except ValueError:
        pass
    line = diagnostic.get("range", {}).get("start", {}).get("line", -1) + 1
    message = diagnostic.get("message", "").splitlines()[0]
    return f"{file}:{line}: {message} ({diagnostic.get('rule', '-')})"


def test_pyright_config_is_the_one_documented():
    config = json.loads((REPO / "pyrightconfig.json").read_text())
    assert config["include"] == ["infra"]
    assert config["pythonVersion"] == "3.11"
    assert (config["venvPath"], config["venv"]) == (".", ".venv")
    # standard: basic's checks plus incompatible overrides, overlapping overloads and function-member access
    # (all off in basic) as errors; strict adds only
    # "unknown type" noise from the SDKs' untyped corners, nothing about the providers' definitions.
    assert config["typeCheckingMode"] == "standard"


def test_pyright_finds_no_errors_in_infra(pyright_report: dict):
    planted = pyright_report["_planted"]
    errors = [d for d in _errors(pyright_report) if Path(d.get("file", "")).resolve() != planted]
    summary = pyright_report.get("summary", {})
    infra_files = [p for p in (REPO / "infra").rglob("*.py") if "__pycache__" not in p.parts]
    assert summary.get("filesAnalyzed", 0) > len(infra_files), (summary, pyright_report["_stderr"][-2000:])
    assert not errors, (
        f"pyright: {len(errors)} errors in infra/ ({pyright_report['_wall_s']} s):\n"
        + "\n".join(_format(d, REPO) for d in errors)
    )


def test_pyright_catches_planted_provider_mistakes(pyright_report: dict):
    """The same run, on the planted file: each mistake on lines 5-8 is an error; line 9 (a string that is no
    member of a Union[str, Enum]) is not, which is why the enum check below exists."""
    planted = pyright_report["_planted"]
    found = [d for d in _errors(pyright_report) if Path(d.get("file", "")).resolve() == planted]
    lines = sorted({d["range"]["start"]["line"] + 1 for d in found})
    assert lines == [5, 6, 7, 8], "\n".join(_format(d, planted.parent) for d in found)


# --- 2. captured inputs against the SDKs' Args classes and enums -----------------------------------------------


@pytest.mark.parametrize("stack", sorted(STACK_FILES))
def test_declared_inputs_match_the_sdk_definitions(runs: dict[str, ProgramRun], stack: str):
    violations = []
    stats: collections.Counter[str] = collections.Counter()
    for resource in runs[stack].cloud_resources:
        for v in provider_sdk.check_resource(resource.type, resource.inputs, stats):
            violations.append(
                provider_sdk.Violation(v.kind, f"{v.token} {resource.name!r}", v.path, v.message)
            )
    assert not violations, f"stack {stack}: {len(violations)} inputs the providers do not define:\n" + _shown(
        violations
    )
    assert stats["property"] > 0, "the check looked at no property"


def test_every_declared_type_resolves_to_an_sdk_class(runs: dict[str, ProgramRun]):
    tokens = {r.type for run in runs.values() for r in run.cloud_resources}
    assert len(tokens) > 20
    for token in sorted(tokens):
        cls = provider_sdk.resource_class(token)
        args = provider_sdk.args_class(token)
        assert args.__module__ == cls.__module__, token


def test_enum_check_sees_the_enum_typed_inputs(runs: dict[str, ProgramRun]):
    """Guards against a check that silently looks at nothing: the enum-typed inputs the program sets on its
    Azure fleet, storage and network are among those checked."""
    stats: collections.Counter[str] = collections.Counter()
    for run in runs.values():
        for resource in run.cloud_resources:
            provider_sdk.check_resource(resource.type, resource.inputs, stats)
    checked = {key.removeprefix("enum ") for key in stats if key.startswith("enum ")}
    for path in (
        "virtualMachineProfile.priority",
        "virtualMachineProfile.evictionPolicy",
        "orchestrationMode",
        "virtualMachineProfile.storageProfile.osDisk.managedDisk.storageAccountType",
        "kind",
        "sku.name",
    ):
        assert path in checked, (path, sorted(checked))
    assert stats["json-document"] > 0  # IAM policy documents were parsed and walked


def test_the_sdk_lookup_uses_the_engine_names():
    """camelCase engine names come from the SDK's getters, including ones no simple rule would produce."""
    vmss = provider_sdk.args_class("azure-native:compute:VirtualMachineScaleSet")
    names = provider_sdk.engine_names(vmss)
    assert names["resource_group_name"] == "resourceGroupName"
    assert names["do_not_run_extensions_on_overprovisioned_vms"] == "doNotRunExtensionsOnOverprovisionedVMs"
    assert "resourceGroupName" in provider_sdk.required_properties(vmss)
    versioning = provider_sdk.args_class("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.__name__ == "BucketVersioningInitArgs"  # not the nested s3.BucketVersioningArgs


# Planted failures, each on a deep copy of a captured resource.


def test_planted_enum_value_fails(runs: dict[str, ProgramRun]):
    vmss = _resource(runs, "azure-dev", "azure-native:compute:VirtualMachineScaleSet")
    inputs = copy.deepcopy(vmss.inputs)
    inputs["virtualMachineProfile"]["evictionPolicy"] = "Evict"
    inputs["orchestrationMode"] = "Unifrom"
    violations = provider_sdk.check_resource(vmss.type, inputs)
    assert _kinds_and_paths(violations) == {
        ("enum", "virtualMachineProfile.evictionPolicy"),
        ("enum", "orchestrationMode"),
    }, _shown(violations)
    evict = next(v for v in violations if v.path == "virtualMachineProfile.evictionPolicy")
    assert "'Evict'" in evict.message and "'Deallocate', 'Delete'" in evict.message
    assert "VirtualMachineEvictionPolicyTypes" in evict.message
    assert provider_sdk.check_resource(vmss.type, vmss.inputs) == []  # the original is untouched


def test_planted_enum_values_in_nested_objects_and_lists_fail(runs: dict[str, ProgramRun]):
    account = _resource(runs, "azure-dev", "azure-native:storage:StorageAccount")
    inputs = copy.deepcopy(account.inputs)
    inputs["sku"]["name"] = "Premium_GRS"
    inputs["kind"] = "StorageV3"
    violations = provider_sdk.check_resource(account.type, inputs)
    assert _kinds_and_paths(violations) == {("enum", "sku.name"), ("enum", "kind")}, _shown(violations)

    vmss = _resource(runs, "azure-dev", "azure-native:compute:VirtualMachineScaleSet")
    inputs = copy.deepcopy(vmss.inputs)
    nic = inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
    nic["deleteOption"] = "Remove"
    inputs["virtualMachineProfile"]["storageProfile"]["osDisk"]["managedDisk"]["storageAccountType"] = (
        "Premium_SSD"
    )
    violations = provider_sdk.check_resource(vmss.type, inputs)
    assert _kinds_and_paths(violations) == {
        ("enum", "virtualMachineProfile.networkProfile.networkInterfaceConfigurations[0].deleteOption"),
        ("enum", "virtualMachineProfile.storageProfile.osDisk.managedDisk.storageAccountType"),
    }, _shown(violations)


def test_planted_unknown_property_fails(runs: dict[str, ProgramRun]):
    template = _resource(runs, "dev", "aws:ec2/launchTemplate:LaunchTemplate")
    inputs = copy.deepcopy(template.inputs)
    inputs["fooBar"] = 1
    inputs["metadataOptions"]["httpTokenz"] = inputs["metadataOptions"].pop("httpTokens")
    violations = provider_sdk.check_resource(template.type, inputs)
    assert _kinds_and_paths(violations) == {
        ("unknown-property", "fooBar"),
        ("unknown-property", "metadataOptions.httpTokenz"),
    }, _shown(violations)
    typo = next(v for v in violations if v.path.endswith("httpTokenz"))
    assert "did you mean 'httpTokens'" in typo.message


def test_planted_missing_required_input_fails(runs: dict[str, ProgramRun]):
    vmss = _resource(runs, "azure-dev", "azure-native:compute:VirtualMachineScaleSet")
    inputs = copy.deepcopy(vmss.inputs)
    del inputs["resourceGroupName"]
    violations = provider_sdk.check_resource(vmss.type, inputs)
    assert _kinds_and_paths(violations) == {("missing-required", "resourceGroupName")}, _shown(violations)

    template = _resource(runs, "gcp-dev", "gcp:compute/instanceTemplate:InstanceTemplate")
    inputs = copy.deepcopy(template.inputs)
    del inputs["machineType"]
    del inputs["disks"]
    violations = provider_sdk.check_resource(template.type, inputs)
    assert _kinds_and_paths(violations) == {
        ("missing-required", "machineType"),
        ("missing-required", "disks"),
    }, _shown(violations)


def test_planted_wrong_kind_of_value_fails(runs: dict[str, ProgramRun]):
    vmss = _resource(runs, "azure-dev", "azure-native:compute:VirtualMachineScaleSet")
    inputs = copy.deepcopy(vmss.inputs)
    inputs["sku"]["capacity"] = "one"
    inputs["singlePlacementGroup"] = "yes"
    inputs["zones"] = "1"
    violations = provider_sdk.check_resource(vmss.type, inputs)
    assert _kinds_and_paths(violations) == {
        ("type", "sku.capacity"),
        ("type", "singlePlacementGroup"),
        ("type", "zones"),
    }, _shown(violations)


def test_planted_policy_document_mistake_fails(runs: dict[str, ProgramRun]):
    role = _resource(runs, "dev", "aws:iam/role:Role")
    inputs = copy.deepcopy(role.inputs)
    document = json.loads(inputs["assumeRolePolicy"])
    document["Statement"][0]["Effect"] = "Permit"
    inputs["assumeRolePolicy"] = json.dumps(document)
    violations = provider_sdk.check_resource(role.type, inputs)
    assert _kinds_and_paths(violations) == {("enum", "assumeRolePolicy.Statement[0].Effect")}, _shown(
        violations
    )


def test_planted_unknown_type_token_fails():
    violations = provider_sdk.check_resource("azure-native:compute:VirtualMachineScaleSett", {})
    assert [v.kind for v in violations] == ["unresolved"]


# --- 3. pulumi-gcp's own schema.json (the vendored part) -------------------------------------------------------


# The schema checker itself, on a small schema in pulumi's format: runs whether or not the fixture is there.

MINI_SCHEMA = provider_sdk.VendoredSchema(
    path=Path("mini.json"),
    provenance={"source": "inline", "version": "0", "path": "-"},
    resources={
        "gcp:test/thing:Thing": {
            "inputProperties": {
                "name": {"type": "string", "pattern": "^[a-z][-a-z0-9]*$"},
                "size": {"type": "integer"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "disks": {"type": "array", "items": {"$ref": "#/types/gcp:test/ThingDisk:ThingDisk"}},
                "tier": {"$ref": "#/types/gcp:test/Tier:Tier"},
                "any": {"$ref": "pulumi.json#/Any"},
            },
            "requiredInputs": ["size"],
        }
    },
    types={
        "gcp:test/ThingDisk:ThingDisk": {
            "type": "object",
            "properties": {"sizeGb": {"type": "integer"}, "boot": {"type": "boolean"}},
            "required": ["sizeGb"],
        },
        "gcp:test/Tier:Tier": {"type": "string", "enum": [{"value": "STANDARD"}, {"value": "PREMIUM"}]},
    },
)


def test_schema_checker_passes_a_valid_resource():
    inputs = {
        "name": "a-1",
        "size": 3.0,
        "labels": {"a": "b"},
        "disks": [{"sizeGb": 10.0}],
        "tier": "STANDARD",
    }
    assert provider_sdk.check_against_schema(MINI_SCHEMA, "gcp:test/thing:Thing", inputs | {"any": [1]}) == []


def test_schema_checker_catches_each_kind_of_mistake():
    inputs = {
        "name": "A_1",  # pattern
        "labels": {"a": 1},  # map value type
        "disks": [{"sizeGB": 10, "boot": "yes"}],  # unknown + missing required + type, nested in a list
        "tier": "GOLD",  # enum
        "colour": "red",  # unknown
    }  # size: missing required
    violations = provider_sdk.check_against_schema(MINI_SCHEMA, "gcp:test/thing:Thing", inputs)
    assert _kinds_and_paths(violations) == {
        ("pattern", "name"),
        ("type", "labels['a']"),
        ("unknown-property", "disks[0].sizeGB"),
        ("missing-required", "disks[0].sizeGb"),
        ("type", "disks[0].boot"),
        ("enum", "tier"),
        ("unknown-property", "colour"),
        ("missing-required", "size"),
    }, _shown(violations)
    assert provider_sdk.check_against_schema(MINI_SCHEMA, "gcp:test/other:Other", {})[0].kind == "unresolved"


def test_schema_subset_keeps_the_referenced_types_only():
    full = {
        "resources": dict(MINI_SCHEMA.resources) | {"gcp:test/unused:Unused": {"inputProperties": {}}},
        "types": dict(MINI_SCHEMA.types) | {"gcp:test/Unused:Unused": {"type": "object"}},
    }
    resources, types = provider_sdk.schema_subset(full, ["gcp:test/thing:Thing"])
    assert list(resources) == ["gcp:test/thing:Thing"]
    assert set(types) == {"gcp:test/ThingDisk:ThingDisk", "gcp:test/Tier:Tier"}
