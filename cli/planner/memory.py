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

Activations (bytes per device): counted tensor by tensor, from the architecture (ModelShape: norm, mlp,
key_value_heads, ffn), as what autograd keeps for the backward of the model the node trains
(templates/trainfleet_model.py: the module cast to 16-bit as DeepSpeed's bf16 does, no autocast; attention through
scaled_dot_product_attention's flash kernel, so no s^2 score matrix; no dropout). tests/test_activation_memory.py
measures every term with torch.autograd.graph.saved_tensors_hooks (each storage once, the weights left out) on
that model's layers and on Hugging Face's GPT2Block (GELU + LayerNorm) and holds this count to it. Per decoder
layer and sequence of s tokens (x b for b sequences), h = hidden, a = heads, k = key/value heads, d = h / a the
head size, f = ffn (the MLP's inner width); 16-bit = 2 bytes, fp32 = 4:
  RMSNorm (llama/mistral presets, bare --params; two per layer): the fp32 copy of its input 4sh (x.float(), saved
            by pow and the multiply), 1/rms 4s, the normalized values cast back to 16-bit 2sh (saved by the weight
            multiply) and its output 2sh (the next projections' input): 8sh + 4s each.
  LayerNorm (mpt-* presets, ad-hoc shapes; two per layer): its 16-bit input 2sh, mean and 1/std 4s each (fp32 on
            GPUs: native_layer_norm's accumulate type), its output 2sh: 4sh + 8s each.
  attention q after RoPE 2sh, k and v 2skd each, the attention output 2sh and the kernel's fp32 logsumexp 4sa:
            flash attention's autograd node keeps exactly query, key, value, output and logsumexp (PyTorch's
            derivatives.yaml entries for _scaled_dot_product_flash_attention, CUDA, and
            _scaled_dot_product_flash_attention_for_cpu: torch/csrc/autograd/generated/Functions.h,
            ScaledDotProductFlashAttentionBackward0 and ...ForCpuBackward0), k and v at k heads with grouped-query
            attention (flash takes enable_gqa without repeating them); the output projection's input is a view of
            that output (counted once): 4sh + 4skd + 4sa.
  SwiGLU MLP (llama/mistral): gate 2sf, silu(gate) 2sf, up 2sf and their product 2sf (down_proj's input): 8sf.
  GELU MLP (mpt-*): the first projection's output 2sf (GELU's input) and GELU's output 2sf: 4sf.
  Not counted: RoPE's cos/sin tables (2 x 2sd per layer, whatever b: 0.3% of a llama-7b layer at b = 1), the
  residual adds (they save nothing), the token ids, and the backward's transient gradients.
So llama-7b (f = 2.6875h, k = a) keeps 16 + 4 + 4 + 21.5 = 45.5 sh per layer (+ 8s + 4sa), mistral-7b and
llama-70b (f = 3.5h, k = a/8) 48.5 sh, mpt-7b (f = 4h, k = a) 8 + 4 + 4 + 16 = 32 sh (+ 16s + 4sa): Korthikanti et
al. 2022's GELU/LayerNorm count, 34 sh without the 5as/h score term, less its two 1-byte dropout masks.
  Output head and loss (once, on the last pipeline stage): the final norm as above, and the loss
            (cross_entropy on logits.float()): its peak is at the start of the backward, when the fp32
            log-softmax cross_entropy saved (4sV), nll_loss's dense fp32 gradient (4sV) and log_softmax's backward
            output (4sV) are alive together: 12sV, V = vocabulary (the forward's own peak, the 16-bit logits 2sV
            and their fp32 copy 4sV beside the log-softmax, is 10sV). A pipeline's last stage also keeps its
            16-bit logits: DeepSpeed's PipelineEngine stores each micro-batch's stage output in
            pipe_buffers['outputs'] and its last stage never frees it (_exec_backward_pass returns first), and
            that stage has two buffers (TrainSchedule.num_pipe_buffers: max(2, ...)), so the previous
            micro-batch's logits stay beside the current one's: + 2 x 2sV when pp > 1 (2sV when m = 1).
  Full activation recompute (torch.utils.checkpoint, use_reentrant=False, around each layer): a layer keeps its
            input, 2sh (checkpoint's _NoopSaveInputs), and the backward rebuilds one layer at a time, holding
            that layer's tensors as above.
  Total: without recompute L x layer + head; with it L x 2sh + one layer + head (the loss's peak comes before
  the first rebuilt layer; the two are added, an upper bound). LoRA plans take the same count, also an upper
  bound (a frozen projection keeps no input for a weight gradient). Activations are 16-bit whatever --precision.

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

Tensor (tp) and pipeline (pp) parallelism, Megatron-style (tp = pp = 1 gives every figure above unchanged):
  Layout    world = nodes x g devices; tp divides g (a tensor-parallel group stays on one node's NVLink/PCIe);
            pp divides nodes (each pipeline stage is nodes/pp whole nodes); the data-parallel group of one
            (tp rank, stage) has dp = world / (tp x pp) members: g/tp on each of the stage's nodes/pp nodes.
            Megatron also needs tp to divide the attention heads (megatron/core/transformer: "num_attention_heads
            must be divisible by tensor_model_parallel_size"), and with grouped-query attention the key/value
            heads as well (each rank's k/v projection holds whole heads).
  Params    one (tp, pp) rank holds the largest stage's parameters / tp (Megatron splits every layer's matrices
            and the vocabulary-parallel embedding over tp; layer norms, replicated, are ignored):
              E = vocab x h (the embedding; the first stage holds it, the last the output layer or its tied copy)
              P_rank = ceil((E + ceil((P - E) x ceil(L/pp) / L)) / tp)
            i.e. ceil(L/pp) layers' share of the non-embedding parameters plus one embedding matrix, the larger
            of the first and last stage taken (an untied output head, counted in P - E, is spread over the layers:
            conservative). LoRA trains ceil(adapters x ceil(L/pp) / (L x tp)) per rank; ZeRO-3's largest layer is
            ceil(largest_layer_params / tp).
  ZeRO      the formulas above with P = P_rank and gpus = dp: each dp group is sized as a job of nodes/pp nodes
            x g/tp devices; a node carries tp such groups (one per tp rank), so host memory per node is tp x the
            group's per-node figure (ZeRO-3 offload: tp x 18 P_rank / (nodes/pp) ~ 18P / nodes, as without tp/pp).
  Activations (templates/trainfleet_model.py: q/k/v/gate/up split by output columns, o/down by input rows,
            norms and the output layer whole), bytes per layer per micro-batch: q, k, v, the attention output, its
            logsumexp and the MLP's inner tensors are the rank's heads and columns: / tp. Without a pipeline
            (AutoTP, no sequence parallelism) the norms' terms (their inputs, fp32 copies and outputs, the split
            projections' input) are replicated on every tp rank. Inside one the launch's own layers run sequence
            parallelism (infra/parallelism.py `sequence_parallel`; Korthikanti et al. 2022, sec. 4.2.2): between
            the blocks each rank holds s/tp positions, so a norm's input, fp32 copy and 1/rms are / tp, while its
            output, all-gathered into the projections' input, is kept whole (Megatron keeps the shard and gathers
            again in backward; this launch does not). The head and loss are not split (the output layer is whole,
            after a gather). With 1F1B (non-interleaved) the first stage holds min(pp, m) micro-batches in flight
            (m = gradient accumulation steps) for its ceil(L/pp) layers (Korthikanti et al. 2022, sec. 4.2.3: "L
            layers' worth" when m >= pp); the last stage holds one, plus the head and loss. Device activations = the
            larger of the two stages. Full checkpointing stores the layer inputs 2sh per layer and in-flight
            micro-batch (/ tp under sequence parallelism) plus one layer rebuilt. The split terms'
            sum is divided by tp rounding up; the result is b x (bytes for b = 1), so activations stay exactly
            linear in b at a fixed in-flight count.
  Not counted: the pipeline's send/receive buffers (2 s b h bytes each, tens of MB) and the tensor-parallel
  all-reduce staging (NCCL's, inside the NCCL reserve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from cli.planner.presets import ModelShape
from cli.planner.workload import Workload
from infra import deepspeed_settings as ds
from infra.parallelism import sequence_parallel

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
    trained_params: int = 0  # per (tp, pp) rank
    tp: int = 1  # tensor-parallel degree (inside a node)
    pp: int = 1  # pipeline stages (across nodes)
    in_flight: int = 1  # micro-batches whose activations the first pipeline stage holds (1F1B: min(pp, m))

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
        layout = []
        if self.tp > 1 or self.pp > 1:
            norms = (f"/ {self.tp} but their gathered outputs (sequence parallel)" if sequence_parallel(self.tp, self.pp)
                     else "whole on every rank (no sequence parallelism)")  # fmt: skip
            layout.append(
                f"per device = one (tp, pp) rank: tensor parallel {self.tp} x pipeline {self.pp} stages; model "
                f"states of the largest stage's parameters / tp ({self.trained_params:,} trained), ZeRO over the "
                f"data-parallel group only; activations per layer: attention and MLP tensors / {self.tp}, norms "
                f"{norms}, for {self.in_flight} micro-batch(es) in flight on the first stage (1F1B)"
            )
        return layout + [
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
    out = [
        f"device memory: {mem.headroom:.0%} kept available (--memory-headroom); reserved: CUDA context "
        f"{CUDA_CONTEXT_BYTES / GIB:g} GiB + NCCL {NCCL_BYTES / GIB:g} GiB + {FRAGMENTATION:.0%} allocator "
        f"fragmentation; communication buffers of the rendered ds_config: {mem.comm_buffer_rule}",
    ]
    if mem.tp > 1 or mem.pp > 1:
        sp = SP_NOTE if sequence_parallel(mem.tp, mem.pp) else ", no sequence parallelism"
        out.append(
            f"tensor parallel {mem.tp} x pipeline {mem.pp}: each rank holds the largest stage's parameters / tp "
            f"(embedding on the first and last stage, layer norms not split){sp}; 1F1B "
            "schedule, first stage holding min(pp, grad accumulation) micro-batches' activations; pipeline "
            "send/receive buffers not counted"
        )
    return out


SP_NOTE = (", sequence parallel between the blocks (norms' inputs / tp, their gathered outputs whole; the same bytes "
           "moved as tensor parallelism's all-reduces)")


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


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def data_parallel_layout(w: Workload, gpus_per_node: int, nodes: int, tp: int = 1, pp: int = 1) -> tuple[int, int]:
    """(data-parallel devices per node, nodes per pipeline stage): the data-parallel group of one (tp rank,
    stage) as a job of its own. ValueError for a layout Megatron/DeepSpeed cannot run."""
    for name, value in (("tp", tp), ("pp", pp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r}: the {name} degree must be a whole number >= 1")
    shape = w.shape
    return _data_parallel_layout(gpus_per_node, nodes, tp, pp, shape.layers, shape.heads, shape.key_value_heads)


@cache  # a search asks for the same few layouts thousands of times
def _data_parallel_layout(gpus_per_node: int, nodes: int, tp: int, pp: int, layers: int, heads: int,
                          key_value_heads: int) -> tuple[int, int]:  # fmt: skip
    if gpus_per_node % tp:
        raise ValueError(f"tp={tp} does not divide the {gpus_per_node} devices per node: tensor parallelism "
                         "stays inside one node (NVLink/PCIe)")  # fmt: skip
    if nodes % pp:
        raise ValueError(f"pp={pp} does not divide the {nodes} nodes: each pipeline stage is whole nodes")
    if pp > layers:
        raise ValueError(f"pp={pp} exceeds the model's {layers} layers: a stage would hold no layer")
    if heads % tp:
        raise ValueError(f"tp={tp} does not divide the model's {heads} attention heads (Megatron splits "
                         "attention by heads)")  # fmt: skip
    if key_value_heads % tp:
        raise ValueError(f"tp={tp} does not divide the model's {key_value_heads} key/value heads "
                         "(grouped-query attention splits them by whole heads too)")  # fmt: skip
    return gpus_per_node // tp, nodes // pp


def stage_layers(w: Workload, pp: int = 1) -> int:
    """Transformer layers of the largest pipeline stage."""
    return _ceil_div(w.shape.layers, pp)


def rank_params(w: Workload, tp: int = 1, pp: int = 1) -> int:
    """Parameters one (tp, pp) rank holds: the largest stage's (its layers' share of the non-embedding
    parameters plus one embedding matrix) / tp. All of them (= w.params) at tp = pp = 1."""
    emb = w.shape.vocab * w.shape.hidden
    stage = emb + _ceil_div((w.params - emb) * stage_layers(w, pp), w.shape.layers)
    return _ceil_div(stage, tp)


def rank_trained_params(w: Workload, tp: int = 1, pp: int = 1) -> int:
    """Trained parameters of one (tp, pp) rank: rank_params for a full fine-tune; LoRA's adapters sit on every
    layer, so the stage's layers' share / tp. w.trainable_params at tp = pp = 1."""
    if w.method == "full":
        return rank_params(w, tp, pp)
    return _ceil_div(w.trainable_params * stage_layers(w, pp), w.shape.layers * tp)


def model_states(w: Workload, sharding: Sharding, gpus_per_node: int, nodes: int, *, tp: int = 1,
                 pp: int = 1) -> tuple[int, int]:  # fmt: skip
    """(gpu bytes per device, cpu bytes per node) of parameters, gradients and optimizer states. With tp/pp:
    one (tp, pp) rank's parameters sharded over its data-parallel group; tp such groups share a node."""
    dp_per_node, dp_nodes = data_parallel_layout(w, gpus_per_node, nodes, tp, pp)
    dp = dp_per_node * dp_nodes
    trained = rank_trained_params(w, tp, pp)
    params = rank_params(w, tp, pp)
    full_largest = _ceil_div(w.shape.largest_layer_params, tp)
    frozen_gpu = frozen_cpu = 0
    if w.method == "lora":  # frozen 16-bit base weights, no gradients or optimizer state for them
        if sharding.zero_stage == 3:
            frozen_gpu = int(2 * params / dp) + 2 * full_largest
            frozen_cpu = tp * int(2 * params / dp_nodes) if sharding.offload_param else 0
            if sharding.offload_param:
                frozen_gpu = 2 * full_largest
        else:
            frozen_gpu = 2 * params
        largest = _ceil_div(2 * w.lora_rank * w.shape.hidden, tp)
    else:
        largest = full_largest
    if sharding.zero_stage == 0:
        cpu, gpu = estimate_zero2_model_states_mem_needs(trained, 1, 1, cpu_offload=False)
        cpu = int(trained * 4 * gpus_per_node * ADDITIONAL_BUFFER_FACTOR)  # every process loads its rank's params
    elif sharding.zero_stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            trained, dp_per_node, dp_nodes, cpu_offload=sharding.offload_optimizer
        )
    elif sharding.zero_stage == 1:
        cpu, gpu = zero1_model_states_mem_needs(trained, dp_per_node, dp_nodes, sharding.offload_optimizer)
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            trained,
            largest,
            dp_per_node,
            dp_nodes,
            cpu_offload=sharding.offload_optimizer,
            cpu_offload_params=sharding.offload_param,
            zero_init=True,
        )
    if sharding.zero_stage:
        cpu *= tp  # the node carries one data-parallel group per tp rank
    return gpu + frozen_gpu, cpu + frozen_cpu


def micro_batches_per_step(w: Workload, micro_batch: int, data_parallel: int) -> int:
    """Gradient accumulation steps m: the global batch over micro batch x sequence x data-parallel size (exact for
    the micro batches a plan may use, which divide each rank's share: cli/planner/batch.py; rounded up for the
    hypothetical ones `largest_micro_batch` steps through)."""
    return max(1, math.ceil(w.global_batch_tokens / (micro_batch * w.seq_len * data_parallel)))


A16, F32 = 2, 4  # bytes of a 16-bit activation (the module cast to bf16/fp16) and of an fp32 one
LOSS_PEAK = 3 * F32  # per logit: fp32 log-softmax (saved), nll_loss's gradient, log_softmax's backward output
PIPELINE_BUFFERS = 2  # micro-batches whose 16-bit logits a pipeline's last stage keeps (TrainSchedule)


def norm_bytes(shape: ModelShape, s: int) -> int:
    """Bytes one norm keeps for backward per sequence (module docstring): RMSNorm its fp32 input copy, 1/rms, the
    16-bit normalized values and its output; LayerNorm its 16-bit input, fp32 mean and 1/std, and its output."""
    h = shape.hidden
    if shape.norm == "rmsnorm":
        return F32 * s * h + F32 * s + A16 * s * h + A16 * s * h
    return A16 * s * h + 2 * F32 * s + A16 * s * h


def layer_split_bytes(shape: ModelShape, s: int) -> int:
    """Bytes per sequence of one layer's tensors that tensor parallelism splits (before / tp): q, k, v, the
    attention output and its logsumexp, and the MLP's inner tensors (SwiGLU: gate, silu(gate), up, product;
    GELU: its input and output)."""
    h, kv_width = shape.hidden, shape.hidden * shape.key_value_heads // shape.heads  # k, v: kv heads x d
    attention = A16 * s * h + 2 * A16 * s * kv_width + A16 * s * h + F32 * s * shape.heads
    mlp = (4 if shape.mlp == "swiglu" else 2) * A16 * s * shape.ffn
    return attention + mlp


def layer_bytes(shape: ModelShape, s: int, tp: int = 1, sequence_parallel: bool = False) -> int:
    """Bytes one decoder layer keeps for backward per sequence on one tp rank: its two norms whole (replicated),
    or under sequence parallelism all but their gathered outputs / tp; the rest / tp."""
    split = _ceil_div(layer_split_bytes(shape, s), tp)
    if not sequence_parallel:
        return 2 * norm_bytes(shape, s) + split
    gathered = A16 * s * shape.hidden  # a norm's output, all-gathered: the projections' saved input
    return 2 * (_ceil_div(norm_bytes(shape, s) - gathered, tp) + gathered) + split


def head_bytes(shape: ModelShape, s: int, kept_logits: int = 0) -> int:
    """Bytes per sequence of the output head and loss on the last stage: the final norm and the loss's peak,
    12 bytes per logit, + 2 bytes per logit for each of the `kept_logits` micro-batches whose 16-bit logits a
    pipeline keeps as stage outputs; not split by tp."""
    return norm_bytes(shape, s) + (LOSS_PEAK + A16 * kept_logits) * s * shape.vocab


def activation_bytes(w: Workload, micro_batch: int, checkpointing: bool, *, tp: int = 1, pp: int = 1,
                     grad_accum: int | None = None) -> int:  # fmt: skip
    """Activation bytes per device (module docstring). `grad_accum` (m) bounds the micro-batches a pipeline
    holds in flight, min(pp, m); None: pp (m >= pp, the 1F1B worst case)."""
    s, b, h, layers = w.seq_len, micro_batch, w.shape.hidden, stage_layers(w, pp)
    in_flight = min(pp, grad_accum) if grad_accum is not None else pp
    sp = sequence_parallel(tp, pp)
    # Per sequence (b = 1), then x b: exactly linear in the micro batch, as largest_micro_batch relies on.
    per_layer = layer_bytes(w.shape, s, tp, sp)
    # what each layer keeps per micro-batch in flight: with recompute its input (this rank's positions under SP)
    stored = (_ceil_div(A16 * s * h, tp) if sp else A16 * s * h) if checkpointing else per_layer
    rebuilt = per_layer if checkpointing else 0  # recompute rebuilds one layer at a time
    first = in_flight * layers * stored + rebuilt
    kept = 0 if pp == 1 else min(PIPELINE_BUFFERS, grad_accum if grad_accum is not None else pp)
    last = layers * stored + rebuilt + head_bytes(w.shape, s, kept)  # the head and loss live on the last stage
    return b * max(first, last)


def fits_host(host_bytes: int, host_capacity_bytes: int) -> bool:
    """Whether a node's RAM holds its offloaded states (no capacity known: assumed to)."""
    return host_capacity_bytes <= 0 or host_bytes <= host_capacity_bytes


def host_capacity(host_memory_gib: float) -> int:
    return int(host_memory_gib * GIB * HOST_USABLE)


def states_fit_host(w: Workload, sharding: Sharding, gpus_per_node: int, nodes: int, host_memory_gib: float,
                    states: tuple[int, int] | None = None, *, tp: int = 1, pp: int = 1) -> bool:  # fmt: skip
    """`estimate(...).host_fits` for any micro batch: host memory does not depend on it. `states`: the
    model_states(...) of these arguments, when the caller has them."""
    cpu = (states or model_states(w, sharding, gpus_per_node, nodes, tp=tp, pp=pp))[1]
    return fits_host(cpu, host_capacity(host_memory_gib))


def largest_micro_batch(w: Workload, sharding: Sharding, checkpointing: bool, device_memory_gib: float,
                        gpus_per_node: int, nodes: int, host_memory_gib: float, headroom: float = DEFAULT_HEADROOM,
                        states: tuple[int, int] | None = None, *, tp: int = 1, pp: int = 1) -> int:  # fmt: skip
    """The largest micro batch b such that `estimate(...).fits` for every micro batch up to b (0: not even one).
    Without a pipeline, from the estimate for one: activations are exactly linear in the micro batch and nothing
    else in the estimate depends on it. With one, the in-flight count min(pp, m(b)) falls as b grows: linear at
    pp in flight (an upper bound); past that, b comes in runs of one accumulation count m each (m only falls as b
    grows), linear again within a run, so each run is settled at once: at most pp runs, not one b at a time."""
    one = estimate(w, sharding, 1, checkpointing, device_memory_gib, gpus_per_node, nodes, host_memory_gib, headroom,
                   states, tp=tp, pp=pp)  # fmt: skip
    rest = one.device_bytes - one.activation_bytes  # what does not depend on the micro batch

    def linear(in_flight: int) -> int:
        per_b = activation_bytes(w, 1, checkpointing, tp=tp, pp=pp, grad_accum=in_flight)
        room = one.device_capacity_bytes - rest
        return room // per_b if room > 0 else 0

    if not one.host_fits:
        return 0
    if pp == 1:
        return linear(1)
    best = linear(pp)  # never more than pp micro-batches in flight: every b up to this fits
    dp = (gpus_per_node // tp) * (nodes // pp)
    b_one = math.ceil(w.global_batch_tokens / (w.seq_len * dp))  # from this b on, m = 1: one in flight

    b = best + 1
    while b < b_one:
        m = micro_batches_per_step(w, b, dp)  # m >= pp: pp in flight, linear(m) = linear(pp) < b, and it stops
        end = _last_with_accumulation(w, m, dp, b, b_one - 1)
        most = linear(m)
        if most < end:  # up to most fit, most + 1 does not (most >= b - 1: fewer in flight never fit fewer)
            best = most
            break
        best, b = end, end + 1
    if best + 1 >= b_one:
        best = max(best, linear(1))
    return best


def _last_with_accumulation(w: Workload, m: int, data_parallel: int, lo: int, hi: int) -> int:
    """The largest micro batch in [lo, hi] with m micro-batches per step, given that `lo` has m: the accumulation
    count never rises with the micro batch, so those with m are one run from `lo` on (binary search)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if micro_batches_per_step(w, mid, data_parallel) == m:
            lo = mid
        else:
            hi = mid - 1
    return lo


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
    states: tuple[int, int] | None = None,  # model_states(w, sharding, gpus_per_node, nodes, tp=, pp=), when known
    *,
    tp: int = 1,
    pp: int = 1,
) -> MemoryEstimate:
    dp_per_node, dp_nodes = data_parallel_layout(w, gpus_per_node, nodes, tp, pp)
    gpu, cpu = states or model_states(w, sharding, gpus_per_node, nodes, tp=tp, pp=pp)
    trained = rank_trained_params(w, tp, pp)
    comm = comm_buffer_bytes(sharding, trained)
    device = int(device_memory_gib * GIB)
    m = micro_batches_per_step(w, micro_batch, dp_per_node * dp_nodes)
    return MemoryEstimate(
        model_states_bytes=gpu,
        activation_bytes=activation_bytes(w, micro_batch, checkpointing, tp=tp, pp=pp, grad_accum=m),
        comm_buffer_bytes=comm,
        runtime_reserve_bytes=RUNTIME_RESERVE_BYTES,
        fragmentation_bytes=int(device * FRAGMENTATION),
        host_bytes=cpu,
        device_memory_bytes=device,
        host_capacity_bytes=host_capacity(host_memory_gib),
        headroom=headroom,
        sharding=sharding,
        trained_params=trained,
        tp=tp,
        pp=pp,
        in_flight=min(pp, m),
    )
