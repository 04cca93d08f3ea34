"""The pull-request comment: its marker, the 65,536-character limit, and idempotent posting.

Posting is tested against FakeGitHub, a local HTTP server on 127.0.0.1 that speaks GitHub's issues-comments
REST API (list with Link-header pagination, create, update) and checks what GitHub checks, so nothing
reaches GitHub. Which comment is a stack's is decided on the cases of tests/fixtures/cost_comment_cases.json,
the same table tests/test_cost_comment_js.py runs the workflow's JavaScript on.
"""

from __future__ import annotations

import copy
import http.client
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from cli.preview.diff import PreviewTerms, diff_estimates, diff_preview_files
from cli.preview.github_comment import Decision, GitHubError, comment_marker, decide, main, upsert_comment
from cli.preview.markdown import GITHUB_COMMENT_LIMIT, find_marker, marker, render
from cli.preview.model import PRICED, CostComponent, Estimate, PricedResource, Resource
from cli.preview.usage import resolve_usage

FIXTURES = Path(__file__).parent / "fixtures" / "preview"
CASES_FILE = Path(__file__).parent / "fixtures" / "cost_comment_cases.json"
SHARED_CASES = json.loads(CASES_FILE.read_text())["cases"]


@pytest.fixture(scope="module")
def pr_diff():
    return diff_preview_files(
        FIXTURES / "prod-main.json", FIXTURES / "prod-pr.json", PreviewTerms(resolve_usage(None), "prod")
    )


def test_comment_has_the_marker_and_the_summary(pr_diff):
    body = render(pr_diff)
    assert body.startswith(marker("prod")) and find_marker(body) == "prod"
    assert "<!-- trainfleet-cost-diff:prod -->" in body
    assert "**Monthly run-rate: $" in body and "1 added, 1 changed" in body
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
    assert "3000 changed" in body and "**Monthly run-rate: $" in body
    assert "cut to stay under GitHub's 65,536-character comment limit" in body
    assert body.count("<details>") == body.count("</details>")
    # rows are kept whole, largest delta first
    table_rows = [line for line in body.splitlines() if line.startswith("| `fleet-")]
    assert table_rows and all(line.endswith("|") for line in table_rows)
    assert table_rows[0].startswith("| `fleet-02999-")


def test_tiny_limit_still_keeps_the_summary():
    diff = _huge_diff(50)
    body = render(diff, limit=4000)
    assert len(body) <= 4000 and body.startswith(marker("big")) and "**Monthly run-rate: $" in body


BOT = {"login": "github-actions[bot]", "type": "Bot"}  # who the workflow's GITHUB_TOKEN posts as
HUMAN = {"login": "octocat", "type": "User"}


def test_decide_create_update_unchanged():
    m = marker("prod")
    others = [
        {"id": 1, "user": HUMAN, "body": "LGTM"},
        {"id": 2, "user": BOT, "body": marker("dev") + "\nold dev"},
        {"id": 3, "user": BOT, "body": marker("prod-eu") + "\nold prod-eu"},
        {"id": 4, "user": HUMAN, "body": m + "\nmy copy of the prod comment"},
    ]
    assert decide(others, m, m + "\nnew") == Decision("create")
    ours = others + [{"id": 7, "user": BOT, "body": m + "\nold"}]
    assert decide(ours, m, m + "\nnew") == Decision("update", 7)
    assert decide(ours, m, m + "\nold") == Decision("unchanged", 7)


