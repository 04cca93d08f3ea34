"""The policy pack (policy/) over the program's own resources, handed over the way Pulumi hands them.

Every stack in stacks/ runs under the mock runtime (infra.mock_runtime.run_program); each resource reaches
the policies as pulumi-policy's analyzer servicer builds it from the engine's gRPC request: properties as a
protobuf Struct, deserialized and wrapped in the SDK's unknown-checking proxy; stack policies get the
resources' outputs (what the engine sends AnalyzeStack), with parents linked. Every stack must pass every
policy. Then each policy meets a violation made from a real resource (a deep copy, one input changed)
and must report it. Expected figures are worked by hand from the catalog rows and rate cards named where
they are used.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi_policy
import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import proto
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _NotApplicableError, _PolicyAnalyzerServicer  # the engine's gRPC Analyzer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from infra.mock_runtime import DeclaredResource, ProgramRun, run_program
from infra.stack_file import StackFile, list_stack_files, read_stack_file, stack_name

ROOT = Path(__file__).resolve().parents[1]
POLICY_DIR = ROOT / "policy"
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))  # as Pulumi runs the pack: its folder first on sys.path

from trainfleet_policies import PACK_NAME, all_policies, budget, iam, imds, ingress, storage, userdata  # noqa: E402

STACK_FILES = {stack_name(p): p for p in list_stack_files(ROOT)}
EXPECTED_POLICIES = [
    "aws-imdsv2-required",
    "private-encrypted-storage",
    "aws-s3-buckets-blocked-and-encrypted",
    "no-internet-ingress",
    "no-internet-ingress-stack",
    "least-privilege-node-roles",
    "no-secrets-in-user-data",
    "stack-budget-guardrail",
]


@dataclass
class Captured:
    file: StackFile
    run: ProgramRun

    def one(self, token: str, name: str | None = None) -> DeclaredResource:
        return self.run.one(token, name)


@pytest.fixture(scope="module")
def stacks() -> dict[str, Captured]:
    out = {}
    for name, path in STACK_FILES.items():
        stack_file = read_stack_file(path)
        out[name] = Captured(stack_file, run_program(name, stack_file.config))
    return out


# ------------------------------------------------------------------ the engine's view, as pulumi-policy builds it


def struct(props: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(props)
    return message


def engine_props(props: dict[str, Any]) -> Any:
    """What a validator gets as `args.props`: the gRPC Struct deserialized and proxied, as
    _PolicyAnalyzerServicer.Analyze does it."""
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct(props))))


def options(parent: str | None) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent)


def resource_violations(policy: Any, r: DeclaredResource, inputs: dict[str, Any] | None = None) -> list[str]:
    """Run one resource policy on a resource's inputs (default: as declared) and collect its messages."""
    args = ResourceValidationArgs(
        r.type, engine_props(r.inputs if inputs is None else inputs), r.urn, r.name, options(r.parent), None
    )
    found: list[str] = []
    policy.validate(args, lambda message, urn=None: found.append(message))
    return found


def stack_outputs(r: DeclaredResource) -> dict[str, Any]:
    """What AnalyzeStack gets for a resource: its outputs (pulumi-aws/-gcp carry `id` among them)."""
    props = dict(r.outputs) if r.custom else {}
    if r.custom and r.id:
        props["id"] = r.id
    return props


def policy_resources(run: ProgramRun, props: dict[str, dict[str, Any]] | None = None) -> list[PolicyResource]:
    """The stack's resources as StackValidationArgs.resources, parents linked as the servicer links them;
    `props` replaces some resources' properties (by URN)."""
    props = props or {}
    made = {
        r.urn: PolicyResource(
            r.type,
            engine_props(props.get(r.urn, stack_outputs(r))),
            r.urn,
            r.name,
            options(r.parent),
            None,
            None,
            [],
            {},
        )
        for r in run.resources
    }
    for r in run.resources:
        if r.parent in made:
            made[r.urn].parent = made[r.parent]
    return list(made.values())


def stack_violations(policy: Any, resources: list[PolicyResource], config: dict | None = None) -> list[str]:
    found: list[str] = []
    policy.validate(StackValidationArgs(resources, config), lambda message, urn=None: found.append(message))
    return found


def servicer() -> _PolicyAnalyzerServicer:
    return _PolicyAnalyzerServicer(PACK_NAME, "0.0.1", all_policies(), EnforcementLevel.MANDATORY)


def configure(service: _PolicyAnalyzerServicer, policy_config: dict[str, dict[str, Any]]) -> None:
    """What the engine sends before analysis: each configured policy's level and properties."""
    request = proto.ConfigureAnalyzerRequest(
        policyConfig={
            name: proto.PolicyConfig(enforcementLevel=proto.MANDATORY, properties=struct(props))
            for name, props in policy_config.items()
        }
    )
    service.Configure(request, None)


def analyze_stack_request(run: ProgramRun) -> Any:
    return proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=r.type,
                properties=struct(stack_outputs(r)),
                urn=r.urn,
                name=r.name,
                parent=r.parent or "",
                options=proto.AnalyzerResourceOptions(parent=r.parent or ""),
            )
            for r in run.resources
        ]
    )


