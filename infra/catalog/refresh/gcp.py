"""GCP prices from the Cloud Billing Catalog API: host (vCPU + RAM) SKUs plus GPU SKUs, per region.

GET https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus (Compute Engine) answers pages of
{"skus": [...], "nextPageToken": "..."}; each SKU has a description ("Nvidia L4 GPU running in Americas",
"Spot Preemptible G2 Instance Core running in ..."), category.usageType (OnDemand / Preemptible = spot),
serviceRegions and pricingInfo[0].pricingExpression.tieredRates[].unitPrice {units, nanos} per usageUnit
(h for cores and GPUs, GiBy.h for RAM). A VM's price is vCPUs x core + GiB x RAM + GPUs x GPU, the same
host + GPU composition as the snapshot. Needs GOOGLE_API_KEY (or an OAuth token in
GOOGLE_OAUTH_ACCESS_TOKEN); override the endpoint with TRAINFLEET_GCP_BILLING_URL.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from infra.catalog.model import Offer
from infra.catalog.refresh.http import FetchError, request_json
from infra.catalog.refresh.rows import refreshed_row
from infra.errors import TrainfleetError

BILLING_URL = "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus"
MAX_PAGES = 500
NO_CREDENTIALS = (
    "no GCP credential for the Cloud Billing Catalog API: set GOOGLE_API_KEY to an API key "
    "(console: APIs & Services > Credentials) or GOOGLE_OAUTH_ACCESS_TOKEN to `gcloud auth print-access-token`"
)

# Machine-type prefix -> description stem of its vCPU/RAM SKUs ("<stem> Core", "<stem> Ram").
HOST_SKU = {
    "a2-highgpu": "A2 Instance",
    "a2-megagpu": "A2 Instance",
    "a2-ultragpu": "A2 Instance",
    "a3-highgpu": "A3 Instance",
    "a3-edgegpu": "A3 Instance",
    "a3-megagpu": "A3Plus Instance",
    "a3-ultragpu": "A3Ultra Instance",
    "a4-highgpu": "A4 Instance",
    "g2-standard": "G2 Instance",
}
# Catalog accelerator (and machine prefix where the part differs) -> GPU SKU description stem.
GPU_SKU = {
    "A100-40GB": "Nvidia Tesla A100 GPU",
    "A100-80GB": "Nvidia Tesla A100 80GB GPU",
    "H100-80GB": "Nvidia H100 80GB GPU",
    "a3-megagpu": "Nvidia H100 80GB Mega GPU",
    "H200": "Nvidia H200 141GB GPU",
    "B200": "Nvidia B200 GPU",
    "L4": "Nvidia L4 GPU",
}
_PREFIX = re.compile(r"^(spot preemptible|preemptible)\s+", re.I)
_RUNNING = re.compile(r"\s+running in\s+.*$", re.I)


def stem(description: str) -> str:
    """'Spot Preemptible Nvidia L4 GPU running in Belgium' -> 'nvidia l4 gpu'."""
    return _RUNNING.sub("", _PREFIX.sub("", description.strip())).lower()


def unit_price(sku: dict) -> tuple[float, str]:
    """(USD per usage unit, usage unit) of the SKU's current pricing, from its first tier."""
    info = sku["pricingInfo"][0]["pricingExpression"]
    rates = sorted(info["tieredRates"], key=lambda r: float(r.get("startUsageAmount", 0)))
    price = (
        rates[-1]["unitPrice"]
        if len(rates) > 1 and _usd(rates[0]["unitPrice"]) == 0
        else rates[0]["unitPrice"]
    )
    if price.get("currencyCode", "USD") != "USD":
        raise ValueError(f"currency {price.get('currencyCode')}")
    return _usd(price), info.get("usageUnit", "h")


def _usd(money: dict) -> float:
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


class GcpPrices:
    cloud = "gcp"
    source = "gcp-billing-catalog"

    def __init__(self) -> None:
        self.api_key = os.environ.get("GOOGLE_API_KEY", "")
        self.token = os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN", "")
        # (stem, kind, region) -> USD per hour (per vCPU / GiB / GPU)
        self.prices: dict[tuple[str, str, str], float] = {}

    def check_credentials(self) -> None:
        if not (self.api_key or self.token):
            raise TrainfleetError(NO_CREDENTIALS)

    def prepare(self) -> None:
        """List every Compute Engine SKU once (pages of 5000); any page failing fails the refresh."""
        base = os.environ.get("TRAINFLEET_GCP_BILLING_URL", BILLING_URL)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token and not self.api_key else {}
        token, page = "", 0
        while True:
            page += 1
            if page > MAX_PAGES:
                raise FetchError(f"gcp billing catalog: more than {MAX_PAGES} pages; stopping")
            query = {"currencyCode": "USD", "pageSize": "5000"}
            if self.api_key:
                query["key"] = self.api_key
            if token:
                query["pageToken"] = token
            body = request_json(
                base + "?" + urllib.parse.urlencode(query),
                headers=headers,
                what=f"gcp billing catalog page {page}",
            )
            if not isinstance(body, dict) or not isinstance(body.get("skus", []), list):
                raise FetchError(f"gcp billing catalog page {page}: malformed page (no skus list)")
            for sku in body.get("skus", []):
                self._add(sku, page)
            token = body.get("nextPageToken") or ""
            if not token:
                return

    def _add(self, sku: dict, page: int) -> None:
        try:
            category = sku.get("category", {})
            if category.get("resourceFamily") != "Compute":
                return
            usage = category.get("usageType")
            kind = {"OnDemand": "on-demand", "Preemptible": "spot"}.get(usage)
            if kind is None:  # commitments
                return
            name = stem(sku["description"])
            price, unit = unit_price(sku)
            if unit not in ("h", "GiBy.h"):
                return
            for region in sku.get("serviceRegions", []):
                self.prices[(name, kind, region)] = price
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise FetchError(
                f"gcp billing catalog page {page}: malformed SKU {sku.get('skuId', '?') if isinstance(sku, dict) else sku!r:.40} "
                f"({type(exc).__name__}: {exc})"
            ) from None

    def vm_price(self, offer: Offer, kind: str, region: str) -> float | None:
        prefix = "-".join(offer.instance_type.split("-")[:2])
        host, gpu = HOST_SKU.get(prefix), GPU_SKU.get(prefix) or GPU_SKU.get(offer.accelerator)
        if host is None or gpu is None:
            return None
        core = self.prices.get((f"{host} core".lower(), kind, region))
        ram = self.prices.get((f"{host} ram".lower(), kind, region))
        per_gpu = self.prices.get((gpu.lower(), kind, region))
        if core is None or ram is None or per_gpu is None:
            return None
        return round(offer.vcpus * core + offer.memory_gib * ram + offer.accelerators_per_node * per_gpu, 6)

    def fetch_region(self, region: str, known: list[Offer], as_of: str) -> list[Offer]:
        rows = []
        for offer in known:
            if offer.region != region:
                continue
            od, sp = self.vm_price(offer, "on-demand", region), self.vm_price(offer, "spot", region)
            if od is None and sp is None:
                continue
            rows.append(
                refreshed_row(offer, offer, region, offer.zone, od, sp, note="price = host SKUs + GPU SKUs")
            )
        if not rows and any(o.region == region for o in known):
            raise FetchError(
                f"gcp billing catalog: no Compute Engine SKUs priced the known machine types in {region}"
            )
        return rows