class FakeGitHub:
    """GitHub's issues-comments REST API (https://docs.github.com/en/rest/issues/comments) for one private
    repository, acme/infra (id 4242), whose only issue is #42; in memory, on 127.0.0.1.

    It checks what GitHub checks, and no more:
    - a User-Agent header, else 403
      (https://docs.github.com/en/rest/using-the-rest-api/getting-started-with-the-rest-api#user-agent);
    - the token in `Authorization: Bearer|token <token>`: an unknown one is 401 "Bad credentials", none at
      all is 404, as GitHub hides a private repository from anonymous callers
      (https://docs.github.com/en/rest/authentication/authenticating-to-the-rest-api);
    - an issue or a comment that does not exist is 404 (each endpoint's "Response status codes");
    - create and update take a JSON object whose `body` is a string: unparsable JSON is 400 "Problems
      parsing JSON", a missing or non-string `body` 422 "Validation Failed";
    - "List issue comments" answers in ascending id order, `per_page` (default 30, at most 100) and `page`,
      with a Link header naming the next, last, first and prev pages
      (https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api). Like GitHub's,
      its URLs name the repository by id (/repositories/4242/...): a client must follow them as given.
    Anyone with write access may edit others' comments
    (https://docs.github.com/en/communities/moderating-comments-and-conversations/managing-disruptive-comments),
    so the fake lets the token edit a human's comment: only the client's own rule keeps it off.
    """

    REPO_PATH = r"/(?:repos/acme/infra|repositories/4242)"
    ISSUE = 42
    TOKENS = {"t0ken": BOT}
    NOT_FOUND = {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
    NO_USER_AGENT = {"message": "Please make sure your request has a User-Agent header"}
    BODY_MISSING = {"message": "Validation Failed", "errors": [{"field": "body", "code": "missing_field"}]}

    def __init__(self, comments: list[dict] | None = None):
        self.comments = [copy.deepcopy(c) for c in comments or []]
        ids = [c["id"] for c in self.comments]
        assert ids == sorted(set(ids)), "seed comments in ascending id order, as GitHub lists them"
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # a short poll interval only makes close() quick; nothing waits on time
        serve = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        serve.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    @property
    def list_pages_read(self) -> int:
        return sum(1 for method, _ in self.requests if method == "GET")

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self, method: str):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake.lock:
                    fake.requests.append((method, self.path))
                    status, payload, link = fake.answer(method, self.path, self.headers, raw)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                if link:
                    self.send_header("Link", link)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PATCH(self):
                self._serve("PATCH")

        return Handler

    def answer(self, method: str, path: str, headers, raw: bytes) -> tuple[int, object, str]:
        """(status, JSON answer, Link header) for one request."""
        if not headers.get("User-Agent"):
            return 403, self.NO_USER_AGENT, ""
        auth = headers.get("Authorization") or ""
        if not auth:
            return 404, self.NOT_FOUND, ""
        scheme, _, token = auth.partition(" ")
        user = self.TOKENS.get(token) if scheme.lower() in ("bearer", "token") else None
        if user is None:
            return 401, {"message": "Bad credentials"}, ""
        url = urlparse(path)
        listing = re.fullmatch(self.REPO_PATH + r"/issues/(\d+)/comments", url.path)
        editing = re.fullmatch(self.REPO_PATH + r"/issues/comments/(\d+)", url.path)
        if listing and int(listing.group(1)) == self.ISSUE and method == "GET":
            return self._list(parse_qs(url.query))
        if listing and int(listing.group(1)) == self.ISSUE and method == "POST":
            return self._with_body(raw, lambda text: self._create(text, user))
        if editing and method == "PATCH":
            found = [c for c in self.comments if c["id"] == int(editing.group(1))]
            if found:
                return self._with_body(raw, lambda text: self._update(found[0], text))
        return 404, self.NOT_FOUND, ""

    def _with_body(self, raw: bytes, then) -> tuple[int, object, str]:
        try:
            payload = json.loads(raw or b"null")
        except ValueError:
            return 400, {"message": "Problems parsing JSON"}, ""
        if not isinstance(payload, dict):
            return 400, {"message": "Problems parsing JSON"}, ""
        if not isinstance(payload.get("body"), str):
            return 422, self.BODY_MISSING, ""
        return then(payload["body"])

    def _list(self, query: dict) -> tuple[int, object, str]:
        per_page = min(_int(query, "per_page", 30), 100)
        page = max(_int(query, "page", 1), 1)
        last = max(math.ceil(len(self.comments) / per_page), 1)
        base = f"{self.url}/repositories/4242/issues/{self.ISSUE}/comments?per_page={per_page}&page="
        links = []
        if page > 1:
            links += [f'<{base}{page - 1}>; rel="prev"']
        if page < last:
            links += [f'<{base}{page + 1}>; rel="next"', f'<{base}{last}>; rel="last"']
        if page > 1:
            links += [f'<{base}1>; rel="first"']
        return 200, self.comments[(page - 1) * per_page : page * per_page], ", ".join(links)

    def _create(self, text: str, user: dict) -> tuple[int, object, str]:
        new_id = max((c["id"] for c in self.comments), default=0) + 1
        comment = {"id": new_id, "user": user, "body": text, "created_at": "2026-02-01T00:00:00Z"}
        self.comments.append(comment)
        return 201, comment, ""

    def _update(self, comment: dict, text: str) -> tuple[int, object, str]:
        comment["body"] = text
        return 200, comment, ""


