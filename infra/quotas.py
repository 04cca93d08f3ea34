"""The cloud quotas a stack needs at full size, per fleet: pure functions, no network.

A fresh account cannot launch a single GPU node: AWS starts every GPU Spot quota at 0 vCPUs, GCP grants GPU quota
per region and per model (Spot separate) under a project-wide cap, and Azure gates each VM family on demand and all
Spot VMs of a region together. `quota_needs` says, for every fleet, which quota it draws on, how much of it the fleet
takes when every node is up, and the one command (or console page) that raises it; `cli/quota_limits.py` reads the
current limits and says which fall short. A fleet whose quota trainfleet cannot name still gets a line (code "") that
says so: never silently nothing.

Sources (facts collected for issue 28, /tmp/i28/facts.md items 4, 7, 8):
- AWS Spot quota names and new-account defaults: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
  ("Spot Instance quotas are managed in terms of the number of virtual central processing units (vCPUs)"). The
  L-codes are not on an AWS page we could read; they agree across many public repos and a real
  `list-service-quotas` dump (L-C4BD4855, L-6E869C2A). The DL Spot code L-85EED4F7 and the Trn codes are from
  third-party maps only.
- GCP GPU metrics: regions.get `quotas[{metric, limit, usage}]` (https://cloud.google.com/compute/docs/reference/rest/v1/regions/get);
  metric names as in the Compute v1 Quota.Metric enum and public code (NVIDIA_A100_GPUS, PREEMPTIBLE_..., GPUS_ALL_REGIONS).
  Spot VMs draw the preemptible quota once Google grants one in the region, else the standard one
  (https://cloud.google.com/compute/docs/instances/spot#quotas): a Spot fleet's line names the preemptible metric,
  the one to request.
- Azure: usages API name.value per VM family (names from Microsoft's generated AKS VM-size list in microsoft/aspire and
  public `az vm list-usage` output). On-demand VMs count against their family and the regional "cores"; Spot VMs
  against one regional bucket, "lowPriorityCores" ("Total Regional Low-priority vCPUs"), whatever their family
  (Microsoft's quota-monitoring docs query it by that name; "consume this quota regardless of VM size" is from public
  write-ups, not seen verbatim on a Microsoft page).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace

from infra.catalog import default_catalog
from infra.config import Fleet, StackConfig

PROJECT_PLACEHOLDER = "<PROJECT_ID>"
SUBSCRIPTION_PLACEHOLDER = "<SUBSCRIPTION_ID>"


@dataclass(frozen=True, slots=True)
class QuotaNeed:
    """One quota one fleet draws on, at the fleet's full size."""

    cloud: str  # aws | gcp | azure
    region: str  # the fleet's region; "global" for a project-wide quota
    fleet: str
    name: str  # the quota as the console shows it
    code: str  # AWS quota code, GCP metric, Azure usage name; "" when trainfleet knows none
    unit: str  # "vCPUs" | "GPUs"
    needed: int  # what this fleet takes (0 when the instance type's size is unknown)
    purchase: str  # "spot" | "on-demand"
    scope: str  # "region" | "project"
    fix: str  # one line: the command or console page that raises it to what the whole stack needs
    instance_types: tuple[str, ...] = ()  # the types this line covers (a fallback of the same quota folds in)

    @property
    def label(self) -> str:
        """How a line names it: cloud, region, the console's name and the code."""
        return f"{self.cloud} {self.region} {self.name}" + (f" ({self.code})" if self.code else "")

    @property
    def key(self) -> tuple[str, str, str]:
        """Needs with the same key share one limit: the stack needs their sum."""
        return (self.cloud, self.region, self.code.lower().replace(" ", ""))


# ------------------------------------------------------------------------------------------------ AWS
@dataclass(frozen=True, slots=True)
class _Quota:
    name: str
    code: str


