"""`trainfleet diff` between two versions of a stack: stack files, a git ref vs the working tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cli.preview.diff import diff_estimates, input_changes
from cli.preview.engine import estimate_config
from infra.stack_file import read_stack_file
from tests.conftest import REPO, STACKS, assert_one_line_error
from tests.test_preview_stacks import (
    AWS_IPV4_HOUR,
    AWS_NAT_HOUR,
    EBS_GP3,
    HOURS,
    S3_PUT,
    S3_STANDARD,
    checkpoint_lines,
)  # fmt: skip

DEV = STACKS / "Pulumi.dev.yaml"
ASG = "aws:autoscaling/group:Group"
PREVIEW = REPO / "tests" / "fixtures" / "preview"

# The dev stack in one zone, use1-az2: several nodes share a cluster placement group, which lives in one zone
# (rule aws-placement-group-one-zone), so the stacks these tests scale up name one.
DEV_TEXT = DEV.read_text().replace("zones: [use1-az1, use1-az2, use1-az4]", "zones: [use1-az2]")
assert "zones: [use1-az2]" in DEV_TEXT
# dev-asg, spot g5.12xlarge in use1-az2, from the offers.csv row
#   aws,us-east-1,use1-az2,g5.12xlarge ... spot 2.079600 ... skypilot-aws
# $2.0796/h x 730 h = $1,518.108, plus its 200 GB gp3 root volume at $0.08: $1,534.108 a node a month.
DEV_ASG_PER_NODE = 2.0796 * HOURS + 200 * EBS_GP3


def with_nodes(text: str, factor: int) -> str:
    doc = yaml.safe_load(text)
    fleet = doc["config"]["trainfleet:fleets"][0]
    fleet["nodes"] = fleet["nodes"] * factor
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture(scope="module")
def dev_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dev") / "Pulumi.dev.yaml"
    path.write_text(DEV_TEXT)
    return path


@pytest.fixture(scope="module")
def doubled(dev_file):
    base_file = read_stack_file(dev_file)
    head_config = base_file.config.model_copy(
        update={
            "fleets": [
                base_file.config.fleets[0].model_copy(update={"nodes": base_file.config.fleets[0].nodes * 2})
            ]
        }
    )
    base = estimate_config("dev", base_file.config, base_file.other_config)
    head = estimate_config("dev", head_config, base_file.other_config)
    return diff_estimates(base, head, "base", "head")


def test_doubling_a_fleets_nodes_doubles_its_line(doubled, dev_file):
    fleet = read_stack_file(dev_file).config.fleets[0]
    rows = [r for r in doubled.rows if r.type == ASG and r.urn.endswith(f"::{fleet.name}-asg")]
    assert len(rows) == 1
    row = rows[0]
    assert row.op == "update"
    assert row.base_monthly == pytest.approx(1 * DEV_ASG_PER_NODE)
    assert row.head_monthly == pytest.approx(2 * DEV_ASG_PER_NODE)
    assert row.delta == pytest.approx(1534.108, abs=1e-4)
    for base_c, head_c in zip(row.base.components, row.head.components, strict=True):
        assert head_c.monthly_cost == pytest.approx(2 * base_c.monthly_cost), head_c.name
    paths = {c.path: (c.base, c.head) for c in row.changes}
    assert paths["maxSize"] == (fleet.nodes, 2 * fleet.nodes)
    assert "desiredCapacity" not in paths  # 0 on both sides: groups are created empty, start_run sizes them
    # the fleet line is all that costs more (a multi-node fleet also gains a free placement group)
    assert doubled.monthly_delta == pytest.approx(1534.108, abs=1e-4)
    added = [r for r in doubled.rows if r.op == "create"]
    assert all(r.head.monthly_cost == 0 for r in added), [(r.type, r.name) for r in added]


def test_unchanged_stack_has_no_delta():
    sf = read_stack_file(DEV)
    a = estimate_config("dev", sf.config, sf.other_config)
    d = diff_estimates(a, a, "a", "a")
    assert d.monthly_delta == 0 and d.count("same") == len(d.rows) and not d.changed_rows


def test_input_changes_are_paths():
    changes = input_changes({"a": {"b": [1, 2]}, "c": "x"}, {"a": {"b": [1, 3]}, "d": "y"})
    assert [(c.path, c.base, c.head) for c in changes] == [
        ("a.b[1]", 2, 3),
        ("c", "x", None),
        ("d", None, "y"),
    ]


def test_cli_diff_of_two_stack_files(tmp_path, trainfleet):
    base = tmp_path / "Pulumi.dev.yaml"
    base.write_text(DEV_TEXT)
    head = tmp_path / "head" / "Pulumi.dev.yaml"
    head.parent.mkdir()
    head.write_text(with_nodes(DEV_TEXT, 2))
    result = trainfleet("diff", "--base", str(base), "--head", str(head), "--format", "json")
    assert result.code == 0, result.stderr
    data = result.json()
    row = next(r for r in data["resources"] if r["type"] == ASG)
    assert row["op"] == "update"
    assert row["base_monthly_cost"] == pytest.approx(DEV_ASG_PER_NODE, abs=1e-4)
    assert row["head_monthly_cost"] == pytest.approx(2 * DEV_ASG_PER_NODE, abs=1e-4)
    assert data["summary"]["monthly_delta"] == 1534.11


# The two fixture documents, resource by resource (USD/month). offers.csv rows for train-asg's zones:
#   aws,us-east-1,use1-az1,p4d.24xlarge ... spot 2.465500 ... skypilot-aws
#   aws,us-east-1,use1-az4,p4d.24xlarge ... spot 8.120300 ... skypilot-aws
P4D_SPOT = (2.4655 + 8.1203) / 2  # $5.2929/h
MAIN_ASG = 2 * HOURS * P4D_SPOT + 2 * 200 * EBS_GP3  # prod-main: 2 nodes = 7,727.634 + 32 = 7,759.634
PR_ASG = 4 * HOURS * P4D_SPOT + 4 * 200 * EBS_GP3  # prod-pr: 4 nodes = 15,455.268 + 64 = 15,519.268
NAT = HOURS * AWS_NAT_HOUR  # 32.85 in both
NEW_IP = HOURS * AWS_IPV4_HOUR  # 3.65, only in prod-pr
# subnets, launch template, budget and the component: free in both


def test_cli_diff_of_two_preview_documents_adds_up_by_hand(trainfleet):
    result = trainfleet(
        "diff", "--base", str(PREVIEW / "prod-main.json"), "--head", str(PREVIEW / "prod-pr.json"),
        "--format", "json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    rows = {r["name"]: r for r in data["resources"]}
    assert rows["train-asg"]["base_monthly_cost"] == pytest.approx(MAIN_ASG, abs=1e-4)
    assert rows["train-asg"]["head_monthly_cost"] == pytest.approx(PR_ASG, abs=1e-4)
    assert rows["train-net-nat"]["monthly_delta"] == 0
    assert rows["train-net-ip2"]["op"] == "create"
    assert rows["train-net-ip2"]["monthly_delta"] == pytest.approx(NEW_IP)
    summary = data["summary"]
    assert summary["base_monthly_cost"] == round(MAIN_ASG + NAT, 2) == 7792.48
    assert summary["head_monthly_cost"] == round(PR_ASG + NAT + NEW_IP, 2) == 15555.77
    # the change is the difference of the two figures as shown (15,555.77 - 7,792.48), not the exact
    # change rounded on its own (7,763.284 -> 7,763.28): a reviewer who subtracts gets the cent shown
    assert summary["monthly_delta"] == round(15555.77 - 7792.48, 2) == 7763.29
    assert (summary["added"], summary["removed"], summary["changed"], summary["replaced"]) == (1, 0, 1, 0)


def test_cli_diff_against_a_git_ref(tmp_path, trainfleet):
    repo = tmp_path / "infra-repo"
    (repo / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", repo / "Pulumi.yaml")
    (repo / "stacks" / "Pulumi.dev.yaml").write_text(DEV_TEXT)

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "root")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "dev stack")
    (repo / "stacks" / "Pulumi.dev.yaml").write_text(with_nodes(DEV_TEXT, 3))

    md = trainfleet("diff", "--base", "main", "--stack", "dev", "--format", "markdown", cwd=repo)
    assert md.code == 0, md.stderr
    assert md.stdout.startswith("<!-- trainfleet-cost-diff:dev -->")
    assert "`maxSize`: `1` → `3`" in md.stdout and "changed" in md.stdout
    table = trainfleet("diff", "--base", "main", "--stack", "dev", cwd=repo)
    assert table.code == 0 and "dev-asg" in table.stdout and "main:Pulumi.dev.yaml" in table.stdout
    bad = trainfleet("diff", "--base", "no-such-ref", "--stack", "dev", cwd=repo)
    assert_one_line_error(bad, "no-such-ref", "does not exist")
    # the root commit has no stack file: a pull request that adds the stack adds every resource
    new = trainfleet("diff", "--base", "main~1", "--stack", "dev", "--format", "json", cwd=repo)
    assert new.code == 0, new.stderr
    summary = new.json()["summary"]
    # the working tree's dev stack, 3 nodes: 3 x 1,534.108 + NAT 32.85 + its IPv4 3.65 + its checkpoint
    # bucket: 0.78 current + 56.14 noncurrent + 2.98 requests (lines worked in tests/test_preview_stacks.py)
    bucket = sum(checkpoint_lines("S3 Standard", S3_STANDARD, S3_PUT, 1.3e9, 2, 20, 1 + 1).values())
    head = 3 * DEV_ASG_PER_NODE + HOURS * AWS_NAT_HOUR + HOURS * AWS_IPV4_HOUR + bucket
    assert summary["base_monthly_cost"] == 0 and summary["head_monthly_cost"] == round(head, 2) == 4698.72
    assert summary["added"] == len(new.json()["resources"]) and summary["unchanged"] == 0


def test_cli_diff_needs_a_stack_for_a_git_ref(trainfleet):
    assert_one_line_error(trainfleet("diff", "--base", "main"), "--stack")
    assert_one_line_error(
        trainfleet("diff", "--base", "tests/fixtures/preview/prod-main.json"), "--head must be one too"
    )
