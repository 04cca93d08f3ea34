"""The workflow's PR-comment JavaScript, .github/scripts/cost-comment.js, run by node against FakeGitHub.

A small node harness stands in for actions/github-script: it runs the workflow step's own `script` text
(read from .github/workflows/cost-diff.yml) with a `github` whose REST calls go over HTTP, with node's
fetch, to the same fake GitHub server the Python tests use, on the same table of cases
(tests/fixtures/cost_comment_cases.json), so the two implementations cannot drift apart.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.needs import need, need_tool
from tests.test_diff_comment import BOT, SHARED_CASES, FakeGitHub, check_outcome, seed_comments

WORKFLOW = REPO / ".github" / "workflows" / "cost-diff.yml"
SCRIPT = REPO / ".github" / "scripts" / "cost-comment.js"

# Stands in for actions/github-script (https://github.com/actions/github-script): runs a step's `script`
# as the body of an async function given `require` (a './' id resolved against the workspace, as
# github-script resolves it against its working directory, the workspace), `github`, `context` and `core`,
# and prints what the script returns as JSON. `github` stands in for the Octokit github-script passes: the
# three REST methods the script uses (https://octokit.github.io/rest.js/v20#issues) and `paginate`, which
# like Octokit's (https://github.com/octokit/plugin-paginate-rest.js) follows the Link header's rel="next".
HARNESS = r"""
'use strict';
const fs = require('fs');
const path = require('path');
const env = process.env;

async function request(method, url, payload) {
  const res = await fetch(new URL(url, env.GITHUB_API_URL), {
    method,
    headers: {
      accept: 'application/vnd.github+json',
      authorization: `token ${env.GITHUB_TOKEN}`,
      'user-agent': 'octokit-stand-in (trainfleet tests)',
      ...(payload ? { 'content-type': 'application/json' } : {}),
    },
    body: payload ? JSON.stringify(payload) : undefined,
  });
  const text = await res.text();
  if (!res.ok) {
    // Octokit throws too, a RequestError with the status (https://github.com/octokit/request-error.js)
    throw Object.assign(new Error(`HttpError ${res.status} on ${method} ${url}: ${text}`), { status: res.status });
  }
  return { status: res.status, headers: { link: res.headers.get('link') || '' }, data: text && JSON.parse(text) };
}

const issues = {
  listComments: ({ owner, repo, issue_number, ...query }) =>
    request('GET', `/repos/${owner}/${repo}/issues/${issue_number}/comments?${new URLSearchParams(query)}`),
  createComment: ({ owner, repo, issue_number, body }) =>
    request('POST', `/repos/${owner}/${repo}/issues/${issue_number}/comments`, { body }),
  updateComment: ({ owner, repo, comment_id, body }) =>
    request('PATCH', `/repos/${owner}/${repo}/issues/comments/${comment_id}`, { body }),
};

function nextPage(link) {
  const found = /<([^>]+)>;\s*rel="next"/.exec(link);
  return found && found[1];
}

async function paginate(method, params) {
  let page = await method(params);
  const all = [...page.data];
  for (let next = nextPage(page.headers.link); next; next = nextPage(page.headers.link)) {
    page = await request('GET', next);
    all.push(...page.data);
  }
  return all;
}

const github = { rest: { issues }, paginate };
const context = {
  repo: { owner: env.OWNER, repo: env.REPO },
  payload: { pull_request: { number: Number(env.PR) } },
};
const core = {
  info: (message) => console.error(message),
  warning: (message) => console.error(`::warning::${message}`), // as @actions/core writes an annotation
};
const workspaceRequire = (id) => require(id.startsWith('.') ? path.resolve(env.WORKSPACE, id) : id);

const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
const step = new AsyncFunction('require', 'github', 'context', 'core', fs.readFileSync(env.STEP_SCRIPT, 'utf8'));
step(workspaceRequire, github, context, core)
  .then((result) => process.stdout.write(JSON.stringify(result === undefined ? null : result)))
  .catch((error) => {
    console.error(error.stack || String(error));
    process.exitCode = 1;
  });
