"""Group membership: who the peers are, ranks, hostfile, scale-to-zero.

The control-plane calls go through each cloud's own SDK, with its own credentials chain and retries:
- AWS: boto3 (EC2 DescribeInstances, Auto Scaling SetDesiredCapacity; watch.py's CompleteLifecycleAction uses
  `aws_client` too). Credentials and region from botocore's chain (env, config, then the instance role from
  IMDSv2); region, when nothing in the chain names one, from IMDS `placement/region`. Adaptive retries.
  `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>` (botocore's own settings) point it elsewhere (tests).
- GCP: google-cloud-compute over its REST transport (instanceGroupManagers / regionInstanceGroupManagers
  listManagedInstances and resize, instances.get) with the metadata server's service-account token
  (google-auth compute_engine). `TRAINFLEET_GCP_COMPUTE_ENDPOINT` replaces https://compute.googleapis.com.
- Azure: azure-mgmt-network (the scale set's network interfaces) and azure-mgmt-compute (the scale set's
  instances, listed and deleted) with a managed-identity token from IMDS (azure-identity ManagedIdentityCredential).
  `TRAINFLEET_AZURE_ARM_ENDPOINT` replaces https://management.azure.com. The two management packages are
  about 46 MB installed (0.6 + 0.9 MB wheels) for two calls; they are used rather than azure-core's
  PipelineClient with hand-written paths because their request shapes, api-versions, paging (nextLink) and
  long-running-operation handling are Microsoft's, generated from the REST specs, and a node downloads the
  wheels, not the installed size, at boot.
Every SDK failure reaches the command line as one `CloudApiError` line naming the call; the SDKs' own log
warnings (retries, metadata hiccups) become JSON `sdk_log` events on stderr instead of plain text.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import ipaddress
import os
import re
import sys
import time
import urllib.parse

from .common import DEFAULT_METADATA, log, route_sdk_logs
from .metadata import AwsMetadata, AzureMetadata, GcpMetadata, metadata_base

API_TIMEOUT_S = 30.0  # one control-plane request; retries come on top (each SDK's own policy, bounded below)


class CloudApiError(Exception):
    """A control-plane call failed (after the SDK's retries): one line naming the call and the service's answer."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:600]


@contextlib.contextmanager
def _calling(what: str):
    """Turn any SDK failure inside into a CloudApiError that names `what` (the SDKs' messages may span lines)."""
    try:
        yield
    except CloudApiError:
        raise
    except Exception as e:  # noqa: BLE001 - every SDK has its own error classes; all become one line
        raise CloudApiError(f"{what}: {type(e).__name__}: {_one_line(e)}") from e


def _metadata_override(cloud: str, metadata_url: str | None) -> str | None:
    """The metadata base URL when it is not the cloud's default one (set by --metadata-url, TRAINFLEET_METADATA_URL
    or the cloud's own variable), for handing to an SDK that has its own setting for it; else None."""
    base = metadata_base(cloud, metadata_url)
    return None if base == DEFAULT_METADATA[cloud] else base


# --------------------------------------------------------------------------------------------------- AWS
@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+
def _aws_session(metadata_url: str | None):
    import boto3
    import botocore.session

    route_sdk_logs()
    core = botocore.session.get_session()
    override = _metadata_override("aws", metadata_url)
    if override:  # botocore's instance-role credentials come from this IMDS
        core.set_config_variable("ec2_metadata_service_endpoint", override + "/")
    # botocore's chain (AWS_DEFAULT_REGION, the config file), then AWS_REGION (the other AWS SDKs' variable)
    region = core.get_config_variable("region") or os.environ.get("AWS_REGION")
    if not region:  # botocore's chain reads no region from IMDS for clients; the instance's own is the one
        with _calling("aws region from IMDS placement/region"):
            region = (AwsMetadata(metadata_base("aws", metadata_url)).get("placement/region") or "").strip()
        if not region:
            raise CloudApiError("aws region: not set (AWS_REGION) and IMDS has no placement/region")
    return boto3.session.Session(botocore_session=core, region_name=region)


def aws_client(service: str, metadata_url: str | None):
    """A boto3 client for `service` with adaptive retries (client-side rate limiting on throttling)."""
    from botocore.config import Config

    config = Config(
        retries={"mode": "adaptive", "max_attempts": 5},
        connect_timeout=5,
        read_timeout=API_TIMEOUT_S,
        user_agent_appid="trainfleet-agent",
    )
    return _aws_session(metadata_url).client(service, config=config)


def _aws_time(t) -> str:
    """DescribeInstances' launchTime as botocore parses it (a datetime), back in the API's own ISO form."""
    if not isinstance(t, _dt.datetime):
        return str(t or "")
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # noqa: UP017 - nodes may run python3 < 3.11


def aws_group_ips(group: str, metadata_url: str | None) -> list[str]:
    return [m[0] for m in aws_group_members(group, metadata_url)]


def aws_group_members(group: str, metadata_url: str | None) -> list[tuple[str, bool, str]]:
    """(private IP, is spot, launch time) of every running or pending instance of the group. DescribeInstances
    marks a Spot Instance with instanceLifecycle "spot" and an on-demand one with no instanceLifecycle
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html)."""
    members = []
    with _calling(f"aws ec2 DescribeInstances (group {group})"):
        pages = aws_client("ec2", metadata_url).get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag:aws:autoscaling:groupName", "Values": [group]},
                {"Name": "instance-state-name", "Values": ["running", "pending"]},
            ]
        )
        for page in pages:
            for reservation in page.get("Reservations", []):
                for inst in reservation.get("Instances", []):
                    if inst.get("PrivateIpAddress"):
                        spot = inst.get("InstanceLifecycle") == "spot"
                        members.append((inst["PrivateIpAddress"], spot, _aws_time(inst.get("LaunchTime"))))
    return members