def _int(query: dict, name: str, default: int) -> int:
    try:
        return int(query[name][0])
    except (KeyError, ValueError):
        return default


def filler_comments(n: int) -> list[dict]:
    """`n` unrelated human comments, ids 1..n."""
    return [
        {"id": i, "user": HUMAN, "body": f"comment {i}", "created_at": "2026-01-01T00:00:00Z"}
        for i in range(1, n + 1)
    ]


def seed_comments(case: dict) -> list[dict]:
    """A shared case's comments in the shape GitHub lists them (the author is `user.login`)."""
    listed = [
        {
            "id": c["id"],
            "user": {"login": c["login"], "type": "Bot" if c["login"].endswith("[bot]") else "User"},
            "body": c["body"],
            "created_at": "2026-01-02T00:00:00Z",
        }
        for c in case["comments"]
    ]
    after = listed[-1]["id"] if listed else case.get("filler", 0)
    later = [  # `filler_after`: human comments after the case's own, so ours sits on a middle page
        {"id": after + i, "user": HUMAN, "body": f"later comment {i}", "created_at": "2026-01-03T00:00:00Z"}
        for i in range(1, case.get("filler_after", 0) + 1)
    ]
    return filler_comments(case.get("filler", 0)) + listed + later


def check_outcome(case: dict, github: FakeGitHub, seeded: list[dict], action: str, comment_id) -> None:
    """What the shared case expects happened on the fake GitHub; `action` and `comment_id` as reported."""
    expect = case["expect"]
    assert action == expect["action"]
    after = {c["id"]: c for c in github.comments}
    if action == "none":  # a no-change body and no comment of the stack to replace: nothing written
        assert comment_id is None and github.writes == [] and len(github.comments) == len(seeded)
    elif action == "create":
        new = [c for c in github.comments if c["id"] not in {s["id"] for s in seeded}]
        assert len(new) == 1 and new[0]["body"] == case["body"] and new[0]["user"] == BOT
        assert comment_id == new[0]["id"]
        assert github.writes == [("POST", "/repos/acme/infra/issues/42/comments")]
    else:
        assert comment_id == expect["comment_id"]
        assert len(github.comments) == len(seeded)  # nothing created
        assert after[comment_id]["body"] == case["body"]
        patched = [("PATCH", f"/repos/acme/infra/issues/comments/{comment_id}")]
        assert github.writes == (patched if action == "update" else [])
    untouched = [c for c in seeded if c["id"] != expect.get("comment_id")]
    assert all(after[c["id"]] == c for c in untouched), "a comment that is not this stack's was changed"
    if "list_pages" in expect:
        assert github.list_pages_read == expect["list_pages"]


@pytest.mark.parametrize("case", SHARED_CASES, ids=[c["name"] for c in SHARED_CASES])
def test_shared_cases_python(case):
    with FakeGitHub(seed_comments(case)) as github:
        seeded = copy.deepcopy(github.comments)
        decision = post(github, case["body"])
        check_outcome(case, github, seeded, decision.action, decision.comment_id)


@pytest.fixture
def github():
    # 150 unrelated comments first, so ours is found only by following pagination
    with FakeGitHub(filler_comments(150)) as server:
        yield server


def post(github, body, number=42, token="t0ken"):
    return upsert_comment(body, repo="acme/infra", number=number, token=token, api=github.url)


