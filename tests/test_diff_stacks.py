"""`trainfleet diff` between two versions of a stack: stack files, a git ref vs the working tree."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from cli.preview.diff import diff_estimates, input_changes
from cli.preview.engine import estimate_config
from infra.stack_file import read_stack_file
from tests.conftest import REPO, STACKS, assert_one_line_error

DEV = STACKS / "Pulumi.dev.yaml"
ASG = "aws:autoscaling/group:Group"


def with_nodes(text: str, factor: int) -> str:
    doc = yaml.safe_load(text)
    fleet = doc["config"]["trainfleet:fleets"][0]
    fleet["nodes"] = fleet["nodes"] * factor
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture(scope="module")
def doubled():
    base_file = read_stack_file(DEV)
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


def test_doubling_a_fleets_nodes_doubles_its_line(doubled):
    fleet = read_stack_file(DEV).config.fleets[0]
    rows = [r for r in doubled.rows if r.type == ASG and r.urn.endswith(f"::{fleet.name}-asg")]
    assert len(rows) == 1
    row = rows[0]
    assert row.op == "update"
    assert row.base_monthly > 0 and row.head_monthly == pytest.approx(2 * row.base_monthly)
    assert row.delta == pytest.approx(row.base_monthly)
    for base_c, head_c in zip(row.base.components, row.head.components, strict=True):
        assert head_c.monthly_cost == pytest.approx(2 * base_c.monthly_cost), head_c.name
    paths = {c.path: (c.base, c.head) for c in row.changes}
    assert paths["desiredCapacity"] == (fleet.nodes, 2 * fleet.nodes)
    # the fleet line is all that costs more (a multi-node fleet also gains a free placement group)
    assert doubled.monthly_delta == pytest.approx(row.delta)
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
    base.write_text(DEV.read_text())
    head = tmp_path / "head" / "Pulumi.dev.yaml"
    head.parent.mkdir()
    head.write_text(with_nodes(DEV.read_text(), 2))
    result = trainfleet("diff", "--base", str(base), "--head", str(head), "--format", "json")
    assert result.code == 0, result.stderr
    data = result.json()
    row = next(r for r in data["resources"] if r["type"] == ASG)
    assert row["op"] == "update"
    assert row["head_monthly_cost"] == pytest.approx(2 * row["base_monthly_cost"], rel=1e-6)
    assert data["summary"]["monthly_delta"] == pytest.approx(row["monthly_delta"], abs=0.01)


def test_cli_diff_against_a_git_ref(tmp_path, trainfleet):
    repo = tmp_path / "infra-repo"
    (repo / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", repo / "Pulumi.yaml")
    (repo / "stacks" / "Pulumi.dev.yaml").write_text(DEV.read_text())

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "root")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "dev stack")
    (repo / "stacks" / "Pulumi.dev.yaml").write_text(with_nodes(DEV.read_text(), 3))

    md = trainfleet("diff", "--base", "main", "--stack", "dev", "--format", "markdown", cwd=repo)
    assert md.code == 0, md.stderr
    assert md.stdout.startswith("<!-- trainfleet-cost-diff:dev -->")
    assert "`desiredCapacity`: `1` → `3`" in md.stdout and "changed" in md.stdout
    table = trainfleet("diff", "--base", "main", "--stack", "dev", cwd=repo)
    assert table.code == 0 and "dev-asg" in table.stdout and "main:Pulumi.dev.yaml" in table.stdout
    bad = trainfleet("diff", "--base", "no-such-ref", "--stack", "dev", cwd=repo)
    assert_one_line_error(bad, "no-such-ref", "does not exist")
    # the root commit has no stack file: a pull request that adds the stack adds every resource
    new = trainfleet("diff", "--base", "main~1", "--stack", "dev", "--format", "json", cwd=repo)
    assert new.code == 0, new.stderr
    summary = new.json()["summary"]
    assert summary["base_monthly_cost"] == 0 and summary["head_monthly_cost"] > 0
    assert summary["added"] == len(new.json()["resources"]) and summary["unchanged"] == 0


def test_cli_diff_needs_a_stack_for_a_git_ref(trainfleet):
    assert_one_line_error(trainfleet("diff", "--base", "main"), "--stack")
    assert_one_line_error(
        trainfleet("diff", "--base", "tests/fixtures/preview/prod-main.json"), "--head must be one too"
    )
