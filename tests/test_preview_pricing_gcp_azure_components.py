"""GCP and Azure pricing (issue 17): NAT data processed, public IPv4 on nodes, unknown or secret list elements.

Every expected dollar figure is worked by hand here from the published list price (URL in the comment);
nothing in this file asks the rate table or the pricing code for an expected number.
"""

from __future__ import annotations

import pytest

from cli.preview.model import NOT_ESTIMABLE, PRICED, Resource
from cli.preview.pricing import PricingContext, price_resource
from cli.preview.pricing.base import SECRET, UNKNOWN, MalformedInputs
from cli.preview.usage import UsageFile, resolve_usage
from infra.catalog import default_catalog

HOURS = 730  # a month as the clouds' pricing pages count it

# Cloud NAT, any region: $0.045 per GiB processed, inbound and outbound: https://cloud.google.com/nat/pricing
GCP_NAT_GB = 0.045
# Azure NAT Gateway, eastus: $0.045 per GB processed:
# https://azure.microsoft.com/pricing/details/azure-nat-gateway/
AZURE_NAT_GB = 0.045
# GCP external IPv4 in use, us-central1: $0.005/h on a standard VM, $0.0025/h on a Spot or preemptible VM:
# https://cloud.google.com/vpc/network-pricing#ipaddress
GCP_IP_HOUR = 0.005
GCP_IP_HOUR_SPOT = 0.0025
# Azure Standard public IPv4, eastus: $0.005/h: https://azure.microsoft.com/pricing/details/ip-addresses/
AZURE_IP_HOUR = 0.005

# What `pulumi preview --json` writes for a secret whose value it shows (the engine's secret signature).
SECRET_OBJECT = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": {"a": 1}}

PARENT = "urn:pulumi:dev::tf::trainfleet:fleet:Fleet::f"
TEMPLATE_LINK = "https://www.googleapis.com/compute/v1/projects/p/regions/us-central1/instanceTemplates/t-1"


def ctx_for(resources: list[Resource], **usage) -> PricingContext:
    return PricingContext(
        default_catalog(),
        resolve_usage(None, UsageFile(**usage)),
        resources,
        {"gcp": "us-central1", "azure": "eastus"},
    )


def res(token: str, name: str, inputs: dict, outputs: dict | None = None) -> Resource:
    return Resource(token, name, f"{PARENT}${token}::{name}", PARENT, inputs=inputs, outputs=outputs or {})


def gcp_fleet(*, nodes: int = 2, spot: bool = True, **template_inputs) -> tuple[Resource, Resource]:
    """A regional MIG of a2-highgpu-1g (in the catalog for us-central1-a/b) and its instance template."""
    template = res(
        "gcp:compute/instanceTemplate:InstanceTemplate",
        "t",
        {
            "machineType": "a2-highgpu-1g",
            "scheduling": {"provisioningModel": "SPOT", "preemptible": True} if spot else {},
            "disks": [{"diskType": "pd-ssd", "diskSizeGb": 200}],
            "networkInterfaces": [{"subnetwork": "s"}],
            **template_inputs,
        },
        {"selfLinkUnique": TEMPLATE_LINK},
    )
    mig = res(
        "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
        "mig",
        {
            "region": "us-central1",
            "targetSize": nodes,
            "distributionPolicyZones": ["us-central1-a", "us-central1-b"],
            "versions": [{"instanceTemplate": TEMPLATE_LINK}],
        },
    )
    return mig, template


def gcp_instance(**inputs) -> Resource:
    return res(
        "gcp:compute/instance:Instance",
        "vm",
        {
            "zone": "us-central1-a",
            "machineType": "a2-highgpu-1g",
            "bootDisk": {"initializeParams": {"size": 100, "type": "pd-balanced"}},
            **inputs,
        },
    )


def azure_scale_set(
    nodes: int = 3, ip_configurations: list | None = None, nics: list | None = None
) -> Resource:
    if nics is None:
        nics = [
            {"name": "nic", "ipConfigurations": ip_configurations or [{"name": "ip", "subnet": {"id": "s"}}]}
        ]
    return res(
        "azure-native:compute:VirtualMachineScaleSet",
        "vmss",
        {
            "location": "eastus",
            "sku": {"name": "Standard_NC24ads_A100_v4", "tier": "Standard", "capacity": nodes},
            "virtualMachineProfile": {
                "priority": "Spot",
                "networkProfile": {"networkInterfaceConfigurations": nics},
            },
        },
    )


