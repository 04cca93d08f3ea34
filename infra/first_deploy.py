"""A stack's first `pulumi up` in a fresh AWS account, GCP project or Azure subscription: what the account lacks,
what the provider answers when a resource meets it, and the one line that fixes each.

`Account` is the state the deploy meets; `FRESH` is a new one as the clouds document it (sources in
tests/fixtures/fresh_account/PROVENANCE.md): GCP with only the services enabled by default and user credentials
(`gcloud auth application-default login`), Azure with only the resource providers registered by default, AWS
with no cost allocation tag ever billed. The program enables the GCP APIs itself (infra/gcp/services.py) and
gives the budget a quota project; azure-native has no resource that registers a resource provider, so those are
steps `trainfleet stacks check` names (`first_deploy_steps`), as is the Gaudi image no one publishes, which
the user builds into their own account. `deploy_errors` reads a program run the way the
providers would create it and returns the error each resource would meet, in the provider's own words.
Group sizes are not here: every group is created empty (infra/rules/capacity.py), so quotas stop `start_run`,
not `pulumi up` (infra/quotas.py lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from infra.gcp.services import SERVICE, SERVICE_OF_INVOKE, service_of
from infra.mock_runtime import AMI_NO_RESULTS, DeclaredResource, ProgramRun, ec2_wildcard

# Service Usage, "Services enabled by default" (console- or gcloud-created projects).
GCP_DEFAULT_SERVICES = frozenset({
    "bigquery.googleapis.com", "bigqueryconnection.googleapis.com", "bigquerydatapolicy.googleapis.com",
    "bigquerymigration.googleapis.com", "bigqueryreservation.googleapis.com", "bigquerystorage.googleapis.com",
    "analyticshub.googleapis.com", "datastore.googleapis.com", "dataform.googleapis.com", "dataplex.googleapis.com",
    "logging.googleapis.com", "monitoring.googleapis.com", "sql-component.googleapis.com",
    "storage-component.googleapis.com", "storage.googleapis.com", "storage-api.googleapis.com",
    "cloudtrace.googleapis.com", "cloudapis.googleapis.com", "servicemanagement.googleapis.com",
    "serviceusage.googleapis.com",
})  # fmt: skip
# "Azure resource providers and types": the providers marked "registered" (by default) for a subscription.
AZURE_DEFAULT_PROVIDERS = frozenset({
    "Microsoft.ADHybridHealthService", "Microsoft.Authorization", "Microsoft.Billing", "Microsoft.ClassicSubscription",
    "Microsoft.Commerce", "Microsoft.Consumption", "Microsoft.CostManagement", "Microsoft.Features",
    "Microsoft.MarketplaceOrdering", "Microsoft.Portal", "Microsoft.ResourceGraph", "Microsoft.Resources",
    "Microsoft.SerialConsole", "microsoft.support",
})  # fmt: skip
# azure-native module -> the resource provider its resources are created through.
AZURE_PROVIDER_OF_MODULE = {
    "compute": "Microsoft.Compute",
    "network": "Microsoft.Network",
    "storage": "Microsoft.Storage",
    "managedidentity": "Microsoft.ManagedIdentity",
    "authorization": "Microsoft.Authorization",
    "resources": "Microsoft.Resources",
    "consumption": "Microsoft.Consumption",
    "costmanagement": "Microsoft.CostManagementExports",  # an export; Microsoft.CostManagement is registered
}


@dataclass(frozen=True)
class Account:
    """What the account has when the deploy starts."""

    gcp_services: frozenset[str]
    gcp_user_credentials: bool  # ADC from `gcloud auth application-default login` (no quota project)
    azure_providers: frozenset[str]
    aws_billed_tag_keys: frozenset[str]
    aws_own_images: frozenset[str] = frozenset()  # names of the AMIs the account owns

    def after(self, steps: list[Step]) -> Account:
        """The account once the user has run `steps`."""
        done = self
        for step in steps:
            if step.kind == "azure-provider":
                done = replace(done, azure_providers=done.azure_providers | {step.target})
            elif step.kind == "aws-own-image":
                done = replace(done, aws_own_images=done.aws_own_images | {step.target})
        return done


FRESH = Account(GCP_DEFAULT_SERVICES, True, AZURE_DEFAULT_PROVIDERS, frozenset())


@dataclass(frozen=True)
class Step:
    """One thing the user does once per account before the first `pulumi up`, and the command that does it."""

    cloud: str
    kind: str  # azure-provider | aws-own-image
    target: str  # e.g. Microsoft.Compute, trainfleet-gaudi-1.18.0-20261128
    what: str
    command: str

    @property
    def line(self) -> str:
        return f"{self.cloud}: {self.what}: {self.command}"


def azure_provider_of(token: str) -> str | None:
    if not token.startswith("azure-native:"):
        return None
    return AZURE_PROVIDER_OF_MODULE.get(token.split(":")[1])


def _own_image_lookups(run: ProgramRun) -> list[tuple[str, str]]:
    """(region, name filter) of each AMI the program looks up among the account's own (a Gaudi fleet's image)."""
    return [
        (str(call.args.get("region")), f["values"][0])
        for call in run.invocations
        if call.token == "aws:ec2/getAmi:getAmi" and list(call.args.get("owners") or []) == ["self"]
        for f in call.args.get("filters") or []
        if f.get("name") == "name"
    ]


def first_deploy_steps(run: ProgramRun) -> list[Step]:
    """The steps this stack needs in a fresh account that the program cannot take itself, one per line."""
    from infra.aws.gaudi import BUILD_GAUDI_AMI

    needed = sorted({p for r in run.cloud_resources if (p := azure_provider_of(r.type)) is not None})
    steps = [
        Step(
            "azure",
            "azure-provider",
            provider,
            f"register the subscription for {provider} (a new subscription is not)",
            f"az provider register --namespace {provider} --wait",
        )
        for provider in needed
        if provider not in FRESH.azure_providers
    ]
    for region, name in sorted(set(_own_image_lookups(run))):
        built = name.replace("*", "yyyymmdd")  # what the build names it (`date +%Y%m%d`; any suffix matches)
        steps.append(
            Step(
                "aws",
                "aws-own-image",
                built,
                f"build the Gaudi image in {region} (AWS publishes none; the program boots the newest AMI of "
                f"your account named {name})",
                BUILD_GAUDI_AMI,
            )
        )
    return steps


# ------------------------------------------------------------------------------- what the providers answer


def _gcp_disabled(api: str, title: str) -> str:
    """googleapi's 403 for a disabled API (terraform-provider-google and pulumi-gcp print it as is)."""
    number = "987654321098"  # the mock project's number (infra/mock_runtime.py)
    return (
        f"googleapi: Error 403: {title} has not been used in project {number} before or it is disabled. Enable it "
        f"by visiting https://console.developers.google.com/apis/api/{api}/overview?project={number} then retry. "
        "If you enabled this API recently, wait a few minutes for the action to propagate to our systems and "
        "retry., accessNotConfigured"
    )


