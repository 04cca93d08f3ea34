"""`trainfleet catalog refresh --cloud gcp --capacity`: Compute Engine's advice.capacityHistory preemption shares,
shown beside GCP's labelled assumption, against a loopback Compute API built from the request and answer types of
Google's own client (tests/fixtures/gcp_preemption/): the SPOT-only request, zones as `zones/ZONE`, a machine type
a zone does not offer (400), throttling (429 RESOURCE_EXHAUSTED), a bad token (401), a caller without the
permission (403) and a fresh project whose Compute Engine API is off (403 SERVICE_DISABLED).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env
from tests.loopback import JsonHandler, LoopbackServer, send_json, servers_fixture

FIXTURES = Path(__file__).parent / "fixtures" / "gcp_preemption"
TOKEN, PROJECT = "test-gcp-token", "trainfleet-test"
ROUTE = re.compile(r"^/compute/v1/projects/([^/]+)/regions/([^/]+)/advice/capacityHistory$")
PAIRS = sorted({(o.zone, o.instance_type) for o in read_offers(DATA_DIR / "offers.csv")
                if o.cloud == "gcp" and o.spot_usd_per_hour})  # fmt: skip
NOT_OFFERED = {("us-central1-a", "a3-highgpu-8g"), ("europe-west4-a", "g2-standard-4")} & set(PAIRS)
END = datetime(2026, 11, 29, tzinfo=UTC)


def history(zone: str, machine_type: str) -> list[dict]:
    """30 daily records, a made-up preemption share per day (a hash of the pair and the day); one day with no rate."""
    out = []
    for day in range(30):
        start = END - timedelta(days=30 - day)
        record = {"interval": {"startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                               "endTime": (start + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}}  # fmt: skip
        if day != 7:
            digest = hashlib.sha256(f"{zone}/{machine_type}/{day}".encode()).digest()
            record["preemptionRate"] = digest[0] / 255
        out.append(record)
    return out


def google_error(code: int, status: str, message: str, reason: str = "") -> dict:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason}] if reason else []
    return {"error": {"code": code, "message": message, "status": status, "details": details}}


class FakeCompute(LoopbackServer):
    """POST /compute/v1/projects/P/regions/R/advice/capacityHistory. `fault`: "disabled" (a fresh project: the API
    off), "denied" (no permission); `throttle`: that many 429s first."""

    def __init__(self, fault: str = "", throttle: int = 0):
        self.fault, self.throttle, self.requests = fault, throttle, 0
        server = self

        class Handler(JsonHandler):
            def do_POST(self):
                server.requests += 1
                body = self.json_body()
                route = ROUTE.match(self.path)
                if not route:
                    return send_json(self, 404, google_error(404, "NOT_FOUND", f"no route {self.path}"))
                project, region = route.groups()
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return send_json(self, 401, google_error(401, "UNAUTHENTICATED", "Request had invalid authentication "
                                                        "credentials. Expected OAuth 2 access token."))  # fmt: skip
                if server.fault == "disabled":
                    return send_json(self, 403, google_error(403, "PERMISSION_DENIED", f"Compute Engine API has not been "
                                      f"used in project {project} before or it is disabled.", "SERVICE_DISABLED"))  # fmt: skip
                if server.fault == "denied" or project != PROJECT:
                    return send_json(self, 403, google_error(403, "PERMISSION_DENIED", "The caller does not have "
                                                        "permission", "IAM_PERMISSION_DENIED"))  # fmt: skip
                if server.throttle:
                    server.throttle -= 1
                    return send_json(self, 429, google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric "
                                                        "'Read requests' of service 'compute.googleapis.com'"))  # fmt: skip
                props = body.get("instanceProperties") or {}
                location = (body.get("locationPolicy") or {}).get("location", "")
                zone = location.removeprefix("zones/")
                if (props.get("scheduling") or {}).get("provisioningModel") != "SPOT":
                    return self._bad("resource.instanceProperties.scheduling.provisioningModel")
                if body.get("types") != ["PREEMPTION"] and "PREEMPTION" not in (body.get("types") or []):
                    return self._bad("resource.types")
                if not location.startswith("zones/") or zone.rsplit("-", 1)[0] != region:
                    return self._bad("resource.locationPolicy.location")
                pair = (zone, props.get("machineType"))
                if pair not in PAIRS or pair in NOT_OFFERED:
                    return self._bad("resource.instanceProperties.machineType")
                send_json(self, 200, {"location": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
                                 "machineType": pair[1], "preemptionHistory": history(*pair)})  # fmt: skip

            def _bad(self, field):
                send_json(self, 400, google_error(400, "INVALID_ARGUMENT", f"Invalid value for field '{field}'"))


        super().__init__(Handler)


@pytest.fixture
def compute():
    yield from servers_fixture(FakeCompute)


def gcp_env(server, home, token=TOKEN, project=PROJECT) -> dict:
    return {**isolated_env(home), "TRAINFLEET_GCP_COMPUTE_URL": server.url, "GOOGLE_OAUTH_ACCESS_TOKEN": token,
            "GOOGLE_CLOUD_PROJECT": project}  # fmt: skip


def refresh(env, *more):
    return run_trainfleet("catalog", "refresh", "--cloud", "gcp", "--capacity", *more, env=env, timeout=300)


def test_the_fake_follows_the_client_librarys_types():
    types = (FIXTURES / "compute_v1_capacity_history_types.py.txt").read_text()
    assert "This field must be set to SPOT" in types and "(total preempted Spots) / (total" in types
    for name in ("preemption_history", "preemption_rate", "start_time", "end_time", "machine_type", "location"):
        assert f"{name}:" in types
    rest = (FIXTURES / "compute_v1_advice_rest_base_capacity_history.py.txt").read_text()
    assert '"/compute/v1/projects/{project}/regions/{region}/advice/capacityHistory"' in rest


def test_a_refresh_asks_every_pair_and_shows_the_share_beside_the_assumption(compute, tmp_path):
    server = compute(throttle=2)
    env = gcp_env(server, tmp_path)
    result = refresh(env, "--json", "--parallel", "8")
    assert result.code == 0, result.stderr
    summary = result.json()
    assert summary["asked"] == len(PAIRS) == 650 and summary["answered"] == len(PAIRS) - len(NOT_OFFERED)
    assert summary["skipped"] == len(NOT_OFFERED) == 2 and "machineType" in summary["first_skip"]
    assert summary["records"] == 29 * summary["answered"]  # the day with no rate is left out
    assert server.requests == len(PAIRS) + 2  # two throttled answers were asked again

    zone, machine = "us-central1-b", "a3-highgpu-8g"
    shares = [r["preemptionRate"] for r in history(zone, machine) if "preemptionRate" in r]
    expected = f"{sum(shares) / len(shares):.0%} of the Spot VMs that stopped were preempted (mean of 29 intervals"
    shown = run_trainfleet("catalog", "show", machine, "--region", "us-central1", "--json", env=env).json()
    by_zone = {o["zone"]: o for o in shown["offers"]}
    assert expected in by_zone[zone]["interruption_evidence"]
    assert by_zone[zone]["interruption"] == "10-15%/month (assumed)"  # a share of stops is no rate: kept
    assert by_zone["us-central1-a"]["interruption_evidence"] is None  # the pair the API refused
    assert shown["sources"]["gcp-capacity-history-refresh"]["as_of"] == summary["fetched_at"]
    gcp = run_trainfleet("catalog", "status", "--cloud", "gcp", "--json", env=env).json()["interruption"]
    assert [(r["source"], r["rate"], r["offers"], r["with_evidence"]) for r in gcp] == [
        ("assumed-interruption", "assumed", len(PAIRS), summary["answered"])]  # every spot offer is one pair
    text = run_trainfleet("catalog", "show", machine, "--region", "us-central1", env=env).stdout
    assert " ".join(expected.split()[:4]) in " ".join(text.split())  # a footnote under the table

    plan = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "20B", "--deadline", "200h", "--clouds", "gcp",
                          "--purchase", "spot", "--json", env=env).json()["best"]  # fmt: skip
    line = next(a for a in plan["assumptions"] if a.startswith("GCP publishes no interruption rate over time"))
    assert "GCP capacity history:" in line and "a share of stops, not a rate" in line


@pytest.mark.parametrize(
    ("fault", "token", "says", "requests"),
    [
        ("disabled", TOKEN, "gcloud services enable compute.googleapis.com --project=trainfleet-test", 1),
        ("denied", TOKEN, "roles/compute.viewer", 1),
        ("", "expired", "gcloud auth application-default login", 1),
    ],
)
def test_a_refusal_stops_at_the_first_request_and_keeps_the_previous_file(compute, tmp_path, fault, token, says,
                                                                          requests):  # fmt: skip
    previous = tmp_path / "gcp-preemption-history.json"
    previous.write_text(json.dumps({"format": 1, "fetched_at": "2026-11-01T00:00:00Z", "source": "x",
                                    "project": PROJECT, "records": []}))  # fmt: skip
    before = previous.read_bytes()
    server = compute(fault=fault)
    result = refresh(gcp_env(server, tmp_path, token))
    assert result.code == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "is unchanged" in lines[0], result.stderr
    assert server.requests == requests  # a fresh project's refusal costs one request, not 650
    assert previous.read_bytes() == before


def test_no_project_is_one_line(compute, tmp_path):
    result = refresh(gcp_env(compute(), tmp_path, project=""))
    assert result.code == 1 and "GOOGLE_CLOUD_PROJECT" in result.stderr and "Traceback" not in result.stderr


def test_a_corrupt_history_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "gcp-preemption-history.json").write_text(json.dumps(
        {"format": 1, "fetched_at": "2026-11-29T00:00:00Z", "source": "x", "project": PROJECT,
         "records": [["us-central1-b", "a3-highgpu-8g", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", 1.5]]}))  # fmt: skip
    result = run_trainfleet("catalog", "show", "a3-highgpu-8g", env=isolated_env(tmp_path))
    assert_one_line_error(result, "gcp-preemption-history.json", "corrupt", "--cloud gcp --capacity")
