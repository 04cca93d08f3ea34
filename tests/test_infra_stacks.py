"""Every stacks/Pulumi.*.yaml through the real Pulumi program under Pulumi's mock runtime.

One program run per stack (module-scoped), then the properties a reviewer checks in an infra diff:
spot settings match the config, IMDSv2, private encrypted buckets, no ingress from the internet, roles
scoped to their bucket and group, budgets with notifications, billing exports, no secrets in user-data.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re

import pytest

from infra import naming
from infra.config import TAG_JOB, TAG_STACK, StackConfig
from infra.mock_runtime import DEFAULT_IMAGES, MOCK_AWS_ACCOUNT, MockImage, ProgramRun, run_program
from infra.program import fleet_zones, offers_efa
from infra.stack_file import list_stack_files, read_stack_file
from tests.conftest import REPO, STACKS
from tests.test_published_images import USER_GAUDI_AMI

STACK_FILES = {p.name.removeprefix("Pulumi.").removesuffix(".yaml"): p for p in list_stack_files(STACKS)}
REQUIRED_STACKS = {"dev", "prod", "gcp-dev", "azure-dev", "gaudi"}
OPEN = {"0.0.0.0/0", "::/0", "*", "Internet", "any"}

# Secret *values* that must never appear in what a node receives as user-data. (The agent's code names
# environment variables such as AWS_SECRET_ACCESS_KEY; a name is not a value, a value is what leaks.)
SECRET_PATTERNS = {
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "AWS secret key value": re.compile(r"(?i)aws_secret_access_key\s*[=:]\s*['\"]?[A-Za-z0-9/+]{40}"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "GCP service-account key": re.compile(r'"private_key"\s*:\s*"-----BEGIN'),
    "Azure storage key": re.compile(r"AccountKey=[A-Za-z0-9+/]{40,}"),
    "Azure SAS token": re.compile(r"[?&]sig=[A-Za-z0-9%+/]{20,}"),
    "Azure client secret value": re.compile(r"(?i)client_secret\s*[=:]\s*['\"]?[A-Za-z0-9~._-]{30,}"),
    "password value": re.compile(r"(?i)\bpassword\s*[:=]\s*['\"]?[^\s'\"$({]{6,}"),
    "bearer token value": re.compile(r"Bearer [A-Za-z0-9._-]{20,}"),
}


MUST_BE_TAGGED = {
    "aws:s3/bucket:Bucket": "tags",
    "aws:ec2/launchTemplate:LaunchTemplate": "tags",
    "aws:ec2/natGateway:NatGateway": "tags",
    "gcp:storage/bucket:Bucket": "labels",
    "gcp:compute/instanceTemplate:InstanceTemplate": "labels",
    "azure-native:compute:VirtualMachineScaleSet": "tags",
    "azure-native:storage:StorageAccount": "tags",
    "azure-native:network:NatGateway": "tags",
}


# Public AMIs with their real root device names (provenance inside); the mocked AMI lookups answer from it.
AMI_TABLE = json.loads((REPO / "tests" / "fixtures" / "aws_amis" / "images.json").read_text())
IMAGES = tuple(MockImage.from_api(record) for record in AMI_TABLE["images"])

# Worked by hand from tests/fixtures/aws_amis/images.json: the newest x86_64 image, owned by amazon, whose name
# matches the program's name filter. dev/prod: "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
# finds the 20261002 build, not the 20260918 one, the PyTorch DLAMIs (the Amazon Linux 2023 one is newer), the
# ARM64 line or the Ubuntu 22.04 one (their names differ); gaudi boots its user's own AMI, the newest of the
# account named trainfleet-gaudi-1.18.0-* in us-west-2 (the stack names none: tests/test_published_images.py).
EXPECTED_AMI = {
    "dev": ("ami-0dea1a0000000a004", "/dev/sda1"),
    "prod": ("ami-0dea1a0000000a004", "/dev/sda1"),
    "gaudi": (USER_GAUDI_AMI, "/dev/sda1"),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple]:
    out = {}
    for env, path in STACK_FILES.items():
        config = read_stack_file(path).config
        out[env] = (config, run_program(env, config, images=IMAGES))
    return out


def _with_fleet(config: StackConfig, **changes) -> StackConfig:
    sections = config.to_sections()
    sections["fleets"] = [{**sections["fleets"][0], **changes}]
    return StackConfig.from_sections(sections)


def _stacks_on(cloud: str) -> list[str]:
    return [
        env
        for env, p in STACK_FILES.items()
        if any(f.cloud == cloud for f in read_stack_file(p).config.fleets)
    ]


def _decode(value: str) -> str:
    raw = base64.b64decode(value, validate=True)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def _user_data_of(run: ProgramRun) -> list[tuple[str, str]]:
    """(cloud, decoded cloud-config) for every group the run declares, exactly as passed to the provider."""
    found = []
    # One per fleet: a fleet whose types differ in network cards has a template per card layout, all
    # carrying the same user-data.
    aws_texts = {_decode(lt.inputs["userData"]) for lt in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    found += [("aws", text) for text in sorted(aws_texts)]
    for tpl in run.of_type("gcp:compute/instanceTemplate:InstanceTemplate"):
        found.append(("gcp", tpl.inputs["metadata"]["user-data"]))
    for vmss in run.of_type("azure-native:compute:VirtualMachineScaleSet"):
        found.append(("azure", _decode(vmss.inputs["virtualMachineProfile"]["osProfile"]["customData"])))
    return found


def _fetch_constants(document: str) -> dict:
    """BUCKET and FILES of the trainfleet-fetch.py a cloud-config writes. The template writes each as one line of
    JSON (`tojson`), so they are read as JSON; not with ast.parse, which CPython 3.11 can fail at random after
    the mock runtime's threads ("AST constructor recursion depth mismatch", CPython gh-106905)."""
    import json
    import re

    import yaml

    files = yaml.safe_load(document)["write_files"]
    (entry,) = [e for e in files if e["path"].endswith("/trainfleet-fetch.py")]
    found = dict(re.findall(r"(?m)^(BUCKET|FILES) = (.+)$", entry["content"]))
    assert set(found) == {"BUCKET", "FILES"}, found
    return {name: json.loads(text) for name, text in found.items()}


