"""Run the Pulumi program offline under Pulumi's own mock runtime and capture everything it declares.

`run_program(stack, config)` calls `infra.program.declare` inside `pulumi.runtime.set_mocks`, with a
mock engine that answers like the clouds would (ids, ARNs, names, self links, bucket URLs) and records
every resource: its type token, logical name, URN, parent URN, inputs and mocked outputs. An AMI lookup
answers from a table of AMIs (DEFAULT_IMAGES, or the `images` given) and fails as the real one does when
nothing matches, so a root device name comes from the AMI asked for. Used by
`trainfleet stacks check`, by the tests, and by the offline cost preview (which prices what it finds).

No Pulumi CLI, no credentials and no network are needed; nothing is created anywhere.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra.config import StackConfig


@atexit.register
def _close_the_event_loop() -> None:
    """Close the event loop pulumi's _sync_await left open. Unclosed, it is closed by the garbage collector at
    interpreter shutdown, after its self-pipe socket may already be gone, and prints a ValueError ("Invalid file
    descriptor: -1") on stderr after the CLI's one-line error (seen once in 3,910 tests: a flaky landing)."""
    with contextlib.suppress(RuntimeError):
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if not loop.is_running() and not loop.is_closed():
            loop.close()

PROJECT = "trainfleet"
MOCK_AWS_ACCOUNT = "123456789012"
MOCK_GCP_PROJECT = "trainfleet-mock-project"
MOCK_GCP_PROJECT_NUMBER = "987654321098"
MOCK_GCP_BILLING_ACCOUNT = "0A0A0A-1B1B1B-2C2C2C"
MOCK_AZURE_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
MOCK_AZURE_TENANT = "00000000-0000-4000-8000-000000000002"


@dataclass
class DeclaredResource:
    """One resource the program registered, as the engine saw it."""

    type: str  # type token, e.g. aws:autoscaling/group:Group or trainfleet:aws:SpotFleet
    name: str  # logical name
    urn: str
    parent: str | None  # parent URN (None only for the stack itself)
    custom: bool  # False for components
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    ignore_changes: list[str] = field(default_factory=list)  # the ignoreChanges resource option
    depends_on: list[str] = field(default_factory=list)  # URNs of explicit dependencies
    provider: str = ""  # the provider reference (`urn::id`), "" for the default provider

    @property
    def is_component(self) -> bool:
        return not self.custom

    @property
    def cloud(self) -> str:
        """aws, gcp, azure (azure-native), trainfleet or pulumi."""
        package = self.type.split(":", 1)[0]
        return "azure" if package == "azure-native" else package


@dataclass
class Invocation:
    token: str
    args: dict[str, Any]
    depends_on: list[str] = field(default_factory=list)  # URNs the invoke waits for (InvokeOutputOptions)
    provider: str = ""  # the provider reference (`urn::id`), "" for the default provider


@dataclass
class ProgramRun:
    """Everything one program run declared, and what it exported."""

    stack: str
    resources: list[DeclaredResource]
    exports: dict[str, Any]
    invocations: list[Invocation]
    warnings: list[Any] = field(default_factory=list)  # infra.rules.Finding, severity warning
    subnet_zones: dict[str, str] = field(default_factory=dict)  # AWS subnet id -> zone (id), as EC2 knows it

    def of_type(self, token: str) -> list[DeclaredResource]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str, name: str | None = None) -> DeclaredResource:
        found = [r for r in self.of_type(token) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {token} {name or ''}, found {len(found)}")
        return found[0]

    def by_urn(self, urn: str) -> DeclaredResource | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def children(self, parent: DeclaredResource) -> list[DeclaredResource]:
        return [r for r in self.resources if r.parent == parent.urn]

    def ancestors(self, resource: DeclaredResource) -> list[DeclaredResource]:
        chain, current = [], resource
        while current.parent and (up := self.by_urn(current.parent)) is not None:
            chain.append(up)
            current = up
        return chain

    @property
    def cloud_resources(self) -> list[DeclaredResource]:
        """Resources a provider would create (not components, not providers)."""
        return [r for r in self.resources if r.custom and not r.type.startswith("pulumi:providers:")]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.resources:
            out[r.type] = out.get(r.type, 0) + 1
        return dict(sorted(out.items()))


def _short_hash(*parts: str, n: int = 8) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def _autoname(name: str) -> str:
    """What pulumi-aws's and pulumi-gcp's auto-naming produce: the logical name, a hyphen and 7 random hex
    characters (https://www.pulumi.com/docs/iac/concepts/resources/names/#autonaming)."""
    return f"{name}-{_short_hash(name, n=7)}"


def _aws_id(prefix: str, name: str) -> str:
    return f"{prefix}-{_short_hash(prefix, name, n=17)}"


_AWS_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/securityGroup:SecurityGroup": "sg",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt",
    "aws:ec2/internetGateway:InternetGateway": "igw",
    "aws:ec2/natGateway:NatGateway": "nat",
    "aws:ec2/eip:Eip": "eipalloc",
    "aws:ec2/routeTable:RouteTable": "rtb",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr",
}


