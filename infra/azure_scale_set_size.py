"""The capacity an Azure scale set's request carries: 0 when it is created, none on any update.

azure-native updates a scale set with a PUT of the whole body its inputs make, and `ignore_changes` fills an
ignored input with the old one (the engine's processIgnoreChanges): declaring the capacity with ignore_changes
would send the node count the set was created with on every update, so a tag or user-data change would bring
back every VM of a job that scaled itself to zero. A PUT whose `sku` has no capacity keeps the scale set's
current size (the capacity is optional: Azure/aks-engine#2183, "it should be removed from the template so
that the VMSS keep their current size"; azurerm sends no Sku on update unless it changed,
hashicorp/terraform-provider-azurerm#17989). So the program asks Azure whether the set exists: absent, it is
created empty (a run starts with `start_run`, and an empty Spot set never fails for want of quota or
capacity); present, the capacity stays out of the request and the size stays what `start_run` and the node
agent made it.
"""

from __future__ import annotations

import re

import pulumi

GET_SCALE_SET = "azure-native:compute:getVirtualMachineScaleSet"
# ARM's codes for "no such scale set" and "no such resource group (so no scale set)". Anything else (throttling,
# a missing permission) fails the update: guessing "absent" would send capacity 0 to a running job.
ABSENT = re.compile(r"\b(ResourceNotFound|ResourceGroupNotFound)\b")


async def _capacity_to_send(resource_group: str, name: str, opts: pulumi.InvokeOptions) -> int | None:
    try:
        await pulumi.runtime.invoke_async(
            GET_SCALE_SET, {"resourceGroupName": resource_group, "vmScaleSetName": name}, opts
        )
    except Exception as error:  # the SDK raises a bare Exception carrying the provider's error text
        if ABSENT.search(str(error)):
            return 0
        raise
    return None


def capacity_to_send(
    resource_group_name: pulumi.Input[str], name: str, parent: pulumi.Resource
) -> pulumi.Output[int | None]:
    """0 for a scale set that does not exist yet; None (no capacity in the request) for one that does."""
    opts = pulumi.InvokeOptions(parent=parent)
    return pulumi.Output.from_input(resource_group_name).apply(lambda rg: _capacity_to_send(rg, name, opts))