def _asset_text(resource) -> str:
    """The text an object or blob uploads: its StringAsset (as the mock runtime records an asset)."""
    source = resource.inputs["source"]
    assert set(source) == {"4dabf18193072939515e22adb298388d", "text"}, source  # an asset, not a path or URI
    return source["text"]


def _by_bucket(run: ProgramRun, token: str, bucket_id: str) -> list:
    return [r for r in run.of_type(token) if r.inputs.get("bucket") == bucket_id]


# ------------------------------------------------------------------------------------------ every stack


def test_the_required_stacks_exist():
    assert REQUIRED_STACKS <= set(STACK_FILES), sorted(STACK_FILES)


@pytest.mark.parametrize("env", sorted(STACK_FILES))
def test_program_runs_and_every_resource_belongs_to_a_component(runs, env):
    config, run = runs[env]
    assert len(run.cloud_resources) >= 10
    components = [r for r in run.resources if r.type.startswith("trainfleet:")]
    for c in components:
        assert re.fullmatch(r"trainfleet:(aws|gcp|azure):[A-Z][A-Za-z]+", c.type), c.type
    for r in run.cloud_resources:
        chain = run.ancestors(r)
        assert chain and chain[-1].type == "pulumi:pulumi:Stack", r.urn
        assert any(a.type.startswith("trainfleet:") for a in chain), (
            f"{r.type} {r.name} has no component parent"
        )
    # One group per fleet, named deterministically, and the exports say so with a catalog price.
    for fleet in config.fleets:
        out = run.exports["fleets"][fleet.name]
        assert out["group"] == naming.group_name(env, fleet)
        assert out["hourly_price"]["usd_per_hour"] > 0
        assert out["checkpoint_url"].endswith(naming.checkpoint_prefix(env, config))
    assert run.exports["hourly_price_usd"] == pytest.approx(
        sum(f["hourly_price"]["usd_per_hour"] for f in run.exports["fleets"].values())
    )


@pytest.mark.parametrize("env", sorted(STACK_FILES))
def test_no_secret_values_in_user_data(runs, env):
    config, run = runs[env]
    documents = _user_data_of(run)
    assert len(documents) == len(config.fleets)
    for (_cloud, text), fleet in zip(documents, config.fleets, strict=True):
        assert text.startswith("#cloud-config\n"), text[:80]
        # It is the real rendering for this fleet (names filled in), so the scan below means something.
        assert naming.group_name(env, fleet) in text
        assert run.exports["fleets"][fleet.name]["bucket"] in text
        for what, pattern in SECRET_PATTERNS.items():
            assert not pattern.search(text), f"{env}/{fleet.name}: user-data holds a {what}"


@pytest.mark.parametrize("env", sorted(STACK_FILES))
def test_resources_carry_the_cost_tags(runs, env):
    _, run = runs[env]
    for r in run.cloud_resources:
        key = {"aws": "tags", "azure": "tags", "gcp": "labels"}[r.cloud]
        if r.type == "gcp:monitoring/notificationChannel:NotificationChannel":
            key = "userLabels"  # its `labels` are the channel's settings (the email address)
        tags = r.inputs.get(key)
        if isinstance(tags, dict) and tags:
            assert tags.get(TAG_STACK) == env and TAG_JOB in tags, (r.type, r.name, tags)
    # What costs money is tagged, so `trainfleet spend` can find it.
    for token, key in MUST_BE_TAGGED.items():
        for r in run.of_type(token):
            assert r.inputs[key][TAG_STACK] == env, (token, r.name)


