"""The cost diff's arithmetic on two small estimates worked by hand: per-resource monthly and job deltas,
totals, "complete", and which changes count as unknown. (tests/test_diff_stacks.py diffs real stacks and
preview documents end to end; these pin each rule on its own.)"""

from __future__ import annotations

import json
import subprocess

import pytest

from cli.preview.diff import diff_estimates, git_show
from cli.preview.model import (
    FREE,
    NOT_ESTIMABLE,
    NOT_PRICED,
    PRICED,
    CostComponent,
    Estimate,
    FleetExpectation,
    PricedResource,
    Resource,
    money_round,
)  # fmt: skip
from infra.errors import TrainfleetError


def priced(name: str, monthly: float, job: float, inputs: dict | None = None) -> PricedResource:
    res = Resource("aws:autoscaling/group:Group", name, f"urn:pulumi:dev::tf::aws:autoscaling/group:Group::{name}",
                   inputs=inputs or {})  # fmt: skip
    return PricedResource(
        res, PRICED, [CostComponent("nodes", "node-hour", None, None, "hand", monthly, None, job)]
    )


def unknown(name: str, inputs: dict | None = None) -> PricedResource:
    res = Resource("aws:ec2/natGateway:NatGateway", name, f"urn:pulumi:dev::tf::aws:ec2/natGateway:NatGateway::{name}",
                   inputs=inputs or {})  # fmt: skip
    return PricedResource(res, NOT_ESTIMABLE, reason="region is a secret")


def estimate(*resources: PricedResource) -> Estimate:
    return Estimate("dev", "hand", list(resources))


def test_deltas_are_head_minus_base_per_resource_and_in_total():
    # base: train $1,000/month ($300 job), logs $50 ($5); head: train $1,500 ($420), logs gone, cache $20 ($2)
    base = estimate(priced("train", 1000, 300, {"maxSize": 2}), priced("logs", 50, 5))
    head = estimate(priced("train", 1500, 420, {"maxSize": 3}), priced("cache", 20, 2))
    diff = diff_estimates(base, head, "main", "pr")
    rows = {r.name: r for r in diff.rows}
    assert (rows["train"].op, rows["train"].delta, rows["train"].list_job_delta) == ("update", 500, 120)
    assert (rows["logs"].op, rows["logs"].delta, rows["logs"].list_job_delta) == ("delete", -50, -5)
    assert (rows["cache"].op, rows["cache"].delta, rows["cache"].list_job_delta) == ("create", 20, 2)
    summary = diff.summary()
    assert (summary["monthly_delta"], summary["list_job_usd"]["delta"]) == (1520 - 1050, 422 - 305)
    assert (summary["added"], summary["removed"], summary["changed"], summary["unchanged"]) == (1, 1, 1, 0)
    assert [c.to_json() for c in rows["train"].changes] == [{"path": "maxSize", "base": 2, "head": 3}]


def test_an_unknown_side_leaves_the_delta_unknown_never_a_guess():
    base = estimate(priced("train", 1000, 300), unknown("nat", {"a": 1}))
    head = estimate(priced("train", 1000, 300), unknown("nat", {"a": 2}))
    diff = diff_estimates(base, head, "main", "pr")
    nat = next(r for r in diff.rows if r.name == "nat")
    assert nat.delta is None and nat.list_job_delta is None
    assert diff.summary()["not_estimable_changes"] == 1


def test_an_unchanged_unknown_resource_is_not_an_unknown_change():
    base = estimate(priced("train", 1000, 300), unknown("nat"))
    head = estimate(priced("train", 1100, 330, {"maxSize": 3}), unknown("nat"))
    assert diff_estimates(base, head, "main", "pr").summary()["not_estimable_changes"] == 0


@pytest.mark.parametrize("unknown_side", ["base", "head"])
def test_the_diff_is_complete_only_when_both_sides_are(unknown_side):
    known, gap = estimate(priced("train", 1, 1)), estimate(priced("train", 1, 1), unknown("nat"))
    base, head = (gap, known) if unknown_side == "base" else (known, gap)
    assert diff_estimates(base, head, "main", "pr").summary()["complete"] is False
    assert diff_estimates(known, known, "main", "pr").summary()["complete"] is True


def test_a_free_resource_costs_zero_on_both_sides():
    res = Resource(
        "aws:s3/bucketPolicy:BucketPolicy", "p", "urn:pulumi:dev::tf::aws:s3/bucketPolicy:BucketPolicy::p"
    )
    free = PricedResource(res, FREE, reason="policies are free")
    diff = diff_estimates(estimate(free), estimate(), "main", "pr")
    assert (diff.rows[0].op, diff.rows[0].delta) == ("delete", 0.0)


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)  # fmt: skip


@pytest.mark.parametrize("target", ["../outside.yaml", "../../etc/passwd", ".."])
def test_a_symlink_leaving_the_repository_at_the_base_ref_is_refused(tmp_path, target):
    repo = tmp_path / "repo"
    (repo / "stacks").mkdir(parents=True)
    (repo / "Pulumi.dev.yaml").write_text("config: {}\n")
    # stacks/Pulumi.dev.yaml -> ../outside.yaml is stacks/../outside.yaml = outside.yaml: inside. The targets
    # below climb out of the repository from the top folder.
    (repo / "Pulumi.link.yaml").symlink_to(target)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    with pytest.raises(TrainfleetError, match="outside the repository"):
        git_show("main", repo / "Pulumi.link.yaml")


def test_unknown_changes_are_counted_by_what_they_are():
    """A type with no pricing function is "not priced", an input unknown until apply "not estimable": the
    summary never calls one the other (issue 17 item 10)."""
    gone = PricedResource(
        Resource("aws:ecs/service:Service", "svc", "urn:pulumi:dev::tf::aws:ecs/service:Service::svc"),
        NOT_PRICED, reason="no pricing function for aws:ecs/service:Service",
    )  # fmt: skip
    base = estimate(priced("train", 1000, 300), unknown("nat", {"a": 1}))
    head = estimate(priced("train", 1000, 300), unknown("nat", {"a": 2}), gone)
    summary = diff_estimates(base, head, "main", "pr").summary()
    assert (summary["not_priced_changes"], summary["not_estimable_changes"]) == (1, 1)


def test_an_expected_job_cost_read_back_from_json_is_the_same_cent():
    """A git ref's base is priced by that commit's own program and read back from JSON: its expected job cost
    must be the cent `trainfleet preview` shows for the same stack (it read $86,658.83 against $86,658.73 when
    the JSON carried a rounded $/h and rounded hours)."""
    e = FleetExpectation("main", 53.37654321, 1597.91234, 1622.91876, 2.8, False)
    back = FleetExpectation.from_json(json.loads(json.dumps(e.to_json())))
    assert money_round(back.expected_job_usd) == money_round(e.expected_job_usd) == 86625.79  # 53.37654321 x 1,622.91876