def gunzip_b64(value: str) -> str:
    """The document inside base64 user data / custom data: gzipped when it would not fit raw (infra/userdata.py)."""
    raw = base64.b64decode(value)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def gzip_b64(text: str) -> str:
    """What infra/userdata.py does to a document over the size limit: gzip, then base64."""
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def with_input(r: DeclaredResource, path: str, value: Any) -> dict[str, Any]:
    """A deep copy of the resource's inputs with one (dotted) input set; None removes it."""
    inputs = copy.deepcopy(r.inputs)
    *parents, last = path.split(".")
    node = inputs
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return inputs


# ------------------------------------------------------------------------------------------ every stack passes


@pytest.mark.parametrize("stack", sorted(STACK_FILES))
def test_every_stack_passes_every_policy(stacks, stack):
    """Through the SDK's analyzer servicer, exactly as `pulumi preview --policy-pack policy` drives it:
    Analyze for each resource's inputs, then AnalyzeStack over the outputs."""
    captured = stacks[stack]
    service = servicer()
    configure(service, {budget.NAME: {"stackFile": str(STACK_FILES[stack])}})
    diagnostics = []
    for r in captured.run.resources:
        request = proto.AnalyzeRequest(
            type=r.type,
            properties=struct(r.inputs),
            urn=r.urn,
            name=r.name,
            options=proto.AnalyzerResourceOptions(parent=r.parent or ""),
        )
        diagnostics += list(service.Analyze(request, None).diagnostics)
    response = service.AnalyzeStack(analyze_stack_request(captured.run), None)
    diagnostics += list(response.diagnostics)
    assert [f"{d.policyName}: {d.urn}: {d.message}" for d in diagnostics] == []
    not_applicable = {n.policy_name for n in response.not_applicable}
    has_limit = (
        captured.file.config.budget is not None and captured.file.config.budget.fail_above_usd is not None
    )
    assert (budget.NAME in not_applicable) is not has_limit


def test_the_sweep_meets_what_every_policy_checks(stacks):
    """The stacks hold resources of each kind the policies read, so passing them means something."""
    types = {r.type for c in stacks.values() for r in c.run.resources}
    for needed in (
        "aws:ec2/launchTemplate:LaunchTemplate",
        storage.S3_PUBLIC_ACCESS_BLOCK,
        storage.S3_ENCRYPTION[0],
        storage.GCS_BUCKET,
        storage.AZURE_ACCOUNT,
        ingress.AWS_INGRESS_RULE,
        ingress.GCP_FIREWALL,
        ingress.AZURE_NSG,
        "aws:iam/rolePolicy:RolePolicy",
        "gcp:projects/iAMMember:IAMMember",
        "gcp:projects/iAMCustomRole:IAMCustomRole",
        iam.AZURE_ROLE_DEFINITION,
        "gcp:compute/instanceTemplate:InstanceTemplate",
        "azure-native:compute:VirtualMachineScaleSet",
    ):
        assert needed in types, needed
    # and user-data is really decoded: the AWS one is gzip+base64 cloud-config, as infra/userdata.py makes it
    lt = stacks["prod"].one("aws:ec2/launchTemplate:LaunchTemplate", "main-lt")
    layers = list(userdata.decode_user_data(lt.inputs["userData"], "userData", base64_encoded=True))
    assert layers[0][1].startswith("#cloud-config\n")


# --------------------------------------------------------------------------------------------------- IMDSv2


@pytest.mark.parametrize("tokens", ["optional", None])
def test_imdsv2_optional_or_unset_fails(stacks, tokens):
    lt = stacks["dev"].one("aws:ec2/launchTemplate:LaunchTemplate")
    assert resource_violations(imds.POLICY, lt) == []
    found = resource_violations(imds.POLICY, lt, with_input(lt, "metadataOptions.httpTokens", tokens))
    assert len(found) == 1 and "httpTokens" in found[0]


def test_imdsv2_unknown_tokens_cannot_be_judged_in_preview(stacks):
    """An input known only at apply is left to the SDK: it reports "can't run during preview" (advisory)
    and the policy runs again, on known inputs, when `pulumi up` analyzes the resource."""
    lt = stacks["dev"].one("aws:ec2/launchTemplate:LaunchTemplate")
    request = proto.AnalyzeRequest(
        type=lt.type,
        properties=struct(with_input(lt, "metadataOptions.httpTokens", UNKNOWN_STRING_VALUE)),
        urn=lt.urn,
        name=lt.name,
    )
    [diagnostic] = servicer().Analyze(request, None).diagnostics
    assert diagnostic.policyName == imds.NAME and diagnostic.enforcementLevel == proto.ADVISORY
    assert "during preview" in diagnostic.message


# -------------------------------------------------------------------------------------------------- storage


@pytest.mark.parametrize("switch", storage.PUBLIC_ACCESS_SWITCHES)
def test_s3_public_access_block_with_a_switch_off_fails(stacks, switch):
    block = stacks["prod"].one(storage.S3_PUBLIC_ACCESS_BLOCK, "main-ckpt-public-access")
    found = resource_violations(storage.POLICY, block, with_input(block, switch, False))
    assert len(found) == 1 and switch in found[0]