def line(priced, prefix: str):
    found = [c for c in priced.components if c.name.startswith(prefix)]
    assert len(found) == 1, [c.name for c in priced.components]
    return found[0]


# ---- a) NAT data processed -------------------------------------------------------------------------


def test_gcp_cloud_nat_prices_the_data_it_processes():
    nat = res("gcp:compute/routerNat:RouterNat", "nat", {"region": "us-central1", "router": "r"})
    priced = price_resource(nat, ctx_for([nat], nat_gb_per_month=100))
    assert priced.status == PRICED
    # https://cloud.google.com/nat/pricing: 100 GiB x $0.045/GiB = $4.50/month, on top of the VM-hours
    assert line(priced, "NAT data processed").monthly_cost == pytest.approx(100 * GCP_NAT_GB)
    assert line(priced, "NAT data processed").monthly_cost == pytest.approx(4.50)
    # the gateway charge is still there: 1 VM (no group) x 730 h x $0.0014 = $1.022
    assert line(priced, "Cloud NAT for 1 VM").monthly_cost == pytest.approx(1 * HOURS * 0.0014)


def test_azure_nat_gateway_prices_the_data_it_processes():
    nat = res("azure-native:network:NatGateway", "nat", {"location": "eastus", "sku": {"name": "Standard"}})
    priced = price_resource(nat, ctx_for([nat], nat_gb_per_month=250))
    assert priced.status == PRICED
    # https://azure.microsoft.com/pricing/details/azure-nat-gateway/: 250 GB x $0.045/GB = $11.25/month
    assert line(priced, "NAT data processed").monthly_cost == pytest.approx(250 * AZURE_NAT_GB)
    assert line(priced, "NAT data processed").monthly_cost == pytest.approx(11.25)
    # plus the gateway hours: 730 h x $0.045 = $32.85
    assert line(priced, "NAT gateway hours").monthly_cost == pytest.approx(HOURS * 0.045)


def test_nat_data_defaults_to_zero_gb_and_says_where_the_figure_came_from():
    nat = res("gcp:compute/routerNat:RouterNat", "nat", {"region": "us-central1"})
    c = line(price_resource(nat, ctx_for([nat])), "NAT data processed")
    assert c.monthly_cost == 0 and "nat_gb_per_month" in c.note


# ---- c) public IPv4 on nodes -------------------------------------------------------------------------


def test_gcp_group_with_access_configs_pays_an_external_ip_per_spot_node():
    mig, template = gcp_fleet(
        nodes=2, spot=True, networkInterfaces=[{"accessConfigs": [{"networkTier": "PREMIUM"}]}]
    )
    priced = price_resource(mig, ctx_for([mig, template]))
    assert priced.status == PRICED
    # https://cloud.google.com/vpc/network-pricing#ipaddress, in use on a Spot VM: $0.0025/h
    # 2 nodes x 730 h x $0.0025 = $3.65/month
    assert line(priced, "external IPv4").monthly_cost == pytest.approx(2 * HOURS * GCP_IP_HOUR_SPOT)
    assert line(priced, "external IPv4").monthly_cost == pytest.approx(3.65)


def test_gcp_on_demand_group_external_ips_follow_the_fleets_hours():
    mig, template = gcp_fleet(nodes=2, spot=False, networkInterfaces=[{"accessConfigs": [{}]}])
    priced = price_resource(mig, ctx_for([mig, template], hours_per_month=200, job_hours=50))
    # in use on a standard VM: $0.005/h; 2 nodes x 200 h (the usage file's fleet hours) x $0.005 = $2.00
    c = line(priced, "external IPv4")
    assert c.monthly_cost == pytest.approx(2 * 200 * GCP_IP_HOUR) == pytest.approx(2.00)
    # the planned job: 2 nodes x 50 h x $0.005 = $0.50
    assert c.job_cost == pytest.approx(2 * 50 * GCP_IP_HOUR)


