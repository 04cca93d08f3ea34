"""Pull requests from forks in .github/workflows/cost-diff.yml (issue 12): no comment, the diff in the job
summary, and the guardrail still failing the check; and a failed comment never hiding the guardrail.

A fork's pull request runs with a read-only GITHUB_TOKEN and without secrets
(https://docs.github.com/en/actions/security-for-github-actions/security-guides/automatic-token-authentication#permissions-for-the-github_token),
so commenting fails with 403. The workflow is read as YAML and its steps' `if:` conditions are evaluated by a
small interpreter of GitHub's expression language (the subset the workflow uses, refusing anything else), over
the pull_request event of a same-repository and of a fork's pull request, with each step's outcome chosen by
the scenario: which steps run, and whether the job fails.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pytest
import yaml

from tests.conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "cost-diff.yml"

# --- GitHub Actions expressions (https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/evaluate-expressions-in-workflows-and-actions)

TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().\[\],])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot read the expression at {text[pos:]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def truthy(value) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def as_number(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return math.nan
    return math.nan  # objects and arrays


def loose_equal(a, b) -> bool:
    """GitHub's `==`: strings compare ignoring case; values of different types are compared as numbers."""
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if type(a) is type(b) and not isinstance(a, str):
        return a == b
    return as_number(a) == as_number(b)


