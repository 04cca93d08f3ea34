"""A stand-in for EC2's DescribeSpotPriceHistory, seeded with distinct prices per zone and time.

moto (5.x) answers DescribeSpotPriceHistory with one made-up record per zone (price 0.00001, timestamp
2006-01-02) and has no moto-api endpoint to seed spot price history, so "the latest price per zone" cannot
be tested against it. This server answers that one action itself and passes every other EC2 action
(DescribeAvailabilityZones, ...) through to moto's server unchanged, so boto3 points at one EC2 endpoint.

It follows the EC2 Query API as documented:
- https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html
  InstanceType.N, ProductDescription.N, AvailabilityZone, Filter.N.Name / Filter.N.Value.M
  (availability-zone, availability-zone-id, instance-type, product-description), StartTime, EndTime,
  MaxResults, NextToken, DryRun. "When you specify a start and end time, the operation returns the prices
  of the instance types within that time range. It also returns the last price change before the start
  time, which is the effective price as of the start time."
  Response: <spotPriceHistorySet><item>{instanceType, productDescription, spotPrice, timestamp,
  availabilityZone, availabilityZoneId}</item></spotPriceHistorySet><nextToken/>.
- Ordering: the API reference (2013-02-01) says prices come "starting with the most recent set"; some SDK
  docs say "chronological order, from the oldest to the most recent". Newest first is the default here;
  `newest_first=False` serves the other order, so a client that relies on either is caught.
- Pagination: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Query-Requests.html#api-pagination
  a page holds at most MaxResults items (1000 when not given); nextToken is absent on the last page; a
  token the service did not issue is InvalidPaginationToken.
- Errors: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
  <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>.
The region of a request is the one in its SigV4 credential scope (each region has its own endpoint on AWS;
here they share one). Filter wildcards (* and ?) and the spot-price / timestamp filters are not
implemented: asking for them gets a loud 400 naming the fake, never a silently different answer.
"""

from __future__ import annotations

import base64
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from xml.sax.saxutils import escape

from tests.loopback import LoopbackServer

EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
PAGE_MAX = 1000
LINUX = "Linux/UNIX"
LINUX_VPC = "Linux/UNIX (Amazon VPC)"


