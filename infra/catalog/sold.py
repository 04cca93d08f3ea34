"""What the clouds really sell on demand: a catalog price for a purchase option nobody can buy is no offer.

GCP creates A4X, A4 and A3 Ultra instances only with the reservation-bound provisioning model (capacity from
a future reservation in calendar mode or in AI Hypercomputer), flex-start or Spot; the standard (on-demand)
provisioning model does not exist for them, though price lists (and so the SkyPilot catalog) carry an
on-demand rate:
  - https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms ("The reservation-bound
    provisioning model lets you create A4X, A4, or A3 Ultra VMs by using reserved capacity"), read 2026-11-26
  - dstack issue #3162 (https://github.com/dstackai/dstack/issues/3162, a maintainer): "Some GCP instance
    types (A4X, A4, A3 Ultra) are not available on demand, but available via reservations"
The loader drops the on-demand price of these types (never 0: unknown), keeps their spot price, and says
why in the offer's note. Reservations and flex-start are not priced by trainfleet.
"""

from __future__ import annotations

# (cloud, instance type prefix): no on-demand (standard) purchase.
RESERVATION_ONLY: tuple[tuple[str, str], ...] = (
    ("gcp", "a4x-"),
    ("gcp", "a4-"),
    ("gcp", "a3-ultragpu-"),
)
NOT_SOLD_NOTE = "on-demand not sold: reservation-bound, flex-start or spot only (infra/catalog/sold.py)"


def on_demand_sold(cloud: str, instance_type: str) -> bool:
    return not any(cloud == c and instance_type.startswith(prefix) for c, prefix in RESERVATION_ONLY)
