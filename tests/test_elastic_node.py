"""Elastic recovery on the node, piece by piece (issue 15); tests/test_e2e_elastic.py runs them together.

- trainfleet-resize.py writes each launch's ds_config: the same train_batch_size at any node count, the
  accumulation that keeps it, and DeepSpeed's `checkpoint.load_universal` exactly when the step is universal.
- Its conversion is DeepSpeed's own ds_to_universal; when that fails, the checkpoint is left as it was.
- The boot script's size rule: all the stack's nodes when the group holds them, else the largest size the stack
  allows (TRAINFLEET_ELASTIC_SIZES, rendered from infra/elastic.py), else none (wait).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config import StackConfig
from infra.userdata import render_parts, templates_root
from tests.needs import need_module

RESIZE = templates_root() / "node" / "trainfleet-resize.py"
BASE = {
    "train_batch_size": 24,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 2},
}


def resize(tmp: Path, nodes: int, slots: int = 1, base: dict = BASE) -> subprocess.CompletedProcess:
    (tmp / "base.json").write_text(json.dumps(base))
    (tmp / "ckpt").mkdir(exist_ok=True)
    argv = [sys.executable, str(RESIZE), "--ckpt-dir", str(tmp / "ckpt"), "--ds-config", str(tmp / "base.json"),
            "--out", str(tmp / "run" / "ds_config.json"), "--nodes", str(nodes), "--slots", str(slots)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def step(tmp: Path, n: int, complete: dict, files: dict[str, bytes]) -> Path:
    folder = tmp / "ckpt" / f"step-{n:08d}"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "COMPLETE").write_text(json.dumps(complete))
    return folder


def launch_config(tmp: Path) -> dict:
    return json.loads((tmp / "run" / "ds_config.json").read_text())


@pytest.mark.parametrize("nodes, slots, accum", [(3, 1, 2), (2, 1, 3), (1, 1, 6), (6, 1, 1), (1, 2, 3)])
def test_the_launch_keeps_the_global_batch_through_accumulation(tmp_path, nodes, slots, accum):
    """24 = 4 (micro) x accumulation x data-parallel ranks, worked by hand for each count."""
    r = resize(tmp_path, nodes, slots)
    assert r.returncode == 0, r.stderr
    c = launch_config(tmp_path)
    assert (c["train_batch_size"], c["gradient_accumulation_steps"]) == (24, accum)
    assert "checkpoint" not in c
    assert json.loads(r.stdout) | {"seconds": 0} == {
        "step": None, "from_nodes": None, "to_nodes": nodes, "converted": False, "bytes": 0, "seconds": 0,
        "grad_accum": accum, "universal": False,
    }  # fmt: skip


def test_a_count_that_cannot_keep_the_global_batch_is_one_line_exit_2(tmp_path):
    r = resize(tmp_path, 5)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "train_batch_size 24" in r.stderr and "5 node(s)" in r.stderr
    assert not (tmp_path / "run" / "ds_config.json").exists()


def test_a_universal_step_is_loaded_as_one_and_a_plain_one_is_not(tmp_path):
    step(tmp_path, 7, {"step": 7, "nodes": 3, "universal": True, "restored": True}, {"mp_rank_00_model_states.pt": b"m"})
    assert resize(tmp_path, 2).returncode == 0
    assert launch_config(tmp_path)["checkpoint"] == {"load_universal": True}
    # The job saves step 9 at its new size; the next launch loads it as DeepSpeed saved it.
    step(tmp_path, 9, {"step": 9, "nodes": 2, "node_rank": 0}, {"zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o"})
    r = resize(tmp_path, 2)
    assert r.returncode == 0 and "checkpoint" not in launch_config(tmp_path)
    assert json.loads(r.stdout)["step"] == 9


def test_a_zero_0_checkpoint_loads_at_any_size_without_conversion(tmp_path):
    """Without ZeRO shards every rank loads the whole optimizer state from the model states file."""
    folder = step(tmp_path, 7, {"step": 7, "nodes": 3}, {"mp_rank_00_model_states.pt": b"m" * 100})
    r = resize(tmp_path, 2)
    assert r.returncode == 0 and json.loads(r.stdout)["converted"] is False
    assert "checkpoint" not in launch_config(tmp_path) and (folder / "mp_rank_00_model_states.pt").exists()


def test_a_failed_conversion_leaves_the_checkpoint_as_it_was(tmp_path):
    """DeepSpeed's converter refuses files that are not its checkpoints: exit 1, the step folder untouched, no
    temp folder left, no ds_config written for a launch that would load nothing."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    files = {"mp_rank_00_model_states.pt": b"not a torch file", "zero_pp_rank_0_mp_rank_00_optim_states.pt": b"x"}
    folder = step(tmp_path, 7, {"step": 7, "nodes": 3, "node_rank": 0, "restored": True, "whole": True}, files)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    r = resize(tmp_path, 2)
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith("trainfleet-resize: DeepSpeed's ds_to_universal failed")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000007"]
    assert not (tmp_path / "run" / "ds_config.json").exists()


def stack(nodes: int, grad_accum: int, min_nodes: int | None) -> StackConfig:
    return StackConfig.from_sections(
        {
            "job": {"name": "el", "params": "1M", "tokens": "1M", "precision": "fp32"},
            "fleets": [{"name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_type": "g5.12xlarge",
                        "nodes": nodes}],  # fmt: skip
            "deepspeed": {"zero_stage": 2, "micro_batch": 4, "grad_accum": grad_accum},
            "checkpoint": {"elastic": {"min_nodes": min_nodes, "wait_for_replacement_s": 600}} if min_nodes else {},
        }
    )


def size_for(tmp: Path, config: StackConfig, members: int) -> str:
    parts = render_parts("el", config, config.fleets[0], bucket="b", group="g")
    (tmp / "trainfleet.env").write_text(parts["trainfleet.env"])
    (tmp / "boot.sh").write_text(parts["trainfleet-boot.sh"])
    env = {**os.environ, "TRAINFLEET_ENV_FILE": str(tmp / "trainfleet.env")}
    r = subprocess.run(["bash", "-c", f'. "{tmp}/boot.sh"; size_for {members}'], capture_output=True, text=True,
                       env=env, timeout=30)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize(
    "nodes, grad_accum, min_nodes, members, size",
    [
        (6, 2, 3, 6, "6"),  # a full set: the stack's nodes
        (6, 2, 3, 9, "6"),  # more (capacity rebalancing): still 6, the rest stand by
        (6, 2, 3, 5, "4"),  # 12 micro-batches per slot: 5 does not divide them, 4 does
        (6, 2, 3, 4, "4"),
        (6, 2, 3, 3, "3"),
        (6, 2, 3, 2, ""),  # below min_nodes: wait
        (3, 2, 2, 2, "2"),
    ],
)
def test_the_boot_script_picks_the_largest_size_the_stack_allows(tmp_path, nodes, grad_accum, min_nodes, members, size):
    assert size_for(tmp_path, stack(nodes, grad_accum, min_nodes), members) == size


def test_without_elastic_the_boot_script_only_ever_runs_the_stacks_nodes(tmp_path):
    config = stack(3, 2, None)
    assert [size_for(tmp_path, config, m) for m in (3, 4, 2, 1)] == ["3", "3", "", ""]
