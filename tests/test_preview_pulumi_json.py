"""Pricing a real `pulumi preview --json` document, op by op (fixtures shaped as Pulumi's preview digest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.preview.diff import diff_one_preview, diff_preview_files
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED
from cli.preview.pulumi_json import PreviewJsonError, parse_document, price_document, steps
from cli.preview.usage import resolve_usage
from tests.conftest import assert_one_line_error
from tests.test_preview_stacks import AWS_IPV4_HOUR, AWS_NAT_HOUR, EBS_GP3, HOURS, S3_STANDARD

FIXTURES = Path(__file__).parent / "fixtures" / "preview"
REPLACE_DELETE = FIXTURES / "replace-delete.json"
# The same preview as `pulumi preview --json --show-replacement-steps` writes it (see fixtures README).
REPLACE_STEPS = FIXTURES / "replace-steps.json"
# prod-pr.json as plain `pulumi preview --json` writes it, without --show-sames.
PR_NO_SAMES = FIXTURES / "prod-pr-no-sames.json"

# Hand-worked unit prices, from the offers.csv rows quoted (cloud,region,zone,type ... on_demand, spot):
#   aws,us-east-1,use1-az1,p4d.24xlarge ... 21.957642,2.465500 ... skypilot-aws
#   aws,us-east-1,use1-az2,p4d.24xlarge ... 21.957642,8.191500 ... skypilot-aws
#   aws,us-east-1,use1-az4,p4d.24xlarge ... 21.957642,8.120300 ... skypilot-aws
#   aws,us-east-1,use1-az6,p4d.24xlarge ... 21.957642,7.879900 ... skypilot-aws
P4D_SPOT_AZ1_AZ4 = (2.4655 + 8.1203) / 2  # = $5.2929/h: train-asg's subnets are in use1-az1 and use1-az4
P4D_SPOT_REGION = (2.4655 + 8.1915 + 8.1203 + 7.8799) / 4  # = $6.6643/h: every us-east-1 zone
#   aws,us-east-1,use1-az1,g5.12xlarge ... 5.672,2.780400 ... skypilot-aws
#   aws,us-east-1,use1-az1,g5.48xlarge ... 16.288,4.540800 ... skypilot-aws
G5_12XL_ON_DEMAND, G5_48XL_ON_DEMAND = 5.672, 16.288  # eval-asg's subnet is in use1-az1
# and list prices from tests/test_preview_stacks.py (each with its pricing-page URL):
# EBS gp3 $0.08/GB-month, NAT gateway $0.045/h, public IPv4 $0.005/h, S3 Standard $0.023 per GiB-month.
# The document has no stack config, so checkpoint GB is the labelled 100 GB default; NAT GB is 0.
NO_STACK_CHECKPOINT_GB = 100

# replace-delete.json, resource by resource (USD/month), before -> after:
TRAIN_ASG_BEFORE = 2 * HOURS * P4D_SPOT_AZ1_AZ4 + 2 * 200 * EBS_GP3  # 7,727.63 + 32 = 7,759.63
TRAIN_ASG_AFTER = 4 * HOURS * P4D_SPOT_AZ1_AZ4 + 4 * 500 * EBS_GP3  # 15,455.27 + 160 = 15,615.27
EVAL_ASG_BEFORE = 1 * HOURS * G5_12XL_ON_DEMAND  # 4,140.56
EVAL_ASG_AFTER = 1 * HOURS * G5_48XL_ON_DEMAND  # 11,890.24
NAT = HOURS * AWS_NAT_HOUR  # 32.85, deleted
# deleted, unversioned: its 100 GB, and the write requests of the 1,460 checkpoints a month it would take
# (one every 30 min, trainfleet's default) of 100/3 GB each (keep_last 3), in ceil(33.3e9 / 64 MiB) = 497
# parts at $0.005 per 1,000 PUTs (https://aws.amazon.com/s3/pricing/): 100 GB = 93.13 GiB, 2.1420 + 3.6281 = 5.7701
OLD_CKPT_WRITES = 1460 * 497 * 0.005 / 1000
OLD_CKPT = NO_STACK_CHECKPOINT_GB * S3_STANDARD + OLD_CKPT_WRITES
NEW_IP = HOURS * AWS_IPV4_HOUR  # 3.65, created
BEFORE_TOTAL = TRAIN_ASG_BEFORE + EVAL_ASG_BEFORE + NAT + OLD_CKPT  # 11,938.81
AFTER_TOTAL = TRAIN_ASG_AFTER + EVAL_ASG_AFTER + NEW_IP  # 27,509.16 (probe-asg, debug, scratch unknown)


def test_hand_worked_document_totals():
    assert round(BEFORE_TOTAL, 3) == 11938.814
    assert round(AFTER_TOTAL, 3) == 27509.158
    assert round(AFTER_TOTAL - BEFORE_TOTAL, 3) == 15570.344


@pytest.fixture(scope="module")
def usage():
    return resolve_usage(None)


@pytest.fixture(scope="module")
def diff(usage):
    return diff_one_preview(REPLACE_DELETE, usage)


def row(diff, name):
    found = [r for r in diff.rows if r.name == name]
    assert len(found) == 1, name
    return found[0]


def test_fixture_is_a_pulumi_preview_digest():
    doc = json.loads(REPLACE_DELETE.read_text())
    assert set(doc) >= {"steps", "changeSummary", "config"}
    for s in doc["steps"]:
        assert s["urn"].startswith("urn:pulumi:prod::trainfleet::") and s["op"]
        assert "newState" in s or "oldState" in s
    ops = {s["op"] for s in doc["steps"]}
    assert {"replace", "delete", "create", "update", "same"} <= ops


def test_ops_fold_into_before_and_after():
    all_steps = {s.urn.rsplit("::", 1)[-1]: s for s in steps(json.loads(REPLACE_DELETE.read_text()))}
    assert "trainfleet-prod" not in all_steps  # the stack resource is not a cost
    nat = all_steps["train-net-nat"]
    assert nat.op == "delete" and nat.before is not None and nat.after is None
    eip = all_steps["train-net-ip2"]
    assert eip.op == "create" and eip.before is None and eip.after is not None
    ev = all_steps["eval-asg"]
    assert ev.op == "replace" and ev.before.inputs != ev.after.inputs and ev.diff_keys == ["name"]


def test_update_prices_old_and_new_state(diff):
    r = row(diff, "train-asg")
    assert r.op == "update"
    # before: 2 nodes and the old template's 200 GB volumes; after: 4 nodes and the replaced template's 500 GB
    assert r.base_monthly == pytest.approx(TRAIN_ASG_BEFORE)
    assert r.head_monthly == pytest.approx(TRAIN_ASG_AFTER)
    assert r.delta == pytest.approx(7855.634)  # 15,615.268 - 7,759.634
    assert {c.path for c in r.changes} >= {"desiredCapacity", "maxSize"}


def test_replace_prices_both_sides(diff):
    r = row(diff, "eval-asg")
    assert r.op == "replace"
    # on-demand (100% above a base of 0), instance type changed by the replacement
    assert r.base_monthly == pytest.approx(EVAL_ASG_BEFORE)
    assert r.head_monthly == pytest.approx(EVAL_ASG_AFTER)
    assert r.delta == pytest.approx(7749.68)  # 730 h x (16.288 - 5.672)
    lt = row(diff, "train-lt")
    assert lt.op == "replace" and lt.status == FREE and lt.delta == 0


def test_delete_removes_its_cost_and_create_adds(diff, usage):
    nat = row(diff, "train-net-nat")
    assert nat.op == "delete" and nat.head is None
    assert usage["nat_gb_per_month"].value == 0
    assert nat.delta == pytest.approx(-NAT) and nat.delta == pytest.approx(-32.85)
    bucket = row(diff, "old-ckpt")
    assert usage["checkpoint_gb"].value == NO_STACK_CHECKPOINT_GB
    assert bucket.delta == pytest.approx(-OLD_CKPT) and bucket.delta == pytest.approx(-5.7701, abs=1e-4)
    eip = row(diff, "train-net-ip2")
    assert eip.op == "create" and eip.base is None and eip.delta == pytest.approx(NEW_IP)


def test_secrets_and_unknowns_are_not_estimable_never_zero(diff):
    # Pulumi writes a secret as the string "[secret]" and a value unknown until apply as the
    # UnknownStringValue 04da6b54-...: pulumi/pulumi pkg/backend/display/json.go (massagePropertyValue)
    probe = row(diff, "probe-asg")  # desiredCapacity unknown until apply
    assert probe.status == NOT_ESTIMABLE and probe.delta is None and "unknown" in probe.head.reason
    debug = row(diff, "debug")  # instanceType is a secret
    assert debug.status == NOT_ESTIMABLE and debug.delta is None and "secret" in debug.head.reason
    scratch = row(diff, "scratch")  # a type with no pricing function
    assert scratch.status == NOT_PRICED and scratch.delta is None
    assert {r.name for r in diff.unknown_rows} == {"probe-asg", "debug", "scratch"}


def test_totals_are_before_and_after(diff):
    assert diff.base.monthly_total == pytest.approx(BEFORE_TOTAL)
    assert diff.head.monthly_total == pytest.approx(AFTER_TOTAL)
    assert diff.monthly_delta == pytest.approx(AFTER_TOTAL - BEFORE_TOTAL)
    s = diff.summary()
    assert (s["added"], s["removed"], s["changed"], s["replaced"]) == (4, 2, 1, 2)
    assert s["monthly_delta"] == 15570.35  # 27,509.16 - 11,938.81 as shown (exact: 15,570.344)
    assert not s["complete"]


def test_region_comes_from_the_preview_config(usage):
    doc = json.loads(REPLACE_DELETE.read_text())
    with_region = price_document(doc, "with.json", usage)
    asg = next(r for r in with_region.after.resources if r.resource.name == "train-asg")
    assert asg.status == PRICED
    doc.pop("config")
    without = price_document(doc, "without.json", usage)
    asg = next(r for r in without.after.resources if r.resource.name == "train-asg")
    assert asg.status == NOT_ESTIMABLE and "region" in asg.reason


def test_two_preview_documents_diff_by_their_after_states(usage):
    d = diff_preview_files(FIXTURES / "prod-main.json", FIXTURES / "prod-pr.json", usage)
    asg = row(d, "train-asg")
    assert asg.op == "update"
    # prod-main: 2 nodes; prod-pr: 4 nodes; both with the same 200 GB template
    assert asg.base_monthly == pytest.approx(2 * HOURS * P4D_SPOT_AZ1_AZ4 + 2 * 200 * EBS_GP3)  # 7,759.63
    assert asg.head_monthly == pytest.approx(4 * HOURS * P4D_SPOT_AZ1_AZ4 + 4 * 200 * EBS_GP3)  # 15,519.27
    assert row(d, "train-net-ip2").op == "create"
    assert row(d, "train-net-nat").delta == 0  # in both documents
    # base: ASG 7,759.634 + NAT 32.85; head: ASG 15,519.268 + NAT 32.85 + new IPv4 3.65
    assert d.base.monthly_total == pytest.approx(7792.484)
    assert d.head.monthly_total == pytest.approx(15555.768)
    assert d.monthly_delta == pytest.approx(7763.284)
    assert d.count("same") == len(d.rows) - 2


def test_show_replacement_steps_count_a_replace_once(usage):
    """`--show-replacement-steps` adds the non-logical create-replacement and delete-replaced steps next to
    the logical replace (pulumi/pulumi pkg/backend/display: shouldShow hides `!step.Logical` steps from JSON
    unless ShowReplacementSteps), and a create-replacement carries the old state too (CreateStep.Old()).
    Three steps, one resource: before and after each count it once."""
    raw = json.loads(REPLACE_STEPS.read_text())["steps"]
    eval_ops = [s["op"] for s in raw if s["urn"].endswith("::eval-asg")]
    assert eval_ops == ["create-replacement", "replace", "delete-replaced"]
    d = diff_one_preview(REPLACE_STEPS, usage)
    ev = row(d, "eval-asg")
    assert ev.op == "replace" and ev.base is not None and ev.head is not None
    assert ev.base_monthly == pytest.approx(EVAL_ASG_BEFORE) and ev.head_monthly == pytest.approx(
        EVAL_ASG_AFTER
    )
    assert d.base.monthly_total == pytest.approx(BEFORE_TOTAL)
    assert d.head.monthly_total == pytest.approx(AFTER_TOTAL)
    assert d.monthly_delta == pytest.approx(15570.344)
    assert d.summary()["replaced"] == 2 and len(d.rows) == len(row_names(REPLACE_DELETE))


def row_names(path: Path) -> set[str]:
    return {s.urn for s in steps(json.loads(path.read_text()))}


def test_a_document_without_sames_prices_fleets_over_the_whole_region(usage):
    """Plain `pulumi preview --json` leaves out unchanged resources (shouldShow returns ShowSameResources for
    OpSame), so the group's subnets are not in the document: its zones are unknown and spot is the mean over
    every zone of the region the document's config names (aws:region us-east-1)."""
    doc = json.loads(PR_NO_SAMES.read_text())
    assert {s["op"] for s in doc["steps"][1:]} == {"update", "create"}
    priced = price_document(doc, str(PR_NO_SAMES), usage)
    asg = next(r for r in priced.after.resources if r.resource.name == "train-asg")
    spot_line = next(c for c in asg.components if c.name == "p4d.24xlarge spot (4 nodes)")
    assert spot_line.unit_price == pytest.approx(P4D_SPOT_REGION)  # 6.6643, not the two zones' 5.2929
    assert spot_line.monthly_cost == pytest.approx(4 * HOURS * P4D_SPOT_REGION)  # 19,459.76
    assert "every zone of the region" in spot_line.note


def test_bad_documents_are_one_clear_error(tmp_path, trainfleet):
    with pytest.raises(PreviewJsonError, match="not JSON"):
        parse_document("{", "x.json")
    with pytest.raises(PreviewJsonError, match="steps"):
        parse_document("[]", "x.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"steps": [{"op": "explode", "urn": "urn:pulumi:a::b::c::d"}]}))
    assert_one_line_error(trainfleet("preview", "--pulumi-json", str(bad)), "explode", "known ops")
    assert_one_line_error(
        trainfleet("preview", "--pulumi-json", str(tmp_path / "none.json")), "does not exist"
    )


def test_preview_cli_prices_a_document(trainfleet):
    result = trainfleet("preview", "--pulumi-json", str(REPLACE_DELETE), "--json")
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["diff"]["summary"]["replaced"] == 2
    by_name = {r["name"]: r for r in data["diff"]["resources"]}
    assert by_name["probe-asg"]["monthly_delta"] is None and by_name["probe-asg"]["status"] == NOT_ESTIMABLE
    assert by_name["train-net-nat"]["monthly_delta"] == pytest.approx(-32.85)  # 730 h x $0.045
    assert data["diff"]["summary"]["monthly_delta"] == pytest.approx(15570.35, abs=0.005)
