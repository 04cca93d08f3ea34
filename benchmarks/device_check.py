"""The planner against the node's real trainer on one accelerator: peak memory and tokens/s of DeepSpeed ZeRO-1/2/3
training templates/trainfleet_model.py, beside what cli/planner predicts for the very same setup.

Why: the planner picks ZeRO stage, micro batch and recompute from its memory model (cli/planner/memory.py: model
states, activations, communication buffers) and its speed model (cli/planner/throughput.py). Both are formulas;
this check trains the model the node trains, with the ds_config the node launches with (infra/userdata.py
`ds_config`, rendered here from a one-device stack), and prints how far each formula is from what the GPU did. A
setup the planner says fits that runs out of memory ("OOM" in the CSV) is itself a measurement.

What runs (defaults; one GPU, so world size 1: rank 0's launch environment set in the setup's own process, then
deepspeed.init_distributed()):
  models     "1.3B": `trainfleet plan --params 1.3B`'s shape (infra/model_shapes.py shape_for_params), all of its
             layers, as trainer_model_config renders it for the node; "llama-7b": the llama-7b preset's shape
             (hidden 4096, 32 heads, MLP 11008, vocabulary 32000) with 4 of its 32 decoder layers (--layers-7b).
             Why truncated: 7B full training states are 16 bytes a parameter, 108 GB before activations, more than
             an 80 GB H100 holds; ZeRO-Offload of the optimizer would fit but needs DeepSpeed's cpu_adam op
             compiled on the device machine (minutes of its time), and a CPU optimizer's speed is not the GPU's.
             The truncated model keeps the 7B's layer shapes, so activations per layer, the embedding and output
             layer and the kernels are the 7B's; the planner is given the same truncated shape (its parameters
             the trained ones: for llama-7b the preset's count is exactly the trainer's), so both sides describe
             the same model. `layers_run` in the CSV says how many layers ran.
  ZeRO       stages 1, 2, 3 (--zero-stages), no offload; bf16; gradient accumulation 1; gradient clipping 1.0,
             overlap_comm and the bucket sizes of infra/deepspeed_settings.py, all from the rendered ds_config.
  batches    micro batches 2 and 8 (--micro-batches) of --seq-len 2048 random tokens, the same batch every step.
  recompute  off and on: the model's own `recompute` flag (torch.utils.checkpoint around each decoder layer), which
             train.py turns on when the ds_config has `activation_checkpointing`.
Per setup: deepspeed.initialize with torch AdamW (as train.py), then reset_peak_memory_stats(), --warm-steps steps,
then --timed-steps steps between two cuda synchronizations (each step ends with loss.item(), as train.py's loss
all-reduce does). Peak memory is torch.cuda.max_memory_allocated() / max_memory_reserved() over all those steps;
`after_init_gib` is what was allocated once DeepSpeed had built its states; `device_used_gib` is the device's
used memory after the steps (the CUDA context included). tokens/s = micro batch x seq len x timed steps / seconds.
On a GPU every setup runs in a process of its own (--isolate, the default there): DeepSpeed 0.19.8's ZeRO-3 keeps
its engines alive through module-level state (runtime/zero/parameter_offload.py FWD_MODULE_STACK, a class-level
lru_cache in PartitionedParameterCoordinator, and more with recompute), so in one process a setup's states would
stay allocated under the next one's peak; a fresh process also gives each setup a fresh allocator and context.

Planner columns (library calls, no CLI parsing): memory.estimate(...) for a Workload of that shape, sequence length
and a global batch of one micro batch (grad accumulation 1), Sharding(stage), one device: its states, activations
and buffers (`planned_used_gib`, compared with peak allocated), and used + reserved (`planned_device_gib`: + CUDA
context and NCCL + fragmentation, compared with device_used_gib); `planned_fits` with the default 10% headroom on
this device's memory. `planned_states_trained_gib`: the same states formula on the parameter count the trainer
really trains (the planner sizes the count it is given; the node builds trainer_model_config's shape for it, and
the two can differ), separating a wrong count from a wrong formula. throughput.step(...) on one device of the
accelerator (catalog peak, calibrated MFU; --accelerator overrides the name read from the GPU) gives planned
tokens/s and MFU; `measured_mfu` counts the trainer's FLOPs (templates/trainfleet_model.py flops_per_token).
`estimate_command` is the nearest `trainfleet estimate` command where the catalog has a one-device offer of the
accelerator and the model is whole: it pins the model, sequence, micro batch, ZeRO stage and no offload, but not
recompute, which it chooses itself, so its figures equal these columns when its --json `activation_checkpointing`
matches the row's `recompute` (tests/test_device_check.py holds them equal).

Time: setups run breadth first (every model and stage at the first micro batch before the next) and none starts
after --budget-s (420 s: "skipped: time budget"); a setup's process still running 60 s past it is killed, so the
run ends within 8 minutes on an H100 or H200 (sized from FLOP counts and process start-up: not yet run on one).
After 3 setups' processes die in a row (a broken install) the rest are skipped. The CSV is rewritten after every
setup, so a run cut short keeps what it measured.

    benchmarks/device_wheels.sh            # here, once: DeepSpeed 0.19.8 + what the device image lacks
    # on the device machine (the `run` tool, carry ["build/device-wheels"], timeout_s 600), from the repo root:
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site build/device-wheels/*.whl && PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 benchmarks/device_check.py --results "$OUT" 2>&1 | tee "$OUT/device_check.log"
    # then copy the returned device-<UTC date>.csv into benchmarks/results/ (the log: each failed setup's output)

    .venv/bin/python benchmarks/device_check.py --device cpu --tiny --results /tmp/x   # the same path, tiny, on CPU

--device cpu --tiny runs the same code on DeepSpeed's CPU accelerator with two tiny Llama models (hidden 64,
sequence 32; one whole, one truncated to 2 of its 4 layers), in this process unless --isolate: memory columns stay
blank there, and the planner's GPU figures beside CPU speed mean nothing; tests/test_device_check.py runs it.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import gc
import importlib.metadata
import json
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.planner import memory, throughput  # noqa: E402
from cli.planner.calibration import default_fit  # noqa: E402
from cli.planner.workload import Workload  # noqa: E402
from infra.catalog import default_catalog  # noqa: E402
from infra.model_shapes import PRESETS, ModelShape, llama, shape_for_params, trainer_model_config  # noqa: E402

GIB = 2**30
MIB = 2**20
BUDGET_S = 420.0  # no setup starts after 7 minutes
CHILD_GRACE_S = 60.0  # a setup's process may run this long past the budget before it is killed
ONE_GPU_INSTANCE = "p5.4xlarge"  # aws us-east-1, one H100: the one-device stack the ds_config is rendered for
TOKENS = 1_000_000_000  # the workload's total: nothing here depends on it
CPU_PLANNER_ACCELERATOR = "H100-80GB"  # the planner needs a GPU; on CPU its figures are only filled in
SKIPPED = "skipped: time budget"
CRASHES_IN_A_ROW = 3  # setups whose processes died in a row before the rest are skipped (a broken install)
RESULT = "device-check-result: "  # a setup's process prints its measured columns after this, as JSON

CSV_FIELDS = [
    "gpu", "driver", "torch", "cuda", "deepspeed", "planner_accelerator", "model", "params_planned",
    "params_trained", "layers_run", "layers_model", "zero", "micro_batch", "recompute", "seq_len", "status",
    "steps_timed", "allocated_before_gib", "after_init_gib", "peak_allocated_gib", "peak_reserved_gib",
    "device_used_gib", "planned_states_gib", "planned_states_trained_gib", "planned_activations_gib",
    "planned_buffers_gib", "planned_used_gib", "planned_device_gib", "planned_fits", "peak_over_planned",
    "device_over_planned", "tokens_per_s", "planned_tokens_per_s", "tokens_over_planned", "measured_mfu",
    "planned_mfu", "step_s", "estimate_command", "note",
]  # fmt: skip


@dataclass(frozen=True)
class ModelRun:
    """A model to train: the planner's shape for it (whole depth), how many decoder layers run, and the
    `trainfleet estimate` flag that names it (None: the CLI cannot)."""

    label: str
    shape: ModelShape
    layers_run: int
    cli_model: str | None = None

    @property
    def truncated(self) -> bool:
        return self.layers_run < self.shape.layers


@dataclass(frozen=True)
class Setup:
    model: ModelRun
    zero: int
    micro_batch: int
    recompute: bool
    seq_len: int


def gpu_models(layers_7b: int) -> list[ModelRun]:
    shape = shape_for_params(1_300_000_000)
    return [
        ModelRun("1.3B", shape, shape.layers, "--params 1.3B"),
        ModelRun("llama-7b", PRESETS["llama-7b"], layers_7b, "--model llama-7b"),
    ]


def tiny_shape(name: str, layers: int) -> ModelShape:
    """A Llama shape of hidden 64, 4 heads, vocabulary 256, MLP 128; its parameters the trainer's count."""
    shape = llama(name, 1, layers, 64, 4, 256, 128)
    return dataclasses.replace(shape, params=trainer_config(shape, layers).params)