_P_ON_DEMAND = _Quota("Running On-Demand P instances", "L-417A185B")  # one bucket for every P generation
_G_ON_DEMAND = _Quota("Running On-Demand G and VT instances", "L-DB2E81BA")
# AWS instance family (the part before the dot) -> (Spot quota, on-demand quota); None: none known.
_AWS_FAMILIES: list[tuple[re.Pattern[str], _Quota | None, _Quota | None]] = [
    # Renamed from "All P Spot Instance Requests" (same code) when P5 got its own Spot quota.
    (re.compile(r"p[234][a-z]*"), _Quota("All P4, P3 and P2 Spot Instance Requests", "L-7212CCBC"), _P_ON_DEMAND),
    (re.compile(r"p5[a-z]*"), _Quota("All P5 Spot Instance Requests", "L-C4BD4855"), _P_ON_DEMAND),
    # P6 (B200/B300): on-demand in the P bucket; no Spot quota for it is documented where we looked.
    (re.compile(r"p6(-[a-z0-9]+)?"), None, _P_ON_DEMAND),
    (re.compile(r"(g\d[a-z]*|vt\d)"), _Quota("All G and VT Spot Instance Requests", "L-3819A6DF"), _G_ON_DEMAND),
    (re.compile(r"dl\d[a-z]*"), _Quota("All DL Spot Instance Requests", "L-85EED4F7"),
     _Quota("Running On-Demand DL instances", "L-6E869C2A")),  # fmt: skip
    (re.compile(r"trn\d[a-z]*"), _Quota("All Trn Spot Instance Requests", "L-6B0D517C"),
     _Quota("Running On-Demand Trn instances", "L-2C3B7624")),  # fmt: skip
]


def aws_quota(instance_type: str, purchase: str) -> _Quota | None:
    family = instance_type.split(".", 1)[0]
    for pattern, spot, on_demand in _AWS_FAMILIES:
        if pattern.fullmatch(family):
            return spot if purchase == "spot" else on_demand
    return None


def _aws_fix(quota: _Quota, region: str, total: int) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {quota.code} "
        f"--desired-value {total} --region {region}"
    )


# ------------------------------------------------------------------------------------------------ GCP
# Machine type -> (metric, console name) of its GPU; Spot uses PREEMPTIBLE_<metric>. a3-edgegpu is left out on
# purpose: whether it draws NVIDIA_H100_GPUS or a metric of its own is not confirmed.
_GCP_GPUS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"a2-(highgpu|megagpu)-\d+g"), "NVIDIA_A100_GPUS", "NVIDIA A100 GPUs"),
    (re.compile(r"a2-ultragpu-\d+g"), "NVIDIA_A100_80GB_GPUS", "NVIDIA A100 80GB GPUs"),
    (re.compile(r"a3-highgpu-\d+g"), "NVIDIA_H100_GPUS", "NVIDIA H100 GPUs"),
    (re.compile(r"a3-megagpu-8g"), "NVIDIA_H100_MEGA_GPUS", "NVIDIA H100 Mega GPUs"),
    (re.compile(r"a3-ultragpu-8g(-nolssd)?"), "NVIDIA_H200_GPUS", "NVIDIA H200 GPUs"),
    (re.compile(r"a4-highgpu-8g"), "NVIDIA_B200_GPUS", "NVIDIA B200 GPUs"),
    (re.compile(r"g2-standard-\d+"), "NVIDIA_L4_GPUS", "NVIDIA L4 GPUs"),
]
GPUS_ALL_REGIONS = "GPUS_ALL_REGIONS"


def gcp_gpu_metric(instance_type: str, purchase: str) -> tuple[str, str] | None:
    """(metric, console name) of the regional GPU quota a machine type draws, or None if unknown."""
    for pattern, metric, name in _GCP_GPUS:
        if pattern.fullmatch(instance_type):
            return ("PREEMPTIBLE_" + metric, "Preemptible " + name) if purchase == "spot" else (metric, name)
    return None


def _gcp_fix(metric: str, region: str, project: str, total: int) -> str:
    where = "" if region == "global" else f" in {region}"
    return (
        f"set compute.googleapis.com/{metric.lower()}{where} to {total} at "
        f"https://console.cloud.google.com/iam-admin/quotas?project={project}"
    )


# ---------------------------------------------------------------------------------------------- Azure
# VM size -> (usage name.value, localizedValue) of its family's on-demand quota.
_AZURE_FAMILIES: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"Standard_NC\d+ads_A100_v4"), "standardNCADSA100v4Family", "Standard NCADS_A100_v4 Family vCPUs"),
    (re.compile(r"Standard_ND96asr_v4"), "standardNDASv4_A100Family", "Standard NDASv4_A100 Family vCPUs"),
    (re.compile(r"Standard_ND96amsr_A100_v4"), "standardNDAMSv4_A100Family", "Standard NDAMSv4_A100Family vCPUs"),
    (re.compile(r"Standard_ND96isr_H100_v5"), "standardNDSH100v5Family", "Standard NDSH100v5 Family vCPUs"),
    (re.compile(r"Standard_NC\d+adi?s_H100_v5"), "standardNCadsH100v5Family", "Standard NCadsH100v5 Family vCPUs"),
    (re.compile(r"Standard_NC\d+as_T4_v3"), "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs"),
    (re.compile(r"Standard_NV\d+adm?s_A10_v5"), "StandardNVADSA10v5Family", "Standard NVADSA10v5 Family vCPUs"),
    # usage names from a public VM-series table; the localized names follow the pattern above (not seen verbatim)
    (re.compile(r"Standard_NC\d+r?s_v3"), "standardNCSv3Family", "Standard NCSv3 Family vCPUs"),
    (re.compile(r"Standard_ND40rs_v2"), "standardNDSv2Family", "Standard NDSv2 Family vCPUs"),
]
AZURE_SPOT = ("lowPriorityCores", "Total Regional Low-priority vCPUs")
AZURE_CORES = ("cores", "Total Regional vCPUs")


