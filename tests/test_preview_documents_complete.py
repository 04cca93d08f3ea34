"""A preview document never prices less than it says: left-out unchanged resources, steps without state,
`read` steps and explicit providers (issue 17, items 1, 2, 5 and 8).

Every expected value is worked by hand below from the catalog rows and list prices quoted in
tests/test_preview_pulumi_json.py (and, for us-west-2, the offers.csv rows quoted here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cli.preview.diff import diff_one_preview, diff_preview_files
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED
from cli.preview.pulumi_json import absent_unchanged, price_document
from cli.preview.usage import resolve_usage
from tests.conftest import assert_one_line_error
from tests.test_preview_pulumi_json import P4D_SPOT_AZ1_AZ4, row
from tests.test_preview_stacks import AWS_IPV4_HOUR, AWS_NAT_HOUR, EBS_GP3, HOURS

FIXTURES = Path(__file__).parent / "fixtures" / "preview"
MAIN, PR, PR_NO_SAMES = (FIXTURES / f for f in ("prod-main.json", "prod-pr.json", "prod-pr-no-sames.json"))
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

# prod-main (2 nodes) -> prod-pr (4 nodes, one more IPv4), by hand:
BASE_ASG = 2 * HOURS * P4D_SPOT_AZ1_AZ4 + 2 * 200 * EBS_GP3  # 7,759.634
HEAD_ASG = 4 * HOURS * P4D_SPOT_AZ1_AZ4 + 4 * 200 * EBS_GP3  # 15,519.268
NAT = HOURS * AWS_NAT_HOUR  # 32.85 on both sides
NEW_IP = HOURS * AWS_IPV4_HOUR  # 3.65
TRUE_DELTA = HEAD_ASG - BASE_ASG + NEW_IP  # 7,763.284


@pytest.fixture(scope="module")
def usage():
    return resolve_usage(None)


def test_the_hand_worked_delta():
    assert round(TRUE_DELTA, 3) == 7763.284


def test_a_head_document_without_sames_is_completed_from_the_base_state(usage):
    """The documented PR workflow's case: the base previewed with --show-sames, the head without. Unchanged
    resources are the deployed ones, not deletions, and the ASG's subnets are known again."""
    d = diff_preview_files(MAIN, PR_NO_SAMES, usage)
    assert d.count("delete") == 0 and d.count("create") == 1 and d.count("update") == 1
    assert d.count("same") == 6  # the fleet, 2 subnets, launch template, NAT, budget
    assert row(d, "train-asg").head_monthly == pytest.approx(HEAD_ASG)  # the 2 zones, not the region mean
    assert row(d, "train-net-nat").delta == 0
    assert d.monthly_delta == pytest.approx(TRUE_DELTA)
    assert d.head.monthly_total == pytest.approx(HEAD_ASG + NAT + NEW_IP)
    full = diff_preview_files(MAIN, PR, usage)
    # the same figures; only the head's name differs (and the note naming it: neither carries a stack config)
    assert d.summary() | {"head": "", "expected_job_usd": ""} == full.summary() | {"head": "", "expected_job_usd": ""}


def test_a_base_document_without_sames_is_completed_from_the_head_state(tmp_path, usage):
    """Symmetric: the head has every resource, the base leaves its sames out (prod-main has no changes, so
    without --show-sames only its root stack step stays)."""
    doc = json.loads(MAIN.read_text())
    doc["steps"] = doc["steps"][:1]
    bare = tmp_path / "main-no-sames.json"
    bare.write_text(json.dumps(doc))
    assert absent_unchanged(doc) == 7
    d = diff_preview_files(bare, PR, usage)
    assert d.base.monthly_total == pytest.approx(BASE_ASG + NAT)
    assert d.monthly_delta == pytest.approx(TRUE_DELTA)


def test_two_documents_without_sames_are_refused_in_one_line(tmp_path, trainfleet):
    doc = json.loads(MAIN.read_text())
    doc["steps"] = doc["steps"][:1]
    bare = tmp_path / "main-no-sames.json"
    bare.write_text(json.dumps(doc))
    result = trainfleet("diff", "--base", str(bare), "--head", str(PR_NO_SAMES))
    assert_one_line_error(result, "both leave out unchanged resources", "--show-sames")


def test_one_document_without_sames_says_its_totals_are_partial(usage, trainfleet):
    d = diff_one_preview(PR_NO_SAMES, usage)
    # changeSummary counts 7 sames, the root stack's among them, whose step the document keeps
    assert d.head.absent == 6 and not d.head.complete
    result = trainfleet("preview", "--pulumi-json", str(PR_NO_SAMES), "--json")
    assert result.code == 0, result.stderr
    assert result.json()["estimate"]["absent_unchanged"] == 6
    assert result.json()["estimate"]["complete"] is False
    # a guardrail over a total that leaves resources out would pass for the wrong reason
    guarded = trainfleet("preview", "--pulumi-json", str(PR_NO_SAMES), "--fail-above", "1000000")
    assert_one_line_error(guarded, "leaves out 6 unchanged", "--show-sames")


