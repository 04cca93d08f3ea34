"""`trainfleet spend` on AWS: Cost Explorer GetCostAndUsage against a stand-in that evaluates the request.

The stand-in (tests/fake_price_apis.py) applies the Filter, TimePeriod (End exclusive), Granularity and
GroupBy the client sends to seeded per-day, per-tag rows, as the API reference describes:
https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_GetCostAndUsage.html
(moto's GetCostAndUsage answers queued results whatever the Filter says, so it cannot catch a wrong tag.)
Rows sit on the days either side of both bounds, so a bound off by one day changes the answer.
"""

from __future__ import annotations

from datetime import date

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import FakePriceApis, cost_explorer_row, isolated_env

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
EC2 = "Amazon Elastic Compute Cloud - Compute"
S3 = "Amazon Simple Storage Service"
MINE = {"trainfleet-stack": "prod"}
# The runs below ask for --since 2026-11-01 --until 2026-11-03.
CE_ROWS = [
    cost_explorer_row("2026-10-31", EC2, "999.00", tags=MINE),  # the day before --since
    cost_explorer_row("2026-11-01", EC2, "400.25", tags=MINE),
    cost_explorer_row("2026-11-01", S3, "1.75", tags=MINE),
    cost_explorer_row("2026-11-02", EC2, "500.00", tags=MINE),
    cost_explorer_row("2026-11-03", EC2, "250.50", tags=MINE),  # --until itself
    cost_explorer_row("2026-11-04", EC2, "4000.00", tags=MINE),  # the day after --until
    cost_explorer_row("2026-11-02", EC2, "888.00", tags={"trainfleet-stack": "dev"}),  # another stack
    cost_explorer_row("2026-11-02", EC2, "777.00", tags={"Name": "prod"}),  # "prod" under another key
    cost_explorer_row("2026-11-02", EC2, "66.00", tags={"trainfleet-stack": "prod-old"}),  # equal, not prefix
    cost_explorer_row("2026-11-02", EC2, "55.00"),  # untagged
]
# Worked by hand from the rows tagged trainfleet-stack=prod, 2026-11-01 to 2026-11-03:
#   EC2 400.25 + 500.00 + 250.50 = 1150.75; S3 1.75; in all 1152.50, which is 152.50 (15.25 %) over 1000.


@pytest.fixture
def fake():
    server = FakePriceApis(cost_explorer_rows=CE_ROWS).start()
    yield server
    server.stop()


@pytest.fixture
def stack_file(tmp_path):
    path = tmp_path / "stacks" / "Pulumi.prod.yaml"
    path.parent.mkdir()
    path.write_text(STACK)
    return path


def spend(stack_file, env, *more):
    return run_trainfleet(
        "spend", "--stack", str(stack_file), "--since", "2026-11-01", "--until", "2026-11-03", *more, env=env
    )


def ce_requests(fake) -> int:
    return [api for api, _ in fake.requests].count("aws-ce")


def test_actual_cost_by_service_and_day_beside_the_plan(tmp_path, fake, stack_file):
    env = {**isolated_env(tmp_path), **fake.env()}
    result = spend(stack_file, env)
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "trainfleet-stack=prod" in out
    assert EC2 in out and "$1,150.75" in out
    assert "actual $1,152.50 vs plan estimate $1,000.00" in out and "difference +$152.50 (+15.2%)" in out

    data = spend(stack_file, env, "--json").json()
    assert data["actual_usd"] == pytest.approx(1152.5) and data["planned_cost_usd"] == 1000
    assert data["difference_usd"] == pytest.approx(152.5)
    assert data["difference_percent"] == pytest.approx(15.25)
    assert [(d["day"], d["cost"]) for d in data["by_day"]] == [
        ("2026-11-01", pytest.approx(402.0)),  # 400.25 + 1.75
        ("2026-11-02", pytest.approx(500.0)),
        ("2026-11-03", pytest.approx(250.5)),  # the last day asked for is in
    ]
    assert data["by_service"] == [
        {"cloud": "aws", "service": EC2, "cost": 1150.75},
        {"cloud": "aws", "service": S3, "cost": 1.75},
    ]
    assert ce_requests(fake) >= 4  # three days at two a page: each run followed NextPageToken


@pytest.fixture
def in_process(tmp_path, fake, monkeypatch):
    for key, value in {**isolated_env(tmp_path), **fake.env()}.items():
        monkeypatch.setenv(key, value)
    return fake


