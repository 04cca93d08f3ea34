"""Each pricing rule on its own, on resources shaped as the providers' schemas give them.

How a group splits into on-demand and spot follows the providers' documented defaults (cited per test);
unit prices are read straight from infra/catalog/data/offers.csv here, never from the pricing code.
"""

from __future__ import annotations

import csv
import re
import statistics

import pytest

from cli.preview.model import NOT_ESTIMABLE, NOT_PRICED, PRICED, Resource, UsageValue
from cli.preview.pricing import PricingContext, price_resource
from cli.preview.pricing.base import MalformedInputs
from infra.catalog import default_catalog
from infra.catalog.loader import DATA_DIR, load_catalog

OFFERS = list(csv.DictReader((DATA_DIR / "offers.csv").open()))
GROUP = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def spot_rows(cloud: str, region: str, instance_type: str) -> dict[str, float]:
    return {
        r["zone"]: float(r["spot_usd_per_hour"])
        for r in OFFERS
        if (r["cloud"], r["region"], r["instance_type"]) == (cloud, region, instance_type)
        and r["spot_usd_per_hour"]
    }


def context(*resources: Resource, catalog=None) -> PricingContext:
    usage = {
        "hours_per_month": UsageValue(730, "hours", "test"),
        "job_hours": UsageValue(100, "hours", "test"),
        "checkpoint_gb": UsageValue(500, "GB", "test"),
        "checkpoint_size_gb": UsageValue(250, "GB", "test"),
        "checkpoints_per_month": UsageValue(0, "checkpoints", "test"),
        "egress_gb_per_month": UsageValue(0, "GB", "test"),
    }
    return PricingContext(catalog or default_catalog(), usage, list(resources),
                          regions={"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"})  # fmt: skip


def res(type_token: str, name: str, inputs: dict, id: str = "", parent: str = "urn:parent") -> Resource:
    return Resource(type_token, name, f"urn:pulumi:dev::tf::{type_token}::{name}", parent, inputs, {}, id)


def split(priced) -> dict[str, int]:
    """{"on-demand": n, "spot": m} from the component names ("p4d.24xlarge spot (3 nodes)")."""
    out = {}
    for c in priced.components:
        if m := re.search(r" (on-demand|spot) \((\d+) nodes?\)$", c.name):
            out[m.group(1)] = int(m.group(2))
    return out


def lt(**inputs) -> Resource:
    return res(LT, "lt", {"instanceType": "p4d.24xlarge", **inputs}, id="lt-1")


def group(**inputs) -> Resource:
    return res(GROUP, "asg", {"launchTemplate": {"id": "lt-1"}, **inputs})


def mixed_group(nodes: int, **distribution) -> Resource:
    policy = {
        "launchTemplate": {"launchTemplateSpecification": {"launchTemplateId": "lt-1"},
                           "overrides": [{"instanceType": "p4d.24xlarge"}]},
        "instancesDistribution": distribution,
    }  # fmt: skip
    return res(GROUP, "asg", {"desiredCapacity": nodes, "mixedInstancesPolicy": policy})


# ---- AWS ---------------------------------------------------------------------------------------------


def test_a_mixed_group_without_a_percentage_is_all_on_demand_above_base():
    """onDemandPercentageAboveBaseCapacity defaults to 100 (EC2 Auto Scaling API, InstancesDistribution:
    https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_InstancesDistribution.html)."""
    priced = price_resource(mixed_group(4), context(lt()))
    assert split(priced) == {"on-demand": 4}


def test_the_on_demand_share_above_base_is_rounded_up():
    """1 base + 50% of the 3 above it = 1 + 1.5: Auto Scaling rounds the on-demand count up (same doc)."""
    priced = price_resource(mixed_group(4, onDemandBaseCapacity=1, onDemandPercentageAboveBaseCapacity=50),
                            context(lt()))  # fmt: skip
    assert split(priced) == {"on-demand": 3, "spot": 1}


def test_a_group_whose_launch_template_asks_for_spot_is_priced_spot():
    template = lt(instanceMarketOptions={"marketType": "spot"})
    assert split(price_resource(group(desiredCapacity=3), context(template))) == {"spot": 3}
    assert split(price_resource(group(desiredCapacity=3), context(lt()))) == {"on-demand": 3}


def test_the_group_runs_its_desired_capacity_not_its_min_size():
    assert split(price_resource(group(desiredCapacity=3, minSize=1), context(lt()))) == {"on-demand": 3}


def test_an_ec2_fleet_with_a_spot_target_runs_the_rest_on_demand():
    """onDemand = total - spotTargetCapacity (EC2 API, TargetCapacitySpecificationRequest)."""
    fleet = res("aws:ec2/fleet:Fleet", "fleet", {
        "targetCapacitySpecification": {"totalTargetCapacity": 4, "spotTargetCapacity": 3},
        "launchTemplateConfigs": [{"launchTemplateSpecification": {"launchTemplateId": "lt-1"}}],
    })  # fmt: skip
    assert split(price_resource(fleet, context(lt()))) == {"on-demand": 1, "spot": 3}


