"""Planted bugs in the PR-comment upsert (which comment is this stack's, and the GitHub API calls): each one
duplicates comments on every push, overwrites someone else's comment, or leaves a stale cost in place.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "github-comment"
TESTS = ["tests/test_diff_comment.py"]
F = "cli/preview/github_comment.py"
# The same rule in the JavaScript the workflow runs (actions/github-script), tested under node on the same
# cases. The tool has no canary for a .js file: tests/test_cost_comment_js.py runs the copy's script
# (WORKSPACE is tests.conftest.REPO, the copy's root), which these mutants being killed also shows.
JS = ".github/scripts/cost-comment.js"
JS_TESTS = ["tests/test_cost_comment_js.py"]

MUTANTS = [
    {
        "file": F,
        "bug": "a comment edited in a browser (CRLF line ends) is not recognised: a new one every push",
        "original": '.split("\\n", 1)[0].removesuffix("\\r")',
        "replacement": '.split("\\n", 1)[0]',
    },
    {
        "file": F,
        "bug": "a human's comment that starts with the marker is taken over by the bot",
        "original": 'return author == bot_login and first_line(comment.get("body")) == marker',
        "replacement": 'return first_line(comment.get("body")) == marker',
    },
    {
        "file": F,
        "bug": "stack dev takes over dev-eu's comment (marker matched as a prefix)",
        "original": 'first_line(comment.get("body")) == marker',
        "replacement": 'first_line(comment.get("body")).startswith(marker.removesuffix(" -->"))',
    },
    {
        "file": F,
        "bug": "a comment that quotes the marker further down is taken as the stack's comment",
        "original": 'first_line(comment.get("body")) == marker',
        "replacement": 'marker in (comment.get("body") or "")',
    },
    {
        "file": F,
        "bug": "the newest of several matching comments is updated, not the oldest",
        "original": "ours = next((c for c in comments if is_ours(c, marker, bot_login)), None)",
        "replacement": "ours = next((c for c in reversed(comments) if is_ours(c, marker, bot_login)), None)",
    },
    {
        "file": F,
        "bug": "an unchanged body is PATCHed anyway on every push",
        "original": 'if (ours.get("body") or "") == body:',
        "replacement": "if False:",
    },
    {
        "file": F,
        "bug": "only the first page of comments is read: after 100 comments a duplicate every push",
        "original": "url = next_page(link)",
        "replacement": "url = None",
    },
    {
        "file": F,
        "bug": 'pagination follows rel="last" and skips the pages between',
        "original": 'rel="next"\'',
        "replacement": 'rel="last"\'',
    },
    {
        "file": F,
        "bug": "a body that does not start with its marker is posted (and never found again)",
        "original": "if not marker or first_line(body) != marker:",
        "replacement": "if not marker:",
    },
    {
        "file": F,
        "bug": "an update is never sent: the PR keeps showing the old cost",
        "original": 'if decision.action == "update":',
        "replacement": "if False:",
    },
    {
        "file": F,
        "bug": "updates go to the PR's comment list URL instead of the comment's own URL",
        "original": 'f"{api}/repos/{repo}/issues/comments/{decision.comment_id}"',
        "replacement": 'f"{api}/repos/{repo}/issues/{number}/comments/{decision.comment_id}"',
    },
    {
        "file": F,
        "bug": "a GitHub API URL with a trailing slash gives //repos paths",
        "original": 'api = api.rstrip("/")\n    decision = decide(',
        "replacement": 'api = api\n    decision = decide(',
    },
    {
        "file": F,
        "bug": "the marker check accepts any first line containing the prefix",
        "original": 'return line if line.startswith(MARKER_PREFIX) and line.endswith(" -->") else None',
        "replacement": "return line if MARKER_PREFIX in line else None",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: a comment edited in a browser (CRLF line ends) is not recognised",
        "original": "[0].replace(/\\r$/, '');",
        "replacement": "[0];",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: a human's comment that starts with the marker is taken over by the bot",
        "original": "return author === botLogin && firstLine(comment.body) === marker;",
        "replacement": "return firstLine(comment.body) === marker;",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: stack dev takes over dev-eu's comment (marker matched as a prefix)",
        "original": "firstLine(comment.body) === marker;",
        "replacement": "firstLine(comment.body).startsWith(marker.replace(/ -->$/, ''));",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: a comment that quotes the marker further down is taken as the stack's comment",
        "original": "firstLine(comment.body) === marker;",
        "replacement": "(comment.body || '').includes(marker);",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: the newest of several matching comments is updated, not the oldest",
        "original": "comments.find((c) =>",
        "replacement": "comments.findLast((c) =>",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: an unchanged body is PATCHed anyway on every push",
        "original": "if (ours.body === body) {",
        "replacement": "if (false) {",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: a body that does not start with its marker is posted (and never found again)",
        "original": "if (firstLine(body) !== marker) {",
        "replacement": "if (false) {",
    },
    {
        "file": JS,
        "tests": JS_TESTS,
        "bug": "the workflow: an update is never sent, the PR keeps showing the old cost",
        "original": "await github.rest.issues.updateComment({ owner, repo, comment_id: ours.id, body });",
        "replacement": "await Promise.resolve();",
    },
]
