"""AWS Spot Instance Advisor interruption buckets, refreshed from the public feed the advisor page reads.

GET https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json (public, no credentials) answers
{"ranges": [{"index": 0, "label": "<5%", ...}, ...], "spot_advisor": {region: {"Linux": {type: {"s": savings %,
"r": range index}}}}, "instance_types": {...}}: the share of a type's spot instances interrupted in the trailing
month, as a range. The feed carries no date, so the time it was fetched is its date. The buckets of the catalog's
AWS types go to $TRAINFLEET_HOME/spot-advisor.json (infra/catalog/advisor.py reads it). Override the URL with
TRAINFLEET_SPOT_ADVISOR_URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from infra.catalog.dated_file import write_dated
from infra.catalog.model import INTERRUPTION_BUCKETS
from infra.catalog.refresh.http import FetchError, request_json

ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"


def advisor_url() -> str:
    return os.environ.get("TRAINFLEET_SPOT_ADVISOR_URL") or ADVISOR_URL


def fetch_buckets(instance_types: Iterable[str], url: str | None = None) -> dict[tuple[str, str], int]:
    """The feed's Linux bucket per (region, type) for `instance_types`; FetchError (one line) when the feed cannot
    be read, is not the documented shape, or its ranges no longer mean what the catalog's buckets mean."""
    url = url or advisor_url()
    feed = request_json(url, what="AWS Spot Advisor feed")
    if not isinstance(feed, dict) or not isinstance(feed.get("spot_advisor"), dict):
        raise FetchError("AWS Spot Advisor feed: no spot_advisor object in the answer")
    labels = [r.get("label") for r in feed.get("ranges") or [] if isinstance(r, dict)]
    if labels != list(INTERRUPTION_BUCKETS.values()):
        raise FetchError(
            f"AWS Spot Advisor feed: its ranges are {labels}, not {list(INTERRUPTION_BUCKETS.values())}; the "
            "catalog's buckets would mean something else, so nothing was written"
        )
    wanted = set(instance_types)
    out = {}
    for region, by_os in feed["spot_advisor"].items():
        linux = by_os.get("Linux") if isinstance(by_os, dict) else None
        for itype, info in (linux or {}).items():
            if itype in wanted:
                bucket = info.get("r") if isinstance(info, dict) else None
                if type(bucket) is not int or bucket not in INTERRUPTION_BUCKETS:  # bool is an int too
                    raise FetchError(
                        f"AWS Spot Advisor feed: {region} {itype} has bucket {bucket!r}, not 0-4"
                    )
                out[(region, itype)] = bucket
    return out


def write_refresh(
    path: Path, buckets: dict[tuple[str, str], int], source: str, fetched_at: str | None = None
) -> str:
    """Write the refreshed buckets atomically; the fetched_at written."""
    return write_dated(path, "spot advisor refresh", source, fetched_at,
                       buckets=[[r, t, b] for (r, t), b in sorted(buckets.items())])  # fmt: skip
