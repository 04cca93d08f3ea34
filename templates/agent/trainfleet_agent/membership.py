"""Group membership: who the peers are, ranks, hostfile, scale-to-zero."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET

from .common import log
from .credentials import AwsCredentials, BearerToken, aws_region, sigv4_sign
from .http_client import HTTPError, http_request, with_retries
from .metadata import AwsMetadata, AzureMetadata, GcpMetadata, metadata_base


def _aws_query(service: str, params: dict, metadata_url: str | None) -> bytes:
    region = aws_region(metadata_url)
    ep = os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}") or os.environ.get("AWS_ENDPOINT_URL")
    host = {"ec2": f"ec2.{region}.amazonaws.com", "autoscaling": f"autoscaling.{region}.amazonaws.com"}[
        service
    ]
    url = (ep.rstrip("/") if ep else "https://" + host) + "/"
    body = urllib.parse.urlencode(params, quote_via=urllib.parse.quote).encode()
    creds = AwsCredentials(metadata_url)

    def once():
        hdrs = sigv4_sign(
            "POST",
            url,
            region,
            service,
            creds.get(),
            {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
            hashlib.sha256(body).hexdigest(),
        )
        r = http_request("POST", url, hdrs, body, timeout=30)
        if r.status != 200:
            raise HTTPError(r.status, r.data, f"{service} {params.get('Action')}")
        return r.data

    return with_retries(once, f"{service} {params.get('Action')}")


def aws_group_ips(group: str, metadata_url: str | None) -> list[str]:
    return [m[0] for m in aws_group_members(group, metadata_url)]


def aws_group_members(group: str, metadata_url: str | None) -> list[tuple[str, bool, str]]:
    """(private IP, is spot, launch time) of every running or pending instance of the group. DescribeInstances
    marks a Spot Instance with instanceLifecycle "spot" and an on-demand one with no instanceLifecycle
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html)."""
    members, token = [], None
    while True:
        p = {
            "Action": "DescribeInstances",
            "Version": "2016-11-15",
            "Filter.1.Name": "tag:aws:autoscaling:groupName",
            "Filter.1.Value.1": group,
            "Filter.2.Name": "instance-state-name",
            "Filter.2.Value.1": "running",
            "Filter.2.Value.2": "pending",
        }
        if token:
            p["NextToken"] = token
        root = ET.fromstring(_aws_query("ec2", p, metadata_url))
        for el in root.iter():
            if el.tag.split("}")[-1] == "instancesSet":
                for inst in el:
                    fields = {c.tag.split("}")[-1]: (c.text or "") for c in inst}
                    if fields.get("privateIpAddress"):
                        spot = fields.get("instanceLifecycle") == "spot"
                        members.append((fields["privateIpAddress"], spot, fields.get("launchTime", "")))
        token = None
        for el in root:
            if el.tag.split("}")[-1] == "nextToken" and el.text:
                token = el.text
        if not token:
            return members


def _gcp_api(method: str, path: str, metadata_url: str | None, body: dict | None = None) -> dict:
    base = os.environ.get("TRAINFLEET_GCP_COMPUTE_ENDPOINT", "https://compute.googleapis.com").rstrip("/")
    tok = BearerToken("gcp", metadata_url)

    def once():
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Authorization": "Bearer " + tok.get(), "Content-Type": "application/json"}
        r = http_request(method, base + "/compute/v1/" + path, hdrs, data, timeout=30)
        if r.status != 200:
            raise HTTPError(r.status, r.data, "compute " + path)
        return r.json()

    return with_retries(once, "gcp " + path)


def _gcp_group_paths(group: str, metadata_url: str | None) -> list[str]:
    """--group is NAME (project and zone from the metadata server; a zonal MIG is tried first, then the
    regional one of the zone's region) or a full projects/P/zones|regions/L/instanceGroupManagers/NAME."""
    if group.startswith("projects/"):
        return [group]
    md = GcpMetadata(metadata_base("gcp", metadata_url))
    project = (md.get("project/project-id")[0] or "").strip()
    zone = (md.get("instance/zone")[0] or "").strip().rsplit("/", 1)[-1]
    region = zone.rsplit("-", 1)[0]
    return [
        f"projects/{project}/zones/{zone}/instanceGroupManagers/{group}",
        f"projects/{project}/regions/{region}/instanceGroupManagers/{group}",
    ]


def _gcp_mig_call(group: str, metadata_url: str | None, suffix: str) -> dict:
    paths = _gcp_group_paths(group, metadata_url)
    for i, path in enumerate(paths):
        try:
            return _gcp_api("POST", path + suffix, metadata_url)
        except HTTPError as e:
            if e.status != 404 or i == len(paths) - 1:
                raise
    raise AssertionError("unreachable")


def gcp_group_ips(group: str, metadata_url: str | None) -> list[str]:
    doc = _gcp_mig_call(group, metadata_url, "/listManagedInstances")
    ips = []
    for mi in doc.get("managedInstances", []):
        if mi.get("instanceStatus") not in (None, "RUNNING", "PROVISIONING", "STAGING"):
            continue
        inst_path = mi["instance"].split("/compute/v1/", 1)[-1]
        inst = _gcp_api("GET", inst_path, metadata_url)
        nics = inst.get("networkInterfaces") or []
        if nics and nics[0].get("networkIP"):
            ips.append(nics[0]["networkIP"])
    return ips


def _azure_api(method: str, path: str, metadata_url: str | None, body: dict | None = None, api="2023-09-01"):
    base = os.environ.get("TRAINFLEET_AZURE_ARM_ENDPOINT", "https://management.azure.com").rstrip("/")
    tok = BearerToken("azure", metadata_url, resource="https://management.azure.com/")
    url = base + path + ("&" if "?" in path else "?") + "api-version=" + api

    def once():
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Authorization": "Bearer " + tok.get(), "Content-Type": "application/json"}
        r = http_request(method, url, hdrs, data, timeout=30)
        if r.status not in (200, 201, 202):
            raise HTTPError(r.status, r.data, "arm " + path)
        return r.json() if r.data else {}

    return with_retries(once, "azure " + path)


def _azure_group_path(group: str, metadata_url: str | None) -> str:
    if group.startswith("/subscriptions/"):
        return group
    comp = AzureMetadata(metadata_base("azure", metadata_url)).get_json(
        "/metadata/instance?api-version=2021-02-01"
    )
    c = comp["compute"]
    return (
        f"/subscriptions/{c['subscriptionId']}/resourceGroups/{c['resourceGroupName']}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group}"
    )


def azure_group_ips(group: str, metadata_url: str | None) -> list[str]:
    path = _azure_group_path(group, metadata_url) + "/networkInterfaces"
    ips = []
    while True:
        doc = _azure_api("GET", path, metadata_url, api="2018-10-01")
        for nic in doc.get("value", []):
            for cfg in nic.get("properties", {}).get("ipConfigurations", []):
                ip = cfg.get("properties", {}).get("privateIPAddress")
                if ip and cfg.get("properties", {}).get("primary", True):
                    ips.append(ip)
        nxt = doc.get("nextLink")
        if not nxt:
            return ips
        path = urllib.parse.urlsplit(nxt).path + "?" + urllib.parse.urlsplit(nxt).query


def self_ip(cloud: str, metadata_url: str | None) -> str:
    base = metadata_base(cloud, metadata_url)
    if cloud == "aws":
        return (AwsMetadata(base).get("local-ipv4") or "").strip()
    if cloud == "gcp":
        return (GcpMetadata(base).get("instance/network-interfaces/0/ip")[0] or "").strip()
    doc = AzureMetadata(base).get_json("/metadata/instance/network?api-version=2021-02-01")
    return doc["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]


def choose_members(members: list[tuple[str, bool, str]], nodes: int) -> list[tuple[str, bool, str]]:
    """The job's members, in rank order: on-demand before spot (the on-demand base holds rank 0 and the
    checkpoint cadence), then the longest running, then by IP; exactly `nodes` of them when there are more
    (0: all). Every node computes the same answer from the same listing, so a node the group added beyond the
    job's size (capacity rebalancing launches the replacement first) waits as a standby instead of changing
    the data-parallel size that the job's ZeRO state was saved at."""
    unique = {m[0]: m for m in members}.values()
    ordered = sorted(unique, key=lambda m: (m[1], m[2], ipaddress.ip_address(m[0])))
    return ordered[:nodes] if nodes else ordered


def default_slots() -> int:
    for env in ("TRAINFLEET_SLOTS",):
        if os.environ.get(env):
            return int(os.environ[env])
    if os.path.isdir("/dev/accel"):  # Habana Gaudi
        n = len([d for d in os.listdir("/dev/accel") if d.startswith("accel") and d[5:].isdigit()])
        if n:
            return n
    n = len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)]) if os.path.isdir("/dev") else 0
    return n or 1


