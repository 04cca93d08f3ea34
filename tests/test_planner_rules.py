"""Planner rules the end-to-end comparisons cannot single out (issue 11's mutation survivors): the memory
headroom assumptions, the host-RAM check for CPU offload, LoRA's frozen base under ZeRO-3 param offload,
unsupported accelerators, a strict deadline and the checkpoint interval's unit."""

from __future__ import annotations

import math

import pytest

from cli.planner import memory
from cli.planner.memory import GIB, Sharding
from cli.planner.presets import PRESETS
from cli.planner.workload import Workload
from tests.conftest import run_trainfleet

OFFLOAD_ALL = Sharding(3, offload_optimizer=True, offload_param=True)


def test_device_memory_reserves_and_headroom_and_90_percent_of_host_ram():
    """The stated reserves: 2 GiB per device for the CUDA context and NCCL and 5% of device memory lost to
    allocator fragmentation are reserved; used + reserved may reach 90% of the device (10% kept available by
    default, --memory-headroom); 10% of node RAM is left to the OS and data loaders. 80 GiB device:
    fragmentation 4 GiB, reserved 6 GiB, used + reserved at most 72 GiB."""
    w = Workload(PRESETS["llama-7b"], 10**9)
    est = memory.estimate(w, Sharding(2), 1, True, 80, 8, 1, 1152)
    assert est.device_memory_bytes == 80 * GIB
    assert est.fragmentation_bytes == 4 * GIB and est.runtime_reserve_bytes == 2 * GIB
    assert est.reserved_bytes == 6 * GIB
    assert est.device_capacity_bytes == 72 * GIB
    assert est.available_bytes == 80 * GIB - est.used_bytes - 6 * GIB
    assert est.host_capacity_bytes == int(1152 * GIB * 0.9)
    loose = memory.estimate(w, Sharding(2), 1, True, 80, 8, 1, 1152, headroom=0.25)
    assert loose.device_capacity_bytes == 60 * GIB
    assert memory.estimate(w, Sharding(2), 1, True, 80, 8, 1, 1152, headroom=0.0).device_capacity_bytes == 80 * GIB


def test_cpu_offload_that_needs_more_host_ram_than_the_node_has_does_not_fit():
    """70B with every state offloaded: DeepSpeed keeps about 18 bytes per parameter (fp32 master, Adam m and v,
    16-bit params) x 1.5 buffer on the host of a single node, ~1.8 TB: far over 192 GiB, well under 4 TiB."""
    w = Workload(PRESETS["llama-70b"], 10**9)
    small = memory.estimate(w, OFFLOAD_ALL, 1, True, 80, 8, 1, 192)
    assert small.host_bytes > 192 * GIB * 0.9 and not small.fits
    big = memory.estimate(w, OFFLOAD_ALL, 1, True, 80, 8, 1, 4096)
    assert big.fits


def test_lora_zero3_param_offload_keeps_only_one_layer_of_the_frozen_base_on_the_device():
    """With param offload ZeRO-3 fetches one layer at a time to the device (DeepSpeed's ZeRO-3 estimator:
    device memory = largest layer only), so the device share must not depend on how many GPUs split the base."""
    w = Workload(PRESETS["llama-70b"], 10**9, method="lora", lora_rank=16)
    one_node, _ = memory.model_states(w, OFFLOAD_ALL, 8, 1)
    two_nodes, _ = memory.model_states(w, OFFLOAD_ALL, 8, 2)
    assert one_node == two_nodes
    assert one_node < 2 * w.params / 8  # far below even an eighth of the 16-bit base


@pytest.mark.parametrize("accelerator", ["Trainium1", "Trainium2", "Qualcomm-AI100"])
def test_accelerators_deepspeed_cannot_drive_are_never_planned(accelerator):
    result = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "20B", "--accelerators", accelerator)
    assert result.code == 2 and result.stderr.startswith("error:"), (result.stdout, result.stderr)


def test_a_deadline_is_a_hard_bound_not_a_suggestion():
    """The cheapest plan without a deadline runs W hours; with a deadline 5% under W it must not be offered."""
    job = ("--model", "llama-7b", "--tokens", "50B", "--clouds", "aws", "--regions", "us-east-1", "--json")
    free = run_trainfleet("plan", *job)
    assert free.code == 0, free.stderr
    w = free.json()["best"]["wallclock_hours"]
    deadline = round(w / 1.05, 3)
    bound = run_trainfleet("plan", *job, "--deadline", f"{deadline}h")
    if bound.code == 0:
        plans = [bound.json()["best"], *bound.json()["alternatives"]]
        assert all(p["wallclock_hours"] <= deadline for p in plans)
        assert bound.json()["best"] != free.json()["best"]
    else:
        assert bound.code == 2 and "deadline" in bound.stderr


def test_the_checkpoint_interval_is_in_minutes():
    """Young/Daly: interval = sqrt(2 x write time x MTBF). The plan's write time is seconds and its fleet
    MTBF hours, so a minutes figure sits between sqrt(2 x write s x 1 h) / 60 and sqrt(2 x write s x 10 y) / 60."""
    result = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h", "--json")
    best = result.json()["best"]
    write_s, minutes = best["checkpoint_write_seconds"], best["checkpoint_interval_minutes"]
    low, high = math.sqrt(2 * write_s * 3600) / 60, math.sqrt(2 * write_s * 87600 * 3600) / 60
    assert low <= minutes <= high, (write_s, minutes)


def test_a_budget_is_a_hard_bound():
    """Within a budget just under the cheapest plan's cost, that plan is gone; under every plan, exit 2."""
    job = ("--model", "llama-7b", "--tokens", "50B", "--clouds", "aws", "--regions", "us-east-1", "--json")
    cheapest = run_trainfleet("plan", *job).json()["best"]["expected_cost_usd"]
    bound = run_trainfleet("plan", *job, "--budget", f"{cheapest * 0.99:.2f}")
    if bound.code == 0:
        plans = [bound.json()["best"], *bound.json()["alternatives"]]
        assert all(p["expected_cost_usd"] <= cheapest * 0.99 for p in plans)
    else:
        assert bound.code == 2 and "budget" in bound.stderr
    broke = run_trainfleet("plan", *job, "--budget", "1")
    assert broke.code == 2 and "budget" in broke.stderr


def test_the_frontier_only_keeps_plans_that_buy_time_with_money():
    """Each plan on the time/cost frontier is faster and dearer than the next: GCP prices its zones alike,
    so equal-cost twins exist there, and only the faster (or first) of them belongs on it."""
    result = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "50B", "--clouds", "gcp", "--json")
    frontier = sorted(result.json()["frontier"], key=lambda p: p["wallclock_hours"])
    costs = [p["expected_cost_usd"] for p in frontier]
    assert len(frontier) >= 2 and all(a > b for a, b in zip(costs, costs[1:], strict=False)), costs