@dataclass(frozen=True)
class SpotPrice:
    """One price change: from `timestamp` on, `instance_type` in `zone` (an AZ *name*) costs `price`."""

    zone: str
    instance_type: str
    price: str  # the API returns a decimal string; kept as given
    timestamp: datetime
    product: str = LINUX


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeEc2Spot(LoopbackServer):
    def __init__(self, upstream: str, *, newest_first: bool = True) -> None:
        self.upstream = upstream.rstrip("/")  # moto's server: every other EC2 action
        self.newest_first = newest_first
        self.history: dict[str, list[SpotPrice]] = {}  # region -> price changes
        self.requests: list[dict[str, list[str]]] = []  # DescribeSpotPriceHistory params, in arrival order
        self._zone_ids: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        super().__init__(self._handler())

    # -- environment ------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_EC2": self.url}

    # -- seeding ----------------------------------------------------------------------------------
    def seed(self, region: str, prices: list[SpotPrice]) -> None:
        with self._lock:
            self.history.setdefault(region, []).extend(prices)

    def zone_id(self, region: str, zone_name: str) -> str:
        """The AZ id the upstream (moto) gives `zone_name`: the account's name -> id mapping."""
        with self._lock:
            if region not in self._zone_ids:
                self._zone_ids[region] = self._upstream_zone_ids(region)
            return self._zone_ids[region][zone_name]

    def _upstream_zone_ids(self, region: str) -> dict[str, str]:
        import boto3

        ec2 = boto3.client(
            "ec2", region_name=region, endpoint_url=self.upstream,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        zones = ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
        return {z["ZoneName"]: z["ZoneId"] for z in zones}

    # -- DescribeSpotPriceHistory -----------------------------------------------------------------
    def describe_spot_price_history(self, region: str, params: dict[str, list[str]]) -> bytes:
        with self._lock:
            self.requests.append(params)
            history = list(self.history.get(region, []))
        if one(params, "DryRun") == "true":
            raise ApiError(412, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
        wanted = requested_filters(params)
        start, end = optional_time(params, "StartTime"), optional_time(params, "EndTime")
        matching = [p for p in history if self._matches(region, p, wanted)]
        chosen = in_window(matching, start, end or datetime.now(UTC))
        chosen.sort(key=lambda p: p.timestamp, reverse=self.newest_first)
        offset = decode_token(one(params, "NextToken"))
        size = min(max_results(params), PAGE_MAX)
        page = chosen[offset : offset + size]
        more = offset + size < len(chosen)
        items = "".join(self._item(region, p) for p in page)
        token = f"<nextToken>{encode_token(offset + size)}</nextToken>" if more else ""
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSpotPriceHistoryResponse xmlns="{EC2_XMLNS}">'
            f"<requestId>{uuid.uuid4()}</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet>{token}"
            f"</DescribeSpotPriceHistoryResponse>"
        ).encode()

    def _matches(self, region: str, p: SpotPrice, wanted: dict[str, set[str]]) -> bool:
        fields = {
            "availability-zone": p.zone,
            "instance-type": p.instance_type,
            "product-description": p.product,
        }
        if "availability-zone-id" in wanted:
            fields["availability-zone-id"] = self.zone_id(region, p.zone)
        return all(fields[name] in values for name, values in wanted.items())

    def _item(self, region: str, p: SpotPrice) -> str:
        stamp = p.timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return (
            f"<item><instanceType>{escape(p.instance_type)}</instanceType>"
            f"<productDescription>{escape(p.product)}</productDescription>"
            f"<spotPrice>{escape(p.price)}</spotPrice><timestamp>{stamp}</timestamp>"
            f"<availabilityZone>{escape(p.zone)}</availabilityZone>"
            f"<availabilityZoneId>{escape(self.zone_id(region, p.zone))}</availabilityZoneId></item>"
        )

    # -- HTTP -------------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                self._serve(b"")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self._serve(self.rfile.read(n) if n else b"")

            def _serve(self, body: bytes) -> None:
                query = urllib.parse.urlsplit(self.path).query
                params = urllib.parse.parse_qs(query + "&" + body.decode(), keep_blank_values=True)
                if one(params, "Action") != "DescribeSpotPriceHistory":
                    return self._send(*fake.forward(self.command, self.path, dict(self.headers), body))
                try:
                    region = signing_region(self.headers.get("Authorization", ""))
                    self._send(
                        200, "text/xml;charset=UTF-8", fake.describe_spot_price_history(region, params)
                    )
                except ApiError as err:
                    self._send(err.status, "text/xml;charset=UTF-8", error_xml(err))

            def _send(self, status: int, content_type: str, raw: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        """Pass a request through to moto unchanged; its answer comes back as it is."""
        keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length", "connection")}
        request = urllib.request.Request(self.upstream + path, data=body or None, headers=keep, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                return resp.status, resp.headers.get("Content-Type", "text/xml"), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Content-Type", "text/xml"), err.read()


# -- request parsing (module functions: no state) ---------------------------------------------------
def one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def numbered(params: dict[str, list[str]], prefix: str) -> list[str]:
    """Values of a Query-API list: prefix.1, prefix.2, ... in index order."""
    pattern = re.compile(rf"{re.escape(prefix)}\.(\d+)")
    found = [(int(m.group(1)), v[0]) for k, v in params.items() if (m := pattern.fullmatch(k))]
    return [v for _, v in sorted(found)]


SUPPORTED_FILTERS = ("availability-zone", "availability-zone-id", "instance-type", "product-description")


def requested_filters(params: dict[str, list[str]]) -> dict[str, set[str]]:
    """Filter name -> accepted values; the dedicated parameters are the same filters under other names."""
    wanted: dict[str, set[str]] = {}

    def add(name: str, values: list[str]) -> None:
        if any("*" in v or "?" in v for v in values):
            raise ApiError(400, "FakeNotImplemented", f"fake_ec2_spot: wildcards in filter {name} {values}")
        wanted[name] = wanted[name] & set(values) if name in wanted else set(values)

    for index in sorted({int(m.group(1)) for k in params if (m := re.fullmatch(r"Filter\.(\d+)\.Name", k))}):
        name = one(params, f"Filter.{index}.Name") or ""
        if name not in SUPPORTED_FILTERS:
            raise ApiError(400, "FakeNotImplemented", f"fake_ec2_spot: filter {name!r} is not implemented")
        add(name, numbered(params, f"Filter.{index}.Value"))
    for name, param in [("instance-type", "InstanceType"), ("product-description", "ProductDescription")]:
        if values := numbered(params, param):
            add(name, values)
    if zone := one(params, "AvailabilityZone"):
        add("availability-zone", [zone])
    if zone_id := one(params, "AvailabilityZoneId"):
        add("availability-zone-id", [zone_id])
    return wanted


def max_results(params: dict[str, list[str]]) -> int:
    text = one(params, "MaxResults") or str(PAGE_MAX)
    if not text.isdigit() or int(text) < 1:
        raise ApiError(400, "InvalidParameterValue", f"Value ({text}) for parameter maxResults is invalid.")
    return int(text)


def optional_time(params: dict[str, list[str]], name: str) -> datetime | None:
    text = one(params, name)
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(
            400, "InvalidParameterValue", f"Value ({text}) for parameter {name} is invalid."
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def in_window(prices: list[SpotPrice], start: datetime | None, end: datetime) -> list[SpotPrice]:
    """Changes within [start, end], plus each series' last change before start (its price at start)."""
    chosen = [p for p in prices if (start is None or p.timestamp >= start) and p.timestamp <= end]
    if start is not None:
        before: dict[tuple[str, str, str], SpotPrice] = {}
        for p in prices:
            key = (p.zone, p.instance_type, p.product)
            if p.timestamp < start and (key not in before or p.timestamp > before[key].timestamp):
                before[key] = p
        chosen.extend(before.values())
    return chosen


def encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"spot-page:{offset}".encode()).decode()


def decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        kind, _, offset = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind == "spot-page":
            return int(offset)
    except ValueError:
        pass
    raise ApiError(400, "InvalidPaginationToken", f"The specified pagination token is not valid: {token}")


def signing_region(authorization: str) -> str:
    """The region of a SigV4 request: Credential=KEY/DATE/REGION/SERVICE/aws4_request."""
    m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", authorization)
    if not m:
        raise ApiError(401, "AuthFailure", "AWS was not able to validate the provided access credentials")
    return m.group(1)


def error_xml(err: ApiError) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(err.code)}</Code>'
        f"<Message>{escape(err.message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID>"
        f"</Response>"
    ).encode()
