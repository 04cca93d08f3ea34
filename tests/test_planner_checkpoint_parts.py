"""Issue 29: the planner times checkpoints by where DeepSpeed puts the bytes, not checkpoint bytes / nodes.

Under ZeRO-0/1/2 data-parallel rank 0 alone writes the whole 16-bit model (mp_rank_XX_model_states.pt) beside its
own optimizer shards, and every rank loads it on restore (infra/checkpoint_layout.py, the agent's needed_files).
The figures below are worked by hand from those rules and the calibration's rates (checkpoint_io.md): local save
2 GB/s, upload 1 GB/s per node on S3, 0.35 GB/s on GCS (0.19 beyond 35 nodes) and Azure Blob, at most half the
node's network, and on Azure 7.5 GB/s (60 Gbit/s) of ingress for the whole storage account; commit 10 s.
"""

from __future__ import annotations

import itertools
import json

import pytest

from cli.planner import reliability as rel
from cli.planner.calibration import default_fit
from cli.planner.capacity import FULL
from cli.planner.optimizer import assess_group, assess_options, best_setup, checkpoint_parts, setup_options
from cli.planner.presets import PRESETS
from cli.planner.throughput import Hardware
from cli.planner.workload import Workload
from infra.catalog.interruption import aws_bucket_rate
from infra.checkpoint_io import azure_terminate_minutes, checkpoint_part_bytes, emergency_checkpoint_s
from infra.checkpoint_layout import CheckpointLayout
from tests.conftest import run_trainfleet

P70 = 70_000_000_000
SMALL = 16 * 1024  # a model-states file without tensors (infra/checkpoint_layout.py SMALL_FILE_BYTES)
P5_NIC = 3200.0  # p5.48xlarge, Gbit/s: half of it (200 GB/s) never binds the 1 GB/s S3 rate


def zero1(nodes: int, **kw) -> rel.CheckpointParts:
    args = dict(params=P70, zero_stage=1, precision="bf16", tp=1, pp=1, nodes=nodes, ranks_per_node=8, layers=80)
    return rel.layout_parts(**{**args, **kw})


def test_node_0_writes_the_16_bit_model_worked_by_hand():
    # 64 p5 nodes x 8 GPUs, 70B bf16 ZeRO-1: rank 0 writes 2 x 70e9 bytes of weights; each of the 512 ranks writes
    # its 12 x 70e9 / 512 bytes of fp32 master and Adam states. Node 0 holds 8 ranks: 140e9 + 8 x 12 x 70e9 / 512.
    p = zero1(64)
    assert p.saved_bytes == pytest.approx(140e9 + 8 * 12 * 70e9 / 512) == 153.125e9
    assert (p.saved_node, p.uniform, p.total_bytes) == (0, False, pytest.approx(980e9))
    assert p.model_bytes == pytest.approx(140e9)
    # every node restores its own 13.125e9 of shards and node 0's model states
    assert p.restored_bytes == pytest.approx(13.125e9 + 140e9)
    assert p.restored_total_bytes == pytest.approx(64 * 153.125e9)
    # 8 nodes: node 0 saves 140e9 + 8 x 12 x 70e9 / 64 = 245e9 (the layout's docstring)
    assert zero1(8).saved_bytes == pytest.approx(245e9)
    # tensor parallelism splits the model-states file in 8 (mp_rank_00..07), all written by node 0's ranks
    assert zero1(64, tp=8).saved_bytes == pytest.approx(153.125e9)
    # ZeRO-3 writes no 16-bit model: every node the same 12 x 70e9 / 64 plus 8 small model-states files
    z3 = zero1(64, zero_stage=3)
    assert z3.saved_bytes == z3.restored_bytes == pytest.approx(12 * 70e9 / 64 + 8 * SMALL)
    assert z3.uniform and z3.total_bytes == pytest.approx(12 * 70e9 + 512 * SMALL)
    # 8 pipeline stages of 8 nodes: the first node of each stage writes its 140e9 / 8 of layers (and a small
    # mp_rank file); a node restores its own stage's layers and every stage's mp_rank file (PROTOCOL.md)
    pipe = zero1(64, pp=8)
    assert pipe.saved_bytes == pytest.approx(140e9 / 8 + SMALL + 12 * 70e9 / 64)
    assert pipe.restored_bytes == pytest.approx(12 * 70e9 / 64 + 140e9 / 8 + 8 * SMALL)
    # fp32 weights are 4 bytes a parameter
    assert zero1(64, precision="fp32").saved_bytes == pytest.approx(280e9 + 13.125e9)


