"""AWS disks, IOPS, throughput and public IPv4, and unknown or secret values inside lists (issue 17, AWS part).

Every expected dollar figure is worked by hand below from the us-east-1 list prices of
https://aws.amazon.com/ebs/pricing/ and https://aws.amazon.com/vpc/pricing/ (never read from the rate table or
the pricing code):

    gp3  $0.08 per GB-month; 3,000 IOPS and 125 MB/s included, then $0.005 per provisioned IOPS-month and
         $0.04 per provisioned MB/s-month above them
    gp2  $0.10 per GB-month
    io1  $0.125 per GB-month and $0.065 per provisioned IOPS-month (flat)
    io2  $0.125 per GB-month; IOPS $0.065 per IOPS-month up to 32,000, $0.0455 from 32,001 to 64,000,
         $0.03185 above 64,000 (the AWS Price List API figures; the pricing page rounds the last two to
         $0.046 and $0.032)
    sc1  $0.015 per GB-month
    public IPv4 address $0.005 per hour (https://aws.amazon.com/vpc/pricing/, since 2024-02-01)
"""

from __future__ import annotations

import pytest

from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED, Resource, UsageValue
from cli.preview.pricing import PricingContext, price_resource
from cli.preview.pricing.base import SECRET, UNKNOWN, MalformedInputs
from infra.catalog import default_catalog

GP3_GB, GP3_IOPS, GP3_MBPS = 0.08, 0.005, 0.04
GP2_GB = 0.10
IO1_GB, IO1_IOPS = 0.125, 0.065
IO2_GB, IO2_IOPS_1, IO2_IOPS_2, IO2_IOPS_3 = 0.125, 0.065, 0.0455, 0.03185
SC1_GB = 0.015
IPV4_HOUR = 0.005

VOLUME = "aws:ebs/volume:Volume"
GROUP = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
FLEET = "aws:ec2/fleet:Fleet"
INSTANCE = "aws:ec2/instance:Instance"
# how `pulumi preview --json` writes a secret it shows in an object (pulumi/runtime/rpc.py)
SECRET_OBJECT = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": "x"}


def context(*resources: Resource, hours: float = 730) -> PricingContext:
    usage = {
        "hours_per_month": UsageValue(hours, "hours", "test"),
        "job_hours": UsageValue(100, "hours", "test"),
    }
    return PricingContext(default_catalog(), usage, list(resources), regions={"aws": "us-east-1"})


def res(type_token: str, name: str, inputs: dict, id: str = "") -> Resource:
    return Resource(
        type_token, name, f"urn:pulumi:dev::tf::{type_token}::{name}", "urn:parent", inputs, {}, id
    )


def lines(priced) -> dict[str, float]:
    return {c.name: c.monthly_cost for c in priced.components}


def disk_lines(priced) -> dict[str, float]:
    return {c.name: c.monthly_cost for c in priced.components if c.name.startswith("EBS")}


def template(**inputs) -> Resource:
    return res(LT, "lt", {"instanceType": "p4d.24xlarge", **inputs}, id="lt-1")


def group(**inputs) -> Resource:
    return res(GROUP, "asg", {"desiredCapacity": 4, "launchTemplate": {"id": "lt-1"}, **inputs})


def mixed_group(overrides) -> Resource:
    policy = {
        "launchTemplate": {
            "launchTemplateSpecification": {"launchTemplateId": "lt-1"},
            "overrides": overrides,
        }
    }
    return res(GROUP, "asg", {"desiredCapacity": 2, "mixedInstancesPolicy": policy})


def fleet(**inputs) -> Resource:
    spec = {"targetCapacitySpecification": {"totalTargetCapacity": 3, "defaultTargetCapacityType": "on-demand"},
            "launchTemplateConfigs": [{"launchTemplateSpecification": {"launchTemplateId": "lt-1"}}]}  # fmt: skip
    return res(FLEET, "fleet", {**spec, **inputs})


def instance(**inputs) -> Resource:
    return res(INSTANCE, "box", {"instanceType": "p4d.24xlarge", **inputs})


