"""`trainfleet spend` on GCP (BigQuery billing export via jobs.query) and Azure (Cost Management query),
against stand-ins that evaluate the request (tests/fake_price_apis.py):

- BigQuery runs the SQL it is sent (in SQLite) over rows shaped as the standard usage cost export
  (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/standard-usage), with the
  named query parameters as sent; an unknown table or bad SQL fails as BigQuery answers it.
- Azure applies the query's filter, timePeriod, grouping and aggregation to seeded per-day rows
  (https://learn.microsoft.com/en-us/rest/api/cost-management/query/usage).

Seeded rows sit on the days either side of both bounds, under other stacks' values and under other
keys, so a date bound off by one day, a wrong label/tag key or value changes the answer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import date

import pytest

from infra.errors import TrainfleetError
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import FakePriceApis, azure_cost_row, billing_export_row, isolated_env

STACK = """\
config:
  gcp:project: proj-1
  azure-native:subscriptionId: 00000000-1111-2222-3333-444444444444
  trainfleet:job:
    name: llama-13b
    params: 13B
    tokens: 50B
    planned_hours: 100
    planned_cost_usd: 2000
  trainfleet:fleets:
  - name: train-gcp
    cloud: gcp
    region: us-central1
    instance_type: a2-highgpu-8g
    nodes: 2
  - name: train-azure
    cloud: azure
    region: eastus
    instance_type: Standard_ND96asr_v4
    nodes: 1
  trainfleet:billing_export:
    enabled: true
