"""The mock runtime answers in the providers' own output shapes: every output property it invents for a resource
is one the provider SDK declares for that type (its `@pulumi.getter(name=...)` properties), so code that reads
`bucket.bucket_regional_domain_name` or `identity.principal_id` under mocks reads what `pulumi up` returns.
The SDK classes are found the way the engine finds them: through the resource modules each SDK registers."""

from __future__ import annotations

import importlib
import inspect

import pytest

from infra.mock_runtime import run_program
from infra.stack_file import list_stack_files, read_stack_file
from tests.conftest import STACKS


def sdk_class(token: str):
    """The SDK class for a type token, through the module registry the SDKs fill (pulumi.runtime)."""
    from pulumi.runtime import rpc

    package, module, _ = token.split(":")
    for candidate in rpc._RESOURCE_MODULES.get(f"{package}:{module}", []):
        info = getattr(candidate, "mod_info", None)
        if info and token in info["classes"]:
            return getattr(importlib.import_module(info["fqn"]), info["classes"][token])
    raise LookupError(f"no SDK class registered for {token}")


def output_properties(cls) -> set[str]:
    return {
        name
        for _, member in inspect.getmembers(cls)
        if isinstance(member, property) and (name := getattr(member.fget, "_pulumi_name", None))
    }


@pytest.fixture(scope="module")
def runs():
    return {
        sf.env: run_program(sf.env, sf.config)
        for sf in map(read_stack_file, list_stack_files(STACKS.parent))
    }


def test_every_mocked_output_is_a_property_the_provider_returns(runs):
    checked = 0
    for env, run in runs.items():
        for r in run.cloud_resources:
            invented = set(r.outputs) - set(r.inputs)
            if not invented:
                continue
            known = output_properties(sdk_class(r.type))
            assert invented <= known, (env, r.type, sorted(invented - known))
            checked += 1
    assert checked >= 30


def test_the_check_catches_an_output_no_provider_returns():
    """A planted misspelling: the S3 bucket's domain name as `bucketDomain`."""
    assert "bucketRegionalDomainName" in output_properties(sdk_class("aws:s3/bucket:Bucket"))
    assert "bucketDomain" not in output_properties(sdk_class("aws:s3/bucket:Bucket"))
    assert "principalId" in output_properties(sdk_class("azure-native:managedidentity:UserAssignedIdentity"))
