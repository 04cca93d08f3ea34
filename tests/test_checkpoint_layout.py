"""infra/checkpoint_layout.py against references nobody here wrote: the files DeepSpeed 0.19.8 itself saves (a real
save on 2 CPU ranks, names and sizes), and sizes worked by hand from the bytes per parameter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra.checkpoint_layout import OPTIMIZER_BYTES_PER_PARAM, SMALL_FILE_BYTES, CheckpointLayout, parts_key
from tests.deepspeed_runs import VENV_BIN, launch_env, master_port, run_job
from tests.needs import need_module

GB = 1e9

# ------------------------------------------------------------------------------------------ by hand


def test_70b_bf16_zero1_on_8_nodes_by_hand():
    """8 nodes x 8 ranks, dp 64. Node 0 holds rank 0, data-parallel rank 0: the whole bf16 model (2 B/param,
    140 GB) and its 8 ranks' optimizer shards (12 B/param over 64 ranks: 8 x 13.125 GB = 105 GB): 245 GB. Every other
    node: 8 shards, 105 GB. The whole checkpoint: 14 B/param, 980 GB."""
    layout = CheckpointLayout(70 * 10**9, zero_stage=1, precision="bf16", nodes=8, ranks_per_node=8)
    assert layout.saved_bytes[0] == pytest.approx(245 * GB, rel=1e-9)
    assert all(b == pytest.approx(105 * GB, rel=1e-9) for b in layout.saved_bytes[1:])
    assert layout.total_bytes == pytest.approx(14 * 70e9, rel=1e-9)
    node0 = {f.path: f.size for f in layout.part(0)}
    assert node0["mp_rank_00_model_states.pt"] == 140 * 10**9
    assert node0["bf16_zero_pp_rank_7_mp_rank_00_optim_states.pt"] == 12 * 70 * 10**9 // 64
    assert "bf16_zero_pp_rank_8_mp_rank_00_optim_states.pt" in {f.path for f in layout.part(1)}
    # a restore at 8 nodes: node 0 its own part; every other node its shards and the 140 GB of weights
    assert layout.restored_bytes[0] == layout.saved_bytes[0]
    assert all(b == pytest.approx(245 * GB, rel=1e-9) for b in layout.restored_bytes[1:])


def test_zero3_has_no_full_weights_and_every_node_the_same_part():
    layout = CheckpointLayout(70 * 10**9, zero_stage=3, precision="fp16", nodes=8, ranks_per_node=8)
    assert not any(f.path.startswith("mp_rank") for f in layout.files)
    assert len(set(layout.saved_bytes)) == 1
    assert layout.total_bytes == pytest.approx(12 * 70e9 + 64 * SMALL_FILE_BYTES, rel=1e-9)  # weights in the shards
    assert not any(f.path.startswith("bf16_") for f in layout.files)  # fp16: no bf16_ prefix


def test_fp32_weights_are_4_bytes_a_parameter():
    layout = CheckpointLayout(7 * 10**9, zero_stage=1, precision="fp32", nodes=2, ranks_per_node=8)
    assert layout.total_bytes == pytest.approx((4 + 12) * 7e9, rel=1e-9)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("ranks_per_node", [1, 2, 4, 8])
def test_layouts_of_one_parts_key_put_the_same_bytes_on_every_node(precision, ranks_per_node):
    """What the planner prices one setup per key for (cli/planner/optimizer.py checkpoint_key): every layout it
    searches (tensor degree dividing a node's ranks, pipeline stages of whole nodes, or both) and ZeRO stage with one
    key saves, and restores through the agent's needed_files, the same bytes on each node, to a byte a file (sizes
    are whole bytes); and the keys tell apart what differs (the planner would otherwise merge setups that differ)."""
    params, layers = 7 * 10**9 + 123, 12
    for nodes in (1, 2, 3, 4, 6):
        by_key: dict[tuple, list[tuple]] = {}
        layouts = [(tp, pp) for tp in (1, 2, 4, 8) if ranks_per_node % tp == 0
                   for pp in range(1, nodes + 1) if nodes % pp == 0]  # fmt: skip
        for tp, pp in layouts:
            for zero in range(4):
                layout = CheckpointLayout(params, zero, precision, tp, pp, nodes, ranks_per_node, layers)
                by_key.setdefault(parts_key(zero, precision, pp), []).append(
                    ((zero, tp, pp), layout.saved_bytes, layout.restored_bytes, len(layout.files)))
        seen = []
        for key, members in by_key.items():
            (first, saved, restored, files), rest = members[0], members[1:]
            for other, o_saved, o_restored, o_files in rest:
                # each file's size rounds down to a whole byte; and in 3-D each tensor rank of a stage writes its
                # own tensorless model-states file (SMALL_FILE_BYTES) where tp 1 writes one, and every node restores
                # every stage's: the key ignores those few KiB
                tensorless = (max(first[1], other[1]) - 1) * max(first[2], other[2]) * SMALL_FILE_BYTES
                slack = max(files, o_files) + tensorless
                assert all(abs(a - b) <= slack for a, b in zip(saved, o_saved, strict=True)), (nodes, first, other)
                assert all(abs(a - b) <= slack for a, b in zip(restored, o_restored, strict=True)), (nodes, first, other)
            seen.append((key, saved, restored))
        for i, (key, saved, restored) in enumerate(seen):
            for other_key, o_saved, o_restored in seen[i + 1:]:
                if nodes > 1:
                    assert (saved, restored) != (o_saved, o_restored), f"{nodes} nodes: {key} and {other_key} alike"


# ------------------------------------------------------------------------------------------ DeepSpeed itself

SAVE = """
import os, sys
import deepspeed, torch
from torch import nn
deepspeed.init_distributed()
zero, precision, out = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
model = nn.Sequential(nn.Linear(16, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1))
params = sum(p.numel() for p in model.parameters())  # before ZeRO-3 partitions them away
config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": int(zero)},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, precision: {"enabled": True}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
x, y = torch.randn(2, 16, dtype=dtype), torch.randn(2, 1, dtype=dtype)
loss = ((engine(x) - y) ** 2).mean()
engine.backward(loss)
engine.step()
engine.save_checkpoint(out, tag="step-00000001", save_latest=False)
if int(os.environ["RANK"]) == 0:
    print("PARAMS", params)
