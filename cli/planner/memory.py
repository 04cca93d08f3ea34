"""Memory per device: ZeRO model states as DeepSpeed partitions them, activations, the communication buffers
of the rendered ds_config, and what the CUDA runtime, NCCL and the allocator keep.

Model states, in bytes, follow DeepSpeed's own estimators term for term where it has one:
  ZeRO-2    deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs
            no offload: gpu = 2P + int(18P / gpus)            cpu = 4P * gpus_per_node * buffer
            cpu offload: gpu = 2P                              cpu = P * max(4 * gpus, 16) * buffer
  ZeRO-3    deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs
            largest layer memory LL = 4 * largest_layer_params
            no offload:        gpu = LL + int(18P / gpus)     cpu = (zero_init) LL_params*4*gpus_per_node*buffer
            optimizer offload: gpu = LL + int(2P / gpus)      cpu = P * 16 / nodes * buffer (zero_init)
            + param offload:   gpu = LL                       cpu = P * 18 / nodes * buffer (zero_init)
  ZeRO-1    (DeepSpeed has no ZeRO-1 estimator) stage 1 partitions the optimizer states only: every device
            keeps the full 16-bit gradients, so the ZeRO-2 figure plus the 2P/gpus gradients it partitioned back
            to 2P: no offload gpu = 2P + 2P + int(16P / gpus); cpu offload gpu = 2P + 2P (the fp32 states go to
            the host, the gradients are reduced on the device first); host as ZeRO-2.
  ZeRO-0    (plain data parallel) the ZeRO-2 formula on one GPU: gpu = 2P + 18P = 20P
(P = parameters, gpus = nodes x gpus_per_node, buffer = additional_buffer_factor = 1.5; as in
DeepSpeed 0.19, whose ZeRO-2 estimator counts 2P + 18P/gpus where early releases had 4P + 16P/gpus).

Activations (bytes per device, 16-bit, flash attention so no s^2 score matrix; Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", eq. 2 without the 5as/h term):
  without activation checkpointing: L * 34 * s * b * h
  with full activation checkpointing: L * 2 * s * b * h (layer inputs) + 34 * s * b * h (one layer rebuilt)
  plus the output logits: 6 * s * b * V (16-bit logits and an fp32 copy for the loss).

Communication buffers: those the ds_config that `trainfleet render` writes turns on, read from the one place
that config reads them (infra/deepspeed_settings.py), as DeepSpeed 0.19.8 allocates them per stage:
  ZeRO-0    the engine all-reduces gradients in flattened buckets of up to allreduce_bucket_size elements
            (engine.buffered_allreduce_fallback): 2 bytes x min(bucket, trained params).
  ZeRO-1/2  with overlap_comm, DeepSpeed's documentation (Hugging Face Transformers' DeepSpeed guide, ZeRO-2,
            https://huggingface.co/docs/transformers/deepspeed): "overlap_comm ... uses 4.5x the
            allgather_bucket_size and reduce_bucket_size values. In this example, they're set to 5e8 which means
            it requires 9GB of GPU memory" (5e8 x 2 bytes x 2 x 4.5). Counted: 4.5 x 2 bytes x (reduce +
            allgather bucket). Without overlap_comm: one reduce bucket (stage_1_and_2.setup_buckets; fp32 for
            ZeRO-1's accumulator, 16-bit for ZeRO-2).
  ZeRO-3    the contiguous-gradients reduce bucket (stage3.py: reduce_bucket_size elements, 16-bit) and the
            reduce-scatter staging of the same size, plus the parameter prefetch bucket
            (stage3_prefetch_bucket_size elements, 16-bit); gathered layers are the estimator's LL term.
Reserved (not usable by the job): a CUDA context + NCCL reserve (RUNTIME_RESERVE_BYTES) and allocator
fragmentation (FRAGMENTATION of device memory). A plan must leave at least `headroom` (default 10%) of device
memory available after used + reserved (`trainfleet plan --memory-headroom`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cli.planner.workload import Workload
from infra import deepspeed_settings as ds

GIB = 2**30
ADDITIONAL_BUFFER_FACTOR = 1.5  # DeepSpeed's default
# CUDA context with PyTorch's kernels and cuBLAS/cuDNN workspaces (about 0.5-1 GiB per process on recent GPUs;
# PyTorch's CUDA notes: memory_allocated excludes it) plus NCCL's buffers (NCCL_BUFFSIZE, 4 MiB by default,
# per channel and peer of every communicator DeepSpeed opens; NCCL user guide, Environment Variables).
CUDA_CONTEXT_BYTES = 1 * GIB
NCCL_BYTES = 1 * GIB
RUNTIME_RESERVE_BYTES = CUDA_CONTEXT_BYTES + NCCL_BYTES
FRAGMENTATION = 0.05  # share of device memory PyTorch's caching allocator holds but cannot hand out
DEFAULT_HEADROOM = 0.10  # share of device memory every plan leaves available (--memory-headroom)
MAX_HEADROOM = 0.9
HOST_USABLE = 0.9  # share of node RAM the offloaded states may take
OVERLAP_COMM_FACTOR = 4.5  # DeepSpeed docs: overlap_comm uses 4.5x the allgather and reduce bucket sizes
GRAD_BYTES = 2  # 16-bit gradients and communication


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


def zero1_model_states_mem_needs(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = False,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int]:
    """(cpu bytes per node, gpu bytes per device) for ZeRO-1: stage 1 partitions the optimizer states only, so
    every device keeps the full 16-bit gradients (2P) where ZeRO-2 keeps a 1/gpus share of them (2P/gpus).
    DeepSpeed's ZeRO-2 estimator with the gradients put back whole: no offload 2P + 2P + int(16P/gpus);
    cpu offload 2P + 2P. Host memory as ZeRO-2 (the same fp32 states move to the host)."""
    cpu, _ = estimate_zero2_model_states_mem_needs(
        total_params, num_gpus_per_node, num_nodes, cpu_offload, additional_buffer_factor
    )
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        return cpu, 2 * total_params + 2 * total_params
    return cpu, 2 * total_params + 2 * total_params + int(16 * total_params / total_gpus)


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
    comm_buffer_bytes: int  # per device: the ds_config's bucket buffers
    runtime_reserve_bytes: int  # CUDA context + NCCL
    fragmentation_bytes: int
    host_bytes: int  # per node (CPU RAM)
    device_memory_bytes: int  # the whole device
    host_capacity_bytes: int
    headroom: float = DEFAULT_HEADROOM  # share of device memory that must stay available
    sharding: Sharding | None = None  # what the buffers are for (their rule is worded only when shown)
    trained_params: int = 0

    @property
    def comm_buffer_rule(self) -> str:
        return comm_buffers(self.sharding, self.trained_params)[1] if self.sharding is not None else ""

    @property
    def used_bytes(self) -> int:
        return self.model_states_bytes + self.activation_bytes + self.comm_buffer_bytes

    @property
    def reserved_bytes(self) -> int:
        return self.runtime_reserve_bytes + self.fragmentation_bytes

    @property
    def device_bytes(self) -> int:
        """Used + reserved: what the device must hold."""
        return self.used_bytes + self.reserved_bytes

    @property
    def available_bytes(self) -> int:
        return self.device_memory_bytes - self.device_bytes

    @property
    def device_capacity_bytes(self) -> int:
        """What used + reserved may reach while `headroom` of the device stays available."""
        return self.device_memory_bytes - math.ceil(self.headroom * self.device_memory_bytes)

    @property
    def host_fits(self) -> bool:
        return fits_host(self.host_bytes, self.host_capacity_bytes)

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.device_capacity_bytes and self.host_fits

    def explain(self) -> list[str]:
        g = GIB
        return [
            f"device memory used = model states {self.model_states_bytes / g:.2f} GiB + activations "
            f"{self.activation_bytes / g:.2f} GiB + communication buffers {self.comm_buffer_bytes / g:.2f} GiB "
            f"({self.comm_buffer_rule}) = {self.used_bytes / g:.2f} GiB",
            f"reserved = CUDA context + NCCL {self.runtime_reserve_bytes / g:.2f} GiB + allocator fragmentation "
            f"{FRAGMENTATION:.0%} of {self.device_memory_bytes / g:.2f} GiB = {self.reserved_bytes / g:.2f} GiB",
            f"available = {self.device_memory_bytes / g:.2f} - {self.used_bytes / g:.2f} - "
            f"{self.reserved_bytes / g:.2f} = {self.available_bytes / g:.2f} GiB per device "
            f"({self.available_bytes / self.device_memory_bytes:.1%}; at least {self.headroom:.0%} required)",
            f"host memory = {self.host_bytes / g:.1f} GiB of {self.host_capacity_bytes / g:.1f} GiB usable "
            f"per node (DeepSpeed's CPU estimate, buffer factor {ADDITIONAL_BUFFER_FACTOR})",
        ]


def assumptions(mem: MemoryEstimate) -> list[str]:
    """The memory reserves a plan rests on, printed with every plan."""
    return [
        f"device memory: {mem.headroom:.0%} kept available (--memory-headroom); reserved: CUDA context "
        f"{CUDA_CONTEXT_BYTES / GIB:g} GiB + NCCL {NCCL_BYTES / GIB:g} GiB + {FRAGMENTATION:.0%} allocator "
        f"fragmentation; communication buffers of the rendered ds_config: {mem.comm_buffer_rule}",
    ]


def _e(n: int) -> str:
    """5e8, as a ds_config is usually written."""
    mantissa, exponent = f"{n:.3g}".partition("e+")[::2] if n >= 1e5 else (str(n), "")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def comm_buffer_bytes(sharding: Sharding, trained_params: int) -> int:
    """Bytes per device of the bucket buffers DeepSpeed allocates for the ds_config (comm_buffers' figure)."""
    stage = sharding.zero_stage
    if stage == 0:
        return GRAD_BYTES * min(ds.ALLREDUCE_BUCKET_SIZE, trained_params)
    if stage in (1, 2):
        if ds.OVERLAP_COMM:
            return int(OVERLAP_COMM_FACTOR * GRAD_BYTES * (ds.REDUCE_BUCKET_SIZE + ds.ALLGATHER_BUCKET_SIZE))
        return (4 if stage == 1 else GRAD_BYTES) * ds.REDUCE_BUCKET_SIZE
    return 2 * GRAD_BYTES * ds.REDUCE_BUCKET_SIZE + GRAD_BYTES * ds.STAGE3_PREFETCH_BUCKET_SIZE


def comm_buffers(sharding: Sharding, trained_params: int) -> tuple[int, str]:
    """(bytes per device, the rule in words) of the bucket buffers DeepSpeed allocates for the ds_config."""
    stage = sharding.zero_stage
    if stage == 0:
        rule = f"ZeRO-0 all-reduce bucket 2 B x {_e(min(ds.ALLREDUCE_BUCKET_SIZE, trained_params))}"
    elif stage in (1, 2) and ds.OVERLAP_COMM:
        rule = (f"overlap_comm 4.5 x 2 B x (reduce {_e(ds.REDUCE_BUCKET_SIZE)} + allgather "
                f"{_e(ds.ALLGATHER_BUCKET_SIZE)})")  # fmt: skip
    elif stage in (1, 2):
        rule = f"reduce bucket {4 if stage == 1 else GRAD_BYTES} B x {_e(ds.REDUCE_BUCKET_SIZE)}"
    else:
        rule = (f"ZeRO-3 reduce bucket + reduce-scatter staging 2 x 2 B x {_e(ds.REDUCE_BUCKET_SIZE)} + "
                f"prefetch 2 B x {_e(ds.STAGE3_PREFETCH_BUCKET_SIZE)}")  # fmt: skip
    return comm_buffer_bytes(sharding, trained_params), rule


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
    elif sharding.zero_stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            trained, gpus_per_node, nodes, cpu_offload=sharding.offload_optimizer
        )
    elif sharding.zero_stage == 1:
        cpu, gpu = zero1_model_states_mem_needs(trained, gpus_per_node, nodes, sharding.offload_optimizer)
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


