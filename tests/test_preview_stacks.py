"""`trainfleet preview` over every stack in stacks/: the real program under Pulumi's mock runtime, priced.

One offline run per stack (module-scoped), reused by every assertion about it.

Every expected dollar figure here is worked by hand below, from the catalog rows it quotes
(infra/catalog/data/offers.csv) or from the clouds' published list prices (URL in the comment);
nothing in this file asks the pricing code, the catalog loader or the rate table for a number.
"""

from __future__ import annotations

import math

import pytest

from cli.preview.engine import estimate_stack
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED
from cli.preview.pricing import FREE_TYPES, PRICERS
from tests.conftest import STACKS, assert_one_line_error

STACK_FILES = sorted(STACKS.glob("Pulumi.*.yaml"))
GROUP_TYPES = {
    "aws:autoscaling/group:Group",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
    "azure-native:compute:VirtualMachineScaleSet",
}
# The node files the program uploads (the agent, train.py), per cloud: bytes, checked apart at their storage rate.
ASSET_TYPES = {
    "aws:s3/bucketObjectv2:BucketObjectv2",
    "gcp:storage/bucketObject:BucketObject",
    "azure-native:storage:Blob",
}

# A month is 730 hours: 365 d x 24 h / 12. It is the month the clouds' own price pages and calculators
# use ("monthly price estimates are based on 730 hours of usage",
# https://azure.microsoft.com/pricing/details/virtual-machines/linux/; the AWS Pricing Calculator and
# Google's calculator also quote 730 h). Not 720 (30 days), not 744 (31 days).
HOURS = 730

# Checkpoint GB the preview assumes when no usage file says otherwise: params x 14 bytes x keep_last.
# 14 B/param = bf16 weights (2) + fp32 master weights, Adam momentum and variance (4 + 4 + 4): the
# "K = 12" optimizer state of mixed-precision Adam in the ZeRO paper, section 3.1
# (https://arxiv.org/abs/1910.02054), without the gradients, which a checkpoint does not keep.
GB_PER_PARAM = 14 / 1e9

# Published list prices (USD), as listed on the clouds' pricing pages in 2025.
# AWS, us-east-1 (us-west-2 lists the same figures for all of these):
# S3 bills "binary gigabytes (GB), where 1 GB is 2^30 bytes" (the same page's footnote), Cloud Storage and
# BigQuery quote per GiB: a usage figure in decimal GB (bytes / 10^9) costs the rate x 10^9 / 2^30 per GB.
GIB = 2**30
S3_STANDARD = 0.023 * 1e9 / GIB  # 0.023 per GiB-month, first 50 TB: https://aws.amazon.com/s3/pricing/
EBS_GP3 = 0.08  # per GB-month: https://aws.amazon.com/ebs/pricing/
AWS_NAT_HOUR = 0.045  # per NAT gateway hour: https://aws.amazon.com/vpc/pricing/
AWS_NAT_GB = 0.045  # per GB through a NAT gateway: https://aws.amazon.com/vpc/pricing/
AWS_IPV4_HOUR = 0.005  # per public IPv4 address hour, since 2024-02-01: https://aws.amazon.com/vpc/pricing/
AWS_EGRESS_GB = 0.09  # per GB to the internet, first 10 TB: https://aws.amazon.com/ec2/pricing/on-demand/
# GCP, us-central1:
GCS_STANDARD = 0.020 * 1e9 / GIB  # 0.020 per GiB-month: https://cloud.google.com/storage/pricing
GCP_PD_SSD = 0.17  # per GB-month: https://cloud.google.com/compute/disks-image-pricing
GCP_NAT_VM_HOUR = 0.0014  # per VM-hour, up to 32 VMs: https://cloud.google.com/nat/pricing
GCP_NAT_GB = 0.045  # per GiB processed, in and out, every region: https://cloud.google.com/nat/pricing
GCP_EGRESS_GB = 0.12  # per GB, premium tier, first TiB: https://cloud.google.com/vpc/network-pricing
BIGQUERY_ACTIVE = 0.02 * 1e9 / GIB  # 0.02 per GiB-month: https://cloud.google.com/bigquery/pricing#storage
# Azure, eastus (https://azure.microsoft.com/pricing/details/ + the page named):
AZURE_BLOB_HOT_LRS = 0.018  # per GB-month, first 50 TB: storage/blobs/
AZURE_EGRESS_GB = 0.087  # per GB, 100 GB-10 TB: bandwidth/
AZURE_P15 = 38.01  # Premium SSD P15 (256 GiB) per month: managed-disks/
AZURE_IPV4_HOUR = 0.005  # standard static public IPv4 per hour: ip-addresses/
AZURE_NAT_HOUR = 0.045  # per NAT gateway hour: azure-nat-gateway/
AZURE_NAT_GB = 0.045  # per GB processed: azure-nat-gateway/

