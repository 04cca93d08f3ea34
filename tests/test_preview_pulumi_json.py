"""Pricing a real `pulumi preview --json` document, op by op (fixtures shaped as Pulumi's preview digest)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cli.preview.diff import diff_one_preview, diff_preview_files
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED
from cli.preview.pulumi_json import PreviewJsonError, parse_document, price_document, steps
from cli.preview.usage import resolve_usage
from infra.catalog import default_catalog
from tests.conftest import assert_one_line_error

FIXTURES = Path(__file__).parent / "fixtures" / "preview"
REPLACE_DELETE = FIXTURES / "replace-delete.json"
HOURS = 730.0


def spot(instance_type: str, zones: list[str]) -> float:
    offers = default_catalog().offers(cloud="aws", region="us-east-1", instance_type=instance_type)
    return statistics.fmean(o.spot_usd_per_hour for o in offers if o.zone in zones)


def on_demand(instance_type: str) -> float:
    offers = default_catalog().offers(cloud="aws", region="us-east-1", instance_type=instance_type)
    return statistics.fmean(o.on_demand_usd_per_hour for o in offers if o.zone == "use1-az1")


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
    price = spot("p4d.24xlarge", ["use1-az1", "use1-az4"])  # the group's subnets' AZ ids
    # before: 2 nodes and the old template's 200 GB volumes; after: 4 nodes and the replaced template's 500 GB
    assert r.base_monthly == pytest.approx(2 * HOURS * price + 2 * 200 * 0.08)
    assert r.head_monthly == pytest.approx(4 * HOURS * price + 4 * 500 * 0.08)
    assert r.delta == pytest.approx(2 * HOURS * price + (2000 - 400) * 0.08)
    assert {c.path for c in r.changes} >= {"desiredCapacity", "maxSize"}


def test_replace_prices_both_sides(diff):
    r = row(diff, "eval-asg")
    assert r.op == "replace"
    # on-demand (100% above a base of 0), instance type changed by the replacement
    assert r.base_monthly == pytest.approx(HOURS * on_demand("g5.12xlarge"))
    assert r.head_monthly == pytest.approx(HOURS * on_demand("g5.48xlarge"))
    assert r.delta == pytest.approx(HOURS * (on_demand("g5.48xlarge") - on_demand("g5.12xlarge")))
    lt = row(diff, "train-lt")
    assert lt.op == "replace" and lt.status == FREE and lt.delta == 0


def test_delete_removes_its_cost_and_create_adds(diff, usage):
    nat = row(diff, "train-net-nat")
    assert nat.op == "delete" and nat.head is None
    assert nat.delta == pytest.approx(-HOURS * 0.045 - usage["nat_gb_per_month"].value * 0.045)
    bucket = row(diff, "old-ckpt")
    assert bucket.delta == pytest.approx(-usage["checkpoint_gb"].value * 0.023)
    eip = row(diff, "train-net-ip2")
    assert eip.op == "create" and eip.base is None and eip.delta == pytest.approx(HOURS * 0.005)


def test_secrets_and_unknowns_are_not_estimable_never_zero(diff):
    probe = row(diff, "probe-asg")  # desiredCapacity unknown until apply
    assert probe.status == NOT_ESTIMABLE and probe.delta is None and "unknown" in probe.head.reason
    debug = row(diff, "debug")  # instanceType is a secret
    assert debug.status == NOT_ESTIMABLE and debug.delta is None and "secret" in debug.head.reason
    scratch = row(diff, "scratch")  # a type with no pricing function
    assert scratch.status == NOT_PRICED and scratch.delta is None
    assert {r.name for r in diff.unknown_rows} == {"probe-asg", "debug", "scratch"}


def test_totals_are_before_and_after(diff):
    known_after = sum(r.head.monthly_cost or 0 for r in diff.rows if r.head is not None)
    known_before = sum(r.base.monthly_cost or 0 for r in diff.rows if r.base is not None)
    assert diff.head.monthly_total == pytest.approx(known_after)
    assert diff.base.monthly_total == pytest.approx(known_before)
    expected = sum(r.delta for r in diff.rows if r.delta is not None)
    assert diff.monthly_delta == pytest.approx(expected)
    s = diff.summary()
    assert (s["added"], s["removed"], s["changed"], s["replaced"]) == (4, 2, 1, 2)
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
    price = spot("p4d.24xlarge", ["use1-az1", "use1-az4"])
    assert asg.op == "update"
    assert asg.head_monthly == pytest.approx(2 * asg.base_monthly)  # 2 -> 4 nodes, 200 GB each
    assert asg.delta == pytest.approx(2 * HOURS * price + 2 * 200 * 0.08)
    assert row(d, "train-net-ip2").op == "create"
    assert d.monthly_delta == pytest.approx(asg.delta + HOURS * 0.005)
    assert d.count("same") == len(d.rows) - 2


def test_show_replacement_steps_fold_into_one_replace():
    doc = json.loads(REPLACE_DELETE.read_text())
    split = []
    for s in doc["steps"]:
        if s["op"] == "replace":
            split.append({**s, "op": "create-replacement", "oldState": None})
            split.append({**s, "op": "delete-replaced", "newState": None})
        else:
            split.append(s)
    folded = {s.urn: s for s in steps({"steps": split})}
    ev = next(s for u, s in folded.items() if u.endswith("::eval-asg"))
    assert ev.op == "replace" and ev.before is not None and ev.after is not None


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
    assert by_name["train-net-nat"]["monthly_delta"] == pytest.approx(-32.85)