@pytest.mark.parametrize("env", sorted(STACK_FILES))
def test_budget_notifies_actual_and_forecasted_at_the_configured_thresholds(runs, env):
    config, run = runs[env]
    if config.budget is None:
        pytest.skip("no budget in this stack")
    thresholds = sorted(set(config.budget.alert_thresholds_percent))
    recipients = sorted(config.budget.recipients)
    for cloud in {f.cloud for f in config.fleets}:
        if cloud == "aws":
            budgets = run.of_type("aws:budgets/budget:Budget")
            notes = [n for b in budgets for n in b.inputs["notifications"]]
            assert all(
                b.inputs["timeUnit"] == "MONTHLY" and b.inputs["budgetType"] == "COST" for b in budgets
            )
            assert {float(b.inputs["limitAmount"]) for b in budgets} == {config.budget.monthly_limit_usd}
            assert all(len(b.inputs["notifications"]) <= 5 for b in budgets)
            assert sorted(n["threshold"] for n in notes if n["notificationType"] == "ACTUAL") == thresholds
            assert [n["threshold"] for n in notes if n["notificationType"] == "FORECASTED"] == [
                thresholds[-1]
            ]
            assert all(sorted(n["subscriberEmailAddresses"]) == recipients for n in notes)
            assert budgets[0].inputs["costFilters"] == [
                {"name": "TagKeyValue", "values": [f"user:{TAG_STACK}${env}"]}
            ]
        elif cloud == "gcp":
            budget = run.one("gcp:billing/budget:Budget")
            rules = budget.inputs["thresholdRules"]
            current = sorted(r["thresholdPercent"] * 100 for r in rules if r["spendBasis"] == "CURRENT_SPEND")
            assert current == pytest.approx(thresholds)
            assert [r["thresholdPercent"] * 100 for r in rules if r["spendBasis"] == "FORECASTED_SPEND"] == [
                pytest.approx(thresholds[-1])
            ]
            channels = run.of_type("gcp:monitoring/notificationChannel:NotificationChannel")
            assert sorted(c.inputs["labels"]["email_address"] for c in channels) == recipients
            assert sorted(budget.inputs["allUpdatesRule"]["monitoringNotificationChannels"]) == sorted(
                c.id for c in channels
            )
            assert int(budget.inputs["amount"]["specifiedAmount"]["units"]) == int(
                config.budget.monthly_limit_usd
            )
        else:
            budgets = run.of_type("azure-native:consumption:Budget")
            notes = [n for b in budgets for n in b.inputs["notifications"].values()]
            assert sorted(n["threshold"] for n in notes if n["thresholdType"] == "Actual") == thresholds
            assert [n["threshold"] for n in notes if n["thresholdType"] == "Forecasted"] == [thresholds[-1]]
            assert all(sorted(n["contactEmails"]) == recipients and n["enabled"] for n in notes)
            assert {b.inputs["amount"] for b in budgets} == {config.budget.monthly_limit_usd}


@pytest.mark.parametrize("env", sorted(STACK_FILES))
def test_billing_export_declared_exactly_when_enabled(runs, env):
    config, run = runs[env]
    clouds = {f.cloud for f in config.fleets}
    exports = {
        "aws": run.of_type("aws:bcmdata/export:Export"),
        "gcp": run.of_type("gcp:bigquery/dataset:Dataset"),
        "azure": run.of_type("azure-native:costmanagement:Export"),
    }
    for cloud, found in exports.items():
        expected = 1 if config.billing_export.enabled and cloud in clouds else 0
        assert len(found) == expected, (cloud, len(found))
    assert set(run.exports["billing_exports"]) == (clouds if config.billing_export.enabled else set())


# ------------------------------------------------------------------------------------------------ AWS


@pytest.mark.parametrize("env", _stacks_on("aws"))
def test_aws_group_spot_settings_match_the_config(runs, env):
    config, run = runs[env]
    for fleet in (f for f in config.fleets if f.cloud == "aws"):
        asg = run.one("aws:autoscaling/group:Group", f"{fleet.name}-asg")
        policy = asg.inputs["mixedInstancesPolicy"]
        dist = policy["instancesDistribution"]
        assert dist["spotAllocationStrategy"] == "price-capacity-optimized"
        assert asg.inputs["capacityRebalance"] is True
        assert asg.inputs["name"] == naming.group_name(env, fleet)
        assert asg.inputs["desiredCapacity"] == 0 and asg.inputs["maxSize"] == fleet.nodes  # start_run sizes it
        base, pct = int(dist["onDemandBaseCapacity"]), int(dist["onDemandPercentageAboveBaseCapacity"])
        assert base + math.ceil((fleet.nodes - base) * pct / 100) == fleet.on_demand_nodes
        if fleet.purchase == "mixed":
            assert (base, pct) == (fleet.on_demand_base, fleet.on_demand_percentage_above_base)
        overrides = [o["instanceType"] for o in policy["launchTemplate"]["overrides"]]
        assert overrides == [fleet.instance_type, *fleet.fallback_instance_types]
        # No stack file sets max_price: no cap, which the provider spells "" (its default: up to on-demand).
        assert fleet.max_price is None and dist.get("spotMaxPrice", "") == ""
        # Several zones: one subnet per zone of the fleet.
        zones = fleet_zones(fleet)
        assert len(zones) >= 1 and len(asg.inputs["vpcZoneIdentifiers"]) == len(zones)
        subnets = {s.id: s for s in run.of_type("aws:ec2/subnet:Subnet")}
        assert [subnets[i].inputs["availabilityZoneId"] for i in asg.inputs["vpcZoneIdentifiers"]] == zones
        pg = run.of_type("aws:ec2/placementGroup:PlacementGroup")
        if fleet.nodes > 1:
            assert [p.inputs["strategy"] for p in pg] == ["cluster"]
            assert asg.inputs["placementGroup"] == pg[0].outputs["name"]
        else:
            assert not pg and "placementGroup" not in asg.inputs