def test_checkpoint_times_on_aws_worked_by_hand():
    # 70B ZeRO-1 on 64 p5 nodes, a 10 s step: save 153.125 GB at 2 GB/s; upload it at 1 GB/s, but its 140 GB
    # mp_rank_00_model_states.pt is one file: 8 requests of 85 MB/s at once, 0.68 GB/s, 205.9 s; commit 10 s
    t = rel.checkpoint_times("aws", zero1(64), 64, P5_NIC, 10.0)
    assert t.save_s == pytest.approx(153.125 / 2.0)
    assert t.upload_s == pytest.approx(140 / 0.68)
    assert t.download_s == pytest.approx(140 / 0.68)  # every node restores that file too
    assert t.load_s == pytest.approx(153.125 / 2.0)
    assert t.emergency_s == pytest.approx(10 + 76.5625 + 140 / 0.68 + 10)  # 302.4 s: misses AWS's 120 s notice
    assert "its largest file, 140 GB, at 0.68 GB/s" in t.upload_note
    # the even split this replaces: 980 / 64 = 15.3125 GB a node, 43 s, which fitted
    even = rel.checkpoint_times("aws", 980e9, 64, P5_NIC, 10.0)
    assert even.emergency_s == pytest.approx(10 + 15.3125 / 2 + 15.3125 + 10)


def test_checkpoint_times_on_gcp_and_azure_worked_by_hand():
    # GCS beyond 35 nodes: 0.19 GB/s per node (Dataflux at 548 nodes)
    assert rel.checkpoint_times("gcp", zero1(64), 64, None, 0.0).upload_s == pytest.approx(153.125 / 0.19)
    # Azure: all 64 nodes share the account's 7.5 GB/s in (0.117 GB/s each) until the others' 13.125 GB parts are
    # in (112 s); node 0 then moves its other 140 GB alone at its 0.35 GB/s (400 s)
    az = rel.checkpoint_times("azure", zero1(64), 64, None, 0.0)
    assert az.upload_s == pytest.approx(13.125 / (7.5 / 64) + 140 / 0.35)
    assert "share the storage account's 7.5 GB/s" in az.upload_note
    # a restore: every node fetches 153.125 GB; 64 of them through the account's 25 GB/s out (0.39 GB/s each) is
    # faster than a node's own 0.35 GB/s
    assert az.download_s == pytest.approx(153.125 / 0.35)
    assert az.download_note == ""
    # ZeRO-3's even parts: the account binds, 840 GB (and 512 small files) / 7.5 GB/s
    z3 = rel.checkpoint_times("azure", zero1(64, zero_stage=3), 64, None, 0.0)
    assert z3.upload_s == pytest.approx((840e9 + 512 * SMALL) / 1e9 / 7.5)
    assert "all 64 parts" in z3.upload_note


def test_the_plans_verdict_and_restart_follow_node_0s_part():
    """On demand on AWS (failures only, no capacity wait): the trainer blocks 76.6 s per checkpoint and a restart
    is 900 s + download 205.9 s + load 76.6 s + the not yet durable upload 205.9 s + commit 10 s (the 140 GB
    model-states file at 0.68 GB/s, as above)."""
    common = dict(useful_hours=100.0, nodes=64, devices_per_node=8, cloud="aws", interruption=aws_bucket_rate(2),
                  checkpoint_bytes=980e9, node_network_gbits=P5_NIC, step_s=10.0)  # fmt: skip
    r = rel.assess(spot=False, parts=zero1(64), **common)
    assert r.checkpoint_write_s == pytest.approx(76.5625)
    assert r.restart_s == pytest.approx(900 + 140 / 0.68 + 76.5625 + 140 / 0.68 + 10)
    spot, even = rel.assess(spot=True, parts=zero1(64), **common), rel.assess(spot=True, **common)
    assert not spot.emergency_checkpoint_fits and even.emergency_checkpoint_fits
    assert spot.wall_hours > even.wall_hours
    lines = spot.explain()
    assert any("node 0's part 153 GB of 980 GB: ZeRO-1 keeps the 16-bit model on data-parallel rank 0 (140 GB)"
               in line for line in lines)  # fmt: skip
    assert any("emergency checkpoint 302 s" in line and "does not fit" in line for line in lines)