def test_s3_encryption_without_a_default_algorithm_fails(stacks):
    sse = stacks["prod"].one(storage.S3_ENCRYPTION[0], "main-ckpt-encryption")
    assert resource_violations(storage.POLICY, sse, with_input(sse, "rules", [])) != []
    bad = with_input(sse, "rules.0.applyServerSideEncryptionByDefault.sseAlgorithm", "none")
    assert len(resource_violations(storage.POLICY, sse, bad)) == 1


@pytest.mark.parametrize("dropped", [storage.S3_PUBLIC_ACCESS_BLOCK, storage.S3_ENCRYPTION[0]])
def test_s3_bucket_without_its_block_or_encryption_fails_the_stack(stacks, dropped):
    """Both prod buckets (checkpoints, billing export) are covered; drop the checkpoint bucket's public
    access block (or its encryption) and the stack policy names that bucket, and only it."""
    run = stacks["prod"].run
    resources = policy_resources(run)
    assert stack_violations(storage.STACK_POLICY, resources) == []
    kept = [r for r in resources if not (r.resource_type == dropped and r.name.startswith("main-ckpt-"))]
    assert len(kept) == len(resources) - 1
    found = stack_violations(storage.STACK_POLICY, kept)
    assert len(found) == 1 and "S3 bucket main-ckpt " in found[0]


def test_s3_block_found_through_property_dependencies_in_a_preview(stacks):
    """In a preview the block's `bucket` (the bucket's id) is unknown; the engine's property dependencies
    still say which bucket it came from."""
    run = stacks["prod"].run
    block = run.one(storage.S3_PUBLIC_ACCESS_BLOCK, "main-ckpt-public-access")
    props = {block.urn: {**stack_outputs(block), "bucket": UNKNOWN_STRING_VALUE}}
    resources = policy_resources(run, props)
    assert len(stack_violations(storage.STACK_POLICY, resources)) == 1  # no link: the bucket looks unblocked
    by_urn = {r.urn: r for r in resources}
    bucket = run.one("aws:s3/bucket:Bucket", "main-ckpt")
    by_urn[block.urn].property_dependencies = {"bucket": [by_urn[bucket.urn]]}
    assert stack_violations(storage.STACK_POLICY, resources) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("uniformBucketLevelAccess", False),
        ("publicAccessPrevention", "inherited"),
        ("publicAccessPrevention", None),
    ],
)
def test_gcs_bucket_not_private_fails(stacks, path, value):
    bucket = stacks["gcp-dev"].one(storage.GCS_BUCKET)
    assert resource_violations(storage.POLICY, bucket) == []
    assert len(resource_violations(storage.POLICY, bucket, with_input(bucket, path, value))) == 1


def test_gcs_bucket_granted_to_all_users_fails(stacks):
    member = stacks["gcp-dev"].one("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert resource_violations(storage.POLICY, member) == []
    found = resource_violations(storage.POLICY, member, with_input(member, "member", "allUsers"))
    assert len(found) == 1 and "public" in found[0]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("allowBlobPublicAccess", True),
        ("enableHttpsTrafficOnly", False),
        ("minimumTlsVersion", "TLS1_0"),
        ("minimumTlsVersion", None),
        ("encryption", None),
        ("encryption.services.blob.enabled", False),
    ],
)
def test_azure_storage_account_not_private_or_not_encrypted_fails(stacks, path, value):
    for account in stacks["azure-dev"].run.of_type(storage.AZURE_ACCOUNT):  # checkpoints and billing
        assert resource_violations(storage.POLICY, account) == []
        assert len(resource_violations(storage.POLICY, account, with_input(account, path, value))) == 1


# -------------------------------------------------------------------------------------------------- ingress


