"""The components' contracts: typed Args catch misspelt keys, names are deterministic, the program
rejects configs the clouds would reject, `infra/__main__.py` reads the stack config and exports."""

from __future__ import annotations

import ast
import json
import runpy
import sys
import types
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pytest

from infra import naming
from infra.aws.budget import notifications
from infra.aws.iam import node_policy
from infra.azure.identity import prefix_condition
from infra.config import StackConfig
from infra.errors import ConfigError
from infra.mock_runtime import MockImage, run_program
from infra.program import declare, fleet_price
from infra.stack_file import read_stack_file
from tests.conftest import REPO, STACKS

COMPONENT_DIRS = [REPO / "infra" / cloud for cloud in ("aws", "gcp", "azure")]
# Inputs whose type *is* a map of free-form keys: a dict literal is right there.
MAP_INPUTS = {
    "tags",
    "labels",
    "user_labels",
    "metadata",
    "table_configurations",
    "notifications",  # azure consumption budget: name -> NotificationArgs
}


def _dev() -> StackConfig:
    return read_stack_file(STACKS / "Pulumi.dev.yaml").config


def _with_fleet(config: StackConfig, **changes) -> StackConfig:
    sections = config.to_sections()
    sections["fleets"] = [{**sections["fleets"][0], **changes}]
    return StackConfig.from_sections(sections)


# ------------------------------------------------------------------------ misspelt nested keys fail


def test_typed_args_reject_a_misspelt_key():
    with pytest.raises(TypeError, match="http_token"):
        aws.ec2.LaunchTemplateMetadataOptionsArgs(http_token="required")


MISSPELLINGS = [
    # (module, stack file, correct text, misspelt text)
    ("infra.aws.fleet", "Pulumi.dev.yaml", 'http_tokens="required"', 'http_token="required"'),
    (
        "infra.aws.bucket",
        "Pulumi.dev.yaml",
        "noncurrent_days=noncurrent_days",
        "noncurent_days=noncurrent_days",
    ),
    ("infra.gcp.fleet", "Pulumi.gcp-dev.yaml", 'provisioning_model="SPOT"', 'provisioning_modle="SPOT"'),
    ("infra.azure.fleet", "Pulumi.azure-dev.yaml", "eviction_policy=compute.", "evicton_policy=compute."),
]


@pytest.fixture
def infra_modules_restored():
    """Modules imported while a broken component was installed must not outlive the test."""
    before = {k: v for k, v in sys.modules.items() if k.startswith("infra.")}
    yield
    for name in [k for k in sys.modules if k.startswith("infra.")]:
        if name not in before:
            del sys.modules[name]
    sys.modules.update(before)


@pytest.mark.parametrize("module, stack_file, right, wrong", MISSPELLINGS)
def test_a_misspelt_nested_key_in_a_component_fails_the_program(
    monkeypatch, infra_modules_restored, module, stack_file, right, wrong
):
    """Misspell one nested key in a component's source: running the program for a stack must fail,
    naming the key. Dict inputs would pass it silently to `pulumi up`; typed Args classes do not."""
    path = REPO / Path(*module.split(".")).with_suffix(".py")
    source = path.read_text()
    assert source.count(right) == 1, f"{right} not found once in {path}"
    broken = types.ModuleType(module)
    broken.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module, broken)
    exec(compile(source.replace(right, wrong), str(path), "exec"), broken.__dict__)
    sf = read_stack_file(STACKS / stack_file)
    with pytest.raises(TypeError, match=wrong.split("=")[0]):
        run_program(sf.env, sf.config)
    monkeypatch.undo()
    assert run_program(sf.env, sf.config).cloud_resources  # and the real source runs


def _provider_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            root = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ("aws", "gcp", "azure_native"):
                yield node


@pytest.mark.parametrize("folder", COMPONENT_DIRS, ids=lambda p: p.name)
def test_components_pass_nested_inputs_as_typed_args_not_dicts(folder):
    """No provider call takes a dict literal (or a list of them) for a structured input."""
    calls = 0
    for path in sorted(folder.glob("*.py")):
        for call in _provider_calls(ast.parse(path.read_text())):
            calls += 1
            for kw in call.keywords:
                values = kw.value.elts if isinstance(kw.value, ast.List) else [kw.value]
                dicts = [v for v in values if isinstance(v, ast.Dict | ast.DictComp)]
                assert not dicts or kw.arg in MAP_INPUTS, (
                    f"{path.name}:{call.lineno}: {kw.arg}= is a dict literal"
                )
    assert calls > 10


