"""trainfleet:gcp:ProjectServices — the Google APIs a stack's resources call, enabled before anything calls them.

A new project has Compute Engine, IAM, Resource Manager, Cloud Billing and the Billing Budget API off: they are
not among the "Services enabled by default" (https://cloud.google.com/service-usage/docs/enabled-service; the
list and its sources: tests/fixtures/fresh_account/PROVENANCE.md), and a call to a disabled API answers 403 "... API has not been used in project N before or it is disabled" (accessNotConfigured).
So the program enables every API it uses, the default ones included (a project made through the API may not have
them), with `gcp.projects.Service`, and every GCP resource waits for them (a stack transformation adds the
dependency). Services stay enabled when a stack is destroyed: other stacks and people in the project use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# The API each resource type calls to be created (type-token prefix -> service). Project IAM members and
# custom-role bindings go through Resource Manager's setIamPolicy; the project lookup of the budget reads the
# billing account through Cloud Billing (terraform-provider-google's google_project data source).
SERVICE_OF_TYPE = {
    "gcp:compute/": "compute.googleapis.com",
    "gcp:serviceaccount/": "iam.googleapis.com",
    "gcp:projects/iAMCustomRole:": "iam.googleapis.com",
    "gcp:projects/iAMMember:": "cloudresourcemanager.googleapis.com",
    "gcp:storage/": "storage.googleapis.com",
    "gcp:billing/budget:": "billingbudgets.googleapis.com",
    "gcp:monitoring/": "monitoring.googleapis.com",
    "gcp:bigquery/": "bigquery.googleapis.com",
}
SERVICE_OF_INVOKE = {
    "gcp:organizations/getProject:getProject": ("cloudresourcemanager.googleapis.com", "cloudbilling.googleapis.com"),
}
SERVICE = "gcp:projects/service:Service"


def service_of(token: str) -> str | None:
    return next((api for prefix, api in SERVICE_OF_TYPE.items() if token.startswith(prefix)), None)


def apis_for(*, budget: bool, billing_export: bool) -> list[str]:
    """Every API a GCP stack's resources and lookups call."""
    apis = {
        "compute.googleapis.com", "iam.googleapis.com", "cloudresourcemanager.googleapis.com",
        "storage.googleapis.com",
    }  # fmt: skip
    if budget:  # the budget, its email channels, and the project lookup for its billing account
        apis |= {"billingbudgets.googleapis.com", "monitoring.googleapis.com"}
        apis |= set(SERVICE_OF_INVOKE["gcp:organizations/getProject:getProject"])
    if billing_export:
        apis.add("bigquery.googleapis.com")
    return sorted(apis)


@dataclass
class ProjectServicesArgs:
    apis: list[str]  # service names, e.g. compute.googleapis.com (apis_for)


class ProjectServices(pulumi.ComponentResource):
    """The APIs, enabled; `wait_for_services` makes every later GCP resource depend on them."""

    services: list[gcp.projects.Service]

    def __init__(self, name: str, args: ProjectServicesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainfleet:gcp:ProjectServices", name, None, opts)
        apis = args.apis
        self.services = [
            gcp.projects.Service(
                f"{name}-{api.split('.', 1)[0]}",
                service=api,
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in apis
        ]
        self.register_outputs({})

    def wait_for_services(
        self, args: pulumi.ResourceTransformationArgs
    ) -> pulumi.ResourceTransformationResult | None:
        """A stack transformation: a GCP resource (not a service, not a provider) waits for the APIs."""
        token = args.type_
        if not isinstance(args.resource, pulumi.CustomResource) or not token.startswith("gcp:") or token == SERVICE:
            return None
        waits = pulumi.ResourceOptions(depends_on=list(self.services))
        return pulumi.ResourceTransformationResult(args.props, pulumi.ResourceOptions.merge(args.opts, waits))
