"""Pricing functions against the real program on each cloud: purchase options, usage, unknown types."""

from __future__ import annotations

import importlib.util
import math
import statistics
from pathlib import Path

import pytest

from cli.preview.engine import estimate_config
from cli.preview.model import NOT_PRICED, PRICED, Resource
from cli.preview.pricing import FREE_TYPES, PRICERS, PricingContext, price_resource
from cli.preview.pricing.rates import RATES, sources
from cli.preview.usage import UsageFile, resolve_usage
from infra.catalog import default_catalog
from infra.config import StackConfig
from tests.test_preview_stacks import GROUP_TYPES

JOB = {"name": "llama-7b", "params": "7B", "tokens": "20B"}
BUDGET = {"monthly_limit_usd": 50000, "recipients": ["ml-platform@example.com"]}
CONFIGS = {
    "aws-mixed": {
        "job": {**JOB, "planned_hours": 120},
        "fleets": [
            {
                "name": "mixed",
                "cloud": "aws",
                "region": "us-east-1",
                "zones": ["use1-az1", "use1-az4"],
                "instance_type": "p4d.24xlarge",
                "nodes": 5,
                "purchase": "mixed",
                "on_demand_base": 1,
                "on_demand_percentage_above_base": 50,
            }
        ],
        "budget": BUDGET,
    },
    "gcp-spot": {
        "job": JOB,
        "fleets": [
            {
                "name": "gpus",
                "cloud": "gcp",
                "region": "us-central1",
                "instance_type": "a2-ultragpu-8g",
                "nodes": 2,
            }
        ],
        "budget": BUDGET,
    },
    "azure-spot": {
        "job": JOB,
        "fleets": [
            {
                "name": "gpus",
                "cloud": "azure",
                "region": "eastus",
                "instance_type": "Standard_ND96asr_v4",
                "nodes": 3,
            }
        ],
        "budget": BUDGET,
    },
}


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


def catalog_price(fleet, purchase):
    from infra.program import fleet_zones

    offers = default_catalog().offers(
        cloud=fleet.cloud, region=fleet.region, instance_type=fleet.instance_type
    )
    zones = fleet_zones(fleet)
    pool = [o for o in offers if o.zone in zones] or offers
    return statistics.fmean(o.price(purchase) for o in pool if o.price(purchase) is not None)


def test_mixed_policy_prices_spot_and_on_demand_parts_separately(estimates):
    config, est = estimates("aws-mixed")
    fleet = config.fleets[0]
    assert (fleet.on_demand_nodes, fleet.spot_nodes) == (1 + math.ceil(4 * 0.5), 2)
    group, lines = fleet_lines(est, fleet)
    assert group.status == PRICED and set(lines) == {"spot", "on-demand"}
    for purchase, nodes in (("on-demand", 3), ("spot", 2)):
        price = catalog_price(fleet, purchase)
        assert lines[purchase].quantity == nodes * 730
        assert lines[purchase].unit_price == pytest.approx(price)
        assert lines[purchase].monthly_cost == pytest.approx(nodes * 730 * price)
        # planned job: the stack's job.planned_hours (120 h)
        assert lines[purchase].job_cost == pytest.approx(nodes * 120 * price)
    assert est.usage["job_hours"].value == 120 and "planned_hours" in est.usage["job_hours"].source
    # the spot price differs by zone: the two zones the fleet names, not the whole region
    assert catalog_price(fleet, "spot") != pytest.approx(
        statistics.fmean(
            o.spot_usd_per_hour
            for o in default_catalog().offers(cloud="aws", region="us-east-1", instance_type="p4d.24xlarge")
        )
    )


@pytest.mark.parametrize("name", ["gcp-spot", "azure-spot"])
def test_gcp_and_azure_fleets_use_their_catalog_spot_price(estimates, name):
    config, est = estimates(name)
    fleet = config.fleets[0]
    group, lines = fleet_lines(est, fleet)
    assert group.status == PRICED and set(lines) == {"spot"}
    assert lines["spot"].monthly_cost == pytest.approx(fleet.nodes * 730 * catalog_price(fleet, "spot"))
    unpriced = [r for r in est.resources if r.status not in ("priced", "free")]
    assert not unpriced, [(r.resource.type, r.reason) for r in unpriced]


def test_usage_file_overrides_hours_checkpoint_and_egress(estimates, tmp_path):
    usage = UsageFile(job_hours=100, hours_per_month=200, checkpoint_gb=500, egress_gb_per_month=200)
    config, est = estimates("aws-mixed", usage)
    fleet = config.fleets[0]
    _, lines = fleet_lines(est, fleet)
    assert lines["spot"].job_cost == pytest.approx(2 * 100 * catalog_price(fleet, "spot"))
    # the fleet runs 200 h a month; the NAT gateway stays up all month
    assert lines["spot"].monthly_cost == pytest.approx(2 * 200 * catalog_price(fleet, "spot"))
    nat = next(r for r in est.resources if r.resource.type == "aws:ec2/natGateway:NatGateway")
    assert nat.components[0].quantity == 730 and nat.monthly_cost == pytest.approx(
        730 * RATES["aws-nat-gateway-hour"].usd
    )
    bucket = next(
        r
        for r in est.resources
        if r.resource.type == "aws:s3/bucket:Bucket" and r.resource.parent.endswith(f"::{fleet.name}-ckpt")
    )
    storage = next(c for c in bucket.components if c.unit == "GB-month")
    egress = next(c for c in bucket.components if "transfer" in c.name)
    assert storage.monthly_cost == pytest.approx(500 * RATES["aws-s3-standard"].usd)
    assert egress.monthly_cost == pytest.approx(200 * RATES["aws-egress-internet"].usd)
    assert est.usage["job_hours"].source.startswith("usage file")
    # the bucket the billing export writes into holds billing data, not checkpoints
    billing = next(
        r
        for r in est.resources
        if r.resource.type == "aws:s3/bucket:Bucket" and r.resource.parent.endswith("::aws-billing")
    )
    assert [c.quantity for c in billing.components] == [est.usage["billing_export_gb"].value]


def test_default_usage_is_labelled():
    config = StackConfig.from_sections(CONFIGS["gcp-spot"])
    usage = resolve_usage(config)
    assert usage["job_hours"].source.startswith("default")
    assert usage["checkpoint_gb"].value == pytest.approx(7e9 * 14 * 3 / 1e9)
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


def _sdk_tokens(token: str) -> bool:
    """Whether the installed provider SDK declares this type token (so a typo cannot hide here)."""
    package, module = token.split(":")[0], token.split(":")[1].split("/")[0]
    pkg = {
        "aws": "pulumi_aws",
        "gcp": "pulumi_gcp",
        "azure-native": "pulumi_azure_native",
        "random": "pulumi_random",
    }
    spec = importlib.util.find_spec(pkg[package])
    if spec is None:
        return True  # provider not installed here: nothing to check against
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