"""
DATASET = "proj-1.trainfleet_billing_prod"
USD_EXPORT = f"{DATASET}.gcp_billing_export_v1_012345_6789AB_CDEF01"  # one table per billing account
EUR_EXPORT = f"{DATASET}.gcp_billing_export_v1_0ABCDE_F01234_56789A"
MINE = {"trainfleet-stack": "prod"}


# The runs below ask for --since 2026-11-01 --until 2026-11-02.
def gcp_rows(currency: str = "USD") -> list[dict]:
    def row(service, start, cost, labels=MINE, **more):
        return billing_export_row(service, start, cost, labels=labels, currency=currency, **more)

    return [
        row("Compute Engine", "2026-10-31T23:00:00Z", 999.0),  # the last hour before --since
        row("Compute Engine", "2026-11-01T00:00:00Z", 600.0, credits=(-100.0,)),  # the first hour of --since
        row("Compute Engine", "2026-11-01T12:00:00Z", 50.0),
        row("Cloud Storage", "2026-11-01T05:00:00Z", 3.5),
        row("Compute Engine", "2026-11-02T23:00:00Z", 700.0),  # the last hour of --until
        row("Compute Engine", "2026-11-03T00:00:00Z", 4000.0),  # the first hour after --until
        row(
            "Compute Engine", "2026-11-02T10:00:00Z", 999.0, labels={"trainfleet-stack": "dev"}
        ),  # another stack
        row(
            "Compute Engine", "2026-11-02T10:00:00Z", 888.0, labels={"env": "prod"}
        ),  # "prod" under another key
        row("Compute Engine", "2026-11-02T11:00:00Z", 77.0, labels={}),  # unlabelled
    ]


# Worked by hand from the rows labelled trainfleet-stack=prod, cost plus credits:
#   2026-11-01 Compute Engine 600 - 100 + 50 = 550, Cloud Storage 3.5; 2026-11-02 Compute Engine 700.
GCP_TOTAL = 1253.5
AZ_ROWS = [
    azure_cost_row("2026-10-31", "Virtual Machines", 999.0, tags=MINE),  # the day before --since
    azure_cost_row("2026-11-01", "Virtual Machines", 300.0, tags=MINE),
    azure_cost_row("2026-11-01", "Storage", 2.25, tags=MINE),
    azure_cost_row("2026-11-02", "Virtual Machines", 310.0, tags=MINE),  # --until itself
    azure_cost_row("2026-11-03", "Virtual Machines", 4000.0, tags=MINE),  # the day after --until
    azure_cost_row("2026-11-02", "Virtual Machines", 888.0, tags={"trainfleet-stack": "dev"}),
    azure_cost_row("2026-11-02", "Virtual Machines", 777.0, tags={"env": "prod"}),
]
# By hand: 2026-11-01 Virtual Machines 300, Storage 2.25; 2026-11-02 Virtual Machines 310.
AZURE_TOTAL = 612.25


def start_fake(*exports: tuple[str, list[dict]]) -> FakePriceApis:
    server = FakePriceApis(azure_cost_rows=AZ_ROWS)
    for table, rows in exports:
        server.bigquery.add_table(table, rows)
    return server.start()


@pytest.fixture
def fake():
    server = start_fake((USD_EXPORT, gcp_rows()))
    yield server
    server.stop()


@pytest.fixture
def stack_file(tmp_path):
    path = tmp_path / "stacks" / "Pulumi.prod.yaml"
    path.parent.mkdir()
    path.write_text(STACK)
    return path


def env_for(tmp_path, fake, **extra):
    return {**isolated_env(tmp_path), **fake.env(), "GOOGLE_OAUTH_ACCESS_TOKEN": "t0ken",
            "AZURE_ACCESS_TOKEN": "t0ken", **extra}  # fmt: skip


def spend(stack_file, env, *more):
    return run_trainfleet(
        "spend", "--stack", str(stack_file), "--since", "2026-11-01", "--until", "2026-11-02", *more, env=env
    )


def test_both_clouds_by_label_and_tag_beside_the_plan(tmp_path, fake, stack_file):
    data = spend(stack_file, env_for(tmp_path, fake), "--json").json()
    assert data["actual_usd"] == pytest.approx(GCP_TOTAL + AZURE_TOTAL)  # 1865.75
    assert data["difference_usd"] == pytest.approx(-134.25)  # 1865.75 - 2000
    services = {(s["cloud"], s["service"]): s["cost"] for s in data["by_service"]}
    assert services == {
        ("gcp", "Compute Engine"): pytest.approx(1250.0),  # 550 + 700
        ("gcp", "Cloud Storage"): pytest.approx(3.5),
        ("azure", "Virtual Machines"): pytest.approx(610.0),  # 300 + 310
        ("azure", "Storage"): pytest.approx(2.25),
    }
    assert [(d["day"], d["clouds"]) for d in data["by_day"]] == [
        ("2026-11-01", {"gcp": pytest.approx(553.5), "azure": pytest.approx(302.25)}),
        ("2026-11-02", {"gcp": pytest.approx(700.0), "azure": pytest.approx(310.0)}),
    ]
    # BigQuery: the query names the stack's export tables (a wildcard over its billing accounts) and
    # passes label and dates as parameters; 3 result rows at 2 a page went through getQueryResults.
    # Azure: 4 result rows at 2 a page followed nextLink.
    queries = [d for api, d in fake.requests if api == "bigquery-query"]
    assert len(queries) == 1 and f"FROM `{DATASET}.gcp_billing_export_v1_*`" in queries[0]
    assert "@label_value" in queries[0]
    assert [api for api, _ in fake.requests].count("bigquery-results") == 1
    assert [api for api, _ in fake.requests].count("azure-cost") == 2


def test_human_output(tmp_path, fake, stack_file):
    result = spend(stack_file, env_for(tmp_path, fake))
    assert result.code == 0, result.stderr
    assert "Compute Engine" in result.stdout and "Virtual Machines" in result.stdout
    assert "vs plan estimate $2,000.00 (job.planned_cost_usd, 100 h)" in result.stdout
    assert "difference -$134.25 (-6.7%)" in result.stdout  # 134.25 / 2000 = 6.7 %


def test_one_cloud_only(tmp_path, fake, stack_file):
    data = spend(stack_file, env_for(tmp_path, fake), "--cloud", "azure", "--json").json()
    assert data["clouds"] == ["azure"] and data["actual_usd"] == pytest.approx(AZURE_TOTAL)
    assert not [api for api, _ in fake.requests if api.startswith("bigquery")]


@pytest.fixture
def in_process(tmp_path, fake, monkeypatch):
    for key, value in env_for(tmp_path, fake).items():
        if key != "PATH":
            monkeypatch.setenv(key, value)
    return fake


# One day asked for alone (--since = --until): exactly that day's rows, worked by hand from the rows above.
ONE_DAY = [
    (date(2026, 10, 31), [("Compute Engine", 999.0)], [("Virtual Machines", 999.0)]),
    (date(2026, 11, 2), [("Compute Engine", 700.0)], [("Virtual Machines", 310.0)]),
    (date(2026, 11, 3), [("Compute Engine", 4000.0)], [("Virtual Machines", 4000.0)]),
]


@pytest.mark.parametrize(("day", "gcp", "azure"), ONE_DAY)
def test_one_day_asked_for_is_exactly_that_day(in_process, day, gcp, azure):
    from infra.spend.azure import azure_costs
    from infra.spend.gcp import gcp_costs

    table = f"{DATASET}.gcp_billing_export_v1_*"
    gcp_lines = gcp_costs("proj-1", table, "trainfleet-stack", "prod", day, day)
    assert [(x.day, x.service, x.cost) for x in gcp_lines] == [(day.isoformat(), s, c) for s, c in gcp]
    azure_lines = azure_costs("sub-1", "trainfleet-stack", "prod", day, day)
    assert [(x.day, x.service, x.cost) for x in azure_lines] == [(day.isoformat(), s, c) for s, c in azure]


def test_another_stacks_label_finds_only_its_rows(in_process):
    from infra.spend.azure import azure_costs
    from infra.spend.gcp import gcp_costs

    nov_1, nov_2 = date(2026, 11, 1), date(2026, 11, 2)
    lines = gcp_costs("proj-1", f"{DATASET}.gcp_billing_export_v1_*", "trainfleet-stack", "dev", nov_1, nov_2)
    assert [(x.day, x.cost) for x in lines] == [("2026-11-02", 999.0)]
    lines = azure_costs("sub-1", "trainfleet-stack", "dev", nov_1, nov_2)
    assert [(x.day, x.cost) for x in lines] == [("2026-11-02", 888.0)]


def test_gcp_cost_in_two_currencies_is_never_summed(tmp_path, stack_file, monkeypatch):
    """Two billing accounts' exports under the wildcard, one billed in USD and one in EUR."""
    server = start_fake((USD_EXPORT, gcp_rows("USD")), (EUR_EXPORT, gcp_rows("EUR")))
    try:
        for key, value in env_for(tmp_path, server).items():
            if key != "PATH":
                monkeypatch.setenv(key, value)
        from infra.spend.gcp import gcp_costs

        day = date(2026, 11, 2)
        lines = gcp_costs(
            "proj-1", f"{DATASET}.gcp_billing_export_v1_*", "trainfleet-stack", "prod", day, day
        )
        assert [(x.service, x.cost, x.currency) for x in lines] == [
            ("Compute Engine", 700.0, "EUR"),
            ("Compute Engine", 700.0, "USD"),
        ]
        result = spend(stack_file, env_for(tmp_path, server), "--cloud", "gcp")
        assert_one_line_error(
            result, "more than one currency", "EUR from gcp; USD from gcp", "--gcp-billing-table"
        )
    finally:
        server.stop()