def test_internet_in_two_halves_fails(stacks):
    """0.0.0.0/1 + 128.0.0.0/1 is the whole IPv4 internet: 2**31 + 2**31 = 2**32 addresses."""
    group = stacks["prod"].one("aws:ec2/securityGroup:SecurityGroup")
    assert resource_violations(ingress.POLICY, group) == []
    rule = {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/1", "128.0.0.0/1"]}
    found = resource_violations(ingress.POLICY, group, with_input(group, "ingress", [rule]))
    assert len(found) == 1 and "4.29e+09 addresses (the whole internet)" in found[0]
    nsg = stacks["azure-dev"].one(ingress.AZURE_NSG)
    assert resource_violations(ingress.POLICY, nsg) == []
    halves = with_input(nsg, "securityRules.0.sourceAddressPrefixes", ["0.0.0.0/1", "128.0.0.0/1"])
    halves["securityRules"][0].pop("sourceAddressPrefix")
    assert len(resource_violations(ingress.POLICY, nsg, halves)) == 1


@pytest.mark.parametrize(
    ("key", "cidr", "fails"),
    [
        ("cidrIpv4", "0.0.0.0/0", True),
        ("cidrIpv6", "::/0", True),
        ("cidrIpv4", "10.0.0.0/8", False),  # exactly the limit: 2**24 addresses
        ("cidrIpv4", "10.0.0.0/7", True),  # 2**25
        ("cidrIpv6", "2001:db8::/32", False),
        ("cidrIpv6", "2001:db8::/31", True),
    ],
)
def test_aws_ingress_rule_wider_than_the_limit_fails(stacks, key, cidr, fails):
    rule = stacks["prod"].one(ingress.AWS_INGRESS_RULE)
    assert resource_violations(ingress.POLICY, rule) == []  # the program's: from the fleet's own group
    inputs = with_input(rule, key, cidr)
    inputs.pop("referencedSecurityGroupId")
    assert bool(resource_violations(ingress.POLICY, rule, inputs)) is fails


def test_internet_split_across_rules_fails_the_stack(stacks):
    """Two rules of one /8 each pass one by one; together they open 2 x 2**24 = 33,554,432 addresses."""
    run = stacks["prod"].run
    rule = run.one(ingress.AWS_INGRESS_RULE)
    assert stack_violations(ingress.STACK_POLICY, policy_resources(run)) == []
    second = copy.deepcopy(rule)
    second.urn, second.name = rule.urn + "-second", rule.name + "-second"
    run2 = ProgramRun(run.stack, [*run.resources, second], run.exports, run.invocations)
    props = {
        rule.urn: {**stack_outputs(rule), "cidrIpv4": "10.0.0.0/8"},
        second.urn: {**stack_outputs(second), "cidrIpv4": "11.0.0.0/8"},
    }
    for urn in props:
        props[urn].pop("referencedSecurityGroupId")
        r = next(x for x in run2.resources if x.urn == urn)
        assert resource_violations(ingress.POLICY, r, props[urn]) == []
    found = stack_violations(ingress.STACK_POLICY, policy_resources(run2, props))
    assert len(found) == 1 and "3.36e+07 addresses" in found[0]


@pytest.mark.parametrize(
    ("change", "fails"),
    [
        ({"sourceRanges": ["0.0.0.0/0"]}, True),
        ({"sourceTags": None}, True),  # no source at all: GCP applies the rule to 0.0.0.0/0
        ({"sourceTags": None, "direction": "EGRESS", "destinationRanges": ["0.0.0.0/0"]}, False),
        ({"sourceRanges": ["0.0.0.0/0"], "allows": None, "denies": [{"protocol": "all"}]}, False),
        ({"sourceRanges": ["0.0.0.0/0"], "disabled": True}, False),
    ],
)
def test_gcp_firewall_open_to_the_internet_fails(stacks, change, fails):
    firewall = stacks["gcp-dev"].one(ingress.GCP_FIREWALL)
    assert resource_violations(ingress.POLICY, firewall) == []
    inputs = copy.deepcopy(firewall.inputs)
    for key, value in change.items():
        if value is None:
            inputs.pop(key, None)
        else:
            inputs[key] = value
    assert bool(resource_violations(ingress.POLICY, firewall, inputs)) is fails


@pytest.mark.parametrize(
    ("prefix", "access", "fails"), [("*", "Allow", True), ("Internet", "Allow", True), ("*", "Deny", False)]
)
def test_azure_nsg_allowing_the_internet_in_fails(stacks, prefix, access, fails):
    nsg = stacks["azure-dev"].one(ingress.AZURE_NSG)
    rules = nsg.inputs["securityRules"]
    i = next(i for i, r in enumerate(rules) if r["name"] == "allow-fleet-subnet")
    inputs = with_input(nsg, f"securityRules.{i}.sourceAddressPrefix", prefix)
    inputs["securityRules"][i]["access"] = access
    assert bool(resource_violations(ingress.POLICY, nsg, inputs)) is fails


def test_aws_security_group_rule_ingress_only():
    rule = DeclaredResource(
        ingress.AWS_SG_RULE,
        "r",
        "urn:pulumi:s::p::aws:ec2/securityGroupRule:SecurityGroupRule::r",
        None,
        True,
        {},
    )
    wide = {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}
    assert len(resource_violations(ingress.POLICY, rule, wide)) == 1
    assert resource_violations(ingress.POLICY, rule, wide | {"type": "egress"}) == []


# ------------------------------------------------------------------------------------------------------ IAM


def _node_policy(stacks) -> tuple[DeclaredResource, dict]:
    policy = stacks["prod"].one("aws:iam/rolePolicy:RolePolicy")
    return policy, json.loads(policy.inputs["policy"])


def _statement(document: dict, sid: str) -> dict:
    return next(s for s in document["Statement"] if s.get("Sid") == sid)


@pytest.mark.parametrize(
    ("sid", "action", "grants"),
    [
        ("ScaleOwnGroup", "autoscaling:UpdateAutoScalingGroup", "autoscaling:updateautoscalinggroup"),
        ("ScaleOwnGroup", "autoscaling:Update*", "autoscaling:updateautoscalinggroup"),
        ("ScaleOwnGroup", "autoscaling:CreateAutoScalingGroup", "autoscaling:createautoscalinggroup"),
        ("DiscoverPeers", "ec2:RunInstances", "ec2:runinstances"),
        ("DiscoverPeers", "iam:PassRole", "iam:*"),
    ],
)
def test_node_role_with_a_forbidden_action_fails(stacks, sid, action, grants):
    resource, document = _node_policy(stacks)
    assert resource_violations(iam.POLICY, resource) == []
    statement = _statement(document, sid)
    statement["Action"] = [statement["Action"], action]
    found = resource_violations(iam.POLICY, resource, {**resource.inputs, "policy": json.dumps(document)})
    assert len(found) == 1 and f"grants {grants}" in found[0] and sid in found[0]


@pytest.mark.parametrize("action", ["*", "s3:*", "autoscaling:*"])
def test_node_role_with_a_wildcard_action_fails(stacks, action):
    resource, document = _node_policy(stacks)
    _statement(document, "ScaleOwnGroup")["Action"] = action
    found = resource_violations(iam.POLICY, resource, {**resource.inputs, "policy": json.dumps(document)})
    assert any("whole service" in m for m in found)


@pytest.mark.parametrize("resource_arn", ["*", "arn:aws:s3:::main-ckpt-52c0e7b/*", "arn:aws:s3:::*/prod/*"])
def test_s3_object_actions_not_under_a_key_prefix_fail(stacks, resource_arn):
    resource, document = _node_policy(stacks)
    statement = _statement(document, "ReadWriteCheckpoints")
    assert statement["Resource"].endswith("/prod/llama-13b/*")  # the program's own: a key prefix
    statement["Resource"] = resource_arn
    found = resource_violations(iam.POLICY, resource, {**resource.inputs, "policy": json.dumps(document)})
    assert len(found) == 1 and "key prefix" in found[0]


def test_allow_with_not_action_fails(stacks):
    resource, document = _node_policy(stacks)
    statement = _statement(document, "DiscoverPeers")
    statement["NotAction"] = statement.pop("Action")
    found = resource_violations(iam.POLICY, resource, {**resource.inputs, "policy": json.dumps(document)})
    assert len(found) == 1 and "NotAction" in found[0]


@pytest.mark.parametrize("role", ["roles/owner", "roles/editor"])
def test_gcp_basic_role_fails(stacks, role):
    member = stacks["gcp-dev"].one("gcp:projects/iAMMember:IAMMember", "gdev-node-group")
    assert resource_violations(iam.POLICY, member) == []
    assert len(resource_violations(iam.POLICY, member, with_input(member, "role", role))) == 1


@pytest.mark.parametrize("permission", ["resourcemanager.projects.setIamPolicy", "iam.serviceAccounts.actAs"])
def test_gcp_custom_role_that_changes_iam_fails(stacks, permission):
    role = stacks["gcp-dev"].one("gcp:projects/iAMCustomRole:IAMCustomRole", "gdev-node-group-role")
    assert resource_violations(iam.POLICY, role) == []
    inputs = with_input(role, "permissions", [*role.inputs["permissions"], permission])
    found = resource_violations(iam.POLICY, role, inputs)
    assert len(found) == 1 and permission in found[0]


@pytest.mark.parametrize(
    ("permission", "why"),
    [
        ("compute.instanceGroupManagers.delete", "beyond what a node needs"),
        ("compute.instanceGroupManagers.create", "beyond what a node needs"),
        ("compute.instances.create", "beyond what a node needs"),
        ("compute.instances.setMetadata", "beyond what a node needs"),
        ("compute.autoscalers.update", "beyond what a node needs"),
        ("compute.instanceGroupManagers.*", "wildcard"),
    ],
)
def test_gcp_node_role_with_a_group_permission_beyond_its_own_fails(stacks, permission, why):
    """Issue 28 #5: a GCP node role holds instanceGroupManagers.get/update and instances.get, nothing else of
    Compute Engine; one more permission on groups or instances is refused, as UpdateAutoScalingGroup is on AWS."""
    role = stacks["gcp-dev"].one("gcp:projects/iAMCustomRole:IAMCustomRole", "gdev-node-group-role")
    assert resource_violations(iam.POLICY, role) == []
    found = resource_violations(iam.POLICY, role, with_input(role, "permissions", [*role.inputs["permissions"], permission]))
    assert len(found) == 1 and permission in found[0] and why in found[0]


@pytest.mark.parametrize("role", ["roles/compute.admin", "roles/compute.instanceAdmin.v1"])
def test_gcp_instance_admin_role_fails(stacks, role):
    member = stacks["gcp-dev"].one("gcp:projects/iAMMember:IAMMember", "gdev-node-group")
    found = resource_violations(iam.POLICY, member, with_input(member, "role", role))
    assert len(found) == 1 and role in found[0]


def test_the_program_grants_gcp_nodes_only_what_the_pack_allows():
    from infra.gcp.iam import NODE_PERMISSIONS

    assert set(NODE_PERMISSIONS) == iam.GCP_NODE_COMPUTE_PERMISSIONS


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("Microsoft.Compute/virtualMachineScaleSets/write", "grants microsoft.compute/virtualmachinescalesets/write"),
        ("Microsoft.Compute/virtualMachineScaleSets/delete", "grants microsoft.compute/virtualmachinescalesets/delete"),
        ("Microsoft.Compute/virtualMachineScaleSets/*", "grants microsoft.compute/virtualmachinescalesets/write"),
        ("Microsoft.Compute/virtualMachineScaleSets/virtualMachines/*", "beyond what a node needs"),
        ("Microsoft.Compute/virtualMachineScaleSets/deallocate/action", "beyond what a node needs"),
        ("Microsoft.Compute/virtualMachineScaleSets/virtualMachines/runCommand/action", "beyond what a node needs"),
        ("Microsoft.Compute/virtualMachines/write", "beyond what a node needs"),
        ("Microsoft.Network/networkInterfaces/write", "beyond what a node needs"),
    ],
)
def test_azure_node_role_with_an_action_beyond_its_own_fails(stacks, action, why):
    """Issue 28 #5: the Azure node role reads its scale set and deletes its instances; `write` (which rewrites the
    whole scale set: model, custom data, capacity up), any wildcard and any other action are refused."""
    definition = stacks["azure-dev"].one(iam.AZURE_ROLE_DEFINITION)
    assert resource_violations(iam.POLICY, definition) == []
    inputs = copy.deepcopy(definition.inputs)
    inputs["permissions"][0]["actions"].append(action)
    found = resource_violations(iam.POLICY, definition, inputs)
    assert len(found) == 1 and action in found[0] and why in found[0]


