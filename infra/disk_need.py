"""How much local disk a node needs for its checkpoints, and how long its trainer needs to save one (issue 29 #3, #6).

One rule, for `stacks check`, the planner and the rendered trainfleet.env (the boot script's `check_disk` refuses to
launch on a disk short of it). Bytes per node, from the checkpoint layout DeepSpeed 0.19 writes
(infra/checkpoint_layout.py: which node holds which files), over every node and, with elastic recovery, every node
count the job may run at. The terms, each at its peak and all added (a node at its worst holds them together):

  kept + writing  (keep_last + 1) x the largest step folder a node keeps. The agent prunes local steps to the newest
                  `keep_last` complete ones after each upload (templates/agent/PROTOCOL.md section 3, prune_local), and
                  the trainer writes the next step into `.tmp/` beside them before that (section 1). A step folder is
                  either what the node's ranks saved (its part) or what a restore gave it (its part and the files every
                  rank loads: under ZeRO-1/2 the whole 16-bit model), whichever is larger.
  restore copy    a restore downloads into `.restore-step-N-<pid>/` beside the kept steps and removes the older folder
                  of that step only once every file is in (checkpoints.py `_restore_step`; files the node already holds
                  for that step are hard-linked, so they cost nothing twice): the node's restored bytes. With
                  `checkpoint.elastic`, `restore --resize` fetches every part of a step another node count saved: the
                  whole checkpoint.
  conversion      elastic only: `ds_to_universal` on that whole checkpoint (templates/node/trainfleet-resize.py, into
                  `.convert-*` beside it): what it writes beyond its input, its measured peak less the input already
                  counted above (CONVERSION_PEAK_PER_INPUT_BYTE - 1 times the whole checkpoint).
  NVMe offload    ZeRO-Infinity's swap files under the same state folder: the node's ranks' optimizer partitions
                  (12 bytes/param / data-parallel ranks each) and/or 16-bit parameter partitions (2 bytes/param).

The boot checks those (`checkpoint_bytes`, TRAINFLEET_DISK_NEEDED_BYTES) against what the checkpoint folder's
filesystem has free plus what the checkpoints there already use: by then the image and the venvs are on the disk.
The stack's root volume must also hold those: `volume_gib` adds SOFTWARE_BYTES and the filesystem's own overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.checkpoint_io import LOCAL_SAVE_GBPS, STEP_ALLOWANCE_S
from infra.checkpoint_layout import WEIGHT_BYTES, CheckpointLayout

if TYPE_CHECKING:
    from infra.config import Fleet, StackConfig

GB = 1_000_000_000
GIB = 1 << 30
# ds_to_universal's peak on disk per byte of its input (the input, the per-parameter fragments it extracts and the
# universal files it merges them into), measured by benchmarks/conversion_rate.py on ZeRO-1/2 bf16 checkpoints of 0.2
# to 5 GiB: 2.67 to 2.71 (infra/catalog/data/calibration/conversion_rate.csv), 38 bytes/param at 14 bytes/param, as
# issue 29 #6 estimated; ZeRO-3's 12-byte input: 3.46 (its universal output is 1.5 times the input). The largest of each.
CONVERSION_PEAK_PER_INPUT_BYTE = 2.71
CONVERSION_PEAK_PER_INPUT_BYTE_ZERO3 = 3.46
# What the root volume holds besides the checkpoints, not measured here: the image itself (Ubuntu 24.04 with the
# NVIDIA driver, several CUDA toolkits, EFA/InfiniBand libraries and container tools: tens of GB on the GPU images
# each cloud publishes) and the two venvs the boot builds (torch 2.13.0's CUDA 13 wheel with its nvidia-* wheels and
# DeepSpeed, several GB installed, plus pip's downloads while it installs; the agent's SDKs, 0.2 GB), journald and
# logs. 65 GB: 50 for the image, 15 for the venvs and their install. The boot's own check leaves it out (all of it
# is already on the disk when `check_disk` runs).
SOFTWARE_BYTES = 65 * GB
# The part of a volume an ext4 filesystem leaves to files that `df --output=avail` counts: mke2fs's defaults reserve
# 5% of the blocks for root and spend 256 bytes of inode table per 16 KiB (1.6%), and the journal takes up to 1 GiB.
FILESYSTEM_USABLE = 0.93
# The trainer's stop grace: the save's time at LOCAL_SAVE_GBPS plus the running step, times this (torch.save's rate
# varies with the files' count and size and the disk's other writers; checkpoint_io.md's 2 GB/s is already half the
# slowest NVMe measured), rounded up to GRACE_ROUND_S, never under MIN_STOP_GRACE_S (the fixed grace until issue 29).
STOP_GRACE_MARGIN = 1.25
GRACE_ROUND_S = 10
MIN_STOP_GRACE_S = 100
OFFLOAD_OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master + Adam m + v, swapped to NVMe (ZeRO-Infinity)
OFFLOAD_PARAM_BYTES_PER_PARAM = 2  # the 16-bit parameters, swapped to NVMe


@dataclass(frozen=True)
class DiskNeed:
    """One node's disk, in bytes, at its worst: the terms of the module's rule."""

    keep_last: int
    step_bytes: int  # the largest step folder a node keeps (its part, or what it restores)
    restore_bytes: int  # a restore's temp copy (the whole checkpoint with elastic recovery)
    conversion_bytes: int  # ds_to_universal (elastic only)
    offload_bytes: int  # ZeRO-Infinity's NVMe swap files
    saved_bytes: int  # the largest part a node saves (what the stop grace waits for)

    @property
    def steps_bytes(self) -> int:
        """The kept steps and the one being written."""
        return (self.keep_last + 1) * self.step_bytes

    @property
    def checkpoint_bytes(self) -> int:
        """What the checkpoint folder's filesystem must hold (the boot's check)."""
        return self.steps_bytes + self.restore_bytes + self.conversion_bytes + self.offload_bytes

    @property
    def volume_bytes(self) -> int:
        """The checkpoints and the software, when both are on the root volume."""
        return self.checkpoint_bytes + SOFTWARE_BYTES

    @property
    def volume_gib(self) -> int:
        """The root volume, in the GiB that fleets[].root_volume_gb sizes on every cloud, that holds volume_bytes."""
        return math.ceil(self.volume_bytes / FILESYSTEM_USABLE / GIB)

    def terms(self) -> str:
        """The terms, for one line: `4 x 245 GB (keep_last 3 + 1 being written) + 245 GB restore copy + ...`."""
        out = [f"{self.keep_last + 1} x {_gb(self.step_bytes)} (keep_last {self.keep_last} + 1 being written)"]
        restore = "whole checkpoint a resize restores" if self.conversion_bytes else "restore copy"
        out.append(f"{_gb(self.restore_bytes)} {restore}")
        if self.conversion_bytes:
            out.append(f"{_gb(self.conversion_bytes)} ds_to_universal")
        if self.offload_bytes:
            out.append(f"{_gb(self.offload_bytes)} NVMe offload")
        return " + ".join(out)


def _gb(n: int) -> str:
    return f"{n / GB:,.1f} GB" if n < 100 * GB else f"{n / GB:,.0f} GB"


def layout(config: StackConfig, fleet: Fleet, nodes: int | None = None) -> CheckpointLayout:
    """The checkpoint the fleet's job writes at `nodes` nodes (default: the fleet's)."""
    from infra.userdata import accelerator_of  # not at import: userdata imports node_env, which imports this

    ds = config.deepspeed
    precision = config.job.precision
    # fp8 trains its matmuls in Transformer Engine; DeepSpeed keeps bf16 weights (infra/userdata.py ds_config)
    return CheckpointLayout(
        params=config.job.params,
        zero_stage=ds.zero_stage,
        precision=precision if precision in WEIGHT_BYTES else "bf16",
        tp=ds.tensor_parallel,
        pp=ds.pipeline_parallel,
        nodes=nodes or fleet.nodes,
        ranks_per_node=accelerator_of(fleet)[1] or 1,
    )


def node_counts(config: StackConfig, fleet: Fleet) -> list[int]:
    """Every node count the job may run at: the fleet's, and with elastic recovery the sizes it may shrink to."""
    from infra.elastic import usable_node_counts

    elastic = config.checkpoint.elastic
    shrunk = usable_node_counts(fleet.nodes, config.deepspeed.grad_accum, elastic.min_nodes) if elastic else []
    return sorted({fleet.nodes, *shrunk})


