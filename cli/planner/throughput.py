"""Step throughput: the family's evidence-held MFU on the precision's peak, plus ZeRO communication (bandwidth
and latency, only the overlap DeepSpeed achieves) and offload traffic.

Per micro-step on each device (b = micro batch, s = sequence length, F = FLOPs per token):
    compute   = b * s * F / (MFU * peak)               MFU: cli/planner/calibration.py Fit.device_mfu
    collective of S bytes (16-bit, S = 2 x trained params) over all N = g x n devices, in `calls` NCCL calls,
    each as long as NCCL's own cost model says its fastest algorithm and protocol take (cli/planner/nccl.py:
    Ring for reduce-scatter/all-gather, Ring or Tree for all-reduce; LL, LL128 or Simple; NCCL's latencies),
    the Simple protocol moving a call's bytes in
        bytes(S) = S * ((g-1)/g / B_intra + (n-1)/n / B_node)       (x 2 for an all-reduce)
        calls = S / bucket (the ds_config's bucket sizes, infra/deepspeed_settings.py); ZeRO-3 gathers per layer
        B_node = the node's line rate x efficiency (RDMA fabrics: EFA, InfiniBand, GPUDirect; plain TCP less)
    what each stage moves (DeepSpeed 0.19 with the rendered ds_config, overlap_comm on for stages 1-3):
      ZeRO-0: one all-reduce (2 t) of the bucketed gradients in the last micro-step's backward, overlapped
              (as data parallel training does; DeepSpeed documents stage 0 as the fastest).
      ZeRO-1: the gradients are reduce-scattered (t; ds_config reduce_scatter defaults to true) in the last
              micro-step's backward, overlapped; the updated params are all-gathered after the step (t).
      ZeRO-2: a reduce-scatter (t) in every micro-step's backward, overlapped; the all-gather (t) after the step.
      ZeRO-3: all-gather in forward and backward (prefetched) and reduce-scatter in backward (3 t) every
              micro-step, overlapped with the micro-step's compute.
    Overlap hides communication behind at most OVERLAP_EFFICIENCY of the compute it runs beside (backward is
    2/3 of a micro-step): the collectives share the GPU's memory bandwidth and SMs with the kernels.
    Offload: optimizer offload moves 16-bit grads down and params up over PCIe once per step and runs CPU Adam
    on the node's vCPUs; param offload fetches params over PCIe twice per micro-step. Neither is overlapped.
step = grad_accum * (compute + exposed micro comm) + exposed step comm + offload.

Tensor (t = tp) and pipeline (p = pp) parallelism (layout and memory: cli/planner/memory.py; t = p = 1 gives
every figure above unchanged). dp = world / (t x p); one (t, p) rank holds P_rank parameters (memory.rank_params).
    grad accumulation m = global batch sequences / (b x dp), exactly: b divides each rank's share
        (cli/planner/batch.py; every micro-batch passes every stage)
    compute   = b * s * F * imbalance / (t * p * MFU * LAYOUT_EFFICIENCY * peak) per micro-step and device: a
                step's b s m dp F FLOPs spread over the world's t p dp devices, the pipeline ticking at its
                slowest stage. MFU stays the calibration's per-device figure at the world's device count.
        imbalance = p x the slowest stage's FLOPs / all stages' (1 at p = 1). DeepSpeed's partition of the
                trainer's decoder layers (partition_method "type:DecoderLayer", runtime/utils.py
                partition_balanced) gives the first L mod p stages ceil(L/p) layers and the rest floor(L/p);
                the last stage also runs the output head (d x V x h FLOPs a token, d = 6, or 4 for LoRA), so the
                slowest is max(ceil(L/p) x layer, floor(L/p) x layer + head), layer = d x its matrices' weights
                + 12 h s (attention scores). The embedding lookup runs no matrix product.
    TP: Megatron's layers all-reduce their output twice in forward and twice in backward per transformer layer
        and micro-batch (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
        Using Megatron-LM", arXiv 2104.04473, sec. 3.3 / Fig. 5; full activation checkpointing repeats the
        forward's two), each of 2 s b h bytes, a ring all-reduce over t devices on NVLink/PCIe:
            t_ar = NCCL's all-reduce of 2 s b h bytes over t ranks on one node, its Simple ring moving them
                   in 2 (t-1)/t * 2 s b h / B_intra (cli/planner/nccl.py)
        tp_comm = (4, or 6 with checkpointing) * ceil(L/p) * t_ar per micro-step, not overlapped with compute
        (DeepSpeed AutoTP and Megatron's default all-reduce wait on the result). The g/t groups of a node use
        disjoint NVLink ports; over PCIe the per-device PCIE_GBPS is assumed for each. Inside a pipeline the
        launch runs sequence parallelism (infra/parallelism.py): each all-reduce becomes a reduce-scatter and an
        all-gather of the same bytes, which a ring runs in the same time, so t_ar stands for both.
    PP: 1F1B (PipeDream-Flush; DeepSpeed's PipelineEngine and Megatron's default) pipeline of m micro-batches over
        p stages: tick = compute + tp_comm + p2p + exposed ZeRO micro comm; the step runs m + p - 1 ticks, so the
        bubble is (p - 1) ticks, a share (p-1)/(m+p-1) of the pipelined time (Narayanan 2021 eq. 1 gives it as
        (p-1)/m of the ideal time). Point to point: each micro-batch sends its activations forward and their
        gradients backward across each stage boundary, 2 s b h bytes each per data-parallel replica; each of the t
        ranks sends its 1/t (sequence parallel: its own positions, sent whole; AutoTP is never in a pipeline) so each
        device sends 2 s b h/t and a node's g devices together (g/t) 2 s b h over its network:
            p2p = 2 * ((g/t) * 2 s b h / B_node + ALPHA_NODE_S) per tick, exposed (1F1B blocks on it)
        DeepSpeed's PipelineEngine runs ZeRO stages 0-1 only; stages 2-3 with p > 1 are modelled the same way
        (e.g. Megatron's distributed optimizer is ZeRO-1-like), for the caller to rule out.
    ZeRO collectives run over the data-parallel group: S = 2 x trained params per rank, ring over its g/t devices
        per node and n/p nodes; a node carries t such groups (one per tp rank) at once, all crossing its network,
        so the node term is t x S (n/p - 1)/(n/p) / B_node. At t = g each group has one device per node and the
        node's network carries t x S_rank ~ S/p: tensor parallelism does not shrink the gradient traffic a node
        sends, it lets a lower ZeRO stage fit (ZeRO-0/1 move it once per step where ZeRO-3 moves 3 S every
        micro-step).
    step = m * (compute + exposed micro comm + tp_comm + p2p) + bubble + exposed step comm + offload
    node_bytes (per node per step, sent): m * micro collectives + step collectives, each t x S (n/p-1)/(n/p),
        plus m * 2 * (g/t) * 2 s b h point to point when p > 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from cli.planner import nccl
from cli.planner.calibration import Fit
from cli.planner.memory import (
    Sharding,
    data_parallel_layout,
    micro_batches_per_step,
    rank_params,
    rank_trained_params,
    stage_layers,
)
from cli.planner.workload import Workload
from infra import deepspeed_settings as ds

# Assumptions (each is printed with every plan that relies on it).
NVLINK_BUS_GBPS = {"A100-40GB": 235.0, "A100-80GB": 235.0, "H100-80GB": 360.0, "H200": 360.0, "B200": 720.0}
PCIE_GBPS = 20.0  # GB/s per device, PCIe 4.0 x16 achievable
RDMA_FABRICS = {"efa", "infiniband", "rdma", "gpudirect-tcpx", "gpudirect-tcpxo"}
NETWORK_EFFICIENCY = 0.7  # share of an RDMA fabric's line rate NCCL's collectives achieve
TCP_NETWORK_EFFICIENCY = 0.35  # NCCL over plain TCP sockets (no EFA/RDMA): half of that, assumed
# Latency of one pipeline send across nodes, assumed: the per-step figure the collectives used before they took
# NCCL's own latencies (cli/planner/nccl.py). A send carries a micro-batch's activations (tens of MB), so it is
# well under 1% of the send.
ALPHA_NODE_S = 2e-6
OVERLAP_EFFICIENCY = 0.5  # share of the compute beside it that overlapped communication can hide
# Gbit/s assumed where the catalog has no figure: the types it lacks are the smaller "up to 10-25 Gbit/s"
# burst instances, whose sustained rate is lower still, so assume little rather than flatter them.
UNKNOWN_NETWORK_GBITS = 10.0
CPU_ADAM_PARAMS_PER_VCPU_S = 5e7  # DeepSpeed CPU-Adam parameter updates per vCPU per second
# Tensor- and pipeline-parallel steps run below the MFU calibrated on ZeRO/FSDP rows (smaller GEMMs per device,
# the schedule's waits beyond the 1F1B bubble, and the calibrated MFU's extrapolation to hidden sizes past the
# table's). Their compute is slowed by this factor: the largest (to two decimals) under which no development run
# of cli/planner/layout_runs.py is predicted faster than it ran, replayed at its own layout. Megatron-Turing NLG
# 530B on 3360 A100s (DeepSpeed's pipeline engine, as this launch runs) sets it: 1.007 published / predicted;
# Megatron-LM 1T runs 1.34 times faster than predicted. The held-out BLOOM-176B never sets it (it ran 1.19 times
# faster). tests/test_planner_layouts.py holds it to the table.
LAYOUT_EFFICIENCY = 0.74


@dataclass(frozen=True, slots=True)
class Hardware:
    """One node's hardware, as the throughput model needs it."""

    accelerator: str
    peak_tflops: float  # dense, for the job's precision, per device
    devices_per_node: int
    device_memory_gib: float
    host_memory_gib: float
    vcpus: float
    network_gbits: float | None  # per node
    fabric: str = ""  # efa, infiniband, gpudirect-tcpx, ... or "" (plain TCP)

    @property
    def intra_gbps(self) -> float:
        return NVLINK_BUS_GBPS.get(self.accelerator, PCIE_GBPS)

    @property
    def node_gbps(self) -> float:
        gbits = self.network_gbits if self.network_gbits else UNKNOWN_NETWORK_GBITS
        return gbits / 8 * (NETWORK_EFFICIENCY if self.fabric in RDMA_FABRICS else TCP_NETWORK_EFFICIENCY)

    def assumptions(self, precision: str, fit: Fit | None = None) -> list[str]:
        out = []
        mfu_assumption = fit.assumption(self.accelerator, precision) if fit is not None else None
        if mfu_assumption:
            out.append(mfu_assumption)
        if self.accelerator not in NVLINK_BUS_GBPS and self.devices_per_node > 1:
            out.append(f"{self.accelerator}: devices talk over PCIe ({PCIE_GBPS:g} GB/s), no NVLink assumed")
        if not self.network_gbits:
            out.append(f"node network unknown in the catalog: {UNKNOWN_NETWORK_GBITS:g} Gbit/s assumed")
        if self.fabric not in RDMA_FABRICS:
            out.append(f"no EFA/RDMA fabric: NCCL over TCP assumed to reach {TCP_NETWORK_EFFICIENCY:.0%} of the "
                       "node's line rate")
        return out