GCP_API_TITLES = {
    "compute.googleapis.com": "Compute Engine API",
    "iam.googleapis.com": "Identity and Access Management (IAM) API",
    "cloudresourcemanager.googleapis.com": "Cloud Resource Manager API",
    "cloudbilling.googleapis.com": "Cloud Billing API",
    "billingbudgets.googleapis.com": "Cloud Billing Budget API",
    "bigquery.googleapis.com": "BigQuery API",
    "storage.googleapis.com": "Cloud Storage API",
    "monitoring.googleapis.com": "Cloud Monitoring API",
}
GCP_NO_QUOTA_PROJECT = (
    "googleapi: Error 403: Your application is authenticating by using local Application Default Credentials. "
    "The billingbudgets.googleapis.com API requires a quota project, which is not set by default. To learn how to "
    "set your quota project, see https://cloud.google.com/docs/authentication/adc-troubleshooting/user-creds ."
)


def _azure_unregistered(provider: str) -> str:
    if provider == "Microsoft.CostManagementExports":
        return (
            '{"error":{"code":"400","message":"RP Not Registered. Register destination storage account subscription '
            "with Microsoft.CostManagementExports. Please refer "
            'https://docs.microsoft.com/en-us/rest/api/resources/providers/register"}}'
        )
    return (
        f"MissingSubscriptionRegistration: The subscription is not registered to use namespace '{provider}'. See "
        "https://aka.ms/rps-not-found for how to register subscriptions."
    )


def _aws_tag_not_found(key: str) -> str:
    return f"ValidationException: Failed to update Cost Allocation Tag: Tag keys not found: {key}"


def _enabled_before(api: str, waits_for: list[str], run: ProgramRun, account: Account) -> bool:
    """The API is on in the account, or a Service resource the call waits for turns it on."""
    if api in account.gcp_services:
        return True
    return any(
        (svc := run.by_urn(urn)) is not None and svc.type == SERVICE and svc.inputs.get("service") == api
        for urn in waits_for
    )


def _gcp_errors(r: DeclaredResource, run: ProgramRun, account: Account) -> list[str]:
    api = service_of(r.type)
    errors = []
    if api is not None and not _enabled_before(api, r.depends_on, run, account):
        errors.append(_gcp_disabled(api, GCP_API_TITLES.get(api, api)))
    if r.type == "gcp:billing/budget:Budget" and account.gcp_user_credentials:
        provider = run.by_urn(r.provider.rsplit("::", 1)[0]) if r.provider else None
        inputs = provider.inputs if provider is not None else {}
        if str(inputs.get("userProjectOverride")).lower() != "true" or not inputs.get("billingProject"):
            errors.append(GCP_NO_QUOTA_PROJECT)
    return errors


def deploy_errors(run: ProgramRun, account: Account) -> list[str]:
    """Each error `pulumi up` would meet creating this run's resources in `account`, as
    `<type> <name>: <the provider's error>`; [] when the first deploy succeeds."""
    out: list[str] = []
    for r in run.cloud_resources:
        errors: list[str] = []
        if r.type.startswith("gcp:"):
            errors = _gcp_errors(r, run, account)
        elif (provider := azure_provider_of(r.type)) is not None and provider not in account.azure_providers:
            errors = [_azure_unregistered(provider)]
        elif r.type == "aws:costexplorer/costAllocationTag:CostAllocationTag":
            key = r.inputs.get("tagKey", "")
            errors = [] if key in account.aws_billed_tag_keys else [_aws_tag_not_found(key)]
        out += [f"{r.type} {r.name}: {e}" for e in errors]
    for region, name in _own_image_lookups(run):
        if not any(ec2_wildcard(name).fullmatch(own) for own in account.aws_own_images):
            out.append(f"invoke aws:ec2/getAmi:getAmi ({region}, owners self, name {name}): {AMI_NO_RESULTS}")
    for call in run.invocations:
        for api in SERVICE_OF_INVOKE.get(call.token, ()):
            if not _enabled_before(api, call.depends_on, run, account):
                out.append(f"invoke {call.token}: {_gcp_disabled(api, GCP_API_TITLES.get(api, api))}")
    return out