def azure_family(instance_type: str) -> tuple[str, str] | None:
    for pattern, usage, name in _AZURE_FAMILIES:
        if pattern.fullmatch(instance_type):
            return usage, name
    return None


def _azure_fix(usage: str, region: str, subscription: str, total: int) -> str:
    # az quota (Microsoft.Quota): Spot is resource type lowPriority, the rest dedicated.
    kind = "lowPriority" if usage == AZURE_SPOT[0] else "dedicated"
    return (
        f"az quota create --resource-name {usage} --resource-type {kind} --scope "
        f"/subscriptions/{subscription}/providers/Microsoft.Compute/locations/{region} --limit-object value={total}"
    )


# ------------------------------------------------------------------------------------------ the needs
def _size(fleet: Fleet, instance_type: str) -> tuple[int, int] | None:
    """(vCPUs, accelerators) of one node, from the catalog (the fleet's region first)."""
    catalog = default_catalog()
    offers = catalog.offers(cloud=fleet.cloud, region=fleet.region, instance_type=instance_type) or catalog.offers(
        cloud=fleet.cloud, instance_type=instance_type
    )
    if not offers:
        return None
    return int(offers[0].vcpus), offers[0].accelerators_per_node


def _split(fleet: Fleet) -> list[tuple[str, int]]:
    """(purchase, nodes) as the AWS mixed-instances policy splits them: the on-demand base first, then the
    percentage of the rest rounded up (Fleet.on_demand_nodes); spot takes what is left."""
    return [(p, n) for p, n in (("on-demand", fleet.on_demand_nodes), ("spot", fleet.spot_nodes)) if n > 0]


def _unknown(fleet: Fleet, purchase: str, instance_type: str, unit: str, needed: int | None, why: str) -> QuotaNeed:
    return QuotaNeed(
        cloud=fleet.cloud, region=fleet.region, fleet=fleet.name, name=f"unknown quota for {instance_type}",
        code="", unit=unit, needed=needed or 0, purchase=purchase, scope="region", fix=why,
        instance_types=(instance_type,),
    )  # fmt: skip


def _not_in_catalog(fleet: Fleet, purchase: str, instance_type: str, unit: str) -> QuotaNeed:
    return _unknown(fleet, purchase, instance_type, unit, None,
                    f"unknown: {instance_type} is not in the catalog, so its size (and its quota) is unknown; "
                    f"see `trainfleet catalog list --cloud {fleet.cloud}`")  # fmt: skip


def _aws_needs(fleet: Fleet, purchase: str, nodes: int) -> list[QuotaNeed]:
    # The group may launch any of its types (the fallbacks when the first has no capacity), every node of one
    # type in the worst case: per quota, nodes x the biggest type that draws on it.
    groups: dict[str, tuple[_Quota, int, list[str]]] = {}
    needs = []
    for instance_type in [fleet.instance_type, *fleet.fallback_instance_types]:
        size = _size(fleet, instance_type)
        if size is None:
            needs.append(_not_in_catalog(fleet, purchase, instance_type, "vCPUs"))
            continue
        quota = aws_quota(instance_type, purchase)
        if quota is None:
            what = "Spot" if purchase == "spot" else "On-Demand"
            needs.append(_unknown(
                fleet, purchase, instance_type, "vCPUs", nodes * size[0],
                f"unknown: trainfleet knows no EC2 {what} quota for {instance_type}; find it with `aws service-quotas "
                f"list-service-quotas --service-code ec2 --region {fleet.region}` and raise it to at least "
                f"{nodes * size[0]} vCPUs",
            ))  # fmt: skip
            continue
        _, biggest, types = groups.get(quota.code, (quota, 0, []))
        groups[quota.code] = (quota, max(biggest, size[0]), [*types, instance_type])
    for quota, vcpus, types in groups.values():
        needs.append(QuotaNeed(
            cloud="aws", region=fleet.region, fleet=fleet.name, name=quota.name, code=quota.code, unit="vCPUs",
            needed=nodes * vcpus, purchase=purchase, scope="region", fix="", instance_types=tuple(types),
        ))  # fmt: skip
    return needs