@pytest.mark.parametrize("folder", COMPONENT_DIRS, ids=lambda p: p.name)
def test_one_component_per_file_with_typed_args_and_register_outputs(folder):
    files = [p for p in sorted(folder.glob("*.py")) if p.name != "__init__.py"]
    assert files
    for path in files:
        tree = ast.parse(path.read_text())
        components = [
            c
            for c in tree.body
            if isinstance(c, ast.ClassDef)
            and any(ast.unparse(b) == "pulumi.ComponentResource" for b in c.bases)
        ]
        assert len(components) == 1, path.name
        (component,) = components
        assert any(isinstance(c, ast.ClassDef) and c.name == f"{component.name}Args" for c in tree.body), (
            path.name
        )
        strings = {
            n.value for n in ast.walk(component) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert f"trainfleet:{folder.name}:{component.name}" in strings, path.name
        assert "self.register_outputs(" in ast.unparse(component), path.name


# ------------------------------------------------------------------------------------- naming


def test_names_are_deterministic_and_fit():
    config = _dev()
    fleet = config.fleets[0]
    assert naming.group_name("dev", fleet) == "tf-dev-dev" == naming.group_name("dev", fleet)
    assert naming.checkpoint_prefix("Prod.EU_1", config) == "prod-eu-1/llama-1b-dev/"
    long = naming.group_name("x" * 80, fleet)
    assert len(long) <= naming.GROUP_NAME_MAX and long != naming.group_name("x" * 81, fleet)
    account = naming.gcp_account_id("a-very-long-stack-name-indeed", fleet)
    assert 6 <= len(account) <= 30 and account[0].isalpha() and account[-1].isalnum()
    assert naming.billing_dataset_id("gcp-dev") == "trainfleet_billing_gcp_dev"
    assert naming.gcp_labels({"Team": "ML Platform"}) == {"team": "ml_platform"}


# ----------------------------------------------------------------------------- policy builders


def test_node_policy_grants_only_the_prefix_and_the_group():
    policy = node_policy(
        "arn:aws:s3:::b", "dev/job/", "arn:aws:autoscaling:r:1:autoScalingGroup:*:autoScalingGroupName/g"
    )
    resources = [s["Resource"] for s in policy["Statement"]]
    assert resources == ["arn:aws:s3:::b", "arn:aws:s3:::b/dev/job/*", "*", resources[3]]
    assert resources[3].endswith("autoScalingGroupName/g")
    assert policy["Statement"][2]["Action"] == "ec2:DescribeInstances"


def test_budget_notifications_actual_at_each_threshold_forecasted_at_the_top():
    assert notifications([80, 50, 100, 50], ["a@x.io"]) == [
        ("ACTUAL", 50),
        ("ACTUAL", 80),
        ("ACTUAL", 100),
        ("FORECASTED", 100),
    ]


BLOB = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"


@pytest.mark.parametrize(
    "action, suboperation, attributes, allowed",
    [
        # List Blobs carries the request's prefix and no blob path: allowed only under the job's prefix.
        ("read", "Blob.List", {"list_prefix": "dev/job/"}, True),
        ("read", "Blob.List", {"list_prefix": "dev/job/step-00000100/"}, True),
        ("read", "Blob.List", {"list_prefix": "prod/job/"}, False),
        ("read", "Blob.List", {}, False),  # the whole container
        # One-blob operations carry the path.
        ("read", None, {"path": "dev/job/LATEST"}, True),
        ("read", None, {"path": "dev/other/LATEST"}, False),
        ("write", None, {"path": "dev/job/step-1/a"}, True),
        ("write", None, {"path": "dev/jobs/a"}, False),
        ("delete", None, {"path": "prod/job/a"}, False),
        ("add/action", None, {"path": "x"}, False),
        ("move/action", None, {"path": "x"}, False),
    ],
)
def test_azure_prefix_condition_evaluated_like_azure(action, suboperation, attributes, allowed):
    """Worked from Microsoft's condition semantics (infra/rules/abac.py evaluates them): List Blobs has no path
    attribute, so a path-only condition denies every listing; the job's prefix must be matched by the request's
    prefix instead."""
    from infra.rules.abac import Request, allows, blob_attributes

    request = Request(f"{BLOB}/{action}", suboperation, blob_attributes(**attributes))
    assert allows(prefix_condition("dev/job/"), request) is allowed


def test_a_path_only_condition_denies_listing_as_issue_12_found():
    """The condition the program used to write: every read and write under the prefix, and no listing."""
    from infra.rules.abac import Request, allows, blob_attributes

    old = (
        f"((!(ActionMatches{{'{BLOB}/read'}}) AND !(ActionMatches{{'{BLOB}/write'}}) AND "
        f"!(ActionMatches{{'{BLOB}/delete'}}) AND !(ActionMatches{{'{BLOB}/add/action'}})) OR "
        f"(@Resource[{BLOB}:path] StringStartsWith 'dev/job/'))"
    )
    assert allows(old, Request(f"{BLOB}/read", None, blob_attributes(path="dev/job/a")))
    assert not allows(old, Request(f"{BLOB}/read", "Blob.List", blob_attributes(list_prefix="dev/job/")))


def test_more_than_four_thresholds_spill_into_a_second_aws_budget():
    sections = _dev().to_sections()
    sections["budget"] = {**sections["budget"], "alert_thresholds_percent": [25, 50, 75, 90, 100, 120]}
    run = run_program("dev", StackConfig.from_sections(sections))
    # The mock runtime records resources in completion order, which varies: compare by budget name.
    budgets = sorted(run.of_type("aws:budgets/budget:Budget"), key=lambda b: b.inputs["name"])
    assert [(b.inputs["name"], len(b.inputs["notifications"])) for b in budgets] == [
        ("trainfleet-dev", 5),
        ("trainfleet-dev-2", 2),
    ]
    assert run.exports["budgets"]["aws"] == ["trainfleet-dev", "trainfleet-dev-2"]


# ---------------------------------------------------------------------- config the program rejects


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"cloud": "gcp", "region": "us-central1", "zones": [], "instance_type": "a2-highgpu-1g",
          "fallback_instance_types": [], "purchase": "mixed", "on_demand_base": 1, "nodes": 2}, "cannot mix Spot"),
        ({"cloud": "azure", "region": "eastus", "zones": [], "instance_type": "Standard_NC24ads_A100_v4",
          "fallback_instance_types": [], "purchase": "mixed", "on_demand_base": 1, "nodes": 2}, "cannot mix Spot"),
    ],
)  # fmt: skip
def test_configs_a_cloud_cannot_build_fail_with_one_clear_line(changes, needle):
    config = _with_fleet(_dev(), **changes)
    with pytest.raises(ConfigError, match=needle) as err:
        run_program("dev", config)
    assert "\n" not in str(err.value)


