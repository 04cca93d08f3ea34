"""Peer discovery and scale-to-zero on GCP (MIG) and Azure (VMSS) against control-plane APIs on loopback
(tests/metadata_servers.py), reached through the clouds' SDKs as on a node (google-cloud-compute with the
metadata server's token; azure-mgmt-network/-compute with a managed-identity token, over HTTPS as ARM
requires); the AWS ASG path runs against moto in tests/test_agent_aws.py."""

from __future__ import annotations

import ipaddress
import json
import urllib.parse

import pytest

from tests.agent_support import make_tls_files, run_agent
from tests.metadata_servers import GOOGLE_SCOPE, AzureArmApi, AzureImds, GceComputeApi, GceMetadata

IPS = ["10.128.0.12", "10.128.0.9", "10.128.0.100", "10.128.0.3"]


@pytest.fixture
def gcp():
    # pages of 3 (the API allows up to 500): the agent must follow nextPageToken
    md, api = GceMetadata().start(), GceComputeApi(page_size=3).start()
    api.add_group("trainers", [(f"trainers-{i}", ip) for i, ip in enumerate(IPS)])
    api.add_group("others", [("others-0", "10.128.0.50")])
    api.add_group("regional", [(f"regional-{i}", ip) for i, ip in enumerate(IPS)], regional=True)
    yield md, api, {"TRAINFLEET_GCP_COMPUTE_ENDPOINT": api.url}
    md.stop()
    api.stop()


@pytest.fixture
def azure(tmp_path):
    tls = make_tls_files(tmp_path)
    md, api = AzureImds().start(), AzureArmApi(tls=tls, page_size=3).start()
    api.add_group("trainfleet-vmss", IPS)
    # the SDKs' HTTP client (requests) trusts the test CA as a node trusts its CA bundle
    yield md, api, {"TRAINFLEET_AZURE_ARM_ENDPOINT": api.url, "REQUESTS_CA_BUNDLE": str(tls.ca)}
    md.stop()
    api.stop()


def peers(cloud, md, env, group, ip, tmp_path):
    hf = tmp_path / f"hostfile-{ip}"
    args = [
        "peers",
        "--cloud",
        cloud,
        "--group",
        group,
        "--metadata-url",
        md.url,
        "--slots",
        "4",
        "--hostfile",
        str(hf),
    ]
    if ip:
        args += ["--self-ip", ip]
    res = run_agent(*args, env=env)
    assert res.returncode == 0, res.stderr
    return dict(line.split("=", 1) for line in res.stdout.splitlines()), hf.read_text()


def check_consistent(outs):
    ordered = sorted(IPS, key=ipaddress.ip_address)
    assert {hf for _kv, hf in outs} == {"".join(f"{ip} slots=4\n" for ip in ordered)}
    assert sorted(int(kv["NODE_RANK"]) for kv, _ in outs) == list(range(len(IPS)))
    assert {kv["MASTER_ADDR"] for kv, _ in outs} == {"10.128.0.3"}
    for kv, _ in outs:
        assert ordered[int(kv["NODE_RANK"])] == kv["SELF_ADDR"]


def test_gcp_mig_peers_are_consistent_across_nodes(gcp, tmp_path):
    md, _api, env = gcp
    check_consistent([peers("gcp", md, env, "trainers", ip, tmp_path) for ip in IPS])
    # without --self-ip the node's own address comes from the metadata server; project/zone too
    md.set("instance/network-interfaces/0/ip", "10.128.0.100")
    kv, _ = peers("gcp", md, env, "trainers", None, tmp_path)
    assert kv["NODE_RANK"] == "3" and kv["SELF_ADDR"] == "10.128.0.100"


def test_gcp_regional_mig_is_found_too(gcp, tmp_path):
    md, api, env = gcp
    check_consistent([peers("gcp", md, env, "regional", ip, tmp_path) for ip in IPS])
    # each node: the zonal name is not found, the regional one is listed in two pages
    assert api.count("/zones/us-central1-a/instanceGroupManagers/regional/listManagedInstances", 404) == len(IPS)
    assert api.count("/regions/us-central1/instanceGroupManagers/regional/listManagedInstances", 200) == 2 * len(IPS)


def test_gcp_members_that_are_going_away_are_not_peers(gcp, tmp_path):
    """listManagedInstances lists every instance the group manages; one being created has no instanceStatus
    yet and counts, one stopping or terminated does not."""
    md, api, env = gcp
    api.add_group("mixed", [("m-0", "10.128.1.1", "RUNNING"), ("m-1", "10.128.1.2", "STOPPING"),
                            ("m-2", "10.128.1.3", None), ("m-3", "10.128.1.4", "TERMINATED"),
                            ("m-4", "10.128.1.5", "STAGING")])  # fmt: skip
    kv, hostfile = peers("gcp", md, env, "mixed", "10.128.1.1", tmp_path)
    assert kv["HOSTS"] == "10.128.1.1,10.128.1.3,10.128.1.5"
    # a full path names the group without the metadata server's project and zone
    path = "projects/trainfleet-test/zones/us-central1-a/instanceGroupManagers/mixed"
    kv2, _ = peers("gcp", md, env, path, "10.128.1.5", tmp_path)
    assert kv2["HOSTS"] == kv["HOSTS"] and kv2["NODE_RANK"] == "2"