def _aws_outputs(token: str, name: str, inputs: dict) -> tuple[str, dict]:
    region = inputs.get("region") or "us-east-1"
    acct = MOCK_AWS_ACCOUNT
    if token == "aws:s3/bucket:Bucket":
        bucket = inputs.get("bucket") or _autoname(name)
        return bucket, {
            "bucket": bucket,
            "arn": f"arn:aws:s3:::{bucket}",
            "bucketDomainName": f"{bucket}.s3.amazonaws.com",
            "bucketRegionalDomainName": f"{bucket}.s3.{region}.amazonaws.com",
            "region": region,
        }
    if token in ("aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile"):
        rname = inputs.get("name") or _autoname(name)
        kind = "role" if token.endswith("Role") else "instance-profile"
        return rname, {
            "name": rname,
            "arn": f"arn:aws:iam::{acct}:{kind}/{rname}",
            "uniqueId": "AROA" + _short_hash(name, n=17).upper(),
        }
    if token == "aws:autoscaling/group:Group":
        gname = inputs.get("name") or _autoname(name)
        uid = _short_hash(gname, n=8) + "-0000-4000-8000-" + _short_hash(gname, "x", n=12)
        arn = f"arn:aws:autoscaling:{region}:{acct}:autoScalingGroup:{uid}:autoScalingGroupName/{gname}"
        return gname, {"name": gname, "arn": arn}
    if token == "aws:ec2/placementGroup:PlacementGroup":
        pname = inputs.get("name") or _autoname(name)
        return pname, {
            "name": pname,
            "placementGroupId": _aws_id("pg", name),
            "arn": f"arn:aws:ec2:{region}:{acct}:placement-group/{pname}",
        }
    if token == "aws:budgets/budget:Budget":
        bname = inputs.get("name") or _autoname(name)
        return f"{acct}:{bname}", {
            "name": bname,
            "accountId": acct,
            "arn": f"arn:aws:budgets::{acct}:budget/{bname}",
        }
    if token == "aws:bcmdata/export:Export":
        export = dict(inputs.get("export") or {})
        ename = export.get("name") or _autoname(name)
        arn = f"arn:aws:bcm-data-exports:us-east-1:{acct}:export/{ename}-{_short_hash(ename, n=8)}"
        export["exportArn"] = arn
        return arn, {"export": export}
    if token == "aws:iam/rolePolicy:RolePolicy":
        return f"{inputs.get('role', 'role')}:{name}", {"name": inputs.get("name") or name}
    if token == "aws:ec2/launchTemplate:LaunchTemplate":
        lt_id = _aws_id("lt", name)
        return lt_id, {
            "arn": f"arn:aws:ec2:{region}:{acct}:launch-template/{lt_id}",
            "latestVersion": 1,
            "defaultVersion": 1,
        }
    prefix = _AWS_ID_PREFIX.get(token)
    rid = _aws_id(prefix, name) if prefix else f"{name}-{_short_hash(token, name)}"
    extra: dict[str, Any] = {}
    if token == "aws:ec2/vpc:Vpc":
        extra["mainRouteTableId"] = _aws_id("rtb", name + "-main")
        extra["defaultSecurityGroupId"] = _aws_id("sg", name + "-default")
    if token == "aws:ec2/securityGroup:SecurityGroup":
        extra["arn"] = f"arn:aws:ec2:{region}:{acct}:security-group/{rid}"
    if token == "aws:ec2/subnet:Subnet":
        extra["arn"] = f"arn:aws:ec2:{region}:{acct}:subnet/{rid}"
    return rid, extra


