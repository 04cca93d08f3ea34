"""Unit prices the embedded catalog does not carry (storage, disks, data transfer, NAT, public IPv4).

The catalog holds instance prices only. These are public list prices (USD) for one reference region
per cloud, recorded by hand from the providers' pricing pages. A resource in another region is priced
at the reference region's rate and its component says so in its note, so no line pretends to a
precision it does not have. Every component names the rate id it used as its `source`.
"""

from __future__ import annotations

from dataclasses import dataclass

AS_OF = "2025 list prices, recorded by hand"


@dataclass(frozen=True)
class Rate:
    id: str
    usd: float
    unit: str
    region: str  # the reference region the price is for
    what: str
    url: str


_RATES = [
    # AWS (us-east-1)
    Rate("aws-s3-standard", 0.023, "GB-month", "us-east-1", "S3 Standard storage, first 50 TB",
         "https://aws.amazon.com/s3/pricing/"),
    Rate("aws-ebs-gp3", 0.08, "GB-month", "us-east-1", "EBS gp3 volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-gp2", 0.10, "GB-month", "us-east-1", "EBS gp2 volume storage",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-io2", 0.125, "GB-month", "us-east-1", "EBS io2 volume storage (IOPS extra)",
         "https://aws.amazon.com/ebs/pricing/"),
    Rate("aws-ebs-st1", 0.045, "GB-month", "us-east-1", "EBS st1 volume storage",
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
    Rate("gcp-gcs-standard", 0.020, "GB-month", "us-central1", "Cloud Storage Standard, regional",
         "https://cloud.google.com/storage/pricing"),
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
    Rate("gcp-bigquery-storage", 0.02, "GB-month", "us-central1", "BigQuery active logical storage",
         "https://cloud.google.com/bigquery/pricing#storage"),
    Rate("gcp-external-ip", 0.005, "hour", "us-central1", "external IPv4 address in use, per hour",
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
]  # fmt: skip

RATES: dict[str, Rate] = {r.id: r for r in _RATES}

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
        for r in _RATES
    }
    out["azure-managed-disk"] = {
        "what": "Azure managed disk, per provisioned tier and month",
        "region": "eastus",
        "origin": AZURE_DISK_URL,
        "as_of": AS_OF,
    }
    return out
