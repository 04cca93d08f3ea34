"""Unit prices the embedded catalog does not carry (storage, disks, data transfer, NAT, public IPv4).

The catalog holds instance prices only. These are public list prices (USD) for one reference region
per cloud, recorded by hand from the providers' pricing pages. A resource in another region is priced
at the reference region's rate and its component says so in its note, so no line pretends to a
precision it does not have. Every component names the rate id it used as its `source`.
"""

from __future__ import annotations

from dataclasses import dataclass

AS_OF = "2025 list prices, recorded by hand"
AS_OF_YEAR = "2025"  # the date a cost line priced from this table carries (the year: no finer date is known)


@dataclass(frozen=True)
class Rate:
    id: str
    usd: float
    unit: str
    region: str  # the reference region the price is for
    what: str
    url: str
    per_requests: int = 1  # request rates are quoted per 1,000 or 10,000 requests
    # storage rates: the bytes in one unit of the rate. S3 bills "binary gigabytes (GB), where 1 GB is 2^30
    # bytes" (https://aws.amazon.com/s3/pricing/, footnote), Cloud Storage and BigQuery quote per GiB; Azure's
    # blob page says GB and nothing more, taken as 10^9
    bytes_per_unit: float = 1e9


_RATES = [
    # AWS (us-east-1)
    Rate("aws-s3-standard", 0.023, "GiB-month", "us-east-1", "S3 Standard storage, first 50 TB",
         "https://aws.amazon.com/s3/pricing/", bytes_per_unit=2**30),
    Rate("aws-ebs-gp3", 0.08, "GB-month", "us-east-1", "EBS gp3 volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-gp2", 0.10, "GB-month", "us-east-1", "EBS gp2 volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-gp3-iops", 0.005, "IOPS-month", "us-east-1",
         "EBS gp3 provisioned IOPS above the 3,000 included", "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-gp3-throughput", 0.04, "MB/s-month", "us-east-1",
         "EBS gp3 provisioned throughput above the 125 MB/s included", "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io2", 0.125, "GB-month", "us-east-1", "EBS io2 volume storage (IOPS extra)",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io2-iops-1", 0.065, "IOPS-month", "us-east-1",
         "EBS io2 provisioned IOPS, a volume's first 32,000", "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io2-iops-2", 0.0455, "IOPS-month", "us-east-1",
         "EBS io2 provisioned IOPS, a volume's 32,001st to 64,000th (Price List API figure; the pricing "
         "page rounds it to $0.046)", "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io2-iops-3", 0.03185, "IOPS-month", "us-east-1",
         "EBS io2 provisioned IOPS above a volume's 64,000th (Price List API figure; the pricing page "
         "rounds it to $0.032)", "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io1", 0.125, "GB-month", "us-east-1", "EBS io1 volume storage (IOPS extra)",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io1-iops", 0.065, "IOPS-month", "us-east-1", "EBS io1 provisioned IOPS (flat, not tiered)",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-st1", 0.045, "GB-month", "us-east-1", "EBS st1 volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-sc1", 0.015, "GB-month", "us-east-1", "EBS sc1 (Cold HDD) volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-egress-internet", 0.09, "GB", "us-east-1", "data transfer out to the internet, first 10 TB/month",
         "https://aws.amazon.com/ec2/pricing/on-demand/#Data_Transfer"),
    Rate("aws-nat-gateway-hour", 0.045, "hour", "us-east-1", "NAT gateway, per hour",
         "https://aws.amazon.com/vpc/pricing/"),
    Rate("aws-nat-gateway-gb", 0.045, "GB", "us-east-1", "NAT gateway, per GB processed",
         "https://aws.amazon.com/vpc/pricing/"),
    Rate("aws-public-ipv4", 0.005, "hour", "us-east-1", "public IPv4 address, per hour",
         "https://aws.amazon.com/vpc/pricing/"),
    Rate("aws-vpc-endpoint-interface", 0.01, "hour", "us-east-1", "interface VPC endpoint, per AZ-hour",
         "https://aws.amazon.com/privatelink/pricing/"),
    Rate("aws-cloudwatch-alarm", 0.10, "alarm-month", "us-east-1", "CloudWatch standard-resolution metric alarm",
         "https://aws.amazon.com/cloudwatch/pricing/"),
    Rate("aws-sns-email", 0.00002, "notification", "us-east-1", "SNS email notifications (first 1,000 free)",
         "https://aws.amazon.com/sns/pricing/"),
    # GCP (us-central1)
    Rate("gcp-gcs-standard", 0.020, "GiB-month", "us-central1", "Cloud Storage Standard, regional",
         "https://cloud.google.com/storage/pricing", bytes_per_unit=2**30),
    Rate("gcp-pd-balanced", 0.10, "GB-month", "us-central1", "balanced persistent disk",
         "https://cloud.google.com/compute/disks-image-pricing"),
    Rate("gcp-pd-ssd", 0.17, "GB-month", "us-central1", "SSD persistent disk",
         "https://cloud.google.com/compute/disks-image-pricing"),
    Rate("gcp-pd-standard", 0.04, "GB-month", "us-central1", "standard persistent disk",
         "https://cloud.google.com/compute/disks-image-pricing"),
    Rate("gcp-egress-internet", 0.12, "GB", "us-central1", "premium-tier internet egress, first TiB",
         "https://cloud.google.com/vpc/network-pricing"),
    Rate("gcp-cloud-nat-vm-hour", 0.0014, "VM-hour", "us-central1", "Cloud NAT gateway, per VM-hour (capped at 32 VMs)",
         "https://cloud.google.com/nat/pricing"),
    Rate("gcp-cloud-nat-gb", 0.045, "GB", "us-central1",
         "Cloud NAT data processed, per GiB inbound and outbound (same in every region)",
         "https://cloud.google.com/nat/pricing"),
    Rate("gcp-bigquery-storage", 0.02, "GiB-month", "us-central1", "BigQuery active logical storage",
         "https://cloud.google.com/bigquery/pricing#storage", bytes_per_unit=2**30),
    Rate("gcp-external-ip", 0.005, "hour", "us-central1", "external IPv4 address in use, per hour",
         "https://cloud.google.com/vpc/network-pricing#ipaddress"),
    Rate("gcp-external-ip-spot", 0.0025, "hour", "us-central1",
         "external IPv4 address in use on a Spot or preemptible VM, per hour (figure as widely quoted from "
         "this page; the page itself could not be read to confirm it)",
         "https://cloud.google.com/vpc/network-pricing#ipaddress"),
    # Azure (eastus)
    Rate("azure-blob-hot-lrs", 0.018, "GB-month", "eastus", "Blob Storage hot tier, LRS, first 50 TB",
         "https://azure.microsoft.com/pricing/details/storage/blobs/"),
    Rate("azure-egress-internet", 0.087, "GB", "eastus", "internet egress (Microsoft network), 100 GB-10 TB",
         "https://azure.microsoft.com/pricing/details/bandwidth/"),
    Rate("azure-public-ip", 0.005, "hour", "eastus", "standard static public IPv4, per hour",
         "https://azure.microsoft.com/pricing/details/ip-addresses/"),
    Rate("azure-nat-gateway-hour", 0.045, "hour", "eastus", "NAT gateway, per hour",
         "https://azure.microsoft.com/pricing/details/azure-nat-gateway/"),
    Rate("azure-nat-gateway-gb", 0.045, "GB", "eastus",
         "NAT gateway data processed, per GB (the widely published figure; the page itself could not be "
         "read to confirm it)",
         "https://azure.microsoft.com/pricing/details/azure-nat-gateway/"),
]  # fmt: skip

