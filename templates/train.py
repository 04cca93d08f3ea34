"""trainfleet's trainer: the planned decoder LLM trained with DeepSpeed on the stack's token data, honouring the
node protocol.

Launched on every node by trainfleet-launch.sh (`deepspeed ... train.py --deepspeed_config ds_config.json`). It
trains the model the plan priced (trainfleet_model.py: the Llama architecture, its shape from the rendered
model.json) on the token data the boot script copied from the stack's data prefix (trainfleet_tokens.py: the
format `trainfleet data tokenize` writes), with the ds_config the planner chose (ZeRO stage, offload, micro
batch, accumulation, full recompute, AutoTP, pipeline stages). Rank 0 writes tokens/s, MFU and the loss to
`$TRAINFLEET_RUN_DIR/progress.json` each step; the agent records them as run events.
Replace it with your own script (stack `launch.script`); keep the protocol below and spot capacity
loses no completed step:

* Checkpoints live in `$TRAINFLEET_CKPT_DIR/step-<N:08d>/`. A checkpoint is written into a temporary
  folder, renamed to `step-<N>`, and `step-<N>/COMPLETE` is written last; only folders with COMPLETE count.
* The trainer's pid is in `$TRAINFLEET_RUN_DIR/trainer.pid` (local rank 0 of each node).
* SIGUSR1, or the file `$TRAINFLEET_RUN_DIR/checkpoint-requested`: checkpoint at the next step boundary and
  go on (the file is removed once the checkpoint is complete).
* SIGTERM (or SIGINT): checkpoint at the next step boundary, then exit 0; once stopping, ignore them and SIGUSR1
  (another node's agent may signal late, and a signal during interpreter shutdown would kill the exiting rank).
* At start, resume from the newest complete `step-<N>` folder, if any.
* When training is done: a final checkpoint, then `$TRAINFLEET_RUN_DIR/DONE` holding the final step.
* (Example only) `$TRAINFLEET_RUN_DIR/step` holds the last finished step, for operators.

Every rank agrees on "checkpoint now" / "stop now" at each step boundary (one tiny all-reduce), so a signal
to one process is enough. Sample g of step s is the window the data's keyed permutation puts at position
s x global batch + g (`Batches`): a run that is interrupted and resumed ends with the same weights and loss as one
that never stopped, and a run resumed on fewer or more nodes (templates/node/trainfleet-resize.py: universal
checkpoint, the same train_batch_size through more or less accumulation) trains each step on the same samples.

Parallelism comes from the ds_config (infra/userdata.py `ds_config`, infra/parallelism.py):
* `tensor_parallel.autotp_size` > 1: DeepSpeed's AutoTP shards the Linear layers inside deepspeed.initialize.
  The ranks of one TP group must see the same batch, so data is picked by the data-parallel rank, and the
  script hands DeepSpeed its TP/DP groups (`mpu`) so that it counts the global batch over data-parallel ranks.
* `pipeline.stages` > 1: the model is a deepspeed.pipe.PipelineModule of LayerSpecs with a loss function, cut
  into that many stages, trained with engine.train_batch (which runs all micro batches of a step).
* `pipeline.tensor_parallel` > 1 with stages (3-D: tensor x pipeline x data, as Megatron-DeepSpeed runs it): the
  PipelineModule's grid is DeepSpeed's PipeModelDataParallelTopology (axes pipe, data, model; model innermost, so
  a tensor-parallel group is consecutive ranks of one node) and each decoder layer splits itself over the grid's
  tensor-parallel group (trainfleet_model.py `TensorParallel`), with `pipeline.sequence_parallel` the sequence
  between blocks too. AutoTP is not used: it cannot shard a pipeline.
Every layer is initialised from (seed + its index), as PipelineModule's `seed_layers` does, so the same model
starts from the same weights in every layout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import deepspeed
import numpy as np
import torch
import torch.distributed as dist
from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

# Beside this script on the node (and in templates/ here): the model and the token data reader.
from trainfleet_model import (
    TP_PARTITION,
    CausalLM,
    DecoderLayer,
    ModelConfig,
    TensorParallel,
    flops_per_token,
    layer_specs,
    lm_loss,
    seeded,
)
from trainfleet_tokens import SampleOrder, TokenData, batch_tokens, synthetic


def parallelism(config: dict) -> tuple[int, int]:
    """(tensor parallel, pipeline stages) the ds_config asks for; 1 each when absent. Tensor parallelism is AutoTP's
    `tensor_parallel.autotp_size` without a pipeline, the script's own `pipeline.tensor_parallel` inside one
    (DeepSpeed keeps every key of its `pipeline` section: runtime/config.py get_pipeline_config)."""
    pipeline = config.get("pipeline", {})
    stages = pipeline.get("stages", 1)
    stages = stages if isinstance(stages, int) else 1  # DeepSpeed's default is "auto"
    tp = pipeline.get("tensor_parallel") if stages > 1 else config.get("tensor_parallel", {}).get("autotp_size")
    return int(tp or 1), stages


def sequence_parallel(config: dict) -> bool:
    """Whether the pipeline's tensor-parallel layers also split the sequence between blocks
    (`pipeline.sequence_parallel`, which infra/userdata.py writes for every tensor x pipeline layout)."""
    return bool(config.get("pipeline", {}).get("sequence_parallel"))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    p.add_argument("--steps", type=int, default=200, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=1234, help="weights and the sample order")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--model-config", default=os.environ.get("TRAINFLEET_MODEL_CONFIG"),
                   help="the model's shape as JSON (rendered from the stack's job.model: /etc/trainfleet/model.json)")  # fmt: skip
    for field, what in (("vocab-size", "vocabulary"), ("hidden", "hidden size"), ("layers", "decoder layers"),
                        ("heads", "attention heads"), ("kv-heads", "key/value heads"), ("ffn", "MLP width")):  # fmt: skip
        p.add_argument(f"--{field}", type=int, default=None, help=f"override the model config's {what}")
    p.add_argument("--seq-len", type=int, default=int(os.environ.get("TRAINFLEET_SEQ_LEN", "2048")))
    p.add_argument("--data", default=os.environ.get("TRAINFLEET_DATA_DIR"),
                   help="the token data folder (trainfleet_tokens.py; the boot script copies the stack's data prefix)")  # fmt: skip
    p.add_argument("--synthetic-data", action="store_true",
                   help="train on random tokens (throughput checks): never the default, a fleet must not train on noise "
                        "because its data is missing")  # fmt: skip
    p.add_argument("--peak-tflops", type=float, default=float(os.environ.get("TRAINFLEET_PEAK_TFLOPS", "0")),
                   help="the device's dense peak at the job's precision, for MFU (0: not reported)")  # fmt: skip
    p.add_argument("--step-seconds", type=float, default=0.0, help="pause per step (demos and tests)")
    p.add_argument(
        "--checkpoint-every", type=int, default=0, help="also checkpoint every N steps; 0: on request"
    )
    p.add_argument("--ckpt-dir", default=os.environ.get("TRAINFLEET_CKPT_DIR", "checkpoints"))
    p.add_argument("--run-dir", default=os.environ.get("TRAINFLEET_RUN_DIR", "run"))
    deepspeed.add_config_arguments(p)
    return p.parse_args()


def model_config(args) -> ModelConfig:
    """The rendered model config with any --<size> overrides; one line and exit 2 when it cannot be built."""
    fields = {}
    if args.model_config:
        try:
            fields = json.loads(Path(args.model_config).read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(
                f"trainfleet-train: cannot read the model config {args.model_config}: {e}"
            ) from None
    overrides = {"vocab_size": args.vocab_size, "hidden": args.hidden, "layers": args.layers,
                 "heads": args.heads, "kv_heads": args.kv_heads, "ffn": args.ffn}  # fmt: skip
    fields.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ModelConfig(**fields)
    except (TypeError, ValueError) as e:
        raise SystemExit(
            f"trainfleet-train: {e}; give --model-config or every size (--vocab-size ... --ffn)"
        ) from None


def token_data(args, run_dir: Path, vocab_size: int, local_rank: int) -> TokenData:
    """The run's token data: the data folder, or with --synthetic-data random tokens written once per node."""
    folder = Path(args.data) if args.data else None
    if args.synthetic_data:
        folder = run_dir / "synthetic-tokens"
        if local_rank == 0 and not (folder / "index.json").exists():
            synthetic(folder, total_tokens=1 << 22, vocab_size=vocab_size, seed=args.seed)
        dist.barrier()
    if folder is None or not (folder / "index.json").exists():
        raise SystemExit(
            f"trainfleet-train: no token data at {folder or '(no --data)'}; tokenize it (`trainfleet data tokenize`) "
            "and upload it to the stack's data prefix, or pass --synthetic-data for a throughput check"
        )
    try:
        data = TokenData.open(folder)
    except ValueError as e:
        raise SystemExit(f"trainfleet-train: {e}") from None
    if data.vocab_size > vocab_size:
        raise SystemExit(f"trainfleet-train: the data's vocabulary ({data.vocab_size}) is larger than the model's "
                         f"({vocab_size}); train a model with --vocab-size {data.vocab_size} or more")  # fmt: skip
    return data