def test_the_azure_node_role_holds_no_write_and_only_what_the_pack_allows(stacks):
    definition = stacks["azure-dev"].one(iam.AZURE_ROLE_DEFINITION)
    (permission,) = definition.inputs["permissions"]
    actions = {a.lower() for a in permission["actions"]}
    assert actions <= iam.AZURE_NODE_ACTIONS and "microsoft.compute/virtualmachinescalesets/write" not in actions
    assert "microsoft.compute/virtualmachinescalesets/delete/action" in actions and not permission.get("dataActions")


@pytest.mark.parametrize("action", ["*", "Microsoft.Compute/*", "Microsoft.Authorization/*"])
def test_azure_role_definition_with_wildcard_actions_fails(stacks, action):
    definition = stacks["azure-dev"].one(iam.AZURE_ROLE_DEFINITION)
    assert resource_violations(iam.POLICY, definition) == []
    inputs = copy.deepcopy(definition.inputs)
    inputs["permissions"][0]["actions"].append(action)
    assert len(resource_violations(iam.POLICY, definition, inputs)) == 1


def test_azure_owner_assignment_fails(stacks):
    assignment = stacks["azure-dev"].one(iam.AZURE_ROLE_ASSIGNMENT, "adev-own-group")
    assert resource_violations(iam.POLICY, assignment) == []
    owner = assignment.inputs["roleDefinitionId"].rsplit("/", 1)[0] + "/8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
    assert (
        len(resource_violations(iam.POLICY, assignment, with_input(assignment, "roleDefinitionId", owner)))
        == 1
    )


