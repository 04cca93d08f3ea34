"""Each cloud's object store, in numbers: links, per-connection rate, request limits, latency, the SDK's retries.

Rates (infra/catalog/data/calibration/checkpoint_io.csv, row by `quantity, cloud, subject`; the node's upload
rates are the planner's own, infra/checkpoint_io.py, read from the same rows):
- upload per node: S3 1.0 GB/s (`object_store_upload_per_node, aws, Mountpoint ... 1007 MiB/s`), GCS 0.35 GB/s and
  0.19 GB/s beyond 35 nodes (`object_store_upload_per_node, gcp, GCS via Dataflux ... 0.369 GB/s`; its notes:
  0.349 at 35 nodes, 0.189 at 548), Azure 0.35 GB/s (no per-VM measurement: the GCS figure, as the planner).
- download per node: S3 6.269 GB/s (`object_store_download_per_node, aws, S3 -> p3dn.24xlarge (100 Gbit NIC),
  6269 MB/s`); GCS and Azure have no download row: their upload rate, as the planner assumes.
- per connection: S3 85 MB/s (`object_store_upload_per_node, aws, S3 per connection/request, 85 MB/s`: "one
  concurrent request for each 85-90 MB/s", stated for GETs, used for PUT parts too). GCS and Azure: no figure,
  so a connection is limited only by the links.
- account links: Azure 60 Gbit/s ingress (`storage_account_ingress, azure, ... 60 Gbit/s`, AZURE_ACCOUNT_INGRESS_
  GBPS) and 200 Gbit/s egress (`storage_account_ingress, azure, ... egress, 200 Gbit/s`), shared by every node.
  S3 and GCS publish no bucket bandwidth limit (GCS's 103.6 GB/s aggregate over 548 nodes is a measurement).
- request rates: S3 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD per second per prefix
  (`object_store_per_prefix_requests, aws`; one partition: the run's prefix, as a new bucket has); GCS ~1,000
  object writes and ~5,000 reads per second per bucket before it autoscales (`object_store_per_prefix_requests,
  gcp`); Azure 40,000 requests per second per account (`object_store_per_prefix_requests, azure`).
Not in the CSV, modelled: 30 ms per request (the S3 performance guide's "tens of milliseconds" median for small
requests, used for every cloud), and the SDKs' retry policies (PROTOCOL.md section 3: botocore adaptive with
AWS_MAX_ATTEMPTS 6; google-cloud-storage's default retry, 1 s doubling to 60 s within 120 s; the Azure store's
ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=5, random_jitter_range=1)).

How each SDK moves a file (stores.py): S3 s3transfer, `concurrency` parts of a file at once both ways; GCS a
resumable upload (chunks one after the other) and one streamed download; Azure `concurrency // 4` blocks of a
file at once up, one connection down (`max_concurrency=1`, in 4 MiB requests, the SDK's default chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from infra.checkpoint_io import (
    AZURE_ACCOUNT_EGRESS_GBPS,
    AZURE_ACCOUNT_INGRESS_GBPS,
    GCP_MANY_NODES,
    GCP_MANY_NODES_GBPS,
    S3_CONNECTION_GBPS,
    UPLOAD_GBPS_PER_NODE,
)

GB = 1e9
MiB = 1 << 20
S3_DOWNLOAD_GBPS = 6.269  # checkpoint_io.csv: S3 -> p3dn.24xlarge, 6,269 MB/s
REQUEST_LATENCY_S = 0.030
AZURE_GET_CHUNK = 4 * MiB  # azure-storage-blob max_chunk_get_size default


@dataclass(frozen=True)
class RetryPolicy:
    """How the cloud's SDK retries a throttled or failed request: `attempts` in all, or until `deadline_s`."""

    sdk: str
    attempts: int
    first_s: float
    factor: float
    cap_s: float
    deadline_s: float | None = None
    jitter: str = "full"  # botocore and api-core draw from [0, backoff]; azure-core adds +-1 s

    def backoff(self, retry: int, rng) -> float:
        """Seconds before retry number `retry` (1 for the first retry)."""
        if self.jitter == "azure":  # initial + base**count, +-1 s (ExponentialRetry.get_backoff_time; count from 1)
            base = self.first_s + self.factor**retry
            return rng.uniform(max(0.0, base - 1.0), base + 1.0)
        return rng.uniform(0.0, min(self.cap_s, self.first_s * self.factor ** (retry - 1)))