def test_spot_is_priced_over_the_zones_of_the_groups_subnets():
    zones = spot_rows(
        "aws", "us-east-1", "p4d.24xlarge"
    )  # use1-az1 2.4655, az2 8.1915, az4 8.1203, az6 7.8799
    subnets = [res("aws:ec2/subnet:Subnet", f"s{i}", {"availabilityZoneId": z}, id=f"subnet-{i}")
               for i, z in enumerate(["use1-az1", "use1-az4"])]  # fmt: skip
    template = lt(instanceMarketOptions={"marketType": "spot"})
    asg = group(desiredCapacity=2, vpcZoneIdentifiers=["subnet-0", "subnet-1"])
    (compute,) = price_resource(asg, context(template, *subnets)).components
    assert compute.unit_price == pytest.approx((zones["use1-az1"] + zones["use1-az4"]) / 2)
    assert compute.unit_price != pytest.approx(statistics.fmean(zones.values()))


def test_a_component_without_a_price_leaves_the_resource_not_priced_never_zero():
    template = lt(
        blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 100, "volumeType": "io9"}}]
    )
    priced = price_resource(group(desiredCapacity=2), context(template))
    assert priced.status == NOT_PRICED and priced.monthly_cost is None


def test_a_secret_capacity_is_not_estimable_never_a_default():
    priced = price_resource(group(desiredCapacity="[secret]", minSize=1), context(lt()))
    assert priced.status == NOT_ESTIMABLE and priced.monthly_cost is None


def test_a_wrong_shaped_input_stops_the_preview():
    template = lt(blockDeviceMappings=7)  # the schema has a list of mappings
    with pytest.raises(MalformedInputs, match="asg"):
        price_resource(group(desiredCapacity=2), context(template))


def test_checkpoint_storage_for_a_job_is_prorated_to_the_jobs_hours():
    """500 GB in S3 Standard for a 100-hour job costs 100/730 of a month of it (S3 bills GB-months of
    2^30 bytes, prorated by the hour: https://aws.amazon.com/s3/pricing/): 465.66 GiB-months a month."""
    priced = price_resource(res("aws:s3/bucketV2:BucketV2", "ckpt", {}), context())
    storage = next(c for c in priced.components if "storage" in c.name)
    gib = 500e9 / 2**30
    assert storage.quantity == pytest.approx(gib) and storage.job_quantity == pytest.approx(gib * 100 / 730)
    assert storage.unit == "GiB-month" and "500.000 GB = 465.661 GiB" in storage.note


# ---- GCP ---------------------------------------------------------------------------------------------

TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"


def gcp_template(**inputs) -> Resource:
    return res(TEMPLATE, "tpl", {"machineType": "a2-ultragpu-8g", **inputs}, id="tpl-1")


def gcp_group(**inputs) -> Resource:
    return res("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager", "mig",
               {"targetSize": 2, "versions": [{"instanceTemplate": "tpl-1"}], **inputs})  # fmt: skip


def test_preemptible_vms_are_priced_as_spot():
    """`scheduling.preemptible: true` is the legacy spot model and bills at spot prices
    (https://cloud.google.com/compute/docs/instances/preemptible)."""
    assert split(price_resource(gcp_group(), context(gcp_template(scheduling={"preemptible": True})))) == {
        "spot": 2
    }
    assert split(price_resource(gcp_group(), context(gcp_template()))) == {"on-demand": 2}


def test_a_zonal_group_is_priced_in_its_zones_region():
    zonal = res("gcp:compute/instanceGroupManager:InstanceGroupManager", "mig",
                {"zone": "us-central1-a", "targetSize": 1, "versions": [{"instanceTemplate": "tpl-1"}]})  # fmt: skip
    assert price_resource(zonal, context(gcp_template())).status == PRICED


def test_each_nodes_persistent_disk_is_counted():
    template = gcp_template(disks=[{"diskType": "pd-balanced", "diskSizeGb": 100}])
    one = price_resource(gcp_group(targetSize=1), context(template))
    three = price_resource(gcp_group(targetSize=3), context(template))
    disk = [c for c in three.components if "pd-balanced" in c.name][0]
    assert disk.quantity == pytest.approx(
        3 * [c for c in one.components if "pd-balanced" in c.name][0].quantity
    )
    assert disk.quantity == pytest.approx(300)  # 100 GB x 3 nodes for a 730-hour month


