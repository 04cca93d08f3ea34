"""AWS prices: on-demand from the Price List API (boto3 `pricing`), spot from EC2 spot price history.

On-demand is one price per region and instance type (Linux, shared tenancy, no pre-installed software,
capacity status Used); spot is the latest price per availability zone over a recent window. The
catalog keys zones by AZ id (use1-az4), so AZ names are mapped with describe_availability_zones.
Endpoints follow boto3's own settings (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_PRICING, AWS_ENDPOINT_URL_EC2).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime, timedelta

from infra.catalog.model import Offer
from infra.catalog.refresh.http import FetchError
from infra.catalog.refresh.rows import refreshed_row
from infra.errors import TrainfleetError

PRICING_REGION = "us-east-1"  # the Price List API is served from us-east-1 (and a few others)
SPOT_WINDOW = timedelta(hours=6)
LINUX_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]
NO_CREDENTIALS = (
    "no AWS credentials found (boto3 looked at AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and "
    "~/.aws/credentials, SSO and instance roles); run `aws configure` or `aws sso login`, or set AWS_PROFILE"
)


def _session():
    import boto3

    return boto3.Session()


def aws_config():
    from botocore.config import Config

    attempts = int(os.environ.get("TRAINFLEET_AWS_MAX_ATTEMPTS", "5"))
    return Config(retries={"max_attempts": attempts, "mode": "standard"}, connect_timeout=10, read_timeout=60)


def check_aws_credentials(session=None) -> None:
    session = session or _session()
    try:
        credentials = session.get_credentials()
    except Exception as exc:  # a broken profile: botocore raises its own errors
        raise TrainfleetError(
            f"AWS credentials cannot be loaded ({exc}); {NO_CREDENTIALS.split('; ')[1]}"
        ) from None
    if credentials is None:
        raise TrainfleetError(NO_CREDENTIALS)


def describe_aws_error(what: str, exc: Exception) -> str:
    """One line for a botocore error: the service call, the AWS error code and message."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{what}: {err.get('Code', 'error')}: {' '.join(str(err.get('Message', '')).split())}".rstrip(
            ": "
        )
    return f"{what}: {' '.join(str(exc).split())}"