def tiny_models() -> list[ModelRun]:
    return [ModelRun("tiny", tiny_shape("tiny", 2), 2), ModelRun("tiny-deep", tiny_shape("tiny-deep", 4), 2)]


def trainer_config(shape: ModelShape, layers: int):
    """The node trainer's ModelConfig for `shape` (infra/model_shapes.py trainer_model_config), `layers` deep."""
    from templates.trainfleet_model import ModelConfig

    return ModelConfig(**{**trainer_model_config(shape), "layers": layers})


def setups(models: list[ModelRun], stages: list[int], micro_batches: list[int], seq_len: int) -> list[Setup]:
    """Breadth first: every model and stage, recompute off then on, at one micro batch before the next."""
    return [
        Setup(model, zero, mb, recompute, seq_len)
        for mb in micro_batches
        for recompute in (False, True)
        for model in models
        for zero in stages
    ]


def all_setups(args: argparse.Namespace) -> list[Setup]:
    models = tiny_models() if args.tiny else gpu_models(args.layers_7b)
    return setups(models, args.zero_stages, args.micro_batches, args.seq_len)


# --- the planner's side ---------------------------------------------------------------------------------------


def planner_shape(run: ModelRun) -> ModelShape:
    """The shape the planner is asked about: the request's own when whole; when truncated, the same shape that
    deep, its parameters the trained ones."""
    if not run.truncated:
        return run.shape
    trained = trainer_config(run.shape, run.layers_run).params
    name = f"{run.shape.name} ({run.layers_run} of {run.shape.layers} layers)"
    return dataclasses.replace(run.shape, name=name, params=trained, layers=run.layers_run)


