"""A stand-in for EC2 GetSpotPlacementScores on 127.0.0.1, speaking the EC2 Query protocol, for boto3.

moto (5.x, in .venv) does not implement GetSpotPlacementScores (no get_spot_placement_scores anywhere in it),
so this server answers that one action; anything else is a loud 400 naming the fake.

It follows (sources and dates in tests/fixtures/placement/PROVENANCE.md):
- Shapes: botocore's EC2 service model (2016-11-15), GetSpotPlacementScoresRequest/Result. Query params
  InstanceType.N, TargetCapacity (required, 1..2,000,000,000), TargetCapacityUnitType (vcpu | memory-mib |
  units), SingleAvailabilityZone, RegionName.N (at most 10), InstanceRequirementsWithMetadata.*, DryRun,
  MaxResults (10..1000), NextToken. Response <GetSpotPlacementScoresResponse><spotPlacementScoreSet><item>
  {region, availabilityZoneId, score}</item></spotPlacementScoreSet><nextToken/>.
- API reference: "If you specify InstanceTypes, you can't specify InstanceRequirementsWithMetadata" (and the
  reverse); SingleAvailabilityZone=true returns scored AZs, else scored Regions; the scores are for "the top 10
  Regions or Availability Zones", 1 to 10.
- User guide "Spot placement score": RegionNames confine the answer to those Regions; request configurations
  are limited per 24 h, and "you can retry the request configurations that you've already used".
- The limit's error: code MaxConfigLimitExceeded, message as logged in AWS's spot placement score tracker
  sample (aws-solutions-library-samples/guidance-for-ec2-spot-placement-score-tracker README).
- Pagination and errors: the Query API docs (Query-Requests.html#api-pagination, errors-overview.html): a page
  holds at most MaxResults items; nextToken is absent on the last page; errors are
  <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>.

Not documented, so chosen here and said so: a configuration is the whole request less DryRun, MaxResults and
NextToken (stricter than AWS may be); an instance type the table does not know is InvalidParameterValue
(EC2's common code for a bad parameter value); a request over `capacity_limit` (the account's target capacity
limit, documented but not its error) fails with `capacity_limit_error`; with several instance types a place
scores the best of them. Scores themselves come from the table the test sets, as a step function of capacity.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from xml.sax.saxutils import escape

from tests.fake_ec2_spot import (  # the EC2 Query API's own errors, signing and list parameters
    ApiError,
    error_xml,
    numbered,
    one,
    signing_region,
)
from tests.loopback import LoopbackServer

EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
TARGET_CAPACITY_MAX = 2_000_000_000
MAX_RESULTS = (10, 1000)
MAX_REGION_NAMES = 10
MAX_INSTANCE_TYPES = 1000
TOP = 10  # "the top 10 Regions or Availability Zones"
DAY_S = 24 * 3600
LIMIT_MESSAGE = (
    "You have exceeded your maximum allowed Spot placement configurations. You can retry configurations that "
    "you used within the last 24 hours, or wait for 24 hours before specifying a new configuration."
)


def invalid(name: str, value: str | None, why: str = "") -> ApiError:
    return ApiError(
        400, "InvalidParameterValue", f"Value ({value}) for parameter {name} is invalid. {why}".strip()
    )


class FakeSpotPlacement(LoopbackServer):
    def __init__(
        self, *, config_limit: int = 10, page_size: int = 1000, clock: Callable[[], float] = time.time
    ):
        # (region, zone, instance_type) -> {capacity: score}: a request for N instances scores as the smallest
        # capacity >= N in the steps, and 1 ("not likely to succeed") above the last step. zone "" = regional.
        self.scores: dict[tuple[str, str, str], dict[int, int]] = {}
        self.config_limit = config_limit
        self.page_size = page_size  # the server may return fewer than MaxResults items on a page
        self.capacity_limit: int | None = None
        self.capacity_limit_error = (
            "InvalidParameterValue",
            "Target capacity exceeds your Spot placement score limit.",
        )
        self.clock = clock
        self.requests: list[dict[str, list[str]]] = []  # every request's params, in arrival order
        self.signing_regions: list[str] = []
        self._used: dict[str, float] = {}  # configuration -> first use time
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_EC2": self.url}

    def set_scores(self, region: str, zone: str, instance_type: str, steps: dict[int, int]) -> None:
        assert all(1 <= s <= 10 for s in steps.values()), steps
        self.scores[(region, zone, instance_type)] = dict(sorted(steps.items()))

    # -- the action ------------------------------------------------------------------------------------
    def get_spot_placement_scores(self, params: dict[str, list[str]]) -> bytes:
        with self._lock:
            self.requests.append(params)
        types = numbered(params, "InstanceType")
        regions = numbered(params, "RegionName")
        has_requirements = any(k.startswith("InstanceRequirementsWithMetadata.") for k in params)
        if types and has_requirements:
            raise ApiError(
                400, "InvalidParameterCombination",
                "If you specify InstanceTypes, you can't specify InstanceRequirementsWithMetadata.",
            )  # fmt: skip
        if has_requirements:
            raise ApiError(400, "FakeNotImplemented", "fake_spot_placement: InstanceRequirementsWithMetadata")
        if not types:
            raise ApiError(
                400, "MissingParameter", "Specify InstanceTypes or InstanceRequirementsWithMetadata."
            )
        if len(types) > MAX_INSTANCE_TYPES:
            raise invalid("InstanceTypes", str(len(types)), f"At most {MAX_INSTANCE_TYPES} instance types.")
        if len(regions) > MAX_REGION_NAMES:
            raise invalid("RegionNames", str(len(regions)), f"At most {MAX_REGION_NAMES} Regions.")
        capacity_text = one(params, "TargetCapacity")
        if capacity_text is None:
            raise ApiError(400, "MissingParameter", "The request must contain the parameter TargetCapacity")
        if not capacity_text.isdigit() or not 1 <= int(capacity_text) <= TARGET_CAPACITY_MAX:
            raise invalid("TargetCapacity", capacity_text)
        capacity = int(capacity_text)
        unit = one(params, "TargetCapacityUnitType") or "units"
        if unit not in ("vcpu", "memory-mib", "units"):
            raise invalid("TargetCapacityUnitType", unit)
        if unit != "units":
            raise ApiError(400, "FakeNotImplemented", f"fake_spot_placement: TargetCapacityUnitType {unit}")
        single_az_text = one(params, "SingleAvailabilityZone") or "false"
        if single_az_text not in ("true", "false"):
            raise invalid("SingleAvailabilityZone", single_az_text)
        single_az = single_az_text == "true"
        size = max_results(params)
        known_types = {t for (_, _, t) in self.scores}
        for t in types:
            if t not in known_types:
                raise invalid("InstanceType", t, "The instance type is not supported.")
        if one(params, "DryRun") == "true":
            raise ApiError(412, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
        config = configuration(params)
        token = one(params, "NextToken")
        if token is None:  # a new question, not a further page of one already asked
            self._count_configuration(config)
        if self.capacity_limit is not None and capacity > self.capacity_limit:
            raise ApiError(400, *self.capacity_limit_error)

        places: dict[tuple[str, str], int] = {}
        for (region, zone, t), steps in self.scores.items():
            if t not in types or bool(zone) != single_az or (regions and region not in regions):
                continue
            score = next((s for cap, s in steps.items() if cap >= capacity), 1)
            places[(region, zone)] = max(places.get((region, zone), 1), score)
        ranked = sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
        offset = decode_token(token, config)
        page_len = min(size, self.page_size)
        page = ranked[offset : offset + page_len]
        more = offset + page_len < len(ranked)
        items = "".join(
            f"<item><region>{escape(region)}</region>"
            + (f"<availabilityZoneId>{escape(zone)}</availabilityZoneId>" if zone else "")
            + f"<score>{score}</score></item>"
            for (region, zone), score in page
        )
        next_token = f"<nextToken>{encode_token(config, offset + page_len)}</nextToken>" if more else ""
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<GetSpotPlacementScoresResponse xmlns="{EC2_XMLNS}">'
            f"<requestId>{uuid.uuid4()}</requestId><spotPlacementScoreSet>{items}</spotPlacementScoreSet>"
            f"{next_token}</GetSpotPlacementScoresResponse>"
        ).encode()

    def _count_configuration(self, config: str) -> None:
        """New configurations per rolling 24 h are limited; one used in the last 24 h may be asked again."""
        with self._lock:
            now = self.clock()
            self._used = {c: t for c, t in self._used.items() if now - t < DAY_S}
            if config in self._used:
                return
            if len(self._used) >= self.config_limit:
                raise ApiError(400, "MaxConfigLimitExceeded", LIMIT_MESSAGE)
            self._used[config] = now

    # -- HTTP -------------------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode() if n else ""
                params = urllib.parse.parse_qs(body, keep_blank_values=True)
                try:
                    region = signing_region(self.headers.get("Authorization", ""))
                    with fake._lock:
                        fake.signing_regions.append(region)
                    if one(params, "Action") != "GetSpotPlacementScores":
                        raise ApiError(
                            400, "FakeNotImplemented", f"fake_spot_placement: {one(params, 'Action')}"
                        )
                    if one(params, "Version") != "2016-11-15":
                        raise ApiError(400, "InvalidParameterValue", f"Version {one(params, 'Version')}")
                    self._send(200, fake.get_spot_placement_scores(params))
                except ApiError as err:
                    self._send(err.status, error_xml(err))

            def _send(self, status: int, raw: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/xml;charset=UTF-8")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


# -- request parsing (one, numbered: tests/fake_ec2_spot.py) -------------------------------------------
def max_results(params: dict[str, list[str]]) -> int:
    text = one(params, "MaxResults")
    if text is None:
        return MAX_RESULTS[1]
    if not text.isdigit() or not MAX_RESULTS[0] <= int(text) <= MAX_RESULTS[1]:
        raise invalid("MaxResults", text, f"It must be between {MAX_RESULTS[0]} and {MAX_RESULTS[1]}.")
    return int(text)


def configuration(params: dict[str, list[str]]) -> str:
    """The request less paging and DryRun, order-free: what counts as one configuration here."""
    keep = {
        k: v for k, v in params.items() if k not in ("Action", "Version", "DryRun", "MaxResults", "NextToken")
    }
    canon = {
        "types": sorted(numbered(keep, "InstanceType")),
        "regions": sorted(numbered(keep, "RegionName")),
        "capacity": one(keep, "TargetCapacity"),
        "unit": one(keep, "TargetCapacityUnitType") or "units",
        "single_az": one(keep, "SingleAvailabilityZone") or "false",
    }
    return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:16]


def encode_token(config: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"sps:{config}:{offset}".encode()).decode()


def decode_token(token: str | None, config: str) -> int:
    """A token is valid only for the configuration that issued it."""
    if token is None:
        return 0
    try:
        kind, issued_for, offset = base64.urlsafe_b64decode(token.encode()).decode().split(":")
        if kind == "sps" and issued_for == config:
            return int(offset)
    except ValueError:
        pass
    raise ApiError(400, "InvalidPaginationToken", f"The specified pagination token is not valid: {token}")
