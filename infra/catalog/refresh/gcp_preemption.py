"""GCP Spot preemption history from Compute Engine's advice.capacityHistory, per catalog machine type and zone.

POST {compute}/compute/v1/projects/{project}/regions/{region}/advice/capacityHistory with
{"instanceProperties": {"machineType", "scheduling": {"provisioningModel": "SPOT"}}, "locationPolicy":
{"location": "zones/ZONE"}, "types": ["PREEMPTION"]} answers {"location", "machineType", "preemptionHistory":
[{"interval": {"startTime", "endTime"}, "preemptionRate"}]} (google-cloud-compute 1.57.0's compute_v1 types and
REST transport; tests/fixtures/gcp_preemption/PROVENANCE.md). One request per (zone, machine type), `parallel` at
once; throttling (429) is retried by http.py.

A plain POST through http.py: the google-cloud-compute the project pins (1.48) has no advice.capacityHistory, and
1.49+ needs protobuf >= 6.33.5, which pulumi-policy refuses in the same environment. The token is
GOOGLE_OAUTH_ACCESS_TOKEN (`gcloud auth print-access-token`), else Application Default Credentials; the project is
GOOGLE_CLOUD_PROJECT, else the credentials'. Override the endpoint with TRAINFLEET_GCP_COMPUTE_URL.

A refusal that no retry mends (no credentials, the Compute Engine API off in a fresh project, a missing
permission) stops the refresh with nothing written; a pair the API will not answer (400/404: a machine type a zone
does not offer) is left out and counted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from infra.catalog.dated_file import write_dated
from infra.catalog.offer_rules import parse_time
from infra.catalog.refresh.http import FetchError, request_json

COMPUTE = "https://compute.googleapis.com"
READ_SCOPE = "https://www.googleapis.com/auth/compute.readonly"
WHAT = "GCP advice.capacityHistory"


@dataclass
class HistoryResult:
    records: list[list] = field(default_factory=list)  # [zone, type, start, end, rate]
    skipped: list[str] = field(default_factory=list)  # one line per pair left out


def compute_url() -> str:
    return (os.environ.get("TRAINFLEET_GCP_COMPUTE_URL") or COMPUTE).rstrip("/")


def credentials() -> tuple[str, str]:
    """(token, project); FetchError (one line) when either is missing."""
    token = os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN", "").strip()
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not token:
        try:
            import google.auth
            import google.auth.transport.requests
            from google.auth.exceptions import DefaultCredentialsError, RefreshError
        except ImportError:
            raise FetchError("no GCP token: set GOOGLE_OAUTH_ACCESS_TOKEN to `gcloud auth print-access-token`, or "
                             "install the GCP SDK (pip install 'trainfleet[live]')") from None  # fmt: skip
        try:
            creds, found = google.auth.default(scopes=[READ_SCOPE])
            creds.refresh(google.auth.transport.requests.Request())
        except (DefaultCredentialsError, RefreshError) as exc:
            raise FetchError(f"no GCP credentials (run `gcloud auth application-default login`): {exc}") from None
        token, project = creds.token, project or found or ""
    if not project:
        raise FetchError("no GCP project: set GOOGLE_CLOUD_PROJECT to the project to ask about")
    return token, project


def request_body(zone: str, machine_type: str) -> dict:
    return {"instanceProperties": {"machineType": machine_type, "scheduling": {"provisioningModel": "SPOT"}},
            "locationPolicy": {"location": f"zones/{zone}"}, "types": ["PREEMPTION"]}  # fmt: skip


def _fatal(exc: FetchError, project: str) -> FetchError | None:
    """The refusal as a one-line error that stops the refresh, or None for one a single pair earned."""
    text = str(exc)
    if exc.status == 401:
        return FetchError(f"{text}; the token was refused: run `gcloud auth application-default login`", 401)
    if exc.status == 403 and any(s in text for s in ("SERVICE_DISABLED", "has not been used", "is disabled")):
        return FetchError(f"the Compute Engine API is disabled in project {project} (`gcloud services enable "
                          f"compute.googleapis.com --project={project}`): {text}", 403)  # fmt: skip
    if exc.status == 403:
        return FetchError(f"{text}; the caller lacks a permission to read Compute advice in project {project} "
                          "(roles/compute.viewer has the compute.* read permissions)", 403)  # fmt: skip
    if exc.status is None:  # unreachable: every pair would fail the same way
        return exc
    return None


def fetch_pair(zone: str, machine_type: str, token: str, project: str) -> list[list]:
    region = zone.rsplit("-", 1)[0]
    url = f"{compute_url()}/compute/v1/projects/{project}/regions/{region}/advice/capacityHistory"
    answer = request_json(url, method="POST", body=request_body(zone, machine_type),
                          headers={"Authorization": f"Bearer {token}"}, what=f"{WHAT} {machine_type} {zone}")  # fmt: skip
    if not isinstance(answer, dict):
        raise FetchError(f"{WHAT} {machine_type} {zone}: the answer is not an object", 0)
    out = []
    for record in answer.get("preemptionHistory") or []:
        if isinstance(record, dict) and "preemptionRate" not in record:
            continue  # an interval with no rate (the field is optional): nothing to show for it
        interval = record.get("interval") if isinstance(record, dict) else None
        rate = record.get("preemptionRate") if isinstance(record, dict) else None
        start, end = (interval.get("startTime"), interval.get("endTime")) if isinstance(interval, dict) else (None, None)
        if (isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1
                or parse_time(str(start)) is None or parse_time(str(end)) is None):  # fmt: skip
            raise FetchError(f"{WHAT} {machine_type} {zone}: a record out of shape ({record!r:.120})", 0)
        out.append([zone, machine_type, str(start), str(end), float(rate)])
    return out


def fetch_history(
    pairs: Iterable[tuple[str, str]], parallel: int = 4, token_project: tuple[str, str] | None = None
) -> tuple[HistoryResult, str]:
    """Every (zone, machine type)'s records, and the project asked; FetchError when a refusal stops the refresh.
    The first pair goes alone: a fresh project's refusal costs one request, not hundreds."""
    token, project = token_project or credentials()
    pairs = sorted(set(pairs))
    result = HistoryResult()

    def one(pair: tuple[str, str]) -> tuple[tuple[str, str], list[list] | FetchError]:
        try:
            return pair, fetch_pair(*pair, token, project)
        except FetchError as exc:
            return pair, exc

    def take(pair: tuple[str, str], got: list[list] | FetchError) -> None:
        if isinstance(got, FetchError):
            fatal = _fatal(got, project)
            if fatal is not None:
                raise fatal
            result.skipped.append(str(got))
        else:
            result.records += got

    if pairs:
        take(*one(pairs[0]))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for pair, got in pool.map(one, pairs[1:]):
            take(pair, got)
    if pairs and not result.records and len(result.skipped) == len(pairs):
        raise FetchError(f"{WHAT}: no pair answered; the first refusal: {result.skipped[0]}")
    return result, project


def write_refresh(path: Path, result: HistoryResult, source: str, project: str, fetched_at: str | None = None) -> str:
    return write_dated(path, "gcp preemption history", source, fetched_at, project=project,
                       records=sorted(result.records))