def test_parts_must_be_those_of_the_priced_node_count():
    with pytest.raises(ValueError):
        rel.checkpoint_times("aws", zero1(64), 32, None, 1.0)
    assert zero1(64).resized(8) == zero1(8)
    assert rel.even_parts(980e9, 64).resized(8) == rel.even_parts(980e9, 8)


@pytest.mark.parametrize("zero_stage,tp,pp,nodes,ranks_per_node", [
    (z, tp, pp, n, g) for z, tp, pp, n, g in itertools.product((0, 1, 2, 3), (1, 2, 4), (1, 2, 4), (1, 2, 3, 4, 6),
                                                                (1, 2, 4, 8))
    if not (pp > 1 and z >= 2) and tp <= g and (n * g) % (tp * pp) == 0
])  # fmt: skip
def test_restored_bytes_are_the_agents_needed_files(zero_stage, tp, pp, nodes, ranks_per_node):
    """restored_per_node sums the agent's rule for every node in one pass; the layout runs needed_files itself, node
    by node: the two agree, also for layouts the planner does not make (TP x PP, stages across nodes)."""
    layout = CheckpointLayout(3_000_000_000, zero_stage, "bf16", tp, pp, nodes, ranks_per_node, 8)
    assert rel.restored_per_node(layout) == layout.restored_bytes
    p = rel.layout_parts(3_000_000_000, zero_stage, "bf16", tp, pp, nodes, ranks_per_node, 8)
    assert p.saved_bytes == max(layout.saved_bytes) and p.total_bytes == layout.total_bytes
    assert p.restored_bytes == max(layout.restored_bytes)
    assert p.restored_total_bytes == sum(layout.restored_bytes)


def test_lora_keeps_the_even_split_and_full_training_takes_the_layout():
    lora = Workload(PRESETS["llama-7b"], 10**9, method="lora")
    p = checkpoint_parts(lora, 8, 4, 1, 1, 1)
    assert p.layout is None and p.saved_bytes == pytest.approx(lora.checkpoint_bytes / 4)
    full = Workload(PRESETS["llama-7b"], 10**9)
    q = checkpoint_parts(full, 8, 4, 2, 1, 1)
    assert q.saved_bytes == pytest.approx(2 * full.params + 12 * full.params / 4, abs=64)
    # fp8 trains with bf16 on (infra/userdata.py): 16-bit weights
    fp8 = Workload(PRESETS["llama-7b"], 10**9, precision="fp8")
    assert checkpoint_parts(fp8, 8, 4, 2, 1, 1) == q


H100 = Hardware("H100-80GB", 989.5, 8, 80.0, 2048.0, 192.0, 3200.0, "efa")


@pytest.mark.parametrize("model,nodes", [("llama-7b", 8), ("llama-13b", 48), ("llama-70b", 16)])
def test_the_options_start_with_the_fastest_and_the_plan_keeps_the_shortest_run(model, nodes):
    w = Workload(PRESETS[model], 10**11)
    fit = default_fit()
    options = setup_options(w, H100, nodes, fit)
    assert options and options[0] == best_setup(w, H100, nodes, fit)
    splits = [checkpoint_parts(w, 8, nodes, s.sharding.zero_stage, s.tp, s.pp) for s in options]
    assert len({(p.saved_bytes, p.restored_bytes, p.total_bytes) for p in splits}) == len(options)
    for cloud in ("aws", "gcp", "azure"):
        chosen, (r, _) = assess_options(w, H100, nodes, options, cloud, "spot", aws_bucket_rate(2), FULL)
        walls = [assess_group(w, H100, nodes, s, cloud, "spot", aws_bucket_rate(2), FULL)[0].wall_hours for s in options]
        assert r.wall_hours == min(walls) and chosen == options[walls.index(min(walls))]


