"""Memory model: ZeRO model states equal DeepSpeed's estimators; activations; plans fit their devices."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.planner import memory
from cli.planner.memory import SHARDINGS, Sharding
from cli.planner.presets import PRESETS
from cli.planner.workload import Workload
from tests.conftest import run_trainfleet
from tests.needs import need_module

GRID = list(
    itertools.product(
        [125_000_000, 6_738_415_616, 68_976_648_192, 1_234_567],  # params
        [1, 2, 8],  # gpus per node
        [1, 3, 16],  # nodes
        [True, False],  # cpu_offload
        [1.0, 1.5, 2.0],  # additional_buffer_factor
    )
)


@pytest.mark.parametrize("params,gpn,nodes,offload,buffer", GRID)
def test_zero2_matches_deepspeed(params, gpn, nodes, offload, buffer):
    ds = need_module("deepspeed.runtime.zero.stage_1_and_2", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    ours = memory.estimate_zero2_model_states_mem_needs(params, gpn, nodes, offload, buffer)
    theirs = ds.estimate_zero2_model_states_mem_needs(
        total_params=params, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=offload,
        additional_buffer_factor=buffer,
    )  # fmt: skip
    assert ours == tuple(theirs)


@pytest.mark.parametrize("params,gpn,nodes,offload,buffer", GRID)
@pytest.mark.parametrize("offload_params", [True, False])
@pytest.mark.parametrize("zero_init", [True, False])
def test_zero3_matches_deepspeed(params, gpn, nodes, offload, buffer, offload_params, zero_init):
    ds = need_module("deepspeed.runtime.zero.stage3", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    largest = params // 37 + 11
    ours = memory.estimate_zero3_model_states_mem_needs(
        params, largest, gpn, nodes, offload, offload_params, zero_init, buffer
    )
    theirs = ds.estimate_zero3_model_states_mem_needs(
        total_params=params, largest_layer_params=largest, num_gpus_per_node=gpn, num_nodes=nodes,
        cpu_offload=offload, cpu_offload_params=offload_params, zero_init=zero_init,
        additional_buffer_factor=buffer,
    )  # fmt: skip
    assert ours == tuple(theirs)


def test_zero_formulas_by_hand():
    """Without DeepSpeed installed: the published per-parameter bytes (ZeRO paper, DeepSpeed docs)."""
    p = 7_000_000_000
    # ZeRO-2, 8 GPUs, no offload: 2P (16-bit params) + 18P/8 (16-bit and fp32 grads, fp32 master, Adam m, v)
    assert memory.estimate_zero2_model_states_mem_needs(p, 8, 1, False) == (
        int(p * 4 * 8 * 1.5),
        2 * p + 18 * p // 8,
    )
    # ZeRO-2 offload: only 16-bit params stay on the GPU
    assert memory.estimate_zero2_model_states_mem_needs(p, 8, 1, True)[1] == 2 * p
    # ZeRO-3, 64 GPUs, no offload: 18P/64 + 4 x largest layer
    cpu, gpu, ll = memory.estimate_zero3_model_states_mem_needs(p, 10**8, 8, 8, False, False)
    assert (gpu, ll) == (int(18 * p / 64) + 4 * 10**8, 4 * 10**8)


def test_model_states_use_the_estimators_per_stage():
    w = Workload(PRESETS["llama-7b"], 10**9)
    p, ll = w.params, w.shape.largest_layer_params
    assert memory.model_states(w, Sharding(0), 8, 2)[0] == 20 * p
    assert (
        memory.model_states(w, Sharding(2), 8, 2)
        == memory.estimate_zero2_model_states_mem_needs(p, 8, 2, False)[::-1]
    )
    gpu, cpu = memory.model_states(w, Sharding(3, True, True), 8, 2)
    assert (cpu, gpu) == memory.estimate_zero3_model_states_mem_needs(p, ll, 8, 2, True, True, True)[:2]


def test_lora_keeps_frozen_base_in_16_bit_and_trains_adapters():
    full = Workload(PRESETS["llama-7b"], 10**9)
    lora = Workload(PRESETS["llama-7b"], 10**9, method="lora", lora_rank=16)
    assert lora.trainable_params == 4 * 2 * 16 * 4096 * 32
    gpu, _ = memory.model_states(lora, Sharding(0), 1, 1)
    assert gpu == 2 * full.params + 20 * lora.trainable_params
    assert gpu < memory.model_states(full, Sharding(0), 1, 1)[0] / 8


def test_activations_korthikanti_with_and_without_checkpointing():
    w = Workload(PRESETS["llama-7b"], 10**9, seq_len=2048)
    s, h, L, v = 2048, 4096, 32, 32000
    assert memory.activation_bytes(w, 1, False) == L * 34 * s * h + 6 * s * v
    assert memory.activation_bytes(w, 4, True) == L * 2 * s * 4 * h + 34 * s * 4 * h + 6 * s * 4 * v
    assert memory.activation_bytes(w, 2, False) > memory.activation_bytes(w, 2, True)


@settings(max_examples=60, deadline=None)
@given(
    preset=st.sampled_from(sorted(PRESETS)),
    sharding=st.sampled_from(SHARDINGS),
    mb=st.sampled_from([1, 2, 4, 8]),
    ckpt=st.booleans(),
    gpn=st.sampled_from([1, 4, 8]),
    nodes=st.integers(1, 64),
)
def test_more_devices_never_need_more_memory_per_device(preset, sharding, mb, ckpt, gpn, nodes):
    w = Workload(PRESETS[preset], 10**9)
    a = memory.estimate(w, sharding, mb, ckpt, 80, gpn, nodes, 1024)
    b = memory.estimate(w, sharding, mb, ckpt, 80, gpn, nodes + 1, 1024)
    assert b.model_states_bytes <= a.model_states_bytes
    assert a.device_bytes == a.model_states_bytes + a.activation_bytes + a.reserve_bytes


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama-7b", "--tokens", "200B", "--deadline", "72h"],
        ["--params", "70B", "--tokens", "100B", "--objective", "time", "--max-nodes", "16"],
        ["--model", "llama-13b", "--tokens", "20B", "--method", "lora"],
    ],
)
def test_no_plan_exceeds_device_memory(args):
    result = run_trainfleet("plan", *args, "--top", "5", "--json")
    assert result.code == 0, result.stderr
    data = result.json()
    for plan in [data["best"], *data["alternatives"], *data["frontier"]]:
        assert 0 < plan["memory_per_device_gib"] <= plan["usable_memory_per_device_gib"]
