"""The user-level catalog overlay: refreshed prices that replace the embedded snapshot's rows.

One CSV (the offers columns plus `as_of`) at ~/.config/trainfleet/catalog-overlay.csv, or under
$TRAINFLEET_HOME. Every write goes to a temp file in the same directory, is fsynced, then renamed
over the old file with os.replace, so a crash or kill -9 mid-refresh leaves the previous overlay.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from infra.catalog.loader import read_offers
from infra.catalog.model import OFFER_COLUMNS, Offer
from infra.catalog.offer_rules import offer_row, row_problem
from infra.errors import CatalogError

OVERLAY_NAME = "catalog-overlay.csv"
HEADER = [*OFFER_COLUMNS, "as_of"]

# What each refresh source is; `catalog show` and `catalog status` print these beside the rows.
REFRESH_SOURCES = {
    "aws-price-list+spot-history": {
        "what": "AWS on-demand USD/hour (Price List API, Linux, shared tenancy, no pre-installed software) "
        "and the latest spot price per AZ from EC2 spot price history",
        "origin": "trainfleet catalog refresh --cloud aws",
    },
    "azure-retail-prices": {
        "what": "Azure pay-as-you-go and spot USD/hour per region (Retail Prices API, Linux meters)",
        "origin": "trainfleet catalog refresh --cloud azure",
    },
    "aws-get-spot-placement-scores": {
        "what": "AWS spot placement score 1-10 per region or AZ id for N instances of one type (EC2 "
        "GetSpotPlacementScores), in $TRAINFLEET_HOME/placement-scores.json; a recommendation, not a guarantee",
        "origin": "trainfleet catalog refresh --cloud aws --placement-scores",
    },
    "gcp-billing-catalog": {
        "what": "GCP on-demand and spot USD/hour per region: host (vCPU + RAM SKUs) + GPU SKUs, "
        "Cloud Billing Catalog API",
        "origin": "trainfleet catalog refresh --cloud gcp",
    },
}
_TMP_PREFIX = f".{OVERLAY_NAME}."


def trainfleet_home() -> Path:
    """$TRAINFLEET_HOME, else ~/.config/trainfleet."""
    home = os.environ.get("TRAINFLEET_HOME")
    return Path(home).expanduser() if home else Path.home() / ".config" / "trainfleet"


def overlay_path(override: Path | str | None = None) -> Path:
    return Path(override).expanduser() if override else trainfleet_home() / OVERLAY_NAME


def OfferKey(o: Offer) -> tuple[str, str, str, str]:  # noqa: N802 - reads like a type
    return (o.cloud, o.region, o.zone, o.instance_type)


def read_overlay(path: Path) -> list[Offer]:
    """The overlay's offers; [] when there is none. A corrupt file raises CatalogError."""
    if not path.exists():
        return []
    return read_offers(path)


def render(offers: Iterable[Offer]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    for o in sorted(offers, key=OfferKey):
        row = offer_row(o)  # field order: OFFER_COLUMNS then as_of
        writer.writerow(["" if row[c] is None else _fmt(row[c]) for c in HEADER])
    return buf.getvalue()


def _fmt(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)  # repr: shortest exact round-trip


def write_overlay(path: Path, offers: Iterable[Offer]) -> None:
    """Atomically replace the overlay (infra/atomic.py: temp file in the same directory, fsync, os.replace,
    fsync dir); a failure leaves the previous overlay and raises a one-line WriteError (an OSError too). A row the
    loader would refuse is never written: CatalogError naming it, and the previous overlay stays."""
    from infra.atomic import write_file

    check_overlay_path(path)
    offers = list(offers)
    for o in offers:
        bad = offer_problem(o)
        if bad:
            raise CatalogError(f"catalog overlay {path}: not written: {bad}")
    write_file(path, render(offers), what="the catalog overlay", make_parents=True)


def offer_problem(o: Offer) -> str | None:
    """What is wrong with a row about to be written, in one phrase naming it, or None (offer_rules)."""
    bad = row_problem(offer_row(o))
    if bad is None:
        return None
    column, problem = bad
    where = " ".join(x for x in (o.region, o.zone) if x)
    return f"{o.cloud} {o.instance_type} in {where}: {column} = {getattr(o, column)!r} {problem}"


def check_overlay_path(path: Path) -> None:
    """The overlay must be a regular file (or not exist yet): a folder, a device or a FIFO is refused with one
    line, before any network call, and is never moved aside or replaced."""
    try:
        st = path.stat()  # follows a symlink: a link to a regular file is fine
    except OSError:
        return  # not there yet (or a dangling link, or a bad folder): the write creates it or says why not
    if stat.S_ISDIR(st.st_mode):
        raise CatalogError(
            f"--overlay {path} is a directory; name a CSV file, e.g. --overlay {path / OVERLAY_NAME}"
        )
    if not stat.S_ISREG(st.st_mode):
        raise CatalogError(f"--overlay {path} is not a regular file; name a CSV file, e.g. {OVERLAY_NAME}")


def merge(previous: Iterable[Offer], fresh: Iterable[Offer]) -> list[Offer]:
    """Fresh rows replace previous rows with the same (cloud, region, zone, type); the rest stay."""
    merged = {OfferKey(o): o for o in previous}
    merged.update({OfferKey(o): o for o in fresh})
    return list(merged.values())


def remove_stale_temp_files(path: Path, older_than_s: float = 3600) -> int:
    """Temp files a killed refresh left behind (never read by the loader); removed when old."""
    removed = 0
    now = time.time()
    prefixes = {_TMP_PREFIX, f".{path.name}."}  # infra/atomic.py names temp files .<name>.XXXX.tmp
    for tmp in (t for prefix in prefixes for t in path.parent.glob(f"{glob.escape(prefix)}*.tmp")):
        try:
            if now - tmp.stat().st_mtime > older_than_s:
                tmp.unlink()
                removed += 1
        except OSError:
            pass
    return removed