def _gcp_needs(fleet: Fleet, purchase: str, nodes: int) -> list[QuotaNeed]:
    # A managed instance group has one machine type: the GCP program launches instance_type only.
    instance_type = fleet.instance_type
    size = _size(fleet, instance_type)
    if size is None:
        return [_not_in_catalog(fleet, purchase, instance_type, "GPUs")]
    if size[1] <= 0:
        return [_unknown(fleet, purchase, instance_type, "GPUs", None,
                         f"unknown: the catalog does not say how many GPUs {instance_type} has")]  # fmt: skip
    gpus = nodes * size[1]
    metric = gcp_gpu_metric(instance_type, purchase)
    if metric is None:
        return [_unknown(
            fleet, purchase, instance_type, "GPUs", gpus,
            f"unknown: trainfleet knows no GPU quota metric for {instance_type}; find it with `gcloud alpha quotas "
            f"info list --service=compute.googleapis.com` and raise it to at least {gpus} GPUs in {fleet.region}",
        )]  # fmt: skip
    base = QuotaNeed(cloud="gcp", region=fleet.region, fleet=fleet.name, name=metric[1], code=metric[0],
                     unit="GPUs", needed=gpus, purchase=purchase, scope="region", fix="",
                     instance_types=(instance_type,))  # fmt: skip
    return [
        base,
        # The project-wide cap on GPUs of every model in every region. Counted for Spot GPUs too (whether it
        # applies to them is not confirmed; counting them can only over-ask).
        replace(base, region="global", name="GPUs (all regions)", code=GPUS_ALL_REGIONS, scope="project"),
    ]


def _azure_needs(fleet: Fleet, purchase: str, nodes: int) -> list[QuotaNeed]:
    # A scale set has one VM size: the Azure program launches instance_type only.
    instance_type = fleet.instance_type
    size = _size(fleet, instance_type)
    if size is None:
        return [_not_in_catalog(fleet, purchase, instance_type, "vCPUs")]
    vcpus = nodes * size[0]
    base = QuotaNeed(cloud="azure", region=fleet.region, fleet=fleet.name, name=AZURE_SPOT[1], code=AZURE_SPOT[0],
                     unit="vCPUs", needed=vcpus, purchase=purchase, scope="region", fix="",
                     instance_types=(instance_type,))  # fmt: skip
    if purchase == "spot":  # one regional Spot bucket for every family
        return [base]
    needs = [replace(base, code=AZURE_CORES[0], name=AZURE_CORES[1])]
    family = azure_family(instance_type)
    if family is None:
        needs.append(_unknown(
            fleet, purchase, instance_type, "vCPUs", vcpus,
            f"unknown: trainfleet knows no quota family for {instance_type}; find it with `az vm list-usage "
            f"--location {fleet.region} -o table` and raise it to at least {vcpus} vCPUs",
        ))  # fmt: skip
    else:
        needs.insert(0, replace(base, code=family[0], name=family[1]))
    return needs


_PER_CLOUD = {"aws": _aws_needs, "gcp": _gcp_needs, "azure": _azure_needs}


def quota_needs(
    config: StackConfig, *, gcp_project: str | None = None, azure_subscription: str | None = None
) -> list[QuotaNeed]:
    """Every quota each fleet of `config` draws on at full size, in fleet order. The fix line of each names what
    the whole stack needs of that quota (fleets sharing one add up). `gcp_project` (the stack's gcp:project) and
    `azure_subscription` fill the fix lines; without them they hold a placeholder."""
    needs = [
        need
        for fleet in config.fleets
        for purchase, nodes in _split(fleet)
        for need in _PER_CLOUD[fleet.cloud](fleet, purchase, nodes)
    ]
    totals = stack_totals(needs)
    project = gcp_project or PROJECT_PLACEHOLDER
    subscription = azure_subscription or SUBSCRIPTION_PLACEHOLDER
    out = []
    for need in needs:
        if need.code:
            total = totals[need.key]
            if need.cloud == "aws":
                fix = _aws_fix(_Quota(need.name, need.code), need.region, total)
            elif need.cloud == "gcp":
                fix = _gcp_fix(need.code, need.region, project, total)
            else:
                fix = _azure_fix(need.code, need.region, subscription, total)
            need = replace(need, fix=fix)
        out.append(need)
    return out


def stack_totals(needs: list[QuotaNeed]) -> dict[tuple[str, str, str], int]:
    """What the stack needs of each quota it knows: the sum over fleets (and purchase splits) sharing it."""
    totals: dict[tuple[str, str, str], int] = defaultdict(int)
    for need in needs:
        if need.code:
            totals[need.key] += need.needed
    return dict(totals)