def raw_request(github: FakeGitHub, method: str, path: str, headers: dict, body: bytes | None = None):
    """One request with exactly these headers (http.client adds no User-Agent of its own)."""
    conn = http.client.HTTPConnection(urlparse(github.url).netloc, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null"), resp.getheader("Link") or ""
    finally:
        conn.close()


def test_the_fake_checks_what_github_checks(github):
    ok = {"User-Agent": "test", "Authorization": "Bearer t0ken"}
    comments = "/repos/acme/infra/issues/42/comments"

    def status(method, path, headers=ok, body=None):
        return raw_request(github, method, path, headers, body)[0]

    assert status("GET", comments, {"Authorization": "Bearer t0ken"}) == 403  # no User-Agent
    assert status("GET", comments, {"User-Agent": "test"}) == 404  # private: no token, no repository
    assert status("GET", comments, {**ok, "Authorization": "Bearer nope"}) == 401
    assert status("GET", comments, {**ok, "Authorization": "token t0ken"}) == 200
    assert status("GET", "/repos/acme/infra/issues/99/comments") == 404
    assert status("POST", comments, body=b'{"text": "hi"}') == 422
    assert status("POST", comments, body=b'{"body": 7}') == 422
    assert status("POST", comments, body=b"{not json") == 400
    assert status("PATCH", "/repos/acme/infra/issues/comments/999", body=b'{"body": "x"}') == 404
    assert github.comments == filler_comments(150)  # none of that wrote anything
    # pagination: 30 a page by default, at most 100, Link headers worked out by hand for 150 comments
    code, page1, link = raw_request(github, "GET", comments, ok)
    assert code == 200 and [c["id"] for c in page1] == list(range(1, 31))
    by_id = f"{github.url}/repositories/4242/issues/42/comments"
    assert link == f'<{by_id}?per_page=30&page=2>; rel="next", <{by_id}?per_page=30&page=5>; rel="last"'
    _, page2, link = raw_request(github, "GET", by_id.removeprefix(github.url) + "?per_page=500&page=2", ok)
    assert [c["id"] for c in page2] == list(range(101, 151))
    assert link == f'<{by_id}?per_page=100&page=1>; rel="prev", <{by_id}?per_page=100&page=1>; rel="first"'


def test_posting_is_idempotent_by_marker(github, pr_diff):
    body = render(pr_diff)
    assert post(github, body).action == "create"
    assert post(github, body).action == "unchanged"
    ours = [c for c in github.comments if marker("prod") in c["body"]]
    assert len(ours) == 1 and ours[0]["body"] == body
    # a new push changes the body: the same comment is updated, none is added
    newer = body.replace("**Monthly run-rate:", "**Monthly run-rate (rebased):")
    decision = post(github, newer)
    assert decision == Decision("update", ours[0]["id"])
    ours = [c for c in github.comments if marker("prod") in c["body"]]
    assert len(ours) == 1 and ours[0]["body"] == newer
    assert len(github.comments) == 151
    # another stack gets its own comment; unrelated comments are never touched
    assert post(github, marker("dev") + "\ndev diff\n").action == "create"
    assert len(github.comments) == 152
    assert github.comments[:150] == filler_comments(150)
    assert ("GET", "/repositories/4242/issues/42/comments?per_page=100&page=2") in github.requests


def test_a_missing_pull_request_or_a_body_without_its_marker_is_an_error(github):
    with pytest.raises(GitHubError, match="404"):
        post(github, marker("dev") + "\nbody", number=99)
    with pytest.raises(GitHubError, match="does not start with its trainfleet marker"):
        post(github, "### cost\n" + marker("dev"))
    assert github.writes == []


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


def test_a_body_not_starting_with_the_marker_given_is_refused(github):
    """With `--marker` given, the body must still start with it, or the comment is never found again."""
    with pytest.raises(GitHubError, match="does not start with its trainfleet marker"):
        upsert_comment("### cost\nno marker here", repo="acme/infra", number=42, token="t0ken",
                       api=github.url, marker=marker("dev"))  # fmt: skip
    assert github.writes == []


def test_an_api_url_with_a_trailing_slash_works(github, monkeypatch):
    """GITHUB_API_URL as some GitHub Enterprise setups write it. The URLs are checked as the client sends
    them: Python's http.server (under the fake) collapses a leading `//` before the fake could see it."""
    import urllib.request

    sent, real_urlopen = [], urllib.request.urlopen
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda req, **kw: sent.append(req.full_url) or real_urlopen(req, **kw)
    )
    body = marker("dev") + "\nbody\n"
    assert (
        upsert_comment(body, repo="acme/infra", number=42, token="t0ken", api=github.url + "/").action
        == "create"
    )
    assert sent and all("//" not in url.removeprefix("http://") for url in sent), sent


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("<!-- trainfleet-cost-diff:dev -->\n### cost", "<!-- trainfleet-cost-diff:dev -->"),
        ("<!-- trainfleet-cost-diff:dev -->\r\n### cost", "<!-- trainfleet-cost-diff:dev -->"),
        ("> <!-- trainfleet-cost-diff:dev -->\nquoted in a reply", None),
        ("<!-- trainfleet-cost-diff:dev\nnot closed", None),
        ("see <!-- trainfleet-cost-diff:dev --> above", None),
        ("### cost\n<!-- trainfleet-cost-diff:dev -->", None),
    ],
)
def test_a_bodys_marker_is_its_whole_first_line(body, expected):
    assert comment_marker(body) == expected