def workload(setup: Setup, shape: ModelShape) -> Workload:
    """bf16 full training, one micro batch per optimizer step (grad accumulation 1 on one device)."""
    batch_tokens = setup.micro_batch * setup.seq_len
    return Workload(shape, TOKENS, setup.seq_len, "bf16", "full", global_batch_tokens=batch_tokens)


def hardware(accelerator: str, device_memory_gib: float | None) -> throughput.Hardware:
    """One device of `accelerator` with this machine's device memory (None: the catalog's). Offload is not used:
    host memory and vCPUs only fill the fields."""
    accel = default_catalog().accelerator(accelerator)
    if accel is None or not accel.peak("bf16"):
        raise SystemExit(f"--accelerator {accelerator}: the catalog has no bf16 peak for it; name one it has")
    host_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return throughput.Hardware(accelerator, accel.peak("bf16"), 1, device_memory_gib or accel.memory_gib, host_gib,
                               os.cpu_count() or 1, None)  # fmt: skip


def planned(setup: Setup, hw: throughput.Hardware, fit) -> dict:
    """The planner's figures for `setup` on one device of `hw`."""
    shape = planner_shape(setup.model)
    w = workload(setup, shape)
    sharding = memory.Sharding(setup.zero)
    est = memory.estimate(w, sharding, setup.micro_batch, setup.recompute, hw.device_memory_gib, 1, 1,
                          hw.host_memory_gib)  # fmt: skip
    trained = trainer_config(setup.model.shape, setup.model.layers_run).params
    trained_w = workload(setup, dataclasses.replace(shape, params=trained))
    step = throughput.step(w, hw, 1, sharding, setup.micro_batch, setup.recompute, fit, grad_accum=1)
    return {
        "params_planned": shape.params,
        "params_trained": trained,
        "planned_states_gib": est.model_states_bytes / GIB,
        "planned_states_trained_gib": memory.model_states(trained_w, sharding, 1, 1)[0] / GIB,
        "planned_activations_gib": est.activation_bytes / GIB,
        "planned_buffers_gib": est.comm_buffer_bytes / GIB,
        "planned_used_gib": est.used_bytes / GIB,
        "planned_device_gib": est.device_bytes / GIB,
        "planned_fits": "yes" if est.fits else "no",
        "planned_tokens_per_s": step.tokens_per_second,
        "planned_mfu": step.effective_mfu,
    }


