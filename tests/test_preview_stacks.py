"""`trainfleet preview` over every stack in stacks/: the real program under Pulumi's mock runtime, priced.

One offline run per stack (module-scoped), reused by every assertion about it.
"""

from __future__ import annotations

import statistics

import pytest

from cli.preview.engine import estimate_stack
from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED
from cli.preview.pricing import FREE_TYPES, PRICERS
from infra.catalog import default_catalog
from infra.stack_file import read_stack_file
from tests.conftest import STACKS, assert_one_line_error

STACK_FILES = sorted(STACKS.glob("Pulumi.*.yaml"))
GROUP_TYPES = {
    "aws:autoscaling/group:Group",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
    "azure-native:compute:VirtualMachineScaleSet",
}


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


def test_there_are_stacks_to_preview():
    assert STACK_FILES, "stacks/ has no Pulumi.<env>.yaml"


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
def test_fleet_cost_is_nodes_times_hours_times_catalog_price(estimates, path):
    from infra.program import fleet_zones

    est = estimates(path)
    config = read_stack_file(path).config
    hours = est.usage["hours_per_month"].value
    job_hours = est.usage["job_hours"].value
    catalog = default_catalog()
    for fleet in config.fleets:
        groups = [
            r
            for r in est.resources
            if r.resource.type in GROUP_TYPES and r.resource.parent.endswith(f"::{fleet.name}")
        ]
        assert len(groups) == 1, (fleet.name, [g.resource.name for g in groups])
        group = groups[0]
        assert group.status == PRICED, group.reason
        offers = catalog.offers(cloud=fleet.cloud, region=fleet.region, instance_type=fleet.instance_type)
        zones = fleet_zones(fleet)
        pool = [o for o in offers if o.zone in zones] or offers
        for purchase, nodes in (("spot", fleet.spot_nodes), ("on-demand", fleet.on_demand_nodes)):
            lines = [c for c in group.components if c.name.startswith(f"{fleet.instance_type} {purchase} (")]
            if nodes == 0:
                assert not lines, (fleet.name, purchase)
                continue
            assert len(lines) == 1, (fleet.name, purchase, [c.name for c in group.components])
            price = statistics.fmean(o.price(purchase) for o in pool if o.price(purchase) is not None)
            assert lines[0].unit == "node-hour"
            assert lines[0].monthly_cost == pytest.approx(nodes * hours * price)
            assert lines[0].job_cost == pytest.approx(nodes * job_hours * price)


@pytest.mark.parametrize("path", STACK_FILES, ids=_ids(STACK_FILES))
def test_totals_add_up_and_usage_is_labelled(estimates, path):
    est = estimates(path)
    assert est.monthly_total == pytest.approx(sum(r.monthly_cost or 0 for r in est.resources))
    assert est.monthly_total > 0
    for key in ("job_hours", "hours_per_month", "checkpoint_gb", "egress_gb_per_month"):
        assert est.usage[key].source, key
    data = est.to_json()
    assert data["counts"]["priced"] + data["counts"]["free"] + data["counts"]["not priced"] == len(
        est.resources
    )


def test_preview_cli_json_matches_the_library(estimates, trainfleet):
    path = STACK_FILES[0]
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    est = estimates(path)
    result = trainfleet("preview", "--stack", stack, "--json", "--fail-above", f"{est.monthly_total + 1:.2f}")
    assert result.code == 0, result.stderr  # under the guardrail
    data = result.json()
    assert data["stack"] == stack
    assert data["monthly_cost"] == pytest.approx(estimates(path).monthly_total, abs=0.01)
    assert {r["urn"] for r in data["resources"]} == {r.resource.urn for r in estimates(path).resources}


def test_fail_above_exits_1_naming_the_cost_drivers(estimates, trainfleet):
    path = STACK_FILES[0]
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    est = estimates(path)
    top = est.drivers(1)[0]
    below = est.monthly_total - 1
    result = trainfleet("preview", "--stack", stack, "--fail-above", f"{below:.2f}")
    assert result.code == 1, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert "exceeds the guardrail" in errors[0] and top.resource.name in errors[0]


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
