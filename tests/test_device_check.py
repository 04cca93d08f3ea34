"""benchmarks/device_check.py, the prepared accelerator check, on this machine's CPU: its tiny run measures every
setup end to end (DeepSpeed's CPU accelerator, the node's model and ds_config) with the planner's columns beside,
a setup also runs in a process of its own (how it runs on a GPU), no setup starts past the time budget, and the
planner columns and recorded `trainfleet estimate` command are the planner's own figures for the pinned setup."""

from __future__ import annotations

import csv
import math
import shlex
import subprocess
import sys
import time

import pytest

from benchmarks import device_check as dc
from tests.conftest import REPO, run_trainfleet
from tests.deepspeed_runs import CPU_RANKS, launch_env, master_port
from tests.needs import need_module

PLANNER = ["planned_states_gib", "planned_states_trained_gib", "planned_activations_gib", "planned_buffers_gib",
           "planned_used_gib", "planned_device_gib", "planned_tokens_per_s", "planned_mfu"]  # fmt: skip
TINY_SETUPS = 2 * 3 * 2 * 2  # models x ZeRO stages x micro batches x recompute


def need_torch():
    need_module("torch", "pip install torch==2.13.0")


def need_deepspeed():
    need_torch()
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")


def read_rows(folder) -> list[dict]:
    (path,) = folder.glob("device-cpu-tiny-*.csv")
    with path.open() as f:
        return list(csv.DictReader(f))


def assert_planner_columns(row: dict) -> None:
    for column in PLANNER:
        assert math.isfinite(float(row[column])) and float(row[column]) > 0, (column, row)
    assert row["planned_fits"] in ("yes", "no") and row["planner_accelerator"] == "H100-80GB"
    assert int(row["params_planned"]) > 0 and int(row["params_trained"]) > 0


@pytest.mark.e2e
def test_the_tiny_cpu_run_measures_every_setup_beside_the_planner(tmp_path):
    need_deepspeed()
    argv = [sys.executable, str(REPO / "benchmarks" / "device_check.py"), "--device", "cpu", "--tiny",
            "--results", str(tmp_path)]  # fmt: skip
    env = launch_env(MASTER_PORT=str(master_port()))
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = read_rows(tmp_path)
    assert len(rows) == TINY_SETUPS
    setups = {(r["model"], r["zero"], r["micro_batch"], r["recompute"]) for r in rows}
    models, recompute = ("tiny", "tiny-deep"), ("off", "on")
    assert setups == {(m, z, b, c) for m in models for z in "123" for b in "12" for c in recompute}
    for row in rows:
        assert row["status"] == "ok", row
        assert math.isfinite(float(row["tokens_per_s"])) and float(row["tokens_per_s"]) > 0
        assert float(row["tokens_over_planned"]) > 0 and int(row["steps_timed"]) == 2
        assert_planner_columns(row)
        assert row["peak_allocated_gib"] == "" and row["device_used_gib"] == ""  # no device memory on CPU
        assert row["deepspeed"] == "0.19.8" and row["gpu"] == "cpu" and row["seq_len"] == "32"
    deep = [row for row in rows if row["model"] == "tiny-deep"]
    assert {(row["layers_run"], row["layers_model"]) for row in deep} == {("2", "4")}
    assert all("2 of 4 decoder layers" in row["note"] for row in deep)
    # The planner was asked about the truncated model: 2 layers' parameters, the same as the whole tiny one
    assert {row["params_planned"] for row in rows} == {rows[0]["params_trained"]}
    assert "plan tok/s" in r.stdout and "; one process\n" in r.stdout  # the table, all in this process


@pytest.mark.e2e
def test_a_setup_runs_in_a_process_of_its_own(monkeypatch):
    """The GPU path: the setup's own process prints its columns for this one to read back."""
    need_deepspeed()
    for name, value in {**CPU_RANKS, "MASTER_PORT": str(master_port())}.items():
        monkeypatch.setenv(name, value)
    args = dc.parse_args(["--device", "cpu", "--tiny", "--isolate", "--zero-stages", "3"])
    args.peak_tflops = 989.5
    measured = dc.measure_in_child(0, args, time.monotonic() + 120)
    assert measured["status"] == "ok", measured
    assert measured["tokens_per_s"] > 0 and math.isfinite(measured["measured_mfu"])
    assert measured["steps_timed"] == 2


