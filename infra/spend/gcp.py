"""GCP actual cost: the stack's BigQuery billing export, queried with jobs.query (BigQuery REST API).

The Cloud Billing export writes gcp_billing_export_v1_<BILLING_ACCOUNT> tables into the dataset the
stack declares (trainfleet_billing_<stack>, see infra/naming.py); resources carry the label
trainfleet-stack=<stack>. Cost here is cost plus credits (credits are negative), per service, day and
currency: the wildcard table can span billing accounts billed in different currencies, never summed.
Needs an OAuth access token: GOOGLE_OAUTH_ACCESS_TOKEN, else `gcloud auth print-access-token`.
Override the endpoint with TRAINFLEET_BIGQUERY_URL.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from datetime import date, timedelta

from infra.catalog.refresh.http import FetchError, request_json
from infra.cli_token import token_from
from infra.errors import TrainfleetError
from infra.spend.report import CostLine

BIGQUERY_URL = "https://bigquery.googleapis.com/bigquery/v2"
EXPORT_TABLE = "gcp_billing_export_v1_*"
NO_TOKEN = (
    "no GCP access token for BigQuery: set GOOGLE_OAUTH_ACCESS_TOKEN (e.g. to `gcloud auth print-access-token`) "
    "or install the gcloud CLI and run `gcloud auth login`"
)
QUERY = """
SELECT service.description AS service, FORMAT_DATE('%Y-%m-%d', DATE(usage_start_time)) AS day, currency,
       SUM(cost) + SUM(IFNULL((SELECT SUM(c.amount) FROM UNNEST(credits) AS c), 0)) AS cost
FROM `{table}`
WHERE EXISTS (SELECT 1 FROM UNNEST(labels) AS l WHERE l.key = @label_key AND l.value = @label_value)
  AND DATE(usage_start_time) >= DATE(@since) AND DATE(usage_start_time) < DATE(@until)
GROUP BY service, day, currency
ORDER BY day, service, currency
""".strip()


def dataset_id(stack: str) -> str:
    try:
        from infra.naming import billing_dataset_id  # the dataset the GCP billing-export component declares
    except ImportError:  # pragma: no cover - same rule, kept here if naming moves

        def billing_dataset_id(stack: str) -> str:
            slug = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")) or "x"
            return f"trainfleet_billing_{slug}".replace("-", "_")

    return billing_dataset_id(stack)


def label_value(value: str) -> str:
    """GCP label values: lowercase [a-z0-9_-], at most 63 characters (as the components write them)."""
    return re.sub(r"[^a-z0-9_-]", "_", value.lower())[:63]


def access_token() -> str:
    token = token_from("GOOGLE_OAUTH_ACCESS_TOKEN", ["gcloud", "auth", "print-access-token"], timeout=30)
    if token is None:
        raise TrainfleetError(NO_TOKEN)
    return token


def gcp_costs(
    project: str, table: str, tag_key: str, tag_value: str, since: date, until: date
) -> list[CostLine]:
    token = access_token()
    base = os.environ.get("TRAINFLEET_BIGQUERY_URL", BIGQUERY_URL).rstrip("/")
    headers = {"Authorization": f"Bearer {token}"}
    body = {
        "query": QUERY.format(table=table),
        "useLegacySql": False,
        "parameterMode": "NAMED",
        "queryParameters": [
            _param("label_key", tag_key),
            _param("label_value", label_value(tag_value)),
            _param("since", since.isoformat()),
            _param("until", (until + timedelta(days=1)).isoformat()),
        ],
        "maxResults": 1000,
        "timeoutMs": 60000,
    }
    qproject = urllib.parse.quote(project, safe="")
    try:
        page = request_json(f"{base}/projects/{qproject}/queries", method="POST", body=body, headers=headers,
                            what="BigQuery jobs.query")  # fmt: skip
        job = page.get("jobReference", {})
        lines: list[CostLine] = []
        for _ in range(10_000):
            if page.get("jobComplete", True):
                lines += _rows(page)
                if not page.get("pageToken"):
                    return lines
            else:
                time.sleep(1)
            query = {"maxResults": "1000", "timeoutMs": "60000"}
            if page.get("pageToken"):
                query["pageToken"] = page["pageToken"]
            if job.get("location"):
                query["location"] = job["location"]
            url = f"{base}/projects/{qproject}/queries/{urllib.parse.quote(job['jobId'], safe='')}"
            page = request_json(url + "?" + urllib.parse.urlencode(query), headers=headers,
                                what="BigQuery jobs.getQueryResults")  # fmt: skip
    except FetchError as exc:
        raise TrainfleetError(f"{exc} (billing export table {table})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise TrainfleetError(
            f"BigQuery answered in an unexpected shape ({type(exc).__name__}: {exc})"
        ) from None
    raise TrainfleetError("BigQuery query did not finish")


def _param(name: str, value: str) -> dict:
    return {"name": name, "parameterType": {"type": "STRING"}, "parameterValue": {"value": value}}


def _rows(page: dict) -> list[CostLine]:
    names = [f["name"] for f in page["schema"]["fields"]]
    lines = []
    for row in page.get("rows", []):
        v = dict(zip(names, (cell.get("v") for cell in row["f"]), strict=True))
        cost = float(v["cost"] or 0)
        if cost:
            lines.append(
                CostLine("gcp", v["service"] or "(unknown)", v["day"], cost, v.get("currency") or "USD")
            )
    return lines