def test_gcp_group_without_access_configs_has_no_external_ip():
    mig, template = gcp_fleet(networkInterfaces=[{"subnetwork": "s", "accessConfigs": []}])
    priced = price_resource(mig, ctx_for([mig, template]))
    assert priced.status == PRICED and not [c for c in priced.components if "IPv4" in c.name]


def test_gcp_instance_with_an_ephemeral_external_ip_pays_for_it():
    vm = gcp_instance(networkInterfaces=[{"accessConfigs": [{}]}])
    priced = price_resource(vm, ctx_for([vm]))
    # on-demand (no scheduling): 1 x 730 h x $0.005 = $3.65/month
    assert line(priced, "external IPv4").monthly_cost == pytest.approx(1 * HOURS * GCP_IP_HOUR)


def test_gcp_instance_with_a_reserved_address_is_not_charged_twice():
    # natIp names a gcp:compute/address:Address, which is priced as its own resource
    vm = gcp_instance(networkInterfaces=[{"accessConfigs": [{"natIp": "34.1.2.3"}]}])
    priced = price_resource(vm, ctx_for([vm]))
    assert priced.status == PRICED and not [c for c in priced.components if "IPv4" in c.name]


def test_azure_scale_set_with_public_ip_configuration_pays_one_per_instance():
    ips = [{"name": "ip", "publicIPAddressConfiguration": {"name": "pip"}}]
    vmss = azure_scale_set(nodes=3, ip_configurations=ips)
    priced = price_resource(vmss, ctx_for([vmss]))
    assert priced.status == PRICED
    # https://azure.microsoft.com/pricing/details/ip-addresses/: 3 instances x 730 h x $0.005 = $10.95/month
    assert line(priced, "public IPv4").monthly_cost == pytest.approx(3 * HOURS * AZURE_IP_HOUR)
    assert line(priced, "public IPv4").monthly_cost == pytest.approx(10.95)


def test_azure_scale_set_without_public_ip_configuration_has_none():
    vmss = azure_scale_set()
    priced = price_resource(vmss, ctx_for([vmss]))
    assert priced.status == PRICED and not [c for c in priced.components if "IPv4" in c.name]


# ---- b) unknown or secret list elements ----------------------------------------------------------------

MARKERS = {"unknown": UNKNOWN, "secret": SECRET, "secret-object": SECRET_OBJECT}


def _gcp_disks(marker):
    mig, template = gcp_fleet(disks=[{"diskType": "pd-ssd", "diskSizeGb": 10}, marker])
    return mig, [mig, template], "disks[1]"


def _gcp_versions(marker):
    mig, template = gcp_fleet()
    mig.inputs["versions"] = [marker]
    return mig, [mig, template], "versions[0]"


def _gcp_zones(marker):
    mig, template = gcp_fleet()
    mig.inputs["distributionPolicyZones"] = ["us-central1-a", marker]
    return mig, [mig, template], "distributionPolicyZones[1]"


def _gcp_template_nics(marker):
    mig, template = gcp_fleet(networkInterfaces=[marker])
    return mig, [mig, template], "networkInterfaces[0]"


def _gcp_template_access_configs(marker):
    mig, template = gcp_fleet(networkInterfaces=[{"accessConfigs": [{}, marker]}])
    return mig, [mig, template], "networkInterfaces[0].accessConfigs[1]"


def _gcp_instance_nics(marker):
    vm = gcp_instance(networkInterfaces=[{"accessConfigs": []}, marker])
    return vm, [vm], "networkInterfaces[1]"


def _gcp_instance_access_configs(marker):
    vm = gcp_instance(networkInterfaces=[{"accessConfigs": [marker]}])
    return vm, [vm], "networkInterfaces[0].accessConfigs[0]"


def _azure_nics(marker):
    vmss = azure_scale_set(nics=[marker])
    return vmss, [vmss], "networkInterfaceConfigurations[0]"


def _azure_ip_configurations(marker):
    vmss = azure_scale_set(ip_configurations=[{"name": "a"}, marker])
    return vmss, [vmss], "networkInterfaceConfigurations[0].ipConfigurations[1]"