# ------------------------------------------------------------------------------------------------ user-data

# AWS's documented example credentials (https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds.html)
EXAMPLE_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n-----END RSA PRIVATE KEY-----\n"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
ACCOUNT_KEY = base64.b64encode(bytes(range(64))).decode()
SERVICE_ACCOUNT_JSON = json.dumps(
    {"type": "service_account", "project_id": "p", "private_key_id": "0" * 40, "private_key": PEM}
)


def _add_to_cloud_config(text: str, line: str) -> str:
    head, _, rest = text.partition("\n")
    assert head == "#cloud-config"
    return f"{head}\n{line}\n{rest}"


def _add_b64_file(text: str, content: str) -> str:
    document = yaml.safe_load(text)
    document["write_files"].append(
        {
            "path": "/etc/trainfleet/creds",
            "encoding": "b64",
            "content": base64.b64encode(content.encode()).decode(),
        }
    )
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False)


@pytest.mark.parametrize(
    ("secret", "pattern"),
    [
        (f"# export AWS_ACCESS_KEY_ID={EXAMPLE_KEY_ID}", "AWS access key id"),
        (f"# aws_secret_access_key = {EXAMPLE_SECRET}", "AWS secret access key"),
        ("# " + PEM.replace("\n", "\n# "), "private key (PEM)"),
        (f"# GITHUB_TOKEN={GITHUB_TOKEN}", "GitHub token"),
    ],
)
def test_aws_user_data_with_a_secret_fails(stacks, secret, pattern):
    """Into the real launch template's user-data (gzip + base64, as infra/userdata.py encodes it)."""
    lt = stacks["dev"].one("aws:ec2/launchTemplate:LaunchTemplate")
    assert resource_violations(userdata.POLICY, lt) == []
    text = _add_to_cloud_config(gunzip_b64(lt.inputs["userData"]), secret)
    found = resource_violations(userdata.POLICY, lt, with_input(lt, "userData", gzip_b64(text)))
    assert len(found) == 1 and pattern in found[0] and "userData (decoded) line 2 " in found[0]
    assert EXAMPLE_KEY_ID not in found[0] and EXAMPLE_SECRET not in found[0] and GITHUB_TOKEN not in found[0]


def test_secret_in_a_base64_write_files_entry_fails(stacks):
    lt = stacks["dev"].one("aws:ec2/launchTemplate:LaunchTemplate")
    text = _add_b64_file(
        gunzip_b64(lt.inputs["userData"]), f"[default]\naws_secret_access_key = {EXAMPLE_SECRET}\n"
    )
    found = resource_violations(userdata.POLICY, lt, with_input(lt, "userData", gzip_b64(text)))
    assert len(found) == 1 and "write_files" in found[0] and "AWS secret access key" in found[0]