RETRIES = {
    "aws": RetryPolicy("botocore adaptive, AWS_MAX_ATTEMPTS=6", 6, 1.0, 2.0, 20.0),
    "gcp": RetryPolicy("google-cloud-storage DEFAULT_RETRY", 10_000, 1.0, 2.0, 60.0, deadline_s=120.0),
    "azure": RetryPolicy("azure ExponentialRetry(1, 2, retry_total=5)", 6, 1.0, 2.0, 60.0, jitter="azure"),
}
THROTTLED = {"aws": "503 SlowDown", "gcp": "429 rateLimitExceeded", "azure": "503 ServerBusy"}
CHECKSUM = {"aws": "crc64nvme", "gcp": "crc32c", "azure": "md5"}


@dataclass(frozen=True)
class StoreShape:
    cloud: str
    upload_bps: float  # one node's link to the store
    download_bps: float
    connection_bps: float | None  # one request's stream
    ingress_bps: float | None  # the whole bucket/account, every node together
    egress_bps: float | None
    limits: dict  # request class -> requests per second ("write", "read"; Azure counts both as "any")
    writes_per_part: bool  # each part/block is a request against the write limit (GCS: each object)
    upload_streams: int  # requests of one file in flight at once
    download_streams: int
    download_request_bytes: int | None  # a download's requests (None: one per object)
    latency_s: float
    retry: RetryPolicy
    throttled: str
    checksum: str
    fault_rate: float = 0.0  # chance a request fails (500) and is retried by the SDK
    concurrency: int = 8  # the agent's TRAINFLEET_UPLOAD_CONCURRENCY

    def limit_class(self, kind: str) -> str:
        return "any" if "any" in self.limits else kind

    def with_(self, **changes) -> StoreShape:
        return replace(self, **changes)


def upload_gbps(cloud: str, nodes: int) -> float:
    """The node's own upload rate (the planner's, infra/checkpoint_io.py, without its Azure share of the account:
    the account link is its own link here)."""
    rate = UPLOAD_GBPS_PER_NODE[cloud]
    if cloud == "gcp" and nodes > GCP_MANY_NODES:
        rate = GCP_MANY_NODES_GBPS
    return rate


def store_shape(cloud: str, nodes: int, concurrency: int = 8, fault_rate: float = 0.0) -> StoreShape:
    up = upload_gbps(cloud, nodes) * GB
    if cloud == "aws":
        return StoreShape(cloud, up, S3_DOWNLOAD_GBPS * GB, S3_CONNECTION_GBPS * GB, None, None,
                          {"write": 3500, "read": 5500}, True, concurrency, concurrency, None,
                          REQUEST_LATENCY_S, RETRIES[cloud], THROTTLED[cloud], CHECKSUM[cloud], fault_rate, concurrency)  # fmt: skip
    if cloud == "gcp":
        return StoreShape(cloud, up, up, None, None, None, {"write": 1000, "read": 5000}, False, 1, 1, None,
                          REQUEST_LATENCY_S, RETRIES[cloud], THROTTLED[cloud], CHECKSUM[cloud], fault_rate, concurrency)  # fmt: skip
    if cloud == "azure":
        return StoreShape(cloud, up, up, None, AZURE_ACCOUNT_INGRESS_GBPS * GB, AZURE_ACCOUNT_EGRESS_GBPS * GB,
                          {"any": 40000}, True, max(1, concurrency // 4), 1, AZURE_GET_CHUNK,
                          REQUEST_LATENCY_S, RETRIES[cloud], THROTTLED[cloud], CHECKSUM[cloud], fault_rate, concurrency)  # fmt: skip
    raise ValueError(f"cloud {cloud!r}: aws, gcp or azure")


def ideal_upload_s(shape: StoreShape, files: list[int]) -> float:
    """A lower bound on one node's upload of these files when it has the store to itself: the node's link, or its
    largest file through `upload_streams` connections, whichever is slower (plus no latency)."""
    total = sum(files)
    per_file = shape.upload_bps if shape.connection_bps is None else shape.upload_streams * shape.connection_bps
    return max(total / shape.upload_bps, max(files, default=0) / min(per_file, shape.upload_bps)) if files else 0.0


def ideal_download_s(shape: StoreShape, files: list[int]) -> float:
    total = sum(files)
    per_file = shape.download_bps if shape.connection_bps is None else shape.download_streams * shape.connection_bps
    return max(total / shape.download_bps, max(files, default=0) / min(per_file, shape.download_bps)) if files else 0.0

