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


def test_activations_counted_with_and_without_checkpointing():
    """llama-7b (RMSNorm, SwiGLU, 32 heads, 32 key/value heads), per sequence, term by term as the module
    docstring counts them (tests/test_activation_memory.py measures them on the node's model)."""
    w = Workload(PRESETS["llama-7b"], 10**9, seq_len=2048)
    s, h, L, v, a, f = 2048, 4096, 32, 32000, 32, 11008
    norm = 4 * s * h + 4 * s + 2 * s * h + 2 * s * h  # fp32 copy, 1/rms, normalized, output: 67,117,056
    attention = 2 * s * h + 2 * 2 * s * h + 2 * s * h + 4 * s * a  # q, k and v, output, logsumexp: 67,371,008
    swiglu = 4 * 2 * s * f  # gate, silu(gate), up, product: 180,355,072
    layer = 2 * norm + attention + swiglu
    head = norm + 12 * s * v  # final norm + the loss's peak (fp32 log-softmax, its gradient, nll_loss's gradient)
    assert layer == 381_960_192 and head == 853_549_056
    assert memory.activation_bytes(w, 1, False) == L * layer + head == 13_076_275_200
    assert memory.activation_bytes(w, 4, True) == 4 * (L * 2 * s * h + layer + head)
    assert memory.activation_bytes(w, 2, False) > memory.activation_bytes(w, 2, True)


def test_activations_of_a_gelu_layernorm_model():
    """mpt-7b (LayerNorm, GELU MLP of 4h, multi-head): 32 sh per layer plus the norms' statistics and the
    logsumexp, Korthikanti et al.'s 34 sh without its two dropout masks."""
    w = Workload(PRESETS["mpt-7b"], 10**9, seq_len=2048)
    s, h, L, v, a, f = 2048, 4096, 32, 50368, 32, 16384
    norm = 2 * s * h + 2 * 4 * s + 2 * s * h  # 16-bit input, fp32 mean and 1/std, output
    layer = 2 * norm + 8 * s * h + 4 * s * a + 2 * 2 * s * f  # q, k, v, output; logsumexp; GELU's input, output
    assert layer == 32 * s * h + 16 * s + 4 * s * a
    assert memory.activation_bytes(w, 1, False) == L * layer + norm + 12 * s * v


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
    assert b.device_bytes <= a.device_bytes
    assert a.used_bytes == a.model_states_bytes + a.activation_bytes + a.comm_buffer_bytes
    assert a.reserved_bytes == a.runtime_reserve_bytes + a.fragmentation_bytes
    assert a.device_bytes == a.used_bytes + a.reserved_bytes
    assert a.available_bytes == a.device_memory_bytes - a.device_bytes


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


# ---------------------------------------------------------------- issue 14: ZeRO-1, the ds_config's buffers, headroom

ZERO1_CASES = [(p, gpn, nodes, off) for p in (125_000_000, 6_738_415_616, 1_234_567) for gpn in (1, 8)
               for nodes in (1, 3, 16) for off in (False, True)]  # fmt: skip


def test_zero1_keeps_the_full_16_bit_gradients_by_hand():
    """Stage 1 partitions only the optimizer states (fp32 master, fp32 grads, Adam m and v: 16 bytes per
    parameter); every device keeps the 16-bit parameters (2P) and the full 16-bit gradients (2P).
    7B on 6 devices: 4 x 7e9 + 16 x 7e9 / 6 = 28e9 + 18.67e9 = 46.67e9 bytes, against ZeRO-2's
    2 x 7e9 + 18 x 7e9 / 6 = 14e9 + 21e9 = 35e9: 11.67e9 more (the 2P - 2P/6 gradients ZeRO-2 shards)."""
    p = 7_000_000_000
    assert memory.zero1_model_states_mem_needs(p, 1, 6, False)[1] == 28_000_000_000 + 18_666_666_666
    assert memory.estimate_zero2_model_states_mem_needs(p, 1, 6, False)[1] == 35_000_000_000
    # offload: the fp32 states go to the host, the 16-bit parameters and full gradients stay: 4P vs ZeRO-2's 2P
    assert memory.zero1_model_states_mem_needs(p, 1, 6, True)[1] == 28_000_000_000
    assert memory.zero1_model_states_mem_needs(p, 1, 6, True)[0] == memory.estimate_zero2_model_states_mem_needs(
        p, 1, 6, True
    )[0]