def one_device_instance(accelerator: str) -> str | None:
    """A catalog node type carrying one `accelerator` (what `trainfleet estimate --devices 1` needs), if any."""
    types = {o.instance_type for o in default_catalog().all_offers
             if o.accelerator == accelerator and o.accelerators_per_node == 1}  # fmt: skip
    return min(types) if types else None


def estimate_command(setup: Setup, accelerator: str) -> str:
    """The nearest `trainfleet estimate` command (module docstring); "" where the CLI cannot say it."""
    instance = one_device_instance(accelerator)
    if setup.model.cli_model is None or setup.model.truncated or instance is None:
        return ""
    s, mb = setup.seq_len, setup.micro_batch
    return (f"trainfleet estimate {setup.model.cli_model} --tokens 1B --seq-len {s} --global-batch {mb * s} "
            f"--accelerator {accelerator} --devices 1 --instance-type {instance} --zero-stage {setup.zero} "
            f"--offload none --micro-batch {mb} --json")  # fmt: skip


def note(setup: Setup, accelerator: str, command: str) -> str:
    run, parts = setup.model, []
    if run.truncated:
        parts.append(f"{run.layers_run} of {run.shape.layers} decoder layers of {run.shape.name} "
                     f"({run.shape.params:,} parameters whole); planner given the same truncated shape")  # fmt: skip
    if command:
        parts.append(f"estimate_command cannot pin recompute: equal when its activation_checkpointing is "
                     f"{str(setup.recompute).lower()}")  # fmt: skip
    elif not run.truncated and run.cli_model:
        parts.append(f"no one-device {accelerator} offer in the catalog for trainfleet estimate")
    return "; ".join(parts)


# --- the measured side ----------------------------------------------------------------------------------------


def ds_config(setup: Setup) -> dict:
    """The ds_config a one-device node launches with for this setup: infra/userdata.py renders it."""
    from infra.config import StackConfig
    from infra.userdata import ds_config as render

    config = StackConfig.from_sections({
        "job": {"name": "device-check", "params": "1B", "tokens": "1B", "precision": "bf16"},
        "fleets": [{"name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_type": ONE_GPU_INSTANCE,
                    "nodes": 1}],
        "deepspeed": {"zero_stage": setup.zero, "micro_batch": setup.micro_batch, "grad_accum": 1,
                      "activation_checkpointing": setup.recompute},
    })  # fmt: skip
    return render(config, config.fleets[0])