# --------------------------------------------------------------------------------------------------- GCP
@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+
def _gcp_clients(metadata_url: str | None):
    override = _metadata_override("gcp", metadata_url)
    if override:
        # google-auth reads the metadata server's host:port from GCE_METADATA_HOST when it is first imported
        os.environ["GCE_METADATA_HOST"] = urllib.parse.urlsplit(override).netloc
    route_sdk_logs()
    from google.api_core.client_options import ClientOptions
    from google.auth import compute_engine
    from google.cloud.compute_v1.services.instance_group_managers import InstanceGroupManagersClient
    from google.cloud.compute_v1.services.instances import InstancesClient
    from google.cloud.compute_v1.services.region_instance_group_managers import (
        RegionInstanceGroupManagersClient,
    )

    endpoint = os.environ.get("TRAINFLEET_GCP_COMPUTE_ENDPOINT")
    kw = dict(
        credentials=compute_engine.Credentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=endpoint.rstrip("/")) if endpoint else None,
    )
    return {
        "zones": InstanceGroupManagersClient(**kw),
        "regions": RegionInstanceGroupManagersClient(**kw),
        "instances": InstancesClient(**kw),
    }


@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+
def _gcp_retry():
    """Transient failures (429, 5xx, connection errors, metadata-server hiccups) retried with backoff, 60 s in all."""
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    transient = gretry.if_exception_type(gexc.BadGateway, gexc.GatewayTimeout)

    def on_error(e: Exception) -> None:
        log("retry", what="gcp compute", error=_one_line(e)[:200])

    return gretry.Retry(
        predicate=lambda e: gretry.if_transient_error(e) or transient(e),
        initial=0.5,
        maximum=8.0,
        multiplier=2.0,
        timeout=60.0,
        on_error=on_error,
    )


def _gcp_group_paths(group: str, metadata_url: str | None) -> list[tuple[str, str, str, str]]:
    """--group is NAME (project and zone from the metadata server; a zonal MIG is tried first, then the
    regional one of the zone's region) or a full projects/P/zones|regions/L/instanceGroupManagers/NAME.
    Returns (project, "zones"|"regions", location, name) to try, in order."""
    m = re.fullmatch(r"projects/([^/]+)/(zones|regions)/([^/]+)/instanceGroupManagers/([^/]+)", group)
    if m:
        return [m.groups()]
    if group.startswith("projects/"):
        raise CloudApiError(f"bad group {group!r}: expected projects/P/zones|regions/L/instanceGroupManagers/NAME")
    md = GcpMetadata(metadata_base("gcp", metadata_url))
    with _calling("gcp metadata project/zone"):
        project = (md.get("project/project-id")[0] or "").strip()
        zone = (md.get("instance/zone")[0] or "").strip().rsplit("/", 1)[-1]
    region = zone.rsplit("-", 1)[0]
    return [(project, "zones", zone, group), (project, "regions", region, group)]