def test_plan_json_and_explain_rest_on_the_parts():
    """The 70B job of the README on AWS H100 nodes: whatever setup the plan takes, its checkpoint figures are its
    layout's, worked here by hand from the JSON's ZeRO stage, TP x PP and node count."""
    result = run_trainfleet("plan", "--params", "70B", "--tokens", "1T", "--deadline", "30d", "--max-nodes", "128",
                            "--accelerators", "H100-80GB", "--clouds", "aws", "--json", "--explain")  # fmt: skip
    assert result.code == 0, result.stderr
    best = json.loads(result.stdout)["best"]
    n, zero, pp = best["nodes"], best["zero_stage"], best["pipeline_parallel"]  # TP keeps the model on node 0
    shards = 12 * 70e9 / n
    if zero == 3:
        largest = shards + 8 * SMALL
    elif pp == 1:
        largest = 140e9 + shards
    else:
        largest = 140e9 / pp + SMALL + shards
    parts = best["checkpoint_parts"]
    assert parts["largest_part_gb"] == pytest.approx(largest / 1e9, abs=1e-3)
    assert parts["save_seconds"] == pytest.approx(largest / 1e9 / 2.0, abs=0.06)
    assert parts["upload_seconds"] == pytest.approx(largest / 1e9 / 1.0, abs=0.06)
    assert best["checkpoint_write_seconds"] == parts["save_seconds"]
    assert parts["emergency_fits_notice"] == (parts["emergency_seconds"] <= 120)
    shown = f"{largest / 1e9:,.0f}" if largest >= 100e9 else f"{largest / 1e9:.3g}"  # whole GB from 100, else 3 figures
    assert any(line.startswith("checkpoint parts: ") and f"{shown} GB" in line for line in best["explain"])


def test_the_azure_terminate_window_takes_the_largest_part():
    # 70B ZeRO-1 on 64 Azure nodes: node 0's part is 153.125 GB, the other 63 hold 13.125 GB each. All 64 share the
    # account's 7.5 GB/s (0.1171875 GB/s each, under the node's 0.35) until the small parts are in, at
    # 13.125 / 0.1171875 = 112 s; node 0 then moves its other 140 GB alone at 0.35 GB/s: 400 s more.
    # 60 s step allowance + 153.125 / 2 save + 512 s + 10 s commit = 658.6 s: 11 minutes
    part = checkpoint_part_bytes(P70, 1, "bf16", 1, 1, 64, 8)
    assert part == 153_125_000_000
    assert emergency_checkpoint_s("azure", P70, 64, None, part) == pytest.approx(60 + 76.5625 + 112 + 400 + 10)
    assert azure_terminate_minutes(P70, 64, None, part) == 11
    # the even split (the default when the caller knows no layout): 15.3 GB a node, 980 GB / 7.5 GB/s = 130.7 s
    assert emergency_checkpoint_s("azure", P70, 64, None) == pytest.approx(60 + 15.3125 / 2 + 980 / 7.5 + 10)
    assert azure_terminate_minutes(P70, 64, None) == 5
    assert checkpoint_part_bytes(P70, 1, "fp8", 8, 1, 64, 8) == part  # fp8 trains with bf16 weights


@pytest.mark.parametrize("zero_stage,tp,pp", [(0, 1, 1), (1, 1, 1), (1, 8, 1), (2, 2, 1), (3, 1, 1), (3, 8, 1),
                                              (0, 1, 4), (1, 1, 2), (1, 1, 8)])  # fmt: skip
@pytest.mark.parametrize("nodes", [24, 48, 64])
def test_layouts_past_the_enumerated_ranks_scale_a_smaller_one(zero_stage, tp, pp, nodes, monkeypatch):
    """`estimate --devices` reaches a million ranks, too many files to list: the layout on fewer nodes, each rank's
    optimizer shard scaled, gives the same parts as listing every file (here with a limit of 64 ranks)."""
    listed = []  # the node counts whose files were listed
    real_layout = rel.CheckpointLayout
    monkeypatch.setattr(rel, "CheckpointLayout", lambda *a: listed.append(a[5]) or real_layout(*a))
    rel._node_bytes.cache_clear()
    exact = rel.scaled_parts(P70, zero_stage, "bf16", tp, pp, nodes, 8, 80, 10**9)
    scaled = rel.scaled_parts(P70, zero_stage, "bf16", tp, pp, nodes, 8, 80, 64)
    assert listed == [nodes, max(8, 2 * pp)]
    for field in ("total_bytes", "saved_bytes", "restored_bytes", "restored_total_bytes", "model_bytes"):
        assert getattr(scaled, field) == pytest.approx(getattr(exact, field), rel=1e-9, abs=64), field
    assert (scaled.saved_node, scaled.uniform) == (exact.saved_node, exact.uniform)
