"""AWS spot placement scores (EC2 GetSpotPlacementScores) into $TRAINFLEET_HOME/placement-scores.json.

What the API gives (tests/fixtures/placement/PROVENANCE.md has the sources): for one configuration (instance
types, target capacity, unit) a score 1-10 per Region, or per AZ id with SingleAvailabilityZone=true, for the
top 10 Regions or AZs only, at most 10 RegionNames per request. New configurations are limited per rolling
24 h (error MaxConfigLimitExceeded; AWS's own sample says "a few (10)"); a configuration already used can be
asked again.

So the requests are: one per (instance type, node count, regional or single-AZ), all of the type's catalog
regions in the one request (or every region, when the type is offered in more than 10), and at most
`max_configurations` of them per run. A limit error keeps what was fetched and stops sending new ones.

AWS documents that fewer than three instance types score low; a training fleet is one instance type, so each
score here is for exactly that request and is kept as AWS gave it (the note in the file says so).

File format (version 1), written atomically (infra/atomic.py) and merged with the previous file:
    {"format": 1, "source": "aws-get-spot-placement-scores", "what": ..., "fetched_at": <last run, UTC>,
     "endpoint_region": <region the API was called in>,
     "scores": [{"cloud": "aws", "region": "us-east-1", "zone": "use1-az4" | "", "instance_type": ...,
                 "target_capacity": 8, "score": 7, "single_az": true, "fetched_at": ..., "endpoint_region": ...,
                 "source": ...}, ...]}
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from infra.atomic import move_aside
from infra.catalog.capacity import (
    FORMAT_VERSION,
    default_placement_scores,
    placement_scores_path,
    read_document,
    row_problem,
)
from infra.catalog.dated_file import now_text
from infra.catalog.model import NOT_DEEPSPEED
from infra.catalog.refresh.aws import aws_config, check_aws_credentials, describe_aws_error
from infra.errors import CatalogError, TrainfleetError, did_you_mean, shown

SOURCE = "aws-get-spot-placement-scores"
WHAT = (
    "AWS spot placement score 1-10 per region (all zones) or per AZ id (single zone), for a spot request of "
    "target_capacity instances of one instance type, capacity-optimized; a recommendation, not a guarantee. "
    "AWS notes that requests naming fewer than three instance types score low."
)
DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64)
MAX_NODES = 2_000_000_000  # SpotPlacementScoresTargetCapacity max (botocore service model)
MAX_REGIONS = 10  # RegionNames max per request (service model)
DEFAULT_MAX_CONFIGURATIONS = 10  # "a few (10)": AWS's spot placement score tracker sample (PROVENANCE.md)
DEFAULT_ENDPOINT_REGION = "us-east-1"
LIMIT_ERROR = "MaxConfigLimitExceeded"
# Errors about one request's own parameters: that request fails, the others still go.
REQUEST_ERRORS = {
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidParameter",
    "InvalidInstanceType",
}


@dataclass(frozen=True)
class Request:
    """One configuration: one instance type, one node count, regional or single-AZ scores."""

    instance_type: str
    target_capacity: int
    single_az: bool
    regions: tuple[str, ...]  # () = no RegionNames: every region, top 10 returned

    def label(self) -> str:
        scope = "per AZ" if self.single_az else "per region"
        return f"{self.instance_type} x{self.target_capacity} {scope}"

    def covers(self, row: dict) -> bool:
        """Whether a stored row is an earlier answer to this same question (and so is replaced by this one)."""
        return (
            row.get("cloud") == "aws"
            and row.get("instance_type") == self.instance_type
            and row.get("target_capacity") == self.target_capacity
            and row.get("single_az") == self.single_az
            and (not self.regions or row.get("region") in self.regions)
        )


@dataclass
class RequestResult:
    request: Request
    rows: int = 0
    error: str = ""


@dataclass
class PlacementReport:
    path: Path
    fetched_at: str
    endpoint_region: str
    results: list[RequestResult] = field(default_factory=list)
    not_sent: list[str] = field(default_factory=list)  # one line each: what was not fetched, and why
    file_rows: int = 0
    seconds: float = 0.0

    @property
    def rows_written(self) -> int:
        return sum(r.rows for r in self.results)

    @property
    def failed(self) -> list[RequestResult]:
        return [r for r in self.results if r.error]

    @property
    def limited(self) -> bool:
        return any(LIMIT_ERROR in r.error for r in self.results)

    def to_json(self) -> dict:
        return {
            "file": str(self.path),
            "source": SOURCE,
            "fetched_at": self.fetched_at,
            "endpoint_region": self.endpoint_region,
            "rows_written": self.rows_written,
            "file_rows": self.file_rows,
            "requests": [
                {
                    "instance_type": r.request.instance_type,
                    "target_capacity": r.request.target_capacity,
                    "single_az": r.request.single_az,
                    "regions": list(r.request.regions),
                    "rows": r.rows,
                    "error": r.error or None,
                }
                for r in self.results
            ],
            "not_sent": self.not_sent,
            "seconds": round(self.seconds, 3),
        }


# -- inputs -----------------------------------------------------------------------------------------
def parse_nodes(items: Iterable[str]) -> list[int]:
    """'1,8,64' items -> [1, 8, 64]; anything not a whole number in 1..2,000,000,000 is a one-line error."""
    nodes: list[int] = []
    for item in items:
        text = item.strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_NODES:
            raise TrainfleetError(
                f"--nodes {shown(item)} is not a node count; give whole numbers from 1 to {MAX_NODES:,} "
                f"(GetSpotPlacementScores' TargetCapacity range), e.g. --nodes 1,8,64"
            )
        nodes.append(int(text))
    return sorted(set(nodes))


def plan_requests(
    catalog,
    instance_types: list[str] | None = None,
    nodes: Iterable[int] = DEFAULT_NODES,
    regions: list[str] | None = None,
) -> list[Request]:
    """Every request the refresh would send, most useful first (the largest training types first; per type, small
    node counts first)."""
    offers = catalog.offers(cloud="aws")
    known_types = sorted({o.instance_type for o in offers})
    known_regions = sorted({o.region for o in offers})
    for t in instance_types or []:
        if t not in known_types:
            raise TrainfleetError(
                f"--instance-types: {t!r} is not an AWS instance type in the catalog{did_you_mean(t, known_types)}"
            )
    for r in regions or []:
        if r not in known_regions:
            raise TrainfleetError(
                f"--regions: {r!r} is not an AWS region in the catalog{did_you_mean(r, known_regions)}"
            )
    if regions and len(regions) > MAX_REGIONS:
        raise TrainfleetError(
            f"--regions names {len(regions)} regions; GetSpotPlacementScores takes at most {MAX_REGIONS} per "
            "request: name fewer, or leave --regions out for each type's catalog regions"
        )
    plan: list[Request] = []
    for t in instance_types or training_types_first(offers):
        offered = sorted({o.region for o in offers if o.instance_type == t})
        wanted = [r for r in offered if not regions or r in regions]
        if not wanted:
            continue
        # RegionNames takes at most 10: over that, ask every region (the top 10 come back)
        scope = tuple(wanted) if len(wanted) <= MAX_REGIONS else ()
        for n in sorted(set(nodes)):
            plan.extend(Request(t, n, single_az, scope) for single_az in (False, True))
    return plan


def training_types_first(offers) -> list[str]:
    """The catalog's types with the largest training nodes first (most accelerator memory per node, then the
    dearest on demand): their spot capacity is the scarcest and the one a multi-node plan most needs measured,
    and a run sends only --max-configurations requests."""
    rank: dict[str, tuple] = {}
    for o in offers:
        if o.accelerator in NOT_DEEPSPEED:
            continue  # no plan runs on it
        key = (-o.accelerators_per_node * o.accelerator_memory_gib,
               -(o.on_demand_usd_per_hour or o.spot_usd_per_hour or 0.0), o.instance_type)  # fmt: skip
        rank[o.instance_type] = min(rank.get(o.instance_type, key), key)
    return sorted(rank, key=rank.__getitem__)


# -- the refresh ------------------------------------------------------------------------------------
def refresh_placement_scores(
    path: Path | None = None,
    *,
    instance_types: list[str] | None = None,
    nodes: Iterable[int] = DEFAULT_NODES,
    regions: list[str] | None = None,
    max_configurations: int = DEFAULT_MAX_CONFIGURATIONS,
    on_start: Callable[[int], None] | None = None,
    on_request: Callable[[RequestResult], None] | None = None,
) -> PlacementReport:
    from infra.catalog import default_catalog

    started = time.monotonic()
    path = Path(path) if path else placement_scores_path()
    if path.is_dir():
        raise TrainfleetError(f"{path} is a directory; the placement scores file must be a file")
    plan = plan_requests(default_catalog(), instance_types, nodes, regions)
    if not plan:
        raise TrainfleetError("no catalog offers match --instance-types and --regions; nothing to ask AWS")

    session = _session()
    check_aws_credentials(session)  # before any network call: one line, exit 2
    endpoint_region = session.region_name or DEFAULT_ENDPOINT_REGION
    report = PlacementReport(path, now_text(), endpoint_region)
    previous, moved = _previous_rows(path)
    if moved:
        report.not_sent.append(f"the previous file was corrupt and was moved to {moved}")

    sending, over_budget = plan[:max_configurations], plan[max_configurations:]
    if over_budget:
        report.not_sent.append(
            f"{len(over_budget)} of {len(plan)} requests not sent: over this run's budget of {max_configurations} "
            "new configurations (AWS limits new spot placement configurations per 24 h); narrow with "
            "--instance-types/--nodes, or raise --max-configurations"
        )
    if on_start:
        on_start(len(sending))
    client = session.client("ec2", region_name=endpoint_region, config=aws_config())
    fresh: list[dict] = []
    answered: list[Request] = []
    for i, request in enumerate(sending):
        result = RequestResult(request)
        try:
            rows = fetch(client, request, report.fetched_at, endpoint_region)
        except PlacementError as exc:
            result.error = str(exc)
            report.results.append(result)
            if on_request:
                on_request(result)
            if exc.stops:  # the limit, credentials, the endpoint: the rest would fail the same way
                rest = sending[i + 1 :]
                if rest:
                    why = (
                        "AWS allows only a few new spot placement configurations per rolling 24 h; run again "
                        "after 24 h (configurations already asked can be asked again) or narrow with "
                        "--instance-types/--nodes"
                        if exc.code == LIMIT_ERROR
                        else "stopped after the error above"
                    )
                    report.not_sent.append(
                        f"{len(rest)} more requests not sent ({_summary(rest)}): {exc.code or 'error'}: {why}"
                    )
                break
            continue
        result.rows = len(rows)
        fresh.extend(rows)
        answered.append(request)
        report.results.append(result)
        if on_request:
            on_request(result)

    merged = merge(previous, fresh, answered)
    if answered:
        write_scores(path, merged, report.fetched_at, endpoint_region)
        default_placement_scores.cache_clear()  # this process now reads the new file
    report.file_rows = len(merged) if answered else len(previous)
    report.seconds = time.monotonic() - started
    return report


class PlacementError(Exception):
    def __init__(self, message: str, code: str = "", stops: bool = False):
        super().__init__(message)
        self.code, self.stops = code, stops


def fetch(client, request: Request, fetched_at: str, endpoint_region: str) -> list[dict]:
    """Every page of one request's scores, as file rows; a bad row from the API is dropped, not stored."""
    from botocore.exceptions import BotoCoreError, ClientError

    params: dict = {
        "InstanceTypes": [request.instance_type],
        "TargetCapacity": request.target_capacity,
        "TargetCapacityUnitType": "units",  # instances: one node is one instance
        "SingleAvailabilityZone": request.single_az,
    }
    if request.regions:
        params["RegionNames"] = list(request.regions)
    rows: list[dict] = []
    try:
        for page in client.get_paginator("get_spot_placement_scores").paginate(**params):
            for item in page.get("SpotPlacementScores", []):
                row = {
                    "cloud": "aws",
                    "region": item.get("Region", ""),
                    "zone": item.get("AvailabilityZoneId", "") if request.single_az else "",
                    "instance_type": request.instance_type,
                    "target_capacity": request.target_capacity,
                    "score": item.get("Score"),
                    "single_az": request.single_az,
                    "fetched_at": fetched_at,
                    "endpoint_region": endpoint_region,
                    "source": SOURCE,
                }
                if not row_problem(row):
                    rows.append(row)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = describe_aws_error(f"GetSpotPlacementScores {request.label()}", exc)
        raise PlacementError(message, code, stops=code not in REQUEST_ERRORS) from None
    except BotoCoreError as exc:
        message = describe_aws_error(f"GetSpotPlacementScores {request.label()}", exc)
        raise PlacementError(message, stops=True) from None
    return rows