@pytest.mark.parametrize("params,gpn,nodes,offload", ZERO1_CASES)
def test_zero1_is_deepspeeds_zero2_estimate_with_the_gradients_unpartitioned(params, gpn, nodes, offload):
    """DeepSpeed has no ZeRO-1 estimator: ours is its ZeRO-2 estimate with the 16-bit gradient share (2P/gpus,
    inside its 18P/gpus) replaced by the whole 2P, and the same host memory."""
    ds = need_module("deepspeed.runtime.zero.stage_1_and_2", DEEPSPEED)
    cpu, gpu = ds.estimate_zero2_model_states_mem_needs(
        total_params=params, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=offload
    )
    gpus = gpn * nodes
    ours = memory.zero1_model_states_mem_needs(params, gpn, nodes, offload)
    if offload:  # DeepSpeed's 2P on the device is the 16-bit parameters alone
        assert ours == (cpu, gpu + 2 * params)
    else:  # DeepSpeed's 2P + int(18P/gpus) becomes 2P + 2P + int(16P/gpus)
        assert gpu == 2 * params + int(18 * params / gpus)
        assert ours == (cpu, gpu - int(18 * params / gpus) + 2 * params + int(16 * params / gpus))


@settings(max_examples=60, deadline=None)
@given(
    preset=st.sampled_from(sorted(PRESETS)),
    offload=st.booleans(),
    mb=st.sampled_from([1, 2, 4]),
    ckpt=st.booleans(),
    gpn=st.sampled_from([1, 4, 8]),
    nodes=st.integers(1, 64),
)
def test_zero1_needs_more_device_memory_than_zero2_for_the_same_job(preset, offload, mb, ckpt, gpn, nodes):
    """Same job, same hardware: ZeRO-1 holds the full gradients where ZeRO-2 holds a share, so it needs more
    (equal only without offload on a single device, where both hold everything: 2P + 18P = 4P + 16P)."""
    w = Workload(PRESETS[preset], 10**9)
    one = memory.estimate(w, Sharding(1, offload_optimizer=offload), mb, ckpt, 80, gpn, nodes, 1024)
    two = memory.estimate(w, Sharding(2, offload_optimizer=offload), mb, ckpt, 80, gpn, nodes, 1024)
    assert one.comm_buffer_bytes == two.comm_buffer_bytes and one.activation_bytes == two.activation_bytes
    if gpn * nodes == 1 and not offload:
        assert one.device_bytes == two.device_bytes
    else:
        assert one.device_bytes > two.device_bytes