def test_bucket_name_with_several_fleets_is_rejected():
    sections = _dev().to_sections()
    sections["checkpoint"] = {**sections["checkpoint"], "bucket_name": "my-ckpts"}
    sections["fleets"] = [sections["fleets"][0], {**sections["fleets"][0], "name": "second"}]
    with pytest.raises(ConfigError, match="bucket_name"):
        run_program("dev", StackConfig.from_sections(sections))


# ----------------------------------------------------------------------------- overrides and fleets


def test_gaudi_image_override_pins_the_ami():
    # ami-dca37ea5: a real 2017 Ubuntu Deep Learning AMI (tests/fixtures/aws_amis/images.json, root /dev/sda1).
    table = json.loads((REPO / "tests" / "fixtures" / "aws_amis" / "images.json").read_text())
    images = tuple(MockImage.from_api(record) for record in table["images"])
    sf = read_stack_file(STACKS / "Pulumi.gaudi.yaml")
    config = _with_fleet(sf.config, image="ami-dca37ea5")
    run = run_program("gaudi", config, images=images)
    (ami,) = [i for i in run.invocations if i.token == "aws:ec2/getAmi:getAmi"]
    assert ami.args["filters"] == [{"name": "image-id", "values": ["ami-dca37ea5"]}]
    assert run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["imageId"] == "ami-dca37ea5"


def test_existing_vpc_and_subnets_are_used_not_created():
    config = _with_fleet(_dev(), network={"name": "vpc-0abc", "subnets": ["subnet-1", "subnet-2"]})
    run = run_program("dev", config)
    assert not run.of_type("aws:ec2/vpc:Vpc") and not run.of_type("aws:ec2/subnet:Subnet")
    asg = run.one("aws:autoscaling/group:Group")
    assert asg.inputs["vpcZoneIdentifiers"] == ["subnet-1", "subnet-2"]
    assert run.one("aws:ec2/securityGroup:SecurityGroup").inputs["vpcId"] == "vpc-0abc"