def test_gcp_mig_scale_to_zero(gcp):
    md, api, env = gcp
    for group in ("trainers", "regional"):
        res = run_agent(
            "scale-to-zero", "--cloud", "gcp", "--group", group, "--metadata-url", md.url, env=env
        )
        assert res.returncode == 0, res.stderr
        done = [json.loads(line) for line in res.stderr.splitlines() if '"scaled_to_zero"' in line]
        assert done and done[0]["operation"].startswith("operation-") and done[0]["status"] == "RUNNING"
    assert api.sizes == {"trainers": 0, "others": 1, "regional": 0}
    assert api.count("/zones/us-central1-a/instanceGroupManagers/trainers/resize?", 200) == 1
    assert api.count("/regions/us-central1/instanceGroupManagers/regional/resize?", 200) == 1


def test_azure_vmss_peers_are_consistent_across_nodes(azure, tmp_path):
    md, api, env = azure
    check_consistent([peers("azure", md, env, "trainfleet-vmss", ip, tmp_path) for ip in IPS])
    # two pages per listing (nextLink followed), each with a management token from the IMDS
    assert api.count("/networkInterfaces?api-version=2018-10-01", 200) == 2 * len(IPS)
    tokens = [urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["resource"][0]
              for _m, path, status in md.requests if path.startswith("/metadata/identity/oauth2/token")]  # fmt: skip
    assert tokens and {t.rstrip("/") for t in tokens} == {"https://management.azure.com"}
    # the scale set's full resource id works without IMDS's subscription and resource group
    kv, _ = peers("azure", md, env, api.prefix + "trainfleet-vmss", "10.128.0.100", tmp_path)
    assert kv["NODE_RANK"] == "3"


def test_azure_vmss_scale_to_zero(azure):
    md, api, env = azure
    res = run_agent(
        "scale-to-zero", "--cloud", "azure", "--group", "trainfleet-vmss", "--metadata-url", md.url, env=env
    )
    assert res.returncode == 0, res.stderr
    assert api.capacity["trainfleet-vmss"] == 0
    assert api.patches == [{"sku": {"capacity": 0}}]  # nothing else of the scale set is touched


def one_plain_line(stderr: str) -> str:
    """The one line of stderr that is not a JSON log event."""
    plain = [line for line in stderr.splitlines() if not line.startswith("{")]
    assert len(plain) == 1 and "Traceback" not in stderr, stderr
    return plain[0]


def test_api_failure_is_one_clear_line_not_a_traceback(gcp):
    md, _api, env = gcp
    res = run_agent("peers", "--cloud", "gcp", "--group", "missing", "--metadata-url", md.url, env=env)
    assert res.returncode == 1
    line = one_plain_line(res.stderr)
    assert line.startswith(
        "trainfleet_agent peers: CloudApiError: gcp list_managed_instances "
        "projects/trainfleet-test/regions/us-central1/instanceGroupManagers/missing: NotFound: 404 POST "
    ), line
    assert line.endswith(
        "The resource 'projects/trainfleet-test/regions/us-central1/instanceGroupManagers/missing' was not found"
    ), line


def test_azure_api_failure_is_one_clear_line(azure):
    md, _api, env = azure
    res = run_agent("peers", "--cloud", "azure", "--group", "missing", "--metadata-url", md.url, env=env)
    assert res.returncode == 1
    line = one_plain_line(res.stderr)
    assert line.startswith("trainfleet_agent peers: CloudApiError: azure networkInterfaces of "
                           "virtualMachineScaleSets/missing (resource group trainfleet-rg): ResourceNotFoundError:")  # fmt: skip
    assert "The Resource 'Microsoft.Compute/virtualMachineScaleSets/missing' under resource group" in line


def test_compute_scope_missing_is_one_clear_line(tmp_path):
    """A node whose service account lacks a compute scope is refused (403) and says so in one line."""
    md = GceMetadata(scopes=[GOOGLE_SCOPE + "devstorage.read_write"]).start()
    api = GceComputeApi().start()
    try:
        api.add_group("trainers", [("trainers-0", "10.128.0.2")])
        res = run_agent("peers", "--cloud", "gcp", "--group", "trainers", "--metadata-url", md.url,
                        env={"TRAINFLEET_GCP_COMPUTE_ENDPOINT": api.url})  # fmt: skip
    finally:
        md.stop()
        api.stop()
    assert res.returncode == 1
    line = one_plain_line(res.stderr)
    assert "Forbidden: 403" in line and "insufficient authentication scopes" in line, line