def _gcp_outputs(token: str, name: str, inputs: dict) -> tuple[str, dict]:
    project = inputs.get("project") or MOCK_GCP_PROJECT
    rname = inputs.get("name") or _autoname(name)
    base = f"https://www.googleapis.com/compute/v1/projects/{project}"
    region = inputs.get("region") or "us-central1"
    if token == "gcp:bigquery/dataset:Dataset":
        dsid = inputs["datasetId"]
        return f"projects/{project}/datasets/{dsid}", {
            "project": project,
            "selfLink": f"https://bigquery.googleapis.com/bigquery/v2/projects/{project}/datasets/{dsid}",
        }
    if token == "gcp:storage/bucketObject:BucketObject":
        # pulumi-gcp's id for an object is `<bucket>-<name>`; the JSON API's links quote the name.
        bucket, quoted = inputs["bucket"], urllib.parse.quote(inputs["name"], safe="")
        link = f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{quoted}"
        return f"{bucket}-{inputs['name']}", {
            "outputName": inputs["name"],
            "selfLink": link,
            "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{quoted}?alt=media",
            "generation": 1,
        }
    if token == "gcp:storage/bucket:Bucket":
        return rname, {
            "name": rname,
            "url": f"gs://{rname}",
            "selfLink": f"https://www.googleapis.com/storage/v1/b/{rname}",
        }
    if token == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        return f"projects/{project}/serviceAccounts/{email}", {
            "email": email,
            "member": f"serviceAccount:{email}",
            "name": f"projects/{project}/serviceAccounts/{email}",
            "uniqueId": _short_hash(email, n=21),
        }
    if token == "gcp:projects/iAMCustomRole:IAMCustomRole":
        rid = f"projects/{project}/roles/{inputs['roleId']}"
        return rid, {"name": rid}
    if token == "gcp:billing/budget:Budget":
        bid = f"billingAccounts/{inputs.get('billingAccount', MOCK_GCP_BILLING_ACCOUNT)}/budgets/{_short_hash(name, n=12)}"
        return bid, {"name": bid}
    if token in ("gcp:tags/tagKey:TagKey", "gcp:tags/tagValue:TagValue"):
        # Resource Manager answers with a numeric id (the provider's `name`); the resource is tagKeys/N, tagValues/N.
        number = str(int(_short_hash(token, name, n=12), 16))[:15]
        collection = "tagKeys" if token.endswith("TagKey") else "tagValues"
        return f"{collection}/{number}", {"name": number, "namespacedName": f"{project}/{inputs.get('shortName')}"}
    if token == "gcp:monitoring/notificationChannel:NotificationChannel":
        cid = f"projects/{project}/notificationChannels/{_short_hash(name, n=16)}"
        return cid, {"name": cid}
    if token.startswith("gcp:compute/"):
        kind = token.rsplit(":", 1)[-1]
        collection = {
            "Network": "global/networks",
            "Firewall": "global/firewalls",
            "InstanceTemplate": "global/instanceTemplates",
            "Subnetwork": f"regions/{region}/subnetworks",
            "Router": f"regions/{region}/routers",
            "RegionInstanceGroupManager": f"regions/{region}/instanceGroupManagers",
        }.get(kind, kind.lower() + "s")
        link = f"{base}/{collection}/{rname}"
        # A router's NAT is a part of the router, with no self link of its own.
        out = {"name": rname} if kind == "RouterNat" else {"name": rname, "selfLink": link}
        if kind == "InstanceTemplate":
            # Templates are immutable: any change is a new template, with a new unique id.
            body = json.dumps(inputs, sort_keys=True, default=str)
            out["selfLinkUnique"] = f"{link}?uniqueId={_short_hash(name, body, n=19)}"
        if kind == "RegionInstanceGroupManager":
            out["instanceGroup"] = f"{base}/regions/{region}/instanceGroups/{rname}"
        return f"projects/{project}/{collection}/{rname}", out
    # Other types (IAM members, ...) have no name output; an IAM binding answers with its policy's etag.
    return f"{name}-{_short_hash(token, name)}", {"etag": "BwY" + _short_hash(token, name, n=9)} if "IAM" in token else {}


_AZ_PROVIDER = {
    "resources:ResourceGroup": None,
    "network:VirtualNetwork": "Microsoft.Network/virtualNetworks",
    "network:Subnet": "subnets",
    "network:NetworkSecurityGroup": "Microsoft.Network/networkSecurityGroups",
    "network:NatGateway": "Microsoft.Network/natGateways",
    "network:PublicIPAddress": "Microsoft.Network/publicIPAddresses",
    "storage:StorageAccount": "Microsoft.Storage/storageAccounts",
    "storage:BlobServiceProperties": "blobServices",
    "storage:BlobContainer": "blobServices/default/containers",
    "storage:ManagementPolicy": "managementPolicies",
    "managedidentity:UserAssignedIdentity": "Microsoft.ManagedIdentity/userAssignedIdentities",
    "compute:VirtualMachineScaleSet": "Microsoft.Compute/virtualMachineScaleSets",
}