# Usage defaults the stacks leave alone: 0 GB egress and NAT traffic, 1 GB of billing export.
EGRESS_GB = NAT_GB = 0
BILLING_GB = 1


def aws_network(prefix: str) -> dict[str, dict[str, float]]:
    """One NAT gateway (always on) and its Elastic IP, as every AWS stack's network declares."""
    return {
        f"{prefix}-net-nat": {
            "NAT gateway hours": HOURS * AWS_NAT_HOUR,
            "NAT data processed": NAT_GB * AWS_NAT_GB,
        },
        f"{prefix}-net-nat-ip": {"public IPv4 address": HOURS * AWS_IPV4_HOUR},
    }


# Write requests, one per 64 MiB part the agent uploads (templates/agent/trainfleet_agent/stores.py):
S3_PUT = 0.005 / 1000  # per PUT/UploadPart: https://aws.amazon.com/s3/pricing/
GCS_CLASS_A = (
    0.005 / 1000
)  # per Class A operation: https://cloud.google.com/storage/pricing#operations-pricing
AZURE_BLOB_WRITE = 0.065 / 10000  # per write operation, hot LRS: storage/blobs/ (see rates.py's caveat)
AZURE_SOFT_DELETE_DAYS = 7  # infra/azure/storage.py: a version the policy deletes stays soft-deleted 7 days


def checkpoint_lines(
    label: str, storage: float, write: float, params: float, keep_last: int, interval_min: float, days: float
) -> dict[str, float]:
    """A versioned checkpoint bucket all month (730 h, no planned_hours in any stack): the current checkpoints,
    every checkpoint pruned in the last `days` days kept as noncurrent versions (retention_days + 1 for the
    once-a-day lifecycle run), and one write request per 64 MiB part of each checkpoint."""
    size_gb = params * GB_PER_PARAM
    per_month = HOURS * 60 / interval_min
    noncurrent = per_month * days / (HOURS / 24)
    parts = math.ceil(size_gb * 1e9 / 2**26)
    return {
        f"{label} storage, current checkpoints": size_gb * keep_last * storage,
        f"{label} storage, noncurrent versions": size_gb * noncurrent * storage,
        f"{label} write requests": per_month * parts * write,
    }


def s3_checkpoints(params: float, keep_last: int, interval_min: float) -> dict[str, float]:
    return {
        **checkpoint_lines("S3 Standard", S3_STANDARD, S3_PUT, params, keep_last, interval_min, 1 + 1),
        "data transfer out to the internet": EGRESS_GB * AWS_EGRESS_GB,
    }


