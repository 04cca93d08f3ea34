"""Azure actual cost: Cost Management query API, filtered by the stack's tag, by service and day.

POST https://management.azure.com/subscriptions/<id>/providers/Microsoft.CostManagement/query
answers {properties: {columns: [{name, type}], rows: [[...]], nextLink}}. Needs a bearer token:
infra/azure_arm.py's (AZURE_ACCESS_TOKEN, the Azure CLI, azure-identity). Override the endpoint with
TRAINFLEET_AZURE_MANAGEMENT_URL.
"""

from __future__ import annotations

import urllib.parse
from datetime import date

from infra.azure_arm import access_token as arm_token
from infra.azure_arm import management_url, no_token
from infra.catalog.refresh.http import FetchError, request_json
from infra.errors import TrainfleetError
from infra.spend.report import CostLine

API_VERSION = "2023-03-01"


def access_token() -> str:
    token = arm_token()
    if token is None:
        raise TrainfleetError(no_token("Cost Management"))
    return token


def azure_costs(subscription: str, tag_key: str, tag_value: str, since: date, until: date) -> list[CostLine]:
    token = access_token()
    base = management_url()
    url: str | None = (
        f"{base}/subscriptions/{urllib.parse.quote(subscription, safe='')}/providers/Microsoft.CostManagement/query?"
        + urllib.parse.urlencode({"api-version": API_VERSION})
    )
    body = {
        "type": "ActualCost",
        "timeframe": "Custom",
        "timePeriod": {"from": f"{since.isoformat()}T00:00:00Z", "to": f"{until.isoformat()}T23:59:59Z"},
        "dataset": {
            "granularity": "Daily",
            "aggregation": {"totalCost": {"name": "Cost", "function": "Sum"}},
            "grouping": [{"type": "Dimension", "name": "ServiceName"}],
            "filter": {"tags": {"name": tag_key, "operator": "In", "values": [tag_value]}},
        },
    }
    lines: list[CostLine] = []
    pages = 0
    try:
        while url:
            pages += 1
            if pages > 500:
                raise TrainfleetError(
                    "Azure Cost Management returned more than 500 pages; narrow --since/--until"
                )
            page = request_json(url, method="POST", body=body, headers={"Authorization": f"Bearer {token}"},
                                what="Azure Cost Management query")  # fmt: skip
            props = page["properties"]
            names = [c["name"] for c in props["columns"]]
            for row in props.get("rows", []):
                v = dict(zip(names, row, strict=True))
                cost = float(v.get("Cost", v.get("PreTaxCost", 0)) or 0)
                d = str(v["UsageDate"])
                day = f"{d[:4]}-{d[4:6]}-{d[6:8]}" if len(d) == 8 else d[:10]
                if cost:
                    lines.append(
                        CostLine(
                            "azure", v.get("ServiceName") or "(unknown)", day, cost, v.get("Currency", "USD")
                        )
                    )
            url = props.get("nextLink") or None
    except FetchError as exc:
        raise TrainfleetError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise TrainfleetError(
            f"Azure Cost Management answered in an unexpected shape ({type(exc).__name__}: {exc})"
        ) from None
    return lines
