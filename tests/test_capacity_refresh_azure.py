"""`trainfleet catalog refresh --cloud azure --capacity`: Azure Resource Graph's spot eviction rates, per hour, into
every command, against a loopback Resource Graph built from its documented shapes (tests/fixtures/azure_eviction/):
the POST body and its `$top`/`$skipToken` paging, `id` needed in the projection for pages, `resultTruncated` as a
string, per-user throttling (429 with x-ms-user-quota-resets-after), ARM's 401 and 403 AuthorizationFailed.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env
from tests.loopback import JsonHandler, LoopbackServer, arm_error, send_json, servers_fixture

FIXTURES = Path(__file__).parent / "fixtures" / "azure_eviction"
TOKEN = "test-arm-token"
PATH = "/providers/Microsoft.ResourceGraph/resources"
# The eviction-rate rows a subscription might see (made up; the bands are Azure's). Lower case, as Resource Graph
# gives sku.name and location. standard_d2s_v4 is a size the catalog does not carry: it must be left out.
ROWS = [
    ("standard_nd96asr_v4", "eastus", "0-5"),
    ("standard_nd96asr_v4", "westus2", "0-5"),
    ("standard_nd96asr_v4", "southcentralus", "5-10"),
    ("standard_nd96asr_v4", "westeurope", "10-15"),
    ("standard_nc24ads_a100_v4", "eastus", "20+"),
    ("standard_nc24ads_a100_v4", "southcentralus", "15-20"),
    ("standard_nc24ads_a100_v4", "westus2", "5-10"),
    ("standard_nd96amsr_a100_v4", "eastus", "10-15"),
    ("standard_nd96amsr_a100_v4", "westus3", "0-5"),
    ("standard_nc96ads_a100_v4", "eastus", "15-20"),
    ("standard_nc96ads_a100_v4", "japaneast", "5-10"),
    ("standard_d2s_v4", "eastus", "0-5"),
]


def resource_id(size: str, location: str) -> str:
    # the id Resource Graph gives these rows (the unit-test fixture in Azure's own PowerShell module has this form)
    return f"/providers/Microsoft.Compute/skuSpotEvictionRate/{size}/location/{location}"


class FakeResourceGraph(LoopbackServer):
    """POST /providers/Microsoft.ResourceGraph/resources?api-version=2022-10-01 over ROWS.

    What the real service checks, it checks: the bearer token (401), the api-version (400), the query's table,
    type and size list, `$top` at most 1000 (400). At most `page_rows` rows a page (the real page is at most
    $top = 1000 rows; a small page here stands for a large table), with a `$skipToken` while rows remain, but only
    when `id` is projected (else resultTruncated "true" and no token, as documented). `throttle` answers 429 to that
    many requests first, each on the request after the first page (so a retry must resend the same token);
    `fault` "denied" is a 403 AuthorizationFailed."""

    def __init__(self, rows=ROWS, page_rows: int = 5, throttle: int = 0, fault: str = ""):
        self.rows, self.page_rows, self.throttle, self.fault = rows, page_rows, throttle, fault
        self.requests: list[dict] = []
        server = self

        class Handler(JsonHandler):
            def do_POST(self):
                body = self.json_body()
                server.requests.append(body)
                path, _, query_string = self.path.partition("?")
                if path != PATH:
                    return arm_error(self, 404, "NotFound", f"no route {path}")
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return arm_error(self, 401, "InvalidAuthenticationToken", "The access token is invalid.")
                if "api-version=2022-10-01" not in query_string:
                    return arm_error(self, 400, "InvalidApiVersionParameter", "The api-version is invalid.")
                if server.fault == "denied":
                    return arm_error(self, 403, "AuthorizationFailed", "The client 'x' with object id 'y' does not have "
                                       "authorization to perform action 'Microsoft.ResourceGraph/resources/read'.")  # fmt: skip
                options = body.get("options") or {}
                if server.throttle and options.get("$skipToken"):
                    server.throttle -= 1
                    return arm_error(self, 429, "RateLimiting", "Please provide below info when asking for support",
                                       {"x-ms-user-quota-remaining": "0", "x-ms-user-quota-resets-after": "00:00:00"})  # fmt: skip
                top = options.get("$top", 1000)
                if not isinstance(top, int) or not 1 <= top <= 1000:
                    return arm_error(self, 400, "BadRequest", "$top must be between 1 and 1000")
                kql = body.get("query", "")
                listed = re.search(r"sku\.name in~ \(([^)]*)\)", kql)
                if ("SpotResources" not in kql or "microsoft.compute/skuspotevictionrate/location" not in kql
                        or not listed):  # fmt: skip
                    return arm_error(self, 400, "BadRequest", "Please check the query")
                sizes = {s.strip().strip("'").lower() for s in listed.group(1).split(",")}
                rows = sorted((resource_id(s, loc), s, loc, r) for s, loc, r in server.rows if s in sizes)
                start = int(base64.b64decode(options["$skipToken"])) if options.get("$skipToken") else 0
                page = rows[start : start + min(top, server.page_rows)]
                answer = {"totalRecords": len(rows), "count": len(page), "resultTruncated": "false", "facets": [],
                          "data": [{"id": i, "skuName": s, "location": loc, "evictionRate": r}
                                   for i, s, loc, r in page]}  # fmt: skip
                if start + len(page) < len(rows):
                    if re.search(r"\|\s*project id\b", kql):
                        answer["$skipToken"] = base64.b64encode(str(start + len(page)).encode()).decode()
                    else:
                        answer["resultTruncated"] = "true"
                send_json(self, 200, answer, {"x-ms-user-quota-remaining": "14", "x-ms-user-quota-resets-after": "00:00:05"})



        super().__init__(Handler)


@pytest.fixture
def graph():
    yield from servers_fixture(FakeResourceGraph)


def azure_env(server, home, token=TOKEN) -> dict:
    return {**isolated_env(home), "TRAINFLEET_AZURE_MANAGEMENT_URL": server.url, "AZURE_ACCESS_TOKEN": token}


def refresh(env, *more):
    return run_trainfleet("catalog", "refresh", "--cloud", "azure", "--capacity", *more, env=env)


def test_the_fake_answers_in_the_documented_shape():
    """The stand-in's answer has the keys and types of Azure's own example answers."""
    for name in ("ResourcesFirstPageQuery", "ResourcesNextPageQuery"):
        documented = json.loads((FIXTURES / f"{name}.json").read_text())["responses"]["200"]["body"]
        assert set(documented) == {"totalRecords", "count", "resultTruncated", "facets", "$skipToken", "data"}
        assert documented["resultTruncated"] == "false"  # a string, not a bool
    doc = (FIXTURES / "spot-vms-eviction-rates.md").read_text()
    assert "quoted _per hour_" in doc and "28 trailing days" in doc
    assert "microsoft.compute/skuspotevictionrate/location" in doc and "properties.evictionRate" in doc


def test_a_refresh_follows_every_page_and_the_rates_reach_the_catalog_per_hour(graph, tmp_path):
    server = graph(throttle=1)
    env = azure_env(server, tmp_path)
    result = refresh(env, "--json")
    assert result.code == 0, result.stderr
    summary = result.json()
    catalog_rows = [r for r in ROWS if r[0] != "standard_d2s_v4"]
    assert summary["rates"] == len(catalog_rows) and summary["regions"] == 6 and summary["sizes"] == 4
    # 12 rows at 5 a page: 3 pages, one of them throttled once and sent again with the same $skipToken
    tokens = [b["options"].get("$skipToken") for b in server.requests]
    assert len(server.requests) == 4 and tokens[1] == tokens[2] and tokens[1] is not None
    assert all(b["options"]["$top"] == 1000 for b in server.requests)
    written = json.loads((tmp_path / "azure-eviction-rates.json").read_text())
    assert ["eastus", "Standard_NC24ads_A100_v4", 0.2, None] in written["rates"]
    assert not [r for r in written["rates"] if r[1].lower() == "standard_d2s_v4"]

    shown = run_trainfleet("catalog", "show", "Standard_ND96asr_v4", "--region", "eastus", "--json", env=env).json()
    assert {o["interruption"] for o in shown["offers"]} == {"0-5%/hour"}
    assert shown["sources"]["azure-eviction-rate-refresh"]["as_of"] == summary["fetched_at"]
    nc = run_trainfleet("catalog", "show", "Standard_NC24ads_A100_v4", "--json", env=env).json()
    by_region = {o["region"]: o["interruption"] for o in nc["offers"]}
    assert by_region["eastus"] == ">20%/hour" and by_region["southcentralus"] == "15-20%/hour"
    # `catalog check` no longer counts the refreshed rows as assumed: one fewer per catalog row Resource Graph rated
    rated = {(loc, s) for s, loc, _ in catalog_rows}
    refreshed_rows = sum((o["region"], o["instance_type"].lower()) in rated for o in
                         run_trainfleet("catalog", "list", "--cloud", "azure", "--json", env=env).json())  # fmt: skip

    def assumed(run_env):
        got = run_trainfleet("catalog", "check", "--cloud", "azure", "--json", env=run_env).json()
        return {r["rule"]: r["rows"] for r in got["rules"]}["interruption-assumed"]

    assert refreshed_rows >= 8 and assumed(env) == assumed(isolated_env(tmp_path / "plain")) - refreshed_rows
    # `catalog status` says where the spot offers' rates come from now, and how old
    status = {r["source"]: r for r in run_trainfleet("catalog", "status", "--cloud", "azure", "--json",
                                                     env=env).json()["interruption"]}  # fmt: skip
    listed = run_trainfleet("catalog", "list", "--cloud", "azure", "--json", env=env).json()
    hourly = sum(o["interruption"].endswith("/hour") and o["spot_usd_per_hour"] is not None for o in listed)
    refreshed = status["azure-eviction-rate-refresh"]
    assert (refreshed["offers"], refreshed["rate"], refreshed["as_of"]) == (hourly, "published", summary["fetched_at"])
    assert status["assumed-interruption"]["rate"] == "assumed" and status["assumed-interruption"]["as_of"] is None
    # a region Resource Graph did not answer for keeps the snapshot's labelled assumption
    assert {r for r, label in by_region.items() if label == "10-15%/month (assumed)"} == set(by_region) - {
        "eastus", "southcentralus", "westus2"}


def test_a_plan_on_a_refreshed_size_prices_the_hourly_rate(graph, tmp_path):
    """0-5% per hour is 2.5% per node-hour taken: -ln(1 - 0.025) = 0.02532 interruptions per node-hour, 730 times the
    snapshot's 10-15%/month assumption (0.000183): the same 4 nodes lose one about every 10 h instead of every 57
    days, and pay for it."""
    env = azure_env(graph(), tmp_path)
    assert refresh(env).code == 0
    args = ("plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "1000h", "--clouds", "azure",
            "--accelerators", "A100-40GB", "--regions", "eastus", "--purchase", "spot")  # fmt: skip
    plain = isolated_env(tmp_path / "plain")
    before, after = run_trainfleet(*args, "--json", env=plain), run_trainfleet(*args, "--json", env=env)
    assert before.code == 0 and after.code == 0, (before.stderr, after.stderr)
    old, new = before.json()["best"], after.json()["best"]
    assert old["instance_type"] == new["instance_type"] == "Standard_ND96asr_v4"
    assert old["interruption"] == "10-15%/month (assumed)" and new["interruption"] == "0-5%/hour"
    assert any("eviction rate 0-5%/hour" in a and "2.5% per node-hour taken" in a for a in new["assumptions"])
    assert new["expected_interruptions"] > 30 * old["expected_interruptions"]  # 51 against 0.93 (failures too)
    assert new["expected_cost_usd"] > old["expected_cost_usd"]
    explained = run_trainfleet(*args, "--explain", env=env).stdout
    assert "hazard per node: spot 2.53e-02/h" in explained, explained
    assert "hazard per node: spot 1.83e-04/h" in run_trainfleet(*args, "--explain", env=plain).stdout


@pytest.mark.parametrize(
    ("kwargs", "token", "says"),
    [
        ({"fault": "denied"}, TOKEN, "AuthorizationFailed"),
        ({}, "expired-token", "az login"),
        ({"throttle": 9}, TOKEN, "throttled (HTTP 429)"),
    ],
)
def test_a_refusal_is_one_line_exit_1_and_keeps_the_previous_file(graph, tmp_path, kwargs, token, says):
    good = refresh(azure_env(graph(), tmp_path))
    assert good.code == 0, good.stderr
    before = (tmp_path / "azure-eviction-rates.json").read_bytes()
    result = refresh(azure_env(graph(**kwargs), tmp_path, token))
    assert result.code == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "is unchanged" in lines[0], result.stderr
    assert (tmp_path / "azure-eviction-rates.json").read_bytes() == before


def test_a_rate_that_is_not_a_range_writes_nothing(graph, tmp_path):
    rows = [*ROWS, ("standard_nd96asr_v4", "centralus", "High")]
    result = refresh(azure_env(graph(rows=rows), tmp_path))
    assert result.code == 1 and "'High'" in result.stderr and "nothing was written" in result.stderr
    assert not (tmp_path / "azure-eviction-rates.json").exists()


def test_no_token_and_no_sdk_login_is_one_line(tmp_path):
    env = {**isolated_env(tmp_path), "TRAINFLEET_AZURE_MANAGEMENT_URL": "http://127.0.0.1:9", "AZURE_CLIENT_ID": "",
           "IDENTITY_ENDPOINT": "", "MSI_ENDPOINT": "", "AZURE_CONFIG_DIR": str(tmp_path / "no-az")}  # fmt: skip
    result = refresh(env)
    assert result.code == 1 and "Traceback" not in result.stderr
    assert "az login" in result.stderr or "AZURE_ACCESS_TOKEN" in result.stderr, result.stderr


def test_a_corrupt_rates_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "azure-eviction-rates.json").write_text(json.dumps(
        {"format": 1, "fetched_at": "2026-11-29T00:00:00Z", "source": "x",
         "rates": [["eastus", "Standard_ND96asr_v4", 0.05, 0.01]]}))  # fmt: skip
    result = run_trainfleet("catalog", "show", "Standard_ND96asr_v4", env=isolated_env(tmp_path))
    assert_one_line_error(result, "azure-eviction-rates.json", "corrupt", "--cloud azure --capacity")