class AwsPrices:
    cloud = "aws"
    source = "aws-price-list+spot-history"

    def __init__(self) -> None:
        self.session = _session()

    def check_credentials(self) -> None:
        check_aws_credentials(self.session)

    def prepare(self) -> None:
        pass

    def fetch_region(self, region: str, known: list[Offer], as_of: str) -> list[Offer]:
        types = sorted({o.instance_type for o in known})
        on_demand = self.on_demand(region, types)
        spot = self.spot(region, types)
        return build_rows(region, known, on_demand, spot)

    # -- Price List API ---------------------------------------------------------------------------
    def on_demand(self, region: str, types: list[str]) -> dict[str, float]:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.session.client("pricing", region_name=PRICING_REGION, config=aws_config())

        def one(instance_type: str) -> tuple[str, float | None]:
            filters = {
                "instanceType": instance_type,
                "regionCode": region,
                "operatingSystem": "Linux",
                "tenancy": "Shared",
                "preInstalledSw": "NA",
                "capacitystatus": "Used",
            }
            prices: list[float] = []
            try:
                pages = client.get_paginator("get_products").paginate(
                    ServiceCode="AmazonEC2",
                    Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
                    FormatVersion="aws_v1",
                )
                for page in pages:
                    for item in page.get("PriceList", []):
                        prices.extend(on_demand_prices(item, instance_type))
            except (ClientError, BotoCoreError) as exc:
                raise FetchError(describe_aws_error(f"pricing GetProducts {instance_type}", exc)) from None
            positive = [p for p in prices if p > 0]
            return instance_type, (min(positive) if positive else None)

        pool = ThreadPoolExecutor(max_workers=8)
        try:
            results = [f.result() for f in as_completed([pool.submit(one, t) for t in types])]
        except FetchError:  # throttled or down: fail the region now, do not retry the other types
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return {t: p for t, p in results if p is not None}

    # -- EC2 spot price history -------------------------------------------------------------------
    def spot(self, region: str, types: list[str]) -> dict[tuple[str, str], float]:
        """Latest Linux spot price per (AZ id, instance type) over the recent window."""
        from botocore.exceptions import BotoCoreError, ClientError

        ec2 = self.session.client("ec2", region_name=region, config=aws_config())
        try:
            zones = ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
        except (ClientError, BotoCoreError) as exc:
            raise FetchError(describe_aws_error(f"ec2 DescribeAvailabilityZones {region}", exc)) from None
        zone_ids = {z["ZoneName"]: z["ZoneId"] for z in zones if "ZoneId" in z}
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        start = datetime.now(UTC) - SPOT_WINDOW
        try:
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=types, ProductDescriptions=LINUX_PRODUCTS, StartTime=start
            )
            for page in pages:
                for rec in page.get("SpotPriceHistory", []):
                    zone = zone_ids.get(rec.get("AvailabilityZone", ""))
                    if zone is None or not rec.get("ProductDescription", "").startswith("Linux/UNIX"):
                        continue
                    try:
                        price = float(rec["SpotPrice"])
                    except (KeyError, TypeError, ValueError):
                        raise FetchError(
                            f"ec2 spot price history {region}: bad SpotPrice in {rec!r:.120}"
                        ) from None
                    key = (zone, rec["InstanceType"])
                    when = rec.get("Timestamp") or start
                    if key not in latest or when >= latest[key][0]:
                        latest[key] = (when, price)
        except (ClientError, BotoCoreError) as exc:
            raise FetchError(describe_aws_error(f"ec2 DescribeSpotPriceHistory {region}", exc)) from None
        return {key: price for key, (_, price) in latest.items()}


def on_demand_prices(item: str | dict, instance_type: str) -> list[float]:
    """USD/hour prices in one Price List product (a JSON string in PriceList)."""
    try:
        product = json.loads(item) if isinstance(item, str) else item
        if product["product"]["attributes"].get("instanceType") != instance_type:
            return []
        prices = []
        for term in product["terms"].get("OnDemand", {}).values():
            for dim in term["priceDimensions"].values():
                if dim.get("unit", "Hrs") in ("Hrs", "Hours", "hour"):
                    prices.append(float(dim["pricePerUnit"]["USD"]))
        return prices
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FetchError(
            f"pricing GetProducts {instance_type}: malformed product ({type(exc).__name__}: {exc})"
        ) from None


def build_rows(
    region: str, known: list[Offer], on_demand: dict[str, float], spot: dict[tuple[str, str], float]
) -> list[Offer]:
    """One row per (zone, type): the snapshot's zones plus any AZ that has a spot price now."""
    by_type: dict[str, Offer] = {}
    for o in known:  # hardware template per type: prefer this region's row
        if o.instance_type not in by_type or o.region == region:
            by_type[o.instance_type] = o
    zones: dict[str, set[str]] = {}
    for o in known:
        if o.region == region and o.zone:
            zones.setdefault(o.instance_type, set()).add(o.zone)
    for zone, instance_type in spot:
        if instance_type in by_type:
            zones.setdefault(instance_type, set()).add(zone)
    existing = {(o.zone, o.instance_type): o for o in known if o.region == region}
    rows = []
    for instance_type, type_zones in zones.items():
        od = on_demand.get(instance_type)
        for zone in sorted(type_zones):
            sp = spot.get((zone, instance_type))
            if od is None and sp is None:
                continue  # the APIs know nothing of it here: the snapshot row stays
            rows.append(
                refreshed_row(
                    existing.get((zone, instance_type)), by_type[instance_type], region, zone, od, sp
                )
            )
    return rows