CASES = {
    "gcp-template-disks": _gcp_disks,
    "gcp-group-versions": _gcp_versions,
    "gcp-group-zones": _gcp_zones,
    "gcp-template-networkInterfaces": _gcp_template_nics,
    "gcp-template-accessConfigs": _gcp_template_access_configs,
    "gcp-instance-networkInterfaces": _gcp_instance_nics,
    "gcp-instance-accessConfigs": _gcp_instance_access_configs,
    "azure-networkInterfaceConfigurations": _azure_nics,
    "azure-ipConfigurations": _azure_ip_configurations,
}


@pytest.mark.parametrize("marker", list(MARKERS), ids=list(MARKERS))
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_unknown_or_secret_list_element_is_not_estimable_naming_the_input(case, marker):
    resource, resources, where = CASES[case](MARKERS[marker])
    priced = price_resource(resource, ctx_for(resources))
    assert priced.status == NOT_ESTIMABLE, (priced.status, priced.reason)
    assert priced.monthly_cost is None
    assert where in priced.reason
    assert ("secret" if marker.startswith("secret") else "unknown until apply") in priced.reason


@pytest.mark.parametrize(
    "build",
    [
        lambda: gcp_fleet(disks=5),
        lambda: gcp_fleet(networkInterfaces=[{"accessConfigs": 7}]),
        lambda: gcp_fleet(disks=[3]),
    ],
    ids=["disks-a-number", "accessConfigs-a-number", "disk-element-a-number"],
)
def test_a_number_where_a_list_belongs_is_still_malformed(build):
    mig, template = build()
    with pytest.raises(MalformedInputs):
        price_resource(mig, ctx_for([mig, template]))


def test_azure_number_where_a_list_belongs_is_still_malformed():
    vmss = azure_scale_set(nics=[{"ipConfigurations": 4}])
    with pytest.raises(MalformedInputs):
        price_resource(vmss, ctx_for([vmss]))


# ---- an autoscaled managed instance group (issue 17 item 7, on GCP) --------------------------------------
# offers.csv: a2-highgpu-1g spot $1.80385/h in us-central1-a and -b (host row + GPU row, skypilot-gcp)
A2_SPOT = 1.80385


def autoscaled(max_replicas: int | None = 12):
    mig, template = gcp_fleet()
    mig = Resource(mig.type, mig.name, mig.urn, mig.parent, inputs={k: v for k, v in mig.inputs.items()
                   if k != "targetSize"}, outputs={"selfLink": "migs/mig"})  # fmt: skip
    scaler = res("gcp:compute/regionAutoscaler:RegionAutoscaler", "scaler",
                 {"target": "migs/mig", "autoscalingPolicy": {"minReplicas": 0, "maxReplicas": max_replicas}})  # fmt: skip
    return mig, template, scaler


def test_a_group_sized_by_its_autoscaler_is_priced_at_max_replicas_never_free():
    """A MIG without targetSize was priced free ("target size 0"); its autoscaler may run up to 12 nodes:
    12 x 730 h x $1.80385 = $15,801.73 a month, and the line says why."""
    mig, template, scaler = autoscaled()
    priced = price_resource(mig, ctx_for([mig, template, scaler]))
    spot = next(c for c in priced.components if "spot" in c.name)
    assert priced.status == PRICED and spot.name == "a2-highgpu-1g spot (12 nodes)"
    assert spot.monthly_cost == pytest.approx(12 * HOURS * A2_SPOT) and "maxReplicas 12" in spot.note
    assert price_resource(scaler, ctx_for([mig, template, scaler])).status == "free"


def test_a_usage_file_sizes_the_group_and_no_autoscaler_is_not_estimable():
    mig, template, scaler = autoscaled()
    usage = resolve_usage(None, UsageFile(group_nodes={"mig": 3}))
    ctx = PricingContext(default_catalog(), usage, [mig, template, scaler], {"gcp": "us-central1"})
    spot = next(c for c in price_resource(mig, ctx).components if "spot" in c.name)
    assert spot.name == "a2-highgpu-1g spot (3 nodes)" and "group_nodes" in spot.note
    alone = price_resource(mig, ctx_for([mig, template]))
    assert alone.status == NOT_ESTIMABLE and "no targetSize and no autoscaler" in alone.reason