def test_communication_buffers_follow_deepspeeds_documented_rule():
    """DeepSpeed's guide (huggingface.co/docs/transformers/deepspeed, ZeRO-2): overlap_comm "uses 4.5x the
    allgather_bucket_size and reduce_bucket_size values ... set to 5e8 which means it requires 9GB":
    4.5 x 2 bytes x (5e8 + 5e8) = 9e9 bytes. ZeRO-3 (stage3.py): reduce bucket + reduce-scatter staging,
    2 x 2 bytes x 5e8 = 2e9, plus the 5e7-element prefetch bucket, 1e8: 2.1e9. ZeRO-0: one flattened
    all-reduce bucket, 2 bytes x min(5e8, trained params)."""
    assert memory.comm_buffers(Sharding(1), 7 * 10**9)[0] == 9_000_000_000
    assert memory.comm_buffers(Sharding(2, offload_optimizer=True), 10**6)[0] == 9_000_000_000
    assert memory.comm_buffers(Sharding(3), 7 * 10**9)[0] == 2_100_000_000
    assert memory.comm_buffers(Sharding(3, True, True), 7 * 10**9)[0] == 2_100_000_000
    assert memory.comm_buffers(Sharding(0), 7 * 10**9)[0] == 1_000_000_000
    assert memory.comm_buffers(Sharding(0), 4_194_304)[0] == 8_388_608  # a LoRA's adapters: one small bucket


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_planner_and_rendered_ds_config_read_the_same_bucket_sizes(stage, monkeypatch):
    """One source of truth: change the settings and both the rendered ds_config and the planner follow."""
    from infra import deepspeed_settings
    from infra.userdata import ds_config
    from tests.test_userdata_node import stack

    def rendered() -> dict:
        config = stack(deepspeed={"zero_stage": stage, "micro_batch": 1, "grad_accum": 1},
                       job={"name": "tj", "params": "1B", "tokens": "1B", "precision": "bf16"})  # fmt: skip
        return ds_config(config, config.fleets[0])["zero_optimization"]

    zero = rendered()
    if stage == 0:
        assert not {"overlap_comm", "reduce_bucket_size", "allgather_bucket_size"} & set(zero)
    else:
        assert zero["overlap_comm"] is deepspeed_settings.OVERLAP_COMM is True
        assert zero["reduce_bucket_size"] == deepspeed_settings.REDUCE_BUCKET_SIZE == 5 * 10**8
    if stage in (1, 2):
        assert zero["allgather_bucket_size"] == deepspeed_settings.ALLGATHER_BUCKET_SIZE == 5 * 10**8
    if stage == 3:
        assert zero["stage3_prefetch_bucket_size"] == deepspeed_settings.STAGE3_PREFETCH_BUCKET_SIZE
    before = memory.comm_buffers(Sharding(stage), 7 * 10**9)[0]
    monkeypatch.setattr(deepspeed_settings, "REDUCE_BUCKET_SIZE", 2 * 10**8)
    monkeypatch.setattr(deepspeed_settings, "ALLGATHER_BUCKET_SIZE", 2 * 10**8)
    monkeypatch.setattr(deepspeed_settings, "ALLREDUCE_BUCKET_SIZE", 2 * 10**8)
    after = memory.comm_buffers(Sharding(stage), 7 * 10**9)[0]
    assert after < before
    if stage in (1, 2):  # the guide's smaller setting: "about 2e8, which would require 3.6GB"
        assert after == 3_600_000_000
    if stage >= 1:
        assert rendered()["reduce_bucket_size"] == 2 * 10**8


