"""A stack's comment is never left up with old numbers (issue 17 item 10, defect 8).

- A push after which the stack's cost no longer changes renders a "no cost change" body with the same marker:
  it replaces the old comment, and creates none where there was none (the shared `cases`, run by
  tests/test_diff_comment.py and tests/test_cost_comment_js.py; here end to end from a real render).
- A push after which the PR no longer changes a stack at all drops it from the workflow's matrix: the
  `stale-comments` job marks the comments of every stack not in the matrix as stale. The rule runs in Python
  (github_comment.mark_stale) and in the workflow job's own script (cost-comment.js markStale, under node in
  the harness of tests/test_cost_comment_js.py), on the `stale_cases` of tests/fixtures/cost_comment_cases.json,
  whose expected bodies are written out by hand.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from cli.preview.diff import diff_estimates
from cli.preview.github_comment import STALE_TAG, mark_stale, stale_body, upsert_comment
from cli.preview.markdown import NO_CHANGE_TAG, marker, render
from cli.preview.model import PRICED, CostComponent, Estimate, PricedResource, Resource
from tests.needs import need, need_tool
from tests.test_cost_comment_js import WORKFLOW, ReadOnlyTokenGitHub, run_script
from tests.test_diff_comment import BOT, CASES_FILE, FakeGitHub, seed_comments

STALE_CASES = json.loads(CASES_FILE.read_text())["stale_cases"]


@pytest.fixture(scope="module")
def node() -> str:
    """node 18+ (a built-in fetch), as tests/test_cost_comment_js.py needs it."""
    path = need_tool("node", "nodejs")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    need(
        int(version.lstrip("v").split(".")[0]) >= 18,
        f"node 18+ (found {version.strip()})",
        "install Node.js 18+",
    )
    return path


def stale_job() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["stale-comments"]


def stale_step() -> dict:
    (step,) = [s for s in stale_job()["steps"] if str(s.get("uses", "")).startswith("actions/github-script@")]
    return step


def check_stale(case: dict, github: FakeGitHub, seeded: list[dict], updated_ids: list[int]) -> None:
    expected = {int(k): v for k, v in case["expect"]["updated"].items()}
    assert sorted(updated_ids) == sorted(expected)
    after = {c["id"]: c for c in github.comments}
    assert len(after) == len(seeded)  # nothing created
    for cid, body in expected.items():
        assert after[cid]["body"] == body
    assert all(after[c["id"]] == c for c in seeded if c["id"] not in expected)
    assert sorted(github.writes) == sorted(
        ("PATCH", f"/repos/acme/infra/issues/comments/{i}") for i in expected
    )


@pytest.mark.parametrize("case", STALE_CASES, ids=[c["name"] for c in STALE_CASES])
def test_stale_cases_python(case):
    with FakeGitHub(seed_comments(case)) as github:
        seeded = copy.deepcopy(github.comments)
        ids = mark_stale(case["stacks"], repo="acme/infra", number=42, token="t0ken", head_sha=case["head_sha"],
                         api=github.url)  # fmt: skip
        check_stale(case, github, seeded, ids)


def run_stale_step(node: str, tmp_path, github: FakeGitHub, stacks: list[str], head_sha: str, token="t0ken"):
    """The workflow's stale-comments step in the harness, with the env its `env:` gives it."""
    env = {"PR": "42", "STACKS": json.dumps(stacks), "HEAD_SHA": head_sha}
    return run_script(node, tmp_path, github, stale_step()["with"]["script"], env, token)


@pytest.mark.parametrize("case", STALE_CASES, ids=[c["name"] for c in STALE_CASES])
def test_stale_cases_javascript(node, tmp_path, case):
    with FakeGitHub(seed_comments(case)) as github:
        seeded = copy.deepcopy(github.comments)
        proc = run_stale_step(node, tmp_path, github, case["stacks"], case["head_sha"])
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["action"] == "stale"
        check_stale(case, github, seeded, result["comment_ids"])


def test_a_read_only_token_leaves_stale_comments_with_a_warning(node, tmp_path):
    comments = [{"id": 5, "user": BOT, "body": marker("dev") + "\n### old"}]
    with ReadOnlyTokenGitHub(comments) as github:
        proc = run_stale_step(node, tmp_path, github, [], "0" * 40, token="read0nly")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"action": "skipped", "comment_ids": []}
        assert "::warning::" in proc.stderr and github.comments[0]["body"] == marker("dev") + "\n### old"


def test_the_stale_job_gets_the_matrix_and_runs_even_when_it_is_empty():
    job = stale_job()
    assert job["needs"] == ["changed-stacks"]
    # same repository only (a fork's token is read-only), and not skipped on an empty matrix: that is
    # exactly when every earlier comment is stale
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    step = stale_step()
    assert step["env"]["STACKS"] == "${{ needs.changed-stacks.outputs.stacks }}"
    assert step["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    script = step["with"]["script"]
    assert "require('./.github/scripts/cost-comment.js')" in script and "markStale(" in script
    assert "JSON.parse(process.env.STACKS)" in script
    names = [s.get("uses") for s in job["steps"]]
    assert names.index("actions/checkout@v4") < job["steps"].index(step)


def test_a_stale_comment_is_found_again_when_the_stack_changes_again():
    body = stale_body(
        "dev", marker("dev") + "\n### `dev` · **Monthly: $1.00 → $2.00 (+$1.00, +100.0%)**", "abc"
    )
    assert body.splitlines()[:2] == [marker("dev"), STALE_TAG]
    with FakeGitHub([{"id": 3, "user": BOT, "body": body}]) as github:
        newer = marker("dev") + "\n### `dev` · **Monthly: $1.00 → $3.00 (+$2.00, +200.0%)**\n"
        decision = upsert_comment(newer, repo="acme/infra", number=42, token="t0ken", api=github.url)
        assert (
            decision.action == "update" and decision.comment_id == 3 and github.comments[0]["body"] == newer
        )


def _estimate(usd: float) -> Estimate:
    r = Resource("aws:ec2/instance:Instance", "box", "urn:pulumi:dev::p::aws:ec2/instance:Instance::box")
    return Estimate("dev", "test", [PricedResource(r, PRICED, [CostComponent("c", "month", 1, usd, "t")])])


def test_a_rendered_no_change_body_replaces_the_old_comment_and_creates_none():
    changed = render(diff_estimates(_estimate(1.0), _estimate(2.0), "main", "pr"))
    unchanged = render(diff_estimates(_estimate(2.0), _estimate(2.0), "main", "pr"))
    assert unchanged.splitlines()[1] == NO_CHANGE_TAG
    with FakeGitHub() as github:

        def post(body):
            return upsert_comment(body, repo="acme/infra", number=42, token="t0ken", api=github.url)

        # nothing to replace: nothing posted
        assert post(unchanged).action == "none" and github.comments == []
        first = post(changed)
        assert first.action == "create"
        assert post(unchanged).action == "update" and github.comments[0]["body"] == unchanged
        assert len(github.comments) == 1