@pytest.mark.parametrize("env", _stacks_on("aws"))
def test_aws_launch_template_imdsv2_encrypted_root_efa_no_public_ip(runs, env):
    config, run = runs[env]
    for fleet in (f for f in config.fleets if f.cloud == "aws"):
        lt = run.one("aws:ec2/launchTemplate:LaunchTemplate", f"{fleet.name}-lt")
        meta = lt.inputs["metadataOptions"]
        assert meta["httpTokens"] == "required" and meta["httpEndpoint"] == "enabled"
        ami = next(i for i in run.invocations if i.token == "aws:ec2/getAmi:getAmi")
        (root,) = lt.inputs["blockDeviceMappings"]
        image_id, root_device = EXPECTED_AMI[env]
        assert (lt.inputs["imageId"], root["deviceName"]) == (image_id, root_device)
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeSize"] == fleet.root_volume_gb
        nic, *more = lt.inputs["networkInterfaces"]
        assert (nic["networkCardIndex"], nic["deviceIndex"]) == (0, 0)
        # No public address: said outright on a single interface; EC2 assigns none with several (and refuses
        # the setting there).
        assert nic.get("associatePublicIpAddress") == ("false" if not more else None)
        assert (nic.get("interfaceType") == "efa") == offers_efa(fleet)
        # With EFA, one interface per network card of the fleet's own type (EC2's NetworkInfo, by hand:
        # p4de.24xlarge and dl1.24xlarge have 4), none with a public address; without EFA just the one.
        cards = {"p4de.24xlarge": 4, "dl1.24xlarge": 4}.get(fleet.instance_type, 1) if offers_efa(fleet) else 1
        assert [n["networkCardIndex"] for n in lt.inputs["networkInterfaces"]] == list(range(cards))
        assert all(n["deviceIndex"] == 1 and "associatePublicIpAddress" not in n for n in more)
        profile = run.one("aws:iam/instanceProfile:InstanceProfile")
        assert lt.inputs["iamInstanceProfile"]["arn"] == profile.outputs["arn"]
        assert ami.args["mostRecent"] is True


# ------------------------------------------------------------------ AMI lookup: the root device is looked up


def _launch_template_with(env: str, images=IMAGES, **fleet_changes):
    config = _with_fleet(read_stack_file(STACK_FILES[env]).config, **fleet_changes)
    fleet = config.fleets[0]
    return run_program(env, config, images=images).one("aws:ec2/launchTemplate:LaunchTemplate", f"{fleet.name}-lt")


@pytest.mark.parametrize(
    "env, image, root_device",
    [
        # Amazon Linux 2023 in us-east-1 (moto's capture of DescribeImages): its root is /dev/xvda.
        ("dev", "ami-03c3da4cfa8e8943a", "/dev/xvda"),
        # The same release's us-west-2 copy, for the us-west-2 stack.
        ("gaudi", "ami-0a1a95d8da5818fdb", "/dev/xvda"),
        # The 2017 Deep Learning AMIs: Amazon Linux build /dev/xvda, Ubuntu build /dev/sda1.
        ("prod", "ami-999844e0", "/dev/xvda"),
        ("prod", "ami-dca37ea5", "/dev/sda1"),
    ],
)
def test_launch_template_root_device_is_the_pinned_amis_own(env, image, root_device):
    lt = _launch_template_with(env, image=image)
    (root,) = lt.inputs["blockDeviceMappings"]
    assert (lt.inputs["imageId"], root["deviceName"]) == (image, root_device)
    assert root["ebs"]["encrypted"] == "true"  # the root volume the AMI boots from is the encrypted one


def test_an_ami_id_from_another_region_is_not_found_like_the_real_lookup():
    # ami-0a1a95d8da5818fdb is the us-west-2 AL2023 image; dev is in us-east-1, where that id does not exist.
    with pytest.raises(Exception, match=re.escape("Your query returned no results")):
        _launch_template_with("dev", image="ami-0a1a95d8da5818fdb")


def test_a_private_ami_is_left_unknown_until_apply_not_guessed_or_refused():
    """A user's own AMI id is in no public table: only their account can describe it. Offline, the program
    still runs (stacks check, preview), and the root device is Pulumi's unknown, never a guessed /dev/sda1."""
    lt = _launch_template_with("dev", image="ami-0fedcba9876543210")
    (root,) = lt.inputs["blockDeviceMappings"]
    assert lt.inputs["imageId"] == "ami-0fedcba9876543210"
    # Pulumi's runtime reads its unknown marker as "known at apply" and records no value, as a preview does.
    assert "deviceName" not in root and root["ebs"]["encrypted"] == "true"


def test_a_name_filter_matching_nothing_fails_like_the_real_lookup():
    # Only Amazon Linux images: the program's DLAMI name filter matches none of them.
    amazon_linux = tuple(i for i in IMAGES if i.name.startswith("al2023-"))
    assert amazon_linux
    with pytest.raises(Exception, match=re.escape("Your query returned no results")) as err:
        run_program("dev", read_stack_file(STACK_FILES["dev"]).config, images=amazon_linux)
    assert "Deep Learning Base OSS Nvidia Driver GPU AMI" in str(err.value)  # says what was asked


def test_the_default_images_are_the_vendored_ones():
    """The table `trainfleet preview` uses offline is a subset of the vendored one, field for field."""
    vendored = {i.image_id: i for i in IMAGES}
    assert DEFAULT_IMAGES and all(vendored.get(i.image_id) == i for i in DEFAULT_IMAGES)


# ------------------------------------------------------------------------- spotMaxPrice: the stack's cap


@pytest.mark.parametrize(
    "env, max_price, expected",
    [
        # Written by hand: the stack's USD/hour value as the string the provider schema takes
        # (aws:autoscaling/group mixedInstancesPolicy.instancesDistribution.spotMaxPrice: string).
        ("dev", 2.5, "2.5"),
        ("dev", 1.23456, "1.23456"),  # not rounded up to 1.2346
        ("prod", 30, "30.0"),
        ("gaudi", 0.00004, "0.00004"),  # not "0.0000", nor 4e-05
        # No cap: "", the provider's default, "which means the on-demand price" (pulumi_aws
        # GroupMixedInstancesPolicyInstancesDistributionArgs.spot_max_price docstring).
        ("dev", -1, ""),
        ("prod", None, ""),
    ],
)
def test_spot_max_price_is_the_stack_value(env, max_price, expected):
    config = _with_fleet(read_stack_file(STACK_FILES[env]).config, max_price=max_price)
    asg = run_program(env, config, images=IMAGES).one("aws:autoscaling/group:Group")
    distribution = asg.inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution.get("spotMaxPrice", "") == expected


