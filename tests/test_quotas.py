"""Issue 28: the quotas each fleet needs (infra/quotas.py) and the live check of their limits (cli/quota_limits.py)
against stand-ins of AWS Service Quotas, GCP Compute regions/projects and Azure Compute usages
(tests/fake_quota_apis.py), each holding a fresh account.

Sizes used in the hand-worked figures below come from the catalog (infra/catalog/data/offers.csv):
p4de.24xlarge 96 vCPUs, p4d.24xlarge 96, p5.48xlarge 192, p6-b200.48xlarge 192, g5.12xlarge 48, g6.12xlarge 48,
g5.48xlarge 192, dl1.24xlarge 96, a2-highgpu-1g 1 GPU, a2-ultragpu-8g 8 GPUs, a3-highgpu-8g 8 GPUs,
a3-edgegpu-8g 8 GPUs, Standard_NC24ads_A100_v4 24 vCPUs, Standard_NC16ads_A10_v4 16 vCPUs.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import boto3
import pytest

from cli.quota_limits import QuotaCheck, read_limits
from infra.config import StackConfig
from infra.quotas import QuotaNeed, quota_needs
from infra.stack_file import read_stack_file
from tests.conftest import STACKS
from tests.fake_quota_apis import EC2_QUOTAS, FakeArmUsages, FakeComputeQuotas, FakeServiceQuotas
from tests.metadata_servers import GOOGLE_AUTH, GOOGLE_SCOPE, entra_token
from tests.needs import need_module

PROJECT = "my-ml-project"  # stacks/Pulumi.gcp-dev.yaml gcp:project
SUB = "00000000-0000-0000-0000-000000000000"
INSTALL = "pip install -e '.[test]'"
BACKOFF = 0.001  # injected: no test waits for real


def stack(name: str) -> StackConfig:
    return read_stack_file(STACKS / f"Pulumi.{name}.yaml").config


def config(*fleets: dict) -> StackConfig:
    sections = {"job": {"params": "1B", "tokens": "1B"}, "fleets": list(fleets)}
    return StackConfig.from_sections(sections, check_catalog=False)


def rows(needs: list[QuotaNeed]) -> list[tuple]:
    return [(n.cloud, n.region, n.fleet, n.purchase, n.code, n.needed, n.unit, n.instance_types) for n in needs]


# ------------------------------------------------------------------------------------------ needs
# What each shipped stack needs at full size, worked by hand from its stack file:
EXPECTED = {
    # prod: 4 x p4de.24xlarge, purchase mixed, on_demand_base 1, 0% above base -> 1 on-demand + 3 spot; falls back to
    # p5.48xlarge. On-demand: one P bucket holds both types, so 1 node x the bigger (p5, 192) = 192. Spot: p4de draws
    # "All P4, P3 and P2" 3 x 96 = 288; p5 has its own Spot quota, 3 x 192 = 576.
    "prod": [
        ("aws", "us-east-1", "main", "on-demand", "L-417A185B", 192, "vCPUs", ("p4de.24xlarge", "p5.48xlarge")),
        ("aws", "us-east-1", "main", "spot", "L-7212CCBC", 288, "vCPUs", ("p4de.24xlarge",)),
        ("aws", "us-east-1", "main", "spot", "L-C4BD4855", 576, "vCPUs", ("p5.48xlarge",)),
    ],
    # dev: 1 x g5.12xlarge spot, fallback g6.12xlarge: both G, one line, 1 x max(48, 48) = 48.
    "dev": [("aws", "us-east-1", "dev", "spot", "L-3819A6DF", 48, "vCPUs", ("g5.12xlarge", "g6.12xlarge"))],
    # gaudi: 2 x dl1.24xlarge spot in us-west-2: 2 x 96 = 192 of the DL Spot quota.
    "gaudi": [("aws", "us-west-2", "gaudi", "spot", "L-85EED4F7", 192, "vCPUs", ("dl1.24xlarge",))],
    # gcp-dev: 1 x a2-highgpu-1g (1 x A100 40GB) spot: 1 preemptible A100 in us-central1, and 1 of the project cap.
    "gcp-dev": [
        ("gcp", "us-central1", "gdev", "spot", "PREEMPTIBLE_NVIDIA_A100_GPUS", 1, "GPUs", ("a2-highgpu-1g",)),
        ("gcp", "global", "gdev", "spot", "GPUS_ALL_REGIONS", 1, "GPUs", ("a2-highgpu-1g",)),
    ],
    # azure-dev: 1 x Standard_NC24ads_A100_v4 spot: Spot VMs draw only the regional Spot quota, 1 x 24 = 24.
    "azure-dev": [("azure", "eastus", "adev", "spot", "lowPriorityCores", 24, "vCPUs", ("Standard_NC24ads_A100_v4",))],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_shipped_stack_needs_what_its_fleets_draw(name):
    assert {p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml")} == set(EXPECTED)
    needs = quota_needs(stack(name), gcp_project=PROJECT, azure_subscription=SUB)
    assert rows(needs) == EXPECTED[name]
    assert all(n.fix for n in needs)


def test_fix_lines_name_the_exact_command_or_page():
    prod = {n.code: n for n in quota_needs(stack("prod"))}
    assert prod["L-7212CCBC"].name == "All P4, P3 and P2 Spot Instance Requests"
    assert prod["L-7212CCBC"].fix == (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-7212CCBC "
        "--desired-value 288 --region us-east-1"
    )
    gcp = quota_needs(stack("gcp-dev"), gcp_project=PROJECT)
    assert gcp[0].fix == (
        "set compute.googleapis.com/preemptible_nvidia_a100_gpus in us-central1 to 1 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=my-ml-project"
    )
    assert gcp[1].scope == "project" and gcp[1].name == "GPUs (all regions)"
    assert "?project=<PROJECT_ID>" in quota_needs(stack("gcp-dev"))[0].fix  # no project given: a placeholder
    (azure,) = quota_needs(stack("azure-dev"), azure_subscription=SUB)
    assert azure.name == "Total Regional Low-priority vCPUs"
    assert azure.fix == (
        f"az quota create --resource-name lowPriorityCores --resource-type lowPriority --scope "
        f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus --limit-object value=24"
    )
    # The names we print are the names AWS's own API gives (the stand-in holds the names from the AWS docs).
    for need in quota_needs(stack("prod")) + quota_needs(stack("dev")) + quota_needs(stack("gaudi")):
        assert need.name == EC2_QUOTAS[need.code][0]


def test_spot_and_on_demand_split_as_the_mixed_instances_policy_does():
    aws = dict(cloud="aws", region="us-east-1", instance_type="p4d.24xlarge", purchase="mixed")
    # 10 nodes, base 2, 25% above: 2 + ceil(8 x 0.25 = 2) = 4 on-demand, 6 spot -> 4 x 96 = 384 and 6 x 96 = 576.
    # 10 nodes, base 2, 30% above: 2 + ceil(8 x 0.30 = 2.4 -> 3) = 5 on-demand, 5 spot -> 480 and 480.
    needs = quota_needs(config(
        dict(name="quarter", nodes=10, on_demand_base=2, on_demand_percentage_above_base=25, **aws),
        dict(name="thirty", nodes=10, on_demand_base=2, on_demand_percentage_above_base=30, **aws),
    ))  # fmt: skip
    assert [(n.fleet, n.purchase, n.code, n.needed) for n in needs] == [
        ("quarter", "on-demand", "L-417A185B", 384), ("quarter", "spot", "L-7212CCBC", 576),
        ("thirty", "on-demand", "L-417A185B", 480), ("thirty", "spot", "L-7212CCBC", 480),
    ]  # fmt: skip
    # Both fleets share each quota: the fix asks for the stack's sum, 384 + 480 = 864 and 576 + 480 = 1056.
    assert {n.code: n.fix.split("--desired-value ")[1].split()[0] for n in needs} == {
        "L-417A185B": "864", "L-7212CCBC": "1056",
    }  # fmt: skip
    # On-demand on Azure draws the VM family and the regional total: 2 x 24 = 48 of each. On GCP, on-demand draws
    # the standard GPU metric: 2 x a2-ultragpu-8g = 16 A100 80GB GPUs, and 16 of the project cap.
    needs = quota_needs(config(
        dict(name="az", cloud="azure", region="eastus", instance_type="Standard_NC24ads_A100_v4", nodes=2,
             purchase="on-demand"),
        dict(name="gc", cloud="gcp", region="us-central1", instance_type="a2-ultragpu-8g", nodes=2,
             purchase="on-demand"),
    ))  # fmt: skip
    assert [(n.fleet, n.code, n.needed, n.unit, n.scope) for n in needs] == [
        ("az", "standardNCADSA100v4Family", 48, "vCPUs", "region"), ("az", "cores", 48, "vCPUs", "region"),
        ("gc", "NVIDIA_A100_80GB_GPUS", 16, "GPUs", "region"), ("gc", "GPUS_ALL_REGIONS", 16, "GPUs", "project"),
    ]  # fmt: skip
    assert needs[0].name == "Standard NCADS_A100_v4 Family vCPUs" and needs[1].name == "Total Regional vCPUs"


def test_a_fallback_of_another_family_needs_its_own_quota():
    # 2 x g5.48xlarge spot falling back to p4d.24xlarge: the group may launch either, so both Spot quotas are
    # needed at full size: G 2 x 192 = 384, P 2 x 96 = 192.
    needs = quota_needs(config(dict(name="mixed-families", cloud="aws", region="us-east-1", nodes=2,
                                    instance_type="g5.48xlarge", fallback_instance_types=["p4d.24xlarge"])))  # fmt: skip
    assert [(n.code, n.needed, n.instance_types) for n in needs] == [
        ("L-3819A6DF", 384, ("g5.48xlarge",)), ("L-7212CCBC", 192, ("p4d.24xlarge",)),
    ]  # fmt: skip
    # A GCP managed instance group and an Azure scale set have one machine type: the programs launch only
    # instance_type there, so a fallback listed for them draws nothing.
    gcp = quota_needs(config(dict(name="gc", cloud="gcp", region="us-central1", nodes=1, instance_type="a2-highgpu-1g",
                                  fallback_instance_types=["a3-highgpu-8g"])))  # fmt: skip
    assert [n.code for n in gcp] == ["PREEMPTIBLE_NVIDIA_A100_GPUS", "GPUS_ALL_REGIONS"]


def test_a_quota_trainfleet_cannot_name_is_a_line_that_says_so():
    needs = quota_needs(config(
        # no P6 Spot quota is documented: 2 x 192 = 384 vCPUs of an unknown quota; on-demand P6 is in the P bucket
        dict(name="b200", cloud="aws", region="us-east-1", instance_type="p6-b200.48xlarge", nodes=3,
             purchase="mixed", on_demand_base=1),
        # whether a3-edgegpu draws NVIDIA_H100_GPUS is unconfirmed: 8 GPUs of an unknown metric
        dict(name="edge", cloud="gcp", region="us-central1", instance_type="a3-edgegpu-8g", nodes=1),
        # the NC A10 v4 family's usage name is not known here: the regional total is, 16 vCPUs
        dict(name="a10", cloud="azure", region="eastus", instance_type="Standard_NC16ads_A10_v4", nodes=1,
             purchase="on-demand"),
        # not in the catalog at all: its size is unknown too
        dict(name="typo", cloud="aws", region="us-east-1", instance_type="p9x.huge", nodes=1),
    ))  # fmt: skip
    assert [(n.fleet, n.purchase, n.code, n.needed) for n in needs] == [
        ("b200", "on-demand", "L-417A185B", 192), ("b200", "spot", "", 384),
        ("edge", "spot", "", 8),
        ("a10", "on-demand", "cores", 16), ("a10", "on-demand", "", 16),
        ("typo", "spot", "", 0),
    ]  # fmt: skip
    unknown = [n for n in needs if not n.code]
    assert all(n.fix.startswith("unknown: ") for n in unknown)
    assert "aws service-quotas list-service-quotas --service-code ec2 --region us-east-1" in unknown[0].fix
    assert "gcloud alpha quotas info list --service=compute.googleapis.com" in unknown[1].fix
    assert "az vm list-usage --location eastus" in unknown[2].fix
    assert "p9x.huge is not in the catalog" in unknown[3].fix
    # The live check asks no API about them and reports each as unknown, with its line.
    checks = read_limits(unknown, aws_endpoint="http://127.0.0.1:9", gcp_endpoint="http://127.0.0.1:9",
                         azure_endpoint="http://127.0.0.1:9")  # fmt: skip
    assert [c.status for c in checks] == ["unknown"] * 4
    assert checks[0].line == f"aws us-east-1 unknown quota for p6-b200.48xlarge: needs 384 vCPUs; {unknown[0].fix}"


# ------------------------------------------------------------------------------------------ live: fakes
class EntraCredential:
    """An azure-core TokenCredential backed by the Entra stand-in whose tokens FakeArmUsages accepts."""

    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        assert scopes == ("https://management.azure.com/.default",)
        token, claims = entra_token("https://management.azure.com/")
        return AccessToken(token, claims["exp"])


@pytest.fixture
def aws():
    fake = FakeServiceQuotas().start()
    yield fake
    fake.stop()


@pytest.fixture
def gcp():
    need_module("google.cloud.compute_v1", INSTALL)
    fake = FakeComputeQuotas(project=PROJECT).start()
    yield fake
    fake.stop()


@pytest.fixture
def azure():
    need_module("azure.mgmt.compute", INSTALL)
    fake = FakeArmUsages(subscription=SUB).start()
    yield fake
    fake.stop()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def live(request, sleeps):
    """read_limits pointed at whichever stand-ins the test uses, with credentials they accept."""

    def check(needs: list[QuotaNeed], **kw) -> list[QuotaCheck]:
        args: dict = dict(attempts=4, backoff_s=BACKOFF, sleep=sleeps.append)
        if "aws" in request.fixturenames:
            fake = request.getfixturevalue("aws")
            args.update(aws_endpoint=fake.url,
                        aws_session=boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"))  # fmt: skip
        if "gcp" in request.fixturenames:
            from google.oauth2.credentials import Credentials

            token = GOOGLE_AUTH.issue([GOOGLE_SCOPE + "compute.readonly"])
            args.update(gcp_endpoint=request.getfixturevalue("gcp").url, gcp_credentials=Credentials(token=token),
                        gcp_project=PROJECT)  # fmt: skip
        if "azure" in request.fixturenames:
            args.update(azure_endpoint=request.getfixturevalue("azure").url, azure_credential=EntraCredential(),
                        azure_subscription=SUB)  # fmt: skip
        return read_limits(needs, **{**args, **kw})

    return check


# ------------------------------------------------------------------------------------------ live: AWS
def test_aws_fresh_account_is_short_with_the_exact_fix(aws, live):
    checks = live(quota_needs(stack("prod")))
    assert [c.status for c in checks] == ["short"] * 3 and [c.limit for c in checks] == [0.0] * 3
    assert checks[1].line == (
        "aws us-east-1 All P4, P3 and P2 Spot Instance Requests (L-7212CCBC): needs 288 vCPUs, limit 0 (AWS default: "
        "no value applied to this account): short by 288; raise it: aws service-quotas request-service-quota-increase "
        "--service-code ec2 --quota-code L-7212CCBC --desired-value 288 --region us-east-1"
    )
    # No applied value in a fresh account: GetServiceQuota says NoSuchResource, the default is read instead.
    assert aws.requests[:2] == [
        'GetServiceQuota {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}',
        'GetAWSDefaultServiceQuota {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}',
    ]


def test_aws_raised_quota_is_ok_in_its_own_region_only(aws, live):
    aws.apply("us-east-1", "L-417A185B", 192)
    aws.apply("us-east-1", "L-C4BD4855", 768)
    aws.apply("us-west-2", "L-7212CCBC", 384)  # another region's increase does not count in us-east-1
    checks = live(quota_needs(stack("prod")))
    assert [(c.need.code, c.status, c.limit) for c in checks] == [
        ("L-417A185B", "ok", 192.0), ("L-7212CCBC", "short", 0.0), ("L-C4BD4855", "ok", 768.0),
    ]  # fmt: skip
    assert checks[2].line == "aws us-east-1 All P5 Spot Instance Requests (L-C4BD4855): needs 576 vCPUs, limit 768: ok"


def test_aws_shared_quota_is_judged_on_the_stack_total(aws, live):
    # Two spot fleets of p4d.24xlarge in us-east-1, 2 and 3 nodes: 192 + 288 = 480 vCPUs of L-7212CCBC; 300 is short.
    aws.apply("us-east-1", "L-7212CCBC", 300)
    fleets = [dict(name=f"f{n}", cloud="aws", region="us-east-1", instance_type="p4d.24xlarge", nodes=n) for n in (2, 3)]
    checks = live(quota_needs(config(*fleets)))
    assert [c.status for c in checks] == ["short", "short"]
    assert checks[0].line.startswith(
        "aws us-east-1 All P4, P3 and P2 Spot Instance Requests (L-7212CCBC): needs 192 vCPUs (480 for the whole "
        "stack), limit 300: short by 180; raise it: "
    ) and checks[0].line.endswith("--desired-value 480 --region us-east-1")
    assert len(aws.requests) == 1  # one read for the shared quota


def test_aws_missing_permission_is_unknown_naming_it(aws, live):
    aws.deny = True
    (check,) = live(quota_needs(stack("dev")))
    assert check.status == "unknown" and check.limit is None
    assert "the caller lacks the permission servicequotas:GetServiceQuota" in check.line
    assert check.line.endswith("--quota-code L-3819A6DF --desired-value 48 --region us-east-1")


def test_aws_throttling_is_retried_with_backoff_then_given_up(aws, live, sleeps):
    aws.throttle = 2  # TooManyRequestsException twice, then answered
    (check,) = live(quota_needs(stack("gaudi")))
    assert check.status == "short" and check.limit == 0.0
    assert sleeps == [BACKOFF, 2 * BACKOFF]
    sleeps.clear()
    aws.throttle = 100
    (check,) = live(quota_needs(stack("gaudi")), attempts=3)
    assert check.status == "unknown" and "throttled (TooManyRequestsException) 3 times" in check.line
    assert sleeps == [BACKOFF, 2 * BACKOFF]


# ------------------------------------------------------------------------------------------ live: GCP
def test_gcp_fresh_project_is_short_and_a_granted_quota_ok(gcp, live, sleeps):
    gcp.throttle = 1  # a 429 first: retried
    needs = quota_needs(stack("gcp-dev"), gcp_project=PROJECT)
    checks = live(needs)
    assert [c.status for c in checks] == ["short", "short"] and sleeps == [BACKOFF]
    # No preemptible quota in a new project, so Spot VMs draw the standard A100 quota, which is 0 too; the fix asks
    # for the preemptible one, which keeps Spot off the standard quota.
    assert checks[0].line == (
        "gcp us-central1 Preemptible NVIDIA A100 GPUs (PREEMPTIBLE_NVIDIA_A100_GPUS): needs 1 GPUs, limit 0 (no "
        "preemptible quota granted, so Spot VMs draw NVIDIA_A100_GPUS): short by 1; raise it: set "
        "compute.googleapis.com/preemptible_nvidia_a100_gpus in us-central1 to 1 at "
        "https://console.cloud.google.com/iam-admin/quotas?project=my-ml-project"
    )
    assert gcp.requests[-2:] == [f"GET /compute/v1/projects/{PROJECT}/regions/us-central1",
                                 f"GET /compute/v1/projects/{PROJECT}"]  # fmt: skip
    gcp.set("us-central1", "PREEMPTIBLE_NVIDIA_A100_GPUS", 8.0, usage=2.0)
    gcp.set("global", "GPUS_ALL_REGIONS", 4.0)
    checks = live(needs)
    assert [(c.status, c.limit, c.usage) for c in checks] == [("ok", 8.0, 2.0), ("ok", 4.0, 0.0)]
    assert checks[0].line.endswith("needs 1 GPUs, limit 8, 2 in use: ok")


def test_gcp_spot_draws_standard_quota_only_until_preemptible_quota_is_granted(gcp, live):
    # https://cloud.google.com/compute/docs/instances/spot#quotas: without preemptible quota in a region Spot VMs
    # use the standard quota; once it is granted (and so listed), they are limited to it.
    gcp.set("us-central1", "NVIDIA_A100_GPUS", 4.0)
    gcp.set("global", "GPUS_ALL_REGIONS", 4.0)
    spot, _ = live(quota_needs(stack("gcp-dev"), gcp_project=PROJECT))
    assert spot.status == "ok" and spot.limit == 4.0
    assert "limit 4 (no preemptible quota granted, so Spot VMs draw NVIDIA_A100_GPUS): ok" in spot.line
    gcp.set("us-central1", "PREEMPTIBLE_NVIDIA_A100_GPUS", 0.0)
    spot, _ = live(quota_needs(stack("gcp-dev"), gcp_project=PROJECT))
    assert (spot.status, spot.limit) == ("short", 0.0) and "draw" not in spot.line


def test_gcp_metric_missing_from_the_regions_api_is_unknown_not_zero(gcp, live):
    # a3-highgpu-8g spot: PREEMPTIBLE_NVIDIA_H100_GPUS, which regions.get leaves out (the fresh stand-in too).
    needs = quota_needs(config(dict(name="h100", cloud="gcp", region="us-central1", instance_type="a3-highgpu-8g",
                                    nodes=1)), gcp_project=PROJECT)  # fmt: skip
    h100, everywhere = live(needs)
    assert h100.status == "unknown" and h100.limit is None
    assert "the Compute API lists no PREEMPTIBLE_NVIDIA_H100_GPUS for us-central1" in h100.line
    assert f"gcloud alpha quotas info list --service=compute.googleapis.com --project={PROJECT}" in h100.line
    assert everywhere.status == "short"  # the project cap is still read: 8 needed, 0 granted


def test_gcp_missing_permission_or_disabled_api_is_unknown_naming_the_fix(gcp, live):
    gcp.denied = {"compute.regions.get"}
    regional, project = live(quota_needs(stack("gcp-dev"), gcp_project=PROJECT))
    assert regional.status == "unknown"
    assert f"the caller lacks the permission compute.regions.get on project {PROJECT}" in regional.line
    assert project.status == "short"  # projects.get was allowed
    gcp.denied, gcp.api_disabled = set(), True  # a new project: the Compute Engine API is off
    checks = live(quota_needs(stack("gcp-dev"), gcp_project=PROJECT))
    assert [c.status for c in checks] == ["unknown", "unknown"]
    assert all(f"`gcloud services enable compute.googleapis.com --project={PROJECT}`" in c.line for c in checks)


# ------------------------------------------------------------------------------------------ live: Azure
def test_azure_fresh_subscription_is_short_after_following_the_pages(azure, live):
    (check,) = live(quota_needs(stack("azure-dev"), azure_subscription=SUB))
    assert check.line == (
        "azure eastus Total Regional Low-priority vCPUs (lowPriorityCores): needs 24 vCPUs, limit 3: short by 21; "
        f"raise it: az quota create --resource-name lowPriorityCores --resource-type lowPriority --scope "
        f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus --limit-object value=24"
    )
    # lowPriorityCores is the 12th usage; 8 a page: found only by following nextLink to page 2
    assert [r.rsplit(" ", 1)[1] for r in azure.requests] == ["skip=0", "skip=8"]


def test_azure_throttle_honours_retry_after_and_relists(azure, live, sleeps):
    azure.throttle_page = 2
    (check,) = live(quota_needs(stack("azure-dev"), azure_subscription=SUB))
    assert check.status == "short" and check.limit == 3.0
    assert sleeps == [17.0]  # the Retry-After ARM sent, not the default backoff
    assert [r.rsplit(" ", 1)[1] for r in azure.requests] == ["skip=0", "skip=8", "skip=0", "skip=8"]


def test_azure_family_names_match_whatever_the_case_and_a_raised_quota_is_ok(azure, live):
    needs = quota_needs(config(dict(name="od", cloud="azure", region="westus3", nodes=2, purchase="on-demand",
                                    instance_type="Standard_NC24ads_A100_v4")))  # fmt: skip
    azure.set("westus3", "StandardNCADSA100v4Family", 48)  # the API spells it with a capital S
    family, cores = live(needs)
    assert (family.status, family.limit) == ("ok", 48.0)
    assert (cores.status, cores.limit) == ("short", 10.0) and "short by 38" in cores.line


def test_azure_missing_permission_is_unknown_naming_it(azure, live):
    azure.deny = True
    (check,) = live(quota_needs(stack("azure-dev"), azure_subscription=SUB))
    assert check.status == "unknown"
    assert f"lacks the permission Microsoft.Compute/locations/usages/read on /subscriptions/{SUB}" in check.line


def test_missing_project_or_subscription_is_unknown_not_a_crash(gcp, azure, live, monkeypatch):
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    needs = quota_needs(stack("gcp-dev")) + quota_needs(stack("azure-dev"))
    checks = live(needs, gcp_project=None, azure_subscription=None)
    assert [c.status for c in checks] == ["unknown"] * 3
    assert "no GCP project" in checks[0].line and "no Azure subscription (set AZURE_SUBSCRIPTION_ID)" in checks[2].line
    assert gcp.requests == [] and azure.requests == []


# ------------------------------------------------------------------------------------------ the stand-ins
def raw(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_stand_ins_refuse_what_the_services_refuse(aws, gcp, azure):
    json11 = {"Content-Type": "application/x-amz-json-1.1"}
    body = json.dumps({"ServiceCode": "ec2", "QuotaCode": "L-7212CCBC"}).encode()
    sig = ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/servicequotas/aws4_request, "
           "SignedHeaders=host;x-amz-date;x-amz-target, Signature=" + "0" * 64)  # fmt: skip
    target = {"X-Amz-Target": "ServiceQuotasV20190624.GetAWSDefaultServiceQuota"}
    assert raw(aws.url, body, json11 | {"Authorization": sig})[1]["__type"] == "UnknownOperationException"
    assert raw(aws.url, body, json11 | target)[1]["__type"] == "MissingAuthenticationTokenException"
    missing = json.dumps({"ServiceCode": "ec2"}).encode()
    assert raw(aws.url, missing, json11 | target | {"Authorization": sig}) == (
        400, {"__type": "IllegalArgumentException", "message": "Invalid input was provided."})
    status, doc = raw(aws.url, body, json11 | target | {"Authorization": sig})
    assert status == 200 and doc["Quota"]["Value"] == 0.0 and doc["Quota"]["QuotaArn"].endswith("::ec2/L-7212CCBC")

    region = f"{gcp.url}/compute/v1/projects/{PROJECT}/regions/us-central1"
    assert raw(region)[0] == 401
    storage_only = GOOGLE_AUTH.issue([GOOGLE_SCOPE + "devstorage.read_only"])
    assert raw(region, headers={"Authorization": f"Bearer {storage_only}"})[0] == 403
    good = GOOGLE_AUTH.issue([GOOGLE_SCOPE + "compute.readonly"])
    status, doc = raw(region, headers={"Authorization": f"Bearer {good}"})
    assert status == 200 and {"metric": "NVIDIA_A100_GPUS", "limit": 0.0, "usage": 0.0} in doc["quotas"]
    assert not [q for q in doc["quotas"] if q["metric"].startswith("PREEMPTIBLE_")]  # none granted yet

    usages = f"{azure.url}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus/usages"
    assert raw(usages + "?api-version=2026-04-01")[1]["error"]["code"] == "AuthenticationFailed"
    token = {"Authorization": "Bearer " + entra_token("https://management.azure.com/")[0]}
    assert raw(usages, headers=token) == (400, {"error": {
        "code": "MissingApiVersionParameter",
        "message": "The api-version query parameter (?api-version=) is required for all requests."}})  # fmt: skip
    status, doc = raw(usages + "?api-version=2026-04-01", headers=token)
    assert status == 200 and len(doc["value"]) == 8 and "$skiptoken=8" in doc["nextLink"]


# ------------------------------------------------------------------------------------------ the command
def test_stacks_check_live_says_which_quota_falls_short_and_exits_1(aws):
    """The user's path: `trainfleet stacks check --stack dev --live` with their AWS credentials; the endpoint
    comes from botocore's documented per-service variable (AWS_ENDPOINT_URL_SERVICE_QUOTAS), pointed at the
    fresh-account stand-in. The need is quota_needs's (worked by hand in the per-stack test above)."""
    from tests.conftest import run_trainfleet

    env = {
        "AWS_ENDPOINT_URL_SERVICE_QUOTAS": aws.url,
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    result = run_trainfleet("stacks", "check", "--stack", "dev", "--live", "--json", env=env)
    assert result.code == 1, result.stderr
    ((row,),) = [result.json()]
    (check,) = [c for c in row["quota_checks"] if c["code"] == "L-3819A6DF"]
    needed = quota_needs(stack("dev"))[0].needed
    assert check["status"] == "short" and check["limit"] == 0
    assert check["line"] == (
        f"aws us-east-1 All G and VT Spot Instance Requests (L-3819A6DF): needs {needed} vCPUs, limit 0 (AWS "
        "default: no value applied to this account): short by "
        f"{needed}; raise it: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
        f"L-3819A6DF --desired-value {needed} --region us-east-1"
    )
    aws.apply("us-east-1", "L-3819A6DF", 96)
    table = run_trainfleet("stacks", "check", "--stack", "dev", "--live", env=env)  # and the human form
    assert table.code == 0 and "before `start_run` now:" in table.stdout and "limit 96: ok" in table.stdout