# The input that names the resource, per azure-native type (others are autonamed with a suffix).
_AZ_NAME_KEY = {
    "resources:ResourceGroup": "resourceGroupName",
    "network:VirtualNetwork": "virtualNetworkName",
    "network:Subnet": "subnetName",
    "network:NetworkSecurityGroup": "networkSecurityGroupName",
    "network:NatGateway": "natGatewayName",
    "network:PublicIPAddress": "publicIpAddressName",
    "storage:StorageAccount": "accountName",
    "storage:BlobServiceProperties": "blobServicesName",
    "storage:BlobContainer": "containerName",
    "storage:ManagementPolicy": "managementPolicyName",
    "storage:Blob": "blobName",
    "managedidentity:UserAssignedIdentity": "resourceName",
    "compute:VirtualMachineScaleSet": "vmScaleSetName",
    "consumption:Budget": "budgetName",
    "costmanagement:Export": "exportName",
}


_AZ_CHILD_KINDS = {
    "network:Subnet",
    "network:SecurityRule",
    "storage:BlobContainer",
    "storage:BlobServiceProperties",
    "storage:ManagementPolicy",
    "storage:Blob",
}


def _azure_outputs(token: str, name: str, inputs: dict) -> tuple[str, dict]:
    kind = token.split(":", 1)[1]
    sub = f"/subscriptions/{MOCK_AZURE_SUBSCRIPTION}"
    rg = inputs.get("resourceGroupName") or "rg"
    rname = inputs.get(_AZ_NAME_KEY.get(kind, "name"))
    if not rname:
        # azure-native's autonaming (pulumi-azure-native#519): a top-level resource gets its logical name
        # plus 8 random hex characters, nothing stripped or lowercased (#3406, #3665); a child resource
        # (subnet, container, ...) gets its logical name as is. infra/rules/names.py then checks the result.
        rname = name if kind in _AZ_CHILD_KINDS else name + _short_hash(name, n=8)
    if kind == "resources:ResourceGroup":
        rid = f"{sub}/resourceGroups/{rname}"
        return rid, {"name": rname}
    if kind == "authorization:RoleDefinition":
        rid = f"{sub}/providers/Microsoft.Authorization/roleDefinitions/{_uuid(name)}"
        return rid, {"name": _uuid(name), "type": "Microsoft.Authorization/roleDefinitions"}
    if kind == "authorization:RoleAssignment":
        rid = f"{inputs.get('scope', sub)}/providers/Microsoft.Authorization/roleAssignments/{_uuid(name)}"
        return rid, {"name": _uuid(name)}
    if kind == "consumption:Budget":
        return f"{inputs.get('scope', sub)}/providers/Microsoft.Consumption/budgets/{rname}", {"name": rname}
    if kind == "costmanagement:Export":
        return f"{inputs.get('scope', sub)}/providers/Microsoft.CostManagement/exports/{rname}", {
            "name": rname
        }
    if kind == "storage:Blob":
        # A blob is no ARM resource: azure-native's id for it is its URL (custom_storage_azidentity.go readBlob).
        account, container = inputs.get("accountName"), inputs.get("containerName")
        url = f"https://{account}.blob.core.windows.net/{container}/{rname}"
        return url, {"name": rname, "url": url, "metadata": {}}
    path = _AZ_PROVIDER.get(kind, kind.replace(":", "/"))
    if kind == "network:Subnet":
        rid = f"{sub}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{inputs.get('virtualNetworkName')}/subnets/{rname}"
    elif kind in ("storage:BlobServiceProperties", "storage:BlobContainer", "storage:ManagementPolicy"):
        rid = f"{sub}/resourceGroups/{rg}/providers/Microsoft.Storage/storageAccounts/{inputs.get('accountName')}/{path}/{rname}"
    else:
        rid = f"{sub}/resourceGroups/{rg}/providers/{path}/{rname}"
    out: dict[str, Any] = {"name": rname}
    if kind == "managedidentity:UserAssignedIdentity":
        out.update(principalId=_uuid(name + "p"), clientId=_uuid(name + "c"), tenantId=MOCK_AZURE_TENANT)
    identity = inputs.get("identity")
    if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
        # Inputs list identity ids; the service answers with a map of id -> principal and client ids.
        out["identity"] = {
            **identity,
            "userAssignedIdentities": {
                i: {"principalId": _uuid(i + "p"), "clientId": _uuid(i + "c")}
                for i in identity["userAssignedIdentities"]
            },
        }
    if kind == "storage:StorageAccount":
        out["primaryEndpoints"] = {"blob": f"https://{rname}.blob.core.windows.net/"}
    return rid, out


# ------------------------------------------------------------------------------------ AMI lookups