class Requests:
    """Signal and file requests, folded into flags read at step boundaries."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.checkpoint = False
        self.stop = False
        signal.signal(signal.SIGUSR1, self._on_usr1)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)

    def _on_usr1(self, signum, frame) -> None:
        self.checkpoint = True

    def _on_term(self, signum, frame) -> None:
        self.stop = True

    def stopped(self) -> None:
        """The job is stopping: another node's agent may still signal this rank (its notice came later than the
        one that stopped every rank). Ignore that: CPython puts a Python-level handler back to the default as the
        interpreter finalizes, and a SIGTERM then would kill the exiting rank (-15), a SIGUSR1 (a checkpoint
        request) too (-10), failing the launch."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_IGN)

    @property
    def request_file(self) -> Path:
        return self.run_dir / "checkpoint-requested"

    def agreed(self, device: torch.device) -> tuple[bool, bool]:
        """(checkpoint, stop) as every rank sees it: any rank's request counts for all."""
        local = [float(self.checkpoint or self.request_file.exists()), float(self.stop)]
        flags = torch.tensor(local, device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0].item()), bool(flags[1].item())


def step_dirs(ckpt_dir: Path) -> dict[int, Path]:
    """Complete checkpoints: step -> folder."""
    out = {}
    for folder in ckpt_dir.glob("step-*"):
        try:
            step = int(folder.name.removeprefix("step-"))
        except ValueError:
            continue
        if (folder / "COMPLETE").is_file():
            out[step] = folder
    return out