# stack -> priced resource name -> cost component name -> USD per month, each worked by hand.
EXPECTED = {
    # stacks/Pulumi.dev.yaml: 1 spot g5.12xlarge in us-east-1 zones use1-az1, use1-az2, use1-az4.
    # offers.csv (cloud,region,zone,instance_type ... spot_usd_per_hour ... source):
    #   aws,us-east-1,use1-az1,g5.12xlarge ... 2.780400 ... skypilot-aws
    #   aws,us-east-1,use1-az2,g5.12xlarge ... 2.079600 ... skypilot-aws
    #   aws,us-east-1,use1-az4,g5.12xlarge ... 2.081300 ... skypilot-aws
    # (use1-az5 2.182400 and use1-az6 2.238700 are not the fleet's zones and stay out of the mean.)
    # spot: (2.7804 + 2.0796 + 2.0813) / 3 = $2.313767/h x 730 h x 1 node = $1,689.05/month
    "dev": {
        "dev-asg": {
            "g5.12xlarge spot (1 node)": (2.7804 + 2.0796 + 2.0813) / 3 * HOURS * 1,
            "EBS gp3 200 GB x 1 node": 200 * 1 * EBS_GP3,  # root_volume_gb default 200
        },
        "dev-ckpt": s3_checkpoints(1.3e9, keep_last=2, interval_min=20),  # 18.2 GB each
        **aws_network("dev"),
    },
    # stacks/Pulumi.prod.yaml: 4 x p4de.24xlarge, on_demand_base 1 and 0% above it -> 1 on-demand, 3 spot,
    # zone use1-az6 (one cluster placement group, one zone). offers.csv:
    #   aws,us-east-1,use1-az6,p4de.24xlarge ... on_demand 27.44705, spot 8.650500 ... skypilot-aws
    # on-demand: $27.44705/h x 730 h x 1 node = $20,036.35/month
    # spot: $8.6505/h x 730 h x 3 nodes = $18,944.60/month
    "prod": {
        "main-asg": {
            "p4de.24xlarge on-demand (1 node)": 27.44705 * HOURS * 1,
            "p4de.24xlarge spot (3 nodes)": 8.6505 * HOURS * 3,
            "EBS gp3 500 GB x 4 nodes": 500 * 4 * EBS_GP3,
        },
        "main-ckpt": s3_checkpoints(13e9, keep_last=3, interval_min=30),  # 182 GB each
        "aws-billing": {"S3 Standard storage (billing export data)": BILLING_GB * S3_STANDARD},
        **aws_network("main"),
    },
    # stacks/Pulumi.gaudi.yaml: 2 spot dl1.24xlarge in us-west-2 zone usw2-az1. offers.csv:
    #   aws,us-west-2,usw2-az1,dl1.24xlarge ... spot 4.167100 ... skypilot-aws
    # spot: $4.1671/h x 730 h x 2 nodes = $6,083.97/month
    "gaudi": {
        "gaudi-asg": {
            "dl1.24xlarge spot (2 nodes)": 4.1671 * HOURS * 2,
            "EBS gp3 300 GB x 2 nodes": 300 * 2 * EBS_GP3,
        },
        "gaudi-ckpt": s3_checkpoints(7e9, keep_last=2, interval_min=30),  # 98 GB each
        **aws_network("gaudi"),
    },
    # stacks/Pulumi.gcp-dev.yaml: 1 spot a2-highgpu-1g in us-central1 zones a and b. offers.csv:
    #   gcp,us-central1,us-central1-a,a2-highgpu-1g ... spot 1.80385 ... skypilot-gcp, "price = host row + GPU row"
    #   gcp,us-central1,us-central1-b,a2-highgpu-1g ... spot 1.80385 ... skypilot-gcp
    # and the two rows it sums, in skypilot-catalog v8 gcp/vms.csv (shared/data/catalog/gcp_accel.csv):
    #   a2-highgpu-1g,...,us-central1,us-central1-a,0.73948,0.36975   (host VM, spot 0.36975)
    #   ,,,A100,1,...,us-central1,us-central1-a,2.93391,1.4341         (1 x A100 GPU, spot 1.4341)
    # spot: 0.36975 + 1.4341 = $1.80385/h in both zones x 730 h x 1 node = $1,316.81/month
    "gcp-dev": {
        "gdev-mig": {
            "a2-highgpu-1g spot (1 node)": (0.36975 + 1.4341) * HOURS * 1,
            "pd-ssd 200 GB x 1 node": 200 * 1 * GCP_PD_SSD,
        },
        "gdev-ckpt": {
            **checkpoint_lines("Cloud Storage Standard", GCS_STANDARD, GCS_CLASS_A, 1.3e9, 2, 20, 1 + 1),
            "internet egress": EGRESS_GB * GCP_EGRESS_GB,
        },
        # Cloud NAT bills per VM it serves: the fleet's 1 VM, all month.
        "gdev-net-nat": {
            "Cloud NAT for 1 VM": 1 * HOURS * GCP_NAT_VM_HOUR,
            "NAT data processed": NAT_GB * GCP_NAT_GB,
        },
        # (BigQuery's first 10 GiB a month are free; the preview prices the 1 GB at list price.)
        "gcp-billing": {"BigQuery active storage (billing export)": BILLING_GB * BIGQUERY_ACTIVE},
    },
    # stacks/Pulumi.azure-dev.yaml: 1 spot Standard_NC24ads_A100_v4 in eastus (Azure rows carry no zone,
    # so the fleet's zones 1-3 all take the region's price). offers.csv:
    #   azure,eastus,,Standard_NC24ads_A100_v4 ... on_demand 3.673, spot 0.444433 ... skypilot-azure
    # spot: $0.444433/h x 730 h x 1 node = $324.44/month
    "azure-dev": {
        "adev-vmss": {
            "Standard_NC24ads_A100_v4 spot (1 node)": 0.444433 * HOURS * 1,
            # a 200 GB Premium_LRS OS disk is billed as the next tier up, P15 (256 GiB)
            "Premium_LRS OS disk 200 GB (256 GB tier) x 1": 1 * AZURE_P15,
        },
        "adevckpt": {
            **checkpoint_lines(
                "Blob hot LRS",
                AZURE_BLOB_HOT_LRS,
                AZURE_BLOB_WRITE,
                1.3e9,
                2,
                20,
                1 + AZURE_SOFT_DELETE_DAYS + 1,
            ),
            "internet egress": EGRESS_GB * AZURE_EGRESS_GB,
        },
        "azurebilling": {"Blob hot LRS (billing export data)": BILLING_GB * AZURE_BLOB_HOT_LRS},
        "adev-net-nat": {
            "NAT gateway hours": HOURS * AZURE_NAT_HOUR,
            "NAT data processed": NAT_GB * AZURE_NAT_GB,
        },
        "adev-net-nat-ip": {"public IPv4 address": HOURS * AZURE_IPV4_HOUR},
    },
}

