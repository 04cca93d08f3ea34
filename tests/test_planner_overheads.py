"""Issue 31 #3: no catch-all. What a run spends beside its steps is explicit terms with their sources and flags
(cli/planner/overheads.py): evaluation (cadence and cost) and data-loader stalls, each a cost line and an --explain
line; failures, restarts and checkpoints stay reliability.py's. Expected values are worked by hand from the
published cadence (Megatron-LM's GPT-3 175B example: 10 forward-only batches every 1,000 steps) and the FLOPs of a
forward pass (2 of the 6 per parameter and token, 2 of 8 with recompute)."""

from __future__ import annotations

import json

import pytest

from cli.planner import reliability
from cli.planner.calibration import default_fit
from cli.planner.memory import Sharding
from cli.planner.overheads import JobOverheads
from cli.planner.presets import PRESETS
from cli.planner.throughput import Hardware, step
from cli.planner.workload import Workload
from tests.conftest import assert_one_line_error, run_in_process, run_trainfleet

FIT = default_fit()
A100_NODE = Hardware("A100-80GB", 312.0, 8, 80.0, 1152.0, 96.0, 400.0, "efa")
QUICK = ("--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")


@pytest.mark.parametrize("checkpointing", [False, True])
def test_evaluation_costs_a_forward_pass_of_a_global_batch_every_so_many_steps(checkpointing):
    w = Workload(PRESETS["llama-7b"], 10**11)
    st = step(w, A100_NODE, 4, Sharding(3), 2, checkpointing, FIT)
    # a forward pass: 2N + 4 L h s of the 6N + 12 L h s FLOPs per token; the recomputing step runs 8N + 16 L h s
    forward = st.grad_accum * st.compute_s * (2 / (8 if checkpointing else 6))
    assert JobOverheads().eval_seconds_per_step(st, checkpointing) == pytest.approx(10 / 1000 * forward, rel=1e-12)
    assert JobOverheads(500, 40).eval_share(st, checkpointing) == pytest.approx(40 / 500 * forward / st.step_s)
    assert JobOverheads(eval_iters=0).eval_share(st, checkpointing) == 0


def test_the_overheads_stretch_the_work_daly_prices_and_nothing_else():
    args = dict(useful_hours=100.0, nodes=4, devices_per_node=8, cloud="aws", spot=False, interruption=None,
                checkpoint_bytes=10e9, node_network_gbits=400.0, step_s=5.0)  # fmt: skip
    bare = reliability.assess(**args)
    stretched = reliability.assess(**args, eval_share=0.01, data_stall_share=0.05)
    assert (stretched.eval_hours, stretched.data_stall_hours) == pytest.approx((1.0, 5.0))
    assert stretched.worked_hours == pytest.approx(106.0)
    # Daly's wall time is linear in the work (reliability.py's docstring): 6% more work, 6% more wall time
    assert stretched.wall_hours == pytest.approx(bare.wall_hours * 1.06, rel=1e-12)
    assert stretched.interval_s == bare.interval_s  # the failures and the checkpoint interval do not move