@dataclass(frozen=True)
class MockImage:
    """One AMI as EC2 DescribeImages reports it (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Image.html)."""

    image_id: str
    name: str
    owner_id: str
    owner_alias: str | None
    architecture: str
    state: str
    creation_date: str  # ISO 8601, as the API gives it: sorts as text
    root_device_name: str
    root_device_type: str = "ebs"
    regions: tuple[str, ...] | None = None  # None: published in every region
    deprecation_time: str | None = None  # ISO 8601 `DeprecationTime`; None: no deprecation set

    @classmethod
    def from_api(cls, record: dict[str, Any]) -> MockImage:
        """From a DescribeImages `Image` record (plus `Regions`, where the AMI exists)."""
        regions = record.get("Regions")
        return cls(
            image_id=record["ImageId"],
            name=record["Name"],
            owner_id=record["OwnerId"],
            owner_alias=record.get("ImageOwnerAlias"),
            architecture=record["Architecture"],
            state=record["State"],
            creation_date=record["CreationDate"],
            root_device_name=record["RootDeviceName"],
            root_device_type=record.get("RootDeviceType", "ebs"),
            regions=tuple(regions) if regions is not None else None,
            deprecation_time=record.get("DeprecationTime"),
        )


# The public AMIs the program looks up by default, by name: the Base OSS DLAMIs around infra/aws/fleet.py
# GPU_AMI_NAME (infra/node_env.py AWS_GPU_AMI_NAME: Ubuntu 24.04, x86_64), and DLAMIs the filter must not pick: the
# ARM64 build and two PyTorch DLAMIs, one of them newer than every Base image. Every name is one AWS publishes
# (tests/fixtures/published_images/aws_dlami_names.json, with where each was seen); Ubuntu DLAMIs: root /dev/sda1,
# Amazon Linux /dev/xvda. The ids are stand-ins: no published list gives one id that holds in every region (an
# AMI id holds in one). They are of one made-up family, ami-0dea1a0000000xxxx, which infra/rules/images.py refuses
# in a stack (rule image-placeholder-id): no stack may pin an id only this table knows. A stack's Gaudi fleet pins
# the user's own AMI, which no table here holds (the lookup answers it as a private image, unknown until apply).
# tests/fixtures/aws_amis/images.json holds these with their provenance, and real AMIs besides.
DEFAULT_IMAGES: tuple[MockImage, ...] = (
    MockImage(
        "ami-0dea1a0000000a002",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20260918",
        "898082745236", "amazon", "x86_64", "available", "2026-09-18T00:00:00.000Z", "/dev/sda1",
    ),
    MockImage(
        "ami-0dea1a0000000a004",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20261002",
        "898082745236", "amazon", "x86_64", "available", "2026-10-02T00:00:00.000Z", "/dev/sda1",
    ),
    MockImage(
        "ami-0dea1a0000000a003",
        "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20260918",
        "898082745236", "amazon", "arm64", "available", "2026-09-21T00:00:00.000Z", "/dev/sda1",
    ),
    MockImage(
        "ami-0dea1a0000000c001",
        "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.12 (Ubuntu 24.04) 20260822",
        "898082745236", "amazon", "x86_64", "available", "2026-08-22T00:00:00.000Z", "/dev/sda1",
    ),
    MockImage(
        "ami-0dea1a0000000c002",
        "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.13 (Amazon Linux 2023) 20261003",
        "898082745236", "amazon", "x86_64", "available", "2026-10-03T00:00:00.000Z", "/dev/xvda",
    ),
)  # fmt: skip

# What terraform-provider-aws's aws_ami data source (behind aws.ec2.get_ami) answers when the filters match
# nothing or, without most_recent, more than one image (internal/service/ec2/ec2_ami_data_source.go).
AMI_NO_RESULTS = "Your query returned no results. Please change your search criteria and try again."
AMI_MANY_RESULTS = (
    "Your query returned more than one result. Please try more specific search criteria, "
    "or set `most_recent` attribute to true."
)


class AmiLookupError(Exception):
    """aws.ec2.get_ami failed as the real provider would."""