def test_a_regional_group_is_priced_over_its_distribution_zones(tmp_path):
    """The embedded GCP rows price every zone of a region alike; an overlay with a cheaper zone shows
    whether the group's own zones are used."""
    header = (DATA_DIR / "offers.csv").read_text().splitlines()[0]
    row = next(
        r
        for r in OFFERS
        if (r["region"], r["zone"], r["instance_type"]) == ("us-central1", "us-central1-c", "a2-ultragpu-8g")
    )
    overlay = tmp_path / "overlay.csv"
    overlay.write_text(header + "\n" + ",".join({**row, "spot_usd_per_hour": "5.0"}.values()) + "\n")
    catalog = load_catalog(overlays=[overlay])
    spot = gcp_template(scheduling={"provisioningModel": "SPOT"})
    in_c = price_resource(
        gcp_group(distributionPolicyZones=["us-central1-c"]), context(spot, catalog=catalog)
    )
    assert in_c.components[0].unit_price == pytest.approx(5.0)


# ---- Azure -------------------------------------------------------------------------------------------


def scale_set(**inputs) -> Resource:
    return res("azure-native:compute:VirtualMachineScaleSet", "vmss",
               {"sku": {"name": "Standard_ND96asr_v4", "capacity": 4}, **inputs})  # fmt: skip


def test_low_priority_scale_sets_are_priced_as_spot():
    """`priority: Low` is the older name for Spot on scale sets
    (https://learn.microsoft.com/en-us/rest/api/compute/virtual-machine-scale-sets/create-or-update, VirtualMachinePriorityTypes)."""
    low = scale_set(virtualMachineProfile={"priority": "Low"})
    assert split(price_resource(low, context())) == {"spot": 4}


def test_a_secret_capacity_of_a_scale_set_is_not_estimable_never_free():
    """sku.capacity defaults to 0 when unset (no nodes, free); a secret one is a size nobody can read here."""
    hidden = scale_set(sku={"name": "Standard_ND96asr_v4", "capacity": "[secret]"})
    priced = price_resource(hidden, context())
    assert priced.status == NOT_ESTIMABLE and "sku.capacity is a secret" in priced.reason


def test_a_priority_mix_without_a_percentage_is_all_spot_above_base():
    """regularPriorityPercentageAboveBase defaults to 0 (VirtualMachineScaleSet PriorityMixPolicy, same doc)."""
    mix = scale_set(priorityMixPolicy={"baseRegularPriorityCount": 1})
    assert split(price_resource(mix, context())) == {"on-demand": 1, "spot": 3}


@pytest.mark.parametrize(("size", "tier"), [(64, 64), (65, 128), (30, 32)])
def test_an_os_disk_is_billed_at_the_smallest_tier_that_holds_it(size, tier):
    """Managed disks bill by the tier the size rounds up to: 64 GB is a P6/E6 (64 GB) disk, 65 GB a 128 GB one
    (https://azure.microsoft.com/pricing/details/managed-disks/)."""
    os_disk = {"diskSizeGB": size, "managedDisk": {"storageAccountType": "Premium_LRS"}}
    priced = price_resource(
        scale_set(virtualMachineProfile={"storageProfile": {"osDisk": os_disk}}), context()
    )
    (disk,) = [c for c in priced.components if "OS disk" in c.name]
    assert f"({tier} GB tier)" in disk.name


def test_per_network_card_templates_with_unknown_ids_still_price_the_root_volumes():
    """In a real `pulumi preview` a new launch template's id is unknown until apply. A group with one template per
    network-card layout (prod: 4 cards for p4de, 32 for p5) still finds its root volumes, since the sibling
    templates declare the same disks: 500 GB gp3 x 4 nodes x $0.08 = $160 a month, never a silent $0."""
    from cli.preview.pricing.base import UNKNOWN

    def template(name: str, cards: int) -> Resource:
        disks = [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 500, "volumeType": "gp3"}}]
        nics = [{"networkCardIndex": i, "interfaceType": "efa"} for i in range(cards)]
        return res(LT, name, {"blockDeviceMappings": disks, "networkInterfaces": nics}, id=UNKNOWN)

    spec = {"launchTemplateId": UNKNOWN, "version": "$Latest"}
    policy = {
        "launchTemplate": {"launchTemplateSpecification": spec,
                           "overrides": [{"instanceType": "p4de.24xlarge", "launchTemplateSpecification": spec},
                                         {"instanceType": "p5.48xlarge", "launchTemplateSpecification": spec}]},
        "instancesDistribution": {"onDemandBaseCapacity": 1, "onDemandPercentageAboveBaseCapacity": 0},
    }  # fmt: skip
    asg = res(GROUP, "main-asg", {"desiredCapacity": 4, "region": "us-east-1", "mixedInstancesPolicy": policy})
    priced = price_resource(asg, context(template("main-lt", 4), template("main-lt-32cards", 32)))
    ebs = [c for c in priced.components if "EBS" in c.name]
    assert len(ebs) == 1 and ebs[0].monthly_cost == pytest.approx(160.0)
    # Templates that disagree on their disks cannot stand in for each other: no guess at which one.
    other = template("main-lt-32cards", 32)
    other.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] = 1000
    priced = price_resource(asg, context(template("main-lt", 4), other))
    assert not [c for c in priced.components if "EBS" in c.name]
