"""Drive a refresh region by region: fetch, merge into the overlay, write atomically after each region.

A region that fails (throttled, API down, malformed answer) is reported with its reason and leaves the
overlay as it was for that region; regions that succeeded are already written, so a crash or a later
failure never loses them and never leaves a half-written file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from infra.atomic import move_aside
from infra.catalog.loader import snapshot_offers
from infra.catalog.model import Offer
from infra.catalog.refresh.http import FetchError
from infra.catalog.refresh.overlay import (
    check_overlay_path,
    merge,
    offer_problem,
    read_overlay,
    remove_stale_temp_files,
    write_overlay,
)
from infra.errors import CatalogError, TrainfleetError, did_you_mean

CLOUDS = ("aws", "azure", "gcp")


class PriceSource(Protocol):
    """One cloud's price APIs."""

    cloud: str
    source: str

    def check_credentials(self) -> None: ...  # raise TrainfleetError naming the missing credential

    def prepare(self) -> None: ...  # cloud-wide fetches (GCP lists all SKUs once); FetchError fails all

    def fetch_region(self, region: str, known: list[Offer], as_of: str) -> list[Offer]: ...


@dataclass
class RegionResult:
    cloud: str
    region: str
    offers: int = 0
    error: str | None = None
    seconds: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class RefreshReport:
    cloud: str
    overlay: Path
    as_of: str
    regions: list[RegionResult] = field(default_factory=list)
    seconds: float = 0.0
    overlay_rows: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[RegionResult]:
        return [r for r in self.regions if not r.ok]

    def to_json(self) -> dict:
        return {
            "cloud": self.cloud,
            "overlay": str(self.overlay),
            "as_of": self.as_of,
            "seconds": round(self.seconds, 3),
            "overlay_rows": self.overlay_rows,
            "notes": self.notes,
            "regions": [
                {
                    "region": r.region,
                    "ok": r.ok,
                    "offers": r.offers,
                    "error": r.error,
                    "note": r.note,
                    "seconds": round(r.seconds, 3),
                }
                for r in self.regions
            ],
        }


def source_for(cloud: str) -> PriceSource:
    if cloud == "aws":
        from infra.catalog.refresh.aws import AwsPrices

        return AwsPrices()
    if cloud == "azure":
        from infra.catalog.refresh.azure import AzurePrices

        return AzurePrices()
    if cloud == "gcp":
        from infra.catalog.refresh.gcp import GcpPrices

        return GcpPrices()
    raise TrainfleetError(
        f"--cloud {cloud!r} is not a cloud{did_you_mean(cloud, list(CLOUDS))}; use one of aws, azure, gcp"
    )


def choose_regions(cloud: str, requested: list[str] | None, snapshot: Iterable[Offer]) -> list[str]:
    known = sorted({o.region for o in snapshot if o.cloud == cloud})
    if not requested:
        return known
    for region in requested:
        if region not in known:
            raise TrainfleetError(
                f"--regions: {region!r} is not a {cloud} region in the catalog{did_you_mean(region, known)}; "
                f"known: {', '.join(known)}"
            )
    return list(dict.fromkeys(requested))


def load_previous(overlay: Path, notes: list[str]) -> list[Offer]:
    """The overlay so far; a corrupt one is moved aside (and said so) so the refresh can replace it."""
    try:
        return read_overlay(overlay)
    except CatalogError:
        check_overlay_path(overlay)  # only ever a regular file is moved aside, never a folder
        aside = move_aside(overlay, "catalog overlay", "move or delete it, or use --overlay PATH")
        notes.append(f"previous overlay {overlay} was corrupt; moved it to {aside}")
        return []


def refresh(
    cloud: str,
    regions: list[str] | None,
    overlay: Path,
    *,
    on_start: Callable[[list[str]], None] = lambda regions: None,
    on_region: Callable[[RegionResult], None] = lambda result: None,
    parallel: int = 4,
    source: PriceSource | None = None,
) -> RefreshReport:
    """Refresh `cloud` prices for `regions` (default: every region the catalog knows) into `overlay`."""
    started = time.perf_counter()
    check_overlay_path(overlay)  # a folder or device as --overlay: one line, before any network call
    src = source or source_for(cloud)
    src.check_credentials()
    snapshot = snapshot_offers()
    chosen = choose_regions(cloud, regions, snapshot)
    as_of = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    report = RefreshReport(cloud, overlay, as_of)
    remove_stale_temp_files(overlay)
    try:
        previous = load_previous(overlay, report.notes)
    except OSError as exc:
        raise TrainfleetError(f"cannot read the catalog overlay {overlay} ({exc.strerror or exc})") from None
    # Hardware facts for every known instance type of this cloud: the snapshot, then earlier refreshes.
    known = [o for o in merge(snapshot, previous) if o.cloud == cloud]
    on_start(chosen)
    try:
        src.prepare()
    except FetchError as exc:
        for region in chosen:
            result = RegionResult(cloud, region, error=str(exc))
            report.regions.append(result)
            on_region(result)
        report.seconds = time.perf_counter() - started
        report.overlay_rows = len(previous)
        return report

    def one(region: str) -> tuple[RegionResult, list[Offer]]:
        t0 = time.perf_counter()
        try:
            rows = src.fetch_region(region, known, as_of)
        except FetchError as exc:
            return RegionResult(cloud, region, error=str(exc), seconds=time.perf_counter() - t0), []
        rows = [replace(o, source=src.source, as_of=as_of) for o in rows]
        bad = next((p for p in map(offer_problem, rows) if p), None)
        if bad:  # a price the API should never answer (nan, inf, 0, ...): nothing of this region is written
            return RegionResult(cloud, region, error=f"the API answered {bad}; nothing of {region} was written",
                                seconds=time.perf_counter() - t0), []  # fmt: skip
        note = "" if rows else "no prices for known instance types"
        return RegionResult(cloud, region, len(rows), seconds=time.perf_counter() - t0, note=note), rows

    current = previous
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(one, region) for region in chosen]
        for future in as_completed(futures):
            result, rows = future.result()
            if rows:  # merge and write now: regions done so far survive a crash later on
                current = merge(current, rows)
                try:
                    write_overlay(overlay, current)
                except OSError as exc:  # infra.atomic.WriteError: the previous overlay is untouched
                    from infra.atomic import describe

                    raise TrainfleetError(
                        f"cannot write the catalog overlay {overlay}: {describe(exc)} "
                        f"(or use --overlay PATH or set TRAINFLEET_HOME to a writable folder)"
                    ) from None
            report.regions.append(result)
            on_region(result)
    report.regions.sort(key=lambda r: chosen.index(r.region))
    report.overlay_rows = len(current)
    report.seconds = time.perf_counter() - started
    return report