# ---- a) standalone volumes -----------------------------------------------------------------------------------


def test_a_standalone_gp3_volume_bills_storage_iops_and_throughput_each_on_its_own_line():
    # 500 GB x $0.08 = $40; (6,000 - 3,000) IOPS x $0.005 = $15; (250 - 125) MB/s x $0.04 = $5: $60 a month
    vol = res(VOLUME, "data", {"availabilityZone": "us-east-1a", "size": 500, "type": "gp3",
                               "iops": 6000, "throughput": 250})  # fmt: skip
    priced = price_resource(vol, context())
    assert priced.status == PRICED
    assert lines(priced) == pytest.approx({
        "EBS gp3 500 GB": 500 * GP3_GB,  # 40
        "EBS gp3 IOPS above 3,000 (3,000)": 3000 * GP3_IOPS,  # 15
        "EBS gp3 throughput above 125 MB/s (125 MB/s)": 125 * GP3_MBPS,  # 5
    })  # fmt: skip
    assert priced.monthly_cost == pytest.approx(60.0)
    # a standalone volume exists all month: the 100-hour job pays 100/730 of it
    assert priced.job_cost == pytest.approx(60.0 * 100 / 730)


def test_a_volume_without_a_type_is_gp2_the_providers_default():
    """pulumi-aws aws.ebs.Volume `type`: "Can be standard, gp2, gp3, io1, io2, sc1 or st1 (Default: gp2)"
    (https://www.pulumi.com/registry/packages/aws/api-docs/ebs/volume/). 100 GB x $0.10 = $10 a month."""
    priced = price_resource(res(VOLUME, "plain", {"availabilityZone": "us-east-1a", "size": 100}), context())
    assert priced.status == PRICED and priced.monthly_cost == pytest.approx(100 * GP2_GB)
    assert "gp2" in priced.components[0].name and "default" in priced.components[0].note


def test_a_gp3_volume_at_its_baseline_has_no_iops_or_throughput_lines():
    # 3,000 IOPS and 125 MB/s are included: 200 GB x $0.08 = $16 and nothing else
    vol = res(VOLUME, "base", {"size": 200, "type": "gp3", "iops": 3000, "throughput": 125})
    assert lines(price_resource(vol, context())) == pytest.approx({"EBS gp3 200 GB": 16.0})


def test_an_io2_volume_crossing_both_tier_boundaries_bills_each_tier():
    # 1,000 GB x $0.125 = $125; 80,000 IOPS: 32,000 x $0.065 = $2,080, 32,000 x $0.0455 = $1,456,
    # 16,000 x $0.03185 = $509.60: $4,170.60 a month
    vol = res(VOLUME, "db", {"size": 1000, "type": "io2", "iops": 80000})
    priced = price_resource(vol, context())
    assert lines(priced) == pytest.approx({
        "EBS io2 1000 GB": 1000 * IO2_GB,  # 125
        "EBS io2 IOPS up to 32,000 (32,000)": 32000 * IO2_IOPS_1,  # 2,080
        "EBS io2 IOPS 32,001-64,000 (32,000)": 32000 * IO2_IOPS_2,  # 1,456
        "EBS io2 IOPS above 64,000 (16,000)": 16000 * IO2_IOPS_3,  # 509.60
    })  # fmt: skip
    assert priced.monthly_cost == pytest.approx(4170.60)


def test_an_io1_volume_has_its_own_rates_and_flat_iops():
    # 200 GB x $0.125 = $25; 40,000 IOPS x $0.065 = $2,600 (io1 is not tiered): $2,625 a month
    priced = price_resource(res(VOLUME, "old", {"size": 200, "type": "io1", "iops": 40000}), context())
    assert lines(priced) == pytest.approx(
        {"EBS io1 200 GB": 25.0, "EBS io1 provisioned IOPS (40,000)": 2600.0}
    )
    assert {c.source for c in priced.components} == {"rate:aws-ebs-io1", "rate:aws-ebs-io1-iops"}


