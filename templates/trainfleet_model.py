"""The decoder-only language model the node trains: the Llama architecture, built from a config.

RMSNorm before attention and before the MLP, rotary position embeddings (RoPE), grouped-query attention (fewer
key/value heads than query heads) through PyTorch's scaled_dot_product_attention (flash attention on GPUs that
have it), a SwiGLU MLP, a final RMSNorm and an untied output layer: the same computation as Hugging Face
transformers' LlamaForCausalLM (tests/test_trainfleet_model.py holds the two equal on the same weights).

Written as a list of layers rather than one module, so that DeepSpeed's pipeline can cut it into stages
(`layer_specs`: embedding, the decoder layers, then norm + output), while a run without a pipeline trains the
same layers in order (`CausalLM`). Every layer is initialised from (seed + its index), as PipelineModule's
`seed_layers` does, so the model starts from the same weights in every layout.

Tensor parallelism splits the q/k/v, gate and up projections by output columns and o/down by input rows, so
each attention and MLP block needs one all-reduce; attention reads its local head counts from the split weights.
Two ways, the same split: without a pipeline DeepSpeed's AutoTP does it inside deepspeed.initialize
(`TP_PARTITION`); inside a pipeline, which AutoTP cannot shard (infra/parallelism.py), each decoder layer splits
itself (`TensorParallel`, Megatron-LM's layers: Shoeybi et al. 2019, arXiv 1909.08053, sec. 3, Fig. 3) over the
tensor-parallel group of DeepSpeed's 3-D pipeline grid. Copied to the node beside train.py (it imports torch and
DeepSpeed only).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

INIT_STD = 0.02  # Llama's initializer_range


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int  # the SwiGLU inner width
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        problems = []
        if self.hidden % self.heads:
            problems.append(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        elif (self.hidden // self.heads) % 2:
            problems.append(f"head size {self.hidden // self.heads} is odd (RoPE rotates pairs)")
        if self.heads % self.kv_heads:
            problems.append(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if min(self.vocab_size, self.hidden, self.layers, self.heads, self.kv_heads, self.ffn) < 1:
            problems.append("every size must be at least 1")
        if problems:
            raise ValueError(f"model config: {'; '.join(problems)}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """Trained parameters: embedding, per layer 4 projections' worth of attention (k, v at kv width), the
        three MLP matrices and two norms, then the final norm and the output layer."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * self.ffn + 2 * h
        return 2 * self.vocab_size * h + self.layers * per_layer + h

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 and cast back, as Llama's reference does."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rope_tables(
    seq_len: int, head_dim: int, theta: float, device, dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position x frequency, (seq_len, head_dim), halves repeated (the rotate-half convention)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _linear(inputs: int, outputs: int) -> nn.Linear:
    layer = nn.Linear(inputs, outputs, bias=False)
    nn.init.normal_(layer.weight, std=INIT_STD)
    return layer


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        h, kv = config.hidden, config.kv_heads * config.head_dim
        self.head_dim, self.theta = config.head_dim, config.rope_theta
        self.q_proj, self.k_proj, self.v_proj = _linear(h, h), _linear(h, kv), _linear(h, kv)
        self.o_proj = _linear(h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # Head counts from the weights: under AutoTP each rank holds its own share of the heads.
        heads, kv_heads = (
            self.q_proj.weight.shape[0] // self.head_dim,
            self.k_proj.weight.shape[0] // self.head_dim,
        )
        q = self.q_proj(x).view(b, s, heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_tables(s, self.head_dim, self.theta, x.device, x.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj, self.up_proj = _linear(config.hidden, config.ffn), _linear(config.hidden, config.ffn)
        self.down_proj = _linear(config.ffn, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TensorParallel:
    """One rank's place in a Megatron-style tensor-parallel group: which share of each split matrix it keeps
    (`rank` of `size`), and the group its collectives run over, set once the process groups exist (a
    PipelineModule builds its grid after its layer specs are written, before any forward).

    With `sequence_parallel` (Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2, Fig. 5) the hidden states
    between the blocks are split too, by sequence position: each rank norms and adds its s/size positions, a block
    all-gathers them on entry and reduce-scatters its partial sums on exit (the bytes of one all-reduce). The
    embedding's output is split the same way and gathered again before the (whole) output head."""

    def __init__(self, rank: int, size: int, sequence_parallel: bool = False):
        if not 0 <= rank < size:
            raise ValueError(f"tensor-parallel rank {rank} is not in 0..{size - 1}")
        self.rank, self.size, self.sequence_parallel = rank, size, sequence_parallel
        self.group = None

    def check(self, config: ModelConfig) -> None:
        """Whole heads and whole MLP columns on every rank, or a one-line error."""
        for name, count in (("heads", config.heads), ("kv_heads", config.kv_heads), ("ffn", config.ffn)):
            if count % self.size:
                raise ValueError(f"model config: {name} {count} does not split over tensor parallel {self.size}")

    def keep(self, linear: nn.Linear, dim: int) -> None:
        """Keep this rank's share of `linear`'s weight: output rows (dim 0, column-parallel) or input columns
        (dim 1, row-parallel). DeepSpeed counts a marked parameter once per tensor-parallel rank in the gradient
        norm (runtime/utils.py `is_model_parallel_parameter`); unmarked ones (norms) once per group."""
        share = linear.weight.detach().chunk(self.size, dim=dim)[self.rank].clone()
        linear.weight = nn.Parameter(share)
        linear.weight.tensor_model_parallel = True
        linear.out_features, linear.in_features = share.shape


def as_is(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    return x


def sum_over_group(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """Every rank's tensor added up (an all-reduce of a copy: the input stays as it was)."""
    out = x.contiguous().clone()
    dist.all_reduce(out, group=tp.group)
    return out


def _sequence_first(x: torch.Tensor) -> torch.Tensor:
    """(batch, sequence, ...) as a contiguous (sequence, batch, ...): the collectives split their first dimension."""
    return x.transpose(0, 1).contiguous()


def gather_sequence(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """Every rank's positions, in rank order: (b, s/size, h) -> (b, s, h)."""
    part = _sequence_first(x)
    whole = part.new_empty((part.shape[0] * tp.size, *part.shape[1:]))
    dist.all_gather_into_tensor(whole, part, group=tp.group)
    return whole.transpose(0, 1)


def reduce_scatter_sequence(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """The group's sum, this rank's positions of it: (b, s, h) -> (b, s/size, h)."""
    whole = _sequence_first(x)
    part = whole.new_empty((whole.shape[0] // tp.size, *whole.shape[1:]))
    dist.reduce_scatter_tensor(part, whole, group=tp.group)
    return part.transpose(0, 1)


def own_positions(x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    return x.chunk(tp.size, dim=1)[tp.rank].contiguous()


def _paired(name: str, forward, backward, doc: str) -> type:
    """An autograd Function that applies `forward` to a (batch, sequence, hidden) tensor and `backward` to its
    gradient, each given the TensorParallel: Megatron's two tensor-parallel conjugates and Korthikanti et al.'s four
    sequence-parallel ones."""

    def run_forward(ctx, x: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
        ctx.tp = tp
        return forward(x, tp)

    def run_backward(ctx, grad: torch.Tensor):
        return backward(grad, ctx.tp), None

    methods = {"forward": staticmethod(run_forward), "backward": staticmethod(run_backward), "__doc__": doc}
    return type(name, (torch.autograd.Function,), methods)


_EnterTensorParallel = _paired("_EnterTensorParallel", as_is, sum_over_group,
    "Into a block: its input as is; backward, the gradient summed over the group (each rank's projections saw the "
    "whole input but produced only their columns' share of its gradient; Megatron's f).")  # fmt: skip
_LeaveTensorParallel = _paired("_LeaveTensorParallel", sum_over_group, as_is,
    "Out of a block: the row-parallel projection's partial sums added over the group; backward, its gradient, the "
    "same on every rank, as is (Megatron's g).")  # fmt: skip
_EnterSequenceParallel = _paired("_EnterSequenceParallel", gather_sequence, reduce_scatter_sequence,
    "Into a block: gather the positions; backward, sum the ranks' partial gradients of the whole input and keep "
    "this rank's positions (Korthikanti's g).")  # fmt: skip
_LeaveSequenceParallel = _paired("_LeaveSequenceParallel", reduce_scatter_sequence, gather_sequence,
    "Out of a block: sum the partial outputs and keep this rank's positions; backward, gather the positions' "
    "gradients (Korthikanti's g-bar).")  # fmt: skip
_SplitSequence = _paired("_SplitSequence", own_positions, gather_sequence,
    "Before the first layer: this rank's positions of a tensor every rank holds whole; backward, the whole "
    "gradient from every rank's positions (what the embedding, whole on every rank, needs).")  # fmt: skip
_GatherSequence = _paired("_GatherSequence", gather_sequence, own_positions,
    "After the last layer: the whole sequence for the output head, which every rank computes alike; backward, "
    "this rank's positions of its (identical) gradient.")  # fmt: skip


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, recompute: bool = False, tensor_parallel: TensorParallel | None = None):
        super().__init__()
        self.recompute = recompute
        self.input_layernorm = RMSNorm(config.hidden, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden, config.norm_eps)
        self.mlp = SwiGLU(config)
        # Built whole from the layer's seed, then split: every layout starts from the same weights.
        self.tp = tensor_parallel if tensor_parallel is not None and tensor_parallel.size > 1 else None
        if self.tp is not None:
            self.tp.check(config)
            attn, mlp = self.self_attn, self.mlp
            for column in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                self.tp.keep(column, dim=0)
            for row in (attn.o_proj, mlp.down_proj):
                self.tp.keep(row, dim=1)
            if self.tp.sequence_parallel:
                # a norm sees only its rank's positions, so its weight's gradient is that share of the whole
                # (Megatron all-reduces these too)
                for norm in (self.input_layernorm, self.post_attention_layernorm):
                    norm.weight.register_hook(partial(sum_over_group, tp=self.tp))

    def _block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.tp is None:
            return block(x)
        enter, leave = ((_EnterSequenceParallel, _LeaveSequenceParallel) if self.tp.sequence_parallel
                        else (_EnterTensorParallel, _LeaveTensorParallel))  # fmt: skip
        return leave.apply(block(enter.apply(x, self.tp)), self.tp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._block(self.self_attn, self.input_layernorm(x))
        return x + self._block(self.mlp, self.post_attention_layernorm(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            # Full activation recompute: keep only the layer's input, rebuild the rest in backward.
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def _sequence_split(tensor_parallel: TensorParallel | None) -> TensorParallel | None:
    on = tensor_parallel is not None and tensor_parallel.size > 1 and tensor_parallel.sequence_parallel
    return tensor_parallel if on else None


class Embedding(nn.Module):
    def __init__(self, config: ModelConfig, tensor_parallel: TensorParallel | None = None):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden)
        nn.init.normal_(self.embed_tokens.weight, std=INIT_STD)
        self.sp = _sequence_split(tensor_parallel)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        return x if self.sp is None else _SplitSequence.apply(x, self.sp)


class OutputHead(nn.Module):
    def __init__(self, config: ModelConfig, tensor_parallel: TensorParallel | None = None):
        super().__init__()
        self.norm = RMSNorm(config.hidden, config.norm_eps)
        self.lm_head = _linear(config.hidden, config.vocab_size)
        self.sp = _sequence_split(tensor_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sp is not None:
            x = _GatherSequence.apply(x, self.sp)
        return self.lm_head(self.norm(x))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy, computed in fp32 (as Hugging Face's loss does) whatever the logits' type."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def layer_builders(
    config: ModelConfig, recompute: bool = False, tensor_parallel: TensorParallel | None = None
) -> list[partial]:
    """The model as an ordered list of layer constructors: embedding, decoder layers (each split over
    `tensor_parallel` when given), norm + output (whole on every tensor-parallel rank; under sequence parallelism
    the embedding's output is split by position and gathered again before the head)."""
    return [
        partial(Embedding, config, tensor_parallel),
        *(partial(DecoderLayer, config, recompute, tensor_parallel) for _ in range(config.layers)),
        partial(OutputHead, config, tensor_parallel),
    ]


def layer_specs(
    config: ModelConfig, recompute: bool = False, tensor_parallel: TensorParallel | None = None
) -> list:
    """The same list as DeepSpeed LayerSpecs, for deepspeed.pipe.PipelineModule."""
    from deepspeed.pipe import LayerSpec

    specs = []
    for build in layer_builders(config, recompute, tensor_parallel):
        specs.append(LayerSpec(build.func, *build.args))
    return specs


def seeded(seed: int, index: int) -> None:
    """Seed every generator the way PipelineModule(seed_layers=True, base_seed=seed) does before layer `index`."""
    try:
        from deepspeed.runtime.utils import set_random_seed
    except ImportError:  # the model alone (tests of the architecture) needs no DeepSpeed
        torch.manual_seed(seed + index)
        return
    set_random_seed(seed + index)


class CausalLM(nn.Module):
    """The layers in order, for runs without a pipeline: forward(tokens, labels) -> mean loss."""

    def __init__(self, config: ModelConfig, seed: int, recompute: bool = False):
        super().__init__()
        layers = []
        for index, build in enumerate(layer_builders(config, recompute)):
            seeded(seed, index)
            layers.append(build())
        self.layers = nn.Sequential(*layers)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.layers(tokens)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return lm_loss(self.logits(tokens), labels)


# AutoTP has no preset for this model (deepspeed/runtime/tensor_parallel/config.py `partition_config`): the
# projections into heads and into the MLP's inner width by output columns, the projections back by input rows,
# so each attention and MLP block needs one all-reduce. Embedding, norms and the output layer stay replicated.
TP_PARTITION = {
    "use_default_specs": False,
    "layer_specs": [
        {"patterns": [r".*\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.weight$"], "partition_type": "column"},
        {"patterns": [r".*\.(o_proj|down_proj)\.weight$"], "partition_type": "row"},
    ],
}


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Model FLOPs per trained token as the planner counts them for MFU (cli/planner/workload.py, PaLM's
    appendix B): 6 x every parameter (forward + backward) + 12 x layers x hidden x sequence for attention's score
    and value products, so the node's MFU and the plan's are the same measure."""
    return 6.0 * config.params + 12.0 * config.layers * config.hidden * seq_len
