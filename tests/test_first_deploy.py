"""Issue 28 #1, #2, #3, #6: every shipped stack's first `pulumi up` in a fresh AWS account, GCP project and Azure
subscription (infra/first_deploy.py FRESH: GCP services off but the defaults, user credentials; Azure providers
unregistered but the defaults; no AWS cost allocation tag ever billed; sources in
tests/fixtures/fresh_account/PROVENANCE.md). The program creates what it can; what it cannot, `trainfleet stacks
check` names in one line with its command, and once those are done the deploy meets no error. The errors a
stand-in answers are the providers' own texts."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace

import pytest

import infra.program
from infra.config import StackConfig
from infra.first_deploy import FRESH, deploy_errors, first_deploy_steps
from infra.mock_runtime import ProgramRun, run_program
from infra.stack_file import read_stack_file
from tests.conftest import STACKS

SHIPPED = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml"))
# What each shipped stack needs done by hand before its first `pulumi up` (counted by hand from its resources:
# azure-dev has a scale set (Compute), a VNet and NAT (Network), storage accounts (Storage), a user-assigned
# identity (ManagedIdentity) and a Cost Management export (CostManagementExports); the AWS and GCP stacks need
# nothing the program cannot do, except the Gaudi image no one publishes, which its user builds into their
# account).
STEPS = {"dev": 0, "prod": 0, "gaudi": 1, "gcp-dev": 0, "azure-dev": 5}


def _config(env: str) -> StackConfig:
    return read_stack_file(STACKS / f"Pulumi.{env}.yaml").config


@functools.cache
def _run(env: str) -> ProgramRun:
    return run_program(env, _config(env))


def test_every_shipped_stack_is_counted():
    assert sorted(STEPS) == SHIPPED


@pytest.mark.parametrize("env", SHIPPED)
def test_the_first_pulumi_up_succeeds_once_the_named_steps_are_done(env):
    run = _run(env)
    steps = first_deploy_steps(run)
    assert len(steps) == STEPS[env], [s.line for s in steps]
    assert deploy_errors(run, FRESH.after(steps)) == []


def test_azure_steps_are_the_exact_commands_and_without_them_every_resource_fails_as_azure_says():
    run = _run("azure-dev")
    assert [s.command for s in first_deploy_steps(run)] == [
        f"az provider register --namespace Microsoft.{ns} --wait"
        for ns in ("Compute", "CostManagementExports", "ManagedIdentity", "Network", "Storage")
    ]
    errors = deploy_errors(run, FRESH)
    vmss = next(e for e in errors if e.startswith("azure-native:compute:VirtualMachineScaleSet "))
    assert vmss.endswith(
        "MissingSubscriptionRegistration: The subscription is not registered to use namespace 'Microsoft.Compute'. "
        "See https://aka.ms/rps-not-found for how to register subscriptions."
    )
    export = next(e for e in errors if e.startswith("azure-native:costmanagement:Export "))
    assert "RP Not Registered. Register destination storage account subscription with " in export
    # Registered-by-default providers need nothing: role assignments (Authorization), budgets (Consumption).
    assert not [e for e in errors if "authorization:" in e.split(" ", 1)[0] or "consumption:" in e.split(" ", 1)[0]]


def test_gcp_resources_wait_for_the_apis_the_program_enables_and_fail_as_google_says_without_them(monkeypatch):
    run = _run("gcp-dev")
    services = {r.inputs["service"] for r in run.of_type("gcp:projects/service:Service")}
    assert {"compute.googleapis.com", "iam.googleapis.com", "billingbudgets.googleapis.com"} <= services
    assert all(r.inputs["disableOnDestroy"] is False for r in run.of_type("gcp:projects/service:Service"))
    assert deploy_errors(run, FRESH) == []

    # Plant the bug: the same program without enabling the APIs.
    monkeypatch.setattr(infra.program, "_enable_gcp_apis", lambda config: None)
    bare = run_program("gcp-dev", _config("gcp-dev"))
    errors = deploy_errors(bare, FRESH)
    mig = next(e for e in errors if e.startswith("gcp:compute/regionInstanceGroupManager:"))
    assert "googleapi: Error 403: Compute Engine API has not been used in project 987654321098 before or it is " in mig
    assert mig.endswith(", accessNotConfigured")
    assert any(e.startswith("invoke gcp:organizations/getProject:getProject: ") for e in errors)
    assert not [e for e in errors if e.startswith("gcp:storage/bucket:Bucket ")]  # Cloud Storage is on by default


def test_the_gcp_budget_has_a_quota_project_for_user_credentials():
    run = _run("gcp-dev")
    budget = run.one("gcp:billing/budget:Budget")
    provider = run.by_urn(budget.provider.rsplit("::", 1)[0])
    assert provider is not None and provider.type == "pulumi:providers:gcp"
    assert provider.inputs["userProjectOverride"] == "true" and provider.inputs["billingProject"]

    plain = copy.deepcopy(run)
    plain.by_urn(provider.urn).inputs.pop("userProjectOverride")  # the default provider: no override
    (error,) = deploy_errors(plain, FRESH)
    assert "The billingbudgets.googleapis.com API requires a quota project, which is not set by default." in error
    assert deploy_errors(plain, replace(FRESH, gcp_user_credentials=False)) == []  # a service account


def test_the_aws_cost_tag_is_activated_only_when_the_stack_says_it_was_billed():
    assert not _run("prod").of_type("aws:costexplorer/costAllocationTag:CostAllocationTag")
    sections = _config("prod").to_sections()
    sections["budget"]["activate_cost_allocation_tag"] = True
    run = run_program("prod", StackConfig.from_sections(sections))
    (error,) = deploy_errors(run, FRESH)
    assert error.endswith("ValidationException: Failed to update Cost Allocation Tag: Tag keys not found: trainfleet-stack")
    billed = replace(FRESH, aws_billed_tag_keys=frozenset({"trainfleet-stack"}))
    assert deploy_errors(run, billed) == []