def test_an_sc1_volume_is_priced():
    # 2,000 GB x $0.015 = $30 a month
    priced = price_resource(res(VOLUME, "cold", {"size": 2000, "type": "sc1"}), context())
    assert priced.status == PRICED and priced.monthly_cost == pytest.approx(2000 * SC1_GB)


def test_a_volume_sized_by_its_snapshot_or_with_unknown_iops_is_not_estimable():
    by_snapshot = price_resource(res(VOLUME, "restored", {"snapshotId": "snap-1", "type": "gp3"}), context())
    assert by_snapshot.status == NOT_ESTIMABLE and "size" in by_snapshot.reason
    unknown_iops = price_resource(res(VOLUME, "v", {"size": 10, "type": "io2", "iops": UNKNOWN}), context())
    assert unknown_iops.status == NOT_ESTIMABLE and "input iops is unknown until apply" in unknown_iops.reason
    assert unknown_iops.monthly_cost is None


def test_a_volume_attachment_is_free():
    attach = res("aws:ec2/volumeAttachment:VolumeAttachment", "att",
                 {"deviceName": "/dev/sdf", "instanceId": "i-1", "volumeId": "vol-1"})  # fmt: skip
    priced = price_resource(attach, context())
    assert priced.status == FREE and priced.monthly_cost == 0.0


# ---- b) IOPS and throughput on fleets and instances ------------------------------------------------------------


def test_a_fleets_disks_bill_iops_and_throughput_per_node_prorated_by_fleet_hours():
    """4 nodes running 365 of 730 hours a month; each node has a gp3 root disk (500 GB, 6,000 IOPS, 250 MB/s) and an
    io2 scratch disk (100 GB, 40,000 IOPS). A node's disks live as long as the node: half a month each.
      gp3: 500 GB x 4 x $0.08 x 0.5 = $80; 3,000 IOPS x 4 x $0.005 x 0.5 = $30; 125 MB/s x 4 x $0.04 x 0.5 = $10
      io2: 100 GB x 4 x $0.125 x 0.5 = $25; 32,000 IOPS x 4 x $0.065 x 0.5 = $4,160;
           8,000 IOPS x 4 x $0.0455 x 0.5 = $728"""
    disks = [
        {
            "deviceName": "/dev/sda1",
            "ebs": {"volumeSize": 500, "volumeType": "gp3", "iops": 6000, "throughput": 250},
        },
        {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 100, "volumeType": "io2", "iops": 40000}},
        {"deviceName": "/dev/sdc", "virtualName": "ephemeral0"},  # instance store: in the instance price
    ]
    priced = price_resource(group(), context(template(blockDeviceMappings=disks), hours=365))
    assert priced.status == PRICED
    assert disk_lines(priced) == pytest.approx({
        "EBS gp3 500 GB x 4 nodes": 500 * 4 * GP3_GB * 0.5,  # 80
        "EBS gp3 IOPS above 3,000 (3,000 x 4 nodes)": 3000 * 4 * GP3_IOPS * 0.5,  # 30
        "EBS gp3 throughput above 125 MB/s (125 MB/s x 4 nodes)": 125 * 4 * GP3_MBPS * 0.5,  # 10
        "EBS io2 100 GB x 4 nodes": 100 * 4 * IO2_GB * 0.5,  # 25
        "EBS io2 IOPS up to 32,000 (32,000 x 4 nodes)": 32000 * 4 * IO2_IOPS_1 * 0.5,  # 4,160
        "EBS io2 IOPS 32,001-64,000 (8,000 x 4 nodes)": 8000 * 4 * IO2_IOPS_2 * 0.5,  # 728
    })  # fmt: skip
    # the 100-hour job pays 100 of 730 hours of each: the gp3 IOPS line, 3,000 x 4 x $0.005 x 100/730
    iops = next(c for c in priced.components if c.name.startswith("EBS gp3 IOPS"))
    assert iops.job_cost == pytest.approx(3000 * 4 * GP3_IOPS * 100 / 730)


