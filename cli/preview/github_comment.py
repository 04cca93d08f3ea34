"""Post or update the cost-diff comment on a pull request, found by its hidden marker.

`decide(comments, marker, body)` is the pure rule: update the first comment that carries the marker
(leave it alone when its body is already the same), create one otherwise. `upsert_comment` applies it
through GitHub's issues-comments REST API (list, create, update), so a workflow that runs on every
push keeps exactly one comment per stack:

    python -m cli.preview.github_comment --repo OWNER/NAME --pr 42 --body-file comment.md

reads the token from GITHUB_TOKEN and the API root from GITHUB_API_URL (default api.github.com).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.preview.markdown import MARKER_PREFIX
from infra.errors import TrainfleetError

API = "https://api.github.com"
PER_PAGE = 100


@dataclass(frozen=True)
class Decision:
    action: str  # "create", "update" or "unchanged"
    comment_id: int | None = None


def comment_marker(body: str) -> str | None:
    """The marker line of a body (the first `<!-- trainfleet-cost-diff:... -->`), if any."""
    start = body.find(MARKER_PREFIX)
    if start < 0:
        return None
    end = body.find("-->", start)
    return body[start : end + 3] if end > 0 else None


def decide(comments: list[dict[str, Any]], marker: str, body: str) -> Decision:
    """Create, update, or leave alone: the comment whose body holds `marker` is ours."""
    ours = [c for c in comments if marker in (c.get("body") or "")]
    if not ours:
        return Decision("create")
    first = min(ours, key=lambda c: (c.get("created_at") or "", c.get("id") or 0))
    if (first.get("body") or "") == body:
        return Decision("unchanged", first["id"])
    return Decision("update", first["id"])


class GitHubError(TrainfleetError):
    pass


def _request(method: str, url: str, token: str, payload: dict | None = None) -> Any:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/vnd.github+json")
    req.add_header("X-GitHub-Api-Version", "2022-11-28")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise GitHubError(
            f"GitHub API {method} {url} answered {exc.code}: {' '.join(detail.split())}"
        ) from None
    except urllib.error.URLError as exc:
        raise GitHubError(f"GitHub API {url} cannot be reached ({exc.reason})") from None
    return json.loads(text) if text else None


def list_comments(api: str, repo: str, number: int, token: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    page = 1
    while True:
        batch = _request(
            "GET", f"{api}/repos/{repo}/issues/{number}/comments?per_page={PER_PAGE}&page={page}", token
        )
        if not isinstance(batch, list):
            raise GitHubError(
                f"GitHub API listed comments of {repo}#{number} as {type(batch).__name__}, not a list"
            )
        out.extend(batch)
        if len(batch) < PER_PAGE:
            return out
        page += 1


def upsert_comment(
    body: str, *, repo: str, number: int, token: str, api: str = API, marker: str | None = None
) -> Decision:
    """Create or update this stack's comment on PR `number`; returns what was done."""
    marker = marker or comment_marker(body)
    if not marker:
        raise GitHubError(
            "the comment body has no trainfleet marker; render it with `trainfleet diff --format markdown`"
        )
    api = api.rstrip("/")
    decision = decide(list_comments(api, repo, number, token), marker, body)
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
    args = parser.parse_args(argv)
    try:
        body = args.body_file.read_text()
        decision = upsert_comment(
            body,
            repo=args.repo,
            number=args.pr,
            token=os.environ.get("GITHUB_TOKEN", ""),
            api=os.environ.get("GITHUB_API_URL", API),
        )
    except (OSError, TrainfleetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{decision.action} comment {decision.comment_id or ''}".strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
