"""The speed bounds the search skips fleets on (cli/planner/optimizer.py `fastest_tokens_per_second`,
cli/planner/throughput.py `step_floor_s`) are never below what a setup reaches: a bound too low would skip a fleet
that holds the best plan. Held against the step model itself, setup by setup, with no memory limit (the bound
ignores memory), and worked by hand for one fleet whose network decides."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.planner import throughput
from cli.planner.calibration import default_fit
from cli.planner.memory import SHARDINGS
from cli.planner.optimizer import (
    communication_free_tokens_per_second,
    compute_floor,
    fastest_tokens_per_second,
    layouts,
    micro_batches,
    setups,
    sharding_supported,
)
from cli.planner.presets import PRESETS
from cli.planner.throughput import Hardware
from cli.planner.workload import Workload

FIT = default_fit()
HARDWARE = [  # per node: 8 x H100 on EFA; 8 x A100 on 10 Gbit/s TCP (a catalog row without a network figure);
    # 4 x L4 (PCIe) on 25 Gbit/s; one A10G
    Hardware("H100-80GB", 989.5, 8, 80.0, 2048.0, 192.0, 3200.0, "efa"),
    Hardware("A100-80GB", 312.0, 8, 80.0, 1152.0, 96.0, None, ""),
    Hardware("L4", 121.0, 4, 24.0, 192.0, 48.0, 25.0, ""),
    Hardware("A10G", 125.0, 1, 24.0, 16.0, 4.0, 10.0, ""),
]


@settings(max_examples=60, deadline=None)
@given(hw=st.sampled_from(HARDWARE), nodes=st.sampled_from([1, 2, 4, 6, 16, 64]),
       model=st.sampled_from(["mpt-125m", "llama-7b", "llama-13b", "llama-70b"]),
       seq=st.sampled_from([1024, 2048, 8192]), method=st.sampled_from(["full", "lora"]),
       batch=st.sampled_from([2**20, 4 * 2**20, 6 * 2**20]))  # fmt: skip
def test_no_step_beats_its_layouts_floor(hw, nodes, model, seq, method, batch):
    """Every (layout, ZeRO stage, offload, recompute, micro batch) the search may try, fitting memory or not:
    its step is no shorter than the layout's floor, so the fleet's bound is no slower than any of its setups."""
    w = Workload(PRESETS[model], 10**10, seq_len=seq, method=method, global_batch_tokens=batch)
    fleet = layouts(w, hw, nodes)
    bound = fastest_tokens_per_second(w, hw, nodes, fleet, FIT) if fleet else 0.0
    for tp, pp in fleet:
        batches = micro_batches(w, hw.devices_per_node * nodes // (tp * pp))
        for sharding in SHARDINGS:
            if not sharding_supported(sharding, tp, pp):
                continue
            floor = throughput.step_floor_s(w, hw, nodes, tp, pp, (sharding.zero_stage,),
                                            throughput.compute_floor_s(w, hw, nodes, FIT, tp, pp, batches))  # fmt: skip
            for ckpt in (False, True):
                for mb in batches:
                    st_ = throughput.step(w, hw, nodes, sharding, mb, ckpt, FIT, tp=tp, pp=pp)
                    assert st_.step_s >= floor * (1 - 1e-12), (tp, pp, sharding, ckpt, mb)
                    assert st_.tokens_per_second <= bound * (1 + 1e-12), (tp, pp, sharding, ckpt, mb)
    for s in setups(w, hw, nodes, FIT, headroom=0.0):  # and so every setup that fits
        assert s.step.tokens_per_second <= bound * (1 + 1e-12)
    if fleet:  # the quick bound is above it: it leaves out all communication
        assert bound <= communication_free_tokens_per_second(w, hw, nodes, fleet, FIT) * (1 + 1e-12)


def test_a_slow_network_bound_by_hand():
    """llama-7b on 64 nodes of 8 A100s with no network figure (10 Gbit/s assumed, NCCL over TCP at 35%:
    0.4375 GB/s), ZeRO-1 alone, no tensor or pipeline split: the all-gather after the step is never hidden.
    By hand: each rank's 6,738,415,616 params, 2 bytes each, cross the node's network once in the gather:
    13,476,831,232 B x 63/64 / 0.4375e9 B/s = 30.32 s, plus the NVLink part (x 7/8 / 235e9 B/s = 0.0502 s) and one
    NCCL latency per bucket: 13.48 calls of a 512-rank ring on 64 nodes, 511 steps of which 63 cross nodes. NCCL's
    model (src/graph/tuning.cc): Simple 8.4 + 448 x max(3.4, 3 x 1.0) + 63 x 14 = 2,413.6 us a call; LL128 would save
    1.3 ms of latency but cost 8% of 2.25 s of bytes, LL half the bandwidth, so NCCL runs Simple: 13.48 x 2.4136 ms
    = 0.0325 s. 30.40 s a step before any compute; the reduce-scatter behind the backward pass hides at most a third
    of a micro-step, at least as much again."""
    hw = HARDWARE[1]
    w = Workload(PRESETS["llama-7b"], 10**10)
    batches = micro_batches(w, 512)
    compute = throughput.compute_floor_s(w, hw, 64, FIT, 1, 1, batches)
    gather = 2 * w.params * (63 / 64 / 0.4375e9 + 7 / 8 / 235e9) + (w.params / 5e8) * 2413.6e-6
    reduce = gather  # the same bytes, buckets and rings (reduce bucket 5e8 elements too)
    floor = throughput.step_floor_s(w, hw, 64, 1, 1, (1,), compute)
    expected = compute[0] + max(0.0, reduce - compute[1] / 3) + gather
    assert math.isclose(floor, expected, rel_tol=1e-9)
    assert floor > 30.3
    # the fleet's bound: ZeRO-3 and pipelines could be faster on this network than ZeRO-1; the bound takes the best
    fleet = layouts(w, hw, 64)
    bound = fastest_tokens_per_second(w, hw, 64, fleet, FIT)
    assert bound < communication_free_tokens_per_second(w, hw, 64, fleet, FIT) / 5  # the network costs 5x or more
    best = max(s.step.tokens_per_second for s in setups(w, hw, 64, FIT))
    assert best <= bound


def test_compute_floors_are_kept_across_fleets():
    """One search's memo holds each layout's compute floor once, whatever the network: two fleets of the same
    accelerator and node count, one on EFA, one on TCP, share it."""
    w = Workload(PRESETS["llama-7b"], 10**10)
    memo: dict = {}
    efa = HARDWARE[0]
    tcp = Hardware("H100-80GB", 989.5, 8, 80.0, 1024.0, 96.0, 100.0, "")
    first = compute_floor(w, efa, 16, FIT, 1, 1, memo)
    assert compute_floor(w, tcp, 16, FIT, 1, 1, memo) is first
    assert fastest_tokens_per_second(w, tcp, 16, layouts(w, tcp, 16), FIT, memo) < \
        fastest_tokens_per_second(w, efa, 16, layouts(w, efa, 16), FIT, memo)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(hw=st.sampled_from(HARDWARE), nodes=st.sampled_from([1, 3, 8, 64]),
       model=st.sampled_from(["mpt-125m", "llama-7b", "llama-70b"]), seq=st.sampled_from([1024, 4096]),
       b4=st.sampled_from([None, -0.2, 0.0]))  # fmt: skip
def test_the_quick_bound_is_the_fastest_micro_batch_of_all(hw, nodes, model, seq, b4):
    """The quick bound reads one micro batch, at the end MFU rises toward: the best of every micro batch, with and
    without recompute, worked out by trying each, for the fitted slope and for a falling or flat one."""
    fit = FIT if b4 is None else replace(FIT, slopes=(*FIT.slopes[:3], b4))
    w = Workload(PRESETS[model], 10**10, seq_len=seq)
    fleet = layouts(w, hw, nodes)
    if not fleet:
        return
    dp = min(hw.devices_per_node * nodes // (tp * pp) for tp, pp in fleet)
    every = max(throughput.compute_only_tokens_per_second(w, hw, nodes, mb, ckpt, fit)
                for mb in micro_batches(w, dp) for ckpt in (False, True))  # fmt: skip
    assert communication_free_tokens_per_second(w, hw, nodes, fleet, fit) == every