@dataclass(frozen=True, slots=True)
class Step:
    micro_batch: int
    grad_accum: int
    devices: int
    mfu: float  # 0..1, before communication/offload stalls
    compute_s: float  # per micro-step
    comm_micro_s: float
    comm_step_s: float
    offload_s: float
    step_s: float
    tokens_per_step: int
    tp: int = 1  # tensor-parallel degree
    pp: int = 1  # pipeline stages
    bubble_share: float = 0.0  # of the pipelined time: (p-1)/(m+p-1)
    bubble_s: float = 0.0  # per step: (p-1) pipeline ticks idle
    tp_comm_s: float = 0.0  # per step: tensor-parallel all-reduces, exposed (m x per micro-step)
    pp_p2p_s: float = 0.0  # per step: pipeline sends between stages, exposed (m x per micro-step)
    node_bytes: float = 0.0  # per node per step: bytes each node sends over its network (ZeRO + pipeline)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def tokens_per_second_per_device(self) -> float:
        return self.tokens_per_second / self.devices

    @property
    def effective_mfu(self) -> float:
        """MFU after communication and offload stalls: compute time share of the step."""
        return self.mfu * self.grad_accum * self.compute_s / self.step_s


def collective_s(size_bytes: float, calls: float, g: int, nodes: int, hw: Hardware, nic_share: int = 1, *,
                 allreduce: bool = False) -> float:  # fmt: skip
    """A reduce-scatter or all-gather (`allreduce`: an all-reduce) of `size_bytes` in `calls` NCCL collectives over
    g x nodes devices; `nic_share` such collectives (one per tp rank) cross each node's network at once. Each call
    takes what NCCL's own model says its fastest algorithm and protocol take (cli/planner/nccl.py), its Simple
    protocol moving the bytes at the bandwidths of the module docstring."""
    devices = g * nodes
    if devices == 1:
        return 0.0
    t = 0.0
    if g > 1:
        t += (g - 1) / g / (hw.intra_gbps * 1e9)
    if nodes > 1:
        t += nic_share * (nodes - 1) / nodes / (hw.node_gbps * 1e9)
    n_calls = max(1.0, calls)
    per_call = size_bytes / n_calls
    fabric = nccl.fabric(devices, nodes, hw.accelerator in NVLINK_BUS_GBPS, hw.accelerator)
    if allreduce:
        return n_calls * nccl.allreduce_s(per_call, 2 * per_call * t, fabric)
    return n_calls * nccl.gather_or_scatter_s(per_call, per_call * t, fabric)