def test_efa_on_multi_node_efa_types_only(runs):
    assert run_efa(runs, "prod") and run_efa(runs, "gaudi")
    assert not run_efa(runs, "dev")  # one node: nothing to talk to


def run_efa(runs, env) -> bool:
    _, run = runs[env]
    return all(
        nic.get("interfaceType") == "efa"
        for lt in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        for nic in lt.inputs["networkInterfaces"]
    )


@pytest.mark.parametrize("env", _stacks_on("aws"))
def test_aws_security_group_admits_only_members_and_named_ssh(runs, env):
    config, run = runs[env]
    (sg,) = run.of_type("aws:ec2/securityGroup:SecurityGroup")
    assert not sg.inputs.get("ingress") and not sg.inputs.get("egress")  # rules are separate resources
    ingress = run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    ssh_cidrs = [c for f in config.fleets for c in f.ssh_cidrs]
    members = [r for r in ingress if r.inputs.get("referencedSecurityGroupId") == sg.id]
    ssh = [r for r in ingress if "cidrIpv4" in r.inputs]
    assert len(members) == 1 and len(members) + len(ssh) == len(ingress)
    assert sorted(r.inputs["cidrIpv4"] for r in ssh) == sorted(ssh_cidrs)
    for r in ssh:
        assert (r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"]) == ("tcp", 22, 22)
    assert not [r for r in ingress if r.inputs.get("cidrIpv4") in OPEN or r.inputs.get("cidrIpv6") in OPEN]
    default_sg = run.of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert all(not d.inputs.get("ingress") for d in default_sg)


@pytest.mark.parametrize("env", _stacks_on("aws"))
def test_aws_buckets_private_encrypted_versioned_tls_only(runs, env):
    config, run = runs[env]
    buckets = run.of_type("aws:s3/bucket:Bucket")
    assert len(buckets) == len(config.fleets) + (1 if config.billing_export.enabled else 0)
    for bucket in buckets:
        (block,) = _by_bucket(run, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", bucket.id)
        assert all(
            block.inputs[k] is True
            for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
        )
        (sse,) = _by_bucket(
            run,
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            bucket.id,
        )
        assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] in (
            "AES256",
            "aws:kms",
        )
        (ver,) = _by_bucket(run, "aws:s3/bucketVersioning:BucketVersioning", bucket.id)
        assert ver.inputs["versioningConfiguration"]["status"] == "Enabled"
        (own,) = _by_bucket(run, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", bucket.id)
        assert own.inputs["rule"]["objectOwnership"] == "BucketOwnerEnforced"
        (pol,) = _by_bucket(run, "aws:s3/bucketPolicy:BucketPolicy", bucket.id)
        statements = json.loads(pol.inputs["policy"])["Statement"]
        deny = [s for s in statements if s["Effect"] == "Deny"]
        assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert bucket.outputs["arn"] in deny[0]["Resource"]
        assert not [s for s in statements if s["Effect"] == "Allow" and s.get("Principal") == "*"]
        (life,) = _by_bucket(
            run, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", bucket.id
        )
        rules = {r["id"]: r for r in life.inputs["rules"]}
        assert rules["abort-incomplete-uploads"]["abortIncompleteMultipartUpload"]["daysAfterInitiation"] >= 1
        days = rules["expire-replaced-versions"]["noncurrentVersionExpiration"]["noncurrentDays"]
        if bucket.name.endswith("-ckpt"):
            assert days == config.checkpoint.retention_days


@pytest.mark.parametrize("env", _stacks_on("aws"))
def test_aws_role_is_scoped_to_its_bucket_prefix_and_group(runs, env):
    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "aws"]
    bucket = run.one("aws:s3/bucket:Bucket", f"{fleet.name}-ckpt")
    arn, prefix = bucket.outputs["arn"], naming.checkpoint_prefix(env, config)
    role = run.one("aws:iam/role:Role")
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "ec2.amazonaws.com"}]
    (policy,) = run.of_type("aws:iam/rolePolicy:RolePolicy")
    assert policy.inputs["role"] == role.outputs["name"]
    group = naming.group_name(env, fleet)
    for s in json.loads(policy.inputs["policy"])["Statement"]:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        assert s["Effect"] == "Allow" and not any(a.endswith("*") for a in actions), s
        services = {a.split(":")[0] for a in actions}
        if services == {"s3"}:
            if actions == ["s3:ListBucket"]:
                assert s["Resource"] == arn and s["Condition"]["StringLike"]["s3:prefix"] == [
                    prefix,
                    f"{prefix}*",
                ]
            else:
                assert s["Resource"] == f"{arn}/{prefix}*"
        elif services == {"ec2"}:
            assert actions == ["ec2:DescribeInstances"]  # no resource-level scoping exists for Describe*
        elif services == {"autoscaling"}:
            assert s["Resource"] == (
                f"arn:aws:autoscaling:{fleet.region}:{MOCK_AWS_ACCOUNT}:autoScalingGroup:*:autoScalingGroupName/{group}"
            )
        else:
            raise AssertionError(f"unexpected statement {s}")
    # The node files fetched at boot live under the prefix the role may read.
    assets = run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
    assert assets and all(
        a.inputs["bucket"] == bucket.id and a.inputs["key"].startswith(prefix) for a in assets
    )


