"""A spot row against the same type's other zones in its region: the median the planner and `catalog check` use."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from infra.catalog.model import Offer

OUTLIER_RATIO = 2.0  # a spot row under 1/2 of its neighbours' median (cli/planner/outliers.py prices it at the median)


def neighbours_median(offer: Offer, offers: Iterable[Offer]) -> tuple[float, int] | None:
    """(median spot USD/h, zones) of the same cloud, region and type in other zones; None without any."""
    others = [o.spot_usd_per_hour for o in offers
              if (o.cloud, o.region, o.instance_type) == (offer.cloud, offer.region, offer.instance_type)
              and o.zone != offer.zone and o.spot_usd_per_hour]  # fmt: skip
    return (statistics.median(others), len(others)) if others else None
