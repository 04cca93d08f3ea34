"""The files DeepSpeed 0.19 writes into one checkpoint, on which node, and how large.

The node protocol moves a checkpoint part by part (templates/agent/PROTOCOL.md: every node uploads what its own
ranks wrote, and restores its own part plus the files every rank loads). How long that takes depends on which
node holds which bytes, not on the checkpoint's total over the node count: under ZeRO-1/2 data-parallel rank 0
alone writes the whole 16-bit model (`mp_rank_XX_model_states.pt`), and every node loads it on restore. At 70B
on 8 nodes that is 140 GB of node 0's 245 GB part, and 140 GB every node downloads.

Names and writers, from DeepSpeed 0.19.8's source (deepspeed/runtime/engine.py, pipe/module.py, pipe/topology.py):
- ranks are laid out as PipeModelDataParallelTopology's axes (pipe, data, model): rank = (pipe*dp + data)*tp
  + model; node = rank // ranks per node (the hostfile gives each node its slots in rank order);
- `_get_ckpt_name`: `mp_rank_{mp:02d}_model_states.pt`, written by data-parallel rank 0 of each model-parallel
  rank (`save_non_zero_checkpoint`, `is_data_parallel_writer`); under ZeRO-3 every rank writes its own
  `zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt` (no full weights in it);
- `_get_rank_zero_ckpt_name`: every rank's optimizer shard `{bf16_}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt`
  (`bf16_` whenever bf16 is on, `_get_zero_ckpt_prefix`);
- a pipeline's weights go to `layer_{idx:02d}-model_{tp:02d}-model_states.pt` (`PipelineModule.ckpt_layer_path`),
  written by data-parallel rank 0 of the stage holding the layer (`save_state_dict`); the stage's mp_rank file
  then holds no module; `mp` is the rank within its replica's model group (`ds_model_rank`: pipe*tp + model).
Sizes: weights at the training precision (2 bytes/param for bf16/fp16, 4 for fp32); each optimizer shard holds
its 1/dp of the fp32 master weights and Adam's two moments, 12 bytes/param (cli/planner/workload.py
checkpoint_bytes: 2 + 12). Files without tensors (a ZeRO-3 or pipeline model-states file) are a few KiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master + Adam m + v, partitioned over data-parallel ranks
SMALL_FILE_BYTES = 16 * 1024  # a model-states file with no tensors in it: buffers names, client state, RNG


def zero_files(zero_stage: int, precision: str, pp: int) -> tuple[bool, bool]:
    """All that the ZeRO stage changes in a checkpoint's files (`CheckpointLayout.files`), so stages with the same
    answer write the same files: (whether the optimizer state stays whole in the model-states file, whether every
    rank writes its own model-states file, ZeRO-3). ZeRO-1 and ZeRO-2 always write alike; stage 0 like them under
    a bf16 pipeline (BF16_Optimizer partitions its state)."""
    return zero_stage == 0 and not (precision == "bf16" and pp > 1), zero_stage == 3


def parts_key(zero_stage: int, precision: str, pp: int) -> tuple:
    """Layouts of one model on one fleet with the same key put the same bytes on every node (their file names
    differ): under ZeRO-3 every rank writes 12 B/param / world and one small file, whatever the layout; otherwise
    what the ZeRO stage changes (`zero_files`) and the pipeline depth (its layer files lie by stage), not the tensor
    degree: a stage's tp model ranks of data-parallel rank 0 are adjacent ranks on the stage's first node, writing
    its weights / tp each. tests/test_checkpoint_layout.py holds layouts of one key to equal parts."""
    unsharded, stage3 = zero_files(zero_stage, precision, pp)
    return (stage3,) if stage3 else (stage3, unsharded, pp)


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    node: int
    rank: int
    path: str  # relative to the step folder
    size: int


@dataclass(frozen=True)
class CheckpointLayout:
    params: int
    zero_stage: int = 1
    precision: str = "bf16"
    tp: int = 1
    pp: int = 1
    nodes: int = 1
    ranks_per_node: int = 8
    layers: int = 80  # pipeline layer files; the planner's model shape gives the real count

    def __post_init__(self):
        if self.precision not in WEIGHT_BYTES:
            raise ValueError(f"precision {self.precision!r}: one of {', '.join(WEIGHT_BYTES)}")
        if self.world % (self.tp * self.pp):
            raise ValueError(f"{self.world} ranks are not a whole number of TP {self.tp} x PP {self.pp} replicas")

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    def rank(self, pipe: int, data: int, model: int) -> int:
        return (pipe * self.dp + data) * self.tp + model

    @cached_property
    def files(self) -> tuple[CheckpointFile, ...]:
        weight = WEIGHT_BYTES[self.precision]
        stage_params = self.params / self.pp  # each stage's share (layers split evenly)
        zero_prefix = "bf16_zero_pp_rank" if self.precision == "bf16" else "zero_pp_rank"
        out: list[CheckpointFile] = []
        per_node = self.ranks_per_node  # locals: the planner lists some 500 layouts per search

        def add(rank: int, path: str, size: float) -> None:
            out.append(CheckpointFile(rank // per_node, rank, path, int(size)))

        # Without ZeRO (stage 0) no optimizer is partitioned, except BF16_Optimizer's under a bf16 pipeline
        # (engine.py `_do_optimizer_sanity_check`: fp32 keeps the torch optimizer, fp16 and bf16 FP16_Optimizer):
        # its whole state (fp32 master + Adam, or Adam alone for fp32) goes into the mp_rank file beside the weights.
        unsharded, stage3 = zero_files(self.zero_stage, self.precision, self.pp)
        in_model_states = (OPTIMIZER_BYTES_PER_PARAM - (4 if self.precision == "fp32" else 0)) if unsharded else 0
        dp = self.dp
        shard = OPTIMIZER_BYTES_PER_PARAM * stage_params / self.tp / dp  # each rank's optimizer shard
        for pipe in range(self.pp):
            for model in range(self.tp):
                mp = pipe * self.tp + model if self.pp > 1 else model
                for data in range(dp if not unsharded else 0):
                    r = self.rank(pipe, data, model)
                    add(r, f"{zero_prefix}_{data}_mp_rank_{mp:02d}_optim_states.pt", shard)
                    if stage3:
                        add(r, f"zero_pp_rank_{data}_mp_rank_{mp:02d}_model_states.pt", SMALL_FILE_BYTES)
                writer = self.rank(pipe, 0, model)
                if stage3:
                    continue
                if self.pp == 1:
                    add(writer, f"mp_rank_{mp:02d}_model_states.pt", (weight + in_model_states) * self.params / self.tp)
                    continue
                add(writer, f"mp_rank_{mp:02d}_model_states.pt",
                    in_model_states * stage_params / self.tp or SMALL_FILE_BYTES)  # fmt: skip
                per_stage = self.layers // self.pp
                for idx in range(pipe * per_stage, (pipe + 1) * per_stage):
                    add(writer, f"layer_{idx:02d}-model_{model:02d}-model_states.pt",
                        weight * stage_params / self.tp / per_stage)  # fmt: skip
        return tuple(out)

    def part(self, node: int) -> list[CheckpointFile]:
        """What node `node` writes and uploads."""
        return [f for f in self.files if f.node == node]

    @cached_property
    def saved_bytes(self) -> tuple[int, ...]:
        """Bytes each node writes (its part), by node rank."""
        per = [0] * self.nodes
        for f in self.files:
            per[f.node] += f.size
        return tuple(per)

    @cached_property
    def restored_bytes(self) -> tuple[int, ...]:
        """Bytes each node holds after a restore at the same node count: its own part and every file of the other
        parts its ranks load, as the agent chooses them (needed_files)."""
        from templates.agent.trainfleet_agent.checkpoints import needed_files

        manifest = self.manifest()
        return tuple(sum(e["size"] for _, e in needed_files(manifest, node)) for node in range(self.nodes))

    def manifest(self) -> dict:
        """The MANIFEST.json the node protocol would commit for this layout (checksums left out: sizes only)."""
        parts = [{"node": n, "files": [{"path": f.path, "size": f.size} for f in self.part(n)]}
                 for n in range(self.nodes)]  # fmt: skip
        return {"step": 0, "nodes": self.nodes, "parts": parts}

    @property
    def total_bytes(self) -> int:
        return sum(self.saved_bytes)
