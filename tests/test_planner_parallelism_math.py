"""Tensor and pipeline parallelism in the planner's memory and throughput models, held against hand-worked
arithmetic (written out beside each number), Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, Narayanan et
al. 2021 (arXiv 2104.04473) eq. 1 and Table 1, and the BLOOM-176B training setup (bigscience tr11-176B-ml),
as vendored in ../shared/data/calibration/throughput_bench.csv."""

from __future__ import annotations

import math

import pytest

from cli.planner import memory, throughput
from cli.planner.calibration import default_fit
from cli.planner.memory import Sharding
from cli.planner.presets import PRESETS, ModelShape
from cli.planner.throughput import Hardware
from cli.planner.workload import Workload

GIB = 2**30
H100 = Hardware("H100-80GB", 989.0, 8, 80, 2000, 192, 3200, "efa")
A100 = Hardware("A100-80GB", 312.0, 8, 80, 2000, 256, 1600, "infiniband")  # DGX A100: 8 x 200 Gb/s HDR


@pytest.fixture(scope="module")
def fit():
    return default_fit()


# --- 1. tp = pp = 1 is the model as it was ----------------------------------------------------------------

# (model, method, seq, micro batch, recompute, gpus/node, nodes, sharding) -> (model states, activations,
# comm buffers, host bytes) and the largest micro batch. Model states, buffers and host bytes as the planner
# computed them before tp/pp existed (cli/planner/memory.py at the parent commit, run once; DeepSpeed's estimators
# term for term). Activations (the per-layer count of issue 30, module docstring) and the largest micro batch
# worked by hand, per sequence (x b), with s h the sequence x hidden:
#   llama-7b, s 2048 (sh = 8,388,608): RMSNorm 8sh + 4s = 67,117,056; layer 2 x 67,117,056 + q 2sh + k, v 4sh + out
#     2sh (16,777,216 + 33,554,432 + 16,777,216) + logsumexp 4 x 2048 x 32 = 262,144 + SwiGLU 8 x 2048 x 11008 =
#     180,355,072: 381,960,192; head 67,117,056 + 12 x 2048 x 32000 = 853,549,056. Recompute: 32 x 2sh =
#     536,870,912 + 381,960,192 + 853,549,056 = 1,772,380,160; b 2: 3,544,760,320. Largest: 80 GiB less 10% =
#     77,309,411,328, less states 21,057,548,800 + buffers 9e9 + reserve 2 GiB + 5% of 80 GiB (6,442,450,944):
#     40,809,411,584 / 1,772,380,160 = 23.03 -> 23.
#   llama-70b, s 4096 (sh = 33,554,432; k = 8 heads of 128): RMSNorm 268,435,456 + 16,384 = 268,451,840; layer
#     2 x 268,451,840 + 2sh + 2 x 2 x 4096 x 1024 + 2sh (67,108,864 + 16,777,216 + 67,108,864) + 4 x 4096 x 64
#     (1,048,576) + 8 x 4096 x 28672 (939,524,096) = 1,628,471,296; head 268,451,840 + 12 x 4096 x 32000 =
#     1,841,315,840. Recompute: 80 x 2sh = 5,368,709,120 + 1,628,471,296 + 1,841,315,840 = 8,838,496,256.
#     Largest: 77,309,411,328 - (5,359,616,512 + 2.1e9 + 6,442,450,944) = 63,407,343,872 / 8,838,496,256 = 7.17 -> 7.
#   mistral-7b (k = 8 heads of 128, f 14336): layer 134,234,112 + 16,777,216 + 2 x 2 x 2048 x 1024 + 16,777,216 +
#     262,144 + 8 x 2048 x 14336 (234,881,024) = 411,320,320; head 853,549,056 (as llama-7b); LoRA counted as a
#     full fine-tune: b 4 x (32 x 411,320,320 + 853,549,056) = 4 x 14,015,799,296 = 56,063,197,184. Largest:
#     77,309,411,328 - (14,819,008,512 + 33,554,432 + 6,442,450,944) = 56,014,397,440 / 14,015,799,296 = 3.996 -> 3.
#   mpt-1b (GELU, LayerNorm; h 2048, 16 heads, f 8192, V 50368; sh = 4,194,304): LayerNorm 4sh + 8s = 16,793,600;
#     layer 2 x 16,793,600 + 8sh (q, k, v, out: 33,554,432) + 4 x 2048 x 16 (131,072) + 4 x 2048 x 8192
#     (67,108,864) = 134,381,568; head 16,793,600 + 12 x 2048 x 50368 = 1,254,637,568; b 8 x (24 x 134,381,568 +
#     1,254,637,568) = 8 x 4,479,795,200 = 35,838,361,600. Largest: 77,309,411,328 - (12,252,845,397 + 9e9 +
#     6,442,450,944) = 49,614,114,987 / 4,479,795,200 = 11.08 -> 11.
BEFORE = [
    (("llama-7b", "full", 2048, 2, True, 8, 2, (2, False, False)),
     (21057548800, 3544760320, 9000000000, 323443949568), 23),
    (("llama-70b", "full", 4096, 1, True, 8, 4, (3, True, False)),
     (5359616512, 8838496256, 2100000000, 413859889152), 7),
    (("mistral-7b", "lora", 2048, 4, False, 4, 1, (0, False, False)),
     (14819008512, 56063197184, 33554432, 402653184), 3),
    (("mpt-1b", "full", 2048, 8, False, 1, 3, (1, False, False)),
     (12252845397, 35838361600, 9000000000, 7876829184), 11),
]  # fmt: skip


