"""What tensor (TP) x pipeline (PP) x data (DP) parallel layouts DeepSpeed 0.19.8 can train.

One source of truth for the schema (infra/config.py `DeepSpeed`), the ds_config renderer (infra/userdata.py)
and the planner. Every constraint below cites the DeepSpeed 0.19.8 source line it follows (paths relative to
site-packages/deepspeed); tests/test_deepspeed_parallelism.py runs DeepSpeed itself against them.

- Pipeline parallelism (a `deepspeed.pipe.PipelineModule`, run by `PipelineEngine`):
  runtime/pipe/engine.py:76-77 `assert self.zero_optimization_stage() < ZeroStageEnum.gradients,
  "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"` -> PP needs ZeRO stage 0 or 1. Its grid is
  PipeDataParallelTopology, axes ['pipe', 'data'] (runtime/pipe/topology.py:240-241): consecutive ranks share
  a stage, so stages of whole nodes when pp divides the node count.
- AutoTP training (`tensor_parallel.autotp_size` > 1, runtime/engine.py:595 `_configure_tensor_parallel`)
  builds a 2-D mesh over the whole world, `data_parallel_size = dist.get_world_size() //
  tensor_model_parallel_size` (utils/groups.py:212-213; "They are always equal only in 2D (DP + TP)
  parallelism", :232), TP innermost: consecutive ranks form a TP group, inside a node when tp divides it.
  It trains under every ZeRO stage ("AutoTP + ZeRO stage 3 is supported for both inference and training",
  runtime/engine.py:952) and nothing in runtime/zero/ refuses it with offload (tests run ZeRO 0-3).
  Any module works: a model without an HF config or tp_plan names its layers in
  `tensor_parallel.partition_config` (runtime/tensor_parallel/config.py `partition_config`, templates/train.py).
- AutoTP with a PipelineModule: no. deepspeed.initialize refuses the TP groups as `mpu` for a pipeline
  (__init__.py:582 `assert mpu is None, "mpu must be None with pipeline parallelism"`), and without them
  AutoTP's mesh ignores the pipeline grid: the engine broadcasts the sharded weights over the grid's
  data-parallel group (runtime/engine.py:2059 `_broadcast_model`) and gloo aborts on the size mismatch
  (tests/test_deepspeed_parallelism.py runs both).
- Tensor x pipeline x data (3-D, as Megatron-DeepSpeed runs it): yes, with the model's own tensor-parallel
  layers instead of AutoTP. A PipelineModule takes a `topology` (runtime/pipe/module.py:169-171);
  PipeModelDataParallelTopology has axes ['pipe', 'data', 'model'] (runtime/pipe/topology.py:244-248), model
  innermost, so a TP group is tp consecutive ranks (one node's when tp divides it) and a stage nodes/pp whole
  nodes. The grid gives the TP group (`get_slice_parallel_group`, topology.py:471) and counts the batch over its
  data axis. The layers also split the sequence between blocks (`sequence_parallel`), so each TP rank's stage
  hand-off is its own: the engine must send it whole, not split it over the TP ranks as it does by default
  (runtime/pipe/engine.py:137 `is_pipe_partitioned`; the ds_config sets `pipe_partitioned` false). ZeRO stages
  0-1 only, as for any pipeline (templates/train.py runs it).
- Batch: runtime/config.py:602 `_batch_assertion`: train_batch_size == micro * accum * world_size, where
  world_size is `mpu.get_data_parallel_world_size()` when DeepSpeed is given the groups (:463; a
  PipelineModule always gives its grid, __init__.py:583 `mpu = model.mpu()`; ZeRO-3 rebuilds the config with
  the engine's TP groups, zero/partition_parameters.py:1077), else every rank (:471). trainfleet writes
  micro * accum * dp, dp = world / (tp * pp), and its training script hands DeepSpeed the TP groups.
"""

from __future__ import annotations

TP_SIZES = (1, 2, 4, 8)  # TP stays within one node; nodes carry 1, 2, 4 or 8 accelerators
PP_MAX = 64  # stages; a bound on nonsense, not a DeepSpeed limit

# ZeRO stages PipelineEngine accepts (runtime/pipe/engine.py:76-77, `< ZeroStageEnum.gradients`).
PIPELINE_ZERO_STAGES = (0, 1)


def unsupported(zero_stage: int, offload_optimizer: bool, offload_param: bool, tp: int, pp: int) -> str | None:
    """None when DeepSpeed 0.19.8 can train this combination, else one line naming its constraint and the fix."""
    if tp not in TP_SIZES:
        return f"tensor_parallel must be one of {', '.join(map(str, TP_SIZES))}, not {tp}"
    if pp < 1 or pp > PP_MAX:
        return f"pipeline_parallel must be 1 to {PP_MAX}, not {pp}"
    if pp > 1 and zero_stage not in PIPELINE_ZERO_STAGES:
        return (
            f"pipeline_parallel {pp} needs zero_stage 0 or 1, not {zero_stage}: DeepSpeed asserts \"ZeRO-2 and "
            "ZeRO-3 are incompatible with pipeline parallelism\" (deepspeed/runtime/pipe/engine.py)"
        )
    return None


def sequence_parallel(tp: int, pp: int) -> bool:
    """Whether the launch runs sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2): inside
    a pipeline its own tensor-parallel layers always do, since it moves the same bytes as tensor parallelism alone
    and keeps less; AutoTP (tensor parallelism without a pipeline) cannot."""
    return tp > 1 and pp > 1


def sequence_split_error(tp: int, pp: int, seq_len: int) -> str | None:
    """None when sequence parallelism (if this layout runs it) gives every tensor-parallel rank whole positions;
    else one line saying what to change."""
    if sequence_parallel(tp, pp) and seq_len % tp:
        return (f"tensor_parallel {tp} inside a pipeline splits each sequence's positions over {tp} ranks (sequence "
                f"parallelism), and job.seq_len {seq_len} does not divide by {tp}; use a seq_len divisible by {tp}, "
                "or tensor_parallel 1")  # fmt: skip
    return None


def layout_error(tp: int, pp: int, devices_per_node: int, nodes: int) -> str | None:
    """None when tp x pp fits the fleet: TP inside a node (its all-reduces need the node's fast links), whole
    nodes per pipeline stage; else one line saying what to change."""
    if devices_per_node < 1 or nodes < 1:
        return f"the fleet has {nodes} nodes of {devices_per_node} accelerators; it needs at least one of each"
    if devices_per_node % tp:
        return (
            f"tensor_parallel {tp} must divide the {devices_per_node} accelerators per node "
            f"(tensor parallelism stays within a node); use one of {', '.join(map(str, divisors(devices_per_node)))}"
        )
    if nodes % pp:
        return (
            f"pipeline_parallel {pp} must divide the fleet's {nodes} nodes; "
            f"use one of {', '.join(map(str, divisors(nodes)))}"
        )
    return None


def data_parallel(world: int, tp: int, pp: int) -> int:
    """The data-parallel degree DeepSpeed's batch assertion counts: world / (tp * pp)."""
    if world % (tp * pp):
        raise ValueError(f"world size {world} is not a multiple of tp {tp} x pp {pp}")
    return world // (tp * pp)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