"""


def deepspeed_save(tmp: Path, zero: int, precision: str) -> tuple[int, dict[str, int]]:
    """A real DeepSpeed save on 2 CPU ranks (one node of 2): (parameters, {file name: size}) of its step folder."""
    need_module("torch", "pip install torch==2.13.0")
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    script = tmp / "save.py"
    script.write_text(SAVE)
    argv = [str(VENV_BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(master_port()), str(script),
            str(zero), precision, str(tmp / "out")]  # fmt: skip
    r = run_job(argv, launch_env(), timeout=400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    params = int(re.search(r"PARAMS (\d+)", r.stdout).group(1))
    step = tmp / "out" / "step-00000001"
    return params, {p.name: p.stat().st_size for p in step.iterdir()}


@pytest.mark.e2e
@pytest.mark.parametrize("zero", [1, 3])
def test_names_and_sizes_are_deepspeeds_own(zero, tmp_path):
    """bf16 on CPU (DeepSpeed's CPU accelerator supports it). The names are exactly those DeepSpeed wrote; the sizes
    within 1% (pickling adds a little), and a file without tensors (ZeRO-3's model states) no larger than the
    layout's allowance for one."""
    params, saved = deepspeed_save(tmp_path, zero, "bf16")
    layout = CheckpointLayout(params, zero_stage=zero, precision="bf16", nodes=1, ranks_per_node=2, layers=1)
    expected = {f.path: f.size for f in layout.files}
    assert set(saved) == set(expected), json.dumps({"deepspeed": sorted(saved), "layout": sorted(expected)})
    for name, size in expected.items():
        if size == SMALL_FILE_BYTES:
            assert saved[name] <= SMALL_FILE_BYTES, name
        else:
            assert saved[name] == pytest.approx(size, rel=0.01), name
    shards = [n for n in saved if "optim_states" in n]
    assert sum(saved[n] for n in shards) == pytest.approx(OPTIMIZER_BYTES_PER_PARAM * params, rel=0.01)


@pytest.mark.parametrize("precision, per_param", [("bf16", 14), ("fp16", 14), ("fp32", 12)])
def test_without_zero_the_whole_optimizer_is_in_node_0s_model_states(precision, per_param):
    """ZeRO off (stage 0): DeepSpeed 0.19 wraps bf16 and fp16 in FP16_Optimizer and keeps fp32's torch optimizer
    (engine.py `_do_optimizer_sanity_check`: DDP_BFLOAT16, FP16, None), none partitioned, so data-parallel rank 0's
    mp_rank file holds the weights and the whole optimizer: bf16/fp16 2 + 12 (fp32 master, Adam m, v), fp32 4 + 8.
    Worked by hand for 1B on 2 nodes: node 0 saves all of it, node 1 nothing."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    assert spec is not None and spec.origin, "deepspeed is not installed: pip install -e '.[e2e]'"
    engine = (Path(spec.origin).parent / "runtime/engine.py").read_text()
    assert "return FP16 if model_dtype == torch.float16 else DDP_BFLOAT16" in engine
    layout = CheckpointLayout(1_000_000_000, zero_stage=0, precision=precision, nodes=2, ranks_per_node=8)
    assert [(f.node, f.path) for f in layout.files] == [(0, "mp_rank_00_model_states.pt")]
    assert layout.saved_bytes == (per_param * 1_000_000_000, 0)