@pytest.mark.parametrize(("case", "figures", "largest"), BEFORE)
def test_tp_pp_one_is_the_model_before_them(case, figures, largest):
    name, method, seq, mb, ckpt, g, nodes, sh = case
    w = Workload(PRESETS[name], 10**9, seq, method=method)
    for kw in ({}, {"tp": 1, "pp": 1}):
        e = memory.estimate(w, Sharding(*sh), mb, ckpt, 80, g, nodes, 1000, **kw)
        assert (e.model_states_bytes, e.activation_bytes, e.comm_buffer_bytes, e.host_bytes) == figures
        assert memory.largest_micro_batch(w, Sharding(*sh), ckpt, 80, g, nodes, 1000, **kw) == largest
        assert (e.tp, e.pp, e.in_flight) == (1, 1, 1)
        assert not any("tensor parallel" in line for line in e.explain() + memory.assumptions(e))


def test_tp_pp_one_activations_are_the_counted_layers():
    # llama-7b, s=2048, b=3, h=4096, L=32, V=32000: per sequence 32 layers of 381,960,192 (45.5 sh + 8s + 4sa, the
    # BEFORE table's count) + the head 853,549,056 (final RMSNorm 67,117,056 + 12 sV)
    w = Workload(PRESETS["llama-7b"], 10**9, 2048)
    s, b, h = 2048, 3, 4096
    layer, head = 381_960_192, 853_549_056
    assert layer == 45.5 * s * h + 8 * s + 4 * s * 32 and head == 8 * s * h + 4 * s + 12 * s * 32000
    assert memory.activation_bytes(w, 3, False, tp=1, pp=1) == b * (32 * layer + head) == 39_228_825_600
    # recompute: 2 sh per layer + one layer rebuilt + the head
    assert memory.activation_bytes(w, 3, True, tp=1, pp=1) == b * (32 * 2 * s * h + layer + head) == 5_317_140_480


@pytest.mark.parametrize("sharding", memory.SHARDINGS, ids=lambda s: s.label)
def test_tp_pp_one_step_is_unchanged(fit, sharding):
    w = Workload(PRESETS["llama-7b"], 10**9, 2048)
    a = throughput.step(w, H100, 2, sharding, 2, True, fit)
    b = throughput.step(w, H100, 2, sharding, 2, True, fit, tp=1, pp=1)
    assert a == b
    assert (b.tp, b.pp, b.bubble_share, b.bubble_s, b.tp_comm_s, b.pp_p2p_s) == (1, 1, 0.0, 0.0, 0.0, 0.0)
    # the step is the old sum: grad_accum x (compute + exposed micro comm) + exposed step comm + offload
    comm = throughput.zero_communication(w, H100, 2, sharding)
    micro, step_comm = comm.exposed(b.compute_s)
    assert b.step_s == b.grad_accum * (b.compute_s + micro) + step_comm + b.offload_s
    assert b.tokens_per_step == b.grad_accum * 2 * 2048 * 16
    assert throughput.compute_only_tokens_per_second(w, H100, 2, 2, True, fit) == \
        throughput.compute_only_tokens_per_second(w, H100, 2, 2, True, fit, tp=1, pp=1)  # fmt: skip


# --- 2. llama-70b at tp=8, pp=4 on 8-GPU 80 GB nodes, worked by hand ---------------------------------------

