"""Typed catalog entries: one `Offer` per (cloud, region, zone, instance type), one `Accelerator` per chip."""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.catalog.interruption import InterruptionRate, aws_bucket_rate

# Column order of data/offers.csv (and of a refreshed overlay); the loader checks it.
OFFER_COLUMNS = [
    "cloud", "region", "zone", "instance_type", "accelerator", "accelerators_per_node",
    "accelerator_memory_gib", "vcpus", "memory_gib", "on_demand_usd_per_hour", "spot_usd_per_hour",
    "interruption_bucket", "interruption_source", "network_gbps", "fabric", "source", "note",
]  # fmt: skip

# What each column may hold: infra/catalog/offer_rules.py.

# AWS Spot Advisor buckets: share of instances interrupted in the trailing month.
INTERRUPTION_BUCKETS = {0: "<5%", 1: "5-10%", 2: "10-15%", 3: "15-20%", 4: ">20%"}
AWS_BUCKET_RATES = tuple(aws_bucket_rate(b) for b in sorted(INTERRUPTION_BUCKETS))  # a plan asks thousands of times
# Accelerators DeepSpeed's CUDA/HPU launch cannot drive (they need their own SDKs): no plan, no capacity asked.
NOT_DEEPSPEED = {"Trainium1": "Neuron SDK", "Trainium2": "Neuron SDK", "Qualcomm-AI100": "Qualcomm SDK",
                 "Radeon-MI25": "ROCm too old for DeepSpeed"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Offer:
    """An instance type offered in one zone (or region, on Azure) with its prices and provenance."""

    cloud: str
    region: str
    zone: str  # AWS availability-zone id (use1-az4), GCP zone, "" on Azure (the source has no zones)
    instance_type: str
    accelerator: str  # normalised name (A100-80GB, H100-80GB, Gaudi-HL205, ...); "" if unknown
    accelerators_per_node: int
    accelerator_memory_gib: float
    vcpus: float
    memory_gib: float
    on_demand_usd_per_hour: float | None  # None: unknown, never 0
    spot_usd_per_hour: float | None
    interruption_bucket: int | None  # 0..4, see INTERRUPTION_BUCKETS
    interruption_source: str  # "aws-spot-advisor" (-refresh), "assumed-interruption" or "" (unknown)
    network_gbps: float | None  # inter-node bandwidth where known
    fabric: str  # efa, infiniband, gpudirect-tcpx, ... or ""
    source: str  # key into sources.json, or the refresh that produced the price
    note: str = ""
    as_of: str = ""  # when the price was observed, if known
    # A refreshed rate that is not an AWS bucket (Azure's eviction rate per hour): over interruption_bucket.
    interruption_rate: InterruptionRate | None = None
    # Published evidence that is not a rate (GCP's preempted share of stopped Spot VMs), shown beside the assumption.
    interruption_evidence: str = ""

    @property
    def local_zone(self) -> bool:
        """An AWS Local Zone or Wavelength zone (use1-atl2-az1): opt-in, small capacity, no advisor data."""
        return self.cloud == "aws" and self.zone.count("-") >= 2

    @property
    def interruption_assumed(self) -> bool:
        return self.interruption_source == "assumed-interruption"

    @property
    def interruption(self) -> InterruptionRate | None:
        """The rate the planner uses: a refreshed one, else the AWS-style monthly bucket; None when unknown."""
        if self.interruption_rate is not None:
            return self.interruption_rate
        return None if self.interruption_bucket is None else AWS_BUCKET_RATES[self.interruption_bucket]

    @property
    def interruption_label(self) -> str:
        rate = self.interruption
        if rate is None:
            return "unknown"
        return rate.label + " (assumed)" if self.interruption_assumed else rate.label

    def price(self, purchase: str) -> float | None:
        """USD/hour for 'spot' or 'on-demand'."""
        return self.spot_usd_per_hour if purchase == "spot" else self.on_demand_usd_per_hour


@dataclass(frozen=True, slots=True)
class Accelerator:
    """Hardware facts for one accelerator chip."""

    name: str
    vendor: str
    memory_gib: float
    peak_tflops: dict[str, float] = field(default_factory=dict)  # precision -> dense TFLOP/s
    peak_hardware: str = ""  # which peak_flops.csv rows the figures come from

    def peak(self, precision: str) -> float | None:
        return self.peak_tflops.get(precision)