def _as_members(fn):
    """GCP and Azure groups are all spot or all regular: members differ only by IP."""
    return lambda group, url: [(ip, False, "") for ip in fn(group, url)]


def cmd_peers(a) -> int:
    fn = {"aws": aws_group_members, "gcp": _as_members(gcp_group_ips), "azure": _as_members(azure_group_ips)}[
        a.cloud
    ]
    me = a.self_ip or self_ip(a.cloud, a.metadata_url)
    deadline = time.time() + a.wait_s
    while True:
        members = fn(a.group, a.metadata_url)
        ips = [m[0] for m in members]
        if len(set(ips)) >= a.min_nodes and me in ips or time.time() >= deadline:
            break
        log("peers_waiting", have=len(set(ips)), want=a.min_nodes, self_in_group=me in ips)
        time.sleep(2)
    if me not in ips:
        log("self_not_in_group", self_ip=me, group=a.group, members=ips)
        print(f"this node ({me}) is not a running member of group {a.group}", file=sys.stderr)
        return 3
    ordered = [m[0] for m in choose_members(members, a.nodes)]
    if me not in ordered:
        log("standby", self_ip=me, nodes=a.nodes, members=len(set(ips)))
        print(f"this node ({me}) is a standby: the job runs on {a.nodes} of the group's nodes", file=sys.stderr)
        return 4
    slots = a.slots or default_slots()
    text = "".join(f"{ip} slots={slots}\n" for ip in ordered)  # DeepSpeed numbers nodes in hostfile order
    if a.hostfile:
        tmp = a.hostfile + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.hostfile)
    rank = ordered.index(me)
    print(f"NODE_RANK={rank}")
    print(f"NNODES={len(ordered)}")
    print(f"MASTER_ADDR={ordered[0]}")
    print(f"SELF_ADDR={me}")
    print(f"HOSTS={','.join(ordered)}")
    if a.hostfile:
        print(f"HOSTFILE={a.hostfile}")
    else:
        sys.stdout.write(text)
    log("peers", rank=rank, nodes=len(ordered), master=ordered[0])
    return 0


def cmd_scale_to_zero(a) -> int:
    if a.cloud == "aws":
        _aws_query(
            "autoscaling",
            {
                # SetDesiredCapacity only: the node role may not reconfigure its group (MinSize is 0 already).
                "Action": "SetDesiredCapacity",
                "Version": "2011-01-01",
                "AutoScalingGroupName": a.group,
                "DesiredCapacity": "0",
            },
            a.metadata_url,
        )
    elif a.cloud == "gcp":
        _gcp_mig_call(a.group, a.metadata_url, "/resize?size=0")
    else:
        _azure_api(
            "PATCH", _azure_group_path(a.group, a.metadata_url), a.metadata_url, {"sku": {"capacity": 0}}
        )
    log("scaled_to_zero", cloud=a.cloud, group=a.group)
    return 0


