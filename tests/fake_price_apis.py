"""A local HTTP server (127.0.0.1, free port) speaking the price and cost APIs trainfleet calls.

Shapes follow the providers' documentation:
- AWS Price List GetProducts (JSON 1.1, X-Amz-Target AWSPriceListService.GetProducts): PriceList is a
  list of JSON strings {product: {attributes}, terms: {OnDemand: {..: {priceDimensions: {..:
  {unit: Hrs, pricePerUnit: {USD}}}}}}}, NextToken pages; errors as {"__type": ThrottlingException}.
- Azure Retail Prices (GET /api/retail/prices?$filter=...): {Items: [...], NextPageLink, Count}.
- GCP Cloud Billing Catalog (GET /v1/services/6F81-5844-456A/skus): {skus: [...], nextPageToken}.
- BigQuery jobs.query (POST /bigquery/v2/projects/P/queries) and getQueryResults (GET .../queries/JOB).
- Azure Cost Management query (POST /subscriptions/S/providers/Microsoft.CostManagement/query).
Prices are derived from the embedded snapshot (x PRICE_FACTOR), so tests can compute what to expect.
Faults are configured per region: always throttled, throttled once, a malformed page, a slow answer.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from infra.catalog.loader import DATA_DIR, read_offers

PRICE_FACTOR = 1.25
GCP_CORE, GCP_RAM = 0.031, 0.0042  # USD per vCPU-hour and GiB-hour, on demand
GCP_GPU = {
    "Nvidia Tesla A100 GPU": 2.9,
    "Nvidia Tesla A100 80GB GPU": 3.9,
    "Nvidia H100 80GB GPU": 9.8,
    "Nvidia H100 80GB Mega GPU": 10.5,
    "Nvidia H200 141GB GPU": 10.9,
    "Nvidia B200 GPU": 12.1,
    "Nvidia L4 GPU": 0.56,
}
GCP_HOSTS = [
    "A2 Instance",
    "A3 Instance",
    "A3Plus Instance",
    "A3Ultra Instance",
    "A4 Instance",
    "G2 Instance",
]
GCP_SPOT_FACTOR = 0.4


def gcp_expected(vcpus: float, memory_gib: float, gpus: int, gpu_stem: str, spot: bool) -> float:
    f = GCP_SPOT_FACTOR if spot else 1.0
    return round(f * (vcpus * GCP_CORE + memory_gib * GCP_RAM + gpus * GCP_GPU[gpu_stem]), 6)


@dataclass
class Faults:
    aws_throttled_regions: set[str] = field(default_factory=set)  # pricing always ThrottlingException
    azure_throttled_regions: set[str] = field(default_factory=set)  # always 429
    azure_throttled_once: set[str] = field(default_factory=set)  # first request 429, then fine
    azure_malformed_regions: set[str] = field(default_factory=set)  # page 2 is not JSON
    azure_delay_s: dict[str, float] = field(default_factory=dict)  # every page of that region is slow
    gcp: str = "ok"  # ok | throttled | malformed | down
    azure_page_size: int = 40
    gcp_page_size: int = 100


def _money(usd: float) -> dict:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": int(round((usd - units) * 1e9))}


class FakePriceApis:
    def __init__(
        self, faults: Faults | None = None, *, bigquery_rows=None, azure_cost_rows=None, token="t0ken"
    ):
        self.faults = faults or Faults()
        self.token = token
        self.requests: list[tuple[str, str]] = []  # (api, detail) in arrival order
        self._lock = threading.Lock()
        self._seen_once: set[str] = set()
        snapshot = read_offers(DATA_DIR / "offers.csv")
        self.aws_on_demand = {
            (o.region, o.instance_type): round(o.on_demand_usd_per_hour * PRICE_FACTOR, 5)
            for o in snapshot
            if o.cloud == "aws" and o.on_demand_usd_per_hour is not None
        }
        self.azure_items = self._azure_items([o for o in snapshot if o.cloud == "azure"])
        self.gcp_skus = self._gcp_skus(sorted({o.region for o in snapshot if o.cloud == "gcp"}))
        self.bigquery_rows = bigquery_rows or []  # dicts: service, day, cost, currency, labels
        self.azure_cost_rows = (
            azure_cost_rows or []
        )  # dicts: cost, date (YYYYMMDD int), service, currency, tags
        self.bigquery_tables: set[str] = set()
        self.bigquery_page_size = 2
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakePriceApis:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def env(self) -> dict[str, str]:
        """Environment that points trainfleet at this server."""
        return {
            "AWS_ENDPOINT_URL_PRICING": f"{self.url}/aws-pricing",
            "TRAINFLEET_AZURE_PRICES_URL": f"{self.url}/azure/api/retail/prices",
            "TRAINFLEET_GCP_BILLING_URL": f"{self.url}/gcp/v1/services/6F81-5844-456A/skus",
            "TRAINFLEET_BIGQUERY_URL": f"{self.url}/bigquery/v2",
            "TRAINFLEET_AZURE_MANAGEMENT_URL": f"{self.url}/azure-mgmt",
        }

    def log(self, api: str, detail: str) -> None:
        with self._lock:
            self.requests.append((api, detail))

    def once(self, key: str) -> bool:
        with self._lock:
            if key in self._seen_once:
                return False
            self._seen_once.add(key)
            return True

    # -- fixtures ---------------------------------------------------------------------------------
    @staticmethod
    def _azure_items(offers) -> list[dict]:
        items = []
        for o in offers:
            series = o.instance_type.removeprefix("Standard_").replace("_", " ")
            common = {
                "currencyCode": "USD",
                "tierMinimumUnits": 0.0,
                "armRegionName": o.region,
                "location": o.region,
                "effectiveStartDate": "2024-01-01T00:00:00Z",
                "meterId": f"m-{o.instance_type}",
                "productId": "DZH318Z0BQ4L",
                "serviceName": "Virtual Machines",
                "serviceId": "DZH313Z7MMC8",
                "serviceFamily": "Compute",
                "unitOfMeasure": "1 Hour",
                "type": "Consumption",
                "isPrimaryMeterRegion": True,
                "armSkuName": o.instance_type,
            }
            linux, windows = f"Virtual Machines {series} Series", f"Virtual Machines {series} Series Windows"
            if o.on_demand_usd_per_hour is not None:
                od = round(o.on_demand_usd_per_hour * PRICE_FACTOR, 5)
                items += [
                    {**common, "retailPrice": od, "unitPrice": od, "meterName": series, "skuName": series, "productName": linux},
                    {**common, "retailPrice": od * 2, "unitPrice": od * 2, "meterName": series, "skuName": series, "productName": windows},
                    {**common, "retailPrice": od * 3, "unitPrice": od * 3, "meterName": series, "skuName": series,
                     "productName": linux, "effectiveStartDate": "2099-01-01T00:00:00Z"},  # announced future price
                    {**common, "retailPrice": od / 5, "unitPrice": od / 5, "meterName": f"{series} Low Priority",
                     "skuName": f"{series} Low Priority", "productName": linux},
                    {**common, "retailPrice": od * 0.6, "unitPrice": od * 0.6, "meterName": series, "skuName": series,
                     "productName": linux, "type": "Reservation", "reservationTerm": "1 Year"},
                ]  # fmt: skip
            if o.spot_usd_per_hour is not None:
                sp = round(o.spot_usd_per_hour * PRICE_FACTOR, 5)
                items += [
                    {**common, "retailPrice": sp, "unitPrice": sp, "meterName": f"{series} Spot", "skuName": f"{series} Spot", "productName": linux},
                    {**common, "retailPrice": sp * 2, "unitPrice": sp * 2, "meterName": f"{series} Spot", "skuName": f"{series} Spot", "productName": windows},
                ]  # fmt: skip
        return items

    @staticmethod
    def _gcp_skus(regions: list[str]) -> list[dict]:
        skus = []
        n = 0

        def sku(description: str, group: str, usage: str, region: str, usd: float, unit: str) -> dict:
            nonlocal n
            n += 1
            return {
                "name": f"services/6F81-5844-456A/skus/{n:04X}-0000-0000",
                "skuId": f"{n:04X}-0000-0000",
                "description": description,
                "category": {
                    "serviceDisplayName": "Compute Engine",
                    "resourceFamily": "Compute",
                    "resourceGroup": group,
                    "usageType": usage,
                },
                "serviceRegions": [region],
                "pricingInfo": [
                    {
                        "summary": "",
                        "pricingExpression": {
                            "usageUnit": unit,
                            "displayQuantity": 1,
                            "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(usd)}],
                            "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                            "baseUnit": "s" if unit == "h" else "By.s",
                            "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                        },
                        "currencyConversionRate": 1,
                        "effectiveTime": "2026-11-01T00:00:00Z",
                    }
                ],
                "serviceProviderName": "Google",
                "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
            }

        for region in regions:
            where = f" running in {region}"
            for usage, prefix, f in (
                ("OnDemand", "", 1.0),
                ("Preemptible", "Spot Preemptible ", GCP_SPOT_FACTOR),
            ):
                for host in GCP_HOSTS:
                    skus.append(sku(f"{prefix}{host} Core{where}", "CPU", usage, region, GCP_CORE * f, "h"))
                    skus.append(
                        sku(f"{prefix}{host} Ram{where}", "RAM", usage, region, GCP_RAM * f, "GiBy.h")
                    )
                for gpu, usd in GCP_GPU.items():
                    skus.append(sku(f"{prefix}{gpu}{where}", "GPU", usage, region, usd * f, "h"))
            # Decoys the refresh must ignore: a 1-year commitment and a storage SKU.
            skus.append(sku(f"Commitment v1: Nvidia L4 GPU{where}", "GPU", "Commit1Yr", region, 0.01, "h"))
            storage = sku(f"Storage PD Capacity{where}", "SSD", "OnDemand", region, 0.0001, "GiBy.mo")
            storage["category"]["resourceFamily"] = "Storage"
            skus.append(storage)
        return skus

    # -- HTTP -------------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body, headers: dict | None = None, content_type="application/json"):
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self):
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                if parts.path.startswith("/azure/api/retail/prices"):
                    return fake.azure_prices(self, query)
                if parts.path.startswith("/gcp/v1/services/6F81-5844-456A/skus"):
                    return fake.gcp_skus_page(self, query)
                if m := re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries/([^/]+)", parts.path):
                    return fake.bigquery_results(self, m.group(1), m.group(2), query)
                self._send(404, {"error": {"code": 404, "message": f"no route {parts.path}"}})

            def do_POST(self):
                parts = urllib.parse.urlsplit(self.path)
                body = self._body()
                if parts.path.startswith("/aws-pricing"):
                    return fake.aws_get_products(self, body)
                if m := re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries", parts.path):
                    return fake.bigquery_query(self, m.group(1), body)
                if m := re.fullmatch(
                    r"/azure-mgmt/subscriptions/([^/]+)/providers/Microsoft\.CostManagement/query", parts.path
                ):
                    return fake.azure_cost_query(
                        self, m.group(1), dict(urllib.parse.parse_qsl(parts.query)), body
                    )
                self._send(404, {"error": {"code": 404, "message": f"no route {parts.path}"}})

        return Handler

    # AWS Price List -------------------------------------------------------------------------------
    def aws_get_products(self, h, raw: bytes) -> None:
        target = h.headers.get("X-Amz-Target", "")
        if target != "AWSPriceListService.GetProducts":
            return h._send(400, {"__type": "UnknownOperationException", "message": target})
        req = json.loads(raw)
        filters = {f["Field"]: f["Value"] for f in req.get("Filters", [])}
        region, itype = filters.get("regionCode"), filters.get("instanceType")
        self.log("aws-pricing", f"{region} {itype} {req.get('NextToken', '')}")
        if region in self.faults.aws_throttled_regions:
            return h._send(400, {"__type": "ThrottlingException", "message": "Rate exceeded"},
                           {"x-amzn-ErrorType": "ThrottlingException"})  # fmt: skip
        wanted = {
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        price = self.aws_on_demand.get((region, itype))
        products = []
        if price is not None and all(filters.get(k) == v for k, v in wanted.items()):
            products.append(self._aws_product(region, itype, price))
        # Page 1 is empty with a NextToken (the real API does this too); page 2 holds the products.
        if not req.get("NextToken"):
            return h._send(200, {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page-2"})
        h._send(200, {"FormatVersion": "aws_v1", "PriceList": products})

    @staticmethod
    def _aws_product(region: str, itype: str, price: float) -> str:
        sku = f"SKU{abs(hash((region, itype))) % 10**8:08d}"
        return json.dumps(
            {
                "product": {
                    "productFamily": "Compute Instance",
                    "attributes": {
                        "instanceType": itype,
                        "regionCode": region,
                        "operatingSystem": "Linux",
                        "tenancy": "Shared",
                        "preInstalledSw": "NA",
                        "capacitystatus": "Used",
                        "licenseModel": "No License required",
                        "servicecode": "AmazonEC2",
                    },  # fmt: skip
                    "sku": sku,
                },
                "serviceCode": "AmazonEC2",
                "terms": {
                    "OnDemand": {
                        f"{sku}.JRTCKXETXF": {
                            "priceDimensions": {
                                f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                    "unit": "Hrs",
                                    "endRange": "Inf",
                                    "description": f"${price} per On Demand Linux {itype} Instance Hour",
                                    "beginRange": "0",
                                    "pricePerUnit": {"USD": f"{price:.10f}"},
                                }
                            },
                            "sku": sku,
                            "effectiveDate": "2026-11-01T00:00:00Z",
                            "offerTermCode": "JRTCKXETXF",
                            "termAttributes": {},
                        }
                    }
                },
                "version": "20261101000000",
                "publicationDate": "2026-11-01T00:00:00Z",
            }
        )

    # Azure Retail Prices --------------------------------------------------------------------------
    def azure_prices(self, h, query: dict) -> None:
        flt = query.get("$filter", "")
        m = re.search(r"armRegionName eq '([^']+)'", flt)
        region = m.group(1) if m else ""
        skip = int(query.get("$skip", "0"))
        page = skip // self.faults.azure_page_size + 1
        self.log("azure-prices", f"{region} page {page}")
        if delay := self.faults.azure_delay_s.get(region):
            time.sleep(delay)
        if region in self.faults.azure_throttled_regions or (
            region in self.faults.azure_throttled_once and self.once(f"azure-429-{region}")
        ):
            return h._send(429, {"error": {"code": "TooManyRequests", "message": "Rate limit exceeded"}},
                           {"Retry-After": "0"})  # fmt: skip
        if region in self.faults.azure_malformed_regions and page == 2:
            return h._send(200, b'{"BillingCurrency": "USD", "Items": [{"retailPrice": 1.0, "armSkuName": ')
        items = [
            i
            for i in self.azure_items
            if (not region or i["armRegionName"] == region)
            and ("priceType eq 'Consumption'" not in flt or i["type"] == "Consumption")
        ]
        size = self.faults.azure_page_size
        chunk = items[skip : skip + size]
        nxt = None
        if skip + size < len(items):
            q = {**query, "$skip": str(skip + size)}
            nxt = f"{self.url}/azure/api/retail/prices?{urllib.parse.urlencode(q)}"
        h._send(200, {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                      "Items": chunk, "NextPageLink": nxt, "Count": len(chunk)})  # fmt: skip

    # GCP Cloud Billing Catalog --------------------------------------------------------------------
    def gcp_skus_page(self, h, query: dict) -> None:
        token = query.get("pageToken", "")
        start = int(token or 0)
        self.log("gcp-skus", f"page-start {start}")
        if query.get("key") != self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            return h._send(400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                           "status": "INVALID_ARGUMENT"}})  # fmt: skip
        size = min(int(query.get("pageSize", "5000")), self.faults.gcp_page_size)
        if self.faults.gcp == "throttled":
            return h._send(429, {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}},
                           {"Retry-After": "0"})  # fmt: skip
        if self.faults.gcp == "down":
            return h._send(503, {"error": {"code": 503, "message": "The service is currently unavailable.",
                                           "status": "UNAVAILABLE"}})  # fmt: skip
        if self.faults.gcp == "malformed" and start >= size:
            return h._send(200, b'{"skus": [{"name": "services/6F81-5844-456A/skus/')
        chunk = self.gcp_skus[start : start + size]
        body = {"skus": chunk}
        if start + size < len(self.gcp_skus):
            body["nextPageToken"] = str(start + size)
        h._send(200, body)

    # BigQuery jobs.query ---------------------------------------------------------------------------
    def _bq_auth(self, h) -> bool:
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            h._send(401, {"error": {"code": 401, "message": "Request is missing required authentication credential.",
                                    "status": "UNAUTHENTICATED"}})  # fmt: skip
            return False
        return True

    def bigquery_query(self, h, project: str, raw: bytes) -> None:
        if not self._bq_auth(h):
            return
        req = json.loads(raw)
        sql = req.get("query", "")
        self.log("bigquery-query", sql)
        m = re.search(r"FROM `([^`]+)`", sql)
        if not m or m.group(1) not in self.bigquery_tables:
            table = m.group(1) if m else "?"
            return h._send(
                404, {"error": {"code": 404, "message": f"Not found: Table {table}", "status": "NOT_FOUND"}}
            )
        params = {p["name"]: p["parameterValue"]["value"] for p in req.get("queryParameters", [])}
        rows = [
            r
            for r in self.bigquery_rows
            if r["labels"].get(params["label_key"]) == params["label_value"]
            and params["since"] <= r["day"] < params["until"]
        ]
        agg: dict[tuple[str, str], list] = {}
        for r in rows:
            agg.setdefault((r["day"], r["service"]), [0.0, r.get("currency", "USD")])[0] += r["cost"]
        result = [[service, day, cost, cur] for (day, service), (cost, cur) in sorted(agg.items())]
        job = f"job_{len(self.requests)}"
        self._bq_results = getattr(self, "_bq_results", {})
        self._bq_results[job] = result
        # Like BigQuery (which pages by response size too), answer at most bigquery_page_size rows a page.
        self._bq_page(
            h, project, job, 0, min(int(req.get("maxResults", 1000)), self.bigquery_page_size), first=True
        )

    def bigquery_results(self, h, project: str, job: str, query: dict) -> None:
        if not self._bq_auth(h):
            return
        self.log("bigquery-results", f"{job} {query.get('pageToken', '')}")
        self._bq_page(
            h, project, job, int(query.get("pageToken", "0")), int(query.get("maxResults", 2)), first=False
        )

    def _bq_page(self, h, project, job, start, size, first):
        result = self._bq_results[job]
        chunk = result[start : start + size]
        body = {
            "kind": "bigquery#queryResponse" if first else "bigquery#getQueryResultsResponse",
            "schema": {"fields": [{"name": "service", "type": "STRING", "mode": "NULLABLE"},
                                  {"name": "day", "type": "DATE", "mode": "NULLABLE"},
                                  {"name": "cost", "type": "FLOAT", "mode": "NULLABLE"},
                                  {"name": "currency", "type": "STRING", "mode": "NULLABLE"}]},
            "jobReference": {"projectId": project, "jobId": job, "location": "US"},
            "totalRows": str(len(result)),
            "rows": [{"f": [{"v": service}, {"v": day}, {"v": repr(float(cost))}, {"v": cur}]}
                     for service, day, cost, cur in chunk],
            "jobComplete": True,
            "cacheHit": False,
        }  # fmt: skip
        if start + size < len(result):
            body["pageToken"] = str(start + size)
        h._send(200, body)

    # Azure Cost Management query -------------------------------------------------------------------
    def azure_cost_query(self, h, subscription: str, query: dict, raw: bytes) -> None:
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            return h._send(
                401, {"error": {"code": "AuthenticationFailed", "message": "Authentication failed."}}
            )
        req = json.loads(raw)
        self.log("azure-cost", json.dumps(req, sort_keys=True))
        tag = req["dataset"]["filter"]["tags"]
        since = int(req["timePeriod"]["from"][:10].replace("-", ""))
        until = int(req["timePeriod"]["to"][:10].replace("-", ""))
        rows = [
            [r["cost"], r["date"], r["service"], r.get("currency", "USD")]
            for r in self.azure_cost_rows
            if r["tags"].get(tag["name"]) in tag["values"] and since <= r["date"] <= until
        ]
        skip = int(query.get("$skiptoken", "0"))
        size = 2
        body = {
            "id": f"subscriptions/{subscription}/providers/Microsoft.CostManagement/query/q1",
            "name": "q1",
            "type": "Microsoft.CostManagement/query",
            "properties": {
                "nextLink": None,
                "columns": [{"name": "Cost", "type": "Number"}, {"name": "UsageDate", "type": "Number"},
                            {"name": "ServiceName", "type": "String"}, {"name": "Currency", "type": "String"}],
                "rows": rows[skip : skip + size],
            },
        }  # fmt: skip
        if skip + size < len(rows):
            q = {**query, "$skiptoken": str(skip + size)}
            body["properties"]["nextLink"] = (
                f"{self.url}/azure-mgmt/subscriptions/{subscription}/providers/Microsoft.CostManagement/query?"
                + urllib.parse.urlencode(q)
            )
        h._send(200, body)


if __name__ == "__main__":  # python -m tests.fake_price_apis: serve until interrupted
    server = FakePriceApis().start()
    for k, v in server.env().items():
        print(f"export {k}={v}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


def isolated_env(home) -> dict[str, str]:
    """An environment that never touches the developer's ~/.config/trainfleet, ~/.aws or the internet:
    test credentials, fast retries. Callers add the servers' endpoints."""
    return {
        "TRAINFLEET_HOME": str(home),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # anything not pointed at a local server fails fast
        "TRAINFLEET_AWS_MAX_ATTEMPTS": "2",
        "TRAINFLEET_HTTP_ATTEMPTS": "3",
        "TRAINFLEET_HTTP_BACKOFF_S": "0.01",
        "GOOGLE_API_KEY": "",
        "GOOGLE_OAUTH_ACCESS_TOKEN": "",
        "AZURE_ACCESS_TOKEN": "",
        "PATH": str(
            home / "no-bin"
        ),  # no gcloud/az from the developer's machine (the CLI runs by absolute path)
    }