def test_quick_start_plan_memory_by_hand():
    """The default quick start (`trainfleet plan --model llama-7b --tokens 200B`) plans, at the time of writing,
    1 x p4d.24xlarge:
    8 x A100-40GB (40 GiB = 42,949,672,960 bytes each), ZeRO-3 without offload, micro batch 1, no activation
    checkpointing. llama-7b: P = 6,738,415,616, L = 32, h = 4096, 32 heads and key/value heads, SwiGLU f = 11008,
    V = 32000, s = 2048, largest layer = the embedding V x h = 131,072,000 parameters.
      model states  = 4 x 131,072,000 + int(18 x 6,738,415,616 / 8)   = 524,288,000 + 15,161,435,136
                    = 15,685,723,136 (14.61 GiB)
      activations   = 32 layers x 381,960,192 (2 RMSNorms 2 x 67,117,056, q k v and output 67,108,864,
                      logsumexp 262,144, SwiGLU 180,355,072) + final RMSNorm 67,117,056 + loss 12 x 2048 x 32000
                    = 12,222,726,144 + 67,117,056 + 786,432,000 = 13,076,275,200 (12.18 GiB)
      buffers       = 2 x 2 x 5e8 + 2 x 5e7                            = 2,100,000,000 (1.96 GiB)
      used          = 30,861,998,336 (28.74 GiB)
      reserved      = 2 GiB + 5% x 40 GiB = 2,147,483,648 + 2,147,483,648 = 4,294,967,296 (4.00 GiB)
      available     = 42,949,672,960 - 30,861,998,336 - 4,294,967,296 = 7,792,707,328 (7.26 GiB, 18.1%)
    >= 10% of 40 GiB (4 GiB): it fits (with Korthikanti's 34 sh a layer and 6 bytes a logit it had 10.57 GiB). The plan it replaced, ZeRO-1 on 6 x g6e.2xlarge (1 x L40S, 44.7 GiB =
    47,996,068,659 bytes), needs model states 4P + int(16P/6) = 26,953,662,464 + 17,969,108,309 =
    44,922,770,773 bytes plus 9e9 of overlap_comm buffers: 53.9e9 before activations, more than the card."""
    w = Workload(PRESETS["llama-7b"], 200 * 10**9)
    m = memory.estimate(w, Sharding(3), 1, False, 40, 8, 1, 1152)
    assert m.model_states_bytes == 15_685_723_136
    assert m.activation_bytes == 13_076_275_200
    assert m.comm_buffer_bytes == 2_100_000_000
    assert m.used_bytes == 30_861_998_336
    assert m.reserved_bytes == 4_294_967_296
    assert m.available_bytes == 7_792_707_328
    assert m.fits and m.available_bytes >= 0.10 * 40 * memory.GIB
    old = memory.estimate(w, Sharding(1), 1, True, 44.7, 1, 6, 64)
    assert old.model_states_bytes == 44_922_770_773
    assert old.used_bytes > 44.7 * memory.GIB and not old.fits


REFERENCE_JOBS = {
    "7B, 200B tokens": ["--model", "llama-7b", "--tokens", "200B"],
    "7B, 200B tokens in 72 h": ["--model", "llama-7b", "--tokens", "200B", "--deadline", "72h"],
    "13B, 1T tokens": ["--params", "13B", "--tokens", "1T"],
    "70B, 1T tokens": ["--model", "llama-70b", "--tokens", "1T"],
    "7B LoRA": ["--model", "llama-7b", "--tokens", "1B", "--method", "lora"],
    "405B, 1T tokens": ["--params", "405B", "--tokens", "1T"],
}


@pytest.mark.parametrize("args", REFERENCE_JOBS.values(), ids=REFERENCE_JOBS.keys())
def test_every_listed_plan_keeps_ten_percent_of_device_memory_free(args):
    """Best, runners-up and the frontier: used + reserved leaves >= 10% of the device available (figures are
    rounded to 0.01 GiB, hence the 0.01 slack), and used + reserved + available is the whole device."""
    result = run_trainfleet("plan", *args, "--top", "5", "--json")
    assert result.code == 0, result.stderr
    data = result.json()
    for plan in [data["best"], *data["alternatives"], *data["frontier"]]:
        device = plan["device_memory_gib"]
        assert plan["memory_headroom"] == 0.1
        assert plan["memory_available_gib"] >= 0.10 * device - 0.01, plan
        assert plan["memory_used_gib"] + plan["memory_reserved_gib"] + plan["memory_available_gib"] == (
            pytest.approx(device, abs=0.02)
        )
        assert plan["memory_breakdown_gib"]["communication_buffers"] > 0
        assert plan["memory_per_device_gib"] <= plan["usable_memory_per_device_gib"]


def test_memory_headroom_option_moves_the_bound():
    result = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "200B", "--memory-headroom", "0.3",
                            "--top", "5", "--json")  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    for plan in [data["best"], *data["alternatives"], *data["frontier"]]:
        assert plan["memory_headroom"] == 0.3
        assert plan["memory_available_gib"] >= 0.30 * plan["device_memory_gib"] - 0.01, plan
