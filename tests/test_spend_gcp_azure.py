"""`trainfleet spend` on GCP (BigQuery billing export via jobs.query) and Azure (Cost Management query),
against a local server that speaks those APIs' shapes and filters by the label/tag it is sent."""

from __future__ import annotations

import pytest

from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import FakePriceApis, isolated_env

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
TABLE = "proj-1.trainfleet_billing_prod.gcp_billing_export_v1_*"
MINE = {"trainfleet-stack": "prod"}
OTHER = {"trainfleet-stack": "dev"}
BQ_ROWS = [
    {"service": "Compute Engine", "day": "2026-11-01", "cost": 600.0, "labels": MINE},
    {"service": "Compute Engine", "day": "2026-11-01", "cost": 50.0, "labels": MINE},
    {"service": "Cloud Storage", "day": "2026-11-01", "cost": 3.5, "labels": MINE},
    {"service": "Compute Engine", "day": "2026-11-02", "cost": 700.0, "labels": MINE},
    {"service": "Compute Engine", "day": "2026-11-02", "cost": 999.0, "labels": OTHER},  # another stack
    {"service": "Compute Engine", "day": "2026-10-31", "cost": 999.0, "labels": MINE},  # before --since
]
AZ_ROWS = [
    {"cost": 300.0, "date": 20261101, "service": "Virtual Machines", "tags": MINE},
    {"cost": 2.25, "date": 20261101, "service": "Storage", "tags": MINE},
    {"cost": 310.0, "date": 20261102, "service": "Virtual Machines", "tags": MINE},
    {"cost": 888.0, "date": 20261102, "service": "Virtual Machines", "tags": OTHER},
    {"cost": 888.0, "date": 20261105, "service": "Virtual Machines", "tags": MINE},  # after --until
]


@pytest.fixture
def fake():
    server = FakePriceApis(bigquery_rows=BQ_ROWS, azure_cost_rows=AZ_ROWS)
    server.bigquery_tables.add(TABLE)
    server.start()
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
    gcp = sum(r["cost"] for r in BQ_ROWS[:4])
    azure = sum(r["cost"] for r in AZ_ROWS[:3])
    assert data["actual_usd"] == pytest.approx(gcp + azure)
    assert data["difference_usd"] == pytest.approx(gcp + azure - 2000)
    services = {(s["cloud"], s["service"]): s["cost"] for s in data["by_service"]}
    assert services == {
        ("gcp", "Compute Engine"): pytest.approx(1350.0),
        ("gcp", "Cloud Storage"): pytest.approx(3.5),
        ("azure", "Virtual Machines"): pytest.approx(610.0),
        ("azure", "Storage"): pytest.approx(2.25),
    }
    assert [(d["day"], d["clouds"]) for d in data["by_day"]] == [
        ("2026-11-01", {"gcp": pytest.approx(653.5), "azure": pytest.approx(302.25)}),
        ("2026-11-02", {"gcp": pytest.approx(700.0), "azure": pytest.approx(310.0)}),
    ]
    # BigQuery: the query names the stack's export table and passes label and dates as parameters,
    # and results were paged through getQueryResults; Azure pages followed nextLink.
    queries = [d for api, d in fake.requests if api == "bigquery-query"]
    assert len(queries) == 1 and f"FROM `{TABLE}`" in queries[0] and "@label_value" in queries[0]
    assert [api for api, _ in fake.requests].count("bigquery-results") >= 1
    assert [api for api, _ in fake.requests].count("azure-cost") >= 2


def test_human_output(tmp_path, fake, stack_file):
    result = spend(stack_file, env_for(tmp_path, fake))
    assert result.code == 0, result.stderr
    assert "Compute Engine" in result.stdout and "Virtual Machines" in result.stdout
    assert "vs plan estimate $2,000.00 (job.planned_cost_usd, 100 h)" in result.stdout
    assert "difference -$34.25 (-1.7%)" in result.stdout  # 1353.5 + 612.25 - 2000


def test_one_cloud_only(tmp_path, fake, stack_file):
    data = spend(stack_file, env_for(tmp_path, fake), "--cloud", "azure", "--json").json()
    assert data["clouds"] == ["azure"] and data["actual_usd"] == pytest.approx(612.25)
    assert not [api for api, _ in fake.requests if api.startswith("bigquery")]


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
    assert_one_line_error(result, "404", "Not found: Table proj-1.other.t")
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