def ec2_wildcard(pattern: str) -> re.Pattern[str]:
    """DescribeImages filter values: `*` any run of characters, `?` one character, all else literal."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


# DescribeImages filter name -> the image field it compares
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeImages.html, "Filters").
_IMAGE_FILTERS: dict[str, Callable[[MockImage], str | None]] = {
    "image-id": lambda i: i.image_id,
    "name": lambda i: i.name,
    "architecture": lambda i: i.architecture,
    "state": lambda i: i.state,
    "owner-id": lambda i: i.owner_id,
    "owner-alias": lambda i: i.owner_alias,
    "root-device-name": lambda i: i.root_device_name,
    "root-device-type": lambda i: i.root_device_type,
}


def _deprecated(image: MockImage) -> bool:
    """Past its DeprecationTime. DescribeImages leaves such an image out unless IncludeDeprecated is set, except
    for its owner (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeImages.html, and
    "Deprecate an AMI" in the EC2 User Guide); the aws_ami data source passes include_deprecated through."""
    if image.deprecation_time is None or image.owner_id == MOCK_AWS_ACCOUNT:
        return False
    when = datetime.fromisoformat(image.deprecation_time.replace("Z", "+00:00"))
    return when <= datetime.now(UTC)


def _image_matches(image: MockImage, region: str, owners: list[str], filters: list[dict]) -> bool:
    if image.regions is not None and region not in image.regions:
        return False  # an AMI id lives in one region
    # Owners: account ids or aliases (`amazon`, `aws-marketplace`); an image matches any one of them.
    if owners and image.owner_id not in owners and image.owner_alias not in owners:
        return False
    for f in filters:  # every filter must match; within one, any value may
        field_of = _IMAGE_FILTERS[f["name"]]
        value = field_of(image)
        if value is None or not any(ec2_wildcard(v).fullmatch(value) for v in f["values"]):
            return False
    return True


# What `pulumi preview` shows for a value known only at apply time (the same sentinel its JSON carries).
UNKNOWN_UNTIL_APPLY = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def _is_private_pin(images: tuple[MockImage, ...], owners: list[str], filters: list[dict]) -> bool:
    """A stack that pins one literal AMI id this table has never heard of: most likely the user's own image,
    which only their account can describe. (An id the table knows, but in another region, still fails.)"""
    if owners or len(filters) != 1 or filters[0]["name"] != "image-id" or len(filters[0]["values"]) != 1:
        return False
    image_id = filters[0]["values"][0]
    return not any(c in image_id for c in "*?") and all(i.image_id != image_id for i in images)


def _private_image(image_id: str) -> dict:
    """The pinned image, with what only a real lookup can tell left unknown until apply, never guessed."""
    return {
        "id": image_id,
        "imageId": image_id,
        "name": UNKNOWN_UNTIL_APPLY,
        "rootDeviceName": UNKNOWN_UNTIL_APPLY,
        "rootDeviceType": UNKNOWN_UNTIL_APPLY,
        "architecture": UNKNOWN_UNTIL_APPLY,
        "ownerId": UNKNOWN_UNTIL_APPLY,
        "imageOwnerAlias": None,
    }


def _describe_image(images: tuple[MockImage, ...], args: dict) -> dict:
    """aws:ec2/getAmi over `images`: DescribeImages filtering, then the data source's one-image rule."""
    filters = list(args.get("filters") or [])
    for f in filters:
        if f["name"] not in _IMAGE_FILTERS:
            # What EC2 answers for a filter name it does not have (this mock implements the ones above).
            raise AmiLookupError(f"InvalidParameterValue: The filter '{f['name']}' is invalid")
    region = args.get("region") or "us-east-1"
    # `self`: the caller's own account (DescribeImages Owners).
    owners = [MOCK_AWS_ACCOUNT if o == "self" else o for o in args.get("owners") or []]
    found = [i for i in images if _image_matches(i, region, owners, filters)]
    if not args.get("includeDeprecated"):
        found = [i for i in found if not _deprecated(i)]
    if not found and _is_private_pin(images, owners, filters):
        return _private_image(filters[0]["values"][0])
    if not found and owners == [MOCK_AWS_ACCOUNT]:
        # The user's own images by name (a Gaudi fleet's): only their account can answer; whether it has one is
        # the first deploy's question (infra/first_deploy.py), not this offline run's.
        return _private_image(UNKNOWN_UNTIL_APPLY)
    if not found:
        raise AmiLookupError(
            f"aws.ec2.get_ami: {AMI_NO_RESULTS} (region {region}, owners {owners}, filters {filters})"
        )
    if len(found) > 1 and not args.get("mostRecent"):
        raise AmiLookupError(f"aws.ec2.get_ami: {AMI_MANY_RESULTS}")
    image = max(found, key=lambda i: i.creation_date)
    return {
        "id": image.image_id,
        "imageId": image.image_id,
        "name": image.name,
        "rootDeviceName": image.root_device_name,
        "rootDeviceType": image.root_device_type,
        "architecture": image.architecture,
        "ownerId": image.owner_id,
        "imageOwnerAlias": image.owner_alias,
        "creationDate": image.creation_date,
        "state": image.state,
    }


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _get_scale_set(args: dict, scale_sets: dict[str, int]) -> dict:
    """GET a scale set: its body when the account has it, else ARM's 404 as azure-native reports it (azcore's
    ResponseError text: the request, RESPONSE 404, ERROR CODE and the JSON error)."""
    rg, name = args.get("resourceGroupName"), args.get("vmScaleSetName")
    if name in scale_sets:
        return {"name": name, "sku": {"name": "mock", "tier": "Standard", "capacity": scale_sets[name]}}
    url = (
        f"https://management.azure.com/subscriptions/{MOCK_AZURE_SUBSCRIPTION}/resourceGroups/{rg}/providers/"
        f"Microsoft.Compute/virtualMachineScaleSets/{name}"
    )
    message = (
        f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource group '{rg}' was not "
        "found. For more details please go to https://aka.ms/ARMResourceNotFoundFix"
    )
    raise InvokeFailure(
        f"GET {url}\n{'-' * 80}\nRESPONSE 404: 404 Not Found\nERROR CODE: ResourceNotFound\n{'-' * 80}\n"
        f'{{"error": {{"code": "ResourceNotFound", "message": "{message}"}}}}'
    )