class Evaluator:
    """Recursive descent over: || < && < == != < <= > >= < ! < property access, calls, literals, ( )."""

    def __init__(self, text: str, contexts: dict, functions: dict):
        self.tokens = tokenize(text)
        self.pos = 0
        self.contexts = contexts
        self.functions = functions

    def peek(self, value: str | None = None):
        if self.pos < len(self.tokens) and (value is None or self.tokens[self.pos][1] == value):
            return self.tokens[self.pos]
        return None

    def take(self, value: str | None = None):
        token = self.peek(value)
        if token is None:
            raise ValueError(f"expected {value or 'more'} at token {self.pos} of {self.tokens}")
        self.pos += 1
        return token

    def evaluate(self):
        value = self.or_()
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.pos :]}")
        return value

    def or_(self):
        value = self.and_()
        while self.peek("||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self):
        value = self.comparison()
        while self.peek("&&"):
            self.take()
            right = self.comparison()
            value = right if truthy(value) else value
        return value

    def comparison(self):
        value = self.unary()
        while (token := self.peek()) and token[1] in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.unary()
            if op in ("==", "!="):
                value = loose_equal(value, right) == (op == "==")
            else:
                a, b = as_number(value), as_number(right)
                value = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return value

    def unary(self):
        if self.peek("!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix()

    def postfix(self):
        value = self.primary()
        while True:
            if self.peek("."):
                self.take()
                key = self.take()[1]
                value = value.get(key) if isinstance(value, dict) else None
            elif self.peek("["):
                self.take()
                key = self.or_()
                self.take("]")
                value = value.get(key) if isinstance(value, dict) else None
            else:
                return value

    def primary(self):
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if kind == "name":
            if text in ("true", "false"):
                return text == "true"
            if text == "null":
                return None
            if self.peek("("):
                self.take()
                args = []
                while not self.peek(")"):
                    args.append(self.or_())
                    if not self.peek(")"):
                        self.take(",")
                self.take(")")
                if text not in self.functions:
                    raise ValueError(f"function {text}() is not simulated")
                return self.functions[text](*args)
            if text not in self.contexts:
                raise ValueError(f"context {text} is not simulated")
            return self.contexts[text]
        raise ValueError(f"unexpected {text!r}")


def condition(step_if) -> str:
    """A step's `if:` as the runner evaluates it: `${{ }}` optional, and `success() && (...)` unless it
    calls a status function itself (https://docs.github.com/en/actions/writing-workflows/workflow-syntax-for-github-actions#jobsjob_idstepsif)."""
    if step_if is None:
        return "success()"
    text = str(step_if).strip()
    m = re.fullmatch(r"\$\{\{(.*)\}\}", text, re.S)
    if m and "${{" not in m.group(1):
        text = m.group(1).strip()
    elif "${{" in text:
        raise ValueError(f"an if: with text around its ${{{{ }}}} is always true: {step_if!r}")
    if not any(re.search(rf"\b{f}\s*\(", text) for f in STATUS_FUNCTIONS):
        text = f"success() && ({text})"
    return text


# --- the job, step by step


@dataclass
class Run:
    ran: dict[str, str] = field(default_factory=dict)  # step -> outcome, skipped included
    failed: bool = False  # the job's result

    def did_run(self, step: str) -> bool:
        return self.ran[step] != "skipped"


SAME_REPO = "acme/trainfleet"


def pull_request(head_repo: str | None, base_repo: str = SAME_REPO) -> dict:
    head = None if head_repo is None else {"full_name": head_repo, "fork": head_repo != base_repo}
    return {
        "number": 7,
        "head": {"sha": "1" * 40, "repo": head},
        "base": {"sha": "0" * 40, "repo": {"full_name": base_repo, "fork": False}},
    }


def doc() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def job() -> dict:
    return doc()["jobs"]["cost-diff"]


def step_key(step: dict) -> str:
    return step.get("name") or step.get("id") or step["uses"]


def simulate(
    *,
    head_repo: str | None,
    repository: str = SAME_REPO,
    secrets: dict | None = None,
    failing: tuple[str, ...] = (),
) -> Run:
    """Run the cost-diff job's steps for a pull_request event: each step that runs succeeds unless named in
    `failing` (by its id, else its name); `continue-on-error` keeps a failure from failing the job. As on
    GitHub, a fork's token is read-only: actions/github-script, if it runs there, fails (403)."""
    the_job = job()
    secrets = secrets or {}
    env = {}
    for key, value in the_job.get("env", {}).items():
        m = re.fullmatch(r"\$\{\{\s*secrets\.(\w+)\s*\}\}", str(value))
        env[key] = secrets.get(m.group(1), "") if m else value  # a missing secret is the empty string
    github = {
        "repository": repository,
        "event_name": "pull_request",
        "event": {"pull_request": pull_request(head_repo, repository)},
    }
    read_only_token = head_repo != repository  # None: the fork was deleted
    result = Run()
    steps_ctx: dict[str, dict] = {}
    for step in the_job["steps"]:
        functions = {
            "success": lambda: not result.failed,
            "failure": lambda: result.failed,
            "always": lambda: True,
            "cancelled": lambda: False,
        }
        contexts = {"github": github, "env": env, "steps": steps_ctx, "matrix": {"stack": "dev"}}
        runs = truthy(Evaluator(condition(step.get("if")), contexts, functions).evaluate())
        key = step_key(step)
        if not runs:
            outcome = conclusion = "skipped"
        else:
            refused = read_only_token and str(step.get("uses", "")).startswith("actions/github-script@")
            outcome = "failure" if (refused or step.get("id") in failing or key in failing) else "success"
            conclusion = "success" if outcome == "failure" and step.get("continue-on-error") else outcome
            result.failed = result.failed or conclusion == "failure"
        result.ran[key] = outcome
        if "id" in step:
            steps_ctx[step["id"]] = {"outcome": outcome, "conclusion": conclusion, "outputs": {}}
    return result


COMMENT = "Post or update the PR comment (by its marker)"
GUARDRAIL = "Guardrail"
DIFF = "Cost diff (markdown)"
PREVIEW = "pulumi preview --json on base and head"
NOTICE = "Fork pull request - the cost diff is in the job summary"
FORK = "someone/trainfleet"
SECRETS = {"PULUMI_ACCESS_TOKEN": "pul-123", "AWS_ACCESS_KEY_ID": "AKIA..."}


# --- the interpreter itself, on the documented rules it relies on


def evaluate(text: str, **contexts):
    functions = {"success": lambda: True, "always": lambda: True, "cancelled": lambda: False}
    return Evaluator(text, contexts, functions).evaluate()


def test_the_interpreter_follows_the_documented_rules():
    assert evaluate("'Acme/Infra' == 'acme/infra'") is True  # strings compare ignoring case
    assert evaluate("a.b.c == null", a={"b": None}) is True  # a property of null is null
    assert evaluate("a.b == ''", a={}) is True  # other types compare as numbers: null and '' are both 0
    assert evaluate("a.b == 'acme/x'", a={}) is False  # and a string that is not a number is NaN
    assert evaluate("'' || 'x'") == "x" and evaluate("'y' && 0") == 0  # && and || give an operand
    assert evaluate("!cancelled() && s.install.outcome == 'success'", s={"install": {"outcome": "success"}})
    assert evaluate("github['repository']", github={"repository": "r"}) == "r"
    assert condition("env.X != ''") == "success() && (env.X != '')"
    assert condition("${{ always() }}") == "always()"
    with pytest.raises(ValueError, match="always true"):
        condition("${{ always() }} && false")
    with pytest.raises(ValueError, match="not simulated"):
        evaluate("hashFiles('x')")


# --- the workflow's structure


def test_the_comment_step_is_for_same_repository_pull_requests_only():
    steps = {step_key(s): s for s in job()["steps"]}
    assert "github.event.pull_request.head.repo.full_name == github.repository" in steps[COMMENT]["if"]
    assert steps[COMMENT]["uses"].startswith("actions/github-script@")
    assert "continue-on-error" not in steps[COMMENT]  # a failed comment still fails the job
    # the preview needs secrets, which a fork's pull request does not get
    assert "env.PULUMI_ACCESS_TOKEN != ''" in steps[PREVIEW]["if"]


def test_the_summary_is_written_before_commenting_and_the_guardrail_is_last():
    names = [step_key(s) for s in job()["steps"]]
    steps = {step_key(s): s for s in job()["steps"]}
    assert '>> "$GITHUB_STEP_SUMMARY"' in steps[DIFF]["run"] and "if" not in steps[DIFF]
    assert names.index(DIFF) < names.index(COMMENT) < names.index(GUARDRAIL) == len(names) - 1
    guard = steps[GUARDRAIL]
    assert "!cancelled()" in guard["if"] and "continue-on-error" not in guard
    assert "trainfleet preview" in guard["run"]


# --- the simulated runs


def test_same_repository_pull_request_comments_and_runs_the_guardrail():
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS)
    assert run.ran[PREVIEW] == run.ran[DIFF] == run.ran[COMMENT] == run.ran[GUARDRAIL] == "success"
    assert run.ran[NOTICE] == "skipped" and not run.failed


def test_same_repository_over_budget_fails_after_commenting():
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS, failing=(GUARDRAIL,))
    assert run.did_run(COMMENT) and run.ran[GUARDRAIL] == "failure" and run.failed