def test_reading_credentials_from_the_environment_is_not_a_secret(stacks):
    """The agent reads AWS_SECRET_ACCESS_KEY from its environment; naming the variable stores nothing."""
    lt = stacks["dev"].one("aws:ec2/launchTemplate:LaunchTemplate")
    line = '# export AWS_SECRET_ACCESS_KEY="$(cat /run/secrets/aws)"; env["AWS_SECRET_ACCESS_KEY"]'
    text = _add_to_cloud_config(gunzip_b64(lt.inputs["userData"]), line)
    assert resource_violations(userdata.POLICY, lt, with_input(lt, "userData", gzip_b64(text))) == []


def test_gcp_user_data_with_a_service_account_key_fails(stacks):
    template = stacks["gcp-dev"].one("gcp:compute/instanceTemplate:InstanceTemplate")
    assert resource_violations(userdata.POLICY, template) == []
    text = _add_to_cloud_config(template.inputs["metadata"]["user-data"], f"# {SERVICE_ACCOUNT_JSON}")
    found = resource_violations(userdata.POLICY, template, with_input(template, "metadata.user-data", text))
    assert {m.split(" holds a ")[1].split(";")[0] for m in found} == {
        'GCP service account key ("private_key")',
        "private key (PEM)",
    }


def test_azure_custom_data_with_a_storage_connection_string_fails(stacks):
    vmss = stacks["azure-dev"].one("azure-native:compute:VirtualMachineScaleSet")
    assert resource_violations(userdata.POLICY, vmss) == []
    path = "virtualMachineProfile.osProfile.customData"
    conn = f"# DefaultEndpointsProtocol=https;AccountName=adevckpt;AccountKey={ACCOUNT_KEY};EndpointSuffix=core.windows.net"
    text = _add_to_cloud_config(
        gunzip_b64(vmss.inputs["virtualMachineProfile"]["osProfile"]["customData"]), conn
    )
    found = resource_violations(userdata.POLICY, vmss, with_input(vmss, path, gzip_b64(text)))
    assert len(found) == 1 and "AccountKey=" in found[0] and ACCOUNT_KEY not in found[0]


# --------------------------------------------------------------------------------------------------- budget

# prod, worked by hand: fleet `main` is 4 x p4de.24xlarge in use1-az6, 1 on-demand + 3 spot
# (infra/catalog/data/offers.csv: on-demand $27.44705/h, spot $8.6505/h), 730 h a month:
#   instances  730 x (27.44705 + 3 x 8.6505)               = 38,980.9415
#   root EBS   4 nodes x 500 GB x $0.08/GB-month (gp3)       =    160.00
#   NAT        730 h x $0.045/h                              =     32.85
#   public IP  730 h x $0.005/h                              =      3.65
#   S3         checkpoints, 182 GB each (13e9 params x 14 B), $0.023 per GB of 2^30 bytes a month
#              (https://aws.amazon.com/s3/pricing/, footnote: S3 bills binary gigabytes):
#                current: 3 kept = 546e9 B = 508.4977 GiB    =     11.6955
#                noncurrent: one every 30 min kept 1 + 1 days = 96 x 182e9 B = 16,272.0680 GiB = 374.2576
#                requests: 1,460 a month x 2,713 parts of 64 MiB x $0.005/1,000 = 19.8049
#              billing 1 GB = 0.9313 GiB                     =      0.0214
#   total                                                    = 39,583.2209
PROD_INSTANCES_USD = 38_980.9415
PROD_TOTAL_USD = 39_583.2209


def _prod_source(stacks) -> budget.StackSource:
    captured = stacks["prod"]
    return budget.StackSource("prod", captured.file.config, captured.file.other_config, "prod")


def test_budget_prices_prod_as_worked_by_hand(stacks):
    estimate = budget.estimate_for(policy_resources(stacks["prod"].run), _prod_source(stacks))
    assert estimate.complete
    assert estimate.monthly_total == pytest.approx(PROD_TOTAL_USD, abs=0.01)


@pytest.mark.parametrize("stack", sorted(STACK_FILES))
def test_budget_prices_every_stack_as_the_offline_preview(stacks, stack):
    """The engine's resources (outputs) priced by the policy come to what `trainfleet preview` prices from
    the program's inputs."""
    from cli.preview.engine import estimate_config

    captured = stacks[stack]
    source = budget.StackSource(stack, captured.file.config, captured.file.other_config, stack)
    mine = budget.estimate_for(policy_resources(captured.run), source)
    theirs = estimate_config(stack, captured.file.config, captured.file.other_config)
    assert mine.complete and mine.monthly_total == pytest.approx(theirs.monthly_total, abs=0.005)


def _prod_file_with_limit(tmp_path: Path, limit: int) -> Path:
    text = STACK_FILES["prod"].read_text()
    assert "    fail_above_usd: 150000\n" in text
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(text.replace("    fail_above_usd: 150000\n", f"    fail_above_usd: {limit}\n"))
    return path