def start_rank(device: str) -> None:
    """World size 1 in this process: the launcher's environment for rank 0, then DeepSpeed's process group."""
    os.environ.setdefault("DS_ACCELERATOR", device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    import deepspeed
    from deepspeed.utils import logger

    logger.setLevel("WARNING")
    deepspeed.init_distributed()


def stop_rank() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_oom(error: BaseException) -> bool:
    import torch

    text = str(error)
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in text or "ALLOC_FAILED" in text


def release() -> None:
    """Free what a setup left in this process (all of it only where DeepSpeed keeps nothing: module docstring)."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def allocated_gib(device: str) -> float | str:
    import torch

    return torch.cuda.memory_allocated() / GIB if device == "cuda" else ""


def build_engine(setup: Setup, device: str):
    """train.py's single-pipeline path: CausalLM built on the device, torch AdamW, deepspeed.initialize."""
    import deepspeed
    import torch

    from templates.trainfleet_model import CausalLM

    config = trainer_config(setup.model.shape, setup.model.layers_run)
    with torch.device(device):
        model = CausalLM(config, seed=0, recompute=setup.recompute)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(setup))
    return engine, config


def batch(setup: Setup, vocab: int, device: str):
    import torch

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (setup.micro_batch, setup.seq_len + 1), generator=g).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def train_step(engine, tokens, labels) -> float:
    loss = engine(tokens, labels)
    engine.backward(loss)
    engine.step()
    return loss.item()


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed_steps(engine, data, device: str, steps: int, deadline: float) -> tuple[int, float]:
    """(steps run, seconds): at least one, fewer than `steps` only once the deadline has passed."""
    sync(device)
    began, done = time.perf_counter(), 0
    while done < steps and (done == 0 or time.monotonic() < deadline):
        train_step(engine, *data)
        done += 1
    sync(device)
    return done, time.perf_counter() - began


def peaks(device: str) -> dict:
    if device != "cuda":
        return {"peak_allocated_gib": "", "peak_reserved_gib": "", "device_used_gib": ""}
    import torch

    free, total = torch.cuda.mem_get_info()
    return {
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
        "device_used_gib": (total - free) / GIB,
    }


def train_and_time(setup: Setup, args: argparse.Namespace, deadline: float) -> dict:
    import torch

    from templates.trainfleet_model import flops_per_token

    engine, config = build_engine(setup, args.device)
    try:
        data = batch(setup, config.vocab_size, args.device)
        after_init = allocated_gib(args.device)
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for _ in range(args.warm_steps):
            train_step(engine, *data)
        steps, seconds = timed_steps(engine, data, args.device, args.timed_steps, deadline)
        tokens_per_s = steps * setup.micro_batch * setup.seq_len / seconds
        mfu = tokens_per_s * flops_per_token(config, setup.seq_len) / (args.peak_tflops * 1e12)
        return {"status": "ok", "steps_timed": steps, "after_init_gib": after_init, **peaks(args.device),
                "tokens_per_s": tokens_per_s, "measured_mfu": mfu, "step_s": seconds / steps}  # fmt: skip
    finally:
        engine.destroy()


def measure(setup: Setup, args: argparse.Namespace, deadline: float) -> dict:
    """One setup's measured columns, in this process; "OOM" (or the error) instead of numbers when it fails."""
    before = {"allocated_before_gib": allocated_gib(args.device)}
    try:
        return {**before, **train_and_time(setup, args, deadline)}
    except Exception as error:  # one failing setup must not lose the others' measurements
        status = "OOM" if is_oom(error) else f"error: {type(error).__name__}: {str(error)[:160]}"
        return {**before, "status": status}
    finally:
        release()