# Each uploaded script is well under 1 MB: 1e6 B / 2^30 x $0.023 = $0.000021/month at most.
MAX_ASSET_USD = 1e6 / 1e9 * S3_STANDARD
# Its own bytes at the standard rate of its bucket / account: S3 Standard, Cloud Storage Standard, Blob hot LRS.
ASSET_RATE = {
    "aws:s3/bucketObjectv2:BucketObjectv2": S3_STANDARD,
    "gcp:storage/bucketObject:BucketObject": GCS_STANDARD,
    "azure-native:storage:Blob": AZURE_BLOB_HOT_LRS,
}


def hand_total(stack: str) -> float:
    return sum(sum(lines.values()) for lines in EXPECTED[stack].values())


def test_hand_worked_totals_are_what_the_comments_say():
    """The sums a reviewer can redo on paper (cents), so a typo in a table above shows up here."""
    # checkpoint buckets: current + noncurrent versions + write requests (S3 and Cloud Storage per GiB)
    assert round(hand_total("dev"), 2) == 1801.45  # 1689.05 + 16 + (0.78 + 56.14 + 2.98) + 32.85 + 3.65
    # 20036.35 + 18944.60 + 160 + (11.70 + 374.26 + 19.80) + 0.02 + 32.85 + 3.65
    assert round(hand_total("prod"), 2) == 39583.22
    assert round(hand_total("gaudi"), 2) == 6384.85  # 6083.97 + 48 + (4.20 + 201.52 + 10.67) + 32.85 + 3.65
    assert round(hand_total("gcp-dev"), 2) == 1404.32  # 1316.81 + 34 + (0.68 + 48.82 + 2.98) + 1.02 + 0.02
    # 324.44 + 38.01 + (0.66 + 212.28 + 3.87) + 0.02 + 32.85 + 3.65
    assert round(hand_total("azure-dev"), 2) == 615.78


@pytest.fixture(scope="module")
def estimates():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = estimate_stack(str(path))
        return cache[path]

    return get


def _ids(paths):
    return [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in paths]


def priced_lines(est) -> dict[str, dict[str, float]]:
    """resource name -> component name -> monthly USD, for every priced resource but the uploaded scripts."""
    return {
        r.resource.name: {c.name: c.monthly_cost for c in r.components}
        for r in est.resources
        if r.status == PRICED and r.resource.type not in ASSET_TYPES
    }


def test_there_are_stacks_to_preview():
    assert STACK_FILES, "stacks/ has no Pulumi.<env>.yaml"


def test_every_stack_has_hand_worked_figures():
    """A new stack needs its figures worked by hand above before it is previewed here."""
    assert set(_ids(STACK_FILES)) == set(EXPECTED)


@pytest.mark.parametrize("path", STACK_FILES, ids=_ids(STACK_FILES))
def test_every_resource_is_priced_free_or_explicitly_not_priced(estimates, path):
    est = estimates(path)
    cloud = [r for r in est.resources if r.resource.custom]
    assert cloud, "the program declared no cloud resources"
    for r in est.resources:
        label = f"{r.resource.type} {r.resource.name}"
        assert r.status in (PRICED, FREE, NOT_PRICED), (label, r.status, r.reason)
        # offline the mocks know every value, so nothing may be "not estimable"
        assert r.status != NOT_ESTIMABLE, (label, r.reason)
        if r.status == PRICED:
            assert r.components and all(
                c.monthly_cost is not None and c.monthly_cost >= 0 for c in r.components
            ), label
            assert all(c.source and c.unit for c in r.components), label
        elif r.status == FREE:
            assert r.reason and r.monthly_cost == 0.0, label
        else:
            assert r.reason and r.monthly_cost is None, label  # unknown is never $0
    # custom types the program declares all have a pricing function or a free entry
    unknown_types = {
        r.resource.type for r in cloud if r.resource.type not in PRICERS and r.resource.type not in FREE_TYPES
    }
    assert not unknown_types, f"types with no pricing function: {sorted(unknown_types)}"


