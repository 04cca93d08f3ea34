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

DEEPSPEED = "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'"
GRID = list(
    itertools.product(
        [125_000_000, 6_738_415_616, 68_976_648_192, 1_234_567],  # params
        [1, 2, 8],  # gpus per node
        [1, 3, 16],  # nodes
        [True, False],  # cpu_offload
        [1.0, 1.5, 2.0],  # additional_buffer_factor
    )
)
ZERO3_GRID = [(*case, offload_params, zero_init) for case in GRID for offload_params in (True, False)
              for zero_init in (True, False)]  # fmt: skip


# Dedupe keys: (branch taken, the values that branch reads), from DeepSpeed 0.19's own code
# (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, estimate_zero{2,3}_model_states_mem_needs).
# Two cases with the same key run the same formula on the same numbers, so one of them proves nothing more.
def zero2_key(params, gpn, nodes, offload, buffer) -> tuple:
    gpus = gpn * nodes
    if offload:  # gpu 2P; cpu P * max(4 * total_gpus, 16) * buffer
        return ("offload", "4 x gpus" if 4 * gpus > 16 else "16"), params, max(4 * gpus, 16), buffer
    return ("no offload",), params, gpus, gpn, buffer  # gpu 2P + 18P/total_gpus; cpu P * 4 * gpn * buffer


def zero3_key(params, gpn, nodes, offload, buffer, offload_params, zero_init) -> tuple:
    gpus = gpn * nodes
    if not offload:  # cpu_offload_params is not read without cpu_offload
        return ("no offload", zero_init), params, gpus, gpn, buffer
    if offload_params and zero_init:  # gpu 4 x largest layer; cpu P * 18 / nodes * buffer
        return ("offload params", True), params, nodes, buffer
    if zero_init:  # gpu 4 x largest + 2P/total_gpus; cpu P * 16 / nodes * buffer
        return ("offload optimizer", True), params, gpus, nodes, buffer
    # cpu P * max(4 gpn, 18 / nodes) * buffer with params offloaded (gpu 4 x largest layer), else
    # P * max(4 gpn, 16 / nodes) * buffer (gpu 4 x largest + 2P/total_gpus)
    per_node = 18 if offload_params else 16
    winner = "4 x gpn" if 4 * gpn > per_node / nodes else f"{per_node} / nodes"
    gpu_reads = () if offload_params else (gpus,)
    branch = ("offload params" if offload_params else "offload optimizer", False, winner)
    return branch, params, *gpu_reads, max(4 * gpn, per_node / nodes), buffer


def distinct(cases: list[tuple], key) -> list[tuple]:
    """The first case of every key, in grid order."""
    kept: dict[tuple, tuple] = {}
    for case in cases:
        kept.setdefault(key(*case), case)
    return list(kept.values())


ZERO2_CASES = distinct(GRID, zero2_key)  # 216 grid points -> 192 distinct
ZERO3_CASES = distinct(ZERO3_GRID, zero3_key)  # 864 grid points -> 528 distinct


def test_distinct_cases_still_take_every_branch():
    """Deduping drops repeats only: every branch of DeepSpeed's estimators (and each side of their max())
    keeps at least one case, and every parameter count is still tried in each branch."""
    zero2_branches = {("offload", "16"), ("offload", "4 x gpus"), ("no offload",)}
    assert {zero2_key(*c)[0] for c in ZERO2_CASES} == zero2_branches
    assert {zero3_key(*c)[0] for c in ZERO3_CASES} == {
        ("no offload", True), ("no offload", False), ("offload params", True), ("offload optimizer", True),
        ("offload params", False, "4 x gpn"), ("offload params", False, "18 / nodes"),
        ("offload optimizer", False, "4 x gpn"), ("offload optimizer", False, "16 / nodes"),
    }  # fmt: skip
    for cases, key in ((ZERO2_CASES, zero2_key), (ZERO3_CASES, zero3_key)):
        branches = {key(*c)[0] for c in cases}
        assert {(key(*c)[0], c[0]) for c in cases} == {(b, p) for b in branches for p in {c[0] for c in GRID}}
    assert len(ZERO2_CASES) < len(GRID) and len(ZERO3_CASES) < len(ZERO3_GRID)


def test_every_dropped_case_repeats_a_kept_one_in_deepspeed():
    """The keys are sound: DeepSpeed itself gives every grid point the output of the kept case with its key."""
    z2 = need_module("deepspeed.runtime.zero.stage_1_and_2", DEEPSPEED).estimate_zero2_model_states_mem_needs
    z3 = need_module("deepspeed.runtime.zero.stage3", DEEPSPEED).estimate_zero3_model_states_mem_needs

    def zero3(params, gpn, nodes, offload, buffer, offload_params, zero_init):
        return z3(params, params // 37 + 11, gpn, nodes, offload, offload_params, zero_init, buffer)

    for grid, kept, key, deepspeed in (
        (GRID, ZERO2_CASES, zero2_key, z2),
        (ZERO3_GRID, ZERO3_CASES, zero3_key, zero3),
    ):
        output_of_key = {key(*case): deepspeed(*case) for case in kept}
        for case in grid:
            assert deepspeed(*case) == output_of_key[key(*case)], case


@pytest.mark.parametrize("params,gpn,nodes,offload,buffer", ZERO2_CASES)
def test_zero2_matches_deepspeed(params, gpn, nodes, offload, buffer):
    ds = need_module("deepspeed.runtime.zero.stage_1_and_2", DEEPSPEED)
    ours = memory.estimate_zero2_model_states_mem_needs(params, gpn, nodes, offload, buffer)
    theirs = ds.estimate_zero2_model_states_mem_needs(
        total_params=params, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=offload,
        additional_buffer_factor=buffer,
    )  # fmt: skip
    assert ours == tuple(theirs)


@pytest.mark.parametrize("params,gpn,nodes,offload,buffer,offload_params,zero_init", ZERO3_CASES)
def test_zero3_matches_deepspeed(params, gpn, nodes, offload, buffer, offload_params, zero_init):
    ds = need_module("deepspeed.runtime.zero.stage3", DEEPSPEED)
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