def test_request_is_the_documented_shape_and_its_answer_is_the_stacks_rows(in_process, monkeypatch):
    from infra.spend.aws import aws_costs

    sent = []
    original = boto3.Session

    class Recording(original):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.events.register(
                "provide-client-params.ce.GetCostAndUsage", lambda params, **_: sent.append(params)
            )

    monkeypatch.setattr(boto3, "Session", Recording)
    lines = aws_costs("trainfleet-stack", "prod", date(2026, 11, 1), date(2026, 11, 3))
    assert [(x.day, x.service, x.cost, x.currency) for x in lines] == [
        ("2026-11-01", EC2, 400.25, "USD"),
        ("2026-11-01", S3, 1.75, "USD"),
        ("2026-11-02", EC2, 500.0, "USD"),
        ("2026-11-03", EC2, 250.5, "USD"),
    ]
    # The documented Expression for one tag (MatchOptions EQUALS), and a TimePeriod whose End is the
    # day after --until because End is exclusive.
    assert sent[0]["Filter"] == {
        "Tags": {"Key": "trainfleet-stack", "Values": ["prod"], "MatchOptions": ["EQUALS"]}
    }
    assert sent[0]["TimePeriod"] == {"Start": "2026-11-01", "End": "2026-11-04"}
    assert sent[0]["GroupBy"] == [{"Type": "DIMENSION", "Key": "SERVICE"}]
    assert sent[0]["Granularity"] == "DAILY" and sent[0]["Metrics"] == ["UnblendedCost"]


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (date(2026, 10, 31), [("2026-10-31", EC2, 999.0)]),
        (date(2026, 11, 3), [("2026-11-03", EC2, 250.5)]),
        (date(2026, 11, 4), [("2026-11-04", EC2, 4000.0)]),
    ],
)
def test_one_day_asked_for_is_exactly_that_day(in_process, day, expected):
    """--since and --until the same day: that day's rows, not the next day's (End is exclusive)."""
    from infra.spend.aws import aws_costs

    lines = aws_costs("trainfleet-stack", "prod", day, day)
    assert [(x.day, x.service, x.cost) for x in lines] == expected


def test_another_stacks_value_finds_only_its_rows(in_process):
    from infra.spend.aws import aws_costs

    lines = aws_costs("trainfleet-stack", "dev", date(2026, 11, 1), date(2026, 11, 3))
    assert [(x.day, x.cost) for x in lines] == [("2026-11-02", 888.0)]


def test_the_stand_in_applies_the_documented_filter_semantics(in_process):
    """The stand-in itself: And over Tags and Dimensions, Not, an untagged row found with ABSENT, and
    the errors the API reference lists for a bad TimePeriod or an expression with two roots."""
    ce = boto3.client("ce", region_name="us-east-1")
    period = {"Start": "2026-11-01", "End": "2026-11-03"}  # 11-01 and 11-02

    def total(expression) -> str:
        page = ce.get_cost_and_usage(
            TimePeriod=period, Granularity="MONTHLY", Metrics=["UnblendedCost"], Filter=expression
        )
        return page["ResultsByTime"][0]["Total"]["UnblendedCost"]["Amount"]

    tag = {"Tags": {"Key": "trainfleet-stack", "Values": ["prod"], "MatchOptions": ["EQUALS"]}}
    s3 = {"Dimensions": {"Key": "SERVICE", "Values": [S3]}}
    assert total(tag) == "902.00"  # 400.25 + 1.75 + 500.00
    assert total({"And": [tag, s3]}) == "1.75"
    assert total({"And": [tag, {"Not": s3}]}) == "900.25"
    assert total({"Tags": {"Key": "trainfleet-stack", "MatchOptions": ["ABSENT"]}}) == "832.00"  # 777 + 55
    with pytest.raises(ClientError, match="before end date"):
        ce.get_cost_and_usage(
            TimePeriod={"Start": "2026-11-03", "End": "2026-11-03"},
            Granularity="DAILY",
            Metrics=["UnblendedCost"],
        )
    with pytest.raises(ClientError, match="more than one roots"):
        ce.get_cost_and_usage(
            TimePeriod=period, Granularity="DAILY", Metrics=["UnblendedCost"], Filter={**tag, **s3}
        )


def test_no_cost_found_explains_cost_allocation_tags(tmp_path, fake, stack_file):
    fake.cost_explorer_rows = []
    env = {**isolated_env(tmp_path), **fake.env()}
    result = spend(stack_file, env)
    assert result.code == 0, result.stderr
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