def test_an_ec2_fleets_disks_bill_iops_too():
    # 3 nodes, 730 h: io1 50 GB x 3 x $0.125 = $18.75; 5,000 IOPS x 3 x $0.065 = $975
    disks = [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 50, "volumeType": "io1", "iops": 5000}}]
    priced = price_resource(fleet(), context(template(blockDeviceMappings=disks)))
    assert disk_lines(priced) == pytest.approx({
        "EBS io1 50 GB x 3 nodes": 18.75, "EBS io1 provisioned IOPS (5,000 x 3 nodes)": 975.0,
    })  # fmt: skip


def test_an_instances_root_and_extra_volumes_bill_iops_and_throughput():
    """Root gp3 200 GB, 4,000 IOPS, 200 MB/s: 200 x $0.08 = $16, 1,000 x $0.005 = $5, 75 x $0.04 = $3.
    Extra io2 100 GB, 5,000 IOPS: 100 x $0.125 = $12.50, 5,000 x $0.065 = $325.
    Extra volume with no type: gp2 (pulumi-aws InstanceEbsBlockDevice "Defaults to `gp2`"): 50 x $0.10 = $5."""
    box = instance(
        rootBlockDevice={"volumeSize": 200, "volumeType": "gp3", "iops": 4000, "throughput": 200},
        ebsBlockDevices=[{"deviceName": "/dev/sdf", "volumeSize": 100, "volumeType": "io2", "iops": 5000},
                         {"deviceName": "/dev/sdg", "volumeSize": 50}],
    )  # fmt: skip
    priced = price_resource(box, context())
    assert disk_lines(priced) == pytest.approx({
        "EBS gp3 root 200 GB": 16.0,
        "EBS gp3 root IOPS above 3,000 (1,000)": 5.0,
        "EBS gp3 root throughput above 125 MB/s (75 MB/s)": 3.0,
        "EBS io2 /dev/sdf 100 GB": 12.5,
        "EBS io2 /dev/sdf IOPS up to 32,000 (5,000)": 325.0,
        "EBS gp2 /dev/sdg 50 GB": 5.0,
    })  # fmt: skip


# ---- d) public IPv4 ----------------------------------------------------------------------------------------------


def test_an_instance_with_a_public_ip_pays_the_ipv4_hourly_rate():
    # 730 h x $0.005 = $3.65 a month
    priced = price_resource(instance(associatePublicIpAddress=True), context())
    assert lines(priced)["public IPv4 address"] == pytest.approx(730 * IPV4_HOUR)
    assert "public IPv4 address" not in lines(price_resource(instance(), context()))


def test_an_ec2_fleet_whose_template_asks_for_public_ips_pays_one_per_node():
    # 3 nodes x 730 h x $0.005 = $10.95 a month
    nics = [{"deviceIndex": 0, "associatePublicIpAddress": "true"}]
    priced = price_resource(fleet(), context(template(networkInterfaces=nics)))
    assert lines(priced)["public IPv4 x 3"] == pytest.approx(3 * 730 * IPV4_HOUR)


def test_a_groups_template_with_public_ips_pays_one_per_node():
    # 4 nodes x 730 h x $0.005 = $14.60 a month (the existing rule, held here next to the fleet's)
    nics = [{"deviceIndex": 0, "associatePublicIpAddress": True}]
    priced = price_resource(group(), context(template(networkInterfaces=nics)))
    assert lines(priced)["public IPv4 x 4"] == pytest.approx(4 * 730 * IPV4_HOUR)


# ---- c) unknown or secret values inside lists ------------------------------------------------------------------