def disk_need(config: StackConfig, fleet: Fleet) -> DiskNeed:
    """The disk one node of the fleet needs at its worst (the module's rule), the largest over nodes and counts."""
    ds = config.deepspeed
    return need_for(
        [layout(config, fleet, n) for n in node_counts(config, fleet)],
        keep_last=config.checkpoint.keep_last,
        elastic=config.checkpoint.elastic is not None,
        offload_optimizer_nvme=ds.offload_optimizer == "nvme",
        offload_param_nvme=ds.offload_param == "nvme",
    )


def need_for(
    layouts: list[CheckpointLayout],
    keep_last: int,
    elastic: bool = False,
    offload_optimizer_nvme: bool = False,
    offload_param_nvme: bool = False,
) -> DiskNeed:
    """The rule over the layouts of every node count the job may run at (one without elastic recovery): what a
    planner calls with the layout of a plan it weighs, before there is a stack."""
    step = saved = restored = offload = whole = 0
    for lay in layouts:
        saves, restores = lay.saved_bytes, restored_bytes(lay)
        step = max(step, *(max(s, r) for s, r in zip(saves, restores, strict=True)))
        saved, restored, whole = max(saved, *saves), max(restored, *restores), max(whole, lay.total_bytes)
        per_rank = 0.0
        if offload_optimizer_nvme:
            per_rank += OFFLOAD_OPTIMIZER_BYTES_PER_PARAM * lay.params / lay.dp
        if offload_param_nvme:
            per_rank += OFFLOAD_PARAM_BYTES_PER_PARAM * lay.params / lay.dp
        offload = max(offload, math.ceil(per_rank * lay.ranks_per_node))
    zero3 = any(lay.zero_stage == 3 for lay in layouts)
    peak = CONVERSION_PEAK_PER_INPUT_BYTE_ZERO3 if zero3 else CONVERSION_PEAK_PER_INPUT_BYTE
    return DiskNeed(
        keep_last=keep_last,
        step_bytes=step,
        restore_bytes=whole if elastic else restored,
        conversion_bytes=math.ceil((peak - 1) * whole) if elastic else 0,
        offload_bytes=offload,
        saved_bytes=saved,
    )