def test_no_setup_starts_after_the_budget(tmp_path, capsys):
    need_torch()
    argv = ["--device", "cpu", "--tiny", "--isolate", "--budget-s", "0", "--results", str(tmp_path)]
    assert dc.main(argv) == 0
    rows = read_rows(tmp_path)
    assert len(rows) == TINY_SETUPS
    for row in rows:
        assert row["status"] == "skipped: time budget" and row["tokens_per_s"] == ""
        assert_planner_columns(row)  # the planner's side is there for a skipped setup too
    assert "skipped" in capsys.readouterr().out


@pytest.mark.parametrize("zero", [1, 3])
def test_the_recorded_estimate_command_prints_the_planner_columns(zero):
    """`trainfleet estimate` pinned to the 1.3B setup says what the row's planner columns say, where it chose the
    row's recompute (it cannot be told to)."""
    need_torch()
    hw = dc.hardware("H100-80GB", None)
    model = dc.gpu_models(4)[0]
    command = dc.estimate_command(dc.Setup(model, zero, 2, False, 2048), "H100-80GB")
    r = run_trainfleet(*shlex.split(command)[1:])
    assert r.code == 0, r.stdout + r.stderr
    out = r.json()
    setup = dc.Setup(model, zero, 2, out["activation_checkpointing"], 2048)
    plan = dc.planned(setup, hw, dc.default_fit())
    parts = out["memory_breakdown_gib"]
    assert parts["model_states"] == round(plan["planned_states_gib"], 2)
    assert parts["activations"] == round(plan["planned_activations_gib"], 2)
    assert parts["communication_buffers"] == round(plan["planned_buffers_gib"], 2)
    assert out["memory_used_gib"] == round(plan["planned_used_gib"], 2)
    assert out["memory_per_device_gib"] == round(plan["planned_device_gib"], 2)
    assert out["tokens_per_second_per_device"] == round(plan["planned_tokens_per_s"], 1)
    assert (out["zero_stage"], out["micro_batch"], out["grad_accum"], out["devices"]) == (zero, 2, 1, 1)


def test_the_7b_runs_truncated_and_the_planner_is_given_the_same_model():
    need_torch()
    llama = dc.PRESETS["llama-7b"]
    # the preset's parameter count is exactly the trainer's, so a truncated count is the preset's for those layers
    assert dc.trainer_config(llama, llama.layers).params == llama.params
    run = dc.gpu_models(4)[1]
    shape = dc.planner_shape(run)
    per_layer = (llama.params - dc.trainer_config(llama, 1).params) // (llama.layers - 1)
    assert (shape.layers, shape.hidden, shape.ffn, shape.vocab) == (4, 4096, 11008, 32000)
    assert shape.params == dc.trainer_config(llama, 4).params == llama.params - 28 * per_layer
    setup = dc.Setup(run, 2, 2, False, 2048)
    assert dc.estimate_command(setup, "H100-80GB") == ""  # no CLI flag describes a truncated model
    assert "4 of 32 decoder layers of llama-7b" in dc.note(setup, "H100-80GB", "")
    whole = dc.Setup(dc.gpu_models(4)[0], 2, 2, False, 2048)
    assert dc.estimate_command(whole, "H200") == ""  # the catalog sells H200s eight to a node only
    assert "no one-device H200 offer" in dc.note(whole, "H200", "")


def test_gpu_names_map_to_the_catalogs_accelerators():
    names = {"NVIDIA H100 80GB HBM3": "H100-80GB", "NVIDIA H200": "H200", "NVIDIA H100 NVL": "H100-NVL",
             "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA A100-SXM4-40GB": "A100-40GB", "NVIDIA L4": "L4",
             "NVIDIA L40S": "L40S", "Tesla T4": None}  # fmt: skip
    assert {gpu: dc.accelerator_name(gpu) for gpu in names} == names
    known = set(dc.default_catalog().accelerators)
    assert {name for name in names.values() if name} <= known
