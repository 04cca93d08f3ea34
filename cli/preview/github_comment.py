"""Post or update the cost-diff comment on a pull request, found by its hidden marker.

`decide(comments, marker, body)` is the pure rule: a comment is this stack's when the bot posted it and
its first line is exactly the stack's marker (so `dev` never takes `dev-eu`'s comment, nor a human's that
quotes the marker); the first such comment is updated (left alone when its body is already the same),
else one is created; a "no cost change" body (second line NO_CHANGE_TAG) only replaces an earlier comment and
creates none ("none"). `upsert_comment` applies it through GitHub's issues-comments REST API (list, following
the Link header's pages, create, update), so a workflow that runs on every push keeps exactly one comment
per stack. `.github/scripts/cost-comment.js` is the same rule for the workflow; both are tested on the
cases of tests/fixtures/cost_comment_cases.json.

`stale_updates(comments, stacks, head_sha)` is the rule for stacks a pull request no longer changes (they
drop out of the workflow's matrix, and their comments would keep old numbers up): every comment of the bot
whose first line is the marker of a stack not in `stacks` is replaced by a short stale body (`stale_body`),
unless it already is one (second line STALE_TAG). `mark_stale` applies it; the workflow's `stale-comments`
job runs the same rule in cost-comment.js (`markStale`), both tested on the `stale_cases` of the same file.

    python -m cli.preview.github_comment --repo OWNER/NAME --pr 42 --body-file comment.md

reads the token from GITHUB_TOKEN and the API root from GITHUB_API_URL (default api.github.com).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.preview.markdown import MARKER_PREFIX, NO_CHANGE_TAG
from cli.preview.markdown import marker as marker_for
from infra.errors import TrainfleetError

API = "https://api.github.com"
PER_PAGE = 100
# The login of the workflow's GITHUB_TOKEN, which posts the comments (as actions/github-script does).
BOT_LOGIN = "github-actions[bot]"
USER_AGENT = "trainfleet-cost-comment"  # GitHub rejects requests without a User-Agent
# The second line of a comment replaced because the pull request no longer changes its stack.
STALE_TAG = "<!-- trainfleet-stale -->"


@dataclass(frozen=True)
class Decision:
    action: str  # "create", "update", "unchanged", or "none" (a no-change body and no comment to replace)
    comment_id: int | None = None


def first_line(body: str | None) -> str:
    """The first line of a comment body; GitHub keeps the CRLF line ends of a comment edited in a browser."""
    return (body or "").split("\n", 1)[0].removesuffix("\r")


def second_line(body: str | None) -> str:
    lines = (body or "").split("\n", 2)
    return lines[1].removesuffix("\r") if len(lines) > 1 else ""


def is_no_change(body: str) -> bool:
    """A body that says the stack's cost did not change (markdown.NO_CHANGE_TAG on its second line)."""
    return second_line(body) == NO_CHANGE_TAG


def comment_marker(body: str) -> str | None:
    """The marker of a body: its first line when that is a `<!-- trainfleet-cost-diff:... -->` line."""
    line = first_line(body)
    return line if line.startswith(MARKER_PREFIX) and line.endswith(" -->") else None


def is_ours(comment: dict[str, Any], marker: str, bot_login: str = BOT_LOGIN) -> bool:
    """Posted by the bot, and its first line is exactly `marker` (a marker quoted further down is text)."""
    author = (comment.get("user") or {}).get("login")
    return author == bot_login and first_line(comment.get("body")) == marker


def decide(comments: list[dict[str, Any]], marker: str, body: str, bot_login: str = BOT_LOGIN) -> Decision:
    """Create, update, or leave alone. `comments` come in the API's order, ascending id: the oldest of
    ours is the one kept up to date."""
    ours = next((c for c in comments if is_ours(c, marker, bot_login)), None)
    if ours is None:
        # nothing to correct: a "no cost change" comment on a stack that never had one is noise
        return Decision("none") if is_no_change(body) else Decision("create")
    if (ours.get("body") or "") == body:
        return Decision("unchanged", ours["id"])
    return Decision("update", ours["id"])


class GitHubError(TrainfleetError):
    pass


def _request(method: str, url: str, token: str, payload: dict | None = None) -> Any:
    return _call(method, url, token, payload)[0]


def _call(method: str, url: str, token: str, payload: dict | None = None) -> tuple[Any, str]:
    """The decoded JSON answer and its Link header ("" when there is none)."""
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("User-Agent", USER_AGENT)
    req.add_header("Accept", "application/vnd.github+json")
    req.add_header("X-GitHub-Api-Version", "2022-11-28")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            link = resp.headers.get("Link") or ""
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise GitHubError(
            f"GitHub API {method} {url} answered {exc.code}: {' '.join(detail.split())}"
        ) from None
    except urllib.error.URLError as exc:
        raise GitHubError(f"GitHub API {url} cannot be reached ({exc.reason})") from None
    return (json.loads(text) if text else None), link


def next_page(link: str) -> str | None:
    """The rel="next" URL of a Link header, e.g. `<https://api.github.com/...&page=2>; rel="next", ...`
    (https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api)."""
    found = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return found.group(1) if found else None


