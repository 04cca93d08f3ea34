"""Azure spot eviction rates from Azure Resource Graph, for the catalog's Azure sizes in every region.

POST {ARM}/providers/Microsoft.ResourceGraph/resources?api-version=2022-10-01 with {"query": KQL, "options":
{"$top": 1000, "$skipToken": ..., "resultFormat": "objectArray"}} answers {"totalRecords", "count",
"resultTruncated", "$skipToken" (while more pages remain), "data": [rows]} (azure-rest-api-specs
resourcegraph 2022-10-01, examples ResourcesFirstPageQuery/ResourcesNextPageQuery; tests/fixtures/azure_eviction/
PROVENANCE.md). The rows come from the SpotResources table, type microsoft.compute/skuspotevictionrate/location,
whose properties.evictionRate is a range such as "0-5" or "20+", in percent per hour over the trailing 28 days.
Resource Graph throttles per user (x-ms-user-quota-resets-after tells when the quota resets): http.py waits that
long and retries.

A plain POST through http.py rather than azure-mgmt-resourcegraph: one documented call does not warrant another
SDK. The token and the endpoint (TRAINFLEET_AZURE_MANAGEMENT_URL) are infra/azure_arm.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from infra.azure_arm import access_token as arm_token
from infra.azure_arm import management_url, no_token
from infra.catalog.dated_file import write_dated
from infra.catalog.interruption import parse_range
from infra.catalog.refresh.http import FetchError, request_json

API_VERSION = "2022-10-01"
PAGE_SIZE = 1000  # $top's maximum (QueryRequestOptions, 2022-10-01)
MAX_PAGES = 100
_SIZE_NAME = re.compile(r"^[A-Za-z0-9_]+$")  # what goes into the KQL list: Azure size names only
WHAT = "Azure Resource Graph"


def resources_url() -> str:
    return f"{management_url()}/providers/Microsoft.ResourceGraph/resources?api-version={API_VERSION}"


def query(sizes: Iterable[str]) -> str:
    """The KQL for the eviction rates of `sizes`; size names are checked, so the quoted list cannot break out."""
    names = sorted({s.lower() for s in sizes})
    bad = [s for s in names if not _SIZE_NAME.match(s)]
    if bad:
        raise ValueError(f"not an Azure size name: {bad[0]!r}")
    listed = ", ".join(f"'{s}'" for s in names)
    return (
        "SpotResources\n"
        "| where type =~ 'microsoft.compute/skuspotevictionrate/location'\n"
        f"| where sku.name in~ ({listed})\n"
        "| project id, skuName = tostring(sku.name), location = tostring(location), "
        "evictionRate = tostring(properties.evictionRate)\n"
        "| order by id asc"
    )


def access_token() -> str:
    """An ARM bearer token; FetchError (one line) when there is none."""
    token = arm_token()
    if token is None:
        raise FetchError(no_token("Resource Graph and Spot Placement Scores"))
    return token


def fetch_rates(sizes: Iterable[str], token: str | None = None) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(region, size as the catalog spells it) -> (low, high) share per hour, every page; FetchError when Resource
    Graph refuses, answers out of shape, or gives a rate that is not a range (then nothing is kept)."""
    by_lower = {s.lower(): s for s in sizes}
    token = token or access_token()
    headers = {"Authorization": f"Bearer {token}"}
    body: dict = {"query": query(by_lower), "options": {"$top": PAGE_SIZE, "resultFormat": "objectArray"}}
    out: dict[tuple[str, str], tuple[float, float | None]] = {}
    for _ in range(MAX_PAGES):
        try:
            page = request_json(resources_url(), method="POST", body=body, headers=headers, what=WHAT)
        except FetchError as exc:
            raise FetchError(_explain(exc), exc.status) from None
        if not isinstance(page, dict) or not isinstance(page.get("data"), list):
            raise FetchError(f"{WHAT}: no data list in the answer")
        for row in page["data"]:
            size = by_lower.get(str(row.get("skuName", "")).lower()) if isinstance(row, dict) else None
            if size is None:
                continue  # a size the catalog does not carry
            try:
                out[(str(row["location"]).lower(), size)] = parse_range(row["evictionRate"])
            except (KeyError, ValueError) as exc:
                raise FetchError(
                    f"{WHAT}: {size} in {row.get('location')} has eviction rate {row.get('evictionRate')!r} ({exc}); "
                    "the catalog's rates would mean something else, so nothing was written"
                ) from None
        skip = page.get("$skipToken")
        if not skip:
            if str(page.get("resultTruncated", "false")).lower() == "true":
                raise FetchError(f"{WHAT}: the answer was truncated with no $skipToken to page on")
            return out
        body = {**body, "options": {**body["options"], "$skipToken": skip}}
    raise FetchError(f"{WHAT}: more than {MAX_PAGES} pages; nothing was written")


def _explain(exc: FetchError) -> str:
    """The request's one line, with what to do about the refusals a user can fix."""
    if exc.status == 401:
        return f"{exc}; the token was refused: run `az login` (or set AZURE_ACCESS_TOKEN afresh)"
    if exc.status == 403:
        return f"{exc}; the caller needs read access (Reader) on at least one subscription to query Resource Graph"
    return str(exc)


def write_refresh(
    path: Path, rates: dict[tuple[str, str], tuple[float, float | None]], source: str, fetched_at: str | None = None
) -> str:
    """Write the rates atomically; the fetched_at written."""
    return write_dated(path, "azure eviction rates", source, fetched_at,
                       rates=[[r, s, low, high] for (r, s), (low, high) in sorted(rates.items())])  # fmt: skip