@pytest.mark.parametrize(
    ("limit", "fails"), [(38_900, True), (39_500, True), (39_700, False), (150_000, False)]
)
def test_budget_fails_when_the_stack_costs_more_than_fail_above(stacks, tmp_path, limit, fails):
    """38,900 < the instances alone (38,980.94); 39,500 < the total (39,583.22) < 39,700."""
    path = _prod_file_with_limit(tmp_path, limit)
    found = stack_violations(budget.POLICY, policy_resources(stacks["prod"].run), {"stackFile": str(path)})
    assert bool(found) is fails
    if fails:
        assert len(found) == 1 and f"exceeds the guardrail ${limit:,}" in found[0] and "$39,583" in found[0]


def test_budget_limit_from_policy_config_overrides_the_stack(stacks):
    resources = policy_resources(stacks["prod"].run)
    config = {"stackFile": str(STACK_FILES["prod"]), "failAboveUsd": 38_900}
    [message] = stack_violations(budget.POLICY, resources, config)
    assert "policy config failAboveUsd" in message
    dev = policy_resources(stacks["dev"].run)
    assert stack_violations(budget.POLICY, dev, {"stackFile": str(STACK_FILES["dev"]), "failAboveUsd": 1_000})


def test_budget_reads_the_stack_config_pulumi_gives_the_pack(stacks, tmp_path, monkeypatch):
    """With no policy config, the stack config comes from the engine (PULUMI_CONFIG, objects as JSON text,
    as pulumi.Config reads it in infra/__main__.py), the stack from PULUMI_STACK."""
    document = yaml.safe_load(_prod_file_with_limit(tmp_path, 38_900).read_text())["config"]
    engine_config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in document.items()}
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(engine_config))
    monkeypatch.setenv("PULUMI_STACK", "prod")
    [message] = stack_violations(budget.POLICY, policy_resources(stacks["prod"].run), {})
    assert "the stack's Pulumi config" in message and "exceeds the guardrail $38,900" in message


def test_budget_with_a_broken_engine_config_fails_closed(stacks, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"trainfleet:budget": "{not json"}))
    monkeypatch.setenv("PULUMI_STACK", "prod")
    [message] = stack_violations(budget.POLICY, policy_resources(stacks["prod"].run), {})
    assert "cannot be read" in message and "trainfleet:budget" in message


def test_budget_reads_the_running_stacks_file(stacks, monkeypatch):
    """No engine config and no policy config: stacks/Pulumi.$PULUMI_STACK.yaml (prod: within 150,000)."""
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    monkeypatch.setenv("PULUMI_STACK", "prod")
    source = budget.resolve_stack({})
    assert source.where == str(STACK_FILES["prod"]) and source.config == stacks["prod"].file.config
    assert stack_violations(budget.POLICY, policy_resources(stacks["prod"].run), {}) == []


def test_budget_does_not_apply_without_a_limit(stacks):
    with pytest.raises(_NotApplicableError) as raised:
        stack_violations(
            budget.POLICY, policy_resources(stacks["dev"].run), {"stackFile": str(STACK_FILES["dev"])}
        )
    assert "stack dev sets no trainfleet:budget.fail_above_usd" in (raised.value.reason or "")


def test_budget_with_an_unreadable_stack_file_fails_closed(stacks, tmp_path):
    [message] = stack_violations(
        budget.POLICY, policy_resources(stacks["prod"].run), {"stackFile": str(tmp_path / "Pulumi.nope.yaml")}
    )
    assert "cannot be read" in message


# ----------------------------------------------------------------------------------------------- the pack


def test_the_pack_lists_every_policy_as_mandatory(monkeypatch):
    """policy/__main__.py run as Pulumi runs it (runpy over the folder), with PolicyPack recorded instead of
    serving gRPC."""
    made: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, name, policies, enforcement_level=None, **kwargs):
            made.append({"name": name, "policies": policies, "level": enforcement_level})

    monkeypatch.setattr(pulumi_policy, "PolicyPack", Recorder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    runpy.run_path(str(POLICY_DIR), run_name="__main__")
    [pack] = made
    assert pack["name"] == PACK_NAME and pack["level"] == EnforcementLevel.MANDATORY
    assert [p.name for p in pack["policies"]] == EXPECTED_POLICIES
    for policy in pack["policies"]:
        assert policy.enforcement_level == EnforcementLevel.MANDATORY, policy.name
        assert "https://" in policy.description, policy.name  # each cites the doc it follows


def test_the_engine_sees_every_policy_as_mandatory():
    info = servicer().GetAnalyzerInfo(None, None)
    assert [p.name for p in info.policies] == EXPECTED_POLICIES
    assert {p.enforcementLevel for p in info.policies} == {proto.MANDATORY}
    budget_info = next(p for p in info.policies if p.name == budget.NAME)
    assert set(json_format.MessageToDict(budget_info.configSchema.properties)) == {
        "failAboveUsd",
        "stackFile",
        "stack",
        "usageFile",
    }


def test_policy_project_file():
    project = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert (POLICY_DIR / project["runtime"]["options"]["virtualenv"]).resolve() == ROOT / ".venv"
    assert "pulumi-policy" in (POLICY_DIR / "requirements.txt").read_text()