def plan(capsys, *args: str) -> dict:
    code, out, err = run_in_process(capsys, "plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)["best"]


def test_each_overhead_is_a_cost_line_of_its_own(capsys):
    best = plan(capsys, *QUICK, "--data-stall", "0.05")
    bd = best["breakdown"]
    # each term is the fleet's rate times its hours: the same rate as the compute line, a share of its hours
    assert bd["data_stalls_usd"] == pytest.approx(0.05 * bd["compute_usd"], rel=1e-3)
    assert 0.002 < bd["evaluation_usd"] / bd["compute_usd"] < 0.0034  # 10/1000 x (1/3 or 1/4 of the compute)
    assert sum(bd.values()) == pytest.approx(best["expected_cost_usd"], abs=0.05)


def test_the_flags_move_the_plan_the_way_a_user_expects(capsys):
    default = plan(capsys, *QUICK, "--regions", "us-east-1", "--purchase", "on-demand", "--accelerators", "B200")
    args = (*QUICK, "--regions", "us-east-1", "--purchase", "on-demand", "--accelerators", "B200")
    none = plan(capsys, *args, "--eval-iters", "0")
    heavy = plan(capsys, *args, "--eval-every", "100", "--eval-iters", "100")
    assert none["breakdown"]["evaluation_usd"] == 0
    assert none["expected_cost_usd"] < default["expected_cost_usd"] < heavy["expected_cost_usd"]
    # 100 batches every 100 steps: a forward pass per step, a third (a quarter with recompute) of the compute
    share = heavy["breakdown"]["evaluation_usd"] / heavy["breakdown"]["compute_usd"]
    assert share == pytest.approx(1 / 4 if heavy["activation_checkpointing"] else 1 / 3, rel=0.25)


def test_explain_names_each_overhead_with_its_source():
    result = run_trainfleet("plan", "--model", "llama-7b", "--tokens", "20B", "--explain", "--data-stall", "0.02")
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "evaluation: 10 forward-only pass(es) of a global batch every 1,000 steps" in out
    assert "examples/gpt3/train_gpt3_175b_distributed.sh" in out
    assert "data-loader stalls: 2.0% of the steps' time (--data-stall)" in out
    assert "h evaluation + " in out and "h data-loader stalls + " in out  # the wall-time sum names both
    assert "calibrated on published whole runs" not in out


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [("--eval-every", "0", "--eval-every"), ("--eval-iters", "-1", "--eval-iters"),
     ("--data-stall", "1.5", "--data-stall"), ("--data-stall", "nan", "--data-stall")],
)  # fmt: skip
def test_bad_overhead_flags_get_one_line(flag, value, needle):
    for command in (("plan", "--model", "llama-7b", "--tokens", "20B"),
                    ("estimate", "--model", "llama-7b", "--tokens", "20B", "--accelerator", "A100-80GB",
                     "--devices", "8")):  # fmt: skip
        assert_one_line_error(run_trainfleet(*command, flag, value), needle)


def test_a_written_stack_keeps_the_jobs_overheads_and_the_preview_prices_them(tmp_path):
    """plan --write-stack records what the job runs beside its steps when it differs from the defaults, so the
    preview (which reads the stack and prices its fleet on its own) prices the job the plan priced; a stack
    without those keys gets the defaults, and a rewrite with the defaults drops them."""
    import shutil

    from infra.stack_file import read_stack_file
    from tests.conftest import REPO

    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    job = ("plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "100h", "--clouds", "aws",
           "--purchase", "on-demand", "--json", "--write-stack", "dev")  # fmt: skip
    stalled = run_trainfleet(*job, "--eval-iters", "0", "--data-stall", "0.05", cwd=tmp_path)
    assert stalled.code == 0, stalled.stderr
    config = read_stack_file(tmp_path / "stacks" / "Pulumi.dev.yaml").config
    assert (config.job.eval_iters, config.job.data_stall_share, config.job.eval_every_steps) == (0, 0.05, None)
    preview = run_trainfleet("preview", "--stack", "dev", "--json", cwd=tmp_path)
    assert preview.code == 0, preview.stderr
    planned = stalled.json()["best"]["expected_cost_usd"]
    assert preview.json()["expected_job_usd"] == pytest.approx(planned, rel=0.01)
    # the same fleet with the defaults costs less: the stalls were in the preview's price, not only the plan's
    rewritten = run_trainfleet(*job, "--force", cwd=tmp_path)
    assert rewritten.code == 0, rewritten.stderr
    config = read_stack_file(tmp_path / "stacks" / "Pulumi.dev.yaml").config
    assert (config.job.eval_iters, config.job.data_stall_share) == (None, None)
    again = run_trainfleet("preview", "--stack", "dev", "--json", cwd=tmp_path).json()["expected_job_usd"]
    assert again == pytest.approx(rewritten.json()["best"]["expected_cost_usd"], rel=0.01) and again < planned
