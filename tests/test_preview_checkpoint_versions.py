"""Checkpoint buckets are priced as versioned buckets: current checkpoints, the noncurrent versions each prune
leaves for the declared days, and the write requests of every upload (issue 17, item 3).

Worked by hand from S3 Standard $0.023/GB-month and $0.005 per 1,000 PUTs (https://aws.amazon.com/s3/pricing/),
GCS Standard $0.020/GB-month (https://cloud.google.com/storage/pricing) and the lifecycle semantics of
https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-expire-general-considerations.html (expiry
rounded to the next midnight UTC, then removed asynchronously: priced as one more day)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cli.preview.engine import estimate_text
from cli.preview.model import Resource, UsageValue
from cli.preview.pricing import PricingContext, price_resource
from infra.catalog import default_catalog

PROD = Path(__file__).parent.parent / "stacks" / "Pulumi.prod.yaml"
# per decimal GB (the usage figures are bytes / 10^9): S3 bills GB of 2^30 bytes, Cloud Storage quotes per GiB
GIB_PER_GB = 1e9 / 2**30  # the bucket bills GiB (10^9 / 2^30 = 0.931 of a decimal GB)
S3, S3_PUT, GCS = 0.023 * GIB_PER_GB, 0.005 / 1000, 0.020 * GIB_PER_GB
# prod: 13B params x 14 B = 182 GB a checkpoint, every 30 min all month: 1,460 a month, keep_last 3
SIZE_GB, PER_MONTH = 13e9 * 14 / 1e9, 730 * 60 / 30
PARTS = math.ceil(SIZE_GB * 1e9 / 2**26)  # 2,713 parts of 64 MiB


def lines(est, name: str) -> dict[str, float]:
    r = next(r for r in est.resources if r.resource.name == name and r.resource.custom)  # not the component
    return {c.name: c.monthly_cost for c in r.components}


def prod_with_retention(days: int):
    text = PROD.read_text()
    assert "retention_days: 1 " in text
    return estimate_text(text.replace("retention_days: 1 ", f"retention_days: {days} "), "prod", "prod")


def test_thirty_days_of_versions_are_what_the_bucket_bills():
    """The issue's case: prod with 30-day noncurrent retention showed $12.56 (3 current checkpoints). Each
    pruned 182 GB checkpoint stays 30 (+1) days: 1,460 x 31 / 30.42 = 1,488 versions, more than the 1,460 the
    planned job (one 730-hour month) writes at all, so all 1,460 are held: 265.7 TB (241.7 TiB)."""
    got = lines(prod_with_retention(30), "main-ckpt")
    current = 3 * SIZE_GB * S3  # 546 GB = 508.50 GiB: 11.70
    noncurrent = min(PER_MONTH * 31 / (730 / 24), PER_MONTH) * SIZE_GB * S3  # 247,473 GiB: 5,691.83
    requests = PER_MONTH * PARTS * S3_PUT  # 19.80
    assert got["S3 Standard storage, current checkpoints"] == pytest.approx(current)
    assert got["S3 Standard storage, noncurrent versions"] == pytest.approx(noncurrent)
    assert round(noncurrent, 2) == 5691.83 and round(noncurrent / current) == 487
    assert got["S3 Standard write requests"] == pytest.approx(requests) and round(requests, 2) == 19.80
    # the shipped default (1 day) keeps 2 days' worth: 96 versions
    default = lines(prod_with_retention(1), "main-ckpt")["S3 Standard storage, noncurrent versions"]
    assert default == pytest.approx(PER_MONTH * 2 / (730 / 24) * SIZE_GB * S3) and round(default, 2) == 374.26


def context(*resources: Resource, job_hours: float = 100) -> PricingContext:
    usage = {
        "hours_per_month": UsageValue(730, "hours", "test"),
        "job_hours": UsageValue(job_hours, "hours", "test"),
        "checkpoint_gb": UsageValue(300, "GB", "test"),
        "checkpoint_size_gb": UsageValue(100, "GB", "test"),
        "checkpoints_per_month": UsageValue(730, "checkpoints", "test"),  # one an hour
        "egress_gb_per_month": UsageValue(0, "GB", "test"),
    }
    return PricingContext(
        default_catalog(), usage, list(resources), regions={"aws": "us-east-1", "gcp": "us-central1"}
    )


def res(type_token: str, name: str, inputs: dict, id: str = "") -> Resource:
    return Resource(
        type_token, name, f"urn:pulumi:dev::tf::{type_token}::{name}", "urn:parent", inputs, {}, id
    )


def components(priced) -> dict[str, float]:
    return {c.name: c.monthly_cost for c in priced.components}


def test_an_unversioned_bucket_holds_only_its_current_checkpoints():
    got = components(price_resource(res("aws:s3/bucketV2:BucketV2", "b", {}), context()))
    assert "S3 Standard storage, noncurrent versions" not in got
    assert got["S3 Standard storage, current checkpoints"] == pytest.approx(300 * S3)
    # 730 checkpoints x ceil(100e9 / 64 MiB) = 1,491 parts
    assert got["S3 Standard write requests"] == pytest.approx(730 * 1491 * S3_PUT)


def test_versioning_without_expiry_keeps_every_checkpoint_of_the_job():
    bucket = res("aws:s3/bucketV2:BucketV2", "b", {}, id="b-1")
    versioning = res("aws:s3/bucketVersioningV2:BucketVersioningV2", "v",
                     {"bucket": "b-1", "versioningConfiguration": {"status": "Enabled"}})  # fmt: skip
    priced = price_resource(bucket, context(bucket, versioning, job_hours=100))
    noncurrent = next(c for c in priced.components if "noncurrent" in c.name)
    assert noncurrent.quantity == pytest.approx(100 * 100 * GIB_PER_GB)  # 100 checkpoints in 100 hours, 100 GB each
    assert "every pruned checkpoint is kept" in noncurrent.note


def test_the_shortest_enabled_noncurrent_rule_wins_and_disabled_rules_do_not_count():
    bucket = res("aws:s3/bucketV2:BucketV2", "b", {}, id="b-1")
    versioning = res("aws:s3/bucketVersioningV2:BucketVersioningV2", "v",
                     {"bucket": "b-1", "versioningConfiguration": {"status": "Enabled"}})  # fmt: skip
    rules = [
        {"id": "off", "status": "Disabled", "noncurrentVersionExpiration": {"noncurrentDays": 1}},
        {"id": "a", "status": "Enabled", "noncurrentVersionExpiration": {"noncurrentDays": 3}},
        {"id": "b", "status": "Enabled", "noncurrentVersionExpiration": {"noncurrentDays": 2}},
    ]
    lifecycle = res("aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2", "l",
                    {"bucket": "b-1", "rules": rules})  # fmt: skip
    priced = price_resource(bucket, context(bucket, versioning, lifecycle, job_hours=730))
    noncurrent = next(c for c in priced.components if "noncurrent" in c.name)
    # one checkpoint an hour, kept 2 + 1 days: 72 versions of 100 GB
    assert noncurrent.quantity == pytest.approx(72 * 100 * GIB_PER_GB)


def test_gcs_reads_days_since_noncurrent_time():
    bucket = res("gcp:storage/bucket:Bucket", "g", {
        "location": "US-CENTRAL1", "versioning": {"enabled": True},
        "lifecycleRules": [{"action": {"type": "Delete"}, "condition": {"withState": "ARCHIVED", "daysSinceNoncurrentTime": 7}}],
    })  # fmt: skip
    got = components(price_resource(bucket, context(bucket, job_hours=730)))
    # one an hour, kept 7 + 1 days: 192 versions of 100 GB at $0.020
    assert got["Cloud Storage Standard storage, noncurrent versions"] == pytest.approx(192 * 100 * GCS)


def test_an_unknown_rule_list_is_not_estimable_never_cheaper():
    bucket = res("gcp:storage/bucket:Bucket", "g", {
        "location": "US-CENTRAL1", "versioning": {"enabled": True},
        "lifecycleRules": ["04da6b54-80e4-46f7-96ec-b56ff0331ba9"],
    })  # fmt: skip
    priced = price_resource(bucket, context(bucket))
    assert priced.status == "not estimable" and "lifecycleRules[0]" in priced.reason
