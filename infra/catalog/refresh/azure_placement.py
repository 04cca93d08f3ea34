"""Azure Spot Placement Scores into $TRAINFLEET_HOME/placement-scores.json, beside AWS's.

POST {ARM}/subscriptions/{subscription}/providers/Microsoft.Compute/locations/{location}/placementScores/spot/
generate?api-version=2025-06-05 with {"desiredLocations": up to 8 regions, "desiredSizes": [{"sku"}] up to 5,
"desiredCount": N, "availabilityZones": false} answers the same fields plus "placementScores": [{"sku", "region",
"availabilityZone", "score": High | Medium | Low | DataNotFoundOrStale | RestrictedSkuNotAvailable,
"isQuotaAvailable"}] (azure-rest-api-specs DiagnosticRP stable/2025-06-05 GenerateSpotPlacementScores example;
MicrosoftDocs spot-placement-score.md: tests/fixtures/azure_placement/PROVENANCE.md). The caller needs the
"Compute Recommendations Role" on the subscription. The catalog's Azure rows have no zones, so the scores asked
for are regional. How a level is read: infra/catalog/capacity.py AZURE_LEVEL_SCORE.

Token and endpoint as for the eviction rates (refresh/azure_eviction.py); the subscription is
AZURE_SUBSCRIPTION_ID. A request Azure refuses on its own (400) fails alone; a refusal of the caller (401, 403)
stops the refresh, and what earlier requests fetched is still written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.azure_arm import management_url
from infra.catalog.capacity import AZURE_LEVEL_SCORE, placement_scores_path, read_document
from infra.catalog.dated_file import now_text
from infra.catalog.refresh.azure_eviction import access_token
from infra.catalog.refresh.http import FetchError, request_json

API_VERSION = "2025-06-05"
MAX_LOCATIONS, MAX_SIZES = 8, 5  # "lists of up to eight regions and five VM sizes"
SOURCE = "azure-spot-placement-score"
WHAT = "Azure Spot Placement Score"


@dataclass
class AzurePlacementReport:
    fetched_at: str
    path: Path
    requests: int = 0
    rows: list[dict] = field(default_factory=list)
    levels: dict[str, int] = field(default_factory=dict)  # level -> how many answers had it
    failures: list[str] = field(default_factory=list)
    file_rows: int = 0

    def to_json(self) -> dict:
        return {"fetched_at": self.fetched_at, "path": str(self.path), "requests": self.requests,
                "rows_written": len(self.rows), "levels": self.levels, "failures": self.failures,
                "file_rows": self.file_rows}  # fmt: skip


def subscription() -> str:
    sub = os.environ.get("AZURE_SUBSCRIPTION_ID", "").strip()
    if not sub:
        raise FetchError("no Azure subscription: set AZURE_SUBSCRIPTION_ID (`az account show --query id -o tsv`)")
    return sub


def _chunks(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def plan_requests(regions_by_size: dict[str, set[str]], nodes: Iterable[int]) -> list[tuple[list[str], list[str], int]]:
    """(sizes, regions, count) per request: sizes that share regions together, 5 sizes and 8 regions at most."""
    by_regions: dict[tuple[str, ...], list[str]] = {}
    for size, regions in sorted(regions_by_size.items()):
        by_regions.setdefault(tuple(sorted(regions)), []).append(size)
    out = []
    for count in nodes:
        for regions, sizes in sorted(by_regions.items()):
            for size_chunk in _chunks(sizes, MAX_SIZES):
                for region_chunk in _chunks(list(regions), MAX_LOCATIONS):
                    out.append((size_chunk, region_chunk, count))
    return out


def fetch_request(sizes: list[str], regions: list[str], count: int, sub: str, token: str) -> list[dict]:
    url = (f"{management_url()}/subscriptions/{sub}/providers/Microsoft.Compute/locations/{regions[0]}/placementScores/"
           f"spot/generate?api-version={API_VERSION}")  # fmt: skip
    body = {"desiredLocations": regions, "desiredSizes": [{"sku": s} for s in sizes], "desiredCount": count,
            "availabilityZones": False}  # fmt: skip
    answer = request_json(url, method="POST", body=body, headers={"Authorization": f"Bearer {token}"},
                          what=f"{WHAT} {count} x {','.join(sizes)}")  # fmt: skip
    scores = answer.get("placementScores") if isinstance(answer, dict) else None
    if not isinstance(scores, list):
        raise FetchError(f"{WHAT}: no placementScores list in the answer", 0)
    return scores


def refresh_azure_placement(
    regions_by_size: dict[str, set[str]], nodes: Iterable[int], path: Path | None = None
) -> AzurePlacementReport:
    """Ask every request, keep the levels that read as a number or are Medium, and merge them into the file."""
    path = path or placement_scores_path()
    fetched_at = now_text()
    report = AzurePlacementReport(fetched_at, path)
    sub, token = subscription(), access_token()
    spelled = {s.lower(): s for s in regions_by_size}
    for sizes, regions, count in plan_requests(regions_by_size, nodes):
        report.requests += 1
        try:
            answers = fetch_request(sizes, regions, count, sub, token)
        except FetchError as exc:
            if exc.status in (401, 403):
                why = ("the caller needs the Compute Recommendations Role on subscription " + sub if exc.status == 403
                       else "the token was refused: run `az login`")  # fmt: skip
                report.failures.append(f"{exc}; {why}")
                break
            report.failures.append(str(exc))
            continue
        for a in answers:
            level, size = str(a.get("score", "")), spelled.get(str(a.get("sku", "")).lower())
            report.levels[level] = report.levels.get(level, 0) + 1
            if level in AZURE_LEVEL_SCORE and size is not None:
                report.rows.append({"cloud": "azure", "region": str(a.get("region", "")).lower(), "zone": "",
                                    "instance_type": size, "target_capacity": count, "score": AZURE_LEVEL_SCORE[level],
                                    "level": level, "quota_available": a.get("isQuotaAvailable"), "single_az": False,
                                    "fetched_at": fetched_at, "source": SOURCE})  # fmt: skip
    if report.rows:
        report.file_rows = _merge_write(path, report.rows, fetched_at)
    return report


def _merge_write(path: Path, fresh: list[dict], fetched_at: str) -> int:
    from infra.catalog.refresh.placement import write_scores

    def key(row: dict) -> tuple:
        return row["cloud"], row["region"], row["zone"], row["instance_type"], row["target_capacity"]

    previous = read_document(path)["scores"] if path.exists() else []
    replaced = {key(r) for r in fresh}
    rows = [r for r in previous if key(r) not in replaced] + fresh
    write_scores(path, rows, fetched_at, "azure")
    return len(rows)