# A FinFocus-style document: every step names its resource by op and URN only, no oldState/newState.
STATELESS_OPS = ["create"] * 3 + ["update"] * 3 + ["replace"] * 2 + ["delete"] * 2
STATELESS_TYPES = [
    "aws:autoscaling/group:Group", "aws:s3/bucketV2:BucketV2", "aws:ec2/vpc:Vpc",
    "aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip", "aws:iam/role:Role",
    "aws:ec2/instance:Instance", "aws:ecs/service:Service", "aws:ec2/natGateway:NatGateway",
    "aws:ec2/subnet:Subnet",
]  # fmt: skip


def stateless_document() -> dict:
    stack = "urn:pulumi:dev::demo::pulumi:pulumi:Stack::demo-dev"
    steps = [{"op": "same", "urn": stack}]
    for n, (op, type_) in enumerate(zip(STATELESS_OPS, STATELESS_TYPES, strict=True)):
        steps.append({"op": op, "urn": f"urn:pulumi:dev::demo::{type_}::r{n}"})
    summary = {"create": 3, "update": 3, "replace": 2, "delete": 2, "same": 1}
    return {"steps": steps, "changeSummary": summary, "config": {"aws:region": "us-east-1"}}


def test_steps_without_state_are_never_a_silent_zero(tmp_path, usage, trainfleet):
    doc = stateless_document()
    priced = price_document(doc, "stateless.json", usage)
    after = {r.resource.name: r for r in priced.after.resources}
    assert len(after) == 8  # 3 creates, 3 updates, 2 replaces; the deletes are before-only
    estimable = [r for r in after.values() if r.status == NOT_ESTIMABLE]
    # ASG, bucket, NAT, EIP, instance: a pricing function exists but there is nothing to give it
    assert sorted(r.resource.name for r in estimable) == ["r0", "r1", "r3", "r4", "r6"]
    assert all("carries no state" in r.reason for r in estimable)
    assert after["r2"].status == FREE and after["r5"].status == FREE  # a VPC and a role are free by type
    assert after["r7"].status == NOT_PRICED  # ECS service: no pricing function
    assert not priced.after.complete
    path = tmp_path / "stateless.json"
    path.write_text(json.dumps(doc))
    # the guardrail at $0 no longer passes silently: --fail-on-unpriced fails closed, naming the types
    result = trainfleet("preview", "--pulumi-json", str(path), "--fail-above", "0", "--fail-on-unpriced")
    assert result.code == 1, result.stderr
    assert (
        "5 not estimable (aws:autoscaling/group:Group, aws:ec2/eip:Eip, aws:ec2/instance:Instance, aws:ec2/natGateway:NatGateway, +1 more type)"
        in result.stderr
    )
    assert "1 not priced (aws:ecs/service:Service)" in result.stderr
    data = trainfleet("preview", "--pulumi-json", str(path), "--json").json()
    assert data["estimate"]["complete"] is False
    assert data["estimate"]["unknown_by_type"]["not priced"] == {"aws:ecs/service:Service": 1}


def test_read_steps_are_external_and_never_in_the_totals(usage):
    """`aws.ec2.NatGateway.get(...)` in a program is a `read` step: the gateway exists and bills someone,
    but not this stack (pulumi's ReadStep; `discard` drops such a read)."""
    doc = json.loads(MAIN.read_text())
    nat = next(s for s in doc["steps"] if s["urn"].endswith("::train-net-nat"))
    nat["op"] = "read"
    priced = price_document(doc, str(MAIN), usage)
    ext = next(r for r in priced.after.resources if r.resource.name == "train-net-nat")
    assert ext.status == FREE and "read, not managed" in ext.reason
    assert priced.after.monthly_total == pytest.approx(BASE_ASG)  # the NAT's 32.85 is not counted
    nat["op"] = "discard"
    gone = price_document(doc, str(MAIN), usage)
    assert gone.before.monthly_total == pytest.approx(BASE_ASG)


# offers.csv, p4d.24xlarge spot in us-west-2 (skypilot-aws rows 1295-1298): usw2-az1..az4
P4D_SPOT_USW2 = (7.9992 + 8.2259 + 9.7315 + 8.4794) / 4  # = $8.6090/h


def test_an_explicit_providers_region_prices_its_resources(usage):
    """A resource created with `opts=ResourceOptions(provider=aws.Provider("usw2", region="us-west-2"))`: its
    step names that provider, whose own step holds the region. The config's aws:region is us-east-1."""
    doc = json.loads(MAIN.read_text())
    provider_urn = "urn:pulumi:prod::trainfleet::pulumi:providers:aws::usw2"
    doc["steps"].insert(
        1,
        {"op": "same", "urn": provider_urn, "newState": {
            "urn": provider_urn, "custom": True, "id": "2c9b-usw2", "type": "pulumi:providers:aws",
            "inputs": {"region": "us-west-2", "version": "7.11.0"}, "outputs": {"region": "us-west-2"}}},
    )  # fmt: skip
    asg = next(s for s in doc["steps"] if s["urn"].endswith("::train-asg"))
    asg["provider"] = asg["newState"]["provider"] = f"{provider_urn}::2c9b-usw2"
    asg["newState"]["inputs"]["vpcZoneIdentifiers"] = [UNKNOWN]  # zones unknown: the region's mean
    asg.pop("oldState", None)
    priced = price_document(doc, str(MAIN), usage)
    group = next(r for r in priced.after.resources if r.resource.name == "train-asg")
    spot = next(c for c in group.components if "spot" in c.name)
    assert spot.unit_price == pytest.approx(P4D_SPOT_USW2)
    secret = copy.deepcopy(doc)
    secret["steps"][1]["newState"]["inputs"]["region"] = "[secret]"
    secret["steps"][1]["newState"]["outputs"] = {}
    hidden = price_document(secret, str(MAIN), usage)
    group = next(r for r in hidden.after.resources if r.resource.name == "train-asg")
    assert group.status == NOT_ESTIMABLE and "region of its provider usw2" in group.reason