def fits_host(host_bytes: int, host_capacity_bytes: int) -> bool:
    """Whether a node's RAM holds its offloaded states (no capacity known: assumed to)."""
    return host_capacity_bytes <= 0 or host_bytes <= host_capacity_bytes


def host_capacity(host_memory_gib: float) -> int:
    return int(host_memory_gib * GIB * HOST_USABLE)


def states_fit_host(w: Workload, sharding: Sharding, gpus_per_node: int, nodes: int, host_memory_gib: float,
                    states: tuple[int, int] | None = None) -> bool:  # fmt: skip
    """`estimate(...).host_fits` for any micro batch: host memory does not depend on it. `states`: the
    model_states(...) of these arguments, when the caller has them."""
    cpu = (states or model_states(w, sharding, gpus_per_node, nodes))[1]
    return fits_host(cpu, host_capacity(host_memory_gib))


def largest_micro_batch(w: Workload, sharding: Sharding, checkpointing: bool, device_memory_gib: float,
                        gpus_per_node: int, nodes: int, host_memory_gib: float, headroom: float = DEFAULT_HEADROOM,
                        states: tuple[int, int] | None = None) -> int:  # fmt: skip
    """The largest micro batch `estimate(...).fits` allows (0: not even one), from the estimate for one:
    activations are exactly linear in the micro batch and nothing else in the estimate depends on it."""
    one = estimate(w, sharding, 1, checkpointing, device_memory_gib, gpus_per_node, nodes, host_memory_gib, headroom,
                   states)  # fmt: skip
    room = one.device_capacity_bytes - (one.device_bytes - one.activation_bytes)
    return room // one.activation_bytes if one.host_fits and room > 0 else 0


def estimate(
    w: Workload,
    sharding: Sharding,
    micro_batch: int,
    checkpointing: bool,
    device_memory_gib: float,
    gpus_per_node: int,
    nodes: int,
    host_memory_gib: float,
    headroom: float = DEFAULT_HEADROOM,
    states: tuple[int, int] | None = None,  # model_states(w, sharding, gpus_per_node, nodes), when known
) -> MemoryEstimate:
    gpu, cpu = states or model_states(w, sharding, gpus_per_node, nodes)
    comm = comm_buffer_bytes(sharding, w.trainable_params)
    device = int(device_memory_gib * GIB)
    return MemoryEstimate(
        model_states_bytes=gpu,
        activation_bytes=activation_bytes(w, micro_batch, checkpointing),
        comm_buffer_bytes=comm,
        runtime_reserve_bytes=RUNTIME_RESERVE_BYTES,
        fragmentation_bytes=int(device * FRAGMENTATION),
        host_bytes=cpu,
        device_memory_bytes=device,
        host_capacity_bytes=host_capacity(host_memory_gib),
        headroom=headroom,
        sharding=sharding,
        trained_params=w.trainable_params,
    )
