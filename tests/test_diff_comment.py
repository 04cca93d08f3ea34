"""The pull-request comment: its marker, the 65,536-character limit, and idempotent posting.

Posting is tested against a local HTTP server on 127.0.0.1 that speaks the shape of GitHub's
issues-comments REST API (list with pagination, create, update), so nothing reaches GitHub.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from cli.preview.diff import diff_estimates, diff_preview_files
from cli.preview.github_comment import Decision, decide, main, upsert_comment
from cli.preview.markdown import GITHUB_COMMENT_LIMIT, find_marker, marker, render
from cli.preview.model import PRICED, CostComponent, Estimate, PricedResource, Resource
from cli.preview.usage import resolve_usage

FIXTURES = Path(__file__).parent / "fixtures" / "preview"


@pytest.fixture(scope="module")
def pr_diff():
    return diff_preview_files(
        FIXTURES / "prod-main.json", FIXTURES / "prod-pr.json", resolve_usage(None), "prod"
    )


def test_comment_has_the_marker_and_the_summary(pr_diff):
    body = render(pr_diff)
    assert body.startswith(marker("prod")) and find_marker(body) == "prod"
    assert "<!-- trainfleet-cost-diff:prod -->" in body
    assert "**Monthly: $" in body and "1 added, 1 changed" in body
    assert "`train-asg`" in body and "`desiredCapacity`: `2` → `4`" in body
    assert body.count("<details>") == body.count("</details>")
    assert "cut to stay under" not in body


def _huge_diff(n: int) -> object:
    usage = resolve_usage(None)

    def est(factor: float) -> Estimate:
        rows = []
        for i in range(n):
            name = f"fleet-{i:05d}-" + "x" * 40
            res = Resource(
                "aws:autoscaling/group:Group",
                name,
                f"urn:pulumi:big::trainfleet::aws:autoscaling/group:Group::{name}",
                inputs={"desiredCapacity": factor * (i + 1), "tags": {"note": "y" * 30}},
            )
            comp = CostComponent(
                "p4d.24xlarge spot", "node-hour", 730 * factor, 5.0 + i / 100, "catalog", job_quantity=730
            )
            rows.append(PricedResource(res, PRICED, [comp]))
        return Estimate("big", "test", rows, usage)

    return diff_estimates(est(1), est(2), "main", "pr")


def test_truncation_keeps_the_summary_under_the_limit():
    diff = _huge_diff(3000)
    body = render(diff)
    assert len(body) <= GITHUB_COMMENT_LIMIT
    full_summary = render(diff, limit=10_000_000)
    assert len(full_summary) > GITHUB_COMMENT_LIMIT  # it really had to cut
    # the summary (marker, totals, infra counts) is whole and first
    summary_end = full_summary.index("<details>")
    assert body.startswith(full_summary[:summary_end])
    assert "3000 changed" in body and "**Monthly: $" in body
    assert "cut to stay under GitHub's 65,536-character comment limit" in body
    assert body.count("<details>") == body.count("</details>")
    # rows are kept whole, largest delta first
    table_rows = [line for line in body.splitlines() if line.startswith("| `fleet-")]
    assert table_rows and all(line.endswith("|") for line in table_rows)
    assert table_rows[0].startswith("| `fleet-02999-")


def test_tiny_limit_still_keeps_the_summary():
    diff = _huge_diff(50)
    body = render(diff, limit=4000)
    assert len(body) <= 4000 and body.startswith(marker("big")) and "**Monthly: $" in body


def test_decide_create_update_unchanged():
    m = marker("prod")
    others = [{"id": 1, "body": "LGTM"}, {"id": 2, "body": marker("dev") + "\nold dev"}]
    assert decide(others, m, m + "\nnew") == Decision("create")
    ours = others + [{"id": 7, "body": m + "\nold", "created_at": "2026-01-01T00:00:00Z"}]
    assert decide(ours, m, m + "\nnew") == Decision("update", 7)
    assert decide(ours, m, m + "\nold") == Decision("unchanged", 7)


class FakeGitHub:
    """Issues-comments endpoints of the GitHub REST API, in memory, on 127.0.0.1."""

    def __init__(self, comments: list[dict] | None = None):
        self.comments = list(comments or [])
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self):
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                url = urlparse(self.path)
                if not re.fullmatch(r"/repos/acme/infra/issues/42/comments", url.path):
                    return self._send(404, {"message": "Not Found"})
                if self.headers.get("Authorization") != "Bearer t0ken":
                    return self._send(401, {"message": "Bad credentials"})
                q = parse_qs(url.query)
                per, page = int(q.get("per_page", ["30"])[0]), int(q.get("page", ["1"])[0])
                self._send(200, fake.comments[(page - 1) * per : page * per])

            def do_POST(self):
                fake.requests.append(("POST", self.path))
                if self.path != "/repos/acme/infra/issues/42/comments":
                    return self._send(404, {"message": "Not Found"})
                c = {
                    "id": 1000 + len(fake.comments),
                    "body": self._body()["body"],
                    "created_at": "2026-02-01T00:00:00Z",
                }
                fake.comments.append(c)
                self._send(201, c)

            def do_PATCH(self):
                fake.requests.append(("PATCH", self.path))
                m = re.fullmatch(r"/repos/acme/infra/issues/comments/(\d+)", self.path)
                found = [c for c in fake.comments if m and c["id"] == int(m.group(1))]
                if not found:
                    return self._send(404, {"message": "Not Found"})
                found[0]["body"] = self._body()["body"]
                self._send(200, found[0])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def github():
    # 150 unrelated comments first, so ours is found only by following pagination
    server = FakeGitHub(
        [{"id": i, "body": f"comment {i}", "created_at": "2026-01-01T00:00:00Z"} for i in range(150)]
    )
    yield server
    server.close()


def post(github, body):
    return upsert_comment(body, repo="acme/infra", number=42, token="t0ken", api=github.url)


def test_posting_is_idempotent_by_marker(github, pr_diff):
    body = render(pr_diff)
    assert post(github, body).action == "create"
    assert post(github, body).action == "unchanged"
    ours = [c for c in github.comments if marker("prod") in c["body"]]
    assert len(ours) == 1 and ours[0]["body"] == body
    # a new push changes the body: the same comment is updated, none is added
    newer = body.replace("**Monthly:", "**Monthly (rebased):")
    decision = post(github, newer)
    assert decision == Decision("update", ours[0]["id"])
    ours = [c for c in github.comments if marker("prod") in c["body"]]
    assert len(ours) == 1 and ours[0]["body"] == newer
    assert len(github.comments) == 151
    # another stack gets its own comment; unrelated comments are never touched
    assert post(github, marker("dev") + "\ndev diff\n").action == "create"
    assert len(github.comments) == 152
    assert all(c["body"] == f"comment {c['id']}" for c in github.comments if c["id"] < 150)
    assert ("GET", "/repos/acme/infra/issues/42/comments?per_page=100&page=2") in github.requests


def test_script_entry_point_and_errors(github, tmp_path, monkeypatch, capsys):
    body_file = tmp_path / "comment.md"
    body_file.write_text(marker("prod") + "\nbody\n")
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    assert main(["--repo", "acme/infra", "--pr", "42", "--body-file", str(body_file)]) == 0
    assert main(["--repo", "acme/infra", "--pr", "42", "--body-file", str(body_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("create") and out[1].startswith("unchanged")
    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    assert main(["--repo", "acme/infra", "--pr", "42", "--body-file", str(body_file)]) == 2
    assert "401" in capsys.readouterr().err
    no_marker = tmp_path / "plain.md"
    no_marker.write_text("hello")
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    assert main(["--repo", "acme/infra", "--pr", "42", "--body-file", str(no_marker)]) == 2


def test_cli_markdown_of_two_preview_documents(trainfleet, tmp_path):
    out = tmp_path / "comment.md"
    result = trainfleet(
        "diff",
        "--base",
        str(FIXTURES / "prod-main.json"),
        "--head",
        str(FIXTURES / "prod-pr.json"),
        "--format",
        "markdown",
        "--output",
        str(out),
    )
    assert result.code == 0, result.stderr
    text = out.read_text()
    assert text.startswith("<!-- trainfleet-cost-diff:prod -->") and "`train-asg`" in text