def test_aws_billing_export_is_cur2_into_a_bucket_only_billing_may_write(runs):
    config, run = runs["prod"]
    assert config.billing_export.enabled
    (export,) = run.of_type("aws:bcmdata/export:Export")
    spec = export.inputs["export"]
    (query,) = spec["dataQueries"]
    assert (
        "FROM COST_AND_USAGE_REPORT" in query["queryStatement"] and "resource_tags" in query["queryStatement"]
    )
    assert query["tableConfigurations"]["COST_AND_USAGE_REPORT"]["INCLUDE_RESOURCES"] == "TRUE"
    (dest,) = spec["destinationConfigurations"][0]["s3Destinations"]
    bucket = run.one("aws:s3/bucket:Bucket", "aws-billing")
    assert dest["s3Bucket"] == bucket.outputs["bucket"]
    (pol,) = _by_bucket(run, "aws:s3/bucketPolicy:BucketPolicy", bucket.id)
    allow = [s for s in json.loads(pol.inputs["policy"])["Statement"] if s["Effect"] == "Allow"]
    assert allow and "bcm-data-exports.amazonaws.com" in allow[0]["Principal"]["Service"]
    assert allow[0]["Condition"]["StringLike"]["aws:SourceAccount"] == MOCK_AWS_ACCOUNT
    assert run.exports["billing_exports"]["aws"]["export_arn"].startswith("arn:aws:bcm-data-exports:")


def test_aws_network_is_private_with_an_s3_gateway(runs):
    _, run = runs["dev"]
    subnets = run.of_type("aws:ec2/subnet:Subnet")
    assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in subnets)
    (endpoint,) = run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert (
        endpoint.inputs["vpcEndpointType"] == "Gateway"
        and endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    )
    private_rt = run.one("aws:ec2/routeTable:RouteTable", "dev-net-private-rt")
    assert endpoint.inputs["routeTableIds"] == [private_rt.id]
    assert [r.get("natGatewayId") for r in private_rt.inputs["routes"]] == [
        run.one("aws:ec2/natGateway:NatGateway").id
    ]


def test_gaudi_group_boots_the_habana_image(runs):
    _, run = runs["gaudi"]
    gaudi = run.one("trainfleet:aws:GaudiGroup")
    fleet = run.one("trainfleet:aws:SpotFleet")
    assert fleet.parent == gaudi.urn
    (ami,) = [i for i in run.invocations if i.token == "aws:ec2/getAmi:getAmi"]
    # Its user's own AMI, the newest of the account named for the Gaudi software (no published AMI carries it).
    assert ami.args["owners"] == ["self"] and ami.args["includeDeprecated"] is False
    assert {"name": "name", "values": ["trainfleet-gaudi-1.18.0-*"]} in ami.args["filters"]
    lt = run.one("aws:ec2/launchTemplate:LaunchTemplate")
    assert lt.inputs["imageId"] == run.exports["fleets"]["gaudi"]["image"] == EXPECTED_AMI["gaudi"][0]
    asg = run.one("aws:autoscaling/group:Group")
    assert {o["instanceType"] for o in asg.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]} == {
        "dl1.24xlarge"
    }


# ------------------------------------------------------------------------------------------------ GCP


@pytest.mark.parametrize("env", _stacks_on("gcp"))
def test_gcp_template_is_spot_shielded_private_with_its_own_account(runs, env):
    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "gcp"]
    tpl = run.one("gcp:compute/instanceTemplate:InstanceTemplate")
    sched = tpl.inputs["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["preemptible"] is True
    assert sched["instanceTerminationAction"] == fleet.spot_termination_action
    assert sched["onHostMaintenance"] == "TERMINATE" and sched["automaticRestart"] is False
    shielded = tpl.inputs["shieldedInstanceConfig"]
    assert shielded["enableVtpm"] and shielded["enableIntegrityMonitoring"]
    assert all(not nic.get("accessConfigs") for nic in tpl.inputs["networkInterfaces"])
    account = run.one("gcp:serviceaccount/account:Account")
    assert tpl.inputs["serviceAccount"]["email"] == account.outputs["email"]
    scopes = tpl.inputs["serviceAccount"]["scopes"]
    assert "https://www.googleapis.com/auth/cloud-platform" not in scopes and len(scopes) <= 4
    assert tpl.inputs["machineType"] == fleet.instance_type
    assert tpl.inputs["metadata"]["block-project-ssh-keys"] == "TRUE"
    mig = run.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager")
    assert mig.inputs["name"] == naming.group_name(env, fleet) and mig.inputs["targetSize"] == 0
    assert mig.inputs["distributionPolicyZones"] == fleet_zones(fleet) and len(fleet_zones(fleet)) >= 2
    assert mig.inputs["versions"][0]["instanceTemplate"] == tpl.outputs["selfLinkUnique"]


@pytest.mark.parametrize("env", _stacks_on("gcp"))
def test_gcp_firewall_admits_only_the_group_tag(runs, env):
    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "gcp"]
    tag = naming.group_name(env, fleet)
    rules = run.of_type("gcp:compute/firewall:Firewall")
    members = [r for r in rules if r.inputs.get("sourceTags")]
    assert [(r.inputs["sourceTags"], r.inputs["targetTags"]) for r in members] == [([tag], [tag])]
    for r in rules:
        assert r.inputs["direction"] == "INGRESS" and not set(r.inputs.get("sourceRanges", [])) & OPEN
        assert r.inputs["targetTags"] == [tag]
    assert sorted(c for r in rules for c in r.inputs.get("sourceRanges", [])) == sorted(fleet.ssh_cidrs)