@pytest.mark.parametrize("over_budget", [False, True], ids=["within budget", "over budget"])
def test_a_failed_comment_does_not_hide_the_guardrail(over_budget):
    failing = ("comment", GUARDRAIL) if over_budget else ("comment",)
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS, failing=failing)
    assert run.ran[COMMENT] == "failure"
    assert run.ran[GUARDRAIL] == ("failure" if over_budget else "success")  # it ran either way
    assert run.failed  # and the failed comment is not swallowed


@pytest.mark.parametrize("over_budget", [False, True], ids=["within budget", "over budget"])
@pytest.mark.parametrize("secrets", [{}, SECRETS], ids=["no secrets", "secrets leaked to a fork"])
def test_fork_pull_request_gets_the_summary_and_the_guardrail_not_a_comment(over_budget, secrets):
    run = simulate(head_repo=FORK, secrets=secrets, failing=(GUARDRAIL,) if over_budget else ())
    assert run.ran[COMMENT] == "skipped"  # its read-only token would get 403
    assert run.ran[PREVIEW] == "skipped"  # offline diff: no Pulumi backend for a fork
    assert run.ran[DIFF] == "success"  # which writes the job summary
    assert run.ran[NOTICE] == "success"
    assert run.ran[GUARDRAIL] == ("failure" if over_budget else "success")
    assert run.failed == over_budget


def test_a_deleted_fork_is_still_a_fork():
    run = simulate(head_repo=None)  # GitHub sends head.repo null when the fork was deleted
    assert run.ran[COMMENT] == "skipped" and run.did_run(GUARDRAIL)


def test_a_pull_request_inside_a_forked_repository_comments():
    # head.repo.fork is true here, yet the token can write: the test is on the repository's name
    run = simulate(head_repo="me/trainfleet", repository="me/trainfleet")
    assert run.did_run(COMMENT) and run.ran[NOTICE] == "skipped"


def test_same_repository_without_secrets_takes_the_offline_diff_and_comments():
    run = simulate(head_repo=SAME_REPO)
    assert run.ran[PREVIEW] == "skipped" and run.did_run(DIFF) and run.did_run(COMMENT)


def test_a_failed_preview_falls_back_offline_without_failing_the_job():
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS, failing=("preview",))
    assert run.ran[PREVIEW] == "failure" and run.did_run(COMMENT) and run.did_run(GUARDRAIL)
    assert not run.failed  # continue-on-error


def test_a_failed_diff_skips_the_comment_but_not_the_guardrail():
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS, failing=("diff",))
    assert run.ran[COMMENT] == "skipped" and run.did_run(GUARDRAIL) and run.failed


def test_without_trainfleet_installed_nothing_is_priced():
    run = simulate(head_repo=SAME_REPO, secrets=SECRETS, failing=("install",))
    assert run.ran[GUARDRAIL] == "skipped" and run.ran[COMMENT] == "skipped" and run.failed


def test_every_preview_the_workflow_diffs_lists_unchanged_resources():
    """Issue 17 item 1: plain `pulumi preview --json` leaves unchanged resources out (display's shouldShow
    returns ShowSameResources for OpSame), so both documents `trainfleet diff` compares carry --show-sames."""
    steps = [s for job in doc()["jobs"].values() for s in job.get("steps", [])]
    previews = [
        line.strip()
        for s in steps
        for line in str(s.get("run", "")).splitlines()
        if line.strip().startswith("pulumi preview")
    ]
    assert len(previews) == 2, previews  # head and base
    assert all("--json" in p and "--show-sames" in p for p in previews), previews
