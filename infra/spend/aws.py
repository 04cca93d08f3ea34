"""AWS actual cost: Cost Explorer get_cost_and_usage filtered by the stack's tag, by service and day.

The tag must be activated as a cost allocation tag (Billing > Cost allocation tags) before Cost
Explorer can filter by it. The endpoint follows boto3's settings (AWS_ENDPOINT_URL_COST_EXPLORER).
"""

from __future__ import annotations

from datetime import date, timedelta

from infra.catalog.refresh.aws import aws_config, check_aws_credentials, describe_aws_error
from infra.errors import TrainfleetError
from infra.spend.report import CostLine

CE_REGION = "us-east-1"
METRIC = "UnblendedCost"
MAX_PAGES = 200


def aws_costs(tag_key: str, tag_value: str, since: date, until: date) -> list[CostLine]:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.Session()
    check_aws_credentials(session)
    ce = session.client("ce", region_name=CE_REGION, config=aws_config())
    request = {
        "TimePeriod": {
            "Start": since.isoformat(),
            "End": (until + timedelta(days=1)).isoformat(),
        },  # End exclusive
        "Granularity": "DAILY",
        "Metrics": [METRIC],
        "Filter": {"Tags": {"Key": tag_key, "Values": [tag_value], "MatchOptions": ["EQUALS"]}},
        "GroupBy": [{"Type": "DIMENSION", "Key": "SERVICE"}],
    }
    lines: list[CostLine] = []
    token = None
    for _ in range(MAX_PAGES):
        try:
            page = ce.get_cost_and_usage(**request, **({"NextPageToken": token} if token else {}))
        except (ClientError, BotoCoreError) as exc:
            raise TrainfleetError(describe_aws_error("AWS Cost Explorer GetCostAndUsage", exc)) from None
        for period in page.get("ResultsByTime", []):
            day = period["TimePeriod"]["Start"]
            for group in period.get("Groups", []):
                metric = group.get("Metrics", {}).get(METRIC, {})
                amount = float(metric.get("Amount", 0) or 0)
                if amount:
                    lines.append(CostLine("aws", group["Keys"][0], day, amount, metric.get("Unit", "USD")))
            if not period.get("Groups"):  # no grouping answer: the period's total
                metric = period.get("Total", {}).get(METRIC, {})
                amount = float(metric.get("Amount", 0) or 0)
                if amount:
                    lines.append(CostLine("aws", "(total)", day, amount, metric.get("Unit", "USD")))
        token = page.get("NextPageToken")
        if not token:
            return lines
    raise TrainfleetError(f"AWS Cost Explorer returned more than {MAX_PAGES} pages; narrow --since/--until")