def merge(previous: list[dict], fresh: list[dict], answered: list[Request]) -> list[dict]:
    """An answered request replaces every earlier row it covers (a zone that left the top 10 must not keep its
    old score); other rows stay; fresh rows replace rows with the same key."""
    kept = [row for row in previous if not any(req.covers(row) for req in answered)]
    by_key = {_key(r): r for r in kept}
    by_key.update({_key(r): r for r in fresh})
    return sorted(by_key.values(), key=_key)


def write_scores(path: Path, rows: list[dict], fetched_at: str, endpoint_region: str) -> None:
    from infra.atomic import write_file

    doc = {
        "format": FORMAT_VERSION,
        "source": SOURCE,
        "what": WHAT,
        "doc": "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_GetSpotPlacementScores.html",
        "fetched_at": fetched_at,
        "endpoint_region": endpoint_region,
        "scores": rows,
    }
    write_file(path, json.dumps(doc, indent=1) + "\n", what="placement scores file", make_parents=True)


# -- helpers ----------------------------------------------------------------------------------------
def _session():
    import boto3

    return boto3.Session()


def _key(row: dict) -> tuple:
    return (
        row["cloud"],
        row["instance_type"],
        row["target_capacity"],
        row["single_az"],
        row["region"],
        row["zone"],
    )


def _summary(requests: list[Request]) -> str:
    types = sorted({r.instance_type for r in requests})
    shown_types = ", ".join(types[:3]) + (f" and {len(types) - 3} more types" if len(types) > 3 else "")
    return f"{shown_types}; nodes {','.join(str(n) for n in sorted({r.target_capacity for r in requests}))}"


def _previous_rows(path: Path) -> tuple[list[dict], Path | None]:
    """The stored rows; a corrupt file is moved aside (never lost) so this refresh can replace it."""
    if not path.exists():
        return [], None
    try:
        return list(read_document(path)["scores"]), None
    except CatalogError:
        return [], move_aside(path, "placement scores file", "delete it and run again")