class InvokeFailure(Exception):
    """An invoke the provider answers with an error (the engine hands its text to the program)."""


def _call(
    token: str, args: dict, images: tuple[MockImage, ...], subnet_zones: dict[str, str], scale_sets: dict[str, int]
) -> dict:
    if token == "aws:index/getCallerIdentity:getCallerIdentity":
        return {
            "accountId": MOCK_AWS_ACCOUNT,
            "arn": f"arn:aws:iam::{MOCK_AWS_ACCOUNT}:user/mock",
            "userId": "AIDAMOCK",
            "id": MOCK_AWS_ACCOUNT,
        }
    if token == "aws:ec2/getAmi:getAmi":
        return _describe_image(images, args)
    if token == "aws:ec2/getSubnets:getSubnets":
        filters = {f["name"]: f["values"] for f in args.get("filters") or []}
        zones = filters.get("availability-zone-id") or ["az"]
        vpc = (filters.get("vpc-id") or ["vpc"])[0]
        ids = {_aws_id("subnet", vpc + z): z for z in zones}
        subnet_zones.update(ids)
        return {"ids": list(ids), "id": args.get("region") or "us-east-1"}
    if token == "gcp:organizations/getClientConfig:getClientConfig":
        return {
            "project": MOCK_GCP_PROJECT,
            "region": "us-central1",
            "zone": "",
            "id": "mock",
            "accessToken": "",
        }
    if token == "gcp:organizations/getProject:getProject":
        pid = args.get("projectId") or MOCK_GCP_PROJECT
        return {
            "projectId": pid,
            "number": MOCK_GCP_PROJECT_NUMBER,
            "billingAccount": MOCK_GCP_BILLING_ACCOUNT,
            "name": pid,
            "id": f"projects/{pid}",
        }
    if token == "azure-native:network:getSubnet":
        sub, rg = MOCK_AZURE_SUBSCRIPTION, args.get("resourceGroupName")
        vnet, name = args.get("virtualNetworkName"), args.get("subnetName")
        return {
            "id": f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{name}",
            "name": name,
            "addressPrefix": "10.20.1.0/24",
        }
    if token == "azure-native:compute:getVirtualMachineScaleSet":
        return _get_scale_set(args, scale_sets)
    if token == "azure-native:authorization:getClientConfig":
        return {
            "subscriptionId": MOCK_AZURE_SUBSCRIPTION,
            "tenantId": MOCK_AZURE_TENANT,
            "clientId": _uuid("client"),
            "objectId": _uuid("object"),
        }
    raise NotImplementedError(
        f"the mock runtime has no answer for invoke {token}; add one in infra/mock_runtime.py"
    )


class CloudMocks(pulumi.runtime.Mocks):
    """Answers resource registrations and invokes the way the clouds would, deterministically."""

    def __init__(self, images: tuple[MockImage, ...] = DEFAULT_IMAGES, scale_sets: dict[str, int] | None = None) -> None:
        self.invocations: list[Invocation] = []
        self.images = tuple(images)  # the AMIs aws:ec2/getAmi can find
        self.subnet_zones: dict[str, str] = {}  # every subnet EC2 would know: created or looked up
        self.scale_sets = dict(scale_sets or {})  # Azure scale sets that already exist: name -> live capacity

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        token, name, inputs = args.typ, args.name, dict(args.inputs)
        if token.startswith("pulumi:providers:"):
            return f"{name}-provider-id", inputs
        package = token.split(":", 1)[0]
        if package == "aws":
            rid, extra = _aws_outputs(token, name, inputs)
            if token == "aws:ec2/subnet:Subnet":
                self.subnet_zones[rid] = inputs.get("availabilityZoneId") or inputs.get("availabilityZone") or ""
        elif package == "gcp":
            rid, extra = _gcp_outputs(token, name, inputs)
        elif package == "azure-native":
            rid, extra = _azure_outputs(token, name, inputs)
        else:
            rid, extra = f"{name}-id", {}
        return rid, {**inputs, **extra}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        try:
            return _call(args.token, dict(args.args), self.images, self.subnet_zones, self.scale_sets), []
        except InvokeFailure as failure:  # how the SDK receives a provider's error: `invoke of <token> failed: ...`
            return {}, [("", str(failure))]


