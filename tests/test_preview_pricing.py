"""Pricing functions against the real program on each cloud: purchase options, usage, unknown types.

Expected figures are worked by hand from the offers.csv rows each comment quotes, and from the list
prices in tests/test_preview_stacks.py (each with its pricing-page URL); nothing here asks the catalog,
the rate table or the pricing code for an expected number.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cli.preview.engine import estimate_config
from cli.preview.model import NOT_PRICED, PRICED, Resource
from cli.preview.pricing import FREE_TYPES, PRICERS, PricingContext, price_resource
from cli.preview.pricing.rates import sources
from cli.preview.usage import UsageFile, resolve_usage
from infra.catalog import default_catalog
from infra.config import StackConfig
from tests.needs import need
from tests.test_preview_stacks import (
    AWS_EGRESS_GB,
    AWS_NAT_HOUR,
    GROUP_TYPES,
    HOURS,
    S3_STANDARD,
)

JOB = {"name": "llama-7b", "params": "7B", "tokens": "20B"}
BUDGET = {"monthly_limit_usd": 50000, "recipients": ["ml-platform@example.com"]}


def one_fleet(fleet: dict, **job) -> dict:
    return {"job": {**JOB, **job}, "fleets": [fleet], "budget": BUDGET}


CONFIGS = {
    "aws-mixed": one_fleet(
        {
            "name": "mixed",
            "cloud": "aws",
            "region": "us-east-1",
            # one zone: five nodes share a cluster placement group (rule aws-placement-group-one-zone)
            "zones": ["use1-az4"],
            "instance_type": "p4d.24xlarge",
            "nodes": 5,
            "purchase": "mixed",
            "on_demand_base": 1,
            "on_demand_percentage_above_base": 50,
        },
        planned_hours=120,
    ),
    "gcp-spot": one_fleet(
        {
            "name": "gpus",
            "cloud": "gcp",
            "region": "us-central1",
            "instance_type": "a2-ultragpu-8g",
            "nodes": 2,
        }
    ),
    "gcp-on-demand": one_fleet(
        {
            "name": "gpus",
            "cloud": "gcp",
            "region": "us-central1",
            "instance_type": "a2-ultragpu-8g",
            "nodes": 1,
            "purchase": "on-demand",
        }
    ),
    "azure-spot": one_fleet(
        {
            "name": "gpus",
            "cloud": "azure",
            "region": "eastus",
            "instance_type": "Standard_ND96asr_v4",
            "nodes": 3,
        }
    ),
}

# p4d.24xlarge in us-east-1, offers.csv (cloud,region,zone,instance_type ... on_demand, spot ... source):
#   aws,us-east-1,use1-az1,p4d.24xlarge ... 21.957642,2.465500 ... skypilot-aws
#   aws,us-east-1,use1-az2,p4d.24xlarge ... 21.957642,8.191500 ... skypilot-aws
#   aws,us-east-1,use1-az4,p4d.24xlarge ... 21.957642,8.120300 ... skypilot-aws
#   aws,us-east-1,use1-az6,p4d.24xlarge ... 21.957642,7.879900 ... skypilot-aws
P4D_ON_DEMAND = 21.957642  # the same in every zone of the region
P4D_SPOT_AZ4 = 8.1203  # the mixed fleet's zone, use1-az4
P4D_SPOT_US_EAST_1 = (2.4655 + 8.1915 + 8.1203 + 7.8799) / 4  # = 6.6643: every zone of the region
# and in us-west-2:
#   aws,us-west-2,usw2-az1,p4d.24xlarge ... 21.95764,7.999200 ... skypilot-aws
#   aws,us-west-2,usw2-az2,p4d.24xlarge ... 21.95764,8.225900 ... skypilot-aws
#   aws,us-west-2,usw2-az3,p4d.24xlarge ... 21.95764,9.731500 ... skypilot-aws
#   aws,us-west-2,usw2-az4,p4d.24xlarge ... 21.95764,8.479400 ... skypilot-aws
P4D_SPOT_US_WEST_2 = (7.9992 + 8.2259 + 9.7315 + 8.4794) / 4  # = 8.609

# a2-ultragpu-8g in us-central1: offers.csv has zones a and c, each "price = host row + GPU row":
#   gcp,us-central1,us-central1-a,a2-ultragpu-8g ... 23.56656,20.11024 ... skypilot-gcp
#   gcp,us-central1,us-central1-c,a2-ultragpu-8g ... 23.56656,20.11024 ... skypilot-gcp
# summed from skypilot-catalog v8 gcp/vms.csv (shared/data/catalog/gcp_accel.csv), same in both zones:
#   a2-ultragpu-8g,96.0,1360.0,,,,us-central1,us-central1-a,8.79698,4.39824       (host VM)
#   ,,,A100-80GB,8,...,us-central1,us-central1-a,14.76958,15.712                  (8 x A100-80GB)
A2_ULTRA_8G_ON_DEMAND = 8.79698 + 14.76958  # = 23.56656
A2_ULTRA_8G_SPOT = 4.39824 + 15.712  # = 20.11024 (the source's GPU spot price is above its on-demand one)

# Standard_ND96asr_v4: Azure rows carry no zone, one row per region:
#   azure,eastus,,Standard_ND96asr_v4 ... 27.197,2.99167 ... skypilot-azure
#   azure,southcentralus,,Standard_ND96asr_v4 ... 32.63,3.5893 ... (another region: not used)
ND96ASR_SPOT_EASTUS = 2.99167


@pytest.fixture(scope="module")
def estimates():
    cache = {}

    def get(name, usage_file=None):
        key = (name, usage_file)
        if key not in cache:
            config = StackConfig.from_sections(CONFIGS[name])
            cache[key] = (config, estimate_config(name, config, usage_file=usage_file))
        return cache[key]

    return get


def fleet_lines(est, fleet):
    group = next(
        r
        for r in est.resources
        if r.resource.type in GROUP_TYPES and r.resource.parent.endswith(f"::{fleet.name}")
    )
    lines = {}
    for c in group.components:
        for purchase in ("spot", "on-demand"):
            if c.name.startswith(f"{fleet.instance_type} {purchase} ("):
                lines[purchase] = c
    return group, lines


def test_mixed_policy_prices_spot_and_on_demand_parts_separately(estimates):
    config, est = estimates("aws-mixed")
    fleet = config.fleets[0]
    # 5 nodes, base 1, 50% above it: 1 + ceil(4 x 0.5) = 3 on-demand, 2 spot (the ASG's own split:
    # https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html)
    group, lines = fleet_lines(est, fleet)
    assert group.status == PRICED and set(lines) == {"spot", "on-demand"}
    assert lines["on-demand"].name == "p4d.24xlarge on-demand (3 nodes)"
    assert lines["spot"].name == "p4d.24xlarge spot (2 nodes)"
    assert lines["on-demand"].quantity == 3 * HOURS
    assert lines["spot"].quantity == 2 * HOURS
    assert lines["on-demand"].unit_price == pytest.approx(21.957642)
    assert lines["spot"].unit_price == pytest.approx(8.1203)  # its zone's price, not the region's mean
    # 3 x 730 h x $21.957642 = $48,087.24; 2 x 730 h x $8.1203 = $11,855.64
    assert lines["on-demand"].monthly_cost == pytest.approx(3 * HOURS * P4D_ON_DEMAND)
    assert lines["on-demand"].monthly_cost == pytest.approx(48087.23598)
    assert lines["spot"].monthly_cost == pytest.approx(2 * HOURS * P4D_SPOT_AZ4)
    assert lines["spot"].monthly_cost == pytest.approx(11855.638)
    # planned job: the stack's job.planned_hours (120 h): $7,904.75 and $1,948.87
    assert lines["on-demand"].job_cost == pytest.approx(3 * 120 * P4D_ON_DEMAND)
    assert lines["spot"].job_cost == pytest.approx(2 * 120 * P4D_SPOT_AZ4)
    assert est.usage["job_hours"].value == 120 and "planned_hours" in est.usage["job_hours"].source


def test_gcp_spot_vm_is_host_row_plus_gpu_row(estimates):
    config, est = estimates("gcp-spot")
    group, lines = fleet_lines(est, config.fleets[0])
    assert group.status == PRICED and set(lines) == {"spot"}
    # no zones in the config: every catalog zone (a, c), same price: 2 x 730 h x $20.11024 = $29,360.95
    assert lines["spot"].monthly_cost == pytest.approx(2 * HOURS * A2_ULTRA_8G_SPOT)
    assert lines["spot"].monthly_cost == pytest.approx(29360.9504)
    unpriced = [r for r in est.resources if r.status not in ("priced", "free")]
    assert not unpriced, [(r.resource.type, r.reason) for r in unpriced]


def test_gcp_on_demand_vm_is_host_row_plus_gpu_row(estimates):
    config, est = estimates("gcp-on-demand")
    group, lines = fleet_lines(est, config.fleets[0])
    assert group.status == PRICED and set(lines) == {"on-demand"}
    # 1 x 730 h x (8.79698 + 14.76958) = $17,203.59
    assert lines["on-demand"].monthly_cost == pytest.approx(1 * HOURS * A2_ULTRA_8G_ON_DEMAND)
    assert lines["on-demand"].monthly_cost == pytest.approx(17203.5888)


def test_azure_scale_set_uses_its_regions_row(estimates):
    config, est = estimates("azure-spot")
    group, lines = fleet_lines(est, config.fleets[0])
    assert group.status == PRICED and set(lines) == {"spot"}
    # eastus only (southcentralus is $3.5893): 3 x 730 h x $2.99167 = $6,551.76
    assert lines["spot"].monthly_cost == pytest.approx(3 * HOURS * ND96ASR_SPOT_EASTUS)
    assert lines["spot"].monthly_cost == pytest.approx(6551.7573)
    unpriced = [r for r in est.resources if r.status not in ("priced", "free")]
    assert not unpriced, [(r.resource.type, r.reason) for r in unpriced]


def test_usage_file_overrides_hours_checkpoint_and_egress(estimates):
    usage = UsageFile(job_hours=100, hours_per_month=200, checkpoint_gb=500, egress_gb_per_month=200)
    config, est = estimates("aws-mixed", usage)
    fleet = config.fleets[0]
    _, lines = fleet_lines(est, fleet)
    # the fleet runs 200 h a month and the job 100 h: 2 x 200 x $8.1203 = $3,248.12, 2 x 100 x $8.1203
    assert lines["spot"].monthly_cost == pytest.approx(2 * 200 * P4D_SPOT_AZ4)
    assert lines["spot"].monthly_cost == pytest.approx(3248.12)
    assert lines["spot"].job_cost == pytest.approx(2 * 100 * P4D_SPOT_AZ4)
    # the NAT gateway stays up all month whatever the fleet does: 730 h x $0.045 = $32.85
    nat = next(r for r in est.resources if r.resource.type == "aws:ec2/natGateway:NatGateway")
    assert nat.components[0].quantity == HOURS
    assert nat.monthly_cost == pytest.approx(HOURS * AWS_NAT_HOUR) and nat.monthly_cost == pytest.approx(
        32.85
    )
    bucket = next(
        r
        for r in est.resources
        if r.resource.type == "aws:s3/bucket:Bucket" and r.resource.parent.endswith(f"::{fleet.name}-ckpt")
    )
    storage = next(c for c in bucket.components if c.unit == "GiB-month")
    egress = next(c for c in bucket.components if "transfer" in c.name)
    assert storage.monthly_cost == pytest.approx(500 * S3_STANDARD)  # 465.66 GiB: $10.71
    assert egress.monthly_cost == pytest.approx(200 * AWS_EGRESS_GB)  # $18.00
    assert est.usage["job_hours"].source.startswith("usage file")
    # the bucket the billing export writes into holds billing data (1 GB by default), not checkpoints
    billing = next(
        r
        for r in est.resources
        if r.resource.type == "aws:s3/bucket:Bucket" and r.resource.parent.endswith("::aws-billing")
    )
    assert [c.quantity for c in billing.components] == [pytest.approx(1e9 / 2**30)]  # 1 GB in GiB
    assert billing.monthly_cost == pytest.approx(1 * S3_STANDARD)


def group_with_undeclared_subnets(region: str | None, nodes: int) -> Resource:
    """An all-spot ASG whose subnets are not in the document (ids only): its zones cannot be known."""
    inputs = {
        "desiredCapacity": nodes,
        "vpcZoneIdentifiers": ["subnet-0aaa", "subnet-0bbb"],
        "mixedInstancesPolicy": {
            "instancesDistribution": {"onDemandBaseCapacity": 0, "onDemandPercentageAboveBaseCapacity": 0},
            "launchTemplate": {"overrides": [{"instanceType": "p4d.24xlarge"}]},
        },
    }
    if region:
        inputs["region"] = region
    return Resource(
        "aws:autoscaling/group:Group", "g", "urn:pulumi:s::p::aws:autoscaling/group:Group::g", inputs=inputs
    )


def spot_line(priced) -> object:
    return next(c for c in priced.components if " spot (" in c.name)


def test_unknown_zones_fall_back_to_every_zone_of_the_provider_region():
    ctx = PricingContext(default_catalog(), resolve_usage(None), [], {"aws": "us-east-1"})
    priced = price_resource(group_with_undeclared_subnets(None, nodes=2), ctx)
    assert priced.status == PRICED
    # mean of use1-az1, az2, az4, az6 = $6.6643/h x 730 h x 2 nodes = $9,729.88
    assert spot_line(priced).unit_price == pytest.approx(6.6643)
    assert spot_line(priced).monthly_cost == pytest.approx(2 * HOURS * P4D_SPOT_US_EAST_1)
    assert "every zone of the region" in spot_line(priced).note


def test_unknown_zones_fall_back_to_the_resources_own_region_not_the_providers():
    # the provider defaults to us-east-1, the group says us-west-2 (pulumi-aws 7's per-resource `region`)
    ctx = PricingContext(default_catalog(), resolve_usage(None), [], {"aws": "us-east-1"})
    priced = price_resource(group_with_undeclared_subnets("us-west-2", nodes=2), ctx)
    assert priced.status == PRICED
    # mean of usw2-az1..az4 = $8.609/h x 730 h x 2 nodes = $12,569.14
    assert spot_line(priced).unit_price == pytest.approx(8.609)
    assert spot_line(priced).monthly_cost == pytest.approx(2 * HOURS * P4D_SPOT_US_WEST_2)


def test_default_usage_is_labelled():
    config = StackConfig.from_sections(CONFIGS["gcp-spot"])
    usage = resolve_usage(config)
    assert usage["job_hours"].source.startswith("default")
    # 7e9 params x 14 B/param x keep_last 3 (the default) = 294 GB
    assert usage["checkpoint_gb"].value == pytest.approx(294.0)
    assert "keep_last" in usage["checkpoint_gb"].source


def test_unknown_type_is_not_priced_never_zero():
    ctx = PricingContext(default_catalog(), resolve_usage(None), [], {"aws": "us-east-1"})
    r = Resource(
        "aws:sagemaker/endpoint:Endpoint", "x", "urn:pulumi:s::p::aws:sagemaker/endpoint:Endpoint::x"
    )
    priced = price_resource(r, ctx)
    assert (
        priced.status == NOT_PRICED and priced.monthly_cost is None and "no pricing function" in priced.reason
    )


def test_instance_type_missing_from_catalog_is_not_priced():
    ctx = PricingContext(default_catalog(), resolve_usage(None), [], {"aws": "us-east-1"})
    r = Resource(
        "aws:autoscaling/group:Group",
        "g",
        "urn:pulumi:s::p::aws:autoscaling/group:Group::g",
        inputs={
            "desiredCapacity": 2,
            "mixedInstancesPolicy": {"launchTemplate": {"overrides": [{"instanceType": "x9.huge"}]}},
        },
    )
    priced = price_resource(r, ctx)
    assert priced.status == NOT_PRICED and priced.monthly_cost is None and "x9.huge" in priced.reason


# pulumi-random is not a trainfleet dependency, so its SDK is not here to read: its type tokens as the
# Pulumi Registry documents them (https://www.pulumi.com/registry/packages/random/api-docs/, each
# resource page's "Import" / type token line).
RANDOM_TOKENS = {
    "random:index/randomId:RandomId",
    "random:index/randomString:RandomString",
    "random:index/randomPet:RandomPet",
    "random:index/randomPassword:RandomPassword",
}
SDKS = {"aws": "pulumi_aws", "gcp": "pulumi_gcp", "azure-native": "pulumi_azure_native"}


def _sdk_tokens(token: str) -> bool:
    """Whether the installed provider SDK declares this type token (so a typo cannot hide here)."""
    package, module = token.split(":")[0], token.split(":")[1].split("/")[0]
    if package == "random":
        return token in RANDOM_TOKENS
    spec = importlib.util.find_spec(SDKS[package])
    need(spec is not None, f"python module {SDKS[package]}", "pip install -e .")
    root = Path(spec.origin).parent / module.replace("-", "_").lower()
    quoted = (f'"{token}"', f"'{token}'")
    return any(q in f.read_text() for f in root.glob("*.py") for q in quoted)


def test_every_pricing_function_names_a_real_type_token():
    tokens = sorted(t for t in {*PRICERS, *FREE_TYPES} if not t.startswith("pulumi:providers:"))
    missing = [t for t in tokens if not _sdk_tokens(t)]
    assert not missing, missing


def test_every_rate_has_provenance():
    for rate_id, src in sources().items():
        assert src["origin"].startswith("https://") and src["as_of"], rate_id
