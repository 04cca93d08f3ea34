"""Memory per device: ZeRO model states (exactly DeepSpeed's estimators), activations, overhead.

Model states, in bytes, follow DeepSpeed's own estimators term for term:
  ZeRO-1/2  deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs
            no offload: gpu = 2P + int(18P / gpus)            cpu = 4P * gpus_per_node * buffer
            cpu offload: gpu = 2P                              cpu = P * max(4 * gpus, 16) * buffer
  ZeRO-3    deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs
            largest layer memory LL = 4 * largest_layer_params
            no offload:        gpu = LL + int(18P / gpus)     cpu = (zero_init) LL_params*4*gpus_per_node*buffer
            optimizer offload: gpu = LL + int(2P / gpus)      cpu = P * 16 / nodes * buffer (zero_init)
            + param offload:   gpu = LL                       cpu = P * 18 / nodes * buffer (zero_init)
  ZeRO-0    (plain data parallel) the ZeRO-2 formula on one GPU: gpu = 2P + 18P = 20P
(P = parameters, gpus = nodes x gpus_per_node, buffer = additional_buffer_factor = 1.5; as in
DeepSpeed 0.19, whose ZeRO-2 estimator counts 2P + 18P/gpus where early releases had 4P + 16P/gpus).

Activations (bytes per device, 16-bit, flash attention so no s^2 score matrix; Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", eq. 2 without the 5as/h term):
  without activation checkpointing: L * 34 * s * b * h
  with full activation checkpointing: L * 2 * s * b * h (layer inputs) + 34 * s * b * h (one layer rebuilt)
  plus the output logits: 6 * s * b * V (16-bit logits and an fp32 copy for the loss).
A device also keeps a fixed reserve for the CUDA context, NCCL buffers and allocator fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from cli.planner.workload import Workload

GIB = 2**30
ADDITIONAL_BUFFER_FACTOR = 1.5  # DeepSpeed's default
RESERVE_BYTES = 2 * GIB  # CUDA context + NCCL buffers
FRAGMENTATION = 0.05  # share of device memory the allocator cannot use
HOST_USABLE = 0.9  # share of node RAM the offloaded states may take


def estimate_zero2_model_states_mem_needs(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int]:
    """(cpu bytes per node, gpu bytes per device) for ZeRO-1/2: DeepSpeed's formula, term for term."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2 = 16-bit params; 18 = 16-bit grads + fp32 grads + fp32 params + Adam momentum and variance
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def estimate_zero3_model_states_mem_needs(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int, int]:
    """(cpu bytes per node, gpu bytes per device, largest layer bytes) for ZeRO-3: DeepSpeed's formula."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
                )
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
                )
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


@dataclass(frozen=True, slots=True)
class Sharding:
    zero_stage: int
    offload_optimizer: bool = False
    offload_param: bool = False

    @property
    def label(self) -> str:
        off = [n for n, on in (("optimizer", self.offload_optimizer), ("params", self.offload_param)) if on]
        return f"ZeRO-{self.zero_stage}" + (f" + CPU offload ({', '.join(off)})" if off else "")


# What the optimizer tries (the schema's rules: param offload needs stage 3, no offload on stage 0).
SHARDINGS = (
    Sharding(0),
    Sharding(1),
    Sharding(2),
    Sharding(2, offload_optimizer=True),
    Sharding(3),
    Sharding(3, offload_optimizer=True),
    Sharding(3, offload_optimizer=True, offload_param=True),
)


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    model_states_bytes: int  # per device
    activation_bytes: int  # per device
    reserve_bytes: int
    host_bytes: int  # per node (CPU RAM)
    device_capacity_bytes: int
    host_capacity_bytes: int

    @property
    def device_bytes(self) -> int:
        return self.model_states_bytes + self.activation_bytes + self.reserve_bytes

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.device_capacity_bytes and (
            self.host_capacity_bytes <= 0 or self.host_bytes <= self.host_capacity_bytes
        )

    def explain(self) -> list[str]:
        g = GIB
        return [
            f"device memory = model states {self.model_states_bytes / g:.2f} GiB + activations "
            f"{self.activation_bytes / g:.2f} GiB + reserve {self.reserve_bytes / g:.2f} GiB = "
            f"{self.device_bytes / g:.2f} GiB of {self.device_capacity_bytes / g:.2f} GiB usable per device",
            f"host memory = {self.host_bytes / g:.1f} GiB of {self.host_capacity_bytes / g:.1f} GiB usable "
            f"per node (DeepSpeed's CPU estimate, buffer factor {ADDITIONAL_BUFFER_FACTOR})",
        ]


def model_states(w: Workload, sharding: Sharding, gpus_per_node: int, nodes: int) -> tuple[int, int]:
    """(gpu bytes per device, cpu bytes per node) of parameters, gradients and optimizer states."""
    trained = w.trainable_params
    frozen_gpu = frozen_cpu = 0
    if w.method == "lora":  # frozen 16-bit base weights, no gradients or optimizer state for them
        if sharding.zero_stage == 3:
            frozen_gpu = int(2 * w.params / (gpus_per_node * nodes)) + 2 * w.shape.largest_layer_params
            frozen_cpu = int(2 * w.params / nodes) if sharding.offload_param else 0
            if sharding.offload_param:
                frozen_gpu = 2 * w.shape.largest_layer_params
        else:
            frozen_gpu = 2 * w.params
        largest = 2 * w.lora_rank * w.shape.hidden
    else:
        largest = w.shape.largest_layer_params
    if sharding.zero_stage == 0:
        cpu, gpu = estimate_zero2_model_states_mem_needs(trained, 1, 1, cpu_offload=False)
        cpu = int(trained * 4 * gpus_per_node * ADDITIONAL_BUFFER_FACTOR)
    elif sharding.zero_stage in (1, 2):
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            trained, gpus_per_node, nodes, cpu_offload=sharding.offload_optimizer
        )
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            trained,
            largest,
            gpus_per_node,
            nodes,
            cpu_offload=sharding.offload_optimizer,
            cpu_offload_params=sharding.offload_param,
            zero_init=True,
        )
    return gpu + frozen_gpu, cpu + frozen_cpu


def activation_bytes(w: Workload, micro_batch: int, checkpointing: bool) -> int:
    s, b, h, layers, v = w.seq_len, micro_batch, w.shape.hidden, w.shape.layers, w.shape.vocab
    per_layer = 34 * s * b * h
    body = layers * 2 * s * b * h + per_layer if checkpointing else layers * per_layer
    return int(body + 6 * s * b * v)


def estimate(
    w: Workload,
    sharding: Sharding,
    micro_batch: int,
    checkpointing: bool,
    device_memory_gib: float,
    gpus_per_node: int,
    nodes: int,
    host_memory_gib: float,
) -> MemoryEstimate:
    gpu, cpu = model_states(w, sharding, gpus_per_node, nodes)
    return MemoryEstimate(
        model_states_bytes=gpu,
        activation_bytes=activation_bytes(w, micro_batch, checkpointing),
        reserve_bytes=RESERVE_BYTES,
        host_bytes=cpu,
        device_capacity_bytes=int(device_memory_gib * GIB * (1 - FRAGMENTATION)),
        host_capacity_bytes=int(host_memory_gib * GIB * HOST_USABLE),
    )