def test_existing_vpc_without_subnets_looks_them_up_in_the_fleet_zones():
    config = _with_fleet(_dev(), network={"name": "vpc-0abc"})
    run = run_program("dev", config)
    (lookup,) = [i for i in run.invocations if i.token == "aws:ec2/getSubnets:getSubnets"]
    filters = {f["name"]: f["values"] for f in lookup.args["filters"]}
    assert filters == {"vpc-id": ["vpc-0abc"], "availability-zone-id": ["use1-az1", "use1-az2", "use1-az4"]}
    assert len(run.one("aws:autoscaling/group:Group").inputs["vpcZoneIdentifiers"]) == 3


def test_a_stack_can_hold_fleets_on_several_clouds():
    dev = _dev().to_sections()
    gcp = read_stack_file(STACKS / "Pulumi.gcp-dev.yaml").config.to_sections()["fleets"][0]
    dev["fleets"].append(gcp)
    dev["billing_export"] = {"enabled": True}
    run = run_program("multi", StackConfig.from_sections(dev))
    assert set(run.exports["fleets"]) == {"dev", "gdev"}
    assert set(run.exports["budgets"]) == {"aws", "gcp"} == set(run.exports["billing_exports"])
    assert run.one("aws:autoscaling/group:Group") and run.one(
        "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
    )


# Hourly fleet prices worked by hand from infra/catalog/data/offers.csv (columns on_demand_usd_per_hour,
# spot_usd_per_hour), for the rows named in each case: on-demand nodes at the on-demand price, spot nodes at
# the cheapest spot price among the fleet's zones.
FLEET_PRICES = [
    # prod: p4de.24xlarge, us-east-1, zone use1-az6 (spot 8.650500), on-demand 27.44705; 1 on-demand + 3 spot
    # nodes: 27.44705 + 3 * 8.6505 = 53.39855.
    ("Pulumi.prod.yaml", {}, 27.44705, 8.6505, "use1-az6", 53.39855),
    # prod in use1-az4 (spot 9.973400): 27.44705 + 3 * 9.9734 = 57.36725.
    ("Pulumi.prod.yaml", {"zones": ["use1-az4"]}, 27.44705, 9.9734, "use1-az4", 57.36725),
    # dev: g5.12xlarge, us-east-1, zones use1-az1 (2.780400), use1-az2 (2.079600), use1-az4 (2.081300),
    # on-demand 5.672; one spot node.
    ("Pulumi.dev.yaml", {}, 5.672, 2.0796, "use1-az2", 2.0796),
    # dev in use1-az1 (2.780400) and use1-az5 (2.182400) only: not use1-az2, the cheapest in the region.
    ("Pulumi.dev.yaml", {"zones": ["use1-az1", "use1-az5"]}, 5.672, 2.1824, "use1-az5", 2.1824),
    # dev with no zones: every us-east-1 zone of the catalog (az1, az2, az4, az5 2.182400, az6 2.238700).
    ("Pulumi.dev.yaml", {"zones": []}, 5.672, 2.0796, "use1-az2", 2.0796),
    # dev, 2 spot nodes, no zones: one cluster placement group, so one zone: the cheapest, use1-az2: 2 * 2.0796.
    ("Pulumi.dev.yaml", {"zones": [], "nodes": 2}, 5.672, 2.0796, "use1-az2", 4.1592),
    # dev all on-demand, 2 nodes: 2 * 5.672.
    ("Pulumi.dev.yaml", {"purchase": "on-demand", "nodes": 2}, 5.672, 2.0796, "use1-az2", 11.344),
    # gaudi: dl1.24xlarge, us-west-2, usw2-az1 (spot 4.167100, on-demand 13.10904); 2 spot nodes: 8.3342.
    ("Pulumi.gaudi.yaml", {}, 13.10904, 4.1671, "usw2-az1", 8.3342),
    # gcp-dev: a2-highgpu-1g, us-central1-a and -b (both spot 1.80385, on-demand 3.67339).
    ("Pulumi.gcp-dev.yaml", {}, 3.67339, 1.80385, None, 1.80385),  # a tie: either zone
    # azure-dev: Standard_NC24ads_A100_v4, eastus, one regional row (spot 0.444433, on-demand 3.673).
    ("Pulumi.azure-dev.yaml", {}, 3.673, 0.444433, None, 0.444433),
]