def restored_bytes(lay: CheckpointLayout) -> tuple[int, ...]:
    """lay.restored_bytes, in one pass over the files where there is no pipeline: a node restores its own part and
    every other node's file that is not a rank's ZeRO shard. The layout runs the agent's needed_files once per node
    (seconds at 1,000 nodes, where a planner weighs many layouts); a pipeline's stage-by-stage layer files are left
    to it. tests/test_disk_need.py holds the two equal."""
    if lay.pp > 1:
        return lay.restored_bytes
    from templates.agent.trainfleet_agent.checkpoint_names import ZERO_SHARD_RE

    shared = [0] * lay.nodes
    for f in lay.files:
        if not ZERO_SHARD_RE.search(f.path):
            shared[f.node] += f.size
    total = sum(shared)
    return tuple(saved + total - own for saved, own in zip(lay.saved_bytes, shared, strict=True))


def stop_grace_s(saved_bytes: int) -> int:
    """Seconds the boot script waits for the trainer to checkpoint and exit before it kills it: the running step
    (STEP_ALLOWANCE_S) and the save of the largest part at LOCAL_SAVE_GBPS, with STOP_GRACE_MARGIN."""
    needed = (STEP_ALLOWANCE_S + saved_bytes / (LOCAL_SAVE_GBPS * GB)) * STOP_GRACE_MARGIN
    return max(MIN_STOP_GRACE_S, math.ceil(needed / GRACE_ROUND_S) * GRACE_ROUND_S)
