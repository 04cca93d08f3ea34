"""Tensor and pipeline parallelism from the stack to a real DeepSpeed launch, held against DeepSpeed 0.19.8 itself.

The schema's refusals are checked against DeepSpeed's own source lines (read from the installed package) and
against DeepSpeed refusing the same layouts at run time; the accepted layouts are run: the rendered launch
script starts templates/train.py on 2 CPU ranks (gloo) with the rendered ds_config.json unchanged, a SIGTERM
stops it mid-run (the node protocol: checkpoint, exit 0), a relaunch resumes, and the final loss is the
single-rank (tp = pp = 1) run's on the same data.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from infra.checkpoint_layout import CheckpointLayout
from infra.config import StackConfig
from infra.errors import ConfigError, TrainfleetError
from infra.parallelism import data_parallel, layout_error, unsupported
from infra.userdata import ds_config, render_user_data
from tests.deepspeed_runs import VENV_BIN, launch_env, master_port, run_job
from tests.needs import need_module
from tests.session_results import once_per_session
from tests.token_data import TINY_MODEL_ARGS, copy_dataset, tiny_dataset

STEPS = 40
# Same data in every layout (train.py: data by data-parallel rank, layers seeded by index); the only difference
# left is the order of float sums (a TP all-reduce of partial products, a pipeline's stage hand-off).
LOSS_RTOL = 1e-4


def deepspeed_source(relative: str) -> str:
    ds = need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    return (Path(ds.__file__).parent / relative).read_text()


def stack(
    instance_type: str = "g5.xlarge", nodes: int = 1, cloud: str = "aws", port: int = 29500, **deepspeed
) -> StackConfig:
    """The stack a test renders; one that is launched takes its own `port` (tests.deepspeed_runs.master_port)."""
    region = {"aws": "us-east-1", "gcp": "us-central1"}[cloud]
    return StackConfig.from_sections(
        {
            "job": {"name": "par", "params": "1M", "tokens": "1M", "precision": "fp32"},
            "fleets": [
                {"name": "fl", "cloud": cloud, "region": region, "instance_type": instance_type, "nodes": nodes}
            ],
            "deepspeed": {"zero_stage": 1, "micro_batch": 16, "grad_accum": 2, **deepspeed},
            "launch": {
                "args": [
                    "--steps",
                    str(STEPS),
                    "--step-seconds",
                    "0.05",
                    "--checkpoint-every",
                    "1",
                    *TINY_MODEL_ARGS,
                ],
                "master_port": port,
            },
        }
    )


# --- the schema, against DeepSpeed's source -------------------------------------------------------------------


def test_deepspeeds_pipeline_assertion_is_the_one_the_schema_follows():
    """runtime/pipe/engine.py:76-77 asserts `zero_optimization_stage() < ZeroStageEnum.gradients`, and
    ZeroStageEnum.gradients is 2 (runtime/zero/config.py): a pipeline trains with ZeRO 0 or 1 only."""
    engine = deepspeed_source("runtime/pipe/engine.py")
    assert re.search(
        r"assert self\.zero_optimization_stage\(\s*\) < ZeroStageEnum\.gradients, "
        r"\"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\"",
        engine,
    )
    from deepspeed.runtime.zero.config import ZeroStageEnum

    assert int(ZeroStageEnum.gradients) == 2
    assert 'assert mpu is None, "mpu must be None with pipeline parallelism"' in deepspeed_source("__init__.py")


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_pipeline_needs_zero_0_or_1(zero_stage):
    if zero_stage < 2:  # < ZeroStageEnum.gradients (runtime/pipe/engine.py:76-77)
        assert stack(nodes=2, pipeline_parallel=2, zero_stage=zero_stage).deepspeed.pipeline_parallel == 2
        return
    with pytest.raises(ConfigError) as e:
        stack(nodes=2, pipeline_parallel=2, zero_stage=zero_stage)
    msg = str(e.value)
    assert msg.startswith("trainfleet:deepspeed: pipeline_parallel 2 needs zero_stage 0 or 1")
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "zero",
    [
        {"zero_stage": 0},
        {"zero_stage": 1},
        {"zero_stage": 2, "offload_optimizer": "cpu"},
        {"zero_stage": 3},
        {"zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"},
    ],
)
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_autotp_trains_under_every_zero_stage_and_offload(zero, tp):
    """runtime/engine.py:952: "AutoTP + ZeRO stage 3 is supported for both inference and training"; nothing in
    DeepSpeed refuses AutoTP by stage or offload (the e2e test below trains ZeRO 2 and ZeRO 3)."""
    assert stack("p4d.24xlarge", tensor_parallel=tp, **zero).deepspeed.tensor_parallel == tp


def test_tensor_and_pipeline_together_render_for_the_trainers_own_layers_not_autotp():
    """3-D: 4 nodes x 8 GPUs, tp 8 x pp 2 leaves dp 2 (by hand). AutoTP's section would make deepspeed.initialize
    shard a pipeline, which it cannot (test_deepspeed_cannot_run_autotp_inside_a_pipeline): the degree rides in
    the pipeline section for train.py instead, with sequence parallelism, whose stage hand-offs differ per tensor
    rank and so must not be split over the group; the pipeline still needs ZeRO 0-1."""
    c = stack("p4d.24xlarge", nodes=4, tensor_parallel=8, pipeline_parallel=2)
    out = ds_config(c, c.fleets[0])
    assert "tensor_parallel" not in out
    assert out["pipeline"] == {"stages": 2, "tensor_parallel": 8, "sequence_parallel": True,
                               "pipe_partitioned": False, "grad_partitioned": False}  # fmt: skip
    assert out["train_batch_size"] == 16 * 2 * 2
    with pytest.raises(ConfigError, match="pipeline_parallel 2 needs zero_stage 0 or 1"):
        stack("p4d.24xlarge", nodes=4, tensor_parallel=8, pipeline_parallel=2, zero_stage=2)


@pytest.mark.parametrize(
    "deepspeed, error",
    [
        ({"tensor_parallel": 3}, "trainfleet:deepspeed.tensor_parallel: 3 is not allowed; use one of 1, 2, 4 or 8"),
        ({"tensor_parallel": 16}, "trainfleet:deepspeed.tensor_parallel: 16 is not allowed"),
        ({"pipeline_parallel": 0}, "trainfleet:deepspeed.pipeline_parallel: 0 is not valid"),
        ({"pipeline_parallel": "two"}, "trainfleet:deepspeed.pipeline_parallel: 'two' is not valid"),
    ],
)
def test_bad_values_name_the_key(deepspeed, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        stack(**deepspeed)


def test_defaults_render_as_before():
    c = stack("g5.12xlarge", nodes=3)
    assert (c.deepspeed.tensor_parallel, c.deepspeed.pipeline_parallel) == (1, 1)
    out = ds_config(c, c.fleets[0])
    assert "tensor_parallel" not in out and "pipeline" not in out
    assert out["train_batch_size"] == 16 * 2 * 4 * 3


# --- the fleet layout and the batch ---------------------------------------------------------------------------


def test_global_batch_counts_data_parallel_ranks_only():
    """4 nodes x 8 GPUs = 32 ranks; tp 8 x pp 2 leaves 32 / 16 = 2 data-parallel replicas (by hand), and
    train_batch_size = micro 16 x accumulation 2 x dp."""
    assert data_parallel(32, 8, 2) == 2
    tp = stack("p4d.24xlarge", nodes=4, tensor_parallel=8)
    assert ds_config(tp, tp.fleets[0])["train_batch_size"] == 16 * 2 * (32 // 8)  # dp 4
    assert ds_config(tp, tp.fleets[0])["tensor_parallel"] == {"autotp_size": 8}
    pp = stack("p4d.24xlarge", nodes=4, pipeline_parallel=2)
    assert ds_config(pp, pp.fleets[0])["train_batch_size"] == 16 * 2 * (32 // 2)  # dp 16
    assert ds_config(pp, pp.fleets[0])["pipeline"] == {"stages": 2}


def test_deepspeed_accepts_the_batch_with_the_data_parallel_groups_and_refuses_it_without():
    """runtime/config.py:463: world_size = mpu.get_data_parallel_world_size() when DeepSpeed has the groups (a
    PipelineModule's grid, the TP groups train.py passes); :471 every rank otherwise: refused."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    from deepspeed.runtime.config import DeepSpeedConfig

    from tests.test_userdata_node import deepspeed_world

    class Groups:  # what PipelineParallelGrid and deepspeed.utils.groups answer
        def __init__(self, dp: int):
            self.dp = dp

        def get_data_parallel_world_size(self) -> int:
            return self.dp

    c = stack("p4d.24xlarge", nodes=4, pipeline_parallel=2)
    out = ds_config(c, c.fleets[0])
    with deepspeed_world(32):
        assert DeepSpeedConfig(out, Groups(16)).train_batch_size == 16 * 2 * 16
        with pytest.raises(AssertionError, match="train_batch_size is not equal"):
            DeepSpeedConfig(out)  # counted over all 32 ranks


@pytest.mark.parametrize(
    "instance_type, nodes, deepspeed, error",
    [
        ("g5.12xlarge", 1, {"tensor_parallel": 8}, "tensor_parallel 8 must divide the 4 accelerators per node"),
        ("g5.xlarge", 2, {"tensor_parallel": 2}, "tensor_parallel 2 must divide the 1 accelerators per node"),
        ("p4d.24xlarge", 3, {"pipeline_parallel": 2}, "pipeline_parallel 2 must divide the fleet's 3 nodes"),
    ],
)
def test_layout_must_fit_the_fleet(instance_type, nodes, deepspeed, error):
    c = stack(instance_type, nodes=nodes, **deepspeed)
    with pytest.raises(TrainfleetError, match=re.escape(error)) as e:
        ds_config(c, c.fleets[0])
    assert "fleet 'fl'" in str(e.value)
    with pytest.raises(TrainfleetError, match=re.escape(error)):
        render_user_data("s", c, c.fleets[0], bucket="b", group="g")


def test_sequence_parallelism_needs_a_sequence_that_splits_over_the_tensor_ranks():
    c = stack("p4d.24xlarge", nodes=4, tensor_parallel=8, pipeline_parallel=2)
    c = c.model_copy(update={"job": c.job.model_copy(update={"seq_len": 2052})})
    with pytest.raises(TrainfleetError) as e:
        ds_config(c, c.fleets[0])
    assert "job.seq_len 2052 does not divide by 8" in str(e.value) and "\n" not in str(e.value)


def test_layout_error_and_unsupported_agree_on_the_fine_cases():
    assert layout_error(8, 2, 8, 4) is None and layout_error(1, 4, 1, 4) is None
    assert unsupported(1, True, False, 1, 4) is None and unsupported(3, True, True, 8, 1) is None


# --- real DeepSpeed runs on CPU -------------------------------------------------------------------------------


class Node:
    """The rendered node files under `root` instead of /opt, /etc and /var/lib; launched as the trainer unit
    does (trainfleet-launch.sh HOSTFILE NODE_RANK MASTER_ADDR), `ranks` CPU ranks standing in for the fleet's
    accelerators. The ds_config.json is the rendered one, unchanged."""

    def __init__(self, root: Path, config: StackConfig, ranks: int):
        rendered = render_user_data("par", config, config.fleets[0], bucket="b", group="g")
        self.root, self.home = root, root / "opt"
        for f in rendered.files:
            if f.part in ("trainfleet.env", "trainfleet-launch.sh", "ds_config.json", "model.json"):
                dest = Path(self.move(f.path))
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(self.move(rendered.parts[f.part]))
                dest.chmod(int(f.permissions, 8))
        (self.home / "train.py").write_text(rendered.parts["train.py"])  # fetched from the bucket on a node
        self.ds_config = json.loads(rendered.parts["ds_config.json"])
        for name in ("trainfleet_model.py", "trainfleet_tokens.py"):  # beside train.py, fetched with it
            (self.home / name).write_text(rendered.parts[name])
        copy_dataset(root / "state" / "data")  # what the boot script's data step copies from the bucket
        self.ckpt_dir, self.run_dir = root / "state" / "checkpoints", root / "state" / "run"
        self.run_dir.mkdir(parents=True)
        self.hostfile = self.run_dir / "hostfile"
        self.hostfile.write_text(f"localhost slots={ranks}\n")
        self.env = launch_env(TRAINFLEET_ENV_FILE=self.move("/etc/trainfleet/trainfleet.env"))

    def move(self, text: str) -> str:
        return (
            text.replace("/opt/trainfleet", str(self.root / "opt"))
            .replace("/etc/trainfleet", str(self.root / "etc"))
            .replace("/var/lib/trainfleet", str(self.root / "state"))
        )

    def launch(self, log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [str(self.home / "trainfleet-launch.sh"), str(self.hostfile), "0", "127.0.0.1"],
            stdout=open(log, "w"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )

    def losses(self) -> dict[int, float]:
        """step -> loss, from every checkpoint's COMPLETE (one per step: --checkpoint-every 1)."""
        out = {}
        for done in self.ckpt_dir.glob("step-*/COMPLETE"):
            record = json.loads(done.read_text())
            out[record["step"]] = record["loss"]
        return out

    @property
    def final(self) -> dict:
        return json.loads((self.run_dir / "final.json").read_text())


def finish(proc: subprocess.Popen, log: Path, timeout: float = 240) -> str:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running after {timeout}s:\n{log.read_text()[-3000:]}") from None
    text = log.read_text()
    assert rc == 0, text[-4000:]
    return text


def interrupted_then_resumed(node: Node, tmp: Path) -> tuple[int, str]:
    """First launch: SIGTERM to the trainer (local rank 0) once step 15 is done; it checkpoints and exits 0.
    Second launch: resumes from that step and finishes. Returns (stopped at, second log)."""
    log = tmp / "first.log"
    proc = node.launch(log)
    deadline = time.time() + 180
    step_file = node.run_dir / "step"
    while not (step_file.exists() and int(step_file.read_text() or 0) >= 15):
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-4000:]
        time.sleep(0.05)
    os.kill(int((node.run_dir / "trainer.pid").read_text()), signal.SIGTERM)
    first = finish(proc, log)
    stopped = int(re.search(r"stopping at step (\d+) after its checkpoint", first).group(1))
    assert stopped < STEPS and not (node.run_dir / "DONE").exists()
    second = finish(node.launch(tmp / "second.log"), tmp / "second.log")
    assert f"resumed from step-{stopped:08d}" in second, second[-3000:]
    return stopped, second


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict:
    """tp = pp = 1 on one rank (one g5.xlarge GPU): the same global batch as the 2-rank layouts below (dp 1). Run
    once per session: {"train_batch_size", "final", "losses" (step -> loss)}."""
    need_module("torch", "pip install torch==2.13.0")
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")

    def run(tmp: Path) -> dict:
        node = Node(tmp / "node", stack("g5.xlarge", nodes=1, port=master_port()), ranks=1)
        finish(node.launch(tmp / "run.log"), tmp / "run.log")
        return {"train_batch_size": node.ds_config["train_batch_size"], "final": node.final,
                "losses": sorted(node.losses().items())}  # fmt: skip

    ref = once_per_session(tmp_path_factory, "parallelism-reference", run)
    return {**ref, "losses": dict(ref["losses"])}


LAYOUTS = {
    # 2 nodes x 1 GPU, one pipeline stage per node: 2 ranks, dp 1.
    "pp2": (dict(instance_type="g5.xlarge", nodes=2, pipeline_parallel=2), 2, "tp 1 pp 2 dp 1"),
    # 1 node x 2 GPUs, AutoTP across them: 2 ranks, dp 1.
    "tp2": (dict(instance_type="a2-highgpu-2g", cloud="gcp", nodes=1, tensor_parallel=2), 2, "tp 2 pp 1 dp 1"),
    # 2 nodes x 2 GPUs, tensor parallel inside each node, a pipeline stage per node: 4 ranks, dp 1 (3-D, the
    # model's own tensor-parallel layers on DeepSpeed's pipe x data x model grid).
    "tp2pp2": (dict(instance_type="a2-highgpu-2g", cloud="gcp", nodes=2, tensor_parallel=2, pipeline_parallel=2), 4,
               "tp 2 pp 2 dp 1"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_trains_checkpoints_resumes_and_matches_tp1_pp1(layout, reference, tmp_path):
    kwargs, ranks, banner = LAYOUTS[layout]
    config = stack(**kwargs, port=master_port())
    node = Node(tmp_path / "node", config, ranks=ranks)
    assert node.ds_config["train_batch_size"] == 16 * 2 * 1 == reference["train_batch_size"]
    stopped, log = interrupted_then_resumed(node, tmp_path)
    assert f"trainfleet-train: {banner}" in log

    final, ref = node.final, reference["final"]
    assert final["step"] == ref["step"] == STEPS
    assert final["loss"] == pytest.approx(ref["loss"], rel=LOSS_RTOL), (final, ref)
    losses, ref_losses = node.losses(), reference["losses"]
    assert sorted(losses) == list(range(1, STEPS + 1)), "a checkpoint per step, before and after the resume"
    for step in (1, stopped, stopped + 1, STEPS):
        assert losses[step] == pytest.approx(ref_losses[step], rel=LOSS_RTOL), step
    # The files DeepSpeed wrote are the ones the planner and the agent expect of this layout (2 decoder layers,
    # plus the embedding and the head in a pipeline); one "node" here holds every rank.
    ds = config.deepspeed
    expected = CheckpointLayout(1, ds.zero_stage, "fp32", ds.tensor_parallel, ds.pipeline_parallel,
                                config.fleets[0].nodes, ranks // config.fleets[0].nodes, layers=2 + 2)  # fmt: skip
    written = {f.name for f in (node.ckpt_dir / f"step-{STEPS:08d}").glob("*.pt")}
    assert written == {f.path for f in expected.files}, sorted(written)
    early = sum(losses[s] for s in range(1, 11)) / 10
    late = sum(losses[s] for s in range(STEPS - 9, STEPS + 1)) / 10
    # It learns: a bytes model on this repository's prose starts near ln 257 = 5.55 nats and falls (4.6 -> 3.2 over
    # the first and last 10 of 40 steps when written); a model that does not learn stays at the first figure.
    assert late < 0.8 * early, (early, late)


def run_ranks(tmp: Path, ds: dict, ranks: int, port: int, script: Path | None = None) -> subprocess.CompletedProcess:
    (tmp / "ds.json").write_text(json.dumps(ds))
    env = launch_env(TRAINFLEET_CKPT_DIR=str(tmp / "ckpt"), TRAINFLEET_RUN_DIR=str(tmp / "run"),
                     TRAINFLEET_DATA_DIR=str(tiny_dataset()))  # fmt: skip
    train = script or Path(__file__).resolve().parents[1] / "templates" / "train.py"
    argv = [str(VENV_BIN / "deepspeed"), "--num_gpus", str(ranks), "--master_port", str(port), str(train)]
    return run_job([*argv, "--deepspeed_config", str(tmp / "ds.json"), "--steps", "3", *TINY_MODEL_ARGS], env,
                   timeout=240)  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("zero", [{"zero_stage": 2}, {"zero_stage": 3}])
def test_autotp_trains_under_zero_2_and_zero_3(zero, tmp_path):
    """What `unsupported` lets through for AutoTP, trained: 3 steps on 2 ranks, the rendered ds_config. (With CPU
    offload DeepSpeed first compiles its cpu_adam extension, minutes on a fresh 2-core machine: measured by
    hand when this was written, ZeRO-3 + optimizer and parameter offload trained too, but not in every run.)"""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    config = stack("a2-highgpu-2g", cloud="gcp", tensor_parallel=2, **zero)
    r = run_ranks(tmp_path, ds_config(config, config.fleets[0]), 2, master_port())
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "trainfleet-train: tp 2 pp 1 dp 1" in r.stdout and "done at step 3" in r.stdout


@pytest.mark.e2e
def test_deepspeed_itself_refuses_a_pipeline_under_zero_2(tmp_path):
    """The schema refuses it; so does DeepSpeed (runtime/pipe/engine.py:76-77), with the message we cite."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    config = stack(nodes=2, pipeline_parallel=2)
    ds = ds_config(config, config.fleets[0])
    ds["zero_optimization"]["stage"] = 2  # what the schema would not render
    r = run_ranks(tmp_path, ds, 2, master_port())
    assert r.returncode != 0
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in r.stdout + r.stderr


TP_IN_A_PIPELINE = """
import sys
import deepspeed, torch
from deepspeed.pipe import LayerSpec, PipelineModule
from deepspeed.utils import groups
from torch import nn
deepspeed.init_distributed()
model = PipelineModule([LayerSpec(nn.Linear, 16, 64), LayerSpec(nn.Tanh), LayerSpec(nn.Linear, 64, 1)],
                       num_stages=2, loss_fn=nn.MSELoss(), partition_method="uniform")
config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
          "zero_allow_untested_optimizer": True, "tensor_parallel": {"autotp_size": 2, "partition_config": {
              "use_default_specs": False, "layer_specs": [{"patterns": [".*weight$"], "partition_type": "column"}]}}}
extra = {}
if "--with-groups" in sys.argv:  # what a script does for AutoTP without a pipeline (train.py's tp-only path)
    groups._init_tp_mesh_device(tensor_model_parallel_size=2)
    extra["mpu"] = groups
deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()), config=config, **extra)
print("initialized")
"""


@pytest.mark.e2e
def test_deepspeed_cannot_run_autotp_inside_a_pipeline(tmp_path):
    """tp 2 x pp 2 on 4 ranks with AutoTP: handed the TP groups, DeepSpeed refuses, "mpu must be None with pipeline
    parallelism" (__init__.py:582). Without them (DeepSpeed's own AutoTP mesh, no pipeline dimension) the engine
    broadcasts the sharded weights over the pipeline grid's data-parallel group and gloo aborts. Hence the
    trainer's own tensor-parallel layers in 3-D (infra/parallelism.py)."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    for case in ("with", "without"):
        (tmp_path / case).mkdir()
        script = tmp_path / case / "tp_in_pipeline.py"
        script.write_text(TP_IN_A_PIPELINE)
        env = launch_env()
        argv = [str(VENV_BIN / "deepspeed"), "--num_gpus", "4", "--master_port", str(master_port()), str(script)]
        r = run_job([*argv, *(["--with-groups"] if case == "with" else [])], env, timeout=240)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and "initialized" not in r.stdout, out[-3000:]
        if case == "with":
            assert "mpu must be None with pipeline parallelism" in out, out[-3000:]
        else:
            assert "_broadcast_model" in out and re.search(r"doesn't match expected size|Connection reset by peer",
                                                           out), out[-3000:]  # fmt: skip
