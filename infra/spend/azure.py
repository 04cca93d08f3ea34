"""Azure actual cost: Cost Management query API, filtered by the stack's tag, by service and day.

POST https://management.azure.com/subscriptions/<id>/providers/Microsoft.CostManagement/query
answers {properties: {columns: [{name, type}], rows: [[...]], nextLink}}. Needs a bearer token:
AZURE_ACCESS_TOKEN, else `az account get-access-token`. Override the endpoint with
TRAINFLEET_AZURE_MANAGEMENT_URL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.parse
from datetime import date

from infra.catalog.refresh.http import FetchError, request_json
from infra.errors import TrainfleetError
from infra.spend.report import CostLine

MANAGEMENT_URL = "https://management.azure.com"
API_VERSION = "2023-03-01"
NO_TOKEN = (
    "no Azure access token for Cost Management: set AZURE_ACCESS_TOKEN (e.g. to `az account get-access-token "
    "--query accessToken -o tsv`) or install the Azure CLI and run `az login`"
)


def access_token() -> str:
    token = os.environ.get("AZURE_ACCESS_TOKEN", "").strip()
    if token:
        return token
    az = shutil.which("az")
    if az:
        try:
            out = subprocess.run(
                [az, "account", "get-access-token", "--resource", MANAGEMENT_URL, "--query", "accessToken", "-o", "tsv"],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    raise TrainfleetError(NO_TOKEN)


def azure_costs(subscription: str, tag_key: str, tag_value: str, since: date, until: date) -> list[CostLine]:
    token = access_token()
    base = os.environ.get("TRAINFLEET_AZURE_MANAGEMENT_URL", MANAGEMENT_URL).rstrip("/")
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