def test_absent_unchanged_counts_only_what_the_summary_counts():
    assert absent_unchanged({"steps": [], "changeSummary": {"same": 3}}) == 3
    assert absent_unchanged({"steps": [{"op": "same"}] * 3, "changeSummary": {"same": 3}}) == 0
    assert absent_unchanged({"steps": []}) == 0
    assert absent_unchanged({"steps": [], "changeSummary": {"same": "3"}}) == 0

def test_what_neither_document_names_is_left_out_of_the_totals_and_said():
    from cli.preview.pulumi_json import complete_from, still_absent

    assert complete_from([], []) == ([], 0)
    assert still_absent(5, 0) == 5  # five unchanged resources nobody listed: the totals say so
    assert still_absent(5, 4) == 0  # the fifth is the root stack's own `same`, which changeSummary may count


def test_an_autoscaled_group_without_desired_capacity_is_priced_at_its_maximum(usage):
    """Issue 17 item 7: maxSize 16 x p4de with no desiredCapacity was reported free and complete. The group
    can run 16 nodes: 16 x 730 h x the spot mean of its zones, and the line says why."""
    doc = json.loads(MAIN.read_text())
    asg = next(s for s in doc["steps"] if s["urn"].endswith("::train-asg"))
    for state in (asg["oldState"], asg["newState"]):
        state["inputs"].pop("desiredCapacity")
        state["inputs"].update({"minSize": 0, "maxSize": 16})
    priced = price_document(doc, str(MAIN), usage)
    group = next(r for r in priced.after.resources if r.resource.name == "train-asg")
    spot = next(c for c in group.components if "spot" in c.name)
    assert spot.name == "p4d.24xlarge spot (16 nodes)"
    assert spot.monthly_cost == pytest.approx(16 * HOURS * P4D_SPOT_AZ1_AZ4)  # 61,821.07
    assert "no desiredCapacity: priced at maxSize 16" in spot.note


def test_a_usage_file_sizes_an_autoscaled_group(tmp_path, trainfleet):
    doc = json.loads(MAIN.read_text())
    asg = next(s for s in doc["steps"] if s["urn"].endswith("::train-asg"))
    for state in (asg["oldState"], asg["newState"]):
        state["inputs"].pop("desiredCapacity")
        state["inputs"].update({"minSize": 0, "maxSize": 16})
    path = tmp_path / "autoscaled.json"
    path.write_text(json.dumps(doc))
    usage = tmp_path / "usage.yaml"
    usage.write_text("group_nodes:\n  train-asg: 5\n")
    data = trainfleet("preview", "--pulumi-json", str(path), "--usage-file", str(usage), "--json").json()
    group = next(r for r in data["estimate"]["resources"] if r["name"] == "train-asg")
    spot = next(c for c in group["components"] if "spot" in c["name"])
    assert spot["name"] == "p4d.24xlarge spot (5 nodes)" and "group_nodes" in spot["note"]
    assert spot["monthly_cost"] == pytest.approx(5 * HOURS * P4D_SPOT_AZ1_AZ4, abs=1e-3)
    assert data["estimate"]["usage"]["group_nodes:train-asg"]["value"] == 5
    usage.write_text("group_nodes:\n  train-asg: -1\n")
    bad = trainfleet("preview", "--pulumi-json", str(path), "--usage-file", str(usage))
    assert_one_line_error(bad, "group_nodes")


def test_a_buckets_region_is_what_the_cloud_reported(usage):
    """Issue 17 item 5: a bucket created without a region input lives where its provider put it; a preview's
    state reports it in the outputs (`region`), and that is the region priced, not the config's."""
    doc = {
        "config": {"aws:region": "us-east-1"},
        "changeSummary": {"same": 1},
        "steps": [{"op": "same", "urn": "urn:pulumi:prod::p::aws:s3/bucketV2:BucketV2::data", "newState": {
            "type": "aws:s3/bucketV2:BucketV2", "custom": True, "id": "data-1",
            "inputs": {"bucket": "data-1"}, "outputs": {"bucket": "data-1", "region": "eu-west-1"}}}],
    }  # fmt: skip
    priced = price_document(doc, "bucket.json", usage)
    (bucket,) = priced.after.resources
    storage = next(c for c in bucket.components if "current" in c.name)
    assert storage.note.startswith("us-east-1 list price used for eu-west-1")
