"""`trainfleet catalog refresh --cloud aws --capacity`: the Spot Instance Advisor feed's buckets, dated, over the
snapshot's, against a loopback stand-in that serves a real excerpt of the feed (tests/fixtures/spot_advisor/) and
fails the way S3 and the network do: throttling (503 SlowDown, then an answer), a bucket policy's 403 AccessDenied
(an XML body), a cut-off answer, and a feed whose ranges no longer mean the catalog's buckets.
"""

from __future__ import annotations

import copy
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env
from tests.loopback import LoopbackServer

FEED = json.loads((Path(__file__).parent / "fixtures" / "spot_advisor" / "spot-advisor-data.json").read_text())
SNAPSHOT = read_offers(DATA_DIR / "offers.csv")
S3_ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message>'
    b"<RequestId>TESTREQUEST</RequestId><HostId>test</HostId></Error>"
)


class FakeAdvisorFeed(LoopbackServer):
    """GET /spot-advisor-data.json: `feed`, after `throttle` 503 SlowDown answers; or one fixed `fault`."""

    def __init__(self, feed: dict, throttle: int = 0, fault: str = ""):
        self.feed, self.throttle, self.fault, self.requests = feed, throttle, fault, 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests += 1
                if self.path != "/spot-advisor-data.json":
                    return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
                if server.fault == "denied":
                    return self._send(403, S3_ACCESS_DENIED, "application/xml")
                if server.throttle:
                    server.throttle -= 1
                    return self._send(503, b"<Error><Code>SlowDown</Code></Error>", "application/xml",
                                      {"Retry-After": "0"})  # fmt: skip
                body = json.dumps(server.feed).encode()
                self._send(200, body[: len(body) // 2] if server.fault == "truncated" else body, "application/json")

            def _send(self, code, body, content_type, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


@pytest.fixture
def feed_server(request):
    servers = []

    def start(feed=FEED, **kwargs):
        server = FakeAdvisorFeed(feed, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def refresh(server, home, *more):
    env = {**isolated_env(home), "TRAINFLEET_SPOT_ADVISOR_URL": f"{server.url}/spot-advisor-data.json"}
    return run_trainfleet("catalog", "refresh", "--cloud", "aws", "--capacity", *more, env=env), env


def us_east_p5(env) -> list[dict]:
    shown = run_trainfleet("catalog", "show", "p5.48xlarge", "--region", "us-east-1", "--json", env=env).json()
    return shown["offers"], shown["sources"]


def test_a_refresh_dates_the_buckets_and_a_moved_bucket_reaches_the_catalog(feed_server, tmp_path):
    moved = copy.deepcopy(FEED)
    assert moved["spot_advisor"]["us-east-1"]["Linux"]["p5.48xlarge"]["r"] == 4  # the feed as published: >20%
    moved["spot_advisor"]["us-east-1"]["Linux"]["p5.48xlarge"]["r"] = 1  # the feed a month later, say: 5-10%
    server = feed_server(moved, throttle=2)
    result, env = refresh(server, tmp_path, "--json")
    assert result.code == 0, result.stderr
    summary = result.json()
    assert server.requests == 3  # two throttled answers, then the feed
    linux = [(r, t) for r, by_os in FEED["spot_advisor"].items() for t in by_os["Linux"]]
    assert summary["buckets"] == len([x for x in linux if x[1] not in ("m5.large", "c5.xlarge")])
    assert summary["regions"] == 3
    written = json.loads((tmp_path / "spot-advisor.json").read_text())
    assert written["fetched_at"] == summary["fetched_at"] and ["us-east-1", "p5.48xlarge", 1] in written["buckets"]
    assert not [row for row in written["buckets"] if row[1] in ("m5.large", "c5.xlarge")]
    offers, sources = us_east_p5(env)
    assert {o["interruption"] for o in offers} == {"5-10%/month"}
    assert sources["aws-spot-advisor-refresh"]["as_of"] == summary["fetched_at"]
    # a region the excerpt leaves out keeps the snapshot's bucket and source
    elsewhere = run_trainfleet("catalog", "show", "p5.48xlarge", "--region", "ap-northeast-1", "--json", env=env)
    snapshot = {o.interruption_label for o in SNAPSHOT if (o.instance_type, o.region) == ("p5.48xlarge",
                                                                                         "ap-northeast-1")}  # fmt: skip
    assert {o["interruption"] for o in elsewhere.json()["offers"]} == snapshot
    assert set(elsewhere.json()["sources"]) == {"skypilot-aws", "aws-spot-advisor"}


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("denied", "HTTP 403"),
        ("truncated", "malformed JSON"),
    ],
)
def test_a_failed_fetch_is_one_line_exit_1_and_keeps_the_previous_file(feed_server, tmp_path, fault, says):
    good, _ = refresh(feed_server(), tmp_path)
    assert good.code == 0, good.stderr
    before = (tmp_path / "spot-advisor.json").read_bytes()
    result, _ = refresh(feed_server(fault=fault), tmp_path)
    assert result.code == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "is unchanged" in lines[0], result.stderr
    assert (tmp_path / "spot-advisor.json").read_bytes() == before


def test_a_feed_whose_ranges_changed_writes_nothing(feed_server, tmp_path):
    changed = copy.deepcopy(FEED)
    changed["ranges"][0]["label"] = "<3%"
    result, _ = refresh(feed_server(changed), tmp_path)
    assert result.code == 1 and "its ranges are" in result.stderr and "nothing was written" in result.stderr
    assert not (tmp_path / "spot-advisor.json").exists()


def test_a_corrupt_refresh_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "spot-advisor.json").write_text('{"format": 1, "fetched_at": "2026-11-29T00:00:00Z", "source": '
                                                 '"x", "buckets": [["us-east-1", "p5.48xlarge", 7]]}')  # fmt: skip
    result = run_trainfleet("catalog", "show", "p5.48xlarge", env=isolated_env(tmp_path))
    assert_one_line_error(result, "spot-advisor.json", "is corrupt", "--capacity")


def test_capacity_refuses_a_region_list(tmp_path):
    assert_one_line_error(
        run_trainfleet("catalog", "refresh", "--cloud", "aws", "--capacity", "--regions", "us-east-1",
                       env=isolated_env(tmp_path)),
        "--capacity", "--regions",
    )  # fmt: skip