@pytest.mark.parametrize("path", STACK_FILES, ids=_ids(STACK_FILES))
def test_every_priced_line_is_the_hand_worked_figure(estimates, path):
    """Fleet lines (zone mean of the catalog rows x 730 h x nodes, per purchase option), disks, buckets,
    NAT and addresses: each line of each stack against the figure worked by hand in EXPECTED."""
    stack = _ids([path])[0]
    est = estimates(path)
    got = priced_lines(est)
    assert set(got) == set(EXPECTED[stack]), "priced resources differ from the hand-worked list"
    for name, lines in EXPECTED[stack].items():
        assert set(got[name]) == set(lines), name
        for line, usd in lines.items():
            assert got[name][line] == pytest.approx(usd, rel=1e-9, abs=1e-9), (name, line)


@pytest.mark.parametrize("path", STACK_FILES, ids=_ids(STACK_FILES))
def test_stack_total_is_the_hand_worked_sum(estimates, path):
    stack = _ids([path])[0]
    est = estimates(path)
    assets = [r for r in est.resources if r.resource.type in ASSET_TYPES]
    assert len(assets) == 6, "the agent, train.py and its 2 modules, the boot and resize scripts, on every cloud"
    assert all(r.status == PRICED and 0 < r.monthly_cost < MAX_ASSET_USD for r in assets), [
        (r.resource.name, r.monthly_cost) for r in assets
    ]
    for r in assets:
        inputs = r.resource.inputs
        text = inputs["content"] if "content" in inputs else inputs["source"]["text"]
        expected = len(text.encode()) / 1e9 * ASSET_RATE[r.resource.type]
        assert r.monthly_cost == pytest.approx(expected, rel=1e-9), r.resource.name
    slack = MAX_ASSET_USD * len(assets) + 1e-9
    assert est.monthly_total == pytest.approx(hand_total(stack), abs=slack)
    # no stack sets job.planned_hours, so the planned job is one 730-hour month and costs the same
    assert est.usage["job_hours"].value == HOURS and est.usage["hours_per_month"].value == HOURS
    assert est.job_total == pytest.approx(hand_total(stack), abs=slack)


@pytest.mark.parametrize("path", STACK_FILES, ids=_ids(STACK_FILES))
def test_usage_is_labelled_and_counts_add_up(estimates, path):
    est = estimates(path)
    for key in ("job_hours", "hours_per_month", "checkpoint_gb", "egress_gb_per_month"):
        assert est.usage[key].source, key
    data = est.to_json()
    assert data["counts"]["priced"] + data["counts"]["free"] + data["counts"]["not priced"] == len(
        est.resources
    )


def test_preview_cli_json_is_the_hand_worked_total(estimates, trainfleet):
    path = STACKS / "Pulumi.dev.yaml"
    result = trainfleet("preview", "--stack", "dev", "--json", "--fail-above", "1806.64")
    assert result.code == 0, result.stderr  # $1,805.64 is under the guardrail
    data = result.json()
    assert data["stack"] == "dev"
    assert data["monthly_cost"] == pytest.approx(hand_total("dev"), abs=0.01)
    assert {r["urn"] for r in data["resources"]} == {r.resource.urn for r in estimates(path).resources}


def test_fail_above_exits_1_naming_the_cost_drivers(trainfleet):
    # dev costs $1,801.45 a month, most of it dev-asg ($1,689.05 + $16.00)
    result = trainfleet("preview", "--stack", "dev", "--fail-above", "1800.45")
    assert result.code == 1, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert "exceeds the guardrail" in errors[0] and "dev-asg" in errors[0]


def test_budget_fail_above_usd_is_the_stack_guardrail(tmp_path, trainfleet):
    text = (STACKS / "Pulumi.dev.yaml").read_text()
    assert "monthly_limit_usd: 2000" in text
    guarded = tmp_path / "Pulumi.guarded.yaml"
    guarded.write_text(
        text.replace("monthly_limit_usd: 2000", "monthly_limit_usd: 2000\n    fail_above_usd: 50")
    )
    result = trainfleet("preview", "--stack", str(guarded), "--json")
    assert result.code == 1
    assert "fail_above_usd" in result.stderr and "$50.00" in result.stderr
    assert result.json()["guardrail_usd"] == 50  # the estimate is still printed


def test_bad_input_is_one_line(tmp_path, trainfleet):
    assert_one_line_error(trainfleet("preview"), "--stack")
    assert_one_line_error(trainfleet("preview", "--stack", "nope"), "Pulumi.nope.yaml", "does not exist")
    bad = tmp_path / "usage.yaml"
    bad.write_text("job_hour: 10\n")
    assert_one_line_error(
        trainfleet("preview", "--stack", "dev", "--usage-file", str(bad)), "job_hour", "job_hours"
    )
