"""Step throughput: the family's evidence-held MFU on the precision's peak, plus ZeRO communication (bandwidth
and latency, only the overlap DeepSpeed achieves) and offload traffic.

Per micro-step on each device (b = micro batch, s = sequence length, F = FLOPs per token):
    compute   = b * s * F / (MFU * peak)               MFU: cli/planner/calibration.py Fit.device_mfu
    collective of S bytes (16-bit, S = 2 x trained params), ring over all N = g x n devices (NCCL's ring
    for reduce-scatter/all-gather; its bus bandwidth is the slower of NVLink/PCIe and the node's network):
        t(S) = S * ((g-1)/g / B_intra + (n-1)/n / B_node) + calls * (N-1) * alpha
        calls = S / bucket (the ds_config's bucket sizes, infra/deepspeed_settings.py); ZeRO-3 gathers per
        layer; alpha = per ring step latency (ALPHA_NODE_S across nodes, ALPHA_INTRA_S inside one)
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cli.planner.calibration import Fit
from cli.planner.memory import Sharding
from cli.planner.workload import Workload
from infra import deepspeed_settings as ds

# Assumptions (each is printed with every plan that relies on it).
NVLINK_BUS_GBPS = {"A100-40GB": 235.0, "A100-80GB": 235.0, "H100-80GB": 360.0, "H200": 360.0, "B200": 720.0}
PCIE_GBPS = 20.0  # GB/s per device, PCIe 4.0 x16 achievable
RDMA_FABRICS = {"efa", "infiniband", "rdma", "gpudirect-tcpx", "gpudirect-tcpxo"}
NETWORK_EFFICIENCY = 0.7  # share of an RDMA fabric's line rate NCCL's collectives achieve
TCP_NETWORK_EFFICIENCY = 0.35  # NCCL over plain TCP sockets (no EFA/RDMA): half of that, assumed
# Latency per ring step across nodes: the largest of 1/2/5/10 us that keeps the >= 128-GPU llm-foundry rows
# (512 H100s, FSDP per-layer gathers) within their in-sample error (benchmarks/plan_calibration.py prints it).
ALPHA_NODE_S = 2e-6
ALPHA_INTRA_S = 1e-6  # latency per ring step inside a node (NVLink/PCIe)
OVERLAP_EFFICIENCY = 0.5  # share of the compute beside it that overlapped communication can hide
# Gbit/s assumed where the catalog has no figure: the types it lacks are the smaller "up to 10-25 Gbit/s"
# burst instances, whose sustained rate is lower still, so assume little rather than flatter them.
UNKNOWN_NETWORK_GBITS = 10.0
CPU_ADAM_PARAMS_PER_VCPU_S = 5e7  # DeepSpeed CPU-Adam parameter updates per vCPU per second


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


def collective_s(size_bytes: float, calls: float, g: int, nodes: int, hw: Hardware) -> float:
    """One reduce-scatter or all-gather of `size_bytes` in `calls` ring collectives over g x nodes devices."""
    devices = g * nodes
    if devices == 1:
        return 0.0
    t = 0.0
    if g > 1:
        t += (g - 1) / g / (hw.intra_gbps * 1e9)
    if nodes > 1:
        t += (nodes - 1) / nodes / (hw.node_gbps * 1e9)
    alpha = ALPHA_NODE_S if nodes > 1 else ALPHA_INTRA_S
    return size_bytes * t + max(1.0, calls) * (devices - 1) * alpha


def grad_accum_for(w: Workload, micro_batch: int, devices: int) -> int:
    return max(1, math.ceil(w.global_batch_tokens / (micro_batch * w.seq_len * devices)))


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
) -> Step:
    """One optimizer step. `comm`: zero_communication(w, hw, nodes, sharding), when the caller has it."""
    g = hw.devices_per_node
    devices = g * nodes
    ga = grad_accum if grad_accum is not None else grad_accum_for(w, micro_batch, devices)
    mfu = fit.device_mfu(hw.accelerator, w.precision, w.shape.hidden, w.attention_share, devices,
                         micro_batch * w.seq_len, checkpointing)  # fmt: skip
    compute = micro_batch * w.seq_len * w.flops_per_token / (mfu * hw.peak_tflops * 1e12)
    comm = comm if comm is not None else zero_communication(w, hw, nodes, sharding)
    exposed_micro, exposed_step = comm.exposed(compute)
    offload = 0.0
    shard = w.trainable_params / devices
    if sharding.offload_optimizer:
        offload += 4.0 * shard / (PCIE_GBPS * 1e9)
        offload += (w.trainable_params / nodes) / (CPU_ADAM_PARAMS_PER_VCPU_S * max(hw.vcpus, 1.0))
    if sharding.offload_param:
        offload += ga * 2 * 2.0 * (w.params / devices) / (PCIE_GBPS * 1e9)
    total = ga * (compute + exposed_micro) + exposed_step + offload
    return Step(micro_batch, ga, devices, mfu, compute, comm.report_micro, comm.report_step, offload, total,
                ga * micro_batch * w.seq_len * devices)  # fmt: skip


def compute_only_tokens_per_second(w: Workload, hw: Hardware, nodes: int, micro_batch: int, checkpointing: bool,
                                   fit: Fit) -> float:  # fmt: skip
    """An upper bound on `step(...).tokens_per_second` for any sharding: the speed with no communication or
    offload at all (the optimizer skips setups that cannot beat the best found with it)."""
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

    def exposed(self, compute: float) -> tuple[float, float]:
        return (max(0.0, self.micro - self.micro_hide * compute),
                max(0.0, self.reduce - self.step_hide * compute) + self.gather)  # fmt: skip


def zero_communication(w: Workload, hw: Hardware, nodes: int, sharding: Sharding) -> Communication:
    """What the ZeRO stage moves (the module docstring), independent of the micro batch and recompute."""
    g = hw.devices_per_node
    if g * nodes == 1:
        return Communication()
    size = 2.0 * w.trainable_params
    elements = w.trainable_params

    def coll(size_bytes: float, bucket: float) -> float:
        return collective_s(size_bytes, elements / bucket, g, nodes, hw)

    backward = OVERLAP_EFFICIENCY * 2 / 3  # overlap hides behind the backward pass: 2/3 of a micro-step
    stage = sharding.zero_stage
    if stage == 3:
        gather = collective_s(size, max(w.shape.layers, elements / ds.STAGE3_PREFETCH_BUCKET_SIZE), g, nodes, hw)
        micro = 2 * gather + coll(size, ds.REDUCE_BUCKET_SIZE)
        if w.method == "lora":  # the frozen base is gathered too (forward and backward)
            micro += 2 * collective_s(2.0 * w.params, w.shape.layers, g, nodes, hw)
        return Communication(micro=micro, micro_hide=OVERLAP_EFFICIENCY, report_micro=micro)
    if stage == 2:
        micro = coll(size, ds.REDUCE_BUCKET_SIZE)
        gather = coll(size, ds.ALLGATHER_BUCKET_SIZE)
        return Communication(micro=micro, micro_hide=backward, gather=gather, report_micro=micro, report_step=gather)
    if stage == 1:
        reduce = coll(size, ds.REDUCE_BUCKET_SIZE)
        gather = coll(size, ds.ALLGATHER_BUCKET_SIZE)
        return Communication(reduce=reduce, step_hide=backward, gather=gather, report_step=reduce + gather)
    allreduce = 2 * coll(size, ds.ALLREDUCE_BUCKET_SIZE)
    return Communication(reduce=allreduce, step_hide=backward, report_step=allreduce)


def explain_step(st: Step, w: Workload, hw: Hardware, fit: Fit) -> list[str]:
    return [
        fit.formula(),
        fit.evidence_line(hw.accelerator, w.precision, w.shape.hidden),
        f"MFU {st.mfu:.3f} on {hw.accelerator} peak {hw.peak_tflops:g} TFLOP/s ({w.precision})",
        f"micro-step compute = {st.micro_batch} x {w.seq_len} tokens x {w.flops_per_token:.4g} FLOP/token / "
        f"({st.mfu:.3f} x {hw.peak_tflops:g} TFLOP/s) = {st.compute_s:.3f} s",
        f"ZeRO comm: {st.comm_micro_s:.3f} s per micro-step, {st.comm_step_s:.3f} s per step "
        f"(NVLink/PCIe {hw.intra_gbps:g} GB/s, node network {hw.node_gbps:.1f} GB/s effective, "
        f"{ALPHA_NODE_S * 1e6:g} us per ring step across nodes; overlap hides at most "
        f"{OVERLAP_EFFICIENCY:.0%} of the compute beside it)",
        f"offload traffic {st.offload_s:.3f} s per step",
        f"step = {st.grad_accum} x (compute + exposed micro comm) + exposed step comm + offload = {st.step_s:.3f} s for "
        f"{st.tokens_per_step:,} tokens -> {st.tokens_per_second_per_device:,.0f} tokens/s per device, "
        f"effective MFU {st.effective_mfu:.3f}",
    ]