@pytest.mark.parametrize("env", _stacks_on("gcp"))
def test_gcp_bucket_and_iam_are_private_and_scoped(runs, env):
    config, run = runs[env]
    bucket = run.one("gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["versioning"] == {"enabled": True}
    delete = [r for r in bucket.inputs["lifecycleRules"] if r["action"]["type"] == "Delete"]
    assert delete[0]["condition"]["daysSinceNoncurrentTime"] == config.checkpoint.retention_days
    prefix = naming.checkpoint_prefix(env, config)
    (member,) = run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert (
        member.inputs["bucket"] == bucket.outputs["name"]
        and member.inputs["role"] == "roles/storage.objectUser"
    )
    assert f"buckets/{bucket.outputs['name']}/objects/{prefix}" in member.inputs["condition"]["expression"]
    # Peers: instances.get, limited by a condition to the group's own instances (a type conditions support).
    # The group: get and update (resize), which no IAM condition can limit to one group, in a role of their own.
    members = {m.name.rsplit("-", 1)[-1]: m for m in run.of_type("gcp:projects/iAMMember:IAMMember")}
    roles = {r.name.rsplit("-", 2)[-2]: r for r in run.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")}
    assert set(members) == set(roles) == {"group", "peers"}
    assert roles["peers"].inputs["permissions"] == ["compute.instances.get"]
    assert sorted(roles["group"].inputs["permissions"]) == [
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.update",
    ]
    for kind in ("group", "peers"):
        assert members[kind].inputs["role"] == roles[kind].outputs["name"]
    peers = members["peers"].inputs["condition"]["expression"]
    assert f'startsWith("{naming.group_name(env, config.fleets[0])}-")' in peers and "instanceGroupManagers" not in peers
    assert "condition" not in members["group"].inputs


@pytest.mark.parametrize("env", _stacks_on("gcp"))
def test_gcp_node_files_are_objects_the_node_account_may_read(runs, env):
    """The agent and train.py: objects in the checkpoint bucket under the job's prefix (which the node's IAM
    condition grants), uploaded by the fleet component, each the file the user-data pins by sha256."""
    import hashlib

    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "gcp"]
    bucket = run.one("gcp:storage/bucket:Bucket")
    (document,) = [text for cloud, text in _user_data_of(run) if cloud == "gcp"]
    fetch = _fetch_constants(document)
    assert fetch["BUCKET"] == bucket.outputs["name"]
    pins = {f["key"]: f for f in fetch["FILES"]}
    objects = {o.inputs["name"]: o for o in run.of_type("gcp:storage/bucketObject:BucketObject")}
    assert sorted(objects) == sorted(pins) and len(pins) == 6  # agent, train.py + its 2 modules, boot and resize scripts
    prefix = naming.checkpoint_prefix(env, config)
    (member,) = run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    (granted,) = re.findall(r'resource\.name\.startsWith\("([^"]+)"\)', member.inputs["condition"]["expression"])
    for key, obj in objects.items():
        assert obj.inputs["bucket"] == bucket.outputs["name"] and key.startswith(f"{prefix}{fleet.name}/_node/")
        assert hashlib.sha256(_asset_text(obj).encode()).hexdigest() == pins[key]["sha256"]
        assert f"projects/_/buckets/{bucket.outputs['name']}/objects/{key}".startswith(granted)
        assert obj.parent and obj.parent.endswith(f"trainfleet:gcp:SpotFleet::{fleet.name}")


def test_gcp_billing_export_dataset_and_console_step(runs):
    config, run = runs["gcp-dev"]
    dataset = run.one("gcp:bigquery/dataset:Dataset")
    note = run.exports["billing_exports"]["gcp"]["action_required"]
    assert dataset.inputs["datasetId"] in note and "console" in note


# ---------------------------------------------------------------------------------------------- Azure


@pytest.mark.parametrize("env", _stacks_on("azure"))
def test_azure_scale_set_spot_settings_identity_and_network(runs, env):
    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "azure"]
    vmss = run.one("azure-native:compute:VirtualMachineScaleSet")
    profile = vmss.inputs["virtualMachineProfile"]
    assert profile["priority"] == "Spot" and profile["evictionPolicy"] == "Delete"
    assert profile["billingProfile"]["maxPrice"] == (-1 if fleet.max_price in (None, -1) else fleet.max_price)
    assert vmss.inputs["sku"] == {"name": fleet.instance_type, "tier": "Standard", "capacity": 0}  # created empty
    assert vmss.inputs["vmScaleSetName"] == naming.group_name(env, fleet)
    assert vmss.inputs.get("zones", []) == fleet.zones
    identity = run.one("azure-native:managedidentity:UserAssignedIdentity")
    assert vmss.inputs["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [identity.id]}
    (nic,) = profile["networkProfile"]["networkInterfaceConfigurations"]
    assert nic["enableAcceleratedNetworking"] is True
    assert all("publicIPAddressConfiguration" not in ip for ip in nic["ipConfigurations"])
    assert profile["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert "adminPassword" not in profile["osProfile"]


@pytest.mark.parametrize("env", _stacks_on("azure"))
def test_azure_nsg_admits_only_the_subnet(runs, env):
    config, run = runs[env]
    (nsg,) = run.of_type("azure-native:network:NetworkSecurityGroup")
    (subnet,) = run.of_type("azure-native:network:Subnet")
    allow = [r for r in nsg.inputs["securityRules"] if r["direction"] == "Inbound" and r["access"] == "Allow"]
    deny = [r for r in nsg.inputs["securityRules"] if r["access"] == "Deny"]
    assert (
        deny
        and deny[0]["sourceAddressPrefix"] == "*"
        and deny[0]["priority"] > max(r["priority"] for r in allow)
    )
    assert allow[0]["sourceAddressPrefix"] == subnet.inputs["addressPrefix"]
    assert all(r["sourceAddressPrefix"] not in OPEN for r in allow)
    assert subnet.inputs["defaultOutboundAccess"] is False
    assert subnet.inputs["networkSecurityGroup"]["id"] == nsg.id


@pytest.mark.parametrize("env", _stacks_on("azure"))
def test_azure_storage_private_tls12_versioned_and_scoped(runs, env):
    config, run = runs[env]
    for account in run.of_type("azure-native:storage:StorageAccount"):
        assert account.inputs["allowBlobPublicAccess"] is False
        assert (
            account.inputs["minimumTlsVersion"] == "TLS1_2"
            and account.inputs["enableHttpsTrafficOnly"] is True
        )
    ckpt = run.one("azure-native:storage:StorageAccount", f"{config.fleets[0].name}ckpt")
    assert ckpt.inputs["allowSharedKeyAccess"] is False
    blob = run.one("azure-native:storage:BlobServiceProperties", f"{config.fleets[0].name}-ckpt-blob")
    assert blob.inputs["isVersioningEnabled"] is True and blob.inputs["accountName"] == ckpt.outputs["name"]
    container = run.one("azure-native:storage:BlobContainer", f"{config.fleets[0].name}-ckpt-container")
    assert container.inputs["publicAccess"] == "None"
    policy = run.one("azure-native:storage:ManagementPolicy", f"{config.fleets[0].name}-ckpt-lifecycle")
    (rule,) = policy.inputs["policy"]["rules"]
    assert (
        rule["definition"]["actions"]["version"]["delete"]["daysAfterCreationGreaterThan"]
        == config.checkpoint.retention_days
    )
    storage_grant = run.one(
        "azure-native:authorization:RoleAssignment", f"{config.fleets[0].name}-node-checkpoints"
    )
    assert storage_grant.inputs["scope"] == container.id
    assert f"StringStartsWith '{naming.checkpoint_prefix(env, config)}'" in storage_grant.inputs["condition"]
    group_grant = run.one("azure-native:authorization:RoleAssignment", f"{config.fleets[0].name}-own-group")
    assert group_grant.inputs["scope"] == run.one("azure-native:compute:VirtualMachineScaleSet").id
    export = run.one("azure-native:costmanagement:Export")
    assert (
        export.inputs["deliveryInfo"]["destination"]["resourceId"]
        == run.one("azure-native:storage:StorageAccount", "azurebilling").id
    )


@pytest.mark.parametrize("env", _stacks_on("azure"))
def test_azure_node_files_are_blobs_the_node_identity_may_read(runs, env):
    """The agent and train.py: blobs in the fleet's node-files container (an account of its own, with shared keys
    on, which azure-native's Blob upload needs; the checkpoint account keeps them off), uploaded by the fleet
    component, each the file the custom data pins by sha256; the node identity reads them (Storage Blob Data
    Reader, its prefix condition evaluated as Azure does)."""
    import hashlib

    from infra.rules.abac import Request, allows, blob_attributes

    blob_api = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
    config, run = runs[env]
    (fleet,) = [f for f in config.fleets if f.cloud == "azure"]
    account = run.one("azure-native:storage:StorageAccount", f"{fleet.name}files")
    assert account.inputs["allowSharedKeyAccess"] is True and account.inputs["allowBlobPublicAccess"] is False
    container = run.one("azure-native:storage:BlobContainer", f"{fleet.name}-files-container")
    assert container.inputs["containerName"] == "node-files" and container.inputs["publicAccess"] == "None"
    (document,) = [text for cloud, text in _user_data_of(run) if cloud == "azure"]
    fetch = _fetch_constants(document)
    assert fetch["BUCKET"] == f"{account.outputs['name']}/node-files"
    assert run.exports["fleets"][fleet.name]["node_files"] == fetch["BUCKET"]
    pins = {f["key"]: f for f in fetch["FILES"]}
    blobs = {b.inputs["blobName"]: b for b in run.of_type("azure-native:storage:Blob")}
    assert sorted(blobs) == sorted(pins) and len(pins) == 6  # agent, train.py + its 2 modules, boot and resize scripts
    grant = run.one("azure-native:authorization:RoleAssignment", f"{fleet.name}-node-node-files")
    identity = run.one("azure-native:managedidentity:UserAssignedIdentity")
    assert grant.inputs["scope"] == container.id and grant.inputs["principalId"] == identity.outputs["principalId"]
    assert grant.inputs["roleDefinitionId"].endswith("/2a2b9908-6ea1-4ae2-8e65-a410df84e7d1")  # Blob Data Reader
    for key, blob in blobs.items():
        assert (blob.inputs["accountName"], blob.inputs["containerName"]) == (account.outputs["name"], "node-files")
        assert blob.inputs["type"] == "Block"
        assert hashlib.sha256(_asset_text(blob).encode()).hexdigest() == pins[key]["sha256"]
        assert blob.parent and blob.parent.endswith(f"trainfleet:azure:SpotFleet::{fleet.name}")
        read = Request(f"{blob_api}/read", None, blob_attributes(path=key))
        assert allows(grant.inputs["condition"], read), key
    other = Request(f"{blob_api}/read", None, blob_attributes(path="another-stack/job/f/_node/x/train.py"))
    assert not allows(grant.inputs["condition"], other)