@pytest.mark.parametrize("stack_file, changes, on_demand, spot, spot_zone, total", FLEET_PRICES)
def test_fleet_price_from_the_catalog_rows(stack_file, changes, on_demand, spot, spot_zone, total):
    sf = read_stack_file(STACKS / stack_file)
    fleet = _with_fleet(sf.config, **changes).fleets[0] if changes else sf.config.fleets[0]
    price = fleet_price(fleet)
    assert price["on_demand_usd_per_node_hour"] == pytest.approx(on_demand, abs=1e-9)
    assert price["spot_usd_per_node_hour"] == pytest.approx(spot, abs=1e-9)
    if spot_zone is not None:
        assert price["spot_zone"] == spot_zone
    assert price["usd_per_hour"] == pytest.approx(total, abs=1e-4)  # rounded to 4 places
    assert price["source"] == f"skypilot-{fleet.cloud}"  # the rows' source column


def test_the_program_exports_the_hand_worked_fleet_price():
    sf = read_stack_file(STACKS / "Pulumi.prod.yaml")
    run = run_program(sf.env, sf.config)
    assert run.exports["fleets"]["main"]["hourly_price"]["usd_per_hour"] == pytest.approx(53.39855, abs=1e-4)
    assert run.exports["hourly_price_usd"] == pytest.approx(53.39855, abs=1e-4)


# ------------------------------------------------------------------------------------ __main__


def test_main_reads_every_section_from_pulumi_config_and_exports_what_declare_returns(monkeypatch):
    sf = read_stack_file(STACKS / "Pulumi.dev.yaml")
    exported: dict = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))

    def program(stack: str, config: StackConfig) -> dict:
        pulumi.runtime.set_all_config(
            {f"trainfleet:{k}": json.dumps(v) for k, v in config.to_sections().items()}
        )
        runpy.run_path(str(REPO / "infra" / "__main__.py"), run_name="__main__")
        return exported

    try:
        run = run_program("dev", sf.config, declare=program)
    finally:
        pulumi.runtime.set_all_config({})
    direct = run_program("dev", sf.config, declare=declare)
    assert run.exports == direct.exports
    assert len(run.cloud_resources) == len(direct.cloud_resources)


def test_main_turns_a_bad_config_into_one_pulumi_error(monkeypatch):
    def program(stack: str, config: StackConfig) -> dict:
        pulumi.runtime.set_all_config(
            {"trainfleet:job": json.dumps({"params": "7B"})}
        )  # no tokens, no fleets
        runpy.run_path(str(REPO / "infra" / "__main__.py"), run_name="__main__")
        return {}

    try:
        with pytest.raises(pulumi.RunError, match="trainfleet:job.tokens is required"):
            run_program("dev", _dev(), declare=program)
    finally:
        pulumi.runtime.set_all_config({})


def test_azure_existing_subnet_is_admitted_by_its_own_prefix():
    sf = read_stack_file(STACKS / "Pulumi.azure-dev.yaml")
    subnet = (
        "/subscriptions/s/resourceGroups/net-rg/providers/Microsoft.Network/virtualNetworks/hub/subnets/train"
    )
    run = run_program("azure-dev", _with_fleet(sf.config, network={"name": "hub", "subnets": [subnet]}))
    assert not run.of_type("azure-native:network:VirtualNetwork")
    (lookup,) = [i for i in run.invocations if i.token == "azure-native:network:getSubnet"]
    assert (
        lookup.args["resourceGroupName"],
        lookup.args["virtualNetworkName"],
        lookup.args["subnetName"],
    ) == (
        "net-rg",
        "hub",
        "train",
    )
    rules = run.one("azure-native:network:NetworkSecurityGroup").inputs["securityRules"]
    assert rules[0]["sourceAddressPrefix"] == "10.20.1.0/24"  # what the (mocked) lookup answered
    nic = run.one("azure-native:compute:VirtualMachineScaleSet").inputs["virtualMachineProfile"][
        "networkProfile"
    ]
    assert nic["networkInterfaceConfigurations"][0]["ipConfigurations"][0]["subnet"]["id"] == subnet


@pytest.mark.parametrize(
    "stack_file, changes, needle",
    [
        ("Pulumi.gcp-dev.yaml", {"max_price": 5.0}, "no maximum price"),
        ("Pulumi.azure-dev.yaml", {"image": "not-an-urn"}, "publisher:offer:sku:version"),
        ("Pulumi.azure-dev.yaml", {"network": {"name": "hub"}}, "network.subnets"),
    ],
)
def test_more_cloud_specific_config_errors(stack_file, changes, needle):
    sf = read_stack_file(STACKS / stack_file)
    with pytest.raises(ConfigError, match=needle):
        run_program(sf.env, _with_fleet(sf.config, **changes))
