"""`trainfleet spend` on AWS: Cost Explorer on moto's server, seeded through moto's API."""

from __future__ import annotations

import boto3
import pytest

from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env
from tests.moto_server import MotoServer

STACK = """\
config:
  aws:region: us-east-1
  trainfleet:job:
    name: llama-7b
    params: 7B
    tokens: 20B
    planned_hours: 48
    planned_cost_usd: 1000
  trainfleet:fleets:
  - name: main
    cloud: aws
    region: us-east-1
    instance_type: p4d.24xlarge
    nodes: 2
"""


def day(start: str, end: str, groups: dict[str, str]) -> dict:
    return {
        "TimePeriod": {"Start": start, "End": end},
        "Total": {},
        "Groups": [
            {"Keys": [service], "Metrics": {"UnblendedCost": {"Amount": amount, "Unit": "USD"}}}
            for service, amount in groups.items()
        ],
        "Estimated": False,
    }


PAGE_1 = {
    "ResultsByTime": [
        day("2026-11-01", "2026-11-02", {"Amazon Elastic Compute Cloud - Compute": "400.25", "Amazon Simple Storage Service": "1.75"}),
        day("2026-11-02", "2026-11-03", {"Amazon Elastic Compute Cloud - Compute": "500.00"}),
    ],
    "DimensionValueAttributes": [],
    "NextPageToken": "page-2",
}  # fmt: skip
PAGE_2 = {
    "ResultsByTime": [day("2026-11-03", "2026-11-04", {"Amazon Elastic Compute Cloud - Compute": "250.50"})],
    "DimensionValueAttributes": [],
}


@pytest.fixture(scope="module")
def moto():
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def stack_file(tmp_path, moto):
    moto.reset()
    path = tmp_path / "stacks" / "Pulumi.prod.yaml"
    path.parent.mkdir()
    path.write_text(STACK)
    return path


def test_actual_cost_by_service_and_day_beside_the_plan(tmp_path, moto, stack_file):
    moto.seed_cost_and_usage([PAGE_1, PAGE_2])
    env = {**isolated_env(tmp_path), **moto.env()}
    result = run_trainfleet(
        "spend", "--stack", str(stack_file), "--since", "2026-11-01", "--until", "2026-11-03", env=env
    )
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "trainfleet-stack=prod" in out
    assert "Amazon Elastic Compute Cloud - Compute" in out and "$1,150.75" in out  # 400.25 + 500 + 250.50
    assert "2026-11-03" in out  # the second page was fetched
    assert "actual $1,152.50 vs plan estimate $1,000.00" in out and "difference +$152.50 (+15.2%)" in out

    moto.reset()
    moto.seed_cost_and_usage([PAGE_1, PAGE_2])
    data = run_trainfleet(
        "spend",
        "--stack",
        str(stack_file),
        "--since",
        "2026-11-01",
        "--until",
        "2026-11-03",
        "--json",
        env=env,
    ).json()
    assert data["actual_usd"] == pytest.approx(1152.5) and data["planned_cost_usd"] == 1000
    assert data["difference_usd"] == pytest.approx(152.5) and data["difference_percent"] == pytest.approx(
        15.25
    )
    assert [d["day"] for d in data["by_day"]] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert data["by_service"][0] == {
        "cloud": "aws",
        "service": "Amazon Elastic Compute Cloud - Compute",
        "cost": 1150.75,
    }


def test_request_filters_by_the_stack_tag(tmp_path, moto, stack_file, monkeypatch):
    """In process: capture what goes on the wire to Cost Explorer."""
    from datetime import date

    from infra.spend.aws import aws_costs

    for key, value in {**isolated_env(tmp_path), **moto.env()}.items():
        monkeypatch.setenv(key, value)
    moto.seed_cost_and_usage([PAGE_2])
    sent = []
    original = boto3.Session

    class Recording(original):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.events.register(
                "provide-client-params.ce.GetCostAndUsage", lambda params, **_: sent.append(params)
            )

    monkeypatch.setattr(boto3, "Session", Recording)
    lines = aws_costs("trainfleet-stack", "prod", date(2026, 11, 1), date(2026, 11, 30))
    assert [(x.day, x.cost) for x in lines] == [("2026-11-03", 250.5)]
    assert sent[0]["Filter"] == {
        "Tags": {"Key": "trainfleet-stack", "Values": ["prod"], "MatchOptions": ["EQUALS"]}
    }
    assert sent[0]["TimePeriod"] == {"Start": "2026-11-01", "End": "2026-12-01"}  # End is exclusive
    assert (
        sent[0]["GroupBy"] == [{"Type": "DIMENSION", "Key": "SERVICE"}] and sent[0]["Granularity"] == "DAILY"
    )


def test_no_cost_found_explains_cost_allocation_tags(tmp_path, moto, stack_file):
    env = {**isolated_env(tmp_path), **moto.env()}
    result = run_trainfleet("spend", "--stack", str(stack_file), "--since", "2026-11-01", env=env)
    assert result.code == 0
    assert "no cost found" in result.stdout and "Cost allocation tags" in result.stdout
    assert "difference -$1,000.00 (-100.0%)" in result.stdout


def test_without_credentials_one_line(tmp_path, stack_file):
    env = {
        **isolated_env(tmp_path),
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SESSION_TOKEN": "",
    }
    result = run_trainfleet("spend", "--stack", str(stack_file), "--since", "2026-11-01", env=env)
    assert_one_line_error(result, "no AWS credentials", "AWS_PROFILE")


def test_bad_input_is_one_line(tmp_path, stack_file):
    env = isolated_env(tmp_path)
    assert_one_line_error(
        run_trainfleet("spend", "--stack", str(stack_file), "--since", "11/01/2026", env=env), "YYYY-MM-DD"
    )
    assert_one_line_error(
        run_trainfleet(
            "spend", "--stack", str(stack_file), "--since", "2026-11-05", "--until", "2026-11-01", env=env
        ),
        "before --since",
    )
    assert_one_line_error(
        run_trainfleet("spend", "--stack", str(tmp_path / "stacks" / "Pulumi.nope.yaml"), "--since", "2026-11-01", env=env),
        "does not exist", "prod",
    )  # fmt: skip
    assert_one_line_error(
        run_trainfleet(
            "spend", "--stack", str(stack_file), "--since", "2026-11-01", "--cloud", "gcp", env=env
        ),
        "no fleets on gcp",
    )