# llama-70b: P = 68,976,648,192, L = 80, h = 8192, V = 32000. 8 nodes x 8 GPUs = 64; tp=8, pp=4 -> dp = 2.
# seq 4096, micro batch 1, global batch 4,194,304 tokens -> m = 4,194,304 / (1 x 4096 x 2) = 512.
W70 = Workload(PRESETS["llama-70b"], 10**12, 4096)
# E = 32000 x 8192 = 262,144,000; P - E = 68,714,504,192; a stage holds ceil(80/4) = 20 layers:
# 68,714,504,192 x 20 / 80 = 17,178,626,048; + E = 17,440,770,048; / tp 8 = 2,180,096,256 per rank.
P_RANK = 2_180_096_256


def test_rank_parameters_by_hand():
    assert memory.rank_params(W70, tp=8, pp=4) == P_RANK
    assert memory.rank_params(W70) == W70.params  # tp = pp = 1: all of them
    assert memory.data_parallel_layout(W70, 8, 8, tp=8, pp=4) == (1, 2)  # 1 dp device per node, 2 nodes/stage


# One llama-70b layer at tp = 8, s = 4096 (sh = 33,554,432), per sequence: the two RMSNorms stay whole on every
# rank, 2 x (8sh + 4s) = 536,903,680; q 2sh, k and v 2 x 2 x 4096 x 1024 (8 key/value heads of 128), the attention
# output 2sh, logsumexp 4 x 4096 x 64 and the SwiGLU tensors 8 x 4096 x 28672 are split:
# (67,108,864 + 16,777,216 + 67,108,864 + 1,048,576 + 939,524,096) / 8 = 1,091,567,616 / 8 = 136,445,952.
LAYER70_TP8 = 536_903_680 + 136_445_952  # 673,349,632 (20.07 sh, where Korthikanti's sbh(10 + 24/8) was 13 sh)
# The head on the last of 4 stages: final RMSNorm 268,451,840 + 16 bytes a logit (the loss's 12 + the 16-bit
# logits of the two micro-batches the pipeline's last stage keeps) x 4096 x 32000 = 2,097,152,000; not split (AutoTP
# keeps the output layer whole).
HEAD70_PP4 = 268_451_840 + 2_097_152_000
# The same layer inside a pipeline, where the launch runs sequence parallelism: of each RMSNorm's 8sh + 4s, its
# input, fp32 copy and 1/rms (6sh + 4s = 201,342,976) are the rank's s/8 positions, 25,167,872; its output, gathered
# into the projections' input, stays whole, 2sh = 67,108,864: 2 x 92,276,736 + 136,445,952 = 320,999,424 (9.57 sh).
LAYER70_TP8_SP = 2 * (201_342_976 // 8 + 67_108_864) + 136_445_952


def test_70b_memory_by_hand():
    e = memory.estimate(W70, Sharding(1), 1, False, 80, 8, 8, 2000, tp=8, pp=4)
    # ZeRO-1 over dp = 2: 2P + 2P + 16P/2 = 12 x 2,180,096,256 = 26,161,155,072
    assert e.model_states_bytes == 12 * P_RANK == 26_161_155_072
    # With 1F1B the first stage holds min(p, m) = 4 micro-batches of its 20 layers: 4 x 20 = 80 layers' worth
    # (Korthikanti et al. sec. 4.2.3), sequence parallel: 80 x 320,999,424 = 25,679,953,920; the last stage's 20
    # layers + the head, 6,419,988,480 + 2,365,603,840 = 8,785,592,320, is less.
    assert memory.layer_bytes(W70.shape, 4096, tp=8) == LAYER70_TP8 == 673_349_632  # AutoTP's, no pipeline
    assert memory.layer_bytes(W70.shape, 4096, tp=8, sequence_parallel=True) == LAYER70_TP8_SP == 320_999_424
    assert memory.head_bytes(W70.shape, 4096, kept_logits=2) == HEAD70_PP4
    assert e.activation_bytes == 80 * LAYER70_TP8_SP == 25_679_953_920
    assert e.in_flight == 4
    # overlap_comm buffers 4.5 x 2 B x (5e8 + 5e8) = 9e9; reserve 2 GiB; fragmentation 5% of 80 GiB
    # = 4,294,967,296. Total 26,161,155,072 + 25,679,953,920 + 9,000,000,000 + 2,147,483,648 + 4,294,967,296
    # = 67,283,559,936 <= 80 GiB - 10% = 85,899,345,920 - 8,589,934,592 = 77,309,411,328: it fits without
    # recompute, where with the norms whole (80 x 673,349,632 = 53,867,970,560 of activations, 95,471,576,576 in
    # all) it did not.
    assert e.device_bytes == 67_283_559_936
    assert e.device_capacity_bytes == 77_309_411_328
    assert e.fits
    # host: each of the node's 8 processes loads its rank's fp32 params x 1.5: 8 x 4 x 1.5 x P_RANK
    assert e.host_bytes == 8 * 4 * 3 * P_RANK // 2 == 104_644_620_288
    text = " ".join(e.explain() + memory.assumptions(e))
    assert "tensor parallel 8 x pipeline 4" in text and "1F1B" in text


def test_70b_activations_with_recompute_and_few_micro_batches():
    s, h = 4096, 8192
    # full recompute: each layer's input, 2sh / 8 = 8,388,608 under sequence parallelism, for 4 x 20 layers, plus
    # one layer rebuilt: 80 x 8,388,608 + 320,999,424 = 992,088,064 on the first stage; the last stage's
    # 20 x 8,388,608 + the layer + the head, 167,772,160 + 320,999,424 + 2,365,603,840 = 2,854,375,424, is more
    assert memory.activation_bytes(W70, 1, True, tp=8, pp=4, grad_accum=512) == 20 * 2 * s * h // 8 + LAYER70_TP8_SP + HEAD70_PP4
    assert 20 * 2 * s * h // 8 + LAYER70_TP8_SP + HEAD70_PP4 == 2_854_375_424
    # m = 2 < p = 4: only 2 micro-batches in flight on the first stage: 2 x 20 x 320,999,424 = 12,839,976,960
    assert memory.activation_bytes(W70, 1, False, tp=8, pp=4, grad_accum=2) == 2 * 20 * LAYER70_TP8_SP
    w = Workload(PRESETS["llama-70b"], 10**12, 4096, global_batch_tokens=2 * 4096 * 2)  # m = 2 at dp = 2
    assert memory.estimate(W70, Sharding(1), 1, False, 80, 8, 8, 2000, tp=8, pp=4).in_flight == 4
    e = memory.estimate(w, Sharding(1), 1, False, 80, 8, 8, 2000, tp=8, pp=4)
    assert (e.in_flight, e.activation_bytes) == (2, 12_839_976_960)
    # pp = 1, tp = 8: every layer once, plus the head, whole on every rank: final RMSNorm 268,451,840 + the loss's
    # 12 x 4096 x 32000 = 1,572,864,000 (no pipeline keeping the logits)
    assert memory.activation_bytes(W70, 1, False, tp=8) == 80 * LAYER70_TP8 + 268_451_840 + 12 * s * 32000


def test_largest_micro_batch_with_a_pipeline_is_a_prefix_that_fits():
    for ckpt in (False, True):
        most = memory.largest_micro_batch(W70, Sharding(1), ckpt, 80, 8, 8, 2000, tp=8, pp=4)
        for b in range(1, most + 1):
            assert memory.estimate(W70, Sharding(1), b, ckpt, 80, 8, 8, 2000, tp=8, pp=4).fits
        assert not memory.estimate(W70, Sharding(1), most + 1, ckpt, 80, 8, 8, 2000, tp=8, pp=4).fits
    # recompute: activations 2,854,375,424 b (the last stage's, above; m = 512 / b stays >= 4 up to b = 128); room
    # 77,309,411,328 - (26,161,155,072 + 9e9 + 2,147,483,648 + 4,294,967,296) = 35,705,805,312 -> 12 sequences (12.5)
    assert memory.largest_micro_batch(W70, Sharding(1), True, 80, 8, 8, 2000, tp=8, pp=4) == 12


def naive_largest_micro_batch(w, sh, ckpt, mem_gib, gpus, nodes, host_gib, tp, pp) -> int:
    """The definition itself: estimate b = 1, 2, ... until one does not fit."""
    b = 0
    while memory.estimate(w, sh, b + 1, ckpt, mem_gib, gpus, nodes, host_gib, tp=tp, pp=pp).fits:
        b += 1
    return b


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_largest_micro_batch_with_a_pipeline_is_the_definitions_answer(pp):
    """Small models on big devices, where the micro batch runs past pp micro-batches in flight into the runs of
    fewer (m(b) < pp) and on to one: the planner's run-by-run answer is the b-by-b one."""
    checked = set()
    for name, seq, batch_tokens in (("mpt-1b", 2048, 2**19), ("llama-7b", 512, 2**18), ("mpt-1b", 128, 2**16)):
        for mem_gib, gpus, nodes, tp in ((80, 1, pp, 1), (80, 2, pp * 2, 2), (24, 4, pp, 1), (141, 8, pp, 8)):
            for sh, ckpt in ((Sharding(0), False), (Sharding(1), True), (Sharding(1), False)):
                w = Workload(PRESETS[name], 10**9, seq, global_batch_tokens=batch_tokens)
                got = memory.largest_micro_batch(w, sh, ckpt, mem_gib, gpus, nodes, 2000, tp=tp, pp=pp)
                assert got == naive_largest_micro_batch(w, sh, ckpt, mem_gib, gpus, nodes, 2000, tp, pp), (
                    name, seq, batch_tokens, mem_gib, gpus, nodes, tp, sh, ckpt)
                if got:
                    checked.add(memory.micro_batches_per_step(w, got, (gpus // tp) * (nodes // pp)) < pp)
    assert checked == {True, False}, "some cases end inside the runs of fewer than pp in flight, some do not"


# --- 3. the pipeline bubble and the step, by hand ----------------------------------------------------------


def test_bubble_share_p4_m16():
    # Narayanan 2021 eq. 1: bubble / ideal = (p-1)/m = 3/16; as a share of the pipelined time (m+p-1 ticks):
    assert throughput.pipeline_bubble_share(4, 16) == pytest.approx(3 / 19)
    assert throughput.pipeline_bubble_share(1, 16) == 0.0


def test_step_with_tp8_pp4_by_hand(fit):
    # mpt-7b (h 4096, L 32), s 2048, b 1; 4 nodes x 8 H100: tp 8 x pp 4 -> dp 1 (no ZeRO traffic);
    # global batch 16 x 2048 tokens -> m = 16
    w = Workload(PRESETS["mpt-7b"], 10**9, 2048, global_batch_tokens=16 * 2048)
    st = throughput.step(w, H100, 4, Sharding(0), 1, False, fit, tp=8, pp=4)
    assert (st.grad_accum, st.tp, st.pp, st.devices, st.tokens_per_step) == (16, 8, 4, 32, 16 * 2048)
    assert st.bubble_share == pytest.approx(3 / 19)
    # compute per device: 2048 tokens x F x imbalance / (8 x 4 x MFU x 0.74 x 989e12), 0.74 the layout efficiency
    # the published development runs set (tests/test_planner_layouts.py). Imbalance: a layer's matrices 4h^2 +
    # 2 h x 4h = 201,326,592 weights -> 6 x that + 12 h s = 1,308,622,848 FLOPs a token, the head 6 x 50368 x h =
    # 1,237,843,968; 32 layers on 4 stages, 8 each, the head on the last: 4 x (8 x 1,308,622,848 + 1,237,843,968)
    # / (32 x 1,308,622,848 + 1,237,843,968) = 46,827,307,008 / 43,113,775,104
    imbalance = 46_827_307_008 / 43_113_775_104
    assert st.compute_s == pytest.approx(2048 * w.flops_per_token * imbalance / (32 * st.mfu * 0.74 * 989e12))
    # TP: 4 all-reduces x 8 layers per stage (32/4), each of 2 x 2048 x 4096 = 16,777,216 bytes over 8 GPUs of one
    # node, as NCCL's tuning model prices them (src/graph/tuning.cc constants; NVLink, Hopper). The Simple ring
    # moves the bytes in 2 x 7/8 x 16,777,216 / 360e9 = 81.556 us; 14 ring steps:
    #   Ring Simple 8.4 + 14 x 3.4 = 56.0 us latency -> 137.6 us; Ring LL128 14 + 14 x 1.9 = 40.6 us + 81.556 / 0.92
    #   = 88.65 us -> 129.2 us; Ring LL 6.6 + 14 x 0.6 = 15.0 us + max(81.556 / 0.5, 29.36 MB / 141 GB/s = 208.2)
    #   -> 223.2 us; Tree (log2(16 MiB / 64) = 18: corrections .7 Simple, .9 LL128, .8 LL; bytes 81.556 x 8/14 /
    #   0.46 = 101.3 us): Simple 64.4 + 144.7, LL128 31.5 + 101.3 / (7/9) / .9 = 176.2, LL 15.2 + 385 / .8.
    #   NCCL picks Ring LL128: 40.6 us + 88.65 us
    t_ar = 40.6e-6 + 2 * 7 / 8 * 16_777_216 / 360e9 / 0.92
    assert st.tp_comm_s == pytest.approx(16 * 32 * t_ar)
    # P2P: 2 sends per tick of (8/8) x 16,777,216 bytes over 3200 Gbit/s x 0.7 / 8 = 280 GB/s, + 2 us each
    p2p = 2 * (16_777_216 / 280e9 + 2e-6)
    assert st.pp_p2p_s == pytest.approx(16 * p2p)
    tick = st.compute_s + 32 * t_ar + p2p
    assert st.bubble_s == pytest.approx(3 * tick)
    assert st.step_s == pytest.approx((16 + 3) * tick)  # m + p - 1 ticks, nothing else to wait for
    assert st.bubble_s / st.step_s == pytest.approx(3 / 19)
    text = "\n".join(throughput.explain_step(st, w, H100, fit))
    assert "tensor parallel 8 x pipeline 4" in text and "bubble (p-1)/(m+p-1) = 15.8%" in text
    assert "tensor parallel 8: 74% of the calibrated MFU" in text


def test_recompute_adds_the_forward_all_reduces(fit):
    w = Workload(PRESETS["mpt-7b"], 10**9, 2048)
    plain = throughput.tp_comm_micro_s(w, H100, 1, False, 8)
    assert throughput.tp_comm_micro_s(w, H100, 1, True, 8) == pytest.approx(plain * 6 / 4)
    assert throughput.tp_comm_micro_s(w, H100, 1, True, 1) == 0.0


# --- 4. published configurations ---------------------------------------------------------------------------

# Narayanan et al. 2021, Table 1, last row: 1008B GPT, 160 heads, hidden 25600, 128 layers, t = 8, p = 64,
# 3072 A100-80GB (384 DGX A100 nodes, dp = 6), batch 3072 sequences of 2048, vocab 51,200: 163 TFLOP/s per GPU
# (52% of peak), trained with full activation recomputation and plain (ZeRO-less) data parallelism.
# Parameters by the paper's own count, 12 l h^2 + 13 l h + (V + s) h:
#   12 x 128 x 25600^2 = 1,006,632,960,000; 13 x 128 x 25600 = 42,598,400; 53,248 x 25,600 = 1,363,148,800
#   -> 1,008,038,707,200 (the table's 1008.0B)
P_1T = 12 * 128 * 25600**2 + 13 * 128 * 25600 + (51200 + 2048) * 25600
GPT_1T = Workload(ModelShape("gpt-1t", P_1T, 128, 25600, 160, 51200, 4 * 25600), 10**12, 2048,
                  global_batch_tokens=3072 * 2048)  # fmt: skip


def test_megatron_1t_row_fits_80gb_and_pure_data_parallel_does_not():
    assert P_1T == 1_008_038_707_200
    e = memory.estimate(GPT_1T, Sharding(0), 1, True, 80, 8, 384, 2000, tp=8, pp=64)
    assert e.fits, e.explain()
    # By hand: 2 layers per stage; E = 51,200 x 25,600 = 1,310,720,000; P - E = 1,006,727,987,200;
    # x 2/128 = 15,730,124,800; + E = 17,040,844,800; / 8 = 2,130,105,600 per rank; ZeRO-0 20 bytes each.
    assert e.model_states_bytes == 20 * 2_130_105_600 == 42_602_112_000
    # Our launch runs it sequence parallel (the paper's run predates that; sh = 52,428,800). A layer (GELU,
    # LayerNorm, 160 heads): each LayerNorm's 4sh + 8s, of which its input and fp32 statistics 2sh + 8s =
    # 104,873,984 are / 8, 13,109,248, and its gathered output 2sh = 104,857,600 whole: 2 x 117,966,848 =
    # 235,933,696; q, k, v, out 8sh + logsumexp 4 x 2048 x 160 + GELU 4 x 2048 x 102400, (419,430,400 + 1,310,720
    # + 838,860,800) / 8 = 157,450,240; 393,383,936 in all. First stage: 64 micro-batches in flight (m = 512) x 2
    # layers x 2sh / 8 + one layer rebuilt = 1,677,721,600 + 393,383,936 = 2,071,105,536. The last stage's
    # 2 x 2sh / 8 + the layer + the head (LayerNorm 209,731,584 + 16 x 2048 x 51200 = 1,677,721,600) =
    # 26,214,400 + 393,383,936 + 1,887,453,184 = 2,307,051,520 is more.
    assert e.activation_bytes == 2 * 2 * 2048 * 25600 // 8 + 235_933_696 + 157_450_240 + 209_731_584 + 16 * 2048 * 51200
    assert e.activation_bytes == 2_307_051_520
    # without recomputation 64 x 2 x 393,383,936 = 50 GB of activations beside 43 GB of states: the paper recomputed
    assert not memory.estimate(GPT_1T, Sharding(0), 1, False, 80, 8, 384, 2000, tp=8, pp=64).fits
    # pure data parallel: 20 bytes x 1.008e12 params per GPU
    assert not memory.estimate(GPT_1T, Sharding(0), 1, True, 80, 8, 384, 2000).fits


def test_megatron_1t_row_throughput_is_not_above_the_published_figure(fit):
    st = throughput.step(GPT_1T, A100, 384, Sharding(0), 1, True, fit, tp=8, pp=64)
    # The paper counts recomputation's extra forward (96 B s l h^2 = 4 passes x 24): model FLOPs are 3/4 of
    # that, 163 x 0.75 = 122 TFLOP/s per GPU. A development run (layout_runs.csv): never predicted faster, and
    # within 1.4 times of it (1.34 today, the widest of the four).
    model_tflops = st.tokens_per_second_per_device * GPT_1T.flops_per_token / 1e12
    assert 122.25 / 1.4 <= model_tflops <= 122.25
    # m = 3072 / 6 = 512, p = 64: bubble share 63 / 575
    assert st.grad_accum == 512 and st.bubble_share == pytest.approx(63 / 575)


def test_bloom_176b_setup_fits_and_zero_less_data_parallel_does_not():
    # BLOOM-176B (bigscience tr11-176B-ml): 70 layers, hidden 14336, 112 heads, vocab 250,880,
    # 176,247,271,424 params; 384 A100-80GB (48 nodes), TP4 PP12 DP8 ZeRO-1, micro batch 2, batch 2048 x 2048,
    # activation checkpointing; ~150 TFLOP/s per GPU (hardware FLOPs) while it trained.
    shape = ModelShape("bloom-176b", 176_247_271_424, 70, 14336, 112, 250880, 4 * 14336)
    w = Workload(shape, 366 * 10**9, 2048, global_batch_tokens=2048 * 2048)
    e = memory.estimate(w, Sharding(1), 2, True, 80, 8, 48, 512, tp=4, pp=12)
    assert e.fits, e.explain()
    assert e.in_flight == 12  # m = 2048 / (2 x 8) = 128 >= 12
    assert not memory.estimate(w, Sharding(0), 1, True, 80, 8, 48, 512).fits


# 70B on 16 nodes of 8 H100 with a slow network (100 Gbit/s TCP: 100/8 x 0.35 = 4.375 GB/s effective).
SLOW = Hardware("H100-80GB", 989.0, 8, 80, 2000, 192, 100, "")


def test_tp8_moves_fewer_cross_node_bytes_than_pure_zero3(fit):
    zero3 = throughput.step(W70, SLOW, 16, Sharding(3), 1, True, fit)
    tp8 = throughput.step(W70, SLOW, 16, Sharding(1), 1, True, fit, tp=8)
    for tp, sh in ((1, Sharding(3)), (8, Sharding(1))):
        assert memory.estimate(W70, sh, 1, True, 80, 8, 16, 2000, tp=tp).fits
    # ZeRO-3, dp = 128: m = 4,194,304 / (4096 x 128) = 8 micro-steps, each gathering twice and reduce-scattering
    # S = 2 x 68,976,648,192 = 137,953,296,384 bytes; a node sends S x 15/16 per collective:
    # 8 x 3 x 137,953,296,384 x 15/16 = 3,103,949,168,640 bytes per step
    assert zero3.node_bytes == pytest.approx(3_103_949_168_640)
    # TP8 + ZeRO-1, dp = 16 (one per node): S_rank = 2 x 68,976,648,192 / 8 = 17,244,162,048; one reduce-scatter
    # and one all-gather per step, 8 groups (one per tp rank) through each node's network:
    # 2 x 8 x 17,244,162,048 x 15/16 = 258,662,430,720 bytes per step
    assert tp8.node_bytes == pytest.approx(258_662_430_720)
    assert tp8.node_bytes < zero3.node_bytes / 10
    # and their time: the 8 groups share the node's 4.375 GB/s, in 8,622,081,024 elements / 5e8 bucket = 17.24
    # calls of 1e9 bytes, each priced as NCCL's tuning model prices it (src/graph/tuning.cc): a ring of 16 ranks,
    # one a node, so all 15 steps cross nodes at the Tree's NET latency. Simple: 8.4 + 15 x 14 = 218.4 us +
    # 1.714 s of bytes; LL128: 14 + 15 x 8.5 = 141.5 us + 1.714 / 0.92; LL: half the bandwidth. Simple wins:
    # 258,662,430,720 / 2 / 4.375e9 + 17.24 x 218.4 us = 29.5619 + 0.0038 s each for the reduce-scatter and
    # the all-gather
    one = 8 * 17_244_162_048 * 15 / 16 / 4.375e9 + 8_622_081_024 / 5e8 * 218.4e-6
    c = throughput.zero_communication(W70, SLOW, 16, Sharding(1), tp=8)
    assert (c.reduce, c.gather) == (pytest.approx(one), pytest.approx(one))
    assert tp8.comm_step_s == pytest.approx(2 * one)
    assert tp8.tokens_per_second > zero3.tokens_per_second
    # TP alone does not shrink the ZeRO-3 traffic a node sends per micro-step (8 groups x S/8): it is the
    # lower ZeRO stage that TP makes fit that saves the network
    c1 = throughput.zero_communication(W70, SLOW, 16, Sharding(3))
    c8 = throughput.zero_communication(W70, SLOW, 16, Sharding(3), tp=8)
    assert c8.node_bytes_micro == pytest.approx(c1.node_bytes_micro)


# --- 5. layouts that cannot run ----------------------------------------------------------------------------


@pytest.mark.parametrize(("tp", "pp", "nodes", "message"), [
    (3, 1, 4, "tp=3 does not divide the 8 devices per node"),
    (16, 1, 4, "tp=16 does not divide the 8 devices per node"),
    (1, 3, 4, "pp=3 does not divide the 4 nodes"),
    (0, 1, 4, "tp=0"),
    (1, -2, 4, "pp=-2"),
    (1, 81, 81, "pp=81 exceeds the model's 80 layers"),
])  # fmt: skip
def test_bad_layouts_raise(fit, tp, pp, nodes, message):
    calls = [
        lambda: memory.estimate(W70, Sharding(1), 1, True, 80, 8, nodes, 2000, tp=tp, pp=pp),
        lambda: memory.model_states(W70, Sharding(1), 8, nodes, tp=tp, pp=pp),
        lambda: memory.largest_micro_batch(W70, Sharding(1), True, 80, 8, nodes, 2000, tp=tp, pp=pp),
        lambda: memory.states_fit_host(W70, Sharding(1), 8, nodes, 2000, tp=tp, pp=pp),
        lambda: throughput.step(W70, H100, nodes, Sharding(1), 1, True, fit, tp=tp, pp=pp),
        lambda: throughput.zero_communication(W70, H100, nodes, Sharding(1), tp=tp, pp=pp),
        lambda: throughput.compute_only_tokens_per_second(W70, H100, nodes, 1, True, fit, tp=tp, pp=pp),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()


def test_tp_must_divide_the_heads():
    w = Workload(ModelShape("odd", 10**9, 16, 2048, 12, 32000, 8192), 10**9)
    with pytest.raises(ValueError, match="tp=8 does not divide the model's 12 attention heads"):
        memory.model_states(w, Sharding(1), 8, 1, tp=8)


def test_tp_must_divide_the_key_value_heads_too():
    """Grouped-query attention: 16 query heads share 2 key/value heads; tp 4 would cut a k/v head in two, so
    neither the memory model nor the search's layouts take it (tp 2: one k/v head and 8 query heads a rank)."""
    from cli.planner.optimizer import layouts

    shape = ModelShape("gqa", 10**9, 16, 2048, 16, 32000, 5632, kv_heads=2, mlp="swiglu", norm="rmsnorm")
    w = Workload(shape, 10**9)
    with pytest.raises(ValueError, match="tp=4 does not divide the model's 2 key/value heads"):
        memory.model_states(w, Sharding(1), 8, 1, tp=4)
    assert memory.model_states(w, Sharding(1), 8, 1, tp=2)
    assert {tp for tp, _ in layouts(w, H100, 1)} == {1, 2}
    assert {tp for tp, _ in layouts(Workload(PRESETS["llama-70b"], 10**9), H100, 1)} == {1, 2, 4, 8}  # 8 k/v heads


def test_grad_accum_counts_data_parallel_replicas_only():
    # 4,194,304 tokens / (1 x 4096 x dp): dp = 64 -> 16; dp = 64 / (8 x 4) = 2 -> 512
    assert throughput.grad_accum_for(W70, 1, 64) == 16
    assert throughput.grad_accum_for(W70, 1, 64, tp=8, pp=4) == 512
    assert math.ceil(4_194_304 / (3 * 4096 * 2)) == throughput.grad_accum_for(W70, 3, 64, tp=8, pp=4) == 171