class Batches:
    """The tokens each rank trains on. Sample g of step s (g: its index in the global batch) is
    order.sample(s x global batch + g), a keyed permutation of the data's windows per epoch
    (trainfleet_tokens.py): a function of (seed, step, global index) only, so a run resumed on the same, fewer
    or more nodes (more or less accumulation, the same global batch) trains every step on the same tokens."""

    def __init__(
        self, data: TokenData, seed: int, seq_len: int, micro_batch: int, accumulation: int, dp: int
    ):
        if data.num_samples(seq_len) == 0:
            raise SystemExit(f"trainfleet-train: the data holds {data.total_tokens} tokens, fewer than one sequence "
                             f"of {seq_len + 1}; tokenize more text or train a shorter --seq-len")  # fmt: skip
        self.data, self.seq_len, self.micro_batch, self.dp = data, seq_len, micro_batch, dp
        self.order = SampleOrder(data.num_samples(seq_len), seed)
        self.global_batch = micro_batch * accumulation * dp

    def micro(self, step: int, micro: int, data_rank: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro batch `micro` of data-parallel rank `data_rank`: global samples
        [(micro x dp + data_rank) x micro batch, + micro batch) of the step, as (inputs, next-token labels)."""
        first = (micro * self.dp + data_rank) * self.micro_batch
        rows = batch_tokens(
            self.data, self.order, step, self.global_batch, first, self.micro_batch, self.seq_len
        )
        tokens = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(device)
        return tokens[:, :-1], tokens[:, 1:]


class Progress:
    """Rank 0's per-step figures in `$TRAINFLEET_RUN_DIR/progress.json` (replaced atomically each step): tokens/s
    and MFU over the last WINDOW steps' compute (the pause of --step-seconds and checkpoints not counted), and
    the loss. The node's agent records them as `progress` events (`trainfleet events`: plan against actual)."""

    WINDOW = 20

    def __init__(
        self, run_dir: Path, tokens_per_step: int, flops_per_token: float, devices: int, peak_tflops: float
    ):
        self.path, self.tokens_per_step = run_dir / "progress.json", tokens_per_step
        self.flops_per_token, self.devices, self.peak_tflops = flops_per_token, devices, peak_tflops
        self.seconds: list[float] = []

    def record(self, step: int, loss: float, seconds: float) -> dict:
        self.seconds = [*self.seconds[-(self.WINDOW - 1) :], seconds]
        tokens_per_s = self.tokens_per_step * len(self.seconds) / sum(self.seconds)
        figures = {"step": step, "loss": round(loss, 6), "tokens_per_s": round(tokens_per_s, 1),
                   "step_s": round(seconds, 4), "time": time.time()}  # fmt: skip
        if self.peak_tflops > 0:
            achieved = tokens_per_s * self.flops_per_token / self.devices
            figures["mfu"] = round(achieved / (self.peak_tflops * 1e12), 4)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(figures) + "\n")
        os.replace(tmp, self.path)
        return figures


