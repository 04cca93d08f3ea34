"""What a checkpoint bucket really holds and does in a month: current checkpoints, the noncurrent versions
its versioning keeps after each prune, and the write requests of every checkpoint upload.

Every bucket trainfleet declares is versioned. Each checkpoint beyond `keep_last` is pruned, which in a
versioned bucket only makes it a noncurrent version, billed like any object until the lifecycle rule the
stack declares deletes it (S3 NoncurrentVersionExpiration, GCS daysSinceNoncurrentTime, Azure's version
delete after N days). So at a steady state the bucket holds the checkpoints pruned in the last N days on
top of the current ones; with versioning and no such rule it keeps every checkpoint the job writes.

The per-cloud bucket functions read the retention their stack declares (`Retention`) and hand it here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cli.preview.model import CostComponent
from cli.preview.pricing.base import PricingContext, storage_component

# The agent uploads in 64 MiB parts (templates/agent/trainfleet_agent/stores.py, TRAINFLEET_PART_SIZE): one
# write request per part on every cloud (S3 UploadPart, GCS resumable chunk, Azure Put Block).
PART_BYTES = 64 << 20
# Lifecycle rules run about once a day: S3 rounds an expiry to the next midnight UTC and removes objects
# asynchronously after it, GCS and Azure run rules once a day, "up to 24 hours" late. So a noncurrent
# version outlives its N days by up to a day: priced at N + 1.
LIFECYCLE_LAG_DAYS = 1.0


@dataclass(frozen=True)
class Retention:
    """How the bucket keeps a pruned checkpoint: versioned or not, and for how many days."""

    versioned: bool
    noncurrent_days: float | None  # None: versioned with no rule deleting noncurrent versions
    where: str  # what declared it, shown in the component's note


def declared_retention(
    rules: list[tuple[float, str]], no_rule: str, soft_delete_days: float = 0.0
) -> Retention:
    """A versioned bucket's retention from its expiry rules ((days, where) each): the shortest rule wins, plus
    any soft-delete days that follow it and the daily rule run's lag; no rule keeps every version."""
    if not rules:
        return Retention(True, None, no_rule)
    days, where = min(rules)
    soft = f", +{soft_delete_days:g} soft delete" if soft_delete_days else ""
    return Retention(
        True, days + soft_delete_days + LIFECYCLE_LAG_DAYS,
        f"{where}: {days:g} days{soft}, +{LIFECYCLE_LAG_DAYS:g} for the daily rule run",
    )  # fmt: skip


def checkpoint_components(
    ctx: PricingContext,
    *,
    retention: Retention,
    storage_rate: str,
    write_rate: str,
    region: str | None,
    label: str,
) -> list[CostComponent]:
    """Current checkpoints, noncurrent versions and upload requests, each its own line."""
    size = ctx.use("checkpoint_size_gb")
    per_month = ctx.use("checkpoints_per_month")
    comps = [
        storage_component(ctx, f"{label} storage, current checkpoints", ctx.use("checkpoint_gb"),
                          storage_rate, region, usage_key="checkpoint_gb", gb=True),
    ]  # fmt: skip
    if retention.versioned:
        kept, why = noncurrent_checkpoints(ctx, retention)
        c = storage_component(ctx, f"{label} storage, noncurrent versions", size * kept, storage_rate, region,
                              gb=True, usage_keys=("checkpoint_size_gb", "checkpoints_per_month"))  # fmt: skip
        c.note = "; ".join(n for n in (why, c.note) if n)
        comps.append(c)
    parts = math.ceil(size * 1e9 / PART_BYTES) if size > 0 else 0
    comps.append(write_requests(ctx, label, per_month * parts, write_rate, region,
                                f"{per_month:,.0f} checkpoints x {parts:,} parts of 64 MiB"))  # fmt: skip
    return comps


def noncurrent_checkpoints(ctx: PricingContext, retention: Retention) -> tuple[float, str]:
    """How many pruned checkpoints the bucket holds at a steady state, and the sentence that says why."""
    per_month = ctx.use("checkpoints_per_month")
    written_by_job = per_month * ctx.job_hours / ctx.hours_per_month  # hours_per_month > 0 (usage schema)
    if retention.noncurrent_days is None:
        return written_by_job, (
            f"versioned with no noncurrent expiration ({retention.where}): every pruned checkpoint is kept, "
            f"{written_by_job:,.0f} over the planned job"
        )
    in_window = per_month * retention.noncurrent_days / (730.0 / 24.0)  # checkpoints pruned in N days
    kept = min(in_window, written_by_job)
    return kept, (
        f"{retention.noncurrent_days:g} days of pruned checkpoints kept ({retention.where}): {kept:,.1f} "
        f"checkpoints at {per_month:,.0f} a month"
    )


def write_requests(
    ctx: PricingContext, label: str, requests: float, rate_id: str, region: str | None, how: str
) -> CostComponent:
    from cli.preview.pricing.rates import AS_OF_YEAR, rate, region_note

    r = rate(rate_id)  # priced per 1,000 (or 10,000) requests
    per = r.per_requests
    return CostComponent(
        as_of=AS_OF_YEAR,
        name=f"{label} write requests",
        unit=r.unit,
        quantity=requests / per,
        unit_price=r.usd,
        job_quantity=requests
        / per
        * ctx.job_hours
        / ctx.hours_per_month,  # the job's share of a month's uploads
        source=f"rate:{rate_id}",
        note="; ".join(
            n
            for n in (how + " (checkpoints_per_month, checkpoint_size_gb)", region_note(rate_id, region))
            if n
        ),
        usage_keys=("checkpoint_size_gb", "checkpoints_per_month"),
    )