def test_cost_in_another_currency_is_not_compared_with_the_usd_plan(tmp_path, stack_file):
    server = start_fake((EUR_EXPORT, gcp_rows("EUR")))  # a billing account billed in EUR; Azure in USD
    try:
        data = spend(stack_file, env_for(tmp_path, server), "--cloud", "gcp", "--json").json()
        assert data["currency"] == "EUR" and data["actual"] == pytest.approx(GCP_TOTAL)
        assert data["actual_usd"] is None  # a EUR sum is never labelled USD
        assert data["planned_cost_usd"] is None and data["difference_usd"] is None
        assert any("billed in EUR" in note and "not compared" in note for note in data["notes"])
        table = spend(stack_file, env_for(tmp_path, server), "--cloud", "gcp")
        assert table.code == 0 and f"actual {GCP_TOTAL:,.2f} EUR" in table.stdout and "$" not in table.stdout
        result = spend(stack_file, env_for(tmp_path, server))
        assert_one_line_error(result, "more than one currency", "EUR from gcp; USD from azure", "--cloud")
    finally:
        server.stop()


def post_json(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer t0ken", "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_bigquery_stand_in_fails_as_bigquery_does(fake):
    """jobs.query errors: 404 notFound for a table that does not exist, 400 invalidQuery for SQL that does
    not parse, a parameter that is not passed, or a query sent as legacy SQL (the documented default)."""
    url = f"{fake.url}/bigquery/v2/projects/proj-1/queries"

    def reason(body: dict) -> tuple[int, str, str]:
        code, answer = post_json(url, {"useLegacySql": False, **body})
        return code, answer["error"]["errors"][0]["reason"], answer["error"]["message"]

    code, why, message = reason({"query": f"SELECT cost FROM `{DATASET}.no_such_table`"})
    assert (code, why) == (
        404,
        "notFound",
    ) and "Not found: Table proj-1:trainfleet_billing_prod.no_such_table" in message
    assert reason({"query": f"SELECT cost FROM `{USD_EXPORT}` WHERE"})[:2] == (400, "invalidQuery")
    assert reason({"query": f"SELECT cost FROM `{USD_EXPORT}` WHERE cost > @floor"})[:2] == (
        400,
        "invalidQuery",
    )
    assert reason({"query": f"SELECT cost FROM `{USD_EXPORT}`", "useLegacySql": True})[:2] == (
        400,
        "invalidQuery",
    )
    code, answer = post_json(url, {"query": f"SELECT cost FROM `{USD_EXPORT}`"})  # useLegacySql left out
    assert code == 400
    # And a typed parameter is bound as its type: FLOAT64 "600" compares as a number.
    code, answer = post_json(url, {"useLegacySql": False, "parameterMode": "NAMED",
                                   "query": f"SELECT SUM(cost) AS total FROM `{USD_EXPORT}` WHERE cost >= @floor",
                                   "queryParameters": [{"name": "floor", "parameterType": {"type": "FLOAT64"},
                                                        "parameterValue": {"value": "700"}}]})  # fmt: skip
    assert code == 200 and answer["rows"] == [{"f": [{"v": "7586.0"}]}]  # 999 + 700 + 4000 + 999 + 888


def test_bad_sql_from_the_client_is_one_line(in_process, monkeypatch):
    import infra.spend.gcp as gcp

    monkeypatch.setattr(gcp, "QUERY", gcp.QUERY.replace("GROUP BY", "GROUP"))
    day = date(2026, 11, 2)
    with pytest.raises(TrainfleetError, match="400") as caught:
        gcp.gcp_costs("proj-1", f"{DATASET}.gcp_billing_export_v1_*", "trainfleet-stack", "prod", day, day)
    assert "Syntax error" in str(caught.value) and "\n" not in str(caught.value)


def test_azure_stand_in_rejects_what_the_api_rejects(fake):
    url = (f"{fake.url}/azure-mgmt/subscriptions/sub-1/providers/Microsoft.CostManagement/query"
           "?api-version=2023-03-01")  # fmt: skip
    good = {"type": "ActualCost", "timeframe": "Custom",
            "timePeriod": {"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T23:59:59Z"},
            "dataset": {"granularity": "Daily", "aggregation": {"totalCost": {"name": "Cost", "function": "Sum"}},
                        "filter": {"tags": {"name": "trainfleet-stack", "operator": "In", "values": ["prod"]}}}}  # fmt: skip
    code, answer = post_json(url, good)
    assert code == 200 and answer["properties"]["rows"] == [[302.25, 20261101, "USD"]]  # 300 + 2.25
    assert [c["name"] for c in answer["properties"]["columns"]] == ["Cost", "UsageDate", "Currency"]
    assert post_json(url.split("?")[0], good)[0] == 400  # no api-version
    assert post_json(url, {**good, "timePeriod": None})[0] == 400  # Custom needs a timePeriod
    two_roots = {
        **good["dataset"]["filter"],
        "dimensions": {"name": "ServiceName", "operator": "In", "values": ["Storage"]},
    }
    assert post_json(url, {**good, "dataset": {**good["dataset"], "filter": two_roots}})[0] == 400


def test_missing_tokens_are_one_line(tmp_path, fake, stack_file):
    result = spend(stack_file, env_for(tmp_path, fake, GOOGLE_OAUTH_ACCESS_TOKEN=""))
    assert_one_line_error(result, "GOOGLE_OAUTH_ACCESS_TOKEN", "gcloud auth")
    result = spend(stack_file, env_for(tmp_path, fake, AZURE_ACCESS_TOKEN=""), "--cloud", "azure")
    assert_one_line_error(result, "AZURE_ACCESS_TOKEN", "az login")


def test_rejected_token_and_missing_table_are_one_line(tmp_path, fake, stack_file):
    result = spend(stack_file, env_for(tmp_path, fake, GOOGLE_OAUTH_ACCESS_TOKEN="expired"), "--cloud", "gcp")
    assert_one_line_error(result, "BigQuery", "401")
    result = spend(
        stack_file, env_for(tmp_path, fake), "--cloud", "gcp", "--gcp-billing-table", "proj-1.other.t"
    )
    assert_one_line_error(result, "404", "Not found: Dataset proj-1:other", "proj-1.other.t")
    result = spend(stack_file, env_for(tmp_path, fake, AZURE_ACCESS_TOKEN="expired"), "--cloud", "azure")
    assert_one_line_error(result, "Azure Cost Management", "401")


def test_billing_export_disabled_or_no_project(tmp_path, fake, stack_file):
    stack_file.write_text(STACK.replace("enabled: true", "enabled: false"))
    assert_one_line_error(
        spend(stack_file, env_for(tmp_path, fake), "--cloud", "gcp"), "billing_export", "enabled: true"
    )
    stack_file.write_text(STACK.replace("  gcp:project: proj-1\n", ""))
    assert_one_line_error(
        spend(stack_file, env_for(tmp_path, fake), "--cloud", "gcp"), "gcp:project", "GOOGLE_CLOUD_PROJECT"
    )
    stack_file.write_text(
        STACK.replace("  azure-native:subscriptionId: 00000000-1111-2222-3333-444444444444\n", "")
    )
    assert_one_line_error(
        spend(stack_file, env_for(tmp_path, fake), "--cloud", "azure"), "AZURE_SUBSCRIPTION_ID"
    )