def weights_digest(engine) -> str:
    h = hashlib.sha256()
    params = list(engine.module.parameters())
    stage3 = engine.zero_optimization_stage() == 3
    with deepspeed.zero.GatheredParameters(params, enabled=stage3):
        for p in params:
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def launch_id(device) -> str:
    """One id for this launch, the same on every rank (rank 0 draws it): each node's COMPLETE names the save as
    `<launch>:<step>`, so node 0's agent never commits another launch's part of the same step beside this one's
    (templates/agent/PROTOCOL.md section 1)."""
    drawn = torch.tensor([int.from_bytes(os.urandom(7), "big") if dist.get_rank() == 0 else 0], device=device)
    dist.broadcast(drawn, src=0)
    return f"{int(drawn.item()):014x}"


def save(engine, ckpt_dir: Path, run_dir: Path, step: int, loss: float, local_rank: int, launch: str) -> None:
    """Write step-<N> atomically on every node: temp folder, rename, then COMPLETE last.

    Every rank writes its own DeepSpeed files to its own node's disk (nothing is gathered anywhere: at 13B a
    checkpoint is ~180 GB). Each node's COMPLETE names its node rank and the node count, so the node's agent
    uploads exactly this node's part and node 0's agent commits the step once every part is in the bucket
    (templates/agent/PROTOCOL.md). At every (re)launch each node restores its part (trainfleet-boot.sh)."""
    tag = f"step-{step:08d}"
    final = ckpt_dir / tag
    tmp_root = ckpt_dir / ".tmp"
    local_size = int(os.environ.get("LOCAL_SIZE", dist.get_world_size()))
    nodes, node_rank = dist.get_world_size() // local_size, dist.get_rank() // local_size
    if local_rank == 0:
        shutil.rmtree(tmp_root / tag, ignore_errors=True)
        tmp_root.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    already = torch.tensor([float((final / "COMPLETE").exists())], device=engine.device)
    dist.all_reduce(already, op=dist.ReduceOp.MIN)
    if already.item():
        return  # every node already saved this step (e.g. a request landed on the final step)
    engine.save_checkpoint(str(tmp_root), tag=tag, client_state={"step": step}, save_latest=False)
    dist.barrier()
    if local_rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp_root / tag, final)
        marker = final / "COMPLETE.tmp"
        done = {"step": step, "loss": loss, "time": time.time(), "node_rank": node_rank, "nodes": nodes,
                "save": f"{launch}:{step}"}  # fmt: skip
        marker.write_text(json.dumps(done) + "\n")
        with open(marker, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(marker, final / "COMPLETE")
        (run_dir / "checkpoint-requested").unlink(missing_ok=True)
        print(f"trainfleet-train: checkpoint {tag} complete (node {node_rank} of {nodes})", flush=True)
    dist.barrier()


def resume(engine, ckpt_dir: Path, device) -> int:
    """Load the newest complete step, which every node must have (the boot script restores it); 0 if none."""
    have = step_dirs(ckpt_dir)
    newest = torch.tensor([max(have, default=0)], device=device)
    lowest = newest.clone()
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    step = int(newest.item())
    if step == 0:
        return 0
    if step != int(lowest.item()) or step not in have:
        raise SystemExit(
            f"trainfleet-train: step-{step:08d} is not on every node; restore it from the bucket first "
            "(trainfleet-boot.sh does at every launch)"
        )
    _, client = engine.load_checkpoint(str(ckpt_dir), tag=f"step-{step:08d}")
    print(f"trainfleet-train: resumed from step-{step:08d}", flush=True)
    return int(client["step"])


def main() -> int:
    args = parse_args()
    ckpt_dir, run_dir = Path(args.ckpt_dir), Path(args.run_dir)
    deepspeed.init_distributed()
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", args.local_rank))
    world = dist.get_world_size()
    requests = Requests(run_dir)
    if local_rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "DONE").unlink(missing_ok=True)
        (run_dir / "trainer.pid").write_text(f"{os.getpid()}\n")

    config = json.loads(Path(args.deepspeed_config).read_text())
    args.deepspeed_config = None  # passed as the dict below, with what this model adds
    tp, stages = parallelism(config)
    shape = model_config(args)
    recompute = (
        "activation_checkpointing" in config
    )  # the plan chose full recompute (infra/userdata.py ds_config)
    extra: dict = {}
    if stages > 1:
        # Layers are built on their own stage only, each from (seed + index): the same weights as CausalLM. The
        # decoder layers are spread evenly; the embedding joins the first stage, norm + output the last.
        if world % (stages * tp):
            raise SystemExit(f"trainfleet-train: {world} ranks do not split into {stages} pipeline stages x tensor "
                             f"parallel {tp}; launch a multiple of {stages * tp} ranks")  # fmt: skip
        topology = PipeModelDataParallelTopology(num_pp=stages, num_mp=tp, num_dp=world // (stages * tp))
        split = TensorParallel(topology.get_coord(rank).model, tp, sequence_parallel(config)) if tp > 1 else None
        if split is not None and split.sequence_parallel and args.seq_len % tp:
            raise SystemExit(f"trainfleet-train: sequence parallelism splits the {args.seq_len} positions of a "
                             f"sequence over tensor parallel {tp}; train a --seq-len divisible by {tp}")  # fmt: skip
        model = PipelineModule(
            layers=layer_specs(shape, recompute, split),
            topology=topology,
            loss_fn=lm_loss,
            seed_layers=True,
            base_seed=args.seed,
            # as its default, with the index made an int: a "type:" partition hands numpy integers to random.seed
            seed_fn=lambda layer_seed: seeded(int(layer_seed), 0),
            partition_method=f"type:{DecoderLayer.__name__}",
        )
        if split is not None:
            split.group = model.mpu().get_slice_parallel_group()
    else:
        model = CausalLM(shape, args.seed, recompute)
    if tp > 1 and stages == 1:
        from deepspeed.utils import groups

        tp_section = config["tensor_parallel"]
        if not ("partition_config" in tp_section or "preset_model" in tp_section):
            tp_section["partition_config"] = TP_PARTITION
        # DeepSpeed counts train_batch_size over the data-parallel world only when it is given the groups
        # (runtime/config.py: `mpu.get_data_parallel_world_size()`, else every rank); AutoTP would build these
        # same DP x TP groups itself (runtime/engine.py `_configure_tensor_parallel_states`).
        groups._init_tp_mesh_device(tensor_model_parallel_size=tp)
        extra["mpu"] = groups
    if "optimizer" in config:
        # The config names the optimizer (ZeRO-Offload: DeepSpeed's CPU Adam); DeepSpeed builds it, at --lr.
        engine, _, _, _ = deepspeed.initialize(
            args=args, model=model, model_parameters=model.parameters(), config=config, **extra
        )
        for group in engine.optimizer.param_groups:
            group["lr"] = args.lr
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        engine, _, _, _ = deepspeed.initialize(
            args=args, model=model, optimizer=optimizer, config=config, **extra
        )
    if rank == 0:
        inner = getattr(engine.optimizer, "optimizer", engine.optimizer)  # ZeRO wraps the real optimizer
        print(f"trainfleet-train: optimizer {type(inner).__name__}", flush=True)
        print(f"trainfleet-train: model {shape.to_json()} ({shape.params:,} parameters), sequence {args.seq_len}"
              f"{', full recompute' if recompute else ''}", flush=True)  # fmt: skip
    device = engine.device
    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    # The data a rank trains on is its data-parallel replica's: TP ranks and pipeline stages of one replica
    # share it (DeepSpeed checks a TP group's inputs agree: "Data inconsistency within the TP group").
    if stages > 1:
        data_rank = engine.grid.get_data_parallel_id()
    elif tp > 1:
        data_rank = groups.get_data_parallel_rank()
    else:
        data_rank = rank
    dp = engine.dp_world_size
    if rank == 0:
        print(f"trainfleet-train: tp {tp} pp {stages} dp {dp} accumulation {accum}", flush=True)
    batches = Batches(token_data(args, run_dir, shape.vocab_size, local_rank), args.seed, args.seq_len, micro,
                      accum, dp)  # fmt: skip
    progress = Progress(run_dir, batches.global_batch * args.seq_len, flops_per_token(shape, args.seq_len),
                        world, args.peak_tflops) if rank == 0 else None  # fmt: skip

    def step_batches(step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [batches.micro(step, m, data_rank, device) for m in range(accum)]

    step = resume(engine, ckpt_dir, device)
    launch = launch_id(device)
    loss_value = float("nan")
    started = time.time()
    while step < args.steps:
        began = time.perf_counter()
        if stages > 1:
            # All micro batches of the step; every stage gets the mean loss over them and over replicas.
            loss_value = float(engine.train_batch(data_iter=iter(step_batches(step))))
        else:
            total = torch.zeros(1, device=device)
            for x, y in step_batches(step):
                loss = engine(x, y)
                engine.backward(loss)
                engine.step()
                total += loss.detach().float()
            dist.all_reduce(total)
            loss_value = total.item() / (
                accum * world
            )  # TP ranks of a replica hold the same loss: still a mean
        step += 1
        if progress is not None:
            progress.record(step, loss_value, time.perf_counter() - began)
        if local_rank == 0:  # progress for operators (and tests): the last finished step
            (run_dir / "step.tmp").write_text(f"{step}\n")
            os.replace(run_dir / "step.tmp", run_dir / "step")
        if rank == 0 and (step % 10 == 0 or step == args.steps):
            print(f"trainfleet-train: step {step}/{args.steps} loss {loss_value:.6f}", flush=True)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        want_checkpoint, want_stop = requests.agreed(device)
        periodic = args.checkpoint_every and step % args.checkpoint_every == 0
        if want_checkpoint or want_stop or periodic:
            save(engine, ckpt_dir, run_dir, step, loss_value, local_rank, launch)
            requests.checkpoint = False
        if want_stop and step < args.steps:
            print(f"trainfleet-train: stopping at step {step} after its checkpoint", flush=True)
            requests.stopped()
            dist.barrier()
            return 0

    save(engine, ckpt_dir, run_dir, step, loss_value, local_rank, launch)
    digest = weights_digest(engine)
    if local_rank == 0:
        result = {
            "step": step,
            "loss": loss_value,
            "weights_sha256": digest,
            "seconds": time.time() - started,
        }
        (run_dir / "final.json").write_text(json.dumps(result) + "\n")
        done = run_dir / "DONE.tmp"
        done.write_text(f"{step}\n")
        os.replace(done, run_dir / "DONE")
        print(f"trainfleet-train: done at step {step}, loss {loss_value:.6f}", flush=True)
    requests.stopped()
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