# Write requests of checkpoint uploads: one per 64 MiB part (cli/preview/pricing/checkpoints.py).
_REQUEST_RATES = [
    Rate("aws-s3-put", 0.005, "1k requests", "us-east-1", "S3 Standard PUT, COPY, POST, LIST requests, per 1,000",
         "https://aws.amazon.com/s3/pricing/", per_requests=1000),
    Rate("gcp-gcs-class-a", 0.005, "1k operations", "us-central1",
         "Cloud Storage Standard Class A operations (uploads, each resumable chunk), per 1,000",
         "https://cloud.google.com/storage/pricing#operations-pricing", per_requests=1000),
    Rate("azure-blob-hot-write", 0.065, "10k operations", "eastus",
         "Blob Storage hot LRS write operations (Put Block, Put Block List), per 10,000; the higher of the "
         "published figures, not confirmed against the pricing page here",
         "https://azure.microsoft.com/pricing/details/storage/blobs/", per_requests=10000),
]  # fmt: skip

RATES: dict[str, Rate] = {r.id: r for r in _RATES + _REQUEST_RATES}

# Azure managed disks are billed per provisioned tier (size rounded up), not per GB.
# (tier size GiB, USD/month) for eastus, from the managed-disks pricing page.
AZURE_DISK_TIERS: dict[str, list[tuple[int, float]]] = {
    "Premium_LRS": [(32, 5.28), (64, 10.21), (128, 19.71), (256, 38.01), (512, 73.22), (1024, 135.17),
                    (2048, 259.05), (4096, 495.57)],
    "StandardSSD_LRS": [(32, 2.40), (64, 4.80), (128, 9.60), (256, 19.20), (512, 38.40), (1024, 76.80),
                        (2048, 153.60), (4096, 307.20)],
    "Standard_LRS": [(32, 1.54), (64, 3.01), (128, 5.89), (256, 11.33), (512, 21.76), (1024, 40.96),
                     (2048, 77.83), (4096, 163.84)],
}  # fmt: skip
AZURE_DISK_URL = "https://azure.microsoft.com/pricing/details/managed-disks/"


def rate(rate_id: str) -> Rate:
    return RATES[rate_id]


def stored_units(gb: float, rate_id: str) -> float:
    """Decimal GB (a usage figure, bytes / 10^9) in the unit the storage rate bills: GiB for S3 and GCS."""
    return gb * 1e9 / RATES[rate_id].bytes_per_unit


def region_note(rate_id: str, region: str | None) -> str:
    """'' when the resource is in the rate's reference region, else a note saying it is approximated."""
    r = RATES[rate_id]
    if not region or region == r.region:
        return ""
    return f"{r.region} list price used for {region}"


def sources() -> dict[str, dict[str, str]]:
    """Provenance of every rate, in the shape of the catalog's sources.json."""
    out = {
        r.id: {
            "what": r.what,
            "usd": f"{r.usd} per {r.unit}",
            "region": r.region,
            "origin": r.url,
            "as_of": AS_OF,
        }
        for r in _RATES + _REQUEST_RATES
    }
    out["azure-managed-disk"] = {
        "what": "Azure managed disk, per provisioned tier and month",
        "region": "eastus",
        "origin": AZURE_DISK_URL,
        "as_of": AS_OF,
    }
    return out
