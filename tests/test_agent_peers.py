"""Peer discovery and scale-to-zero on GCP (MIG) and Azure (VMSS) against control-plane APIs on loopback
(tests/metadata_servers.py), reached through the clouds' SDKs as on a node (google-cloud-compute with the
metadata server's token; azure-mgmt-network/-compute with a managed-identity token, over HTTPS as ARM
requires); the AWS ASG path runs against moto in tests/test_agent_aws.py.

Both control planes here also authorize each call the way the cloud does, against the permissions the program
grants the node (infra/gcp/iam.py NODE_PERMISSIONS, infra/azure/identity.py GROUP_ACTIONS): a call the node's
role does not allow is refused 403 with the cloud's own error, so an agent that needs more than its role holds
fails here as it would on the cloud."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import urllib.parse
import uuid

import pytest

from infra.azure.identity import GROUP_ACTIONS
from infra.gcp.iam import NODE_PERMISSIONS
from tests.agent_support import make_tls_files, run_agent
from tests.metadata_servers import (
    GOOGLE_SCOPE,
    AzureArmApi,
    AzureImds,
    GceComputeApi,
    GceMetadata,
    entra_claims,
)


class NodeGceComputeApi(GceComputeApi):
    """Compute Engine as the node's service account meets it: besides the token's scopes, each method needs the
    IAM permission its REST reference names ("Authorization requires the following IAM permission on the
    specified resource"): instanceGroupManagers / regionInstanceGroupManagers.listManagedInstances
    `compute.instanceGroupManagers.get`, .resize `compute.instanceGroupManagers.update`
    (https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize), instances.get
    `compute.instances.get`. Without it Compute answers 403 "Required '<permission>' permission for '<resource>'"."""

    def __init__(self, permissions=tuple(NODE_PERMISSIONS), **kw):
        super().__init__(**kw)
        self.permissions = set(permissions)

    @staticmethod
    def required(method: str, resource: str) -> str | None:
        parts = resource.split("/")
        if method == "POST" and len(parts) == 7 and parts[4] == "instanceGroupManagers":
            return {"listManagedInstances": "compute.instanceGroupManagers.get",
                    "resize": "compute.instanceGroupManagers.update"}.get(parts[6], "compute.instanceGroupManagers.update")  # fmt: skip
        if method == "GET" and len(parts) == 6 and parts[4] == "instances":
            return "compute.instances.get"
        return None

    def refusal(self, h, method):
        refused = super().refusal(h, method)
        if refused:
            return refused
        resource = urllib.parse.urlsplit(h.path).path.removeprefix("/compute/v1/")
        needed = self.required(method, resource)
        if needed and needed not in self.permissions:
            target = resource.rsplit("/", 1)[0] if method == "POST" else resource
            return self._error(403, f"Required '{needed}' permission for '{target}'", "forbidden")
        return None


# Compute RP api-versions the scale set APIs answer, as published: 2023-09-01, 2024-03-01, 2024-07-01 (REST
# reference, https://learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/delete-instances),
# 2025-11-01 and 2026-03-01 (Azure.ResourceManager.Compute's defaults), 2026-04-01 (azure-mgmt-compute 39.0.0's,
# the agent's pin in infra/node_env.py).
COMPUTE_API_VERSIONS = ("2023-09-01", "2024-03-01", "2024-07-01", "2025-11-01", "2026-03-01", "2026-04-01")


class NodeArmApi(AzureArmApi):
    """ARM as the node's managed identity meets it, for a Uniform scale set:
    - every request is authorized against the role's actions on the scale set (the "-own-group" assignment's
      scope): the action ARM checks for it (https://learn.microsoft.com/azure/role-based-access-control/permissions/compute)
      must match one of the role's actions (`*` wildcards, case-insensitive); else 403 AuthorizationFailed,
      ARM's message (https://learn.microsoft.com/azure/role-based-access-control/troubleshooting);
    - Virtual Machine Scale Set VMs - List (GET .../virtualMachines, paged by nextLink);
    - Virtual Machine Scale Sets - Delete Instances (POST .../delete, https://learn.microsoft.com/rest/api/compute/
      virtual-machine-scale-sets/delete-instances): api-version required and one the RP has, body
      `{"instanceIds": [string]}` required; an id that is not an instance of the set is refused (InvalidParameter,
      "The provided instanceId N is not an active Virtual Machine Scale Set VM instanceId."); 202 Accepted with
      Azure-AsyncOperation and Location, the instances go and the capacity drops by as many (what the Kubernetes
      cluster autoscaler counts on: cluster-autoscaler/cloudprovider/azure/azure_scale_set.go DeleteInstances)."""

    def __init__(self, actions=tuple(GROUP_ACTIONS), **kw):
        super().__init__(**kw)
        self.actions = [a.lower() for a in actions]
        self.instances: dict[str, dict[str, str]] = {}  # group -> instance id -> private IP
        self.deletes: list[dict] = []  # the body of each accepted Delete Instances

    def add_group(self, name: str, ips: list[str]):
        super().add_group(name, ips)
        self.instances[name] = {str(i): ip for i, ip in enumerate(ips)}

    def _split(self, path: str) -> list[str]:
        return path[len(self.prefix) :].split("/") if path.startswith(self.prefix) else []

    def required_action(self, method: str, path: str) -> str:
        rest = self._split(path)
        vmss = "Microsoft.Compute/virtualMachineScaleSets"
        if len(rest) == 1:
            return {"GET": f"{vmss}/read", "PUT": f"{vmss}/write", "PATCH": f"{vmss}/write"}.get(method, f"{vmss}/delete")
        if len(rest) == 2 and rest[1] in ("networkInterfaces", "virtualMachines") and method == "GET":
            return f"{vmss}/{rest[1]}/read"
        if len(rest) == 2 and method == "POST":
            return f"{vmss}/{rest[1]}/action"  # delete, deallocate, start, ... (delete/action: Delete Instances)
        if "/operations/" in path:
            return "Microsoft.Compute/locations/operations/read"
        return f"{vmss}/{'/'.join(rest[1:])}/{'read' if method == 'GET' else 'write'}"

    def refusal(self, h, method):
        refused = super().refusal(h, method)
        if refused:
            return refused
        path = urllib.parse.urlsplit(h.path).path
        action = self.required_action(method, path)
        if any(fnmatch.fnmatchcase(action.lower(), allowed) for allowed in self.actions):
            return None
        oid = (entra_claims(h.headers["Authorization"][len("Bearer ") :]) or {}).get("oid", "")
        scope = path.split("/virtualMachines", 1)[0].split("/networkInterfaces", 1)[0]
        return self._error(
            403, "AuthorizationFailed",
            f"The client '{oid}' with object id '{oid}' does not have authorization to perform action '{action}' over "
            f"scope '{scope}' or the scope is invalid. If access was recently granted, please refresh your credentials.",
        )  # fmt: skip

    def _vm(self, g: str, instance_id: str) -> dict:
        return {
            "name": f"{g}_{instance_id}", "id": f"{self.prefix}{g}/virtualMachines/{instance_id}",
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines", "location": "eastus",
            "instanceId": instance_id, "sku": {"name": "Standard_ND96asr_v4", "tier": "Standard"},
            "properties": {"latestModelApplied": True, "provisioningState": "Succeeded",
                           "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{g}/{instance_id}"))},
        }  # fmt: skip

    def dispatch(self, h, method):
        parts = urllib.parse.urlsplit(h.path)
        rest = self._split(parts.path)
        ours = len(rest) == 2 and (rest[1], method) in (("virtualMachines", "GET"), ("delete", "POST"))
        if not ours:
            return super().dispatch(h, method)
        refused = self.refusal(h, method)
        body = self.body(h)
        if refused:
            return refused
        q = dict(urllib.parse.parse_qsl(parts.query))
        js = {"Content-Type": "application/json; charset=utf-8"}
        if "api-version" not in q:
            return self._error(400, "MissingApiVersionParameter",
                               "The api-version query parameter (?api-version=) is required for all requests.")  # fmt: skip
        if q["api-version"] not in COMPUTE_API_VERSIONS:
            return self._error(400, "NoRegisteredProviderFound",
                               f"No registered resource provider found for location 'eastus' and API version "
                               f"'{q['api-version']}' for type 'virtualMachineScaleSets'.")  # fmt: skip
        g = rest[0]
        if g not in self.instances:
            return self._error(404, "ResourceNotFound",
                               f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{g}' under resource group "
                               f"'{self.rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix")  # fmt: skip
        if method == "GET":
            vms = [self._vm(g, i) for i in sorted(self.instances[g], key=int)]
            start = int(q.get("$skiptoken", "0"))
            end = len(vms) if self.page_size is None else start + self.page_size
            doc: dict = {"value": vms[start:end]}
            if end < len(vms):
                doc["nextLink"] = f"{self.url}{parts.path}?api-version={q['api-version']}&$skiptoken={end}"
            return 200, js, json.dumps(doc)
        try:
            request = json.loads(body)
            ids = request["instanceIds"]
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return self._error(400, "InvalidParameter", "Required parameter 'instanceIds' is missing (null).")
        for i in ids:
            if i not in self.instances[g]:
                return self._error(400, "InvalidParameter",
                                   f"The provided instanceId {i} is not an active Virtual Machine Scale Set VM instanceId.")  # fmt: skip
        self.deletes.append(request)
        for i in set(ids):
            del self.instances[g][i]
        self.capacity[g] -= len(set(ids))
        self.groups[g] = list(self.instances[g].values())
        ops = f"/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/eastus/operations/"
        op = f"{self.url}{ops}{uuid.uuid4()}?api-version={q['api-version']}"
        return 202, {**js, "Azure-AsyncOperation": op, "Location": op + "&monitor=true"}, ""

IPS = ["10.128.0.12", "10.128.0.9", "10.128.0.100", "10.128.0.3"]


@pytest.fixture
def gcp():
    # pages of 3 (the API allows up to 500): the agent must follow nextPageToken
    md, api = GceMetadata().start(), NodeGceComputeApi(page_size=3).start()
    api.add_group("trainers", [(f"trainers-{i}", ip) for i, ip in enumerate(IPS)])
    api.add_group("others", [("others-0", "10.128.0.50")])
    api.add_group("regional", [(f"regional-{i}", ip) for i, ip in enumerate(IPS)], regional=True)
    yield md, api, {"TRAINFLEET_GCP_COMPUTE_ENDPOINT": api.url}
    md.stop()
    api.stop()


@pytest.fixture
def azure(tmp_path):
    tls = make_tls_files(tmp_path)
    md, api = AzureImds().start(), NodeArmApi(tls=tls, page_size=3).start()
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
    """Issue 28 #5: the node empties its own scale set by deleting its instances (all of them, listed over two
    pages), with a role that cannot write the scale set: no PATCH, and the capacity goes to 0 with them."""
    md, api, env = azure
    res = run_agent(
        "scale-to-zero", "--cloud", "azure", "--group", "trainfleet-vmss", "--metadata-url", md.url, env=env
    )
    assert res.returncode == 0, res.stderr
    assert api.capacity["trainfleet-vmss"] == 0 and api.instances["trainfleet-vmss"] == {}
    assert api.deletes == [{"instanceIds": ["0", "1", "2", "3"]}]
    assert api.patches == [] and api.count("/virtualMachines?api-version=", 200) == 2
    assert [r for r in api.requests if r[0] not in ("GET", "POST")] == []
    (done,) = [json.loads(line) for line in res.stderr.splitlines() if '"scaled_to_zero"' in line]
    assert done["deleted"] == ["0", "1", "2", "3"]
    # an empty scale set: nothing to delete, nothing sent
    api.add_group("empty", [])
    res = run_agent("scale-to-zero", "--cloud", "azure", "--group", "empty", "--metadata-url", md.url, env=env)
    assert res.returncode == 0, res.stderr
    assert len(api.deletes) == 1


def test_the_azure_node_role_cannot_write_its_scale_set(azure):
    """What the agent used to send, a PATCH of sku.capacity, is refused to the node's role (403
    AuthorizationFailed, ARM's message), as is a request for more than the role holds; with `write` granted
    (the old role) the same PATCH goes through: the fake authorizes by the role, not by the path."""
    import requests

    from tests.metadata_servers import entra_token

    md, api, env = azure
    token, _claims = entra_token("https://management.azure.com/")
    url = f"{api.url}{api.prefix}trainfleet-vmss?api-version=2026-04-01"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    r = requests.patch(url, json={"sku": {"capacity": 0}}, headers=headers, verify=env["REQUESTS_CA_BUNDLE"], timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "AuthorizationFailed"
    assert "'Microsoft.Compute/virtualMachineScaleSets/write'" in r.json()["error"]["message"]
    assert api.patches == [] and api.capacity["trainfleet-vmss"] == 4
    api.actions.append("microsoft.compute/virtualmachinescalesets/write")
    r = requests.patch(url, json={"sku": {"capacity": 0}}, headers=headers, verify=env["REQUESTS_CA_BUNDLE"], timeout=10)
    assert r.status_code == 200 and api.capacity["trainfleet-vmss"] == 0


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "Required parameter 'instanceIds' is missing (null)."),
        ({"instanceIds": "0"}, "Required parameter 'instanceIds' is missing (null)."),
        ({"instanceIds": ["0", "9"]}, "The provided instanceId 9 is not an active Virtual Machine Scale Set VM instanceId."),
    ],
)
def test_delete_instances_is_refused_as_arm_refuses_it(azure, body, error):
    """The stand-in refuses what the REST reference makes invalid, so an agent sending it would fail here too."""
    import requests

    from tests.metadata_servers import entra_token

    md, api, env = azure
    token, _claims = entra_token("https://management.azure.com/")
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{api.url}{api.prefix}trainfleet-vmss/delete"
    verify = env["REQUESTS_CA_BUNDLE"]
    r = requests.post(url + "?api-version=2026-04-01", json=body, headers=headers, verify=verify, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["message"] == error
    r = requests.post(url, json={"instanceIds": ["0"]}, headers=headers, verify=verify, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "MissingApiVersionParameter"
    r = requests.post(url + "?api-version=2019-01-01", json={"instanceIds": ["0"]}, headers=headers, verify=verify, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "NoRegisteredProviderFound"
    assert api.deletes == [] and api.capacity["trainfleet-vmss"] == 4


def test_azure_scale_to_zero_without_delete_action_is_one_clear_line(tmp_path):
    """A role without `delete/action` (or an assignment on another scope) cannot empty the group: one line."""
    tls = make_tls_files(tmp_path)
    md = AzureImds().start()
    api = NodeArmApi(tls=tls, actions=[a for a in GROUP_ACTIONS if not a.endswith("/delete/action")]).start()
    try:
        api.add_group("trainfleet-vmss", IPS)
        res = run_agent("scale-to-zero", "--cloud", "azure", "--group", "trainfleet-vmss", "--metadata-url", md.url,
                        env={"TRAINFLEET_AZURE_ARM_ENDPOINT": api.url, "REQUESTS_CA_BUNDLE": str(tls.ca)})  # fmt: skip
    finally:
        md.stop()
        api.stop()
    assert res.returncode == 1
    line = one_plain_line(res.stderr)
    assert "azure POST virtualMachineScaleSets/trainfleet-vmss/delete" in line and "AuthorizationFailed" in line, line
    assert "'Microsoft.Compute/virtualMachineScaleSets/delete/action'" in line, line
    assert api.capacity["trainfleet-vmss"] == 4


def refused_on_gcp(command: str, md, api) -> str:
    """Run the agent's `command` on a one-node group against the GCP stand-ins, which must refuse it: the one
    plain line the agent says (exit 1)."""
    md, api = md.start(), api.start()
    try:
        api.add_group("trainers", [("trainers-0", "10.128.0.2")])
        res = run_agent(command, "--cloud", "gcp", "--group", "trainers", "--metadata-url", md.url,
                        env={"TRAINFLEET_GCP_COMPUTE_ENDPOINT": api.url})  # fmt: skip
    finally:
        md.stop()
        api.stop()
    assert res.returncode == 1
    return one_plain_line(res.stderr)


def test_gcp_node_without_the_group_permission_cannot_resize(tmp_path):
    """The GCP stand-in authorizes by the node's permissions too: without compute.instanceGroupManagers.update the
    resize is refused with Compute's own 403, in one line."""
    api = NodeGceComputeApi(permissions=[p for p in NODE_PERMISSIONS if not p.endswith(".update")])
    line = refused_on_gcp("scale-to-zero", GceMetadata(), api)
    assert "Forbidden: 403" in line and "Required 'compute.instanceGroupManagers.update' permission" in line, line
    assert api.sizes["trainers"] == 1


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
    line = refused_on_gcp("peers", GceMetadata(scopes=[GOOGLE_SCOPE + "devstorage.read_write"]), GceComputeApi())
    assert "Forbidden: 403" in line and "insufficient authentication scopes" in line, line