def _gcp_mig_call(group: str, metadata_url: str | None, method: str, **kw):
    """instanceGroupManagers.<method> on the group (zonal, else regional: a 404 moves to the next candidate)."""
    clients = _gcp_clients(metadata_url)  # first: it sets up what google-auth and the SDK read at import
    from google.api_core import exceptions as gexc

    candidates = _gcp_group_paths(group, metadata_url)
    for i, (project, scope, location, name) in enumerate(candidates):
        where = {"zone": location} if scope == "zones" else {"region": location}
        path = f"projects/{project}/{scope}/{location}/instanceGroupManagers/{name}"
        with _calling(f"gcp {method} {path}"):
            try:
                return getattr(clients[scope], method)(
                    project=project, instance_group_manager=name, **where, **kw,
                    retry=_gcp_retry(), timeout=API_TIMEOUT_S,
                )  # fmt: skip
            except gexc.NotFound:
                if i == len(candidates) - 1:
                    raise
                log("gcp_group_not_found", path=path, next="regional")
    raise AssertionError("unreachable")


_INSTANCE_URL = re.compile(r"projects/([^/]+)/zones/([^/]+)/instances/([^/?]+)$")


def gcp_group_ips(group: str, metadata_url: str | None) -> list[str]:
    """The networkIP of every managed instance that exists and is not going away (instanceStatus unset while it
    is being created; PROVISIONING, STAGING, RUNNING count; STOPPING, TERMINATED, ... do not)."""
    pager = _gcp_mig_call(group, metadata_url, "list_managed_instances")
    instances = _gcp_clients(metadata_url)["instances"]
    ips = []
    with _calling(f"gcp listManagedInstances {group}"):
        managed = list(pager)  # the pager follows nextPageToken
    for mi in managed:
        status = mi.instance_status if "instance_status" in mi else None
        if status not in (None, "RUNNING", "PROVISIONING", "STAGING"):
            continue
        m = _INSTANCE_URL.search(mi.instance)
        if not m:
            raise CloudApiError(f"gcp listManagedInstances {group}: unexpected instance URL {mi.instance!r}")
        project, zone, name = m.groups()
        with _calling(f"gcp instances.get projects/{project}/zones/{zone}/instances/{name}"):
            inst = instances.get(
                project=project, zone=zone, instance=name, retry=_gcp_retry(), timeout=API_TIMEOUT_S
            )
        nics = list(inst.network_interfaces)
        if nics and nics[0].network_i_p:
            ips.append(nics[0].network_i_p)
    return ips


# ------------------------------------------------------------------------------------------------- Azure
MANAGEMENT_SCOPE = "https://management.azure.com/.default"


@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+
def _azure_clients(metadata_url: str | None, subscription: str):
    override = _metadata_override("azure", metadata_url)
    if override:
        # azure-identity (through MSAL) asks the IMDS at this variable's URL (msal/managed_identity.py,
        # _obtain_token_on_azure_vm; read per request), the one setting it has for the IMDS address
        os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = override
    route_sdk_logs()
    from azure.identity import ManagedIdentityCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient

    credential = ManagedIdentityCredential(client_id=os.environ.get("AZURE_CLIENT_ID") or None)
    kw = dict(
        base_url=(os.environ.get("TRAINFLEET_AZURE_ARM_ENDPOINT") or "https://management.azure.com").rstrip("/"),
        credential_scopes=[MANAGEMENT_SCOPE],
        # azure-core's RetryPolicy (429/5xx/connection errors, Retry-After honoured), bounded for a boot script
        retry_total=5,
        retry_backoff_factor=0.5,
        retry_backoff_max=8,
        connection_timeout=10,
        read_timeout=API_TIMEOUT_S,
    )
    return {
        "network": NetworkManagementClient(credential, subscription, **kw),
        "compute": ComputeManagementClient(credential, subscription, **kw),
    }