def list_comments(api: str, repo: str, number: int, token: str) -> list[dict[str, Any]]:
    """Every comment of the issue: the first page, then each page the Link header names as next."""
    out: list[dict[str, Any]] = []
    url: str | None = f"{api}/repos/{repo}/issues/{number}/comments?per_page={PER_PAGE}"
    while url:
        batch, link = _call("GET", url, token)
        if not isinstance(batch, list):
            raise GitHubError(
                f"GitHub API listed comments of {repo}#{number} as {type(batch).__name__}, not a list"
            )
        out.extend(batch)
        url = next_page(link)
    return out


def _headline(body: str) -> str:
    """The first line of a comment's text after its marker and hidden tags, without heading marks or `~`."""
    for line in (body or "").split("\n")[1:]:
        line = line.removesuffix("\r").strip()
        if line and not line.startswith("<!--"):
            return line.lstrip("#").replace("~", "").strip()
    return ""


def stale_body(stack: str, old_body: str, head_sha: str = "") -> str:
    """What a comment of a stack the pull request no longer changes becomes: its marker (so a later push that
    changes the stack again updates it), STALE_TAG, and its old headline struck through."""
    lines = [marker_for(stack), STALE_TAG, f"### `{stack}` · no longer changed by this PR", ""]
    was = _headline(old_body)
    if was:
        lines += [f"~~{was}~~", ""]
    sha = f" (as of `{head_sha[:7]}`)" if head_sha else ""
    lines.append(
        f"This pull request no longer changes this stack{sha}: the cost diff that was here is out of date."
    )
    return "\n".join(lines) + "\n"


def stale_updates(
    comments: list[dict[str, Any]], stacks: list[str], head_sha: str = "", bot_login: str = BOT_LOGIN
) -> list[tuple[int, str]]:
    """(comment id, new body) for each of the bot's cost comments whose stack is not in `stacks` (the stacks
    the pull request still changes) and that is not stale already."""
    keep = set(stacks)
    out = []
    for c in comments:
        if (c.get("user") or {}).get("login") != bot_login:
            continue
        body = c.get("body") or ""
        found = comment_marker(body)
        if found is None:
            continue
        stack = found[len(MARKER_PREFIX) : -len(" -->")]
        if stack in keep or second_line(body) == STALE_TAG:
            continue
        out.append((c["id"], stale_body(stack, body, head_sha)))
    return out


def mark_stale(
    stacks: list[str],
    *,
    repo: str,
    number: int,
    token: str,
    head_sha: str = "",
    api: str = API,
    bot_login: str = BOT_LOGIN,
) -> list[int]:
    """Replace the comments of stacks no longer in `stacks` by their stale body; the ids updated."""
    api = api.rstrip("/")
    updates = stale_updates(list_comments(api, repo, number, token), stacks, head_sha, bot_login)
    for comment_id, body in updates:
        _request("PATCH", f"{api}/repos/{repo}/issues/comments/{comment_id}", token, {"body": body})
    return [comment_id for comment_id, _ in updates]


def upsert_comment(
    body: str,
    *,
    repo: str,
    number: int,
    token: str,
    api: str = API,
    marker: str | None = None,
    bot_login: str = BOT_LOGIN,
) -> Decision:
    """Create or update this stack's comment on PR `number`; returns what was done."""
    marker = marker or comment_marker(body)
    if not marker or first_line(body) != marker:
        # a body that does not start with its marker would never be found again: one new comment per push
        raise GitHubError(
            "the comment body does not start with its trainfleet marker; "
            "render it with `trainfleet diff --format markdown`"
        )
    api = api.rstrip("/")
    decision = decide(list_comments(api, repo, number, token), marker, body, bot_login)
    if decision.action == "none":
        return decision
    if decision.action == "create":
        made = _request("POST", f"{api}/repos/{repo}/issues/{number}/comments", token, {"body": body})
        return Decision("create", made.get("id") if isinstance(made, dict) else None)
    if decision.action == "update":
        _request("PATCH", f"{api}/repos/{repo}/issues/comments/{decision.comment_id}", token, {"body": body})
    return decision


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Post or update the trainfleet cost-diff comment on a pull request."
    )
    parser.add_argument("--repo", required=True, help="OWNER/NAME")
    parser.add_argument("--pr", type=int, required=True, help="pull request number")
    parser.add_argument(
        "--body-file", type=Path, required=True, help="markdown from `trainfleet diff --format markdown`"
    )
    parser.add_argument(
        "--bot-login",
        default=BOT_LOGIN,
        help=f"the user the token posts as; only its comments are updated (default {BOT_LOGIN}, "
        "the workflow's GITHUB_TOKEN)",
    )
    args = parser.parse_args(argv)
    try:
        body = args.body_file.read_text()
        decision = upsert_comment(
            body,
            repo=args.repo,
            number=args.pr,
            token=os.environ.get("GITHUB_TOKEN", ""),
            api=os.environ.get("GITHUB_API_URL", API),
            bot_login=args.bot_login,
        )
    except (OSError, TrainfleetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if decision.action == "none":
        print("none: no cost change, and no earlier comment of the stack to replace")
        return 0
    print(f"{decision.action} comment {decision.comment_id or ''}".strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