def grad_accum_for(w: Workload, micro_batch: int, devices: int, *, tp: int = 1, pp: int = 1) -> int:
    """Micro-steps per optimizer step over `devices` (the world) split into tp x pp x data parallel."""
    if devices % (tp * pp):
        raise ValueError(f"{devices} devices do not split into tp={tp} x pp={pp} groups")
    return micro_batches_per_step(w, micro_batch, devices // (tp * pp))


def tp_allreduce_s(size_bytes: float, tp: int, hw: Hardware) -> float:
    """One all-reduce of `size_bytes` over the tp devices of a node, as NCCL's model prices it (`collective_s`)."""
    if tp == 1:
        return 0.0
    return collective_s(size_bytes, 1, tp, 1, hw, allreduce=True)


def tp_comm_micro_s(w: Workload, hw: Hardware, micro_batch: int, checkpointing: bool, tp: int = 1,
                    pp: int = 1) -> float:  # fmt: skip
    """Tensor-parallel all-reduces of one micro-step on one device: 2 forward + 2 backward per layer of the
    stage (+ 2 in the recomputed forward), each of the 2 s b h activation bytes (Narayanan 2021 sec. 3.3)."""
    per_layer = 6 if checkpointing else 4
    size = 2.0 * w.seq_len * micro_batch * w.shape.hidden
    return per_layer * stage_layers(w, pp) * tp_allreduce_s(size, tp, hw)


def pp_p2p_micro_s(w: Workload, hw: Hardware, micro_batch: int, tp: int = 1, pp: int = 1) -> float:
    """Pipeline sends of one micro-step on a stage: activations forward and gradients backward, the node's g/tp
    data-parallel replicas' 2 s b h bytes each sharing its network (the module docstring)."""
    if pp == 1:
        return 0.0
    node_bytes = hw.devices_per_node // tp * 2.0 * w.seq_len * micro_batch * w.shape.hidden
    return 2 * (node_bytes / (hw.node_gbps * 1e9) + ALPHA_NODE_S)


def pipeline_bubble_share(pp: int, grad_accum: int) -> float:
    """1F1B's idle share of the pipelined time: (p-1)/(m+p-1) (Narayanan 2021 eq. 1: (p-1)/m of the ideal)."""
    return (pp - 1) / (grad_accum + pp - 1)


def step(
    w: Workload,
    hw: Hardware,
    nodes: int,
    sharding: Sharding,
    micro_batch: int,
    checkpointing: bool,
    fit: Fit,
    grad_accum: int | None = None,
    comm: Communication | None = None,
    *,
    tp: int = 1,
    pp: int = 1,
) -> Step:
    """One optimizer step. `comm`: zero_communication(w, hw, nodes, sharding, tp=tp, pp=pp), when the caller
    has it."""
    g = hw.devices_per_node
    devices = g * nodes
    dp_per_node, dp_nodes = data_parallel_layout(w, g, nodes, tp, pp)
    dp = dp_per_node * dp_nodes
    ga = grad_accum if grad_accum is not None else grad_accum_for(w, micro_batch, devices, tp=tp, pp=pp)
    mfu = fit.device_mfu(hw.accelerator, w.precision, w.shape.hidden, w.attention_share, devices,
                         micro_batch * w.seq_len, checkpointing)  # fmt: skip
    compute = micro_compute_s(w, hw, micro_batch, mfu, tp, pp)
    comm = comm if comm is not None else zero_communication(w, hw, nodes, sharding, tp=tp, pp=pp)
    exposed_micro, exposed_step = comm.exposed(compute)
    tp_micro = tp_comm_micro_s(w, hw, micro_batch, checkpointing, tp, pp)
    p2p_micro = pp_p2p_micro_s(w, hw, micro_batch, tp, pp)
    tick = compute + exposed_micro + tp_micro + p2p_micro  # one micro-batch through one stage
    bubble = (pp - 1) * tick  # 1F1B fill and drain
    offload = 0.0
    trained = rank_trained_params(w, tp, pp)
    shard = trained / dp
    if sharding.offload_optimizer:
        offload += 4.0 * shard / (PCIE_GBPS * 1e9)
        # A node updates the shards of its g devices: g x trained/dp = trained x tp x pp / nodes.
        offload += (trained * tp * pp / nodes) / (CPU_ADAM_PARAMS_PER_VCPU_S * max(hw.vcpus, 1.0))
    if sharding.offload_param:
        offload += ga * 2 * 2.0 * (rank_params(w, tp, pp) / dp) / (PCIE_GBPS * 1e9)
    total = ga * tick + bubble + exposed_step + offload
    p2p_bytes = ga * 2 * (g // tp) * 2.0 * w.seq_len * micro_batch * w.shape.hidden if pp > 1 else 0.0
    return Step(micro_batch, ga, devices, mfu, compute, comm.report_micro, comm.report_step, offload, total,
                ga * micro_batch * w.seq_len * dp, tp=tp, pp=pp, bubble_share=pipeline_bubble_share(pp, ga),
                bubble_s=bubble, tp_comm_s=ga * tp_micro, pp_p2p_s=ga * p2p_micro,
                node_bytes=ga * comm.node_bytes_micro + comm.node_bytes_step + p2p_bytes)  # fmt: skip


def stage_imbalance(w: Workload, pp: int) -> float:
    """p x the slowest pipeline stage's FLOPs / all stages' (the module docstring); 1.0 without a pipeline."""
    if pp == 1:
        return 1.0
    layer, head, layers = w.layer_flops_per_token, w.head_flops_per_token, w.shape.layers
    whole, extra = divmod(layers, pp)
    slowest = max((whole + (extra > 0)) * layer, whole * layer + head)
    return pp * slowest / (layers * layer + head)


def micro_compute_s(w: Workload, hw: Hardware, micro_batch: int, mfu: float, tp: int = 1, pp: int = 1) -> float:
    """One micro-step's compute on one device, a pipeline tick: its FLOPs split over its tp x pp devices, at the
    slowest stage's pace (`stage_imbalance`) and LAYOUT_EFFICIENCY of the calibrated MFU (tp x pp = 1: unchanged,
    bit for bit)."""
    if tp * pp == 1:
        return micro_batch * w.seq_len * w.flops_per_token / (mfu * hw.peak_tflops * 1e12)
    flops = micro_batch * w.seq_len * w.flops_per_token * stage_imbalance(w, pp)
    return flops / (tp * pp * mfu * LAYOUT_EFFICIENCY * hw.peak_tflops * 1e12)


def compute_floor_s(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int,
                    batches: tuple[int, ...]) -> tuple[float, float]:  # fmt: skip
    """What `step_floor_s` reads of a layout's compute, the same on every network: (the least (m + p - 1) x
    compute of a step over the micro batches `batches` without recompute, which only lowers MFU; the longest
    micro-step compute of any of them, recompute's)."""
    g, n = data_parallel_layout(w, hw.devices_per_node, nodes, tp, pp)
    devices = hw.devices_per_node * nodes

    def compute(mb: int, checkpointing: bool) -> float:
        mfu = fit.device_mfu(hw.accelerator, w.precision, w.shape.hidden, w.attention_share, devices, mb * w.seq_len,
                             checkpointing)  # fmt: skip
        return micro_compute_s(w, hw, mb, mfu, tp, pp)

    return (min((micro_batches_per_step(w, mb, g * n) + pp - 1) * compute(mb, False) for mb in batches),
            max(compute(mb, True) for mb in batches))  # fmt: skip


def step_floor_s(w: Workload, hw: Hardware, nodes: int, tp: int, pp: int, stages: tuple[int, ...],
                 compute_floor: tuple[float, float]) -> float:  # fmt: skip
    """Seconds that no `step` of this layout beats, whatever its ZeRO stage (of `stages`), offload, recompute or
    micro batch (of those `compute_floor_s` was given, each dividing a data-parallel rank's share of the global
    batch, so m x b = share):
      - compute and bubble: `compute_floor_s`' least;
      - the stages' exposed collectives at their least: each stage's, once, behind the longest micro-step compute
        (`compute_floor_s`'), which hides the most;
      - tensor-parallel all-reduces and pipeline sends: each a fixed latency plus a time linear in the micro
        batch per micro-step, so m micro-steps take at least one of the whole share (and 4 all-reduces a layer);
      - offload: none (it only adds)."""
    g, n = data_parallel_layout(w, hw.devices_per_node, nodes, tp, pp)
    share = w.batch_sequences // (g * n)
    steps, longest = compute_floor
    exposed = min(sum(zero_communication(w, hw, nodes, Sharding(stage), tp=tp, pp=pp).exposed(longest))
                  for stage in stages)  # fmt: skip
    return steps + exposed + tp_comm_micro_s(w, hw, share, False, tp, pp) + pp_p2p_micro_s(w, hw, share, tp, pp)


def compute_only_tokens_per_second(w: Workload, hw: Hardware, nodes: int, micro_batch: int, checkpointing: bool,
                                   fit: Fit, *, tp: int = 1, pp: int = 1) -> float:  # fmt: skip
    """An upper bound on `step(...).tokens_per_second` for any sharding: the speed with no communication,
    pipeline bubble or offload at all (the optimizer skips setups that cannot beat the best found with it).
    tp and pp split each micro-batch's FLOPs over tp x pp devices, so the bound is the same for every layout."""
    data_parallel_layout(w, hw.devices_per_node, nodes, tp, pp)
    devices = hw.devices_per_node * nodes
    mfu = fit.device_mfu(hw.accelerator, w.precision, w.shape.hidden, w.attention_share, devices,
                         micro_batch * w.seq_len, checkpointing)  # fmt: skip
    return devices * mfu * hw.peak_tflops * 1e12 / w.flops_per_token


@dataclass(frozen=True, slots=True)
class Communication:
    """A ZeRO stage's collectives on one hardware and node count, seconds, and what overlap can hide:
    exposed per micro-step = max(0, micro - micro_hide x compute); per step = max(0, reduce - step_hide x
    compute) + gather. `report_*` are the totals shown (per micro-step, per step)."""

    micro: float = 0.0
    micro_hide: float = 0.0
    reduce: float = 0.0
    step_hide: float = 0.0
    gather: float = 0.0
    report_micro: float = 0.0
    report_step: float = 0.0
    node_bytes_micro: float = 0.0  # bytes each node sends over its network per micro-step
    node_bytes_step: float = 0.0  # ... and once per step

    def exposed(self, compute: float) -> tuple[float, float]:
        return (max(0.0, self.micro - self.micro_hide * compute),
                max(0.0, self.reduce - self.step_hide * compute) + self.gather)  # fmt: skip


def zero_communication(w: Workload, hw: Hardware, nodes: int, sharding: Sharding, *, tp: int = 1,
                       pp: int = 1) -> Communication:  # fmt: skip
    """What the ZeRO stage moves (the module docstring), independent of the micro batch and recompute: over the
    data-parallel group of one (tp, pp) rank, g/tp devices on each of nodes/pp nodes, tp groups per node."""
    g, n = data_parallel_layout(w, hw.devices_per_node, nodes, tp, pp)
    if g * n == 1:
        return Communication()
    trained = rank_trained_params(w, tp, pp)
    size = 2.0 * trained
    elements = trained
    layers = stage_layers(w, pp)

    def coll(size_bytes: float, bucket: float, allreduce: bool = False) -> float:
        return collective_s(size_bytes, elements / bucket, g, n, hw, tp, allreduce=allreduce)

    def sent(size_bytes: float) -> float:  # what one collective sends over each node's network (tp groups)
        return tp * size_bytes * (n - 1) / n

    backward = OVERLAP_EFFICIENCY * 2 / 3  # overlap hides behind the backward pass: 2/3 of a micro-step
    stage = sharding.zero_stage
    if stage == 3:
        gather = collective_s(size, max(layers, elements / ds.STAGE3_PREFETCH_BUCKET_SIZE), g, n, hw, tp)
        micro = 2 * gather + coll(size, ds.REDUCE_BUCKET_SIZE)
        node_micro = 3 * sent(size)
        if w.method == "lora":  # the frozen base is gathered too (forward and backward)
            base = 2.0 * rank_params(w, tp, pp)
            micro += 2 * collective_s(base, layers, g, n, hw, tp)
            node_micro += 2 * sent(base)
        return Communication(micro=micro, micro_hide=OVERLAP_EFFICIENCY, report_micro=micro,
                             node_bytes_micro=node_micro)  # fmt: skip
    if stage == 2:
        micro = coll(size, ds.REDUCE_BUCKET_SIZE)
        gather = coll(size, ds.ALLGATHER_BUCKET_SIZE)
        return Communication(micro=micro, micro_hide=backward, gather=gather, report_micro=micro, report_step=gather,
                             node_bytes_micro=sent(size), node_bytes_step=sent(size))  # fmt: skip
    if stage == 1:
        reduce = coll(size, ds.REDUCE_BUCKET_SIZE)
        gather = coll(size, ds.ALLGATHER_BUCKET_SIZE)
        return Communication(reduce=reduce, step_hide=backward, gather=gather, report_step=reduce + gather,
                             node_bytes_step=2 * sent(size))  # fmt: skip
    allreduce = coll(size, ds.ALLREDUCE_BUCKET_SIZE, allreduce=True)
    return Communication(reduce=allreduce, step_hide=backward, report_step=allreduce, node_bytes_step=2 * sent(size))


def parallelism_assumptions(tp: int, pp: int) -> list[str]:
    """What a tensor/pipeline-parallel step rests on, printed with every plan that uses one."""
    out = []
    if tp > 1:
        out.append(f"tensor parallel {tp}: {LAYOUT_EFFICIENCY:.0%} of the calibrated MFU (the most under which no "
                   "published development run, Megatron-LM 1T and MT-NLG 530B at 2,240-3,360 GPUs, is predicted "
                   "faster than it ran); its all-reduces are not overlapped with compute")  # fmt: skip
    if pp > 1:
        out.append(f"pipeline {pp} stages: 1F1B schedule at {LAYOUT_EFFICIENCY:.0%} of the calibrated MFU, paced "
                   "by the slowest stage (DeepSpeed's partition of the layers, the output head on the last); "
                   "point-to-point sends not overlapped; DeepSpeed's pipeline runs ZeRO stages 0-1 only")  # fmt: skip
    return out


def explain_step(st: Step, w: Workload, hw: Hardware, fit: Fit) -> list[str]:
    split = st.tp * st.pp
    dp = st.devices // split
    lines = [
        fit.formula(),
        fit.evidence_line(hw.accelerator, w.precision, w.shape.hidden),
        f"MFU {st.mfu:.3f} on {hw.accelerator} peak {hw.peak_tflops:g} TFLOP/s ({w.precision})",
    ]
    if split == 1:
        lines.append(f"micro-step compute = {st.micro_batch} x {w.seq_len} tokens x {w.flops_per_token:.4g} "
                     f"FLOP/token / ({st.mfu:.3f} x {hw.peak_tflops:g} TFLOP/s) = {st.compute_s:.3f} s")  # fmt: skip
    else:
        lines += [
            f"layout: {st.devices} devices = data parallel {dp} x tensor parallel {st.tp} x pipeline {st.pp} "
            f"stages; ZeRO shards over the {dp} data-parallel devices only",
            f"micro-step compute = {st.micro_batch} x {w.seq_len} tokens x {w.flops_per_token:.4g} FLOP/token x "
            f"{stage_imbalance(w, st.pp):.3f} (the slowest stage's share x {st.pp}) / ({st.tp} x {st.pp} x "
            f"{st.mfu:.3f} x {LAYOUT_EFFICIENCY:.2f} x {hw.peak_tflops:g} TFLOP/s) = {st.compute_s:.3f} s per device",
        ]
    lines.append(
        f"ZeRO comm: {st.comm_micro_s:.3f} s per micro-step, {st.comm_step_s:.3f} s per step "
        f"(NVLink/PCIe {hw.intra_gbps:g} GB/s, node network {hw.node_gbps:.1f} GB/s effective, "
        f"each call at NCCL's own model's fastest algorithm and protocol; overlap hides at most "
        f"{OVERLAP_EFFICIENCY:.0%} of the compute beside it)"
    )
    if st.tp > 1:
        lines.append(
            f"tensor-parallel all-reduces of 2 x s x b x h bytes, 4 per layer (2 forward + 2 backward, Megatron; "
            f"6 when the forward is recomputed) over {st.tp} devices on "
            f"NVLink/PCIe {hw.intra_gbps:g} GB/s, not overlapped: {st.tp_comm_s:.3f} s per step"
        )
    if st.pp > 1:
        lines.append(
            f"pipeline (1F1B, {st.pp} stages, {st.grad_accum} micro-batches): bubble (p-1)/(m+p-1) = "
            f"{st.bubble_share:.1%} of the pipelined time = {st.bubble_s:.3f} s per step; point-to-point sends "
            f"{st.pp_p2p_s:.3f} s per step over the node network ({hw.node_gbps:.1f} GB/s effective), not overlapped"
        )
    if split > 1:
        lines += parallelism_assumptions(st.tp, st.pp)
    lines += [
        f"offload traffic {st.offload_s:.3f} s per step",
    ]
    if split == 1:
        lines.append(
            f"step = {st.grad_accum} x (compute + exposed micro comm) + exposed step comm + offload = "
            f"{st.step_s:.3f} s for {st.tokens_per_step:,} tokens -> {st.tokens_per_second_per_device:,.0f} "
            f"tokens/s per device, effective MFU {st.effective_mfu:.3f}"
        )
    else:
        lines.append(
            f"step = {st.grad_accum} x (compute + exposed micro comm + tensor-parallel comm + pipeline sends) + "
            f"bubble + exposed step comm + offload = {st.step_s:.3f} s for {st.tokens_per_step:,} tokens -> "
            f"{st.tokens_per_second_per_device:,.0f} tokens/s per device, effective MFU {st.effective_mfu:.3f}"
        )
    if split > 1 and st.node_bytes:
        lines.append(f"each node sends {st.node_bytes / 1e9:,.1f} GB per step over its network")
    return lines
