"""Peer discovery and scale-to-zero on GCP (MIG) and Azure (VMSS) against control-plane APIs on loopback
(tests/metadata_servers.py); the AWS ASG path runs against moto in tests/test_agent_aws.py."""

from __future__ import annotations

import ipaddress

import pytest

from tests.agent_support import run_agent
from tests.metadata_servers import AzureArmApi, AzureImds, GceComputeApi, GceMetadata

IPS = ["10.128.0.12", "10.128.0.9", "10.128.0.100", "10.128.0.3"]


@pytest.fixture
def gcp():
    md, api = GceMetadata().start(), GceComputeApi().start()
    api.add_group("trainers", [(f"trainers-{i}", ip) for i, ip in enumerate(IPS)])
    api.add_group("others", [("others-0", "10.128.0.50")])
    api.add_group("regional", [(f"regional-{i}", ip) for i, ip in enumerate(IPS)], regional=True)
    yield md, api, {"TRAINFLEET_GCP_COMPUTE_ENDPOINT": api.url}
    md.stop()
    api.stop()


@pytest.fixture
def azure():
    md, api = AzureImds().start(), AzureArmApi().start()
    api.add_group("trainfleet-vmss", IPS)
    yield md, api, {"TRAINFLEET_AZURE_ARM_ENDPOINT": api.url}
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
    md, _api, env = gcp
    check_consistent([peers("gcp", md, env, "regional", ip, tmp_path) for ip in IPS])


def test_gcp_mig_scale_to_zero(gcp):
    md, api, env = gcp
    for group in ("trainers", "regional"):
        res = run_agent(
            "scale-to-zero", "--cloud", "gcp", "--group", group, "--metadata-url", md.url, env=env
        )
        assert res.returncode == 0, res.stderr
    assert api.sizes == {"trainers": 0, "others": 1, "regional": 0}


def test_azure_vmss_peers_are_consistent_across_nodes(azure, tmp_path):
    md, _api, env = azure
    check_consistent([peers("azure", md, env, "trainfleet-vmss", ip, tmp_path) for ip in IPS])


def test_azure_vmss_scale_to_zero(azure):
    md, api, env = azure
    res = run_agent(
        "scale-to-zero", "--cloud", "azure", "--group", "trainfleet-vmss", "--metadata-url", md.url, env=env
    )
    assert res.returncode == 0, res.stderr
    assert api.capacity["trainfleet-vmss"] == 0


def test_api_failure_is_one_clear_line_not_a_traceback(gcp):
    md, _api, env = gcp
    res = run_agent("peers", "--cloud", "gcp", "--group", "missing", "--metadata-url", md.url, env=env)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "trainfleet_agent peers: HTTPError: HTTP 404" in res.stderr