CASES = {
    "override unknown": (
        lambda: (mixed_group([UNKNOWN]), [template()]),
        "input mixedInstancesPolicy.launchTemplate.overrides[0] is unknown until apply",
    ),
    "override type unknown": (
        lambda: (mixed_group([{"instanceType": UNKNOWN}]), [template()]),
        "input mixedInstancesPolicy.launchTemplate.overrides[0].instanceType is unknown until apply",
    ),
    "override secret object": (
        lambda: (mixed_group([SECRET_OBJECT]), [template()]),
        "input mixedInstancesPolicy.launchTemplate.overrides[0] is a secret",
    ),
    "block device unknown": (
        lambda: (group(), [template(blockDeviceMappings=[UNKNOWN])]),
        "launch template lt: input blockDeviceMappings[0] is unknown until apply",
    ),
    "block device iops unknown": (
        lambda: (group(), [template(blockDeviceMappings=[{"ebs": {"volumeType": "io2", "iops": UNKNOWN}}])]),
        "launch template lt: input blockDeviceMappings.0.ebs.iops is unknown until apply",
    ),
    "network interface secret": (
        lambda: (group(), [template(networkInterfaces=[SECRET])]),
        "launch template lt: input networkInterfaces[0] is a secret",
    ),
    "public ip flag unknown": (
        lambda: (group(), [template(networkInterfaces=[{"associatePublicIpAddress": UNKNOWN}])]),
        "launch template lt: input networkInterfaces.0.associatePublicIpAddress is unknown until apply",
    ),
    "tag unknown": (
        lambda: (
            group(vpcZoneIdentifiers=[UNKNOWN], tags=[{"key": "a", "value": "b"}, UNKNOWN]),
            [template()],
        ),
        "input tags[1] is unknown until apply",
    ),
    "fleet configs unknown": (
        lambda: (fleet(launchTemplateConfigs=UNKNOWN), [template()]),
        "input launchTemplateConfigs is unknown until apply",
    ),
    "fleet config secret object": (
        lambda: (fleet(launchTemplateConfigs=[SECRET_OBJECT]), [template()]),
        "input launchTemplateConfigs[0] is a secret",
    ),
    "fleet override unknown": (
        lambda: (
            fleet(
                launchTemplateConfigs=[
                    {"launchTemplateSpecification": {"launchTemplateId": "lt-1"}, "overrides": [UNKNOWN]}
                ]
            ),
            [template()],
        ),  # fmt: skip
        "input launchTemplateConfigs[0].overrides[0] is unknown until apply",
    ),
    "instance extra volume unknown": (
        lambda: (instance(ebsBlockDevices=[UNKNOWN]), []),
        "input ebsBlockDevices[0] is unknown until apply",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_an_unknown_or_secret_list_element_is_not_estimable_naming_the_input(case):
    build, reason = CASES[case]
    resource, others = build()
    priced = price_resource(resource, context(*others))
    assert priced.status == NOT_ESTIMABLE, (priced.status, priced.reason)
    assert reason in priced.reason
    assert priced.monthly_cost is None and priced.job_cost is None  # never $0


@pytest.mark.parametrize(
    "resource, others",
    [
        (lambda: mixed_group(7), lambda: [template()]),  # a number where the schema has a list
        (lambda: group(), lambda: [template(blockDeviceMappings=["gp3"])]),  # a string where it has an object
        (
            lambda: fleet(launchTemplateConfigs={"overrides": []}),
            lambda: [template()],
        ),  # an object, not a list
    ],
)
def test_a_wrong_shaped_list_still_stops_the_preview(resource, others):
    with pytest.raises(MalformedInputs):
        price_resource(resource(), context(*others()))


def test_an_unknown_subnet_id_in_a_group_is_not_a_reason_to_give_up():
    """A subnet created in the same update has an id unknown until apply: the group is still priced (spot over
    every zone of the region, with a note), as before."""
    priced = price_resource(group(vpcZoneIdentifiers=[UNKNOWN]), context(template()))
    assert priced.status == PRICED


def test_a_standard_magnetic_volume_is_not_priced_never_zero():
    priced = price_resource(res(VOLUME, "mag", {"size": 10, "type": "standard"}), context())
    assert priced.status == NOT_PRICED and priced.monthly_cost is None


def test_an_unknown_ebs_block_in_a_mapping_names_its_place():
    priced = price_resource(
        group(), context(template(blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": UNKNOWN}]))
    )
    assert priced.status == NOT_ESTIMABLE
    assert "launch template lt: input blockDeviceMappings.0.ebs is unknown until apply" in priced.reason