def measure_in_child(index: int, args: argparse.Namespace, deadline: float) -> dict:
    """Setup `index` measured by a process of its own (this script with --child), its columns read back."""
    left = deadline - time.monotonic()
    argv = [sys.executable, str(Path(__file__).resolve()), *args.argv, "--child", str(index),
            "--child-deadline-s", f"{max(left, 0.0):.1f}"]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=max(left, 0.0) + CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        return {"status": f"error: still running {CHILD_GRACE_S:.0f} s past the budget, killed"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return {"status": f"error: exit {proc.returncode}: {last[:160]}"}


def child_main(args: argparse.Namespace) -> int:
    """A setup's own process: start the rank, measure, print the columns for the parent."""
    deadline = time.monotonic() + args.child_deadline_s
    start_rank(args.device)
    measured = measure(all_setups(args)[args.child], args, deadline)
    print(RESULT + json.dumps(measured), flush=True)
    stop_rank()
    return 0


# --- the run --------------------------------------------------------------------------------------------------


def gpu_facts() -> tuple[str, str, float | None]:
    """(name, driver version, memory GiB) of GPU 0 from nvidia-smi, without starting CUDA in this process."""
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
        name, driver, mib = (x.strip() for x in out.stdout.splitlines()[0].split(","))
        return name, driver, float(mib) * MIB / GIB
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        import torch  # no nvidia-smi: ask CUDA itself (this process then holds a context)

        props = torch.cuda.get_device_properties(0)
        return props.name, "", props.total_memory / GIB


def environment(device: str) -> tuple[dict, float | None]:
    """The CSV's version columns and the device's memory in GiB (None on CPU)."""
    import torch

    gpu, driver, memory_gib = gpu_facts() if device == "cuda" else ("cpu", "", None)
    env = {"gpu": gpu, "driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda or "",
           "deepspeed": importlib.metadata.version("deepspeed")}  # fmt: skip
    return env, memory_gib


def accelerator_name(gpu: str) -> str | None:
    """The catalog's name for a GPU as the driver names it ("NVIDIA H100 80GB HBM3" -> H100-80GB)."""
    g = gpu.upper()
    for marker, name in (("H200", "H200"), ("H100 NVL", "H100-NVL"), ("H100", "H100-80GB"), ("B200", "B200"),
                         ("A100-SXM4-40GB", "A100-40GB"), ("A100-PCIE-40GB", "A100-40GB"), ("A100", "A100-80GB"),
                         ("L40S", "L40S"), ("L4", "L4"), ("A10G", "A10G")):  # fmt: skip
        if marker in g:
            return name
    return None


def ratio(a, b) -> float | str:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else ""


def row(setup: Setup, env: dict, accelerator: str, plan: dict, measured: dict) -> dict:
    command = estimate_command(setup, accelerator)
    out = {
        **env, "planner_accelerator": accelerator, "model": setup.model.label, "layers_run": setup.model.layers_run,
        "layers_model": setup.model.shape.layers, "zero": setup.zero, "micro_batch": setup.micro_batch,
        "recompute": "on" if setup.recompute else "off", "seq_len": setup.seq_len, **plan, **measured,
        "estimate_command": command, "note": note(setup, accelerator, command),
    }  # fmt: skip
    out["peak_over_planned"] = ratio(out.get("peak_allocated_gib"), out["planned_used_gib"])
    out["device_over_planned"] = ratio(out.get("device_used_gib"), out["planned_device_gib"])
    out["tokens_over_planned"] = ratio(out.get("tokens_per_s"), out["planned_tokens_per_s"])
    return out


def cell(value, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return str(value)


def ordered(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["model"], r["zero"], r["recompute"], r["micro_batch"]))


def write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows({k: cell(r.get(k, ""), 6) for k in CSV_FIELDS} for r in ordered(rows))
    tmp.replace(path)


def results_path(folder: Path, tiny: bool) -> Path:
    """device-<UTC date>.csv (device-cpu-tiny-... for the CPU path), never over an earlier run's file."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"device-{'cpu-tiny-' if tiny else ''}{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"
    path, n = folder / f"{stem}.csv", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.csv"
    return path


TABLE = [("model", "model", 9), ("layers", "layers_run", 6), ("zero", "zero", 4), ("mb", "micro_batch", 3),
         ("recomp", "recompute", 6), ("status", "status", 9), ("peak GiB", "peak_allocated_gib", 9),
         ("plan GiB", "planned_used_gib", 9), ("ratio", "peak_over_planned", 6), ("fits", "planned_fits", 4),
         ("tokens/s", "tokens_per_s", 9), ("plan tok/s", "planned_tokens_per_s", 10),
         ("ratio", "tokens_over_planned", 6), ("MFU", "measured_mfu", 6), ("plan MFU", "planned_mfu", 8)]  # fmt: skip


def print_table(rows: list[dict]) -> None:
    print("  ".join(f"{title:>{width}}" for title, _, width in TABLE))
    for r in ordered(rows):
        cells = [cell(r.get(key, ""))[: width if key == "status" else None] for _, key, width in TABLE]
        print("  ".join(f"{c:>{width}}" for c, (_, _, width) in zip(cells, TABLE, strict=True)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny models, sequence 32 (the CPU test)")
    p.add_argument("--zero-stages", default="1,2,3")
    p.add_argument("--micro-batches", default=None, help="default 2,8 (tiny: 1,2)")
    p.add_argument("--seq-len", type=int, default=None, help="default 2048 (tiny: 32)")
    p.add_argument("--layers-7b", type=int, default=4, help="decoder layers of llama-7b's 32 to train")
    p.add_argument("--warm-steps", type=int, default=None, help="default 2 (tiny: 1)")
    p.add_argument("--timed-steps", type=int, default=None, help="default 5 (tiny: 2)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="no setup starts after this many seconds")
    p.add_argument("--accelerator", help="the planner's name for the GPU (default: read from its name)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="each setup in a process of its own (default: on cuda, not on cpu)")  # fmt: skip
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-deadline-s", type=float, default=BUDGET_S, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    tiny = args.tiny
    args.argv = list(argv)
    args.micro_batches = [int(x) for x in (args.micro_batches or ("1,2" if tiny else "2,8")).split(",")]
    args.zero_stages = [int(x) for x in args.zero_stages.split(",")]
    args.seq_len = args.seq_len or (32 if tiny else 2048)
    args.warm_steps = args.warm_steps if args.warm_steps is not None else (1 if tiny else 2)
    args.timed_steps = args.timed_steps or (2 if tiny else 5)
    args.isolate = args.device == "cuda" if args.isolate is None else args.isolate
    return args


def planner_accelerator(args: argparse.Namespace, gpu: str) -> str:
    if args.accelerator:
        return args.accelerator
    found = accelerator_name(gpu) if args.device == "cuda" else CPU_PLANNER_ACCELERATOR
    if found is None:
        raise SystemExit(f"no catalog name known for {gpu!r}: give --accelerator (e.g. H100-80GB)")
    return found


def run_setup(index: int, setup: Setup, args: argparse.Namespace, deadline: float, crashes: int) -> dict:
    """Measure `setup` unless the budget is spent or the last setups' processes all died."""
    if time.monotonic() > deadline:
        return {"status": SKIPPED}
    if crashes >= CRASHES_IN_A_ROW:
        return {"status": f"skipped: the {crashes} setups before died (see their output above)"}
    return measure_in_child(index, args, deadline) if args.isolate else measure(setup, args, deadline)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    env, device_gib = environment(args.device)
    accelerator = planner_accelerator(args, env["gpu"])
    hw = hardware(accelerator, device_gib)
    args.peak_tflops = hw.peak_tflops
    if args.child is not None:
        return child_main(args)
    deadline = started + args.budget_s
    if not args.isolate:
        start_rank(args.device)
    fit = default_fit()
    path = results_path(args.results, args.tiny)
    rows: list[dict] = []
    crashes = 0
    for index, setup in enumerate(all_setups(args)):
        measured = run_setup(index, setup, args, deadline, crashes)
        crashes = crashes + 1 if measured["status"].startswith("error: exit") else 0
        rows.append(row(setup, env, accelerator, planned(setup, hw, fit), measured))
        write_csv(path, rows)
        print(f"device-check: {setup.model.label} ZeRO-{setup.zero} mb {setup.micro_batch} recompute "
              f"{'on' if setup.recompute else 'off'}: {measured['status']} "
              f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    stop_rank()
    print(f"\n{env['gpu']} (driver {env['driver'] or '-'}), torch {env['torch']}, CUDA {env['cuda'] or '-'}, "
          f"DeepSpeed {env['deepspeed']}; planner: one {accelerator}, {hw.device_memory_gib:.1f} GiB; "
          f"{'one process per setup' if args.isolate else 'one process'}")  # fmt: skip
    print_table(rows)
    print(f"wrote {path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
