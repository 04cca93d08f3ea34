"""`trainfleet diff --base REF --stack NAME` prices the base side with the base commit's OWN program and
pricing (a git worktree of REF run in a subprocess), not the working tree's (issue 17 item 9).

A temporary git repository holds a copy of this project's code; the working tree then changes only the
program (infra/) and the pricing (cli/preview/pricing/rates.py), never the stack file, so any delta comes
from the base commit being priced by its own code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, STACKS, assert_one_line_error

CODE = ("cli", "infra", "templates", "stacks", "Pulumi.yaml", "pyproject.toml")
RATES = Path("cli/preview/pricing/rates.py")
CONFIG = Path("infra/config.py")
ENGINE = Path("cli/preview/engine.py")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """main: a copy of this project; broken: main whose preview engine cannot be imported; the working
    tree: main with gp3 at $0.10/GB-month (was 0.08) and a 300 GB root volume by default (was 200)."""
    root = tmp_path_factory.mktemp("base-program") / "repo"
    root.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", ".git", "tests", "*.egg-info")
    for name in CODE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=skip, symlinks=True)
        else:
            shutil.copy(src, root / name)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "broken")
    engine = root / ENGINE
    engine.write_text(engine.read_text() + '\nraise ImportError("this base cannot price anything")\n')
    git(root, "commit", "-q", "-am", "a base whose pricing cannot be imported")
    git(root, "checkout", "-q", "main")
    replace_once(root / RATES, 'Rate("aws-ebs-gp3", 0.08,', 'Rate("aws-ebs-gp3", 0.10,')
    replace_once(
        root / CONFIG, "root_volume_gb: int = Field(default=200,", "root_volume_gb: int = Field(default=300,"
    )
    assert (root / "stacks" / "Pulumi.dev.yaml").read_text() == (STACKS / "Pulumi.dev.yaml").read_text()
    return root


def test_the_base_side_is_priced_by_the_base_commits_program(repo, trainfleet, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    result = trainfleet(
        "diff", "--base", "main", "--stack", "dev", "--format", "json", cwd=repo, env={"TMPDIR": str(tmp)}
    )
    assert result.code == 0, result.stderr
    assert "note:" not in result.stderr and "Traceback" not in result.stderr
    doc = result.json()
    summary = doc["summary"]
    assert summary["base"] == "main:Pulumi.dev.yaml (base program)"
    # dev: one g5.12xlarge node with one root volume. Base program and pricing: 200 GB x $0.08 = $16.00;
    # head: 300 GB x $0.10 = $30.00. The stack file did not change, so the head program on both sides (the
    # old behaviour) said +$0.00.
    assert summary["monthly_delta"] == round(300 * 0.10 - 200 * 0.08, 2) == 14.00
    asg = next(r for r in doc["resources"] if r["name"] == "dev-asg")
    assert asg["monthly_delta"] == pytest.approx(14.00)
    changed = {r["name"]: r for r in doc["resources"] if r["op"] != "same"}
    # the root volume size is an input of the launch template: base 200 (the base program's default), head 300
    paths = {(c["path"], c["base"], c["head"]) for r in changed.values() for c in r["changed_inputs"]}
    assert any(p.endswith("volumeSize") and (b, h) == (200, 300) for p, b, h in paths), paths
    assert summary["unchanged"] == len(doc["resources"]) - len(changed) > 0
    # the worktree is gone: from git's list and from the temporary folder
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert list(tmp.iterdir()) == []


def test_a_base_that_cannot_price_itself_falls_back_to_the_head_program(repo, trainfleet):
    result = trainfleet("diff", "--base", "broken", "--stack", "dev", "--format", "json", cwd=repo)
    assert result.code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("note: broken's own program could not price Pulumi.dev.yaml")
    assert "this base cannot price anything" in lines[0] and "working tree's program" in lines[0]
    summary = result.json()["summary"]
    assert summary["base"] == "broken:Pulumi.dev.yaml (head program)"
    # the same stack text under the same (head) program: no difference
    assert summary["monthly_delta"] == 0 and summary["changed"] == 0
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_a_bad_ref_is_still_one_line(repo, trainfleet):
    bad = trainfleet("diff", "--base", "no-such-ref", "--stack", "dev", cwd=repo)
    assert_one_line_error(bad, "no-such-ref", "does not exist")
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_an_estimate_survives_json_with_its_inputs():
    from cli.preview.model import (
        FREE,
        PRICED,
        CostComponent,
        Estimate,
        PricedResource,
        Resource,
        UsageValue,
    )  # fmt: skip

    disk = Resource("aws:ebs/volume:Volume", "disk", "urn:disk", inputs={"size": 200, "tags": {"a": "b"}})
    est = Estimate(
        "dev", "program (offline, pulumi mocks)",
        [
            PricedResource(disk, PRICED, [CostComponent("gp3", "GB-month", 200.0, 0.08, "rate:aws-ebs-gp3")]),
            PricedResource(Resource("aws:iam/role:Role", "role", "urn:role"), FREE, reason="IAM is free"),
        ],
        {"job_hours": UsageValue(730.0, "hour", "default")},
        guardrail_usd=100.0, budget_usd=50.0, absent=1,
    )  # fmt: skip
    doc = est.to_json()
    for row, priced in zip(doc["resources"], est.resources, strict=True):
        row["inputs"] = priced.resource.inputs
    back = Estimate.from_json(doc)
    assert back.to_json() == est.to_json()
    assert back.resources[0].resource.inputs == disk.inputs and back.monthly_total == pytest.approx(16.0)
    assert back.usage == est.usage and (back.guardrail_usd, back.budget_usd, back.absent) == (100.0, 50.0, 1)