class _CapturingMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor, also keeping each registration's parent, inputs and kind."""

    def __init__(self, mocks: CloudMocks) -> None:
        super().__init__(mocks)
        self.cloud_mocks = mocks
        self.captured: list[DeclaredResource] = []

    def GetDeploymentInfo(self, request):  # noqa: N802 (gRPC method name)
        """The stock features plus invoke dependencies, as the engine has: the SDK then sends an invoke's
        dependsOn (here recorded; a mock resource is complete once registered, so nothing needs gating)."""
        info = super().GetDeploymentInfo(request)
        info.supportedFeatures.append(resource_pb2.RESOURCE_MONITOR_FEATURE_INVOKE_DEPENDS_ON)
        return info

    def Invoke(self, request):  # noqa: N802 (gRPC method name)
        if request.tok != "pulumi:pulumi:getResource":
            args = _plain(pulumi.runtime.rpc.deserialize_properties(request.args))
            self.cloud_mocks.invocations.append(
                Invocation(request.tok, args, list(request.dependsOn), request.provider)
            )
        return super().Invoke(request)

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            self.captured.append(DeclaredResource(request.type, request.name, response.urn, None, False, {}))
            return response
        inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
        registered = self.resources.get(response.urn)
        self.captured.append(
            DeclaredResource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent or None,
                custom=bool(request.custom),
                inputs=_plain(inputs),
                outputs=_plain(registered.state) if registered else {},
                id=registered.id if registered else None,
                ignore_changes=list(request.ignoreChanges),
                depends_on=list(request.dependencies),
                provider=request.provider,
            )
        )
        return response


# How the engine writes an asset in a property map (pulumi/runtime/rpc.py `_special_sig_key`,
# `_special_asset_sig`), which is also how `pulumi preview --json` shows one.
ASSET_SIG_KEY = "4dabf18193072939515e22adb298388d"
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"


def _plain(value: Any) -> Any:
    """Deserialised property values as plain Python (secrets unwrapped, resource refs as URNs, assets in the
    engine's own map form: {sig: asset sig, "text" | "path" | "uri": ...})."""
    if isinstance(value, pulumi.StringAsset):
        return {ASSET_SIG_KEY: ASSET_SIG, "text": value.text}
    if isinstance(value, pulumi.FileAsset):
        return {ASSET_SIG_KEY: ASSET_SIG, "path": value.path}
    if isinstance(value, pulumi.RemoteAsset):
        return {ASSET_SIG_KEY: ASSET_SIG, "uri": value.uri}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.Resource):
        return getattr(value, "_urn_value", None) or repr(value)
    return value


def run_program(
    stack: str,
    config: StackConfig,
    *,
    declare: Callable[[str, StackConfig], dict] | None = None,
    images: tuple[MockImage, ...] | None = None,
    scale_sets: dict[str, int] | None = None,
    enforce_rules: bool = True,
) -> ProgramRun:
    """Run the program for one stack under the mock runtime; return what it declared and exported.

    `images`: the AMIs an AMI lookup can find (default DEFAULT_IMAGES); a lookup they do not satisfy fails
    as the real one does. `scale_sets`: the Azure scale sets the subscription already has (name -> capacity);
    none by default, a first deployment. Raises what the program raises (a ConfigError for a config the clouds would reject),
    and, unless `enforce_rules` is off, a ConfigError for the first provider rule the declared resources break
    (infra/rules); the rules' warnings come back in `ProgramRun.warnings`.
    """
    if declare is None:
        from infra.program import declare as declare_program

        declare = declare_program
    mocks = CloudMocks(DEFAULT_IMAGES if images is None else images, scale_sets)
    monitor = _CapturingMonitor(mocks)
    pulumi_settings.ROOT.set(None)  # a fresh root stack per run, named after this stack
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    pulumi_settings._get_rpc_manager().clear()
    pulumi_settings.SETTINGS.outputs.clear()  # pyright: ignore[reportAttributeAccessIssue] (a context property)
    exports: dict[str, Any] = {}

    def body() -> None:
        declared = declare(stack, config)
        resolved = _sync_await(pulumi.Output.from_input(declared).future())
        exports.update(resolved or {})

    try:
        _sync_await(run_pulumi_func(body))
    finally:
        pulumi_settings.ROOT.set(None)
    run = ProgramRun(stack, list(monitor.captured), _plain(exports), list(mocks.invocations))
    run.subnet_zones = dict(mocks.subnet_zones)
    if enforce_rules:
        from infra import rules

        run.warnings = rules.enforce(run)
    return run
