"""Issue 28 #9: an Azure scale set gives its VMs a Terminate event long enough for a checkpoint, and replaces
evicted Spot VMs. Windows worked by hand from the planner's rates (infra/checkpoint_io.py: 14 bytes/param, local
save 2 GB/s, upload 0.35 GB/s per node and at most 7.5 GB/s per storage account, commit 10 s, 60 s for the step
that is running); Azure allows 5 to 15 minutes (notBeforeTimeout)."""

from __future__ import annotations

import pytest

from infra.checkpoint_io import azure_terminate_minutes, emergency_checkpoint_s
from infra.mock_runtime import run_program
from infra.stack_file import read_stack_file
from tests.conftest import STACKS


@pytest.mark.parametrize(
    "params, nodes, minutes, needed_s",
    [
        # 1.3B on 1 node: 18.2 GB; 9.1 s save + 52 s upload + 10 + 60 = 131.1 s -> 3 min, Azure's least is 5
        (1_300_000_000, 1, 5, 131.1),
        # 70B on 8 nodes: 122.5 GB each; 61.25 + 350 + 10 + 60 = 481.25 s -> 9 min
        (70_000_000_000, 8, 9, 481.25),
        # 70B on 32 nodes: 30.625 GB each at 7.5/32 = 0.234375 GB/s: 15.3125 + 130.667 + 70 = 215.98 s -> 4 -> 5
        (70_000_000_000, 32, 5, 215.979),
        # 70B on 2 nodes: 490 GB each; 245 + 1400 + 70 = 1715 s -> 29 min, more than Azure gives: 15
        (70_000_000_000, 2, 15, 1715.0),
    ],
)
def test_the_terminate_window_is_what_the_checkpoint_takes(params, nodes, minutes, needed_s):
    got, needed = azure_terminate_minutes(params, nodes, None), emergency_checkpoint_s("azure", params, nodes, None)
    assert got == minutes and needed == pytest.approx(needed_s, abs=0.01)


def test_the_azure_dev_scale_set_has_its_terminate_notification_and_spot_restore():
    config = read_stack_file(STACKS / "Pulumi.azure-dev.yaml").config
    vmss = run_program("azure-dev", config).one("azure-native:compute:VirtualMachineScaleSet")
    profile = vmss.inputs["virtualMachineProfile"]
    assert profile["scheduledEventsProfile"] == {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}
    }
    assert vmss.inputs["spotRestorePolicy"] == {"enabled": True, "restoreTimeout": "PT1H"}
    assert profile["evictionPolicy"] == "Delete"  # what Spot restore replaces


def test_the_terminate_window_is_sized_for_node_0s_part_not_an_even_share():
    """The scale simulation (benchmarks/scale_sim.py) found the window sized for an even share of the checkpoint,
    while under ZeRO-1 node 0's part is the whole 16-bit model plus its shards. 70B bf16 ZeRO-1 on 32 ND96asr_v4
    (8 GPUs each), worked by hand: node 0's part = 140 GB + 8 x 12 x 70e9 / 256 = 166.25 GB, the other 31 nodes'
    26.25 GB. All 32 share the account's 7.5 GB/s (0.234 GB/s each, under a node's 0.35) until the small parts are
    in, at 26.25 / 0.234375 = 112 s; node 0 then moves its other 140 GB at 0.35 GB/s, 400 s. 60 s step + 83.125 s
    save + 512 s upload + 10 s commit = 665.1 s -> 12 minutes. The even share (30.6 GB a node) gave 5."""
    from infra.config import StackConfig

    sections = read_stack_file(STACKS / "Pulumi.azure-dev.yaml").config.to_sections()
    sections["job"]["params"] = 70_000_000_000
    sections["job"]["precision"] = "bf16"
    sections["deepspeed"]["zero_stage"] = 1
    sections["fleets"][0].update({"instance_type": "Standard_ND96asr_v4", "nodes": 32})
    config = StackConfig.from_sections(sections)
    vmss = run_program("azure-dev", config).one("azure-native:compute:VirtualMachineScaleSet")
    profile = vmss.inputs["virtualMachineProfile"]["scheduledEventsProfile"]["terminateNotificationProfile"]
    assert profile["notBeforeTimeout"] == "PT12M"
    assert azure_terminate_minutes(70_000_000_000, 32, None) == 5  # the even share it replaced
