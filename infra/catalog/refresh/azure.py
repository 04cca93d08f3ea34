"""Azure prices from the Retail Prices API (public, no credentials): pay-as-you-go and spot, Linux.

GET https://prices.azure.com/api/retail/prices?$filter=... answers OData JSON pages
({"Items": [...], "NextPageLink": url-or-null}). Virtual-machine meters: type "Consumption"; spot meters
carry "Spot" in skuName/meterName, low-priority ones "Low Priority"; Windows meters say "Windows" in
productName. Override the endpoint with TRAINFLEET_AZURE_PRICES_URL.
"""

from __future__ import annotations

import os
import urllib.parse
from datetime import UTC, datetime

from infra.catalog.model import Offer
from infra.catalog.refresh.http import FetchError, request_json
from infra.catalog.refresh.rows import refreshed_row

PRICES_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
MAX_PAGES = 2000


def prices_url() -> str:
    return os.environ.get("TRAINFLEET_AZURE_PRICES_URL", PRICES_URL)


def classify(item: dict) -> str | None:
    """'spot', 'on-demand' or None (Windows, low priority, reservations, dev/test, not hourly)."""
    if item.get("type") != "Consumption" or item.get("serviceName", "Virtual Machines") != "Virtual Machines":
        return None
    names = f"{item.get('skuName', '')} {item.get('meterName', '')}"
    if "Windows" in item.get("productName", "") or "Low Priority" in names:
        return None
    if "hour" not in str(item.get("unitOfMeasure", "1 Hour")).lower():
        return None
    return "spot" if "Spot" in names else "on-demand"


class AzurePrices:
    cloud = "azure"
    source = "azure-retail-prices"

    def check_credentials(self) -> None:
        pass  # the Retail Prices API is public

    def prepare(self) -> None:
        pass

    def items(self, region: str):
        query = {
            "api-version": API_VERSION,
            "currencyCode": "USD",
            "$filter": (
                f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and priceType eq 'Consumption'"
            ),
        }
        url: str | None = prices_url() + "?" + urllib.parse.urlencode(query)
        page = 0
        while url:
            page += 1
            if page > MAX_PAGES:
                raise FetchError(f"azure retail prices {region}: more than {MAX_PAGES} pages; stopping")
            body = request_json(url, what=f"azure retail prices {region} page {page}")
            if not isinstance(body, dict) or not isinstance(body.get("Items"), list):
                raise FetchError(f"azure retail prices {region} page {page}: malformed page (no Items list)")
            yield from body["Items"]
            url = body.get("NextPageLink") or None

    def fetch_region(self, region: str, known: list[Offer], as_of: str) -> list[Offer]:
        types = {o.instance_type for o in known}
        now = datetime.now(UTC).isoformat()
        best: dict[tuple[str, str], tuple[str, float]] = {}  # (type, kind) -> (effectiveStartDate, price)
        for item in self.items(region):
            if not isinstance(item, dict):
                raise FetchError(f"azure retail prices {region}: malformed item {item!r:.80}")
            sku = item.get("armSkuName")
            if sku not in types or item.get("armRegionName", region) != region:
                continue
            kind = classify(item)
            if kind is None:
                continue
            try:
                price = float(item["retailPrice"])
            except (KeyError, TypeError, ValueError):
                raise FetchError(f"azure retail prices {region}: {sku} has no numeric retailPrice") from None
            start = str(item.get("effectiveStartDate", ""))
            if start > now:  # announced future price
                continue
            if (sku, kind) not in best or start >= best[(sku, kind)][0]:
                best[(sku, kind)] = (start, price)
        by_type: dict[str, Offer] = {}
        for o in known:
            if o.instance_type not in by_type or o.region == region:
                by_type[o.instance_type] = o
        existing = {o.instance_type: o for o in known if o.region == region}
        rows = []
        for sku in sorted({t for t, _ in best}):
            od = best.get((sku, "on-demand"), (None, None))[1]
            sp = best.get((sku, "spot"), (None, None))[1]
            rows.append(refreshed_row(existing.get(sku), by_type[sku], region, "", od, sp))
        return rows
