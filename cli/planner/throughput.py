"""Step throughput: calibrated MFU on the precision's peak, plus ZeRO communication and offload traffic.

Per micro-step on each device (b = micro batch, s = sequence length, F = FLOPs per token):
    compute   = b * s * F / (MFU * peak)
    ZeRO comm = collective bytes on the slower of NVLink/PCIe inside a node and the node's network:
                t(S, k) = k * S * ((g-1)/g / B_intra + (n-1)/n / B_node)   (hierarchical collectives,
                S = 2 bytes x trained params, g = devices per node, n = nodes)
      ZeRO-3: every micro-step all-gathers params twice and reduce-scatters grads (k = 3),
      ZeRO-2: reduce-scatter each micro-step (k = 1), all-gather once per step (k = 1),
      ZeRO-0/1: one all-reduce per step (k = 2).
    Micro-step communication overlaps its compute: max(compute, comm). Per-step communication overlaps
    the last backward pass (2/3 of a micro-step's compute).
    Offload: optimizer offload moves 16-bit grads down and params up over PCIe once per step and runs
    CPU Adam on the node's vCPUs; param offload fetches params over PCIe twice per micro-step. Neither
    is overlapped.
step = grad_accum * micro-step + exposed step comm + offload; tokens/s per device = grad_accum*b*s/step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cli.planner.calibration import Fit, family_of
from cli.planner.memory import Sharding
from cli.planner.workload import Workload

# Assumptions (each is printed with every plan that relies on it).
NVLINK_BUS_GBPS = {"A100-40GB": 235.0, "A100-80GB": 235.0, "H100-80GB": 360.0, "H200": 360.0, "B200": 720.0}
PCIE_GBPS = 20.0  # GB/s per device, PCIe 4.0 x16 achievable
NETWORK_EFFICIENCY = 0.7  # share of the node's network line rate collectives achieve
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

    @property
    def intra_gbps(self) -> float:
        return NVLINK_BUS_GBPS.get(self.accelerator, PCIE_GBPS)

    @property
    def node_gbps(self) -> float:
        gbits = self.network_gbits if self.network_gbits else UNKNOWN_NETWORK_GBITS
        return gbits / 8 * NETWORK_EFFICIENCY

    def assumptions(self, precision: str) -> list[str]:
        out = []
        fam, calibrated = family_of(self.accelerator, precision)
        if not calibrated:
            out.append(
                f"{self.accelerator} {precision}: no published llm-foundry rows; the {fam} MFU curve is assumed"
            )
        if self.accelerator not in NVLINK_BUS_GBPS and self.devices_per_node > 1:
            out.append(f"{self.accelerator}: devices talk over PCIe ({PCIE_GBPS:g} GB/s), no NVLink assumed")
        if not self.network_gbits:
            out.append(f"node network unknown in the catalog: {UNKNOWN_NETWORK_GBITS:g} Gbit/s assumed")
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


def collective_s(size_bytes: float, k: float, g: int, nodes: int, hw: Hardware) -> float:
    t = 0.0
    if g > 1:
        t += (g - 1) / g / (hw.intra_gbps * 1e9)
    if nodes > 1:
        t += (nodes - 1) / nodes / (hw.node_gbps * 1e9)
    return k * size_bytes * t


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
) -> Step:
    g = hw.devices_per_node
    devices = g * nodes
    ga = grad_accum if grad_accum is not None else grad_accum_for(w, micro_batch, devices)
    fam, _ = family_of(hw.accelerator, w.precision)
    mfu = fit.mfu(fam, w.shape.hidden, w.attention_share, devices, micro_batch * w.seq_len, checkpointing)
    compute = micro_batch * w.seq_len * w.flops_per_token / (mfu * hw.peak_tflops * 1e12)
    size = 2.0 * w.trainable_params
    if devices == 1:
        comm_micro = comm_step = 0.0
    elif sharding.zero_stage == 3:
        comm_micro, comm_step = collective_s(size, 3, g, nodes, hw), 0.0
        if w.method == "lora":  # the frozen base is gathered too (forward and backward)
            comm_micro += collective_s(2.0 * w.params, 2, g, nodes, hw)
    elif sharding.zero_stage == 2:
        comm_micro, comm_step = collective_s(size, 1, g, nodes, hw), collective_s(size, 1, g, nodes, hw)
    else:
        comm_micro, comm_step = 0.0, collective_s(size, 2, g, nodes, hw)
    offload = 0.0
    shard = w.trainable_params / devices
    if sharding.offload_optimizer:
        offload += 4.0 * shard / (PCIE_GBPS * 1e9)
        offload += (w.trainable_params / nodes) / (CPU_ADAM_PARAMS_PER_VCPU_S * max(hw.vcpus, 1.0))
    if sharding.offload_param:
        offload += ga * 2 * 2.0 * (w.params / devices) / (PCIE_GBPS * 1e9)
    micro = max(compute, comm_micro)
    exposed = max(0.0, comm_step - compute * 2 / 3)
    total = ga * micro + exposed + offload
    return Step(micro_batch, ga, devices, mfu, compute, comm_micro, comm_step, offload, total,
                ga * micro_batch * w.seq_len * devices)  # fmt: skip


def explain_step(st: Step, w: Workload, hw: Hardware, fit: Fit) -> list[str]:
    return [
        fit.formula(),
        f"MFU {st.mfu:.3f} on {hw.accelerator} peak {hw.peak_tflops:g} TFLOP/s ({w.precision})",
        f"micro-step compute = {st.micro_batch} x {w.seq_len} tokens x {w.flops_per_token:.4g} FLOP/token / "
        f"({st.mfu:.3f} x {hw.peak_tflops:g} TFLOP/s) = {st.compute_s:.3f} s",
        f"ZeRO comm: {st.comm_micro_s:.3f} s per micro-step, {st.comm_step_s:.3f} s per step "
        f"(NVLink/PCIe {hw.intra_gbps:g} GB/s, node network {hw.node_gbps:.1f} GB/s effective)",
        f"offload traffic {st.offload_s:.3f} s per step",
        f"step = {st.grad_accum} x max(compute, comm) + exposed step comm + offload = {st.step_s:.3f} s for "
        f"{st.tokens_per_step:,} tokens -> {st.tokens_per_second_per_device:,.0f} tokens/s per device, "
        f"effective MFU {st.effective_mfu:.3f}",
    ]