def _azure_group(group: str, metadata_url: str | None) -> tuple[str, str, str]:
    """(subscription, resource group, scale set name): G is a name (subscription and resource group from IMDS)
    or the scale set's full resource id."""
    if group.startswith("/subscriptions/"):
        m = re.fullmatch(
            r"/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Compute/"
            r"virtualMachineScaleSets/([^/]+)",
            group.rstrip("/"),
            re.IGNORECASE,
        )
        if not m:
            raise CloudApiError(f"bad group {group!r}: expected a Microsoft.Compute/virtualMachineScaleSets id")
        return m.group(1), m.group(2), m.group(3)
    with _calling("azure IMDS /metadata/instance"):
        comp = AzureMetadata(metadata_base("azure", metadata_url)).get_json(
            "/metadata/instance?api-version=2021-02-01"
        )["compute"]
    return comp["subscriptionId"], comp["resourceGroupName"], group


def azure_group_ips(group: str, metadata_url: str | None) -> list[str]:
    """The primary private IP of each VM's primary network interface in the scale set (Uniform orchestration)."""
    sub, rg, name = _azure_group(group, metadata_url)
    network = _azure_clients(metadata_url, sub)["network"]
    ips = []
    with _calling(f"azure networkInterfaces of virtualMachineScaleSets/{name} (resource group {rg})"):
        for nic in network.network_interfaces.list_virtual_machine_scale_set_network_interfaces(rg, name):
            if nic.primary is False:
                continue
            for cfg in nic.ip_configurations or []:
                if cfg.private_ip_address and cfg.primary is not False:
                    ips.append(cfg.private_ip_address)
    return ips


# ----------------------------------------------------------------------------------------------- peers
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


# --------------------------------------------------------------------------------------------- scale-to-zero
def cmd_scale_to_zero(a) -> int:
    """Ask the group for zero instances and return: this node is one of those it then deletes, so it does not
    wait for the operation (GCP, Azure) to finish."""
    if a.cloud == "aws":
        with _calling(f"aws autoscaling SetDesiredCapacity {a.group}"):
            # SetDesiredCapacity only: the node role may not reconfigure its group (MinSize is 0 already).
            aws_client("autoscaling", a.metadata_url).set_desired_capacity(
                AutoScalingGroupName=a.group, DesiredCapacity=0, HonorCooldown=False
            )
        detail = {}
    elif a.cloud == "gcp":
        op = _gcp_mig_call(a.group, a.metadata_url, "resize", size=0)
        detail = {"operation": op.name, "status": getattr(op.status, "name", str(op.status))}
    else:
        detail = {"deleted": azure_delete_instances(a.group, a.metadata_url)}
    log("scaled_to_zero", cloud=a.cloud, group=a.group, **detail)
    return 0


def azure_delete_instances(group: str, metadata_url: str | None) -> list[str]:
    """Empty the scale set by deleting its instances, which lowers its capacity with them: Virtual Machine Scale
    Set VMs - List for the instance ids, then Virtual Machine Scale Sets - Delete Instances
    (POST .../virtualMachineScaleSets/{name}/delete, body {"instanceIds": [...]}, required and explicit: the REST
    reference documents no "all instances" form). The node's role holds `virtualMachines/read` and
    `delete/action` on its own scale set and no `write` (infra/azure/identity.py): it can remove instances, never
    add one or change the scale set's model. Returns the ids asked to be deleted (sorted numerically)."""
    sub, rg, name = _azure_group(group, metadata_url)
    compute = _azure_clients(metadata_url, sub)["compute"]
    with _calling(f"azure virtualMachines of virtualMachineScaleSets/{name} (resource group {rg})"):
        ids = sorted(
            {vm.instance_id for vm in compute.virtual_machine_scale_set_vms.list(rg, name) if vm.instance_id},
            key=lambda i: (len(i), i),
        )  # the pager follows nextLink
    if not ids:
        return []
    from azure.mgmt.compute.models import VirtualMachineScaleSetVMInstanceRequiredIDs

    with _calling(f"azure POST virtualMachineScaleSets/{name}/delete instanceIds={ids} (resource group {rg})"):
        # Accepted (202) and returned at once (NoPolling): this node is one of the instances it deletes.
        compute.virtual_machine_scale_sets.begin_delete_instances(
            rg, name, VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=ids), polling=False
        ).result()
    return ids