"""


@pytest.fixture(scope="module")
def node() -> str:
    path = need_tool("node", "nodejs")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    major = int(re.match(r"v(\d+)", version).group(1))
    need(
        major >= 18,
        f"node 18+ with a built-in fetch (found {version.strip()})",
        "install Node.js 18 or later",
    )
    return path


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def comment_step() -> dict:
    steps = workflow()["jobs"]["cost-diff"]["steps"]
    return next(s for s in steps if str(s.get("uses", "")).startswith("actions/github-script@"))


def run_script(node: str, tmp_path, github: FakeGitHub, script: str, env: dict[str, str], token: str = "t0ken"):
    """Run a github-script step's script in the harness against the fake GitHub, with the step's own `env`
    on top of what every step gets. Returns the finished process."""
    (tmp_path / "harness.js").write_text(HARNESS)
    (tmp_path / "step.js").write_text(script)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "GITHUB_API_URL": github.url,
        "GITHUB_TOKEN": token,
        "WORKSPACE": str(REPO),
        "STEP_SCRIPT": str(tmp_path / "step.js"),
        "OWNER": "acme",
        "REPO": "infra",
        **env,
    }
    return subprocess.run(
        [node, str(tmp_path / "harness.js")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def run_step(
    node: str, tmp_path, github: FakeGitHub, stack: str, body: str, pr: int = 42, token: str = "t0ken"
):
    """Run the workflow's comment step in the harness: comment.md in the working directory, as the step
    before it leaves it. Returns the finished process."""
    (tmp_path / "comment.md").write_text(body)
    return run_script(node, tmp_path, github, comment_step()["with"]["script"], {"PR": str(pr), "STACK": stack},
                      token)  # fmt: skip


def test_the_workflow_parses_and_calls_the_script_module():
    doc = workflow()
    job = doc["jobs"]["cost-diff"]
    assert job["env"]["STACK"] == "${{ matrix.stack }}"  # the script reads process.env.STACK
    assert doc["permissions"]["issues"] == "write"  # creating and editing issue comments needs it
    names = [s.get("name") or s.get("uses") for s in job["steps"]]
    step = comment_step()
    # after the checkout (the script is in the repository) and after comment.md is written
    assert names.index("actions/checkout@v4") < names.index("Cost diff (markdown)") < job["steps"].index(step)
    script = step["with"]["script"]
    assert "require('./.github/scripts/cost-comment.js')" in script
    assert "run({ github, context, core }, { stack: process.env.STACK, bodyFile: 'comment.md' })" in script
    assert SCRIPT.is_file()
    # the matching is not re-implemented inline any more
    assert "listComments" not in WORKFLOW.read_text() and "trainfleet-cost-diff:" not in script


@pytest.mark.parametrize("case", SHARED_CASES, ids=[c["name"] for c in SHARED_CASES])
def test_shared_cases_javascript(node, tmp_path, case):
    with FakeGitHub(seed_comments(case)) as github:
        seeded = copy.deepcopy(github.comments)
        proc = run_step(node, tmp_path, github, case["stack"], case["body"])
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        check_outcome(case, github, seeded, result["action"], result["comment_id"])


def test_a_body_without_its_marker_posts_nothing(node, tmp_path):
    with FakeGitHub() as github:
        proc = run_step(node, tmp_path, github, "dev", "### cost\n<!-- trainfleet-cost-diff:dev -->\n")
        assert proc.returncode == 1 and "does not start with <!-- trainfleet-cost-diff:dev -->" in proc.stderr
        assert github.requests == []


def test_api_errors_fail_the_step(node, tmp_path):
    body = "<!-- trainfleet-cost-diff:dev -->\n### dev\n"
    with FakeGitHub() as github:
        missing_pr = run_step(node, tmp_path, github, "dev", body, pr=99)
        assert missing_pr.returncode == 1 and "HttpError 404" in missing_pr.stderr
        bad_token = run_step(node, tmp_path, github, "dev", body, token="expired")
        assert bad_token.returncode == 1 and "HttpError 401" in bad_token.stderr
        assert github.writes == []


class ReadOnlyTokenGitHub(FakeGitHub):
    """FakeGitHub with a second, read-only token, as a fork's or Dependabot's pull request gets: it may read
    the comments, and a write is 403 "Resource not accessible by integration", GitHub's answer then
    (https://docs.github.com/en/actions/security-for-github-actions/security-guides/automatic-token-authentication#permissions-for-the-github_token).
    A rate limit is a 403 too, with another message; `rate-limited` gets that on every request."""

    TOKENS = {**FakeGitHub.TOKENS, "read0nly": BOT, "rate-limited": BOT}
    READ_ONLY = {
        "message": "Resource not accessible by integration",
        "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment",
        "status": "403",
    }
    RATE_LIMITED = {
        "message": "API rate limit exceeded for installation ID 1.",
        "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
    }

    def answer(self, method, path, headers, raw):
        token = (headers.get("Authorization") or "").partition(" ")[2]
        if token == "rate-limited":
            return 403, self.RATE_LIMITED, ""
        if token == "read0nly" and method != "GET":
            return 403, self.READ_ONLY, ""
        return super().answer(method, path, headers, raw)


def test_a_read_only_token_skips_the_comment_with_a_warning(node, tmp_path):
    body = "<!-- trainfleet-cost-diff:dev -->\n### dev\n"
    with ReadOnlyTokenGitHub() as github:
        proc = run_step(node, tmp_path, github, "dev", body, token="read0nly")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"action": "skipped", "comment_id": None}
        assert "::warning::" in proc.stderr and "job summary" in proc.stderr
        assert github.comments == []
        assert [m for m, _ in github.requests] == ["GET", "POST"]  # it tried, and was refused


def test_other_403s_still_fail_the_step(node, tmp_path):
    body = "<!-- trainfleet-cost-diff:dev -->\n### dev\n"
    with ReadOnlyTokenGitHub() as github:
        proc = run_step(node, tmp_path, github, "dev", body, token="rate-limited")
        assert proc.returncode == 1 and "HttpError 403" in proc.stderr and "rate limit" in proc.stderr
        assert github.writes == []
